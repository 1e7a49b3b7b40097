"""The leader epoch cache: its file, its rules, and what each log operation and a reopen do
to it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from log_helpers import DIR, T0, make_batch, open_log, reference_epochs, stored_batches, views

from broker.log import KafkaStorageError, LogConfig, PartitionLog
from broker.log.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    decode_epochs,
    derive_epochs,
    encode_epochs,
    truncate_epochs_from_start,
)
from broker.storage import FaultyStorage, FileStorage, MemoryStorage

BATCH = make_batch(2, value_bytes=40)  # two offsets per batch
SIZE = len(BATCH)
CHECKPOINT = f"{DIR}/{LEADER_EPOCH_CHECKPOINT_FILE}"

entries = st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1)), max_size=8).map(
    lambda pairs: list(
        zip(sorted({e for e, _ in pairs}), sorted({o for _, o in pairs}), strict=False)
    )
)


# --- the file ----------------------------------------------------------------------------------


def test_kafka_text_format() -> None:
    assert encode_epochs([(0, 0), (3, 120), (7, 5310)]) == b"0\n3\n0 0\n3 120\n7 5310\n"
    assert encode_epochs([]) == b"0\n0\n"
    assert decode_epochs(b"0\n2\n1 5\n4 9\n") == [(1, 5), (4, 9)]


@given(entries)
def test_round_trip(epochs: list[tuple[int, int]]) -> None:
    assert decode_epochs(encode_epochs(epochs)) == epochs


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"0\n",
        b"1\n0\n",  # unknown version
        b"0\n2\n1 5\n",  # fewer entries than the header says
        b"0\n1\n1 5\n4 9\n",  # more
        b"0\n1\n1 5",  # no final newline: a torn write
        b"0\n2\n4 5\n1 9\n",  # epochs going backwards
        b"0\n2\n1 9\n4 5\n",  # start offsets going backwards
        b"0\n1\n-1 5\n",
        b"0\n1\n1\n",
        b"0\n1\n1 x\n",
        b"\xff\xfe",
    ],
)
def test_malformed_files_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError):  # UnicodeDecodeError is one
        decode_epochs(data)


# --- the rules ---------------------------------------------------------------------------------


def test_derive_opens_an_entry_per_newer_epoch() -> None:
    epochs: list[tuple[int, int]] = []
    assert derive_epochs(epochs, [(-1, 0), (0, 2), (0, 4), (2, 6), (2, 8), (5, 10)])
    assert epochs == [(0, 2), (2, 6), (5, 10)]
    assert not derive_epochs(epochs, [(5, 12), (3, 14), (-1, 16)])  # never backwards
    epochs = [(5, 20)]  # an entry moved up to the log start, and the log is empty there
    assert derive_epochs(epochs, [(6, 20)]) and epochs == [(6, 20)]


def test_truncate_from_start_keeps_the_epoch_of_the_log_start() -> None:
    epochs = [(1, 0), (2, 10), (4, 20)]
    truncate_epochs_from_start(epochs, 5)
    assert epochs == [(1, 5), (2, 10), (4, 20)]
    truncate_epochs_from_start(epochs, 10)
    assert epochs == [(2, 10), (4, 20)]
    truncate_epochs_from_start(epochs, 25)
    assert epochs == [(4, 25)]
    empty: list[tuple[int, int]] = []
    truncate_epochs_from_start(empty, 3)
    assert empty == []


# --- the log -----------------------------------------------------------------------------------


def append(log: PartitionLog, epoch: int, batches: int = 1) -> None:
    for _ in range(batches):
        log.append(views(BATCH), leader_epoch=epoch, now_ms=T0)


def checkpointed(storage: MemoryStorage) -> list[tuple[int, int]]:
    """The file's entries; a log that never had an epoch has no file (it means none)."""
    return decode_epochs(bytes(storage.files.get(CHECKPOINT, b"0\n0\n")))


def test_each_operation_updates_cache_and_file() -> None:
    storage = MemoryStorage()
    log = open_log(storage, LogConfig(segment_bytes=3 * SIZE, retention_ms=-1))
    assert log.latest_epoch is None and checkpointed(storage) == []
    append(log, 0, 2)
    append(log, 3, 3)  # epoch 3 from offset 4
    append(log, 5, 2)  # epoch 5 from offset 10; offsets 0-13, segments 0, 6, 12
    assert log.epoch_entries() == checkpointed(storage) == [(0, 0), (3, 4), (5, 10)]
    assert log.latest_epoch == 5
    assert log.end_offset_for_epoch(3).end_offset == 10
    assert log.end_offset_for_epoch(4) == log.end_offset_for_epoch(3)
    assert log.end_offset_for_epoch(9).end_offset == 14
    log.delete_records_before(6)
    assert checkpointed(storage) == [(3, 6), (5, 10)]
    log.truncate_to(11)  # the batch 10-11 goes whole: epoch 5 is gone
    assert log.log_end_offset == 10 and checkpointed(storage) == [(3, 6)]
    append(log, 6)
    assert log.apply_retention(T0) == [0]  # below the log start offset
    assert log.epoch_entries() == checkpointed(storage) == [(3, 6), (6, 10)]
    log.truncate_fully_and_start_at(100)
    assert log.epoch_entries() == checkpointed(storage) == []
    append(log, 7)
    assert log.epoch_entries() == [(7, 100)]


