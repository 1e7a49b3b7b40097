"""A partition this broker hosts: its log, its replication role, the appends queued for the
log, and the acks=all answers waiting for the high watermark (Kafka's ``Partition`` and its
``DelayedProduce`` purgatory).

The :class:`broker.replica_manager.ReplicaManager` drives partitions (roles, appends, the
follower side); what lives here is each partition's own state and the rules that touch only
it: when a delayed produce may answer, and with what.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.deferred import Deferred
from broker.delete_records import LowWatermarkAnswer, LowWatermarkWaiters, low_watermark
from broker.log.config import LogConfig
from broker.log.fetched_batches import AppendedBatch
from broker.log.log import PartitionLog
from broker.log.txn_index import AbortedTxn, read_marker
from broker.log_dir import LogDirectory
from broker.producer_state import BatchMetadata, CompletedTxn, ProducerStateManager
from broker.replication.partition_state import FollowerState, PartitionState
from kafka_protocol.errors import ErrorCode
from kafka_protocol.record_batch import (
    NO_PRODUCER_ID,
    ControlRecordType,
    RecordBatch,
)

Role = PartitionState | FollowerState
NO_LEADER = -1
_tiebreak = itertools.count()  # orders delayed produces of one required offset
_NO_LOG_DIR = LogDirectory("", uuid.UUID(int=0))  # a partition built outside a ReplicaManager


def _session_held() -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Registration:
    """A partition's registration as this broker applies it (from a ``PartitionImage``)."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    recovering: bool = False  # elected uncleanly; the leader reports RECOVERED

    @classmethod
    def sole_leader(cls, broker_id: int) -> Registration:
        return cls(broker_id, 0, 0, (broker_id,), (broker_id,))


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    error: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    message: str | None = None
    # Produce v8+ (KIP-467): (index of a bad record in the batch, why)
    record_errors: tuple[tuple[int, str], ...] = ()


@dataclass(slots=True)
class PendingAppend:
    """A batch with its offsets assigned, queued for the partition's next log append."""

    batch: RecordBatch
    base_offset: int
    done: Deferred[AppendOutcome]
    aborted: AbortedTxn | None = None  # an ABORT marker's entry for the txn index


@dataclass(slots=True)
class DelayedProduce:
    """An acks=all answer waiting for the high watermark to reach ``required_offset``."""

    required_offset: int
    written: AppendOutcome
    done: Deferred[AppendOutcome]


