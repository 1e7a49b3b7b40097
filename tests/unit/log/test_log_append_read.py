"""PartitionLog append and read: offsets, one write per append, slices, rolls, limits."""

from __future__ import annotations

from pathlib import Path

import pytest
from log_helpers import DIR, T0, make_batch, open_log, parse, patched, read_all, views

from broker.log import (
    KafkaStorageError,
    LogConfig,
    OffsetOutOfRangeError,
    PartitionLog,
    RecordBatchTooLargeError,
)
from broker.storage import FaultyStorage, FileStorage, MemoryStorage


def test_append_assigns_dense_offsets_and_patches_only_offset_and_epoch() -> None:
    log = open_log(MemoryStorage())
    first, second = make_batch(3), make_batch(2, fill=0x62)
    result = log.append(views(first, second), leader_epoch=7, now_ms=T0)
    assert (result.base_offset, result.last_offset) == (0, 4)
    assert result.log_append_time_ms == -1 and result.max_timestamp == T0 + 2
    assert log.log_end_offset == 5
    assert read_all(log) == patched(first, 0, 7) + patched(second, 3, 7)
    third = log.append(views(make_batch(1)), leader_epoch=8, now_ms=T0)
    assert (third.base_offset, third.last_offset) == (5, 5)
    assert parse(read_all(log, 5))[0].partition_leader_epoch == 8


def test_one_storage_append_per_append_call() -> None:
    storage = FaultyStorage(MemoryStorage())
    log = open_log(storage, LogConfig(segment_bytes=4000, index_interval_bytes=0))

    def log_writes() -> int:
        return sum(n for path, n in storage.append_calls.items() if path.endswith(".log"))

    for i in range(40):
        before = log_writes()
        log.append(views(*[make_batch(2) for _ in range(i % 5 + 1)]), leader_epoch=0, now_ms=T0)
        assert log_writes() == before + 1
    assert log.segments > 1  # rolled along the way, still one write per call


def test_writev_goes_to_the_file_without_copying_bodies(tmp_path: Path) -> None:
    storage = FileStorage()
    log = PartitionLog.open(storage, str(tmp_path / "t-0"), LogConfig(), T0)
    batches = [make_batch(1, value_bytes=100, fill=i % 256) for i in range(600)]  # > IOV_MAX/2
    log.append(views(*batches), leader_epoch=1, now_ms=T0)
    expected = b"".join(patched(b, i, 1) for i, b in enumerate(batches))
    slice_ = log.read(0, 1 << 30)
    assert slice_.fileno is not None
    assert log.read_bytes(slice_) == expected
    assert (tmp_path / "t-0" / "00000000000000000000.log").read_bytes() == expected
    log.close()


def test_log_append_time_rewrites_the_batch_and_its_crc() -> None:
    log = open_log(MemoryStorage())
    result = log.append(views(make_batch(2)), leader_epoch=0, now_ms=T0 + 999, log_append_time=True)
    assert result.log_append_time_ms == T0 + 999 == result.max_timestamp
    (batch,) = parse(read_all(log))  # validate() checks the recomputed CRC
    assert batch.is_log_append_time and batch.max_timestamp == T0 + 999
    assert [r.timestamp for r in batch.records()] == [T0 + 999, T0 + 999]


