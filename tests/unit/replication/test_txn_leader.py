"""The leader's side of transactions in the ReplicaManager: transactional appends, markers
(acks=all, fencing by producer and coordinator epoch), the last stable offset waiting for the
marker to be replicated, followers building the same state, expiration sparing producers with
an open transaction.  A leader and a follower in one process, the fetch exchange done by hand."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from broker.deferred import Deferred
from broker.log.config import LogConfig
from broker.log.fetched_batches import AppendedBatch
from broker.log.txn_index import AbortedTxn
from broker.partition import learn_producer
from broker.producer_state import ProducerStateManager
from broker.replica_manager import AppendOutcome, Partition, Registration, ReplicaManager
from broker.storage import MemoryStorage
from kafka_protocol.errors import ErrorCode
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch

TOPIC_ID = uuid.uuid4()
REG = Registration(1, 0, 0, (1, 2), (1, 2))
PID, OTHER = 100, 200
T = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def _manager(broker_id: int, clock: Clock, **kwargs: int) -> ReplicaManager:
    return ReplicaManager(
        MemoryStorage(),
        Path(f"/data-{broker_id}"),
        broker_id=broker_id,
        clock_ms=clock,
        monotonic_clock_ms=clock,
        **kwargs,
    )


def _open(rm: ReplicaManager, reg: Registration = REG) -> Partition:
    part = rm.open_partition(
        "t", 0, TOPIC_ID, LogConfig(), max_message_bytes=1 << 20, registration=reg
    )
    assert part is not None
    return part


def _txn_batch(n: int = 1, *, pid: int = PID, epoch: int = 0, seq: int = -1) -> RecordBatch:
    data = build_batch(
        [SimpleRecord(b"x") for _ in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )
    return RecordBatch(memoryview(data))


def _idempotent(pid: int, seq: int, epoch: int = 0) -> RecordBatch:
    data = build_batch(
        [SimpleRecord(b"i")], producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )
    return RecordBatch(memoryview(data))


def _outcome(o: AppendOutcome | Deferred[AppendOutcome]) -> AppendOutcome | None:
    if isinstance(o, AppendOutcome):
        return o
    return o.result() if o.done else None


async def _one_pass() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def _replicate(leader: ReplicaManager, follower: ReplicaManager) -> None:
    lp, fp = leader.get("t", 0), follower.get("t", 0)
    assert lp is not None and fp is not None
    decision = leader.on_follower_fetch(lp, 2, fp.log_end_offset, lp.leader_epoch, 1)
    assert decision.error is None, decision
    chunk = lp.log.read(fp.log_end_offset, 1 << 20, max_offset=lp.log_end_offset)
    data = lp.log.read_bytes(chunk) if chunk.size_bytes else b""
    follower.append_as_follower(fp, memoryview(data), lp.high_watermark)


def test_lso_waits_for_the_marker_to_be_replicated_and_followers_agree() -> None:
    async def main() -> None:
        clock = Clock()
        leader, follower = _manager(1, clock), _manager(2, clock)
        lp, fp = _open(leader), _open(follower)
        leader.append_nowait(lp, _txn_batch(2, seq=0), acks=1)  # 0-1
        leader.append_nowait(lp, _txn_batch(1, pid=OTHER), acks=1)  # 2 (no sequence)
        await _one_pass()
        assert leader.has_ongoing_transaction(lp, PID, 0)
        assert not leader.has_ongoing_transaction(lp, PID, 1)  # another epoch
        _replicate(leader, follower)
        _replicate(leader, follower)
        assert (lp.high_watermark, lp.last_stable_offset) == (3, 0)
        aborted = leader.append_marker(lp, PID, 0, coordinator_epoch=4, commit=False)  # 3
        committed = leader.append_marker(lp, OTHER, 0, coordinator_epoch=4, commit=True)  # 4
        await _one_pass()
        assert _outcome(aborted) is None, "answered before the ISR had the marker"
        assert lp.last_stable_offset == 0, "the marker is not below the high watermark yet"
        _replicate(leader, follower)
        _replicate(leader, follower)
        assert _outcome(aborted) == AppendOutcome(ErrorCode.NONE, 3)
        assert _outcome(committed) == AppendOutcome(ErrorCode.NONE, 4)
        assert (lp.high_watermark, lp.last_stable_offset) == (5, 5)
        entry = AbortedTxn(PID, 0, 3, 2)  # OTHER's transaction was still open at 3
        assert lp.log.aborted_transactions(0, 5) == [entry]
        assert fp.log.aborted_transactions(0, 5) == [entry]
        assert fp.producers.ongoing_transactions() == lp.producers.ongoing_transactions() == []
        assert fp.producers.producer_summaries() == lp.producers.producer_summaries()
        assert {s.coordinator_epoch for s in lp.producers.producer_summaries()} == {4}

    asyncio.run(main())


def test_markers_are_fenced_by_producer_and_coordinator_epochs() -> None:
    async def main() -> None:
        rm = _manager(1, Clock())
        part = _open(rm, Registration.sole_leader(1))
        rm.append_nowait(part, _txn_batch(seq=0, epoch=3), acks=1)
        first = rm.append_marker(part, PID, 2, coordinator_epoch=1, commit=True)
        assert isinstance(first, AppendOutcome)
        assert first.error is ErrorCode.INVALID_PRODUCER_EPOCH
        done = rm.append_marker(part, PID, 3, coordinator_epoch=5, commit=True)
        await _one_pass()
        assert _outcome(done) == AppendOutcome(ErrorCode.NONE, 1)
        stale = rm.append_marker(part, PID, 3, coordinator_epoch=4, commit=False)
        assert isinstance(stale, AppendOutcome)
        assert stale.error is ErrorCode.TRANSACTION_COORDINATOR_FENCED
        # a newer epoch in a marker (the coordinator fenced the producer) bumps it
        bumped = rm.append_marker(part, PID, 4, coordinator_epoch=5, commit=False)
        await _one_pass()
        assert _outcome(bumped) == AppendOutcome(ErrorCode.NONE, 2)
        late = rm.append_nowait(part, _txn_batch(seq=1, epoch=3), acks=1)
        assert isinstance(late, AppendOutcome) and late.error is ErrorCode.INVALID_PRODUCER_EPOCH
        assert part.log_end_offset == 3, "nothing refused was appended"
        # the new epoch starts its sequences over
        fresh = rm.append_nowait(part, _txn_batch(seq=0, epoch=4), acks=1)
        await _one_pass()
        assert _outcome(fresh) == AppendOutcome(ErrorCode.NONE, 3)

    asyncio.run(main())


def test_a_non_transactional_write_inside_a_transaction_is_refused() -> None:
    async def main() -> None:
        rm = _manager(1, Clock())
        part = _open(rm, Registration.sole_leader(1))
        rm.append_nowait(part, _txn_batch(seq=0), acks=1)
        refused = rm.append_nowait(part, _idempotent(PID, 1), acks=1)
        assert isinstance(refused, AppendOutcome)
        assert refused.error is ErrorCode.INVALID_TXN_STATE
        rm.append_marker(part, PID, 0, coordinator_epoch=0, commit=True)
        after = rm.append_nowait(part, _idempotent(PID, 1), acks=1)
        await _one_pass()
        assert _outcome(after) == AppendOutcome(ErrorCode.NONE, 2)

    asyncio.run(main())


def test_markers_need_the_leadership() -> None:
    async def main() -> None:
        clock = Clock()
        follower = _manager(2, clock)
        fp = _open(follower)
        refused = follower.append_marker(fp, PID, 0, coordinator_epoch=0, commit=True)
        assert isinstance(refused, AppendOutcome)
        assert refused.error is ErrorCode.NOT_LEADER_OR_FOLLOWER

    asyncio.run(main())


def test_producers_with_an_open_transaction_never_expire() -> None:
    async def main() -> None:
        clock = Clock()
        rm = _manager(1, clock, producer_id_expiration_ms=1_000)
        part = _open(rm, Registration.sole_leader(1))
        rm.append_nowait(part, _txn_batch(seq=0), acks=1)
        rm.append_nowait(part, _idempotent(OTHER, 0), acks=1)
        await _one_pass()
        clock.now += 5_000
        rm.expire_producers()
        assert set(part.producers.producers) == {PID}
        rm.append_marker(part, PID, 0, coordinator_epoch=0, commit=False)
        await _one_pass()
        clock.now += 5_000
        rm.expire_producers()
        assert part.producers.producers == {}

    asyncio.run(main())


def test_a_failed_marker_write_reopens_the_transaction() -> None:
    async def main() -> None:
        clock = Clock()
        rm = _manager(1, clock)
        part = _open(rm, Registration.sole_leader(1))
        rm.append_nowait(part, _txn_batch(seq=0), acks=1)
        await _one_pass()
        marker = rm.append_marker(part, PID, 0, coordinator_epoch=0, commit=False)
        # the leadership moves before the marker is written: nothing of it stays
        rm.apply_registration(part, Registration(2, 1, 1, (1, 2), (1, 2)))
        await _one_pass()
        out = _outcome(marker)
        assert out is not None and out.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert part.producers.ongoing_transactions() == [(PID, 0, 0)]
        assert part.log.aborted_transactions(0, 10) == []

    asyncio.run(main())


def test_an_emptied_control_batch_keeps_sequences_and_closes_nothing() -> None:
    """The cleaner writes a batch whose records all went as an empty control batch with the
    producer's fields: no marker, no transaction, but its sequences still count."""
    producers = ProducerStateManager()
    learn_producer(producers, AppendedBatch(PID, 0, 0, 0, 0, 0, T, True), seen_ms=T)
    emptied = AppendedBatch(PID, 0, 1, 3, 1, 3, T, True, None, control=True)
    assert learn_producer(producers, emptied, seen_ms=T) is None
    assert producers.ongoing_transactions() == [(PID, 0, 0)]
    assert producers.producers[PID].last_seq == 3


