"""Transactions on a partition against a model (a replay of the batches in the log).

``TxnPartitionModel``, a follower: random interleavings of transactional batches (with and
without sequences), plain batches, COMMIT/ABORT markers, high watermark moves, truncations
(above and below the high watermark) and reopenings (clean, and unclean: recovery rebuilds the
aborted-transaction index from the log).  ``LeaderAndFollowerModel``: the same writes through
the leader's append path, replicated at random moments.  After every step the producer
state's open transactions, the last stable offset and the aborted-transaction index answer
what the model says."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker.deferred import Deferred
from broker.log.config import LogConfig
from broker.log.txn_index import AbortedTxn, marker_value
from broker.replica_manager import AppendOutcome, Partition, Registration, ReplicaManager
from broker.replication.partition_state import Truncation
from broker.storage import MemoryStorage
from kafka_protocol.errors import ErrorCode
from kafka_protocol.record_batch import (
    ControlRecordType,
    RecordBatch,
    SimpleRecord,
    build_batch,
    control_record,
)

TOPIC_ID = uuid.uuid4()
LEADER_EPOCH = 1
PIDS = (7, 8, 9)
REGISTRATION = Registration(2, LEADER_EPOCH, 0, (1, 2), (1, 2))  # broker 1 follows broker 2


@dataclass(frozen=True)
class Batch:
    base: int
    last: int
    pid: int  # -1: a plain batch
    kind: str  # "data", "commit", "abort"


def replay(batches: list[Batch]) -> tuple[dict[int, int], list[AbortedTxn], list[tuple[int, int]]]:
    """The model: open transactions (pid -> first offset), the aborted ones (as the index
    records them) and every (first offset, marker offset) of a closed one."""
    open_txns: dict[int, int] = {}
    aborted: list[AbortedTxn] = []
    closed: list[tuple[int, int]] = []
    for b in batches:
        if b.pid < 0:
            continue
        if b.kind == "data":
            open_txns.setdefault(b.pid, b.base)
        elif b.pid in open_txns:
            first = open_txns.pop(b.pid)
            closed.append((first, b.base))
            if b.kind == "abort":
                lso = min(open_txns.values()) if open_txns else b.base + 1
                aborted.append(AbortedTxn(b.pid, first, b.base, lso))
    return open_txns, aborted, closed


def model_lso(batches: list[Batch], high_watermark: int) -> int:
    open_txns, _, closed = replay(batches)
    firsts = [*open_txns.values(), *(f for f, m in closed if m >= high_watermark)]
    return min([high_watermark, *firsts])


class Clock:
    now = 1_000

    def __call__(self) -> int:
        return self.now


class TxnPartitionModel(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.storage = MemoryStorage()
        self.clock = Clock()
        self.batches: list[Batch] = []
        self.sequences = dict.fromkeys(PIDS, 0)
        self.rm, self.part = self._open()

    def _open(self) -> tuple[ReplicaManager, Partition]:
        rm = ReplicaManager(
            self.storage,
            Path("/data"),
            broker_id=1,
            clock_ms=self.clock,
            monotonic_clock_ms=self.clock,
        )
        part = rm.open_partition(
            "t",
            0,
            TOPIC_ID,
            LogConfig(segment_bytes=400),  # a few batches per segment
            max_message_bytes=1 << 20,
            registration=REGISTRATION,
        )
        assert part is not None and not part.is_leader
        return rm, part

    @property
    def end(self) -> int:
        return self.part.log_end_offset

    def _append(self, data: bytes, batch: Batch, leader_hw: int) -> None:
        self.rm.append_as_follower(self.part, memoryview(data), leader_hw)
        self.batches.append(batch)

    @rule(
        pid=st.sampled_from(PIDS),
        count=st.integers(1, 3),
        with_sequence=st.booleans(),
        hw_step=st.integers(0, 4),
    )
    def transactional_batch(self, pid: int, count: int, with_sequence: bool, hw_step: int) -> None:
        seq = self.sequences[pid] if with_sequence else -1
        if with_sequence:
            self.sequences[pid] += count
        data = build_batch(
            [SimpleRecord(b"v%d" % i) for i in range(count)],
            base_offset=self.end,
            partition_leader_epoch=LEADER_EPOCH,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            transactional=True,
        )
        batch = Batch(self.end, self.end + count - 1, pid, "data")
        self._append(data, batch, self.part.high_watermark + hw_step)

    @rule(count=st.integers(1, 3), hw_step=st.integers(0, 4))
    def plain_batch(self, count: int, hw_step: int) -> None:
        data = build_batch(
            [SimpleRecord(b"p%d" % i) for i in range(count)],
            base_offset=self.end,
            partition_leader_epoch=LEADER_EPOCH,
        )
        batch = Batch(self.end, self.end + count - 1, -1, "data")
        self._append(data, batch, self.part.high_watermark + hw_step)

    @rule(pid=st.sampled_from(PIDS), commit=st.booleans(), hw_step=st.integers(0, 4))
    def marker(self, pid: int, commit: bool, hw_step: int) -> None:
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        data = build_batch(
            [control_record(kind, marker_value(5))],
            base_offset=self.end,
            partition_leader_epoch=LEADER_EPOCH,
            producer_id=pid,
            producer_epoch=0,
            transactional=True,
            control=True,
        )
        batch = Batch(self.end, self.end, pid, "commit" if commit else "abort")
        self._append(data, batch, self.part.high_watermark + hw_step)

    @rule(step=st.integers(1, 10))
    def move_high_watermark(self, step: int) -> None:
        self.rm.append_as_follower(self.part, memoryview(b""), self.part.high_watermark + step)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        """Mostly at or above the high watermark, as a follower does; sometimes below."""
        low = 0 if data.draw(st.integers(0, 4)) == 0 else self.part.high_watermark
        self.cut(data.draw(st.integers(min(low, self.end), self.end)))

    def cut(self, offset: int) -> None:
        self.rm.truncate(self.part, Truncation(offset, True))
        self.batches = [b for b in self.batches if b.last < offset]
        assert self.end == (self.batches[-1].last + 1 if self.batches else 0)

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        """A restart; unclean: no close (recovery re-validates the active segment and the
        replay of the log refills its aborted-transaction index)."""
        if clean:
            self.rm.close()
        self.rm, self.part = self._open()

    @invariant()
    def matches_the_model(self) -> None:
        if not hasattr(self, "part"):
            return
        open_txns, aborted, _ = replay(self.batches)
        producers = self.part.producers
        assert {pid: first for pid, _, first in producers.ongoing_transactions()} == open_txns
        hw = self.part.high_watermark
        assert self.part.last_stable_offset == model_lso(self.batches, hw)
        assert self.part.log.aborted_transactions(0, self.end + 1) == aborted
        for pid in open_txns:
            assert self.rm.has_ongoing_transaction(self.part, pid, 0)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def aborted_in_a_range(self, data: st.DataObject) -> None:
        start = data.draw(st.integers(0, self.end))
        upper = data.draw(st.integers(start, self.end + 1))
        _, aborted, _ = replay(self.batches)
        want = [t for t in aborted if t.last_offset >= start and t.first_offset < upper]
        assert self.part.log.aborted_transactions(start, upper) == want


TxnPartitionModel.TestCase.settings = settings(
    max_examples=150, stateful_step_count=50, deadline=None
)
test_txn_partition_model = TxnPartitionModel.TestCase


def test_a_cut_that_reopens_a_transaction_whose_producer_was_first_seen_below_it() -> None:
    """Found by the model: a transaction without sequences at 0, its ABORT at 1, a new one
    with sequences at 2.  Cutting 2 must keep the producer (it is known from 0 and 1), so that
    cutting 1 opens the transaction at 0 again."""
    machine = TxnPartitionModel()
    machine.start()
    machine.transactional_batch(pid=9, count=1, with_sequence=False, hw_step=0)
    machine.marker(pid=9, commit=False, hw_step=0)
    machine.transactional_batch(pid=9, count=1, with_sequence=True, hw_step=0)
    machine.cut(2)
    machine.matches_the_model()
    machine.cut(1)
    machine.matches_the_model()
    assert machine.part.producers.ongoing_transactions() == [(9, 0, 0)]
    machine.teardown()


def test_a_cut_of_the_batch_that_raised_an_epoch_replays_the_log() -> None:
    """The producer's epoch below the cut is not kept: the replay gives it back, so the
    older epoch's sequences are accepted as the log says."""
    machine = TxnPartitionModel()
    machine.start()
    for epoch in (0, 1):
        data = build_batch(
            [SimpleRecord(b"e")],
            base_offset=machine.end,
            partition_leader_epoch=LEADER_EPOCH,
            producer_id=7,
            producer_epoch=epoch,
            base_sequence=0,
        )
        machine._append(data, Batch(machine.end, machine.end, -1, "data"), 0)
    machine.cut(1)
    (summary,) = machine.part.producers.producer_summaries()
    assert (summary.producer_epoch, summary.last_sequence) == (0, 0)
    machine.teardown()


