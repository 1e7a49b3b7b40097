"""Transactions on a follower's partition against a model: random interleavings of
transactional batches (with and without sequences), plain batches, COMMIT/ABORT markers,
high watermark moves, truncations (above and below the high watermark) and reopenings (clean,
and unclean: recovery rebuilds the aborted-transaction index from the log).  After every step
the producer state's open transactions, the last stable offset and the aborted-transaction
index answer what the model, a replay of the batches in the log, says."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker.log.config import LogConfig
from broker.log.txn_index import AbortedTxn, marker_value
from broker.replica_manager import Partition, Registration, ReplicaManager
from broker.replication.partition_state import Truncation
from broker.storage import MemoryStorage
from kafka_protocol.record_batch import (
    ControlRecordType,
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
        offset = data.draw(st.integers(min(low, self.end), self.end))
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