def test_read_returns_the_whole_batch_holding_the_offset() -> None:
    log = open_log(MemoryStorage(), LogConfig(index_interval_bytes=0))
    originals = [make_batch(4, fill=i) for i in range(10)]
    for original in originals:
        log.append(views(original), leader_epoch=0, now_ms=T0)
    for offset in range(40):
        got = log.read(offset, 1)
        assert got.first_offset == offset - offset % 4
        assert log.read_bytes(got) == patched(originals[offset // 4], got.first_offset, 0)


def test_read_respects_max_bytes_whole_batches_and_kip74() -> None:
    log = open_log(MemoryStorage())
    small, big = make_batch(1, value_bytes=10), make_batch(1, value_bytes=5000)
    log.append(views(small, small, big, small), leader_epoch=0, now_ms=T0)
    size = len(small)
    assert log.read(0, 2 * size + 10).size_bytes == 2 * size
    assert log.read(0, 2 * size - 1).size_bytes == size
    whole = log.read(2, 100)  # larger than max_bytes, returned whole (KIP-74)
    assert whole.size_bytes == len(big)
    assert log.read(2, 100, min_one_batch=False).size_bytes == 0
    assert log.read(0, 0, min_one_batch=False).size_bytes == 0


def test_read_stops_before_the_high_watermark() -> None:
    log = open_log(MemoryStorage(), LogConfig(index_interval_bytes=0))
    for _ in range(5):
        log.append(views(make_batch(2)), leader_epoch=0, now_ms=T0)
    for hw in range(11):
        for offset in range(hw + 1):
            got = log.read(offset, 1 << 20, max_offset=hw)
            batches = parse(log.read_bytes(got))
            # every whole batch from the one holding the offset up to the high watermark
            wanted = [i for i in range(offset // 2, 5) if 2 * i + 1 < hw]
            assert [b.base_offset // 2 for b in batches] == wanted
    with pytest.raises(AssertionError, match="high watermark"):
        log.read(0, 100, max_offset=11)


def test_read_at_the_log_end_is_empty_and_beyond_is_out_of_range() -> None:
    log = open_log(MemoryStorage())
    log.append(views(make_batch(3)), leader_epoch=0, now_ms=T0)
    empty = log.read(3, 1000)
    assert (empty.size_bytes, empty.first_offset) == (0, 3)
    with pytest.raises(OffsetOutOfRangeError) as raised:
        log.read(4, 1000)
    assert (raised.value.log_start_offset, raised.value.log_end_offset) == (0, 3)
    log.delete_records_before(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 1000)
    assert log.read(2, 1000).first_offset == 0  # the batch holding the log start offset


def test_a_slice_never_spans_segments() -> None:
    log = open_log(MemoryStorage(), LogConfig(segment_bytes=3 * len(make_batch(1))))
    for _ in range(9):
        log.append(views(make_batch(1)), leader_epoch=0, now_ms=T0)
    assert log.segment_base_offsets() == [0, 3, 6]
    got = log.read(1, 1 << 20)
    assert (got.first_offset, got.segment_base_offset) == (1, 0)
    assert len(parse(log.read_bytes(got))) == 2
    assert log.read(3, 1 << 20).segment_base_offset == 3


def test_roll_by_bytes() -> None:
    batch = make_batch(1, value_bytes=100)
    log = open_log(MemoryStorage(), LogConfig(segment_bytes=len(batch) * 4))
    for _ in range(10):
        log.append(views(batch), leader_epoch=0, now_ms=T0)
    assert log.segment_base_offsets() == [0, 4, 8]
    with pytest.raises(RecordBatchTooLargeError):
        log.append(views(*[batch] * 5), leader_epoch=0, now_ms=T0)
    assert log.max_append_bytes == len(batch) * 4


def test_roll_by_time_of_the_first_append() -> None:
    log = open_log(MemoryStorage(), LogConfig(segment_ms=1000))
    log.append(views(make_batch(1)), leader_epoch=0, now_ms=T0)
    log.append(views(make_batch(1)), leader_epoch=0, now_ms=T0 + 1000)
    assert log.segments == 1
    log.append(views(make_batch(1)), leader_epoch=0, now_ms=T0 + 1001)
    assert log.segment_base_offsets() == [0, 2]
    log.append(views(make_batch(1)), leader_epoch=0, now_ms=T0 + 1500)
    assert log.segments == 2


def test_roll_when_the_index_is_full() -> None:
    config = LogConfig(segment_index_bytes=24, index_interval_bytes=0)  # 3 offset, 2 time entries
    log = open_log(MemoryStorage(), config)
    for _ in range(6):
        log.append(views(make_batch(1)), leader_epoch=0, now_ms=T0)
    assert log.segments > 1
    assert read_all(log) and log.read(5, 100).first_offset == 5


def test_flush_policy_every_message() -> None:
    storage = FaultyStorage(MemoryStorage())
    log = open_log(storage, LogConfig(flush_interval_messages=1))
    log.append(views(make_batch(2)), leader_epoch=0, now_ms=T0)
    assert log.recovery_point == 2 and log.last_flushed_offset == 1
    storage.crash()
    assert open_log(storage).log_end_offset == 2


def test_flush_policy_by_messages_and_time() -> None:
    log = open_log(MemoryStorage(), LogConfig(flush_interval_messages=5, flush_interval_ms=100))
    log.append(views(make_batch(3)), leader_epoch=0, now_ms=T0)
    assert log.recovery_point == 0
    log.append(views(make_batch(2)), leader_epoch=0, now_ms=T0 + 1)
    assert log.recovery_point == 5
    log.append(views(make_batch(1)), leader_epoch=0, now_ms=T0 + 2)
    assert not log.flush_if_due(T0 + 50)
    assert log.flush_if_due(T0 + 101)
    assert log.recovery_point == 6


def test_a_failed_write_takes_the_log_offline_until_reopened() -> None:
    storage = FaultyStorage(MemoryStorage())
    log = open_log(storage)
    log.append(views(make_batch(1)), leader_epoch=0, now_ms=T0)
    storage.fail_append(torn_bytes=20, path_suffix=".log")
    with pytest.raises(KafkaStorageError):
        log.append(views(make_batch(1)), leader_epoch=0, now_ms=T0)
    assert log.offline and log.log_end_offset == 1
    with pytest.raises(KafkaStorageError, match="offline"):
        log.read(0, 100)
    log.close()  # closes files, no clean-shutdown marker
    reopened = open_log(storage)
    assert reopened.log_end_offset == 1 and not reopened.recovery_report.dropped


def test_directory_layout(tmp_path: Path) -> None:
    directory = tmp_path / "events-3"
    batch = make_batch(1)
    log = PartitionLog.open(FileStorage(), str(directory), LogConfig(segment_bytes=len(batch)), T0)
    for _ in range(3):
        log.append(views(batch), leader_epoch=0, now_ms=T0)
    log.close()
    names = sorted(p.name for p in directory.iterdir())
    segments = [f"{o:020d}{s}" for o in (0, 1, 2) for s in (".index", ".log", ".timeindex")]
    assert names == sorted(
        [*segments, "clean-shutdown", "leader-epoch-checkpoint", "recovery-point"]
    )
    assert (directory / "recovery-point").read_text() == "0\n3\n"


def test_delete_removes_the_directory() -> None:
    storage = MemoryStorage()
    log = open_log(storage)
    log.append(views(make_batch(1)), leader_epoch=0, now_ms=T0)
    log.delete()
    assert not storage.exists(DIR)


def test_config_from_topic_configs() -> None:
    config = LogConfig.from_topic_configs(
        {
            "segment.bytes": "1048576",
            "retention.ms": "-1",
            "retention.bytes": "5000000",
            "flush.messages": "1",
            "cleanup.policy": "delete",  # not ours: ignored
        }
    )
    assert config.segment_bytes == 1 << 20 and config.retention_ms == -1
    assert config.retention_bytes == 5_000_000 and config.flush_interval_messages == 1
    assert config.segment_ms == LogConfig().segment_ms
    with pytest.raises(ValueError, match=r"segment\.bytes=10 is outside"):
        LogConfig.from_topic_configs({"segment.bytes": "10"})
    with pytest.raises(ValueError, match=r"flush\.ms='soon' is not an integer"):
        LogConfig.from_topic_configs({"flush.ms": "soon"})
