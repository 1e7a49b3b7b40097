"""``PartitionLog.append_as_follower``: the leader's batches written verbatim, checked first."""

from __future__ import annotations

from pathlib import Path

import pytest
from log_helpers import T0, make_batch, open_log, parse, read_all, views

from broker.log import (
    AppendOffsetError,
    CorruptBatchError,
    InvalidFollowerAppendError,
    KafkaStorageError,
    LeaderEpochOrderError,
    LogConfig,
    PartitionLog,
    StaleLeaderEpochError,
)
from broker.storage import FaultyStorage, FileStorage, MemoryStorage
from kafka_protocol.errors import ErrorCode
from kafka_protocol.record_batch import (
    SimpleRecord,
    build_batch,
    set_base_offset,
    set_partition_leader_epoch,
)

FOLLOWER = "/replica/topic-0"


def leader_batches(epochs: list[int], records: int = 2, value_bytes: int = 30) -> list[bytes]:
    """Batches as a leader stores them: one per entry of ``epochs``, offsets from 0."""
    log = open_log(MemoryStorage())
    for i, epoch in enumerate(epochs):
        stamps = [T0 + 10 * i + r for r in range(records)]
        batch = make_batch(records, value_bytes=value_bytes, timestamps=stamps, fill=i % 256)
        log.append(views(batch), leader_epoch=epoch, now_ms=T0)
    return [bytes(b.buf) for b in parse(read_all(log))]


def follower(
    storage: MemoryStorage | FaultyStorage | None = None, config: LogConfig | None = None
) -> PartitionLog:
    return PartitionLog.open(storage or MemoryStorage(), FOLLOWER, config or LogConfig(), T0)


def log_writes(storage: FaultyStorage) -> int:
    return sum(n for path, n in storage.append_calls.items() if path.endswith(".log"))


def test_batches_are_written_verbatim_and_reported(tmp_path: Path) -> None:
    leader = PartitionLog.open(FileStorage(), str(tmp_path / "leader"), LogConfig(), T0)
    for epoch in (0, 0, 3, 5):
        leader.append(views(make_batch(3), make_batch(1)), leader_epoch=epoch, now_ms=T0)
    fetched = read_all(leader)
    replica = PartitionLog.open(FileStorage(), str(tmp_path / "follower"), LogConfig(), T0)
    result = replica.append_as_follower(memoryview(fetched))
    assert (result.first_offset, result.last_offset, result.log_end_offset) == (0, 15, 16)
    assert result.size_bytes == len(fetched)
    assert [(b.base_offset, b.last_offset) for b in result.batches] == [
        (0, 2),
        (3, 3),
        (4, 6),
        (7, 7),
        (8, 10),
        (11, 11),
        (12, 14),
        (15, 15),
    ]
    assert all(b.producer_id == -1 and b.base_sequence == -1 for b in result.batches)
    assert result.batches[0].max_timestamp == T0 + 2
    name = "00000000000000000000.log"
    assert (tmp_path / "follower" / name).read_bytes() == (tmp_path / "leader" / name).read_bytes()
    assert replica.epoch_entries() == leader.epoch_entries() == [(0, 0), (3, 8), (5, 12)]
    leader.close()
    replica.close()


def test_producer_fields_are_reported() -> None:
    batch = build_batch(
        [SimpleRecord(value=b"v", timestamp=T0 + i) for i in range(3)],
        producer_id=42,
        producer_epoch=7,
        base_sequence=100,
    )
    leader = open_log(MemoryStorage())
    leader.append(views(batch), leader_epoch=1, now_ms=T0)
    (appended,) = follower().append_as_follower(read_all(leader)).batches
    assert appended == (42, 7, 100, 102, 0, 2, T0 + 2, False, None, False)


@pytest.mark.parametrize("cut", [1, 11, 12, 61, -1])
def test_a_trailing_partial_batch_is_ignored(cut: int) -> None:
    first, second = leader_batches([1, 1])
    storage = FaultyStorage(MemoryStorage())
    log = follower(storage)
    result = log.append_as_follower(first + second[:cut])
    assert result.size_bytes == len(first) and result.last_offset == 1 == log.log_end_offset - 1
    only_partial = log.append_as_follower(second[:cut])
    assert only_partial.batches == [] and only_partial.size_bytes == 0
    assert (only_partial.first_offset, only_partial.last_offset) == (2, 1)
    assert log.append_as_follower(second).last_offset == 3
    assert read_all(log) == first + second
    assert log_writes(storage) == 2
    assert log.append_as_follower(b"").batches == []


def corrupt_crc(batch: bytes) -> bytes:
    bad = bytearray(batch)
    bad[-1] ^= 0x01  # inside the last record: covered by the CRC
    return bytes(bad)


def with_header(batch: bytes, *, base_offset: int | None = None, epoch: int | None = None) -> bytes:
    """The batch with its base offset or epoch changed (neither is covered by the CRC)."""
    buf = bytearray(batch)
    if base_offset is not None:
        set_base_offset(buf, base_offset)
    if epoch is not None:
        set_partition_leader_epoch(buf, epoch)
    return bytes(buf)