@dataclass(slots=True, eq=False)  # identity: partitions are keys of the dirty set
class Partition:
    topic: str
    index: int
    topic_id: object
    log: PartitionLog
    config: LogConfig
    max_message_bytes: int
    role: Role
    log_append_time: bool = False
    min_insync_replicas: int = 1
    producers: ProducerStateManager = field(default_factory=ProducerStateManager)
    pending: list[PendingAppend] = field(default_factory=list)
    next_offset: int = 0
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    delayed: list[tuple[int, int, DelayedProduce]] = field(default_factory=list)  # a heap
    recovering: bool = False
    offline: bool = False  # its log directory failed: KAFKA_STORAGE_ERROR until a restart
    # Whether this broker's session with the controller has lapsed (see ReplicaManager):
    # then an acks=all produce the high watermark reached is not acknowledged.
    session_lapsed: Callable[[], bool] = _session_held
    # the log directory it lives in (broker/log_dir.py; ReplicaManager sets it)
    log_dir: LogDirectory = field(default_factory=lambda: _NO_LOG_DIR)
    # DeleteRecords (broker/delete_records.py): the log start offsets the in-sync followers
    # last reported in their fetches (leader side), and the answers waiting for them
    follower_log_starts: dict[int, int] = field(default_factory=dict)
    low_watermark_waiters: LowWatermarkWaiters = field(default_factory=LowWatermarkWaiters)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.role.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, or below it the first offset of the earliest transaction not
        yet closed by a marker the high watermark passed (read_committed reads stop here)."""
        high_watermark = self.role.high_watermark
        first = self.producers.first_unstable_offset(high_watermark)
        if first is None or first >= high_watermark:
            return high_watermark
        # a transaction whose start retention or DeleteRecords removed: from the log start
        return max(first, self.log.log_start_offset)

    @property
    def leader_epoch(self) -> int:
        return self.role.leader_epoch

    @property
    def is_leader(self) -> bool:
        return isinstance(self.role, PartitionState)

    @property
    def leader_id(self) -> int:
        role = self.role
        return role.replica_id if isinstance(role, PartitionState) else role.leader_id

    @property
    def low_watermark(self) -> int:
        """The least log start offset among the leader and its in-sync followers (leader
        only)."""
        role = self.role
        assert isinstance(role, PartitionState), self.name
        return low_watermark(
            role.replica_id, self.log.log_start_offset, role.isr, self.follower_log_starts
        )

    def wait_for_low_watermark(self, required: int) -> Deferred[LowWatermarkAnswer]:
        """A DeleteRecords answer: once the low watermark reaches ``required`` (leader)."""
        return self.low_watermark_waiters.wait(required, self.low_watermark)

    def on_follower_log_start(self, replica_id: int, log_start_offset: int) -> None:
        """A follower's fetch reported its log start offset (Fetch v5+)."""
        if self.follower_log_starts.get(replica_id) == log_start_offset:
            return
        self.follower_log_starts[replica_id] = log_start_offset
        self.low_watermark_maybe_moved()

    def low_watermark_maybe_moved(self) -> None:
        """A start or the ISR changed: answer the DeleteRecords the low watermark reached."""
        if self.low_watermark_waiters and self.is_leader:
            self.low_watermark_waiters.moved(self.low_watermark)

    def abandon(self, broker_id: int, outcome: AppendOutcome, reason: str) -> None:
        """Its log directory failed: answer what is queued and waiting with ``outcome``, step
        down to a follower of nobody, wake parked fetches, close the log without writing."""
        self.offline = True
        self.next_offset = self.log.log_end_offset  # nothing queued reaches the log now
        self.producers.truncate_after(self.next_offset)
        pending, self.pending = self.pending, []
        for p in pending:
            p.done.resolve(outcome)
        self.fail_delayed(outcome)
        role, end = self.role, self.log.log_end_offset
        hw = min(role.high_watermark, end)
        self.role = FollowerState(
            broker_id, NO_LEADER, role.leader_epoch, role.partition_epoch, end, hw
        )
        self.wake_waiters()
        self.log.abandon(reason)

    def wake_waiters(self) -> None:
        waiters, self.waiters = self.waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    # --- delayed produces (acks=all) ----------------------------------------------------------

    def when_committed(
        self, written: Deferred[AppendOutcome], required_offset: int
    ) -> Deferred[AppendOutcome]:
        """The answer of an acks=all produce: once written, it waits for the high watermark."""
        committed: Deferred[AppendOutcome] = Deferred()

        def on_written(outcome: AppendOutcome) -> None:
            if committed.done:  # the request timed out first
                return
            if outcome.error is not ErrorCode.NONE:
                committed.resolve(outcome)
                return
            entry = DelayedProduce(required_offset, outcome, committed)
            if not self._try_complete(entry):
                heapq.heappush(self.delayed, (required_offset, next(_tiebreak), entry))

        written.then(on_written)
        return committed

    def _try_complete(self, entry: DelayedProduce) -> bool:
        """Answer ``entry`` if the high watermark reached it (or it was answered already)."""
        if entry.done.done:
            return True
        role = self.role
        if not isinstance(role, PartitionState):
            entry.done.resolve(AppendOutcome(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            return True
        result = role.is_acks_all_complete(entry.required_offset, self.min_insync_replicas)
        if result == "pending":
            return False
        if result is None and self.session_lapsed():
            entry.done.resolve(
                AppendOutcome(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    message=f"written, but this broker's session with the controller has"
                    f" lapsed: {self.name} may have another leader",
                )
            )
        elif result is None:
            entry.done.resolve(entry.written)
        else:
            entry.done.resolve(
                AppendOutcome(
                    result,
                    message=f"written, but {self.name} has {len(role.isr)} in-sync replicas, "
                    f"min.insync.replicas={self.min_insync_replicas}",
                )
            )
        return True

    def high_watermark_moved(self) -> None:
        """Answer the acks=all produces the high watermark reached; wake consumers."""
        self.producers.on_high_watermark(self.high_watermark)
        heap = self.delayed
        while heap and heap[0][0] <= self.high_watermark:
            _, _, entry = heapq.heappop(heap)
            self._try_complete(entry)
        self.wake_waiters()

    def fail_delayed(self, outcome: AppendOutcome) -> None:
        """Answer the waiting acks=all produces (and DeleteRecords) with ``outcome``."""
        self.low_watermark_waiters.fail(outcome.error)
        self.follower_log_starts.clear()
        delayed, self.delayed = self.delayed, []
        for _, _, entry in delayed:
            if not entry.done.done:
                entry.done.resolve(outcome)

    def compact_delayed(self) -> None:
        """Drop entries already answered (timed out by their request)."""
        self.delayed = [e for e in self.delayed if not e[2].done.done]
        heapq.heapify(self.delayed)
        self.low_watermark_waiters.compact()


AlterPartitionSink = Callable[[Partition, PartitionState, frozenset[int]], None]


def learn_producer(
    producers: ProducerStateManager, batch: RecordBatch | AppendedBatch, seen_ms: int
) -> CompletedTxn | None:
    """Record a producer's batch already in the log (replayed at open, or replicated from the
    leader); batches without a producer id, and non-transactional ones without a sequence,
    are not tracked.  A COMMIT or ABORT marker closes the producer's transaction: returned."""
    pid = batch.producer_id
    if pid == NO_PRODUCER_ID:
        return None
    if isinstance(batch, RecordBatch):
        control, transactional = batch.is_control, batch.is_transactional
        marker = read_marker(batch) if control else None
    else:
        control, transactional, marker = batch.control, batch.transactional, batch.marker
    # an empty control batch (the cleaner's, where it removed every record) is no marker and
    # opens no transaction; its sequences still count
    transactional = transactional and not control
    if marker is not None:
        if marker[0] not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            return None
        kind, coordinator_epoch = marker
        return producers.complete(
            pid,
            batch.producer_epoch,
            coordinator_epoch,
            batch.base_offset,
            kind is ControlRecordType.ABORT,
            batch.max_timestamp,
            seen_ms,
        )
    if batch.base_sequence < 0 and not transactional:
        return None
    meta = BatchMetadata(
        batch.base_sequence,
        batch.last_sequence,
        batch.base_offset,
        batch.last_offset,
        batch.max_timestamp,
    )
    if transactional:
        producers.record_transactional(pid, batch.producer_epoch, meta, seen_ms)
    else:
        producers.record(pid, batch.producer_epoch, meta, seen_ms)
    return None


def aborted_entry(producers: ProducerStateManager, done: CompletedTxn | None) -> AbortedTxn | None:
    """The txn index entry of an ABORT marker that closed a transaction (else None)."""
    if done is None or not done.aborted or done.first_offset < 0:
        return None
    return AbortedTxn(
        done.producer_id,
        done.first_offset,
        done.last_offset,
        producers.last_stable_offset_after(done),
    )
