"""The replica manager runs the log cleaner on compacted partitions, below the high watermark,
with the heavy part in a worker thread."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.log.config import LogConfig
from broker.replica_manager import Registration, ReplicaManager
from broker.storage import MemoryStorage
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch, iter_batches


def _batch(key: bytes, value: bytes) -> RecordBatch:
    return RecordBatch(memoryview(build_batch([SimpleRecord(value, key)], now_ms=1_000)))


def _latest(rm: ReplicaManager) -> dict[bytes, bytes]:
    part = rm.get("t", 0)
    assert part is not None
    seen: dict[bytes, bytes] = {}
    offset = part.log_start_offset
    while offset < part.log_end_offset:  # a read stops at the end of a segment
        chunk = part.log.read(offset, 1 << 30, max_offset=part.log_end_offset)
        for batch in iter_batches(part.log.read_bytes(chunk)):
            for record in batch.iter_records():
                assert record.key is not None and record.value is not None
                seen[record.key] = record.value
            offset = batch.next_offset
    return seen


def test_compacted_partitions_keep_the_latest_value_per_key() -> None:
    async def main() -> None:
        rm = ReplicaManager(MemoryStorage(), Path("/d"), broker_id=1, clock_ms=lambda: 10_000)
        config = LogConfig(segment_bytes=2_000, cleanup_policy=("compact",))
        part = rm.open_partition(
            "t",
            0,
            None,
            config,
            max_message_bytes=1 << 20,
            registration=Registration.sole_leader(1),
        )
        expected: dict[bytes, bytes] = {}
        for i in range(300):
            key, value = b"k%d" % (i % 10), b"v%d" % i
            rm.append_nowait(part, _batch(key, value))
            expected[key] = value
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        size_before = part.log.size_bytes
        assert await rm.clean_logs() == 1
        assert part.log.size_bytes < size_before / 3, (size_before, part.log.size_bytes)
        assert _latest(rm) == expected
        assert await rm.clean_logs() == 0, "nothing new to clean"
        rm.close()

    asyncio.run(main())


def test_a_partition_deleted_while_its_cleaning_builds_is_removed_after_the_build() -> None:
    async def main() -> None:
        storage = MemoryStorage()
        rm = ReplicaManager(storage, Path("/d"), broker_id=1, clock_ms=lambda: 10_000)
        config = LogConfig(segment_bytes=2_000, cleanup_policy=("compact",))
        part = rm.open_partition(
            "t",
            0,
            None,
            config,
            max_message_bytes=1 << 20,
            registration=Registration.sole_leader(1),
        )
        for i in range(300):
            rm.append_nowait(part, _batch(b"k%d" % (i % 10), b"v"))
            await asyncio.sleep(0)
        cleaner = asyncio.ensure_future(rm.clean_logs())
        await asyncio.sleep(0)  # the build is in its thread
        rm.remove_partition("t", 0)
        assert await cleaner == 0
        await asyncio.sleep(0.05)
        assert not any(p.startswith("/d/t-0/") for p in storage.files), sorted(storage.files)[:5]

    asyncio.run(main())