def bad_magic(batch: bytes) -> bytes:
    buf = bytearray(batch)
    buf[16] = 1
    return bytes(buf)


BATCHES = leader_batches([2, 2, 3, 3])  # offsets 0-1, 2-3, 4-5, 6-7


@pytest.mark.parametrize(
    ("payload", "error", "message"),
    [
        (BATCHES[2] + corrupt_crc(BATCHES[3]), CorruptBatchError, "CRC32C"),
        (BATCHES[2] + bad_magic(BATCHES[3]), CorruptBatchError, "magic"),
        (BATCHES[1], AppendOffsetError, "log end offset 4"),  # below the log end
        (BATCHES[2] + BATCHES[2], AppendOffsetError, "last offset 5"),  # repeated
        (BATCHES[2] + with_header(BATCHES[3], base_offset=5), AppendOffsetError, "last offset 5"),
        (BATCHES[3] + BATCHES[2], AppendOffsetError, "last offset 7"),  # out of order
        (BATCHES[2] + with_header(BATCHES[3], epoch=1), LeaderEpochOrderError, "epoch 1"),
        (with_header(BATCHES[2], epoch=1), LeaderEpochOrderError, "older than epoch 2"),
        (with_header(BATCHES[2], epoch=-1), LeaderEpochOrderError, "epoch -1"),
        (
            BATCHES[2] + with_header(BATCHES[3], base_offset=2**31 + 6),
            AppendOffsetError,
            "too large",
        ),
    ],
    ids=[
        "bad-crc",
        "bad-magic",
        "below-log-end",
        "repeated",
        "overlapping",
        "out-of-order",
        "epoch-back-in-run",
        "epoch-below-cache",
        "no-epoch-after-epochs",
        "gap-overflows-segment",
    ],
)
def test_an_invalid_run_is_refused_whole(
    payload: bytes, error: type[InvalidFollowerAppendError], message: str
) -> None:
    memory = MemoryStorage()
    storage = FaultyStorage(memory)
    log = follower(storage, LogConfig(segment_bytes=len(BATCHES[0]) * 3))
    log.append_as_follower(BATCHES[0] + BATCHES[1])
    files = {p: bytes(d) for p, d in memory.files.items()}
    writes = sum(storage.append_calls.values())
    with pytest.raises(error, match=message) as raised:
        log.append_as_follower(payload)
    assert raised.value.error_code == ErrorCode.CORRUPT_MESSAGE
    assert sum(storage.append_calls.values()) == writes
    assert {p: bytes(d) for p, d in memory.files.items()} == files
    assert (log.log_end_offset, log.epoch_entries()) == (4, [(2, 0)])
    assert not log.offline
    assert log.append_as_follower(BATCHES[2] + BATCHES[3]).log_end_offset == 8  # carries on


def test_gaps_are_kept_and_served_across_a_reopen() -> None:
    batches = leader_batches([0] * 12)  # two offsets each
    kept = [batches[i] for i in (0, 1, 4, 5, 6, 10)]  # compaction removed the others
    storage = MemoryStorage()
    config = LogConfig(segment_bytes=len(batches[0]) * 2 + 10, index_interval_bytes=0)
    log = follower(storage, config)
    log.append_as_follower(b"".join(kept[:2]))
    log.append_as_follower(b"".join(kept[2:]))
    assert log.log_end_offset == 22
    assert log.segment_base_offsets() == [0, 4, 12]  # a new segment starts at the old end

    def check(replica: PartitionLog) -> None:
        assert replica.log_end_offset == 22
        assert read_all(replica) == b"".join(kept)
        for offset, expected in [(3, 2), (4, 8), (7, 8), (14, 20), (21, 20)]:
            assert replica.read(offset, 1).first_offset == expected, offset

    check(log)
    log.close()
    check(follower(storage, config))  # clean
    check(follower(storage, config))  # not clean: recovered


def test_a_large_run_rolls_with_one_write_per_segment() -> None:
    batches = leader_batches([1] * 20 + [2] * 20)
    storage = FaultyStorage(MemoryStorage())
    size = len(batches[0])
    config = LogConfig(segment_bytes=7 * size, index_interval_bytes=size)
    log = follower(storage, config)
    log.append_as_follower(b"".join(batches[:3]))
    writes = log_writes(storage)
    result = log.append_as_follower(b"".join(batches[3:]))
    assert result.log_end_offset == 80 and len(result.batches) == 37
    assert log.segment_base_offsets() == [0, 14, 28, 42, 56, 70]  # 7 batches, 14 offsets each
    assert log_writes(storage) == writes + 6  # the rest of segment 0, then one per segment
    assert read_all(log) == b"".join(batches)
    assert log.epoch_entries() == [(1, 0), (2, 40)]


