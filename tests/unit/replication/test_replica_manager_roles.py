"""ReplicaManager with replication roles: a leader and followers in one process, the fetch
exchange done by hand (what the fetcher and the Fetch handler do over the wire)."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

from broker.deferred import Deferred
from broker.log.config import LogConfig
from broker.log.epochs import EpochEndOffset
from broker.replica_manager import AppendOutcome, Partition, Registration, ReplicaManager
from broker.replication.partition_state import FollowerState, PartitionState
from broker.storage import MemoryStorage
from kafka_protocol.errors import ErrorCode
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch

TOPIC_ID = uuid.uuid4()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def _manager(broker_id: int, clock: Clock) -> ReplicaManager:
    return ReplicaManager(
        MemoryStorage(),
        Path(f"/data-{broker_id}"),
        broker_id=broker_id,
        clock_ms=clock,
        monotonic_clock_ms=clock,
        replica_lag_time_max_ms=10_000,
    )


def _open(rm: ReplicaManager, reg: Registration, min_isr: int = 2) -> Partition:
    return rm.open_partition(
        "t",
        0,
        TOPIC_ID,
        LogConfig(),
        max_message_bytes=1 << 20,
        min_insync_replicas=min_isr,
        registration=reg,
    )


def _batch(n: int = 1, *, pid: int = -1, seq: int = -1) -> RecordBatch:
    data = build_batch(
        [SimpleRecord(os.urandom(20)) for _ in range(n)],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
    )
    return RecordBatch(memoryview(data))


def _outcome(o: AppendOutcome | Deferred[AppendOutcome]) -> AppendOutcome | None:
    if isinstance(o, AppendOutcome):
        return o
    return o.result() if o.done else None


async def _one_pass() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def _replicate(leader: ReplicaManager, follower: ReplicaManager, follower_id: int) -> None:
    """One follower fetch: tell the leader what the follower holds, copy what it lacks."""
    lp, fp = leader.get("t", 0), follower.get("t", 0)
    assert lp is not None and fp is not None
    decision = leader.on_follower_fetch(lp, follower_id, fp.log_end_offset, lp.leader_epoch, 1)
    assert decision.error is None, decision
    chunk = lp.log.read(fp.log_end_offset, 1 << 20, max_offset=lp.log_end_offset)
    data = lp.log.read_bytes(chunk) if chunk.size_bytes else b""
    follower.append_as_follower(fp, memoryview(data), lp.high_watermark)


REG = Registration(1, 0, 0, (1, 2, 3), (1, 2, 3))


def test_acks_all_waits_for_every_isr_member_then_answers() -> None:
    async def main() -> None:
        clock = Clock()
        leader, f2, f3 = _manager(1, clock), _manager(2, clock), _manager(3, clock)
        lp = _open(leader, REG)
        _open(f2, REG)
        _open(f3, REG)
        assert lp.is_leader and not f2.get("t", 0).is_leader  # type: ignore[union-attr]
        acks_all = leader.append_nowait(lp, _batch(3), acks=-1)
        acks_one = leader.append_nowait(lp, _batch(2), acks=1)
        await _one_pass()
        assert _outcome(acks_one) == AppendOutcome(ErrorCode.NONE, 3)
        assert _outcome(acks_all) is None, "answered before the followers had the batch"
        assert lp.high_watermark == 0
        _replicate(leader, f2, 2)
        _replicate(leader, f2, 2)  # the second fetch reports the first one's records
        assert lp.high_watermark == 0 and _outcome(acks_all) is None, "f3 is in the ISR"
        _replicate(leader, f3, 3)
        _replicate(leader, f3, 3)
        assert lp.high_watermark == 5
        assert _outcome(acks_all) == AppendOutcome(ErrorCode.NONE, 0)
        # followers learn the high watermark on their next fetch
        _replicate(leader, f2, 2)
        assert f2.get("t", 0).high_watermark == 5  # type: ignore[union-attr]

    asyncio.run(main())


def test_min_insync_replicas_refuses_before_and_after_the_append() -> None:
    async def main() -> None:
        clock = Clock()
        leader = _manager(1, clock)
        proposals: list[frozenset[int]] = []
        leader.alter_partition = lambda part, role, proposed: proposals.append(proposed)
        lp = _open(leader, Registration(1, 0, 0, (1, 2, 3), (1, 2)), min_isr=2)
        waiting = leader.append_nowait(lp, _batch(), acks=-1)
        await _one_pass()
        assert _outcome(waiting) is None
        # follower 2 stops fetching: after the lag time the leader proposes {1}
        clock.now += 10_001
        assert leader.maybe_shrink_isrs() == 1 and proposals == [frozenset({1})]
        leader.on_alter_partition_result(lp, frozenset({1}), ((1,), 0, 1))
        out = _outcome(waiting)
        assert out is not None and out.error is ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        refused = leader.append_nowait(lp, _batch(), acks=-1)
        assert isinstance(refused, AppendOutcome)
        assert refused.error is ErrorCode.NOT_ENOUGH_REPLICAS and "min.insync" in str(
            refused.message
        )
        ok = leader.append_nowait(lp, _batch(), acks=1)
        await _one_pass()
        assert _outcome(ok) == AppendOutcome(ErrorCode.NONE, 1)

    asyncio.run(main())


def test_losing_leadership_answers_waiting_produces_and_refuses_new_ones() -> None:
    async def main() -> None:
        clock = Clock()
        leader = _manager(1, clock)
        lp = _open(leader, REG)
        waiting = leader.append_nowait(lp, _batch(), acks=-1)
        await _one_pass()
        queued = leader.append_nowait(lp, _batch(), acks=1)  # not written yet
        leader.apply_registration(lp, Registration(2, 1, 1, (1, 2, 3), (2, 3)))
        assert isinstance(lp.role, FollowerState) and lp.role.leader_id == 2
        for o in (waiting, queued):
            out = _outcome(o)
            assert out is not None and out.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
        await _one_pass()
        assert lp.log_end_offset == 1, "the queued batch was never written"
        again = leader.append_nowait(lp, _batch(), acks=1)
        assert isinstance(again, AppendOutcome)
        assert again.error is ErrorCode.NOT_LEADER_OR_FOLLOWER

    asyncio.run(main())


def test_a_stale_registration_is_ignored() -> None:
    clock = Clock()
    rm = _manager(1, clock)
    part = _open(rm, Registration(1, 5, 7, (1, 2), (1, 2)))
    rm.apply_registration(part, Registration(2, 4, 9, (1, 2), (2,)))
    assert isinstance(part.role, PartitionState) and part.role.leader_epoch == 5


def test_new_leader_deduplicates_a_retry_of_a_replicated_batch() -> None:
    """Idempotence survives failover: the follower learned the producer from the batch it
    replicated, so the producer's retry to the new leader is answered with the original
    offsets instead of being written twice."""

    async def main() -> None:
        clock = Clock()
        leader, follower = _manager(1, clock), _manager(2, clock)
        reg = Registration(1, 0, 0, (1, 2), (1, 2))
        lp, fp = _open(leader, reg, min_isr=1), _open(follower, reg, min_isr=1)
        first = _batch(2, pid=42, seq=0)
        leader.append_nowait(lp, first, acks=-1)
        await _one_pass()
        _replicate(leader, follower, 2)
        follower.apply_registration(fp, Registration(2, 1, 1, (1, 2), (2,)))
        assert fp.is_leader
        retry = follower.append_nowait(fp, _batch(2, pid=42, seq=0), acks=-1)
        await _one_pass()
        assert _outcome(retry) == AppendOutcome(ErrorCode.NONE, 0)
        assert fp.log_end_offset == 2
        later = follower.append_nowait(fp, _batch(1, pid=42, seq=2), acks=-1)
        await _one_pass()
        assert _outcome(later) == AppendOutcome(ErrorCode.NONE, 2)

    asyncio.run(main())


def test_follower_truncates_a_divergent_tail_by_leader_epoch() -> None:
    """KIP-101: the old leader wrote records the new leader never had; after the change it
    truncates them by asking where its epoch ends in the new leader's log."""

    async def main() -> None:
        clock = Clock()
        a, b = _manager(1, clock), _manager(2, clock)
        reg = Registration(1, 0, 0, (1, 2), (1, 2))
        ap, bp = _open(a, reg, min_isr=1), _open(b, reg, min_isr=1)
        a.append_nowait(ap, _batch(2), acks=1)
        await _one_pass()
        _replicate(a, b, 2)
        a.append_nowait(ap, _batch(3), acks=1)  # never replicated
        await _one_pass()
        assert (ap.log_end_offset, bp.log_end_offset) == (5, 2)
        new = Registration(2, 1, 1, (1, 2), (2,))
        b.apply_registration(bp, new)
        b.append_nowait(bp, _batch(1), acks=1)
        await _one_pass()
        a.apply_registration(ap, new)
        role = ap.role
        assert isinstance(role, FollowerState)
        answer = bp.log.end_offset_for_epoch(ap.log.latest_epoch)
        assert answer == EpochEndOffset(0, 2)
        truncation = role.truncation_offset(answer, ap.log.epoch_entries())
        a.truncate(ap, truncation)
        assert ap.log_end_offset == 2
        _replicate(b, a, 1)
        assert ap.log_end_offset == 3
        assert ap.log.epoch_entries() == bp.log.epoch_entries() == [(0, 0), (1, 2)]

    asyncio.run(main())


