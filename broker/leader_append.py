"""The leader's append path of ``ReplicaManager``: produce batches and transaction markers,
written once per loop iteration.

Theory of operation
-------------------
Produce handlers call ``append_nowait`` with a validated batch: producer-state checks run at
once, offsets are assigned at once (``next_offset`` runs ahead of the log by what is pending),
and the batch joins the partition's pending list.  The first pending batch of a loop iteration
schedules one ``_flush_all`` with ``call_soon``; it writes every dirty partition's pending
batches with ONE ``PartitionLog.append`` (one ``writev``; a run larger than a segment goes in
several, ``_groups_up_to``), tells the role the new log end offset, answers acks=1 and wakes
long-poll fetches.  acks=all answers wait in the partition's *delayed produces* (a heap by
required offset, broker/partition.py) until the high watermark reaches them.  A retry of a
batch the producer state still caches is answered with the original's offsets, never before
the original is written (and, for acks=all, committed).  A failed write rewinds
``next_offset`` and producer state and answers every batch queued after it too.

Transactions.  ``append_marker`` writes a coordinator's COMMIT or ABORT marker through the
same pending list (acks=all); producer state (broker/producer_state.py) opens a transaction at
a producer's first transactional batch and closes it at the marker, and gives the partition
its last stable offset; an ABORT marker's entry goes to the aborted-transaction index of the
segment it lands in.  A batch the coordinator verified (KIP-890) comes with the verification
guard taken before the question (``verification_guard``): a marker of its producer written
since (its transaction ended meanwhile) refuses it INVALID_TXN_STATE.

A mixin of ``ReplicaManager`` (replica_manager.py): what it shares with the manager is the
``_Replicas`` protocol below, the methods' self type.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from broker.deferred import Deferred
from broker.fatal import fatal
from broker.log.errors import LogError
from broker.log.log import AppendResult
from broker.log.txn_index import marker_value
from broker.partition import AppendOutcome, Partition, PendingAppend, aborted_entry
from broker.producer_state import BatchMetadata, VerificationGuard
from broker.replication.partition_state import PartitionState
from kafka_protocol.errors import ErrorCode
from kafka_protocol.record_batch import (
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    ControlRecordType,
    RecordBatch,
    build_batch,
    control_record,
)

log = logging.getLogger("broker.replica_manager")
ACKS_ALL = -1


class _Replicas(Protocol):
    """The part of ``ReplicaManager`` the append path uses."""

    broker_id: int
    clock_ms: Callable[[], int]
    monotonic_ms: Callable[[], int]
    session_lapsed: Callable[[], bool]
    on_append: Callable[[Partition, int, int], None] | None  # metrics hook
    _dirty: dict[Partition, None]  # partitions with pending appends
    _flush_scheduled: bool

    def _rebuild_producer_state(self, part: Partition) -> None: ...

    def _flush_all(self) -> None: ...

    def _refuse_append(self, part: Partition) -> AppendOutcome | None: ...

    def _enqueue(
        self, part: Partition, pending: PendingAppend, acks: int
    ) -> AppendOutcome | Deferred[AppendOutcome]: ...

    def _answer_duplicate(
        self, part: Partition, dup: BatchMetadata, acks: int
    ) -> AppendOutcome | Deferred[AppendOutcome]: ...

    def _fail(
        self, part: Partition, pending: list[PendingAppend], outcome: AppendOutcome
    ) -> None: ...

    def _write(self, part: Partition, pending: list[PendingAppend]) -> AppendOutcome | None: ...


class LeaderAppends:
    """``ReplicaManager``'s leader append path (a mixin).  Its state, set up by
    ``ReplicaManager.__init__``:"""

    _dirty: dict[Partition, None]  # partitions with pending appends, in arrival order
    _flush_scheduled: bool  # a ``_flush_all`` is due in this loop iteration

    def append_nowait(
        self: _Replicas,
        part: Partition,
        batch: RecordBatch,
        acks: int = 1,
        verification_guard: VerificationGuard | None = None,
    ) -> AppendOutcome | Deferred[AppendOutcome]:
        """Check one validated batch and queue it; the Deferred resolves once it is written
        (acks 0 and 1) or once every ISR member has it (acks=all).  ``verification_guard``:
        the one taken before the coordinator verified this transactional batch (KIP-890);
        refused INVALID_TXN_STATE if a marker of its producer was written since and no
        transaction of it is open."""
        refused = self._refuse_append(part)
        if refused is not None:
            return refused
        role = part.role
        assert isinstance(role, PartitionState)
        if acks == ACKS_ALL and (error := role.check_produce(acks, part.min_insync_replicas)):
            return AppendOutcome(
                error,
                message=f"{len(role.isr)} in-sync replicas of {part.name}, "
                f"min.insync.replicas={part.min_insync_replicas}",
            )
        pid, transactional = batch.producer_id, batch.is_transactional
        tracked = pid != NO_PRODUCER_ID and (batch.base_sequence >= 0 or transactional)
        if tracked:
            check = part.producers.check(
                pid, batch.producer_epoch, batch.base_sequence, batch.last_sequence, transactional
            )
            if check.error is not ErrorCode.NONE:
                return AppendOutcome(check.error, message=check.message)
            if (dup := check.duplicate_of) is not None:
                return self._answer_duplicate(part, dup, acks)
            if (
                verification_guard is not None
                and transactional
                and not part.producers.has_ongoing(pid, batch.producer_epoch)
                and not part.producers.verified(pid, verification_guard)
            ):
                return AppendOutcome(
                    ErrorCode.INVALID_TXN_STATE,
                    message=f"producer {pid}'s transaction ended while the partition was being"
                    " verified: the batch is not part of an ongoing transaction",
                )
        base = part.next_offset
        part.next_offset = base + batch.last_offset_delta + 1
        if tracked:
            meta = BatchMetadata(
                batch.base_sequence,
                batch.last_sequence,
                base,
                part.next_offset - 1,
                batch.max_timestamp,
            )
            if transactional:
                part.producers.record_transactional(
                    pid, batch.producer_epoch, meta, self.clock_ms()
                )
            else:
                part.producers.record(pid, batch.producer_epoch, meta, self.clock_ms())
        return self._enqueue(part, PendingAppend(batch, base, Deferred()), acks)

    def _refuse_append(self: _Replicas, part: Partition) -> AppendOutcome | None:
        """Why this broker cannot append to ``part`` now (None: it can)."""
        if part.offline:
            return AppendOutcome(
                ErrorCode.KAFKA_STORAGE_ERROR, message=f"{part.name}: its log directory is offline"
            )
        if not isinstance(part.role, PartitionState):
            return AppendOutcome(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                message=f"broker {self.broker_id} does not lead {part.name}",
            )
        if self.session_lapsed():
            return AppendOutcome(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                message=f"broker {self.broker_id}'s session with the controller has lapsed:"
                f" {part.name} may have another leader",
            )
        return None

    def append_marker(
        self: _Replicas,
        part: Partition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> AppendOutcome | Deferred[AppendOutcome]:
        """Write the coordinator's COMMIT or ABORT marker for ``producer_id`` (a control batch
        of one control record); resolves once every ISR member has it (acks=all)."""
        refused = self._refuse_append(part)
        if refused is not None:
            return refused
        role = part.role
        assert isinstance(role, PartitionState)
        if error := role.check_produce(ACKS_ALL, part.min_insync_replicas):
            return AppendOutcome(
                error,
                message=f"{len(role.isr)} in-sync replicas of {part.name}, "
                f"min.insync.replicas={part.min_insync_replicas}",
            )
        check = part.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if check.error is not ErrorCode.NONE:
            return AppendOutcome(check.error, message=check.message)
        now = self.clock_ms()
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        data = build_batch(
            [control_record(kind, marker_value(coordinator_epoch))],
            now_ms=now,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=NO_SEQUENCE,
            transactional=True,
            control=True,
        )
        batch = RecordBatch(memoryview(data))
        base = part.next_offset
        part.next_offset = base + 1
        done = part.producers.complete(
            producer_id, producer_epoch, coordinator_epoch, base, not commit, now, now
        )
        pending = PendingAppend(batch, base, Deferred(), aborted_entry(part.producers, done))
        return self._enqueue(part, pending, ACKS_ALL)

    def verification_guard(self: _Replicas, part: Partition, producer_id: int) -> VerificationGuard:
        """Taken before asking the coordinator to verify a transactional batch of
        ``producer_id`` for ``part``, and passed to :meth:`append_nowait` (KIP-890)."""
        return part.producers.verification_guard(producer_id, self.clock_ms())

    def has_ongoing_transaction(
        self: _Replicas, part: Partition, producer_id: int, producer_epoch: int
    ) -> bool:
        """Whether ``producer_id`` at ``producer_epoch`` has a transaction open on ``part``
        (KIP-890: its batches need no verification with the coordinator then)."""
        return part.producers.has_ongoing(producer_id, producer_epoch)

    def _enqueue(
        self: _Replicas, part: Partition, pending: PendingAppend, acks: int
    ) -> AppendOutcome | Deferred[AppendOutcome]:
        written = pending.done
        part.pending.append(pending)
        self._dirty[part] = None
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_all)
        if acks != ACKS_ALL:
            return written
        return part.when_committed(
            written, pending.base_offset + pending.batch.last_offset_delta + 1
        )

    def _answer_duplicate(
        self: _Replicas, part: Partition, dup: BatchMetadata, acks: int
    ) -> AppendOutcome | Deferred[AppendOutcome]:
        """A retry of a batch we have: the original's offsets, never before the original is
        written, and for acks=all never before it is committed (the first attempt's answer
        may have been lost while the batch still waited for the ISR)."""
        original: AppendOutcome | Deferred[AppendOutcome] = AppendOutcome(
            ErrorCode.NONE, dup.first_offset
        )
        if dup.first_offset >= part.log.log_end_offset:
            for p in part.pending:
                if p.base_offset == dup.first_offset:
                    original = p.done
                    break
        if acks != ACKS_ALL:
            return original
        if isinstance(original, AppendOutcome):
            done: Deferred[AppendOutcome] = Deferred()
            done.resolve(original)
            original = done
        return part.when_committed(original, dup.last_offset + 1)

    def _flush_all(self: _Replicas) -> None:
        self._flush_scheduled = False
        dirty, self._dirty = self._dirty, {}
        for part in dirty:
            pending, part.pending = part.pending, []
            groups = _groups_up_to(pending, part.log.max_append_bytes)
            for i, group in enumerate(groups):
                try:
                    failed = self._write(part, group)
                except Exception:  # a bug; the other partitions' writes must still happen
                    log.exception("append failed partition=%s", part.name)
                    failed = AppendOutcome(ErrorCode.UNKNOWN_SERVER_ERROR)
                if failed is not None:  # offsets of the later groups are void too
                    self._fail(part, [p for g in groups[i:] for p in g], failed)
                    break

    def _fail(
        self: _Replicas, part: Partition, pending: list[PendingAppend], outcome: AppendOutcome
    ) -> None:
        """Nothing of ``pending`` (or queued after it) is in the log: rewind and answer."""
        part.next_offset = part.log.log_end_offset
        if not part.producers.truncate_after(part.next_offset):
            self._rebuild_producer_state(part)
        for p in pending:
            p.done.resolve(outcome)

    def _write(
        self: _Replicas, part: Partition, pending: list[PendingAppend]
    ) -> AppendOutcome | None:
        """One append; None once written and answered, else the failure to answer with."""
        role = part.role
        assert isinstance(role, PartitionState), f"{part.name}: leader append on a follower"
        now = self.clock_ms()
        try:
            result: AppendResult = part.log.append(
                [p.batch.buf for p in pending],
                leader_epoch=role.leader_epoch,
                now_ms=now,
                log_append_time=part.log_append_time,
                aborted_txns=[p.aborted for p in pending if p.aborted is not None],
            )
        except LogError as exc:
            log.error("append failed partition=%s error=%s", part.name, exc)
            return AppendOutcome(exc.error_code, message=str(exc))
        last = pending[-1].base_offset + pending[-1].batch.last_offset_delta
        if (result.base_offset, result.last_offset) != (pending[0].base_offset, last):
            # The producers are about to be told offsets the log did not give their batches.
            fatal(
                "replica.append-offsets-as-assigned",
                f"{part.name}: the log appended at other offsets than the replica manager assigned",
                assigned=(pending[0].base_offset, last),
                appended=(result.base_offset, result.last_offset),
            )
        append_time = result.log_append_time_ms if part.log_append_time else -1
        moved = role.on_leader_append(part.log.log_end_offset, self.monotonic_ms())
        for p in pending:
            p.done.resolve(AppendOutcome(ErrorCode.NONE, p.base_offset, append_time))
        if self.on_append is not None:
            size = sum(p.batch.size_bytes for p in pending)
            count = sum(p.batch.last_offset_delta + 1 for p in pending)
            self.on_append(part, size, count)
        if moved:
            part.high_watermark_moved()  # also wakes waiters
        else:
            part.wake_waiters()  # followers' parked fetches
        return None


def _groups_up_to(pending: list[PendingAppend], max_bytes: int) -> list[list[PendingAppend]]:
    """Consecutive runs of pending batches, each within one append's size limit (a segment)."""
    groups: list[list[PendingAppend]] = []
    size = max_bytes
    for p in pending:
        if size + p.batch.size_bytes > max_bytes and (not groups or groups[-1]):
            groups.append([])
            size = 0
        groups[-1].append(p)
        size += p.batch.size_bytes
    return groups
