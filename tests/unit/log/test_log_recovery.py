"""Recovery at open: torn and corrupt tails, bad indexes, crashes, leftovers, checkpoints."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from log_helpers import T0, cut_file, flip_byte, make_batch, open_log, read_all, views

from broker.log import KafkaStorageError, LogConfig, PartitionLog
from broker.storage import FaultyStorage, FileStorage, MemoryStorage

BATCH = make_batch(3, value_bytes=40)  # 3 offsets per batch
SIZE = len(BATCH)


def segment_file(directory: Path, base: int, suffix: str = ".log") -> Path:
    return directory / f"{base:020d}{suffix}"


def write_and_kill(directory: Path, batches: int, config: LogConfig | None = None) -> None:
    """Append ``batches`` batches, never flush, and die (the OS keeps the bytes)."""
    storage = FaultyStorage(FileStorage())
    log = PartitionLog.open(storage, str(directory), config or LogConfig(), T0)
    for i in range(batches):
        log.append(views(make_batch(3, value_bytes=40, fill=i)), leader_epoch=0, now_ms=T0 + i)
    storage.crash(lose_unflushed=False)


def write_and_close(directory: Path, batches: int, config: LogConfig) -> PartitionLog:
    log = PartitionLog.open(FileStorage(), str(directory), config, T0)
    for i in range(batches):
        log.append(views(make_batch(3, value_bytes=40, fill=i)), leader_epoch=0, now_ms=T0 + i)
    log.close()
    return log


def reopen(directory: Path, config: LogConfig | None = None) -> PartitionLog:
    return PartitionLog.open(FileStorage(), str(directory), config or LogConfig(), T0 + 10**6)


def test_file_cut_mid_batch(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_and_kill(tmp_path, 10)
    cut_file(str(segment_file(tmp_path, 0)), 9 * SIZE + SIZE // 2)
    with caplog.at_level(logging.WARNING, logger="broker.log"):
        log = reopen(tmp_path)
    assert log.log_end_offset == 27
    (dropped,) = log.recovery_report.dropped
    assert (dropped.first_offset, dropped.last_offset) == (27, 29)
    assert dropped.dropped_bytes == SIZE // 2 and "torn batch" in dropped.reason
    assert not dropped.segment_deleted
    assert f"dir={tmp_path} segment=0 offsets=27..29 bytes={SIZE // 2}" in caplog.text
    assert segment_file(tmp_path, 0).stat().st_size == 9 * SIZE
    log.append(views(BATCH), leader_epoch=1, now_ms=T0)  # and carries on from there
    assert log.read(27, 1 << 20).first_offset == 27


def test_cut_inside_a_header(tmp_path: Path) -> None:
    write_and_kill(tmp_path, 3)
    cut_file(str(segment_file(tmp_path, 0)), 2 * SIZE + 5)
    log = reopen(tmp_path)
    assert log.log_end_offset == 6
    (dropped,) = log.recovery_report.dropped
    assert dropped.last_offset is None and dropped.dropped_bytes == 5


def test_flipped_byte_in_the_last_batch(tmp_path: Path) -> None:
    write_and_kill(tmp_path, 10)
    flip_byte(str(segment_file(tmp_path, 0)), 9 * SIZE + SIZE - 3)  # inside a record value
    log = reopen(tmp_path)
    assert log.log_end_offset == 27
    (dropped,) = log.recovery_report.dropped
    assert "CRC32C" in dropped.reason and dropped.dropped_bytes == SIZE


@pytest.mark.parametrize(
    ("position", "reason"),
    [(16, "bad magic"), (8, "batch length"), (0, "after")],  # magic, length, base offset
)
def test_corrupt_header_in_the_middle(tmp_path: Path, position: int, reason: str) -> None:
    write_and_kill(tmp_path, 10)
    flip_byte(str(segment_file(tmp_path, 0)), 4 * SIZE + position)
    log = reopen(tmp_path)
    assert log.log_end_offset == 12
    (dropped,) = log.recovery_report.dropped
    assert reason in dropped.reason
    assert dropped.first_offset == 12 and dropped.dropped_bytes == 6 * SIZE


def test_corruption_in_an_unflushed_middle_segment_deletes_the_later_ones(tmp_path: Path) -> None:
    write_and_kill(tmp_path, 10, LogConfig(segment_bytes=3 * SIZE))
    assert len(list(tmp_path.glob("*.log"))) == 4  # 0, 9, 18, 27
    flip_byte(str(segment_file(tmp_path, 9)), SIZE + 30)
    log = reopen(tmp_path, LogConfig(segment_bytes=3 * SIZE))
    assert log.log_end_offset == 12 and log.segment_base_offsets() == [0, 9]
    dropped = log.recovery_report.dropped
    assert [(d.segment_base_offset, d.segment_deleted) for d in dropped] == [
        (9, False),
        (18, True),
        (27, True),
    ]
    assert [(d.first_offset, d.last_offset) for d in dropped] == [(12, 17), (18, 26), (27, 29)]
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [
        "00000000000000000000.log",
        "00000000000000000009.log",
    ]
    assert len(read_all(log)) == 4 * SIZE


def test_flushed_segments_are_not_revalidated(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=3 * SIZE, flush_interval_messages=1)
    storage = FaultyStorage(FileStorage())
    log = PartitionLog.open(storage, str(tmp_path), config, T0)
    for _ in range(10):
        log.append(views(BATCH), leader_epoch=0, now_ms=T0)
    log.flush_if_due(T0 + config.recovery_point_checkpoint_interval_ms)  # checkpoint it
    storage.crash(lose_unflushed=False)
    report = reopen(tmp_path, config).recovery_report
    assert not report.clean_shutdown and report.recovery_point == 30
    assert report.segments_recovered == [27] and not report.dropped


def test_torn_write_undone_then_power_cut(tmp_path: Path) -> None:
    for inner in (MemoryStorage(), FileStorage()):
        directory = str(tmp_path / type(inner).__name__)
        storage = FaultyStorage(inner)
        config = LogConfig(flush_interval_messages=1)
        log = PartitionLog.open(storage, directory, config, T0)
        for _ in range(3):
            log.append(views(BATCH), leader_epoch=0, now_ms=T0)
        before = read_all(log)
        storage.fail_append(torn_bytes=SIZE + 10, path_suffix=".log")
        with pytest.raises(KafkaStorageError):
            log.append(views(BATCH, BATCH), leader_epoch=0, now_ms=T0)
        storage.crash()
        log = PartitionLog.open(storage, directory, config, T0)
        assert log.log_end_offset == 9 and read_all(log) == before
        assert log.recovery_report.segments_recovered == [0]


def test_process_dies_mid_write(tmp_path: Path) -> None:
    storage = FaultyStorage(FileStorage())
    config = LogConfig(flush_interval_messages=1)
    log = PartitionLog.open(storage, str(tmp_path), config, T0)
    for _ in range(3):
        log.append(views(BATCH), leader_epoch=0, now_ms=T0)
    storage.fail_append(torn_bytes=SIZE + 10, path_suffix=".log", then_crash=True)
    with pytest.raises(KafkaStorageError):
        log.append(views(BATCH, BATCH), leader_epoch=0, now_ms=T0)
    assert segment_file(tmp_path, 0).stat().st_size == 4 * SIZE + 10  # nobody cleaned up
    log = reopen(tmp_path, config)
    # The whole first batch of the failed call reached the file: it is valid and stays (as in
    # Kafka, an unacknowledged write may survive a crash); the torn second one goes.
    assert log.log_end_offset == 12
    (dropped,) = log.recovery_report.dropped
    assert (dropped.first_offset, dropped.dropped_bytes) == (12, 10)


def test_crash_loses_exactly_what_was_not_flushed() -> None:
    storage = FaultyStorage(MemoryStorage())
    log = open_log(storage, LogConfig(segment_bytes=2 * SIZE))
    for _ in range(5):
        log.append(views(BATCH), leader_epoch=0, now_ms=T0)
    log.flush()
    flushed = read_all(log)
    for _ in range(5):
        log.append(views(BATCH), leader_epoch=0, now_ms=T0)
    storage.crash()
    log = open_log(storage, LogConfig(segment_bytes=2 * SIZE))
    assert log.log_end_offset == 15 and read_all(log) == flushed


def build_indexed_log(directory: Path) -> tuple[PartitionLog, LogConfig]:
    config = LogConfig(segment_bytes=12 * SIZE, index_interval_bytes=SIZE)
    log = PartitionLog.open(FileStorage(), str(directory), config, T0)
    for i in range(30):
        stamps = [T0 + (i * 37) % 50 + j for j in range(3)]  # not monotonic
        batch = make_batch(3, value_bytes=40, timestamps=stamps)
        log.append(views(batch), leader_epoch=0, now_ms=T0)
    return log, config


def lookups(log: PartitionLog) -> list[object]:
    slices = [(s.position, s.size_bytes) for s in (log.read(o, 2 * SIZE) for o in range(90))]
    times = [log.offset_for_timestamp(T0 + t) for t in range(-1, 60)]
    return [slices, times, log.offset_for_timestamp(-3)]


@pytest.mark.parametrize("damage", ["missing", "garbled", "truncated", "beyond the log"])
@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_bad_indexes_are_rebuilt_identically(tmp_path: Path, damage: str, suffix: str) -> None:
    log, config = build_indexed_log(tmp_path)
    expected = lookups(log)
    log.close()
    originals = {p.name: p.read_bytes() for p in tmp_path.glob("*index")}
    for base in (0, 36):  # a trusted segment and the active one
        path = segment_file(tmp_path, base, suffix)
        if damage == "missing":
            path.unlink()
        elif damage == "garbled":
            path.write_bytes(bytes(range(256)) * (len(path.read_bytes()) // 256 + 1))
        elif damage == "truncated":
            path.write_bytes(path.read_bytes()[:-3])
        else:
            entry = b"\x00\x00\x00\x05\x7f\x00\x00\x00" if suffix == ".index" else b"\x7f" * 12
            path.write_bytes(path.read_bytes() + entry)
    log = reopen(tmp_path, config)
    assert lookups(log) == expected
    log.close()
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*index")} == originals


def test_clean_shutdown_skips_recovery_but_checks_the_tail(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=4 * SIZE)
    write_and_close(tmp_path, 10, config)
    report = reopen(tmp_path, config).recovery_report
    assert report.clean_shutdown and report.segments_recovered == []
    assert not (tmp_path / "clean-shutdown").exists()  # until the next close
    write_and_close(tmp_path, 0, config)
    cut_file(str(segment_file(tmp_path, 24)), SIZE + 1)
    log = reopen(tmp_path, config)
    assert log.log_end_offset == 27 and log.recovery_report.segments_recovered == [24]


def test_leftover_files_are_removed(tmp_path: Path) -> None:
    write_and_kill(tmp_path, 2)
    for name in (f"{99:020d}.index", f"{99:020d}.timeindex", "recovery-point.tmp"):
        (tmp_path / name).write_bytes(b"junk")
    (tmp_path / "recovery-point").write_bytes(b"garbage")
    log = reopen(tmp_path)
    assert log.log_end_offset == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{0:020d}.index",
        f"{0:020d}.log",
        f"{0:020d}.timeindex",
        "leader-epoch-checkpoint",
        "recovery-point",
    ]
    assert (tmp_path / "recovery-point").read_text() == "0\n6\n"


def test_log_start_offset_above_what_survived() -> None:
    storage = FaultyStorage(MemoryStorage())
    log = open_log(storage)
    for _ in range(4):
        log.append(views(BATCH), leader_epoch=0, now_ms=T0)
    log.delete_records_before(8)  # checkpointed at once; the data never flushed
    storage.crash()
    log = open_log(storage)
    assert (log.log_start_offset, log.log_end_offset) == (8, 8)
    assert log.append(views(BATCH), leader_epoch=0, now_ms=T0).base_offset == 8


def test_indexes_written_at_roll_are_flushed_by_the_next_flush() -> None:
    # Four batches per segment; the time index gets an entry at the third batch only, so
    # the fourth batch's larger timestamp is indexed only when the segment rolls.
    one = len(make_batch(1))
    config = LogConfig(segment_bytes=4 * one, index_interval_bytes=one * 3 // 2)
    storage = FaultyStorage(MemoryStorage())
    log = open_log(storage, config)
    for i in range(4):
        log.append(views(make_batch(1, base_timestamp=T0 + i)), leader_epoch=0, now_ms=T0)
    log.flush()  # exactly at the segment's end
    log.append(views(make_batch(1, base_timestamp=T0 + 9)), leader_epoch=0, now_ms=T0)  # rolls
    log.flush()
    log.flush_if_due(T0 + config.recovery_point_checkpoint_interval_ms)
    storage.crash()
    log = open_log(storage, config)
    assert log.recovery_report.segments_recovered == [4]  # segment 0 is trusted
    assert log.offset_for_timestamp(T0 + 3) == (3, T0 + 3)


def test_an_index_is_checked_whole_on_first_use_and_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log, config = build_indexed_log(tmp_path)
    expected = lookups(log)
    log.close()
    path = segment_file(tmp_path, 0, ".index")
    original = path.read_bytes()
    path.write_bytes(original[8:16] + original[:8] + original[16:])  # last entry still fine
    log = reopen(tmp_path, config)
    assert log.recovery_report.indexes_rebuilt == []  # the cheap check at open passed
    with caplog.at_level(logging.WARNING, logger="broker.log"):
        assert lookups(log) == expected
    assert "rebuilding indexes" in caplog.text and "increasing" in caplog.text
    assert path.read_bytes() == original