def test_the_lso_is_never_below_the_log_start() -> None:
    """A transaction whose first batches DeleteRecords removed bounds the LSO at the log start
    (Kafka's UnifiedLog clamps its first unstable offset so)."""

    async def main() -> None:
        rm = _manager(1, Clock())
        part = _open(rm, Registration.sole_leader(1))
        rm.append_nowait(part, _txn_batch(2, seq=0), acks=1)
        rm.append_nowait(part, _txn_batch(2, seq=2), acks=1)
        await _one_pass()
        assert (part.high_watermark, part.last_stable_offset) == (4, 0)
        part.log.delete_records_before(3)
        assert part.last_stable_offset == 3

    asyncio.run(main())


def test_verification_guards_survive_a_replay_and_expire_with_idle_producers() -> None:
    """KIP-890 guards in the producer state: a replay of the log (its batches all predate any
    guard) clears none, a live marker of the producer does, an unused one expires."""
    state = ProducerStateManager()
    guard = state.verification_guard(PID, now_ms=1_000)
    other = state.verification_guard(OTHER, now_ms=5_000)
    with state.replaying():
        learn_producer(state, _txn_batch(), seen_ms=T)
        state.complete(PID, 0, 0, 1, False, T, T)
    assert state.verified(PID, guard) and state.verified(OTHER, other)
    state.complete(PID, 0, 0, 2, False, T, T)
    assert not state.verified(PID, guard)
    assert state.verification_guard(PID, now_ms=1_000) is not guard
    state.remove_expired(now_ms=6_000, expiration_ms=4_000)  # PID's new guard: 5 s old
    assert not state.verified(PID, guard) and state.verified(OTHER, other)
    assert state.verification_guard(PID, now_ms=6_000).created_ms == 6_000