def test_a_batch_larger_than_a_segment_gets_one_of_its_own() -> None:
    small, _, small2 = leader_batches([0, 0, 0], value_bytes=20)
    huge = leader_batches([0, 0], value_bytes=400)[1]
    log = follower(config=LogConfig(segment_bytes=len(small) * 2))
    log.append_as_follower(small + huge + small2)
    assert log.segment_base_offsets() == [0, 2, 4]
    assert read_all(log) == small + huge + small2


def test_indexes_and_timestamps_after_follower_appends() -> None:
    stamps = [T0 + 1000 * i for i in range(30)]
    leader = open_log(MemoryStorage(), LogConfig(index_interval_bytes=0))
    for i in range(30):
        batch = make_batch(2, timestamps=[stamps[i], stamps[i] + 5])
        leader.append(views(batch), leader_epoch=i // 10, now_ms=T0)
    fetched = read_all(leader)
    storage = FaultyStorage(MemoryStorage())
    config = LogConfig(segment_bytes=len(fetched) // 3 + 1, index_interval_bytes=0)
    log = follower(storage, config)
    log.append_as_follower(fetched)
    log.flush()

    def check(replica: PartitionLog) -> None:
        for offset in range(60):
            assert replica.read(offset, 1).first_offset == offset - offset % 2
            assert replica.read_bytes(replica.read(offset, 1)) == leader.read_bytes(
                leader.read(offset, 1)
            )
        for i in range(30):
            assert replica.offset_for_timestamp(stamps[i] + 1) == (2 * i + 1, stamps[i] + 5)
        assert replica.offset_for_timestamp(-3) == (59, stamps[29] + 5)  # MAX_TIMESTAMP
        assert replica.end_offset_for_epoch(1).end_offset == 40
        assert replica.epoch_entries() == [(0, 0), (1, 20), (2, 40)]

    check(log)
    log.close()
    check(follower(storage, config))
    storage.crash(lose_unflushed=True)
    check(follower(storage, config))


def test_flush_policy_applies() -> None:
    batches = leader_batches([0, 0, 0, 0])
    storage = FaultyStorage(MemoryStorage())
    log = follower(storage, LogConfig(flush_interval_messages=4))
    log.append_as_follower(batches[0])
    assert log.recovery_point == 0
    log.append_as_follower(b"".join(batches[1:3]))
    assert log.recovery_point == 6  # 6 unflushed messages >= flush.messages
    log.append_as_follower(batches[3], now_ms=T0 + 1)
    storage.crash(lose_unflushed=True)
    assert follower(storage).log_end_offset == 6

    storage = FaultyStorage(MemoryStorage())
    log = follower(storage, LogConfig(flush_interval_ms=1000))
    log.append_as_follower(batches[0], now_ms=T0 + 999)
    assert log.recovery_point == 0
    log.append_as_follower(batches[1], now_ms=T0 + 1000)
    assert log.recovery_point == 4


def test_an_io_error_takes_the_log_offline() -> None:
    first, second = leader_batches([0, 0])
    storage = FaultyStorage(MemoryStorage())
    log = follower(storage)
    storage.fail_append(path_suffix=".log", torn_bytes=10)
    with pytest.raises(KafkaStorageError):
        log.append_as_follower(first)
    assert log.offline
    with pytest.raises(KafkaStorageError):
        log.append_as_follower(first)
    log = follower(storage)  # reopening recovers
    assert log.log_end_offset == 0
    assert log.append_as_follower(first + second).log_end_offset == 4


def test_a_leader_append_older_than_the_log_is_refused() -> None:
    storage = FaultyStorage(MemoryStorage())
    log = follower(storage)
    log.append_as_follower(b"".join(leader_batches([3, 4])))
    writes = sum(storage.append_calls.values())
    for stale in (3, -1):
        with pytest.raises(StaleLeaderEpochError) as raised:
            log.append(views(make_batch(1)), leader_epoch=stale, now_ms=T0)
        assert raised.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert sum(storage.append_calls.values()) == writes and log.log_end_offset == 4
    assert log.append(views(make_batch(1)), leader_epoch=4, now_ms=T0).base_offset == 4
    assert log.append(views(make_batch(1)), leader_epoch=6, now_ms=T0).base_offset == 5
    assert log.epoch_entries() == [(3, 0), (4, 2), (6, 5)]


def test_truncating_into_a_gap_ends_the_log_after_the_last_batch_kept() -> None:
    """Offsets of the gap are fetched again: the new leader may have records there."""
    batches = leader_batches([0] * 6)  # two offsets each
    storage = MemoryStorage()
    config = LogConfig(index_interval_bytes=0)
    log = follower(storage, config)
    log.append_as_follower(batches[0] + batches[3] + batches[5])  # 0-1, 6-7, 10-11
    log.truncate_to(9)  # in the gap 8-9: the batch 10-11 goes, the log ends at 8
    assert log.log_end_offset == 8
    log.truncate_to(4)  # in the gap 2-5
    assert log.log_end_offset == 2
    log.append_as_follower(batches[1] + batches[2])
    assert read_all(log) == b"".join(batches[:3])
    log.close()
    assert follower(storage, config).log_end_offset == 6