def test_deleting_records_up_to_the_end_keeps_the_epoch_until_retention() -> None:
    storage = MemoryStorage()
    log = open_log(storage, LogConfig(segment_bytes=2 * SIZE, retention_ms=-1))
    append(log, 1, 3)  # segments 0 (offsets 0-3) and 4 (offsets 4-5)
    log.delete_records_before(6)
    assert log.epoch_entries() == [(1, 6)]
    assert log.end_offset_for_epoch(1).end_offset == 6
    append(log, 2)  # the new epoch starts where the log does
    assert log.epoch_entries() == [(2, 6)]
    log.truncate_to(6)  # nothing visible left: the entry comes from the last batch below
    assert log.epoch_entries() == [(1, 6)]
    log.close()
    log = open_log(storage, LogConfig(segment_bytes=2 * SIZE, retention_ms=-1))
    assert log.epoch_entries() == [(1, 6)]
    log.apply_retention(T0)  # segment 0 goes; segment 4 still holds a batch below 6
    assert log.segment_base_offsets() == [4] and log.epoch_entries() == [(1, 6)]
    log.truncate_to(4)  # now the log holds no batch at all
    assert log.log_start_offset == 4 and log.epoch_entries() == []


def test_a_corrupt_checkpoint_is_rebuilt_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = LogConfig(segment_bytes=3 * SIZE)
    log = PartitionLog.open(FileStorage(), str(tmp_path), config, T0)
    for epoch in (0, 0, 1, 1, 1, 4, 4):
        append(log, epoch)
    expected = log.epoch_entries()
    assert expected == [(0, 0), (1, 4), (4, 10)]
    log.close()
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).write_bytes(b"0\n3\n0 0\n1 4\n")  # torn
    with caplog.at_level(logging.WARNING, logger="broker.log"):
        log = PartitionLog.open(FileStorage(), str(tmp_path), config, T0)
    assert "rebuilding unreadable leader epoch checkpoint" in caplog.text
    assert log.epoch_entries() == expected
    assert decode_epochs((tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).read_bytes()) == expected
    log.close()


def test_a_log_from_before_the_checkpoint_is_rebuilt_from_every_header(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=2 * SIZE)
    log = PartitionLog.open(FileStorage(), str(tmp_path), config, T0)
    for epoch in (0, 2, 2, 3, 3, 3, 7):
        append(log, epoch)
    log.delete_records_before(3)
    expected = log.epoch_entries()
    assert expected == [(2, 3), (3, 6), (7, 12)]
    log.close()
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).unlink()
    log = PartitionLog.open(FileStorage(), str(tmp_path), config, T0)
    assert log.recovery_report.clean_shutdown  # segments trusted; the headers walked all the same
    assert log.epoch_entries() == expected
    log.close()


def test_crash_between_the_data_and_the_checkpoint() -> None:
    """The process dies after writing a batch of a new epoch, before the file says so."""
    memory = MemoryStorage()
    storage = FaultyStorage(memory)
    config = LogConfig(segment_bytes=2 * SIZE)
    log = open_log(storage, config)
    append(log, 0, 2)
    log.flush()
    log.flush_if_due(T0 + config.recovery_point_checkpoint_interval_ms)  # recovery point 4
    storage.fail_append(path_suffix=".tmp", then_crash=True)  # the checkpoint's temporary file
    with pytest.raises(KafkaStorageError):
        append(log, 4)  # offsets 4-5, in a new segment
    log = open_log(storage, config)
    assert log.recovery_report.segments_recovered == [4]
    assert log.log_end_offset == 6
    assert log.epoch_entries() == checkpointed(memory) == [(0, 0), (4, 4)]


@pytest.mark.parametrize("lose_unflushed", [True, False])
def test_crash_loses_the_epochs_of_lost_data(lose_unflushed: bool) -> None:
    memory = MemoryStorage()
    storage = FaultyStorage(memory)
    log = open_log(storage, LogConfig(segment_bytes=3 * SIZE))
    append(log, 0, 2)
    log.flush()
    append(log, 1, 2)
    append(log, 2, 3)  # never flushed
    storage.crash(lose_unflushed=lose_unflushed)
    log = open_log(storage, LogConfig(segment_bytes=3 * SIZE))
    expected = [(0, 0), (1, 4), (2, 8)] if not lose_unflushed else [(0, 0)]
    assert log.epoch_entries() == checkpointed(memory) == expected
    assert expected == reference_epochs(stored_batches(memory), log.log_start_offset)