def test_high_watermark_survives_a_restart_through_its_checkpoint() -> None:
    async def main() -> None:
        clock = Clock()
        storage = MemoryStorage()
        rm = ReplicaManager(storage, Path("/d"), broker_id=1, clock_ms=clock)
        part = rm.open_partition(
            "t",
            0,
            TOPIC_ID,
            LogConfig(),
            max_message_bytes=1 << 20,
            registration=Registration(1, 0, 0, (1, 2), (1, 2)),
        )
        rm.append_nowait(part, _batch(4), acks=1)
        await _one_pass()
        rm.on_follower_fetch(part, 2, 3, 0, 1)
        assert part.high_watermark == 3
        rm.close()
        again = ReplicaManager(storage, Path("/d"), broker_id=1, clock_ms=clock)
        follower = again.open_partition(
            "t",
            0,
            TOPIC_ID,
            LogConfig(),
            max_message_bytes=1 << 20,
            registration=Registration(2, 1, 1, (1, 2), (2,)),
        )
        assert (follower.log_end_offset, follower.high_watermark) == (4, 3)

    asyncio.run(main())


def test_a_lapsed_session_takes_no_write_and_acknowledges_none() -> None:
    """A leader whose heartbeats go unanswered for the session timeout may have been fenced:
    it refuses new writes, and an acks=all write its followers complete afterwards is answered
    NOT_LEADER_OR_FOLLOWER, not acknowledged (the client retries at the new leader)."""

    async def main() -> None:
        clock = Clock()
        leader, f2, f3 = _manager(1, clock), _manager(2, clock), _manager(3, clock)
        lapsed = [False]
        leader.session_lapsed = lambda: lapsed[0]
        lp = _open(leader, REG)
        _open(f2, REG)
        _open(f3, REG)
        waiting = leader.append_nowait(lp, _batch(2), acks=-1)
        await _one_pass()
        lapsed[0] = True
        for acks in (-1, 1, 0):
            refused = _outcome(leader.append_nowait(lp, _batch(), acks=acks))
            assert refused is not None and refused.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
        for follower, replica_id in ((f2, 2), (f3, 3), (f2, 2), (f3, 3)):
            _replicate(leader, follower, replica_id)
        assert lp.high_watermark == 2, "the followers have the batch: it is committed"
        answer = _outcome(waiting)
        assert answer is not None and answer.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert lp.log_end_offset == 2, "nothing appended while lapsed"
        lapsed[0] = False  # a heartbeat was answered again
        again = leader.append_nowait(lp, _batch(), acks=1)
        await _one_pass()
        assert _outcome(again) == AppendOutcome(ErrorCode.NONE, 2)

    asyncio.run(main())
