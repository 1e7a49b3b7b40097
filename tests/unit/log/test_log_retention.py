"""Retention by time and size, DeleteRecords, truncation, and their survival across reopen."""

from __future__ import annotations

import pytest
from log_helpers import T0, make_batch, open_log, parse, read_all, views

from broker.log import LogConfig, OffsetOutOfRangeError
from broker.storage import FaultyStorage, MemoryStorage

BATCH = make_batch(2, value_bytes=50)
SIZE = len(BATCH)
DAY_MS = 86_400_000


def filled(storage: MemoryStorage | FaultyStorage, config: LogConfig, batches: int) -> None:
    """``batches`` batches, two segments' worth each 3 batches, stamped one hour apart."""
    log = open_log(storage, config)
    for i in range(batches):
        stamps = [T0 + i * 3_600_000, T0 + i * 3_600_000 + 1]
        log.append(
            views(make_batch(2, value_bytes=50, timestamps=stamps)), leader_epoch=0, now_ms=T0
        )
    log.close()


def test_retention_by_time_keeps_the_active_segment_and_survives_reopen() -> None:
    storage = MemoryStorage()
    config = LogConfig(segment_bytes=3 * SIZE, retention_ms=DAY_MS)
    filled(storage, config, 10)  # segments at 0, 6, 12, 18 (the active one)
    log = open_log(storage, config)
    assert log.apply_retention(T0 + 2 * 3_600_000 + 1 + DAY_MS) == []  # seg 0 newest: hour 2
    assert log.apply_retention(T0 + 2 * 3_600_000 + 1 + DAY_MS + 1) == [0]
    assert log.log_start_offset == 6
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5, 100)
    assert log.apply_retention(T0 + 100 * DAY_MS) == [6, 12]
    assert (log.log_start_offset, log.segments) == (18, 1)
    log.close()
    log = open_log(storage, config)
    assert (log.log_start_offset, log.log_end_offset) == (18, 20)
    assert parse(read_all(log))[0].base_offset == 18


def test_retention_forever() -> None:
    storage = MemoryStorage()
    config = LogConfig(segment_bytes=3 * SIZE, retention_ms=-1)
    filled(storage, config, 10)
    assert open_log(storage, config).apply_retention(T0 + 1000 * DAY_MS) == []


def test_retention_by_size() -> None:
    storage = MemoryStorage()
    config = LogConfig(segment_bytes=3 * SIZE, retention_ms=-1, retention_bytes=5 * SIZE)
    filled(storage, config, 10)  # 10 batches in segments of 3, 3, 3, 1
    log = open_log(storage, config)
    # Kafka deletes a segment only while at least retention.bytes remain without it.
    assert log.apply_retention(T0) == [0]
    assert log.size_bytes == 7 * SIZE and log.log_start_offset == 6
    assert log.apply_retention(T0) == []
    log.update_config(LogConfig(segment_bytes=3 * SIZE, retention_ms=-1, retention_bytes=SIZE))
    assert log.apply_retention(T0) == [6, 12]  # never the active segment
    assert log.size_bytes == SIZE


def test_deleted_segments_stay_open_for_the_file_delete_delay() -> None:
    storage = FaultyStorage(MemoryStorage())
    config = LogConfig(segment_bytes=SIZE, retention_bytes=0, file_delete_delay_ms=1000)
    log = open_log(storage, config)
    for _ in range(2):
        log.append(views(BATCH), leader_epoch=0, now_ms=T0)
    in_flight = log.read(0, 100)  # a sendfile that has its descriptor already
    assert log.apply_retention(T0) == [0]
    assert log.read_bytes(in_flight) == parse(log.read_bytes(in_flight))[0].buf.tobytes()
    assert not storage.exists(in_flight.file_path)
    log.apply_retention(T0 + 1000)  # now it is closed
    assert log.segments == 1


def test_delete_records_before() -> None:
    storage = MemoryStorage()
    config = LogConfig(segment_bytes=2 * SIZE)
    log = open_log(storage, config)
    for _ in range(6):
        log.append(views(BATCH), leader_epoch=0, now_ms=T0)
    assert log.delete_records_before(5) == 5
    assert log.delete_records_before(3) == 5  # never moves back
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(13)
    assert log.read(5, 1).first_offset == 4
    assert log.offset_for_timestamp(-2) == (5, -1)
    assert log.offset_for_timestamp(T0) == (5, T0 + 1)  # the first record at or after start
    assert log.segments == 3
    assert log.apply_retention(T0) == [0]  # entirely below offset 5
    log.close()
    log = open_log(storage, config)
    assert (log.log_start_offset, log.segment_base_offsets()) == (5, [4, 8])


def test_truncate_to_drops_whole_batches_and_later_segments() -> None:
    storage = MemoryStorage()
    config = LogConfig(segment_bytes=2 * SIZE, index_interval_bytes=0)
    log = open_log(storage, config)
    for _ in range(6):
        log.append(views(BATCH), leader_epoch=0, now_ms=T0)
    log.truncate_to(12)  # nothing to do
    assert log.log_end_offset == 12
    log.truncate_to(7)  # the batch 6..7 goes whole
    assert (log.log_end_offset, log.segment_base_offsets()) == (6, [0, 4])
    assert log.append(views(BATCH), leader_epoch=2, now_ms=T0).base_offset == 6
    assert [b.partition_leader_epoch for b in parse(read_all(log, 4))] == [0, 2]
    log.truncate_to(4)
    assert (log.log_end_offset, log.segment_base_offsets()) == (4, [0])
    log.close()
    log = open_log(storage, config)
    assert log.log_end_offset == 4 and log.offset_for_timestamp(-3) == (1, T0 + 1)


def test_truncate_below_the_log_start_restarts_the_log() -> None:
    storage = MemoryStorage()
    log = open_log(storage, LogConfig(segment_bytes=2 * SIZE))
    for _ in range(6):
        log.append(views(BATCH), leader_epoch=0, now_ms=T0)
    log.delete_records_before(8)
    log.apply_retention(T0)
    log.truncate_to(3)
    assert (log.log_start_offset, log.log_end_offset, log.segments) == (3, 3, 1)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.append(views(BATCH), leader_epoch=0, now_ms=T0).base_offset == 100
    log.close()
    log = open_log(storage)
    assert (log.log_start_offset, log.log_end_offset) == (100, 102)