class LeaderAndFollowerModel(RuleBasedStateMachine):
    """The leader's side: produces (transactional with and without sequences, idempotent,
    plain) and markers through ``append_nowait`` / ``append_marker``, a follower replicating
    at random moments.  The leader answers as the model says (INVALID_TXN_STATE for an
    idempotent write inside a transaction, nothing else refused), and leader and follower hold
    the producer state, LSO and aborted-transaction index the model gives for their logs."""

    @initialize()
    def start(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.clock = Clock()
        self.batches: list[Batch] = []
        self.sequences = dict.fromkeys(PIDS, 0)
        reg = Registration(1, LEADER_EPOCH, 0, (1, 2), (1, 2))
        self.leader, self.follower = self._manager(1), self._manager(2)
        self.lp, self.fp = self._open(self.leader, reg), self._open(self.follower, reg)

    def teardown(self) -> None:
        if hasattr(self, "loop"):
            self.loop.close()

    def _manager(self, broker_id: int) -> ReplicaManager:
        return ReplicaManager(
            MemoryStorage(),
            Path(f"/data-{broker_id}"),
            broker_id=broker_id,
            clock_ms=self.clock,
            monotonic_clock_ms=self.clock,
        )

    @staticmethod
    def _open(rm: ReplicaManager, reg: Registration) -> Partition:
        part = rm.open_partition(
            "t",
            0,
            TOPIC_ID,
            LogConfig(segment_bytes=400),
            max_message_bytes=1 << 20,
            registration=reg,
        )
        assert part is not None
        return part

    def _run(self, outcome: AppendOutcome | Deferred[AppendOutcome]) -> ErrorCode:
        async def settle() -> None:
            await asyncio.sleep(0)
            await asyncio.sleep(0)

        self.loop.run_until_complete(settle())
        if isinstance(outcome, Deferred):
            assert outcome.done or not self.lp.pending, "written but not answered"
            return outcome.result().error if outcome.done else ErrorCode.NONE  # acks=all waits
        return outcome.error

    def _produce(self, data: bytes, acks: int = 1) -> ErrorCode:
        async def append() -> AppendOutcome | Deferred[AppendOutcome]:
            return self.leader.append_nowait(self.lp, RecordBatch(memoryview(data)), acks)

        return self._run(self.loop.run_until_complete(append()))

    @rule(pid=st.sampled_from(PIDS), count=st.integers(1, 3), with_sequence=st.booleans())
    def transactional_batch(self, pid: int, count: int, with_sequence: bool) -> None:
        seq = self.sequences[pid] if with_sequence else -1
        data = build_batch(
            [SimpleRecord(b"t") for _ in range(count)],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            transactional=True,
        )
        base = self.lp.next_offset
        assert self._produce(data) is ErrorCode.NONE
        if with_sequence:
            self.sequences[pid] += count
        self.batches.append(Batch(base, base + count - 1, pid, "data"))

    @rule(pid=st.sampled_from(PIDS))
    def idempotent_batch(self, pid: int) -> None:
        data = build_batch(
            [SimpleRecord(b"i")],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=self.sequences[pid],
        )
        base = self.lp.next_offset
        open_txns, _, _ = replay(self.batches)
        error = self._produce(data)
        if pid in open_txns:
            assert error is ErrorCode.INVALID_TXN_STATE
            return
        assert error is ErrorCode.NONE
        self.sequences[pid] += 1
        self.batches.append(Batch(base, base, -1, "data"))  # no transaction of its own

    @rule()
    def plain_batch(self) -> None:
        base = self.lp.next_offset
        assert self._produce(build_batch([SimpleRecord(b"p")])) is ErrorCode.NONE
        self.batches.append(Batch(base, base, -1, "data"))

    @rule(pid=st.sampled_from(PIDS), commit=st.booleans())
    def marker(self, pid: int, commit: bool) -> None:
        async def append() -> AppendOutcome | Deferred[AppendOutcome]:
            return self.leader.append_marker(self.lp, pid, 0, 1, commit)

        base = self.lp.next_offset
        assert self._run(self.loop.run_until_complete(append())) is ErrorCode.NONE
        self.batches.append(Batch(base, base, pid, "commit" if commit else "abort"))

    @rule()
    def replicate(self) -> None:
        decision = self.leader.on_follower_fetch(
            self.lp, 2, self.fp.log_end_offset, LEADER_EPOCH, 1
        )
        assert decision.error is None
        chunk = self.lp.log.read(self.fp.log_end_offset, 1 << 20, max_offset=self.lp.log_end_offset)
        data = self.lp.log.read_bytes(chunk) if chunk.size_bytes else b""
        self.follower.append_as_follower(self.fp, memoryview(data), self.lp.high_watermark)

    @invariant()
    def both_match_the_model(self) -> None:
        if not hasattr(self, "lp"):
            return
        for part in (self.lp, self.fp):
            held = [b for b in self.batches if b.last < part.log_end_offset]
            open_txns, aborted, _ = replay(held)
            ongoing = {pid: first for pid, _, first in part.producers.ongoing_transactions()}
            assert ongoing == open_txns, part
            assert part.last_stable_offset == model_lso(held, part.high_watermark)
            assert part.log.aborted_transactions(0, part.log_end_offset + 1) == aborted


LeaderAndFollowerModel.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None
)
test_leader_and_follower_model = LeaderAndFollowerModel.TestCase
