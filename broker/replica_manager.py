"""Partitions this broker hosts: appends (coalesced per loop iteration), reads, long-poll
waits, and each partition's replication role.

Theory of operation
-------------------
A :class:`Partition` wraps one :class:`PartitionLog` and a replication *role*: the leader's
:class:`PartitionState` or a follower's :class:`FollowerState` (broker/replication/
partition_state.py holds the rules; this module does the I/O they ask for).  The role follows
the partition's registration in the metadata image (:meth:`ReplicaManager.apply_registration`).

Leader.  Produce handlers call :meth:`ReplicaManager.append_nowait` with a validated batch:
producer-state checks run at once, offsets are assigned at once (``next_offset`` runs ahead of
the log by what is pending), and the batch joins the partition's pending list.  The first
pending batch of a loop iteration schedules one ``_flush_all`` with ``call_soon``; it writes
every dirty partition's pending batches with ONE ``PartitionLog.append`` (one ``writev``),
tells the role the new log end offset, answers acks=1 and wakes long-poll fetches.  acks=all
answers wait in the partition's *delayed produces* (a heap by required offset) until the high
watermark reaches them; followers' fetches move the high watermark
(:meth:`on_follower_fetch`), and so do ISR changes.  The produce handler bounds the wait with
the request's timeout (REQUEST_TIMED_OUT); a lost leadership answers NOT_LEADER_OR_FOLLOWER.

Follower.  The replica fetcher (broker/replication/fetcher.py) appends what the leader sent
verbatim (:meth:`append_as_follower`), truncates divergent tails (:meth:`truncate`), and keeps
producer state from batch headers (and markers), so a follower elected leader deduplicates
retries of batches its predecessor wrote and knows which transactions are open.

Transactions.  :meth:`append_marker` writes a coordinator's COMMIT or ABORT marker through the
same pending list as produces (acks=all); producer state (broker/producer_state.py) opens a
transaction at a producer's first transactional batch and closes it at the marker, and gives
the partition its last stable offset; an ABORT marker's entry goes to the aborted-transaction
index of the segment it lands in, on the leader and on followers alike.  At open, the replay
of the log that rebuilds producer state also refills the indexes recovery emptied.

The high watermark is checkpointed per log directory (``replication-offset-checkpoint``,
Kafka's file and format) so a restarted broker does not expose records it cannot know are
committed, nor hide every record until all followers have fetched
(replication/high_watermark_checkpoint.py).

A partition's own state and its delayed produces live in ``broker/partition.py``; the rest
stays in this one class because role changes, leader appends and the follower side all move
the same partitions' offsets, pending appends and dirty set.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from broker.deferred import Deferred
from broker.fatal import fatal
from broker.log.cleaner import LogCleaning
from broker.log.config import LogConfig
from broker.log.errors import KafkaStorageError, LogError
from broker.log.fetched_batches import AppendedBatch
from broker.log.log import AppendResult, PartitionLog
from broker.log.txn_index import AbortedTxn, marker_value
from broker.log_dir import LogDirectory, claim_partition_directory
from broker.partition import (
    AlterPartitionSink,
    PendingAppend,
    Role,
    aborted_entry,
    learn_producer,
)
from broker.partition import AppendOutcome as AppendOutcome
from broker.partition import Partition as Partition
from broker.partition import Registration as Registration
from broker.producer_state import BatchMetadata
from broker.replication.high_watermark_checkpoint import (
    read_high_watermarks,
    write_high_watermarks,
)
from broker.replication.partition_state import (
    FetchDecision,
    FollowerState,
    PartitionState,
    Truncation,
)
from broker.storage import Storage
from kafka_protocol.clock import monotonic_ms, wall_ms
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.record_batch import (
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    ControlRecordType,
    RecordBatch,
    build_batch,
    control_record,
    iter_batches,
)

log = logging.getLogger("broker.replica_manager")
ACKS_ALL = -1


class ReplicaManager:
    def __init__(
        self,
        storage: Storage,
        log_dir: Path,
        *,
        broker_id: int = 0,
        clock_ms: Callable[[], int] | None = None,
        monotonic_clock_ms: Callable[[], int] = monotonic_ms,
        replica_lag_time_max_ms: int = 30_000,
        producer_id_expiration_ms: int = 86_400_000,
        log_dir_id: uuid.UUID | None = None,
    ) -> None:
        self.storage = storage
        self.log_dir = log_dir
        # The one log directory (broker/log_dir.py): its id, and whether an I/O error took it
        # offline; ``on_log_dir_offline`` hears of the partitions that went with it.
        self.directory = LogDirectory(str(log_dir), log_dir_id or uuid.uuid4())
        self.on_log_dir_offline: Callable[[list[Partition]], None] | None = None
        self._offline_scheduled = False
        self._not_opened: set[tuple[str, int]] = set()  # assigned here while it was offline
        self.broker_id = broker_id
        self.clock_ms = clock_ms or wall_ms
        self.monotonic_ms = monotonic_clock_ms
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._dirty: dict[Partition, None] = {}
        self._flush_scheduled = False
        self.on_append: Callable[[Partition, int, int], None] | None = None  # metrics hook
        # Sends a proposed ISR (or, with the flag, a recovered unclean leadership) to the
        # controller; answers come back through on_alter_partition_result.  None: no
        # controller to ask (a single combined node, where every ISR is the broker itself).
        self.alter_partition: AlterPartitionSink | None = None
        # Whether this broker's session with the controller has lapsed (no heartbeat sent
        # within broker.session.timeout.ms was answered: BrokerLifecycle.session_lapsed).  The
        # controller may have fenced it and elected other leaders, so its leaderships take
        # no write and acknowledge none.  Always False without a controller session.
        self.session_lapsed: Callable[[], bool] = lambda: False
        self._checkpointed_hw = read_high_watermarks(storage, log_dir)
        # A compaction pass under way: its plan and the thread building the new segments.
        self._cleaning: dict[Partition, tuple[LogCleaning, asyncio.Future[None]]] = {}

    # --- lifecycle ----------------------------------------------------------------------------

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def missing_error(self, topic: str, index: int) -> ErrorCode:
        """The answer for a partition ``get`` does not have: KAFKA_STORAGE_ERROR if it was
        assigned here but not opened because the log directory is offline (Kafka's
        ``HostedPartition.Offline``), else UNKNOWN_TOPIC_OR_PARTITION."""
        if (topic, index) in self._not_opened:
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def open_partition(
        self,
        topic: str,
        index: int,
        topic_id: object,
        config: LogConfig,
        *,
        max_message_bytes: int,
        log_append_time: bool = False,
        min_insync_replicas: int = 1,
        registration: Registration | None = None,
    ) -> Partition | None:
        """Open (or reconfigure) a hosted partition and apply its registration.  None when the
        log directory is offline (or goes offline opening it): nothing is opened there."""
        reg = registration or Registration.sole_leader(self.broker_id)
        existing = self.partitions.get((topic, index))
        if not self.directory.online:  # offline partitions stay as they are until the restart
            if existing is None:
                self._not_opened.add((topic, index))
            return existing
        if existing is not None:
            existing.config = config
            existing.max_message_bytes = max_message_bytes
            existing.log_append_time = log_append_time
            existing.min_insync_replicas = min_insync_replicas
            existing.log.update_config(config)
            self.apply_registration(existing, reg)
            return existing
        directory = str(self.log_dir / f"{topic}-{index}")
        try:
            claim_partition_directory(self.storage, directory, topic_id)
            plog = PartitionLog.open(self.storage, directory, config, self.clock_ms())
        except (OSError, KafkaStorageError) as exc:
            self.mark_log_dir_offline(f"opening {topic}-{index} failed: {exc}")
            self._not_opened.add((topic, index))
            return None
        plog.on_offline = self._log_failed
        end = plog.log_end_offset
        checkpointed = self._checkpointed_hw.get((topic, index), plog.log_start_offset)
        high_watermark = max(plog.log_start_offset, min(checkpointed, end))
        # A replica opens as a follower of nobody with the registration's epochs minus one,
        # so that applying the registration is a real transition (to leader or follower).
        role: Role = FollowerState(
            self.broker_id, -1, reg.leader_epoch - 1, reg.partition_epoch, end, high_watermark
        )
        part = Partition(
            topic,
            index,
            topic_id,
            plog,
            config,
            max_message_bytes,
            role,
            log_append_time,
            min_insync_replicas,
            next_offset=end,
            session_lapsed=lambda: self.session_lapsed(),
        )
        self._rebuild_producer_state(part)
        self.partitions[(topic, index)] = part
        self.apply_registration(part, reg)
        return part

    def _rebuild_producer_state(self, part: Partition) -> None:
        """Replay batch headers of the retained log (and the one record of each control
        batch); refill the aborted-transaction indexes recovery emptied."""
        part.producers.clear()
        plog, producers = part.log, part.producers
        restore = plog.rebuilding_txn_indexes
        offset = part.log_start_offset
        while offset < part.log_end_offset:
            chunk = plog.read(offset, 1 << 20, min_one_batch=True)
            if chunk.size_bytes == 0:
                break
            data = plog.read_bytes(chunk)
            for batch in iter_batches(data, allow_truncated_tail=True):
                offset = batch.next_offset
                try:
                    done = learn_producer(producers, batch, seen_ms=batch.max_timestamp)
                except CorruptRecordError as exc:  # a marker we cannot read: not one
                    log.warning("unreadable control batch partition=%s error=%s", part.name, exc)
                    continue
                if restore and (entry := aborted_entry(producers, done)) is not None:
                    plog.restore_aborted_txn(entry)
        plog.end_txn_index_rebuild()

    def expire_producers(self) -> None:
        """Kafka's producer-id expiration task: forget idle idempotent producers."""
        now = self.clock_ms()
        for part in self.partitions.values():
            if gone := part.producers.remove_expired(now, self.producer_id_expiration_ms):
                log.debug("expired producers partition=%s count=%d", part.name, gone)

    def remove_partition(self, topic: str, index: int) -> None:
        self._not_opened.discard((topic, index))
        part = self.partitions.pop((topic, index), None)
        if part is None:
            return
        self._dirty.pop(part, None)
        gone = AppendOutcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        for p in part.pending:
            p.done.resolve(gone)
        part.pending.clear()
        part.fail_delayed(gone)
        part.wake_waiters()
        cleaning = self._cleaning.get(part)
        if cleaning is not None:  # the cleaner's thread reads the files: delete them after it
            cleaning[0].cancel()
            cleaning[1].add_done_callback(lambda _: self._delete_files(part))
        else:
            self._delete_files(part)

    def _delete_files(self, part: Partition) -> None:
        try:
            part.log.delete()
        except KafkaStorageError as exc:  # the files stay; the directory has failed
            log.warning("cannot delete partition=%s error=%s", part.name, exc)
            self.mark_log_dir_offline(f"deleting {part.name} failed: {exc}")
            return
        shutil.rmtree(self.log_dir / part.name, ignore_errors=True)

    # --- log directory failure (KIP-112; broker/log_dir.py) -----------------------------------

    def _log_failed(self, reason: str) -> None:
        """A partition log's I/O failed: the directory goes offline once the failing call has
        unwound (its caller still holds the log and answers its own request)."""
        if not self.directory.online or self._offline_scheduled:
            return
        self._offline_scheduled = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.mark_log_dir_offline(reason)
        else:
            loop.call_soon(self.mark_log_dir_offline, reason)

    def mark_log_dir_offline(self, reason: str) -> None:
        """Take the log directory offline (Kafka's ``ReplicaManager.handleLogDirFailure``):
        every partition in it stops: pending and delayed produces answer KAFKA_STORAGE_ERROR,
        a leader steps down to a follower of nobody, parked fetches wake (and answer
        KAFKA_STORAGE_ERROR), the log closes without another write."""
        if not self.directory.fail(reason):
            return
        outcome = AppendOutcome(
            ErrorCode.KAFKA_STORAGE_ERROR, message=f"log directory {self.log_dir} is offline"
        )
        parts = list(self.partitions.values())
        for part in parts:
            self._abandon(part, outcome, reason)
        if self.on_log_dir_offline is not None:
            self.on_log_dir_offline(parts)

    def _abandon(self, part: Partition, outcome: AppendOutcome, reason: str) -> None:
        self._dirty.pop(part, None)
        cleaning = self._cleaning.get(part)
        if cleaning is not None:
            cleaning[0].cancel()
        part.abandon(self.broker_id, outcome, reason)

    def close(self) -> None:
        """Write what is pending, checkpoint high watermarks, then close every log (each close
        flushes); one partition's failure does not keep the others from closing cleanly."""
        self._flush_all()
        if self.directory.online:
            self.checkpoint_high_watermarks()
        for part in self.partitions.values():
            part.fail_delayed(AppendOutcome(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            part.wake_waiters()
            try:
                part.log.close()
            except LogError as exc:
                log.error("closing partition=%s failed: %s", part.name, exc)
        self.partitions.clear()

    # --- roles --------------------------------------------------------------------------------

    def apply_registration(self, part: Partition, reg: Registration) -> None:
        """Make the role match the registration (Kafka's ``makeLeader`` / ``makeFollower``).
        Registrations older than what the role has seen are ignored (a stale image), and so
        are all registrations of a partition whose log directory is offline."""
        if part.offline:
            return
        role, now = part.role, self.monotonic_ms()
        if reg.leader == self.broker_id:
            if isinstance(role, PartitionState) and role.leader_epoch == reg.leader_epoch:
                role.replicas = reg.replicas
                if role.on_alter_partition_response(reg.isr, reg.leader_epoch, reg.partition_epoch):
                    part.high_watermark_moved()
            else:
                promoted = role.become_leader(
                    reg.replicas, reg.isr, reg.leader_epoch, reg.partition_epoch, now
                )
                if isinstance(promoted, ErrorCode):
                    log.warning("stale leadership ignored partition=%s reg=%s", part.name, reg)
                    return
                part.role = promoted
                part.next_offset = part.log.log_end_offset
                log.debug(
                    "leader partition=%s leader_epoch=%d isr=%s log_end_offset=%d hw=%d",
                    part.name,
                    reg.leader_epoch,
                    sorted(reg.isr),
                    part.log_end_offset,
                    promoted.high_watermark,
                )
                part.high_watermark_moved()
            part.recovering = reg.recovering
            if reg.recovering:
                self._report_recovered(part)
            return
        if isinstance(role, PartitionState):
            demoted = role.become_follower(reg.leader, reg.leader_epoch, reg.partition_epoch)
            if isinstance(demoted, ErrorCode):
                log.warning("stale registration ignored partition=%s reg=%s", part.name, reg)
                return
            self._fail(part, part.pending, AppendOutcome(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            part.pending = []
            self._dirty.pop(part, None)
            part.fail_delayed(AppendOutcome(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            part.role = demoted
            part.wake_waiters()  # parked consumer fetches answer NOT_LEADER_OR_FOLLOWER now
            log.debug(
                "follower partition=%s leader=%d leader_epoch=%d",
                part.name,
                reg.leader,
                reg.leader_epoch,
            )
        elif role.become_follower(reg.leader, reg.leader_epoch, reg.partition_epoch) is not None:
            log.warning("stale registration ignored partition=%s reg=%s", part.name, reg)

    def _report_recovered(self, part: Partition) -> None:
        """A leader elected uncleanly tells the controller at once that it has recovered
        (AlterPartition with LeaderRecoveryState RECOVERED), as Kafka does: KIP-704 leaves
        any recovery of transaction state to later work, and the producer state a follower
        built from what it replicated is its state as leader."""
        role = part.role
        if self.alter_partition is None or not isinstance(role, PartitionState):
            return
        if role.pending_isr is None:
            role.pending_isr = role.isr
            self.alter_partition(part, role, role.isr)

    def on_alter_partition_result(
        self,
        part: Partition,
        proposed: frozenset[int],
        result: ErrorCode | tuple[tuple[int, ...], int, int],
    ) -> None:
        """The controller's answer to a proposal: the committed (isr, leader epoch, partition
        epoch), or an error (the proposal is dropped; the next check proposes again)."""
        role = part.role
        if (
            not isinstance(role, PartitionState)
            or self.partitions.get((part.topic, part.index)) is not part
        ):
            return
        if isinstance(result, ErrorCode):
            log.info("alter partition failed partition=%s error=%s", part.name, result.name)
            role.on_alter_partition_error(result, proposed)
            return
        isr, leader_epoch, partition_epoch = result
        if role.on_alter_partition_response(isr, leader_epoch, partition_epoch):
            part.high_watermark_moved()

    def maybe_shrink_isrs(self) -> int:
        """Kafka's isr-expiration task: propose dropping followers that fell behind."""
        now, proposals = self.monotonic_ms(), 0
        for part in self.partitions.values():
            role = part.role
            if isinstance(role, PartitionState) and len(role.isr) > 1:
                proposed = role.maybe_shrink_isr(now, self.replica_lag_time_max_ms)
                if proposed is not None:
                    log.info(
                        "shrinking isr partition=%s isr=%s proposed=%s",
                        part.name,
                        sorted(role.isr),
                        sorted(proposed),
                    )
                    self._propose(part, role, proposed)
                    proposals += 1
            if part.delayed and len(part.delayed) > 64:
                part.compact_delayed()
        return proposals

    def _propose(self, part: Partition, role: PartitionState, proposed: frozenset[int]) -> None:
        if self.alter_partition is None:
            role.on_alter_partition_error(ErrorCode.NOT_CONTROLLER, proposed)
        else:
            self.alter_partition(part, role, proposed)

    # --- follower side ------------------------------------------------------------------------

    def on_follower_fetch(
        self,
        part: Partition,
        replica_id: int,
        fetch_offset: int,
        current_leader_epoch: int,
        broker_epoch: int,
    ) -> FetchDecision:
        """A follower fetched at ``fetch_offset`` (it holds everything below it)."""
        role = part.role
        if not isinstance(role, PartitionState):
            return FetchDecision(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        epoch = current_leader_epoch if current_leader_epoch >= 0 else None
        decision = role.on_follower_fetch(
            replica_id, fetch_offset, self.monotonic_ms(), epoch, broker_epoch
        )
        if decision.high_watermark_changed:
            part.high_watermark_moved()
        if decision.proposed_isr is not None:
            log.info(
                "expanding isr partition=%s isr=%s proposed=%s",
                part.name,
                sorted(role.isr),
                sorted(decision.proposed_isr),
            )
            self._propose(part, role, decision.proposed_isr)
        return decision

    def append_as_follower(
        self, part: Partition, records: memoryview, leader_high_watermark: int
    ) -> None:
        """Write the leader's batches verbatim, learn their producers, move the high
        watermark.  Raises ``LogError`` (nothing written) for a run the log refuses."""
        role = part.role
        assert isinstance(role, FollowerState), f"{part.name}: follower append on a leader"
        if records:
            now = self.clock_ms()

            def learn(batches: list[AppendedBatch]) -> list[AbortedTxn]:
                aborted = []
                for b in batches:
                    done = learn_producer(part.producers, b, seen_ms=now)
                    if done is not None and (entry := aborted_entry(part.producers, done)):
                        aborted.append(entry)
                return aborted

            part.log.append_as_follower(records, now_ms=now, on_batches=learn)
            role.on_append(part.log.log_end_offset)
            part.next_offset = part.log.log_end_offset
        part.producers.on_high_watermark(role.on_fetch_response(leader_high_watermark))

    def truncate(self, part: Partition, truncation: Truncation) -> None:
        """Cut a follower's divergent tail (KIP-101/279) and everything derived from it."""
        role = part.role
        assert isinstance(role, FollowerState), f"{part.name}: truncating a leader"
        if truncation.offset < part.log.log_end_offset:
            part.log.truncate_to(truncation.offset)
        end = part.log.log_end_offset
        if not part.producers.truncate_after(end):
            self._rebuild_producer_state(part)
        part.next_offset = end
        if end < role.log_end_offset:
            role.on_truncate(end)

    def reset_follower_log(self, part: Partition, start_offset: int) -> None:
        """The leader no longer has our log end offset (retention passed it): start over,
        empty, at the leader's log start offset."""
        role = part.role
        assert isinstance(role, FollowerState)
        part.log.truncate_fully_and_start_at(start_offset)
        part.producers.clear()
        part.next_offset = start_offset
        role.log_end_offset = start_offset
        role.high_watermark = start_offset
        role.check_invariants()

    # --- produce ------------------------------------------------------------------------------

    def append_nowait(
        self, part: Partition, batch: RecordBatch, acks: int = 1
    ) -> AppendOutcome | Deferred[AppendOutcome]:
        """Check one validated batch and queue it; the Deferred resolves once it is written
        (acks 0 and 1) or once every ISR member has it (acks=all)."""
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

    def _refuse_append(self, part: Partition) -> AppendOutcome | None:
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
        self,
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

    def has_ongoing_transaction(
        self, part: Partition, producer_id: int, producer_epoch: int
    ) -> bool:
        """Whether ``producer_id`` at ``producer_epoch`` has a transaction open on ``part``
        (KIP-890: its batches need no verification with the coordinator then)."""
        return part.producers.has_ongoing(producer_id, producer_epoch)

    def _enqueue(
        self, part: Partition, pending: PendingAppend, acks: int
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
        self, part: Partition, dup: BatchMetadata, acks: int
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

    def _flush_all(self) -> None:
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

    def _fail(self, part: Partition, pending: list[PendingAppend], outcome: AppendOutcome) -> None:
        """Nothing of ``pending`` (or queued after it) is in the log: rewind and answer."""
        part.next_offset = part.log.log_end_offset
        if not part.producers.truncate_after(part.next_offset):
            self._rebuild_producer_state(part)
        for p in pending:
            p.done.resolve(outcome)

    def _write(self, part: Partition, pending: list[PendingAppend]) -> AppendOutcome | None:
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

    # --- maintenance --------------------------------------------------------------------------

    def apply_retention(self) -> None:
        now = self.clock_ms()
        for part in list(self.partitions.values()):
            if part.offline:
                continue
            try:
                part.log.flush_if_due(now)
                deleted = part.log.apply_retention(now)
            except LogError as exc:  # this partition is offline; the others go on
                log.error("retention failed partition=%s error=%s", part.name, exc)
                continue
            if deleted:
                log.info(
                    "retention partition=%s deleted_segments=%d log_start_offset=%d",
                    part.name,
                    len(deleted),
                    part.log_start_offset,
                )

    async def clean_logs(self) -> int:
        """One pass of Kafka's log cleaner over the compacted partitions: plan on the loop,
        build the new segments in a worker thread (it reads only inactive segments), swap them
        in on the loop.  Never above the high watermark.  Returns the partitions cleaned."""
        cleaned = 0
        for part in list(self.partitions.values()):
            if (
                part.offline
                or not part.config.compact
                or self.partitions.get((part.topic, part.index)) is not part
            ):
                continue
            try:
                # never above the LSO: an open transaction's outcome is not known yet
                cleaning = part.log.prepare_clean(self.clock_ms(), part.last_stable_offset)
            except LogError as exc:
                log.error("log cleaning failed partition=%s error=%s", part.name, exc)
                continue
            if cleaning is None:
                continue
            build = asyncio.ensure_future(asyncio.to_thread(cleaning.build))
            self._cleaning[part] = (cleaning, build)
            try:
                await asyncio.shield(build)
            except asyncio.CancelledError:
                cleaning.cancel()
                await build  # the thread ends before the log may close
                part.log.complete_clean(cleaning)  # discards the work
                raise
            finally:
                self._cleaning.pop(part, None)
            if self.partitions.get((part.topic, part.index)) is not part:
                continue  # deleted meanwhile (its files go once the build ended)
            try:
                result = part.log.complete_clean(cleaning)
            except LogError as exc:
                log.error("log cleaning failed partition=%s error=%s", part.name, exc)
                continue
            if result is not None:
                cleaned += 1
                log.info(
                    "cleaned partition=%s offsets=%d-%d bytes=%d->%d tombstones_removed=%d",
                    part.name,
                    result.first_offset,
                    result.end_offset,
                    result.bytes_before,
                    result.bytes_after,
                    result.tombstones_removed,
                )
        return cleaned

    def checkpoint_high_watermarks(self) -> None:
        if not self.directory.online:
            return
        entries = [(t, i, p.high_watermark) for (t, i), p in self.partitions.items()]
        try:
            write_high_watermarks(self.storage, self.log_dir, entries)
        except OSError as exc:  # as Kafka: a failed checkpoint takes the directory offline
            self.mark_log_dir_offline(f"high watermark checkpoint failed: {exc}")

    def leaders(self) -> Iterator[Partition]:
        return (p for p in self.partitions.values() if p.is_leader)


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
