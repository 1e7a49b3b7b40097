"""Partitions this broker hosts: appends (coalesced per loop iteration), reads, long-poll
waits, and each partition's replication role.

Theory of operation
-------------------
A :class:`Partition` wraps one :class:`PartitionLog` and a replication *role*: the leader's
:class:`PartitionState` or a follower's :class:`FollowerState` (broker/replication/
partition_state.py holds the rules; this module does the I/O they ask for).  The role follows
the partition's registration in the metadata image (:meth:`ReplicaManager.apply_registration`).

Leader.  Produce handlers call :meth:`ReplicaManager.append_nowait` with a validated batch,
the transaction coordinator :meth:`ReplicaManager.append_marker`; pending appends are written
once per loop iteration (broker/leader_append.py, a mixin of this class, which says how).
acks=all answers wait until the high watermark reaches them; followers' fetches move it
(:meth:`on_follower_fetch`), and so do ISR changes.  The produce handler bounds the wait with
the request's timeout (REQUEST_TIMED_OUT); a lost leadership answers NOT_LEADER_OR_FOLLOWER.

Follower.  The replica fetcher (broker/replication/fetcher.py) appends what the leader sent
verbatim (:meth:`append_as_follower`), truncates divergent tails (:meth:`truncate`), and keeps
producer state from batch headers (and markers), so a follower elected leader deduplicates
retries of batches its predecessor wrote and knows which transactions are open.

Transactions.  Producer state (broker/producer_state.py) opens a transaction at a producer's
first transactional batch and closes it at the marker, on the leader and on followers alike,
and gives the partition its last stable offset; an ABORT marker's entry goes to the
aborted-transaction index of the segment it lands in.  At open, the replay of the log that
rebuilds producer state also refills the indexes recovery emptied.

Maintenance (retention, compaction, producer expiration): broker/log_maintenance.py, a mixin
of this class.

The high watermark is checkpointed per log directory (``replication-offset-checkpoint``,
Kafka's file and format) so a restarted broker does not expose records it cannot know are
committed, nor hide every record until all followers have fetched
(replication/high_watermark_checkpoint.py).

A partition's own state and its delayed produces live in ``broker/partition.py``; the rest
is one class because role changes, leader appends and the follower side all move the same
partitions' offsets, pending appends and dirty set.  Its leader append path and its
maintenance are written in their own modules as mixins, each naming in a protocol what of
the manager it uses.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from broker.deferred import Deferred
from broker.delete_records import LowWatermarkAnswer, answered, requested_offset
from broker.leader_append import LeaderAppends
from broker.log.cleaner import LogCleaning
from broker.log.config import LogConfig
from broker.log.errors import KafkaStorageError, LogError
from broker.log.fetched_batches import AppendedBatch
from broker.log.log import PartitionLog
from broker.log.txn_index import AbortedTxn
from broker.log_dir import LogDirectories, LogDirectory, claim_partition_directory
from broker.log_dir_moves import FutureReplica, LogDirMoves
from broker.log_maintenance import LogMaintenance
from broker.partition import AlterPartitionSink, Role, aborted_entry, learn_producer
from broker.partition import AppendOutcome as AppendOutcome
from broker.partition import Partition as Partition
from broker.partition import Registration as Registration
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
from broker.storage import Storage, join
from kafka_protocol.clock import monotonic_ms, wall_ms
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.record_batch import iter_batches

log = logging.getLogger("broker.replica_manager")


class ReplicaManager(LeaderAppends, LogMaintenance, LogDirMoves):
    def __init__(
        self,
        storage: Storage,
        log_dir: Path | LogDirectories,
        *,
        broker_id: int = 0,
        clock_ms: Callable[[], int] | None = None,
        monotonic_clock_ms: Callable[[], int] = monotonic_ms,
        replica_lag_time_max_ms: int = 30_000,
        producer_id_expiration_ms: int = 86_400_000,
        log_dir_id: uuid.UUID | None = None,
    ) -> None:
        self.storage = storage
        # The log directories (broker/log_dir.py, ``log.dirs``): their ids, and whether an I/O
        # error took one offline; ``on_log_dir_offline`` hears of the partitions that went
        # with it.  Each partition lives in one of them (``Partition.log_dir``).
        if isinstance(log_dir, Path):
            log_dir = LogDirectories([LogDirectory(str(log_dir), log_dir_id or uuid.uuid4())])
        self.log_dirs = log_dir
        self.on_log_dir_offline: Callable[[list[Partition]], None] | None = None
        # Told when a replica moved to another directory (AlterReplicaLogDirs).
        self.on_log_dir_moved: Callable[[Partition], None] | None = None
        self._offline_scheduled: set[str] = set()  # paths of directories going offline
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
        self._checkpointed_hw: dict[tuple[str, int], int] = {}
        for d in self.log_dirs:
            self._checkpointed_hw.update(read_high_watermarks(storage, Path(d.path)))
        # A compaction pass under way: its plan and the thread building the new segments.
        self._cleaning: dict[Partition, tuple[LogCleaning, asyncio.Future[None]]] = {}
        # Replicas being moved to another log directory (log_dir_moves.py).
        self.moving: dict[Partition, FutureReplica] = {}
        # Where partitions not hosted yet go when they come (AlterReplicaLogDirs; bounded).
        self.preferred_dirs: dict[tuple[str, int], LogDirectory] = {}
        self.remove_leftovers()

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
        """Open (or reconfigure) a hosted partition and apply its registration.  None when its
        log directory is offline (or goes offline opening it): nothing is opened there.  A new
        partition goes to the online directory with the fewest partitions."""
        reg = registration or Registration.sole_leader(self.broker_id)
        existing = self.partitions.get((topic, index))
        if existing is not None and existing.offline:  # stays as it is until the restart
            return existing
        if existing is not None:
            existing.config = config
            existing.max_message_bytes = max_message_bytes
            existing.log_append_time = log_append_time
            existing.min_insync_replicas = min_insync_replicas
            existing.log.update_config(config)
            self.apply_registration(existing, reg)
            return existing
        log_dir = self._log_dir_for(
            f"{topic}-{index}", self.preferred_dirs.pop((topic, index), None)
        )
        if log_dir is None or not log_dir.online:
            self._not_opened.add((topic, index))
            return None
        directory = join(log_dir.path, f"{topic}-{index}")
        try:
            claim_partition_directory(self.storage, directory, topic_id)
            plog = PartitionLog.open(self.storage, directory, config, self.clock_ms())
        except (OSError, KafkaStorageError) as exc:
            self.mark_log_dir_offline(log_dir, f"opening {topic}-{index} failed: {exc}")
            self._not_opened.add((topic, index))
            return None
        plog.on_offline = lambda reason: self._log_failed(log_dir, reason)
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
            log_dir=log_dir,
        )
        self._rebuild_producer_state(part)
        self.partitions[(topic, index)] = part
        self.apply_registration(part, reg)
        return part

    def _log_dir_for(self, name: str, preferred: LogDirectory | None) -> LogDirectory | None:
        """The directory holding partition directory ``name`` (one with its files, even
        offline: it is not opened elsewhere), else where a new one goes: the one an
        AlterReplicaLogDirs asked for before it was hosted here, if online."""
        for d in self.log_dirs:
            if self.storage.exists(join(d.path, name)):
                return d
        if preferred is not None and preferred.online:
            return preferred
        load: dict[str, int] = {}
        for part in self.partitions.values():
            load[part.log_dir.path] = load.get(part.log_dir.path, 0) + 1
        return self.log_dirs.placement(load)

    def _rebuild_producer_state(self, part: Partition) -> None:
        """Replay batch headers of the retained log (and the one record of each control
        batch); refill the aborted-transaction indexes recovery emptied."""
        part.producers.clear()
        plog, producers = part.log, part.producers
        restore = plog.rebuilding_txn_indexes
        offset = part.log_start_offset
        with producers.replaying():
            while offset < part.log_end_offset:
                chunk = plog.read(offset, 1 << 20, min_one_batch=True)
                if chunk.size_bytes == 0:
                    break
                for batch in iter_batches(plog.read_bytes(chunk), allow_truncated_tail=True):
                    offset = batch.next_offset
                    try:
                        done = learn_producer(producers, batch, seen_ms=batch.max_timestamp)
                    except CorruptRecordError as exc:  # a marker we cannot read: not one
                        log.warning(
                            "unreadable control batch partition=%s error=%s", part.name, exc
                        )
                        continue
                    if restore and (entry := aborted_entry(producers, done)) is not None:
                        plog.restore_aborted_txn(entry)
        plog.end_txn_index_rebuild()

    def remove_partition(self, topic: str, index: int) -> None:
        self._not_opened.discard((topic, index))
        part = self.partitions.pop((topic, index), None)
        if part is None:
            return
        self.abandon_move(part, "partition deleted")
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
            self.mark_log_dir_offline(part.log_dir, f"deleting {part.name} failed: {exc}")
            return
        shutil.rmtree(Path(part.log_dir.path) / part.name, ignore_errors=True)

    # --- log directory failure (KIP-112; broker/log_dir.py) -----------------------------------

    def _log_failed(self, log_dir: LogDirectory, reason: str) -> None:
        """A partition log's I/O failed: its directory goes offline once the failing call has
        unwound (its caller still holds the log and answers its own request)."""
        if not log_dir.online or log_dir.path in self._offline_scheduled:
            return
        self._offline_scheduled.add(log_dir.path)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.mark_log_dir_offline(log_dir, reason)
        else:
            loop.call_soon(self.mark_log_dir_offline, log_dir, reason)

    def mark_log_dir_offline(self, log_dir: LogDirectory, reason: str) -> None:
        """Take a log directory offline (Kafka's ``ReplicaManager.handleLogDirFailure``):
        every partition in it stops: pending and delayed produces answer KAFKA_STORAGE_ERROR,
        a leader steps down to a follower of nobody, parked fetches wake (and answer
        KAFKA_STORAGE_ERROR), the log closes without another write.  The partitions of the
        other directories go on."""
        if not log_dir.fail(reason):
            return
        outcome = AppendOutcome(
            ErrorCode.KAFKA_STORAGE_ERROR, message=f"log directory {log_dir.path} is offline"
        )
        for part, future in list(self.moving.items()):
            if future.dest is log_dir or part.log_dir is log_dir:
                self.abandon_move(part, f"log directory {log_dir.path} is offline")
        parts = [p for p in self.partitions.values() if p.log_dir is log_dir]
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
        for part in list(self.moving):  # not resumed after a restart: start it again
            self.abandon_move(part, "the broker is stopping")
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
                role.update_replicas(reg.replicas)
                if role.on_alter_partition_response(reg.isr, reg.leader_epoch, reg.partition_epoch):
                    part.high_watermark_moved()
                part.low_watermark_maybe_moved()  # the ISR may have lost a follower
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
        part.low_watermark_maybe_moved()

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
            if (part.delayed and len(part.delayed) > 64) or len(part.low_watermark_waiters) > 64:
                part.compact_delayed()
        return proposals

    def _propose(self, part: Partition, role: PartitionState, proposed: frozenset[int]) -> None:
        if self.alter_partition is None:
            role.on_alter_partition_error(ErrorCode.NOT_CONTROLLER, proposed)
        else:
            self.alter_partition(part, role, proposed)

    # --- DeleteRecords (broker/delete_records.py) ---------------------------------------------

    def delete_records(self, part: Partition, offset: int) -> Deferred[LowWatermarkAnswer]:
        """Move the leader's log start offset up to ``offset`` (-1: the high watermark),
        delete the segments wholly below it, and answer once the in-sync followers followed
        (Kafka's ``deleteRecordsOnLeader``).  An answer with an error changed nothing."""
        role = part.role
        if part.offline:
            return answered(ErrorCode.KAFKA_STORAGE_ERROR)
        if not isinstance(role, PartitionState):
            return answered(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if not part.config.delete:
            return answered(ErrorCode.POLICY_VIOLATION)
        wanted = requested_offset(offset, role.high_watermark)
        if isinstance(wanted, ErrorCode):
            return answered(wanted)
        if wanted > part.log_start_offset:
            try:
                part.log.delete_records_before(wanted)
                deleted = part.log.apply_retention(self.clock_ms())
            except LogError as exc:
                return answered(exc.error_code)
            log.info(
                "deleted records partition=%s log_start_offset=%d deleted_segments=%d",
                part.name,
                part.log_start_offset,
                len(deleted),
            )
            part.wake_waiters()  # parked follower fetches carry the new log start now
        return part.wait_for_low_watermark(wanted)

    # --- follower side ------------------------------------------------------------------------

    def on_follower_fetch(
        self,
        part: Partition,
        replica_id: int,
        fetch_offset: int,
        current_leader_epoch: int,
        broker_epoch: int,
        log_start_offset: int = -1,
    ) -> FetchDecision:
        """A follower fetched at ``fetch_offset`` (it holds everything below it); its log
        starts at ``log_start_offset`` (Fetch v5+, -1 before: DeleteRecords' low watermark)."""
        role = part.role
        if not isinstance(role, PartitionState):
            return FetchDecision(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        epoch = current_leader_epoch if current_leader_epoch >= 0 else None
        decision = role.on_follower_fetch(
            replica_id, fetch_offset, self.monotonic_ms(), epoch, broker_epoch
        )
        if decision.error is None and log_start_offset >= 0:
            part.on_follower_log_start(replica_id, log_start_offset)
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
        before = role.high_watermark
        part.producers.on_high_watermark(role.on_fetch_response(leader_high_watermark))
        if role.high_watermark != before:
            part.wake_waiters()  # consumers long-polling this follower (KIP-392)

    def truncate(self, part: Partition, truncation: Truncation) -> None:
        """Cut a follower's divergent tail (KIP-101/279) and everything derived from it."""
        role = part.role
        assert isinstance(role, FollowerState), f"{part.name}: truncating a leader"
        if truncation.offset < part.log.log_end_offset:
            part.log.truncate_to(truncation.offset)
            self.truncate_future(part, truncation.offset)
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
        self.truncate_future(part, start_offset)
        part.producers.clear()
        part.next_offset = start_offset
        role.log_end_offset = start_offset
        role.high_watermark = start_offset
        role.check_invariants()

    def checkpoint_high_watermarks(self) -> None:
        """One ``replication-offset-checkpoint`` per online directory, of its partitions."""
        for log_dir in self.log_dirs:
            if not log_dir.online:
                continue
            entries = [
                (t, i, p.high_watermark)
                for (t, i), p in self.partitions.items()
                if p.log_dir is log_dir
            ]
            try:
                write_high_watermarks(self.storage, Path(log_dir.path), entries)
            except OSError as exc:  # as Kafka: a failed checkpoint takes the directory offline
                self.mark_log_dir_offline(log_dir, f"high watermark checkpoint failed: {exc}")

    def leaders(self) -> Iterator[Partition]:
        return (p for p in self.partitions.values() if p.is_leader)
