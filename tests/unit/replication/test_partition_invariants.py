"""A partition's replication invariants stop the broker when broken (``broker.fatal``).

They used to be assertions: raised in the replica fetcher or the append path, they were caught
by the "a bug: keep the broker up" handlers there, logged, and the broker went on serving.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from crash_stops import CrashStops

from broker.fatal import InvariantViolation
from broker.log.config import LogConfig
from broker.replica_manager import ReplicaManager
from broker.replication.partition_state import FollowerState, PartitionState
from broker.storage import MemoryStorage
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch


def test_a_leader_high_watermark_above_its_log_end_offset_stops(crash_stops: CrashStops) -> None:
    state = PartitionState.new_leader(1, (1, 2), (1, 2), 0, 0, 10, 4, 0)
    state.high_watermark = 11  # what a bug in the high watermark rule would leave behind
    with pytest.raises(InvariantViolation):
        state.on_leader_append(10, now_ms=0)
    (stop,) = crash_stops.take()
    assert stop.invariant == "partition.high-watermark-within-log"
    assert stop.values == {"high_watermark": 11, "log_end_offset": 10}


def test_a_follower_high_watermark_above_its_log_end_offset_stops(
    crash_stops: CrashStops,
) -> None:
    follower = FollowerState(2, 1, 5, 7, log_end_offset=12, high_watermark=9)
    assert follower.on_fetch_response(20) == 12  # clamped to the log end offset: fine
    follower.log_end_offset = 8  # the log shrank without on_truncate (a bug)
    with pytest.raises(InvariantViolation):
        follower.on_fetch_response(3)
    (stop,) = crash_stops.take()
    assert stop.invariant == "partition.high-watermark-within-log"
    assert stop.values == {"high_watermark": 12, "log_end_offset": 8}


def test_a_pending_isr_without_the_leader_stops(crash_stops: CrashStops) -> None:
    state = PartitionState.new_leader(1, (1, 2, 3), (1, 2, 3), 0, 0, 10, 10, 0)
    state.pending_isr = frozenset({2, 3})
    with pytest.raises(InvariantViolation):
        state.check_invariants()
    (stop,) = crash_stops.take()
    assert stop.invariant == "partition.leader-in-pending-isr-within-replicas"
    assert stop.values == {"leader": 1, "pending_isr": [2, 3], "replicas": (1, 2, 3)}


def test_an_append_at_other_offsets_than_assigned_stops_the_broker(
    crash_stops: CrashStops,
) -> None:
    """Produce answers carry the offsets assigned when the batch was queued; if the log put the
    batch elsewhere, they would be wrong. (The append path's "a bug: the other partitions'
    writes must still happen" handler used to log this assertion and go on.)"""

    async def main() -> None:
        rm = ReplicaManager(MemoryStorage(), Path("/data"), clock_ms=lambda: 1_000)
        part = rm.open_partition("t", 0, None, LogConfig(), max_message_bytes=1 << 20)
        part.next_offset += 5  # a bug in offset assignment
        rm.append_nowait(part, RecordBatch(memoryview(build_batch([SimpleRecord(b"v")]))))
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(main())
    (stop,) = crash_stops.take()
    assert stop.invariant == "replica.append-offsets-as-assigned"
    assert stop.values == {"assigned": (5, 5), "appended": (0, 0)}
