"""ReplicaManager: per-pass write coalescing, its limits, failures and idempotent retries."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from broker.deferred import Deferred
from broker.log.config import LogConfig
from broker.replica_manager import AppendOutcome, Partition, ReplicaManager
from broker.storage import FaultyStorage, MemoryStorage
from kafka_protocol.errors import ErrorCode
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch


def _manager(
    storage: MemoryStorage | FaultyStorage, segment_bytes: int
) -> tuple[ReplicaManager, Partition]:
    rm = ReplicaManager(storage, Path("/data"), clock_ms=lambda: 1_000)
    part = rm.open_partition(
        "t", 0, None, LogConfig(segment_bytes=segment_bytes), max_message_bytes=1 << 20
    )
    return rm, part


def _batch(size: int, *, pid: int = -1, seq: int = -1) -> RecordBatch:
    data = build_batch(
        [SimpleRecord(os.urandom(size))], producer_id=pid, producer_epoch=0, base_sequence=seq
    )
    return RecordBatch(memoryview(data))


async def _one_pass() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def _outcome(o: AppendOutcome | Deferred[AppendOutcome]) -> AppendOutcome:
    return o.result() if isinstance(o, Deferred) else o


def test_one_pass_larger_than_a_segment_is_split_not_refused() -> None:
    async def main() -> None:
        rm, part = _manager(MemoryStorage(), segment_bytes=100_000)
        pending = [rm.append_nowait(part, _batch(60_000)) for _ in range(3)]
        await _one_pass()
        assert [_outcome(o).error for o in pending] == [ErrorCode.NONE] * 3
        assert [_outcome(o).base_offset for o in pending] == [0, 1, 2]
        assert part.high_watermark == part.log_end_offset == 3
        assert part.log.segments >= 2

    asyncio.run(main())


def test_a_retry_of_a_queued_batch_waits_for_the_original() -> None:
    async def main() -> None:
        storage = FaultyStorage(MemoryStorage())
        rm, part = _manager(storage, segment_bytes=1 << 20)  # type: ignore[arg-type]
        original = rm.append_nowait(part, _batch(100, pid=7, seq=0))
        retry = rm.append_nowait(part, _batch(100, pid=7, seq=0))
        assert isinstance(retry, Deferred) and not retry.done, "answered before the write"
        storage.fail_append(path_suffix=".log")
        await _one_pass()
        assert _outcome(original).error == _outcome(retry).error != ErrorCode.NONE
        assert part.log_end_offset == 0 and part.next_offset == 0

    asyncio.run(main())


def test_a_retry_of_a_written_batch_gets_the_original_offset() -> None:
    async def main() -> None:
        rm, part = _manager(MemoryStorage(), segment_bytes=1 << 20)
        rm.append_nowait(part, _batch(10))
        first = rm.append_nowait(part, _batch(10, pid=9, seq=0))
        await _one_pass()
        retry = rm.append_nowait(part, _batch(10, pid=9, seq=0))
        assert _outcome(first).base_offset == 1
        assert _outcome(retry) == AppendOutcome(ErrorCode.NONE, 1)
        assert part.log_end_offset == 2
        gap = rm.append_nowait(part, _batch(10, pid=9, seq=5))
        assert _outcome(gap).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    asyncio.run(main())


def test_idle_producers_expire_and_active_ones_stay() -> None:
    """producer.id.expiration.ms: a producer not seen for that long is forgotten (a retry of
    its last batch is then a new producer's first, as in Kafka); one seen since is kept, and
    state rebuilt from the log expires by its batches' timestamps."""

    async def main() -> None:
        now = [1_000]
        storage = MemoryStorage()
        rm = ReplicaManager(
            storage, Path("/data"), clock_ms=lambda: now[0], producer_id_expiration_ms=60_000
        )
        part = rm.open_partition("t", 0, None, LogConfig(), max_message_bytes=1 << 20)
        rm.append_nowait(part, _batch(10, pid=1, seq=0))
        rm.append_nowait(part, _batch(10, pid=2, seq=0))
        await _one_pass()
        now[0] = 40_000
        rm.append_nowait(part, _batch(10, pid=2, seq=1))
        await _one_pass()
        now[0] = 61_000
        rm.expire_producers()
        assert sorted(part.producers.producers) == [2]
        retry = rm.append_nowait(part, _batch(10, pid=1, seq=0))
        await _one_pass()
        assert _outcome(retry) == AppendOutcome(ErrorCode.NONE, 3)
        dup = rm.append_nowait(part, _batch(10, pid=2, seq=1))
        assert _outcome(dup) == AppendOutcome(ErrorCode.NONE, 2)

        # at open, state comes from the log: seen when its batches were stamped
        reopened = ReplicaManager(
            storage, Path("/data"), clock_ms=lambda: now[0], producer_id_expiration_ms=60_000
        )
        again = reopened.open_partition("t", 0, None, LogConfig(), max_message_bytes=1 << 20)
        assert sorted(again.producers.producers) == [1, 2]
        stamp = max(e.last_seen_ms for e in again.producers.producers.values())
        now[0] = stamp + 60_000
        reopened.expire_producers()
        assert again.producers.producers == {}

    asyncio.run(main())


def test_a_directory_left_by_another_topic_id_is_not_served() -> None:
    import uuid

    async def main() -> None:
        storage = MemoryStorage()
        old_id, new_id = uuid.uuid4(), uuid.uuid4()
        rm = ReplicaManager(storage, Path("/data"), clock_ms=lambda: 1_000)
        cfg = LogConfig()
        part = rm.open_partition("t", 0, old_id, cfg, max_message_bytes=1 << 20)
        rm.append_nowait(part, _batch(10))
        await _one_pass()
        rm.close()  # a crash after the delete record, before the directory was removed
        rm = ReplicaManager(storage, Path("/data"), clock_ms=lambda: 1_000)
        same = rm.open_partition("t", 0, old_id, cfg, max_message_bytes=1 << 20)
        assert same.log_end_offset == 1
        rm.close()
        rm = ReplicaManager(storage, Path("/data"), clock_ms=lambda: 1_000)
        recreated = rm.open_partition("t", 0, new_id, cfg, max_message_bytes=1 << 20)
        assert recreated is not None
        assert recreated.log_end_offset == 0, "the old topic's records were adopted"
        # ... and they are set aside, never deleted
        (stray,) = [n for n in storage.listdir("/data") if n.endswith("-stray")]
        assert stray.startswith("t-0.")
        assert any(n.endswith(".log") for n in storage.listdir(f"/data/{stray}"))

    asyncio.run(main())
