"""The group coordinator's runtime: which ``__consumer_offsets`` partitions this broker
coordinates, loading them, and writing to them (Kafka's ``GroupMetadataManager``).

Theory of operation
-------------------
A broker coordinates the groups of every ``__consumer_offsets`` partition it leads.  Which
partitions those are, their loads and their acks=all appends are the machinery it shares with
the transaction coordinator (broker/coordinator_partitions.py, which says how they work): here
a load replays every record of the partition's log into an :class:`OffsetStore` (and the
groups' metadata), and losing the leadership drops the partition's state, its classic groups
too.

Every change is a record appended to the partition with acks=all and applied to the store only
once committed (:meth:`GroupCoordinator.append`), so what the coordinator answers is what the
replicated log holds, and a new coordinator after a failover loads exactly that.  An append
that fails answers Kafka's mapped errors (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, ...:
``commits.py``) and changes nothing.

The topic is created on first use (FindCoordinator; broker/internal_topics.py) with
``offsets.topic.num.partitions`` partitions, replication factor
``min(offsets.topic.replication.factor, live brokers)`` and ``cleanup.policy=compact``.
Every ``offsets.retention.check.interval.ms`` expired offsets are removed (Kafka's
``cleanupGroupMetadata``; the rules are ``offsets.py``'s and ``offset_expiry_condition``'s),
and so is every empty group left without offsets; offsets of deleted topics are removed too.
All of it by tombstones, so a new coordinator after a failover loads the same absence.

Transactional offsets (TxnOffsetCommit, KIP-98/KIP-447) are appended as a transactional batch
of the producer (its id and epoch, no sequence, acks=all) and held pending per producer id
(``offsets.py``) until the transaction's COMMIT or ABORT marker reaches the partition: the
WriteTxnMarkers handler then calls :meth:`GroupCoordinator.complete_transaction` (a
``TransactionMarkerListener``), and a load replays the marker's control batch the same way.
The first one of a transaction on the partition is verified with the transaction coordinator
(KIP-890) under the producer's verification guard, taken before the question and checked by
the append, as in the produce path: a marker of that producer written meanwhile (the
transaction vouched for has ended) refuses it INVALID_TXN_STATE, opening no hanging transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from broker.controller_channel import ControllerChannel, NewTopic
from broker.coordinator.classic_groups import ClassicGroups
from broker.coordinator.commits import OffsetCommit, Producer, coordinator_error
from broker.coordinator.consumer_groups import ConsumerGroups
from broker.coordinator.offsets import (
    NO_PRODUCER_ID,
    CommittedOffset,
    ExpiryCondition,
    OffsetStore,
    TopicPartition,
)
from broker.coordinator.owned import OwnedPartition
from broker.coordinator.records import (
    OFFSETS_TOPIC,
    encode_group,
    encode_offset,
    partition_for,
)
from broker.coordinator_partitions import CoordinatorPartitions
from broker.group.classic_member import GroupConfig
from broker.group.consumer import ConsumerGroupConfig
from broker.group.consumer_member import TopicId
from broker.group.consumer_records import Record, StoredConsumerGroups
from broker.internal_topics import InternalTopicCreation
from broker.partition import AppendOutcome, Partition
from broker.producer_state import VerificationGuard
from broker.replica_manager import ReplicaManager
from broker.transaction.interfaces import TransactionVerifier
from kafka_protocol.coordinator import OffsetCommitValue
from kafka_protocol.errors import ErrorCode
from kafka_protocol.record_batch import NO_SEQUENCE, RecordBatch, SimpleRecord, build_batch
from metadata_log.image import ClusterImage, ConfigResource, ConfigResourceType

log = logging.getLogger("broker.coordinator")
MAX_RECORDS_PER_BATCH = 1000  # tombstone batches for expiry are split into batches this large


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    num_partitions: int = 50  # offsets.topic.num.partitions
    replication_factor: int = 3  # offsets.topic.replication.factor (capped at live brokers)
    segment_bytes: int = 100 * 1024 * 1024  # offsets.topic.segment.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    commit_timeout_ms: int = 5_000  # offsets.commit.timeout.ms
    metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    groups: GroupConfig = field(default_factory=GroupConfig)  # group.* settings
    consumer_groups: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)


class GroupCoordinator(CoordinatorPartitions[OwnedPartition]):
    """Kafka's ``GroupCoordinator`` and ``GroupMetadataManager``: it appends through the replica
    manager, reads where the topic's partitions live from the current metadata image, and asks
    the controller to create the topic."""

    def __init__(
        self,
        replicas: ReplicaManager,
        controller: ControllerChannel,
        image: Callable[[], ClusterImage],
        config: CoordinatorConfig,
        clock_ms: Callable[[], int],
    ) -> None:
        creation = InternalTopicCreation(
            controller, image, config.replication_factor, self._define_offsets_topic
        )
        super().__init__(
            replicas,
            image,
            clock_ms,
            OFFSETS_TOPIC,
            partition_for,
            creation,
            config.commit_timeout_ms,
            log,
        )
        self.controller = controller
        self.config = config
        self._expiry: asyncio.Task[None] | None = None
        self.classic = ClassicGroups(self, config.groups)
        self.consumer = ConsumerGroups(
            self, self.classic, config.consumer_groups, self.topic_of, self.group_configs
        )
        self.classic.is_consumer_group = lambda group_id: self.consumer.get(group_id) is not None
        # KIP-890: asked before a TxnOffsetCommit's append whether the partition is in the
        # producer's transaction (the broker sets its transaction coordinator here)
        self.verifier: TransactionVerifier | None = None

    def topic_of(self, name: str) -> tuple[TopicId, int] | None:
        """A topic's id and partition count in the current metadata image."""
        topic = self.image().topics.get(name)
        return None if topic is None else (topic.topic_id, len(topic.partitions))

    def group_configs(self, group_id: str) -> Mapping[str, str]:
        """A group's configs (GROUP resource, KIP-848) in the current metadata image."""
        return self.image().configs.get(ConfigResource(ConfigResourceType.GROUP, group_id), {})

    # --- where groups live --------------------------------------------------------------------

    def groups_with_offsets(self) -> set[str]:
        """Groups with committed offsets in the loaded partitions."""
        return {g for owned in self.owned.values() if owned.loaded for g in owned.offsets.groups()}

    def _define_offsets_topic(self, replication_factor: int) -> NewTopic:
        return NewTopic(
            OFFSETS_TOPIC,
            self.config.num_partitions,
            replication_factor,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.config.segment_bytes),
                "compression.type": "producer",
            },
        )

    # --- partition ownership ------------------------------------------------------------------

    def new_partition(self, part: Partition) -> OwnedPartition:
        return OwnedPartition(part, part.leader_epoch)

    def replay_batch(self, owned: OwnedPartition, batch: RecordBatch) -> int:
        return owned.replay_batch(batch)

    def reset(self, owned: OwnedPartition) -> None:
        owned.offsets, owned.groups = OffsetStore(), {}  # markers_while_loading stay
        owned.consumer_groups = StoredConsumerGroups()

    def on_loaded(self, owned: OwnedPartition, records: int, elapsed_ms: int) -> None:
        for producer_id, commit in owned.markers_while_loading:
            owned.offsets.complete(producer_id, commit)  # markers written after the load's end
        owned.markers_while_loading.clear()
        self.classic.on_loaded(owned)
        self.consumer.on_loaded(owned)
        log.log(
            logging.INFO if records else logging.DEBUG,
            "loaded %s records=%d groups=%d in %d ms",
            owned.part.name,
            records,
            len(set(owned.offsets.groups()) | set(owned.groups)),
            elapsed_ms,
        )

    def on_unloaded(self, owned: OwnedPartition) -> None:
        if owned.loaded:
            self.classic.on_unloaded(owned)
            self.consumer.on_unloaded(owned)
        log.info("unloaded %s groups=%d", owned.part.name, len(owned.groups))

    def complete_transaction(
        self, offsets_partition: int, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """``TransactionMarkerListener``: the COMMIT or ABORT marker of ``producer_id`` is
        committed in ``offsets_partition``; its pending offsets there become visible or go.
        Nothing happens for a partition this broker does not lead (its next leader loads the
        marker); one still loading applies it once loaded (the marker lies beyond what the
        load reads, or the load applied it already and this finds nothing pending)."""
        owned = self.owned.get(offsets_partition)
        if owned is None:
            return
        if not owned.loaded:
            owned.markers_while_loading.append((producer_id, commit))
            return
        moved = owned.offsets.complete(producer_id, commit)
        log.debug(
            "%s transaction of producer %d (epoch %d) in %s: %d offsets",
            "committed" if commit else "aborted",
            producer_id,
            producer_epoch,
            owned.part.name,
            moved,
        )

    # --- appends ------------------------------------------------------------------------------

    async def append(
        self,
        owned: OwnedPartition,
        records: Sequence[tuple[bytes, bytes | None]],
        producer: Producer | None = None,
        verification_guard: VerificationGuard | None = None,
    ) -> ErrorCode:
        """Append ``records`` with acks=all (a transactional batch of ``producer`` if given,
        with the guard taken before its verification, if any); once committed, replay them
        into the state."""
        if not self._current(owned):
            return ErrorCode.NOT_COORDINATOR
        simple = [SimpleRecord(value, key) for key, value in records]
        if producer is None:
            batch = build_batch(simple, now_ms=self.clock_ms())
        else:
            batch = build_batch(
                simple,
                now_ms=self.clock_ms(),
                producer_id=producer.producer_id,
                producer_epoch=producer.producer_epoch,
                base_sequence=NO_SEQUENCE,
                transactional=True,
            )
        producer_id = NO_PRODUCER_ID if producer is None else producer.producer_id

        def replay(done: AppendOutcome) -> None:
            if done.error is ErrorCode.NONE and self._current(owned):
                for i, (key, value) in enumerate(records):
                    owned.replay(key, value, done.base_offset + i, producer_id)

        outcome = await self.append_batch(
            owned, RecordBatch(memoryview(batch)), verification_guard, replay
        )
        if outcome.error is not ErrorCode.NONE:
            return coordinator_error(outcome.error, transactional=producer is not None)
        return ErrorCode.NONE

    # --- offsets ------------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        commits: Sequence[OffsetCommit],
        expire_timestamp_ms: int = -1,
        api_version: int = 9,
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit: every partition's outcome (the request-level errors are repeated per
        partition, as Kafka answers them).  A member of a KIP-848 group is checked by its member
        epoch, and must use v9+ (``api_version``), as Kafka's ``validateOffsetCommit``."""
        keys = [(c.topic, c.partition) for c in commits]
        owned = self.owned_for(group_id)
        if isinstance(owned, ErrorCode):
            return dict.fromkeys(keys, owned)
        consumer_group = self.consumer.get(group_id)
        if consumer_group is not None:  # member epochs (KIP-848)
            rejected = consumer_group.validate_offset_commit(member_id, generation, api_version)
        else:
            rejected = self.classic.check_commit(group_id, member_id, generation, instance_id)
        if rejected is not None:
            return dict.fromkeys(keys, rejected)
        return await self._commit(owned, group_id, commits, expire_timestamp_ms, None)

    async def commit_transactional_offsets(
        self,
        transactional_id: str,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        producer: Producer,
        commits: Sequence[OffsetCommit],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: the offsets appended as a transactional batch of ``producer``,
        pending until its transaction's marker (:meth:`complete_transaction`).  The member
        and generation are checked only when given (v3+, KIP-447); the transaction
        coordinator is asked first whether the partition is in the transaction (KIP-890,
        Kafka's ``scheduleTransactionalWriteOperation``), its refusal answered as is, and the
        producer's verification guard, taken before the question, goes with the append."""
        keys = [(c.topic, c.partition) for c in commits]
        owned = self.owned_for(group_id)
        if isinstance(owned, ErrorCode):
            return dict.fromkeys(keys, owned)
        rejected = self.classic.check_txn_commit(group_id, member_id, generation, instance_id)
        if rejected is not None:
            return dict.fromkeys(keys, rejected)
        guard = None
        if self.verifier is not None and not self.in_transaction(owned, producer):
            guard = self.verification_guard(owned, producer)
            offsets_partition = (OFFSETS_TOPIC, owned.part.index)
            verdict = await self.verifier.verify(
                transactional_id,
                producer.producer_id,
                producer.producer_epoch,
                [offsets_partition],
            )
            error = verdict.get(offsets_partition, ErrorCode.NONE)
            if error is ErrorCode.PRODUCER_FENCED:  # as Kafka's AddPartitionsToTxnManager
                error = ErrorCode.INVALID_PRODUCER_EPOCH
            if error is not ErrorCode.NONE:
                return dict.fromkeys(keys, coordinator_error(error, transactional=True))
            if not self._current(owned):
                return dict.fromkeys(keys, ErrorCode.NOT_COORDINATOR)
        # no await from here to the append: the guard is checked as the batch is queued
        return await self._commit(owned, group_id, commits, -1, producer, guard)

    def in_transaction(self, owned: OwnedPartition, producer: Producer) -> bool:
        """Whether the producer's transaction is open on the partition already (its first
        batch there was verified: Kafka verifies no more)."""
        return self.replicas.has_ongoing_transaction(
            owned.part, producer.producer_id, producer.producer_epoch
        )

    def verification_guard(self, owned: OwnedPartition, producer: Producer) -> VerificationGuard:
        """The producer's guard on the partition, taken before asking the transaction
        coordinator (Kafka's ``maybeStartTransactionVerificationForPartition``)."""
        return self.replicas.verification_guard(owned.part, producer.producer_id)

    async def _commit(
        self,
        owned: OwnedPartition,
        group_id: str,
        commits: Sequence[OffsetCommit],
        expire_timestamp_ms: int,
        producer: Producer | None,
        verification_guard: VerificationGuard | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        now = self.clock_ms()
        results: dict[TopicPartition, ErrorCode] = {}
        records = []
        for c in commits:
            topic = self.image().topics.get(c.topic)
            if topic is None or c.partition not in topic.partitions:
                results[(c.topic, c.partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif (
                c.metadata is not None and len(c.metadata.encode()) > self.config.metadata_max_bytes
            ):
                results[(c.topic, c.partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                value = OffsetCommitValue(
                    offset=c.offset,
                    leader_epoch=c.leader_epoch,
                    metadata=c.metadata or "",
                    commit_timestamp=now,
                    expire_timestamp=expire_timestamp_ms,
                )
                records.append(encode_offset(group_id, c.topic, c.partition, value))
                results[(c.topic, c.partition)] = ErrorCode.NONE
        if records:
            pending = [(group_id, tp) for tp, e in results.items() if e is ErrorCode.NONE]
            owned.pending_commits.update(pending)
            try:
                error = await self.append(owned, records, producer, verification_guard)
            finally:
                owned.pending_commits.subtract(pending)
                owned.pending_commits += Counter()  # drops the zeros
            if error is not ErrorCode.NONE:
                for tp, e in results.items():
                    if e is ErrorCode.NONE:
                        results[tp] = error
        return results

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
        require_stable: bool = False,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> dict[TopicPartition, CommittedOffset | ErrorCode | None] | ErrorCode:
        """OffsetFetch: the committed offset of each partition (None: none committed); all of
        the group's when ``partitions`` is None.  A member of a KIP-848 group (OffsetFetch v9
        gives ``member_id`` and ``member_epoch``) is checked as Kafka's ``validateOffsetFetch``
        does: UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH.  With ``require_stable`` (v7+, KIP-447) a
        partition with a pending transactional offset is answered UNSTABLE_OFFSET_COMMIT (the
        client retries until the transaction completes)."""
        owned = self.owned_for(group_id)
        if isinstance(owned, ErrorCode):
            return owned
        consumer_group = self.consumer.get(group_id)
        if consumer_group is not None:  # OffsetFetch v9+: a member's id and epoch (KIP-848)
            rejected = consumer_group.validate_offset_fetch(member_id, member_epoch)
            if rejected is not None:
                return rejected
        store = owned.offsets
        found: dict[TopicPartition, CommittedOffset | ErrorCode | None]
        if partitions is None:
            found = dict(store.offsets(group_id))
        else:
            found = {tp: store.get(group_id, tp) for tp in partitions}
        if require_stable:
            for tp in found:
                if store.has_pending(group_id, tp):
                    found[tp] = ErrorCode.UNSTABLE_OFFSET_COMMIT
        return found

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups: an empty group's record and offsets are tombstoned, and so are the
        offsets its open transactions hold pending (Kafka's ``deleteAllOffsets``)."""
        consumer_error = await self.consumer.delete(group_id)
        if consumer_error is not None and consumer_error is not ErrorCode.NONE:
            return consumer_error
        error, owned = self.classic.delete(group_id)
        if consumer_error is ErrorCode.NONE and error is ErrorCode.GROUP_ID_NOT_FOUND:
            error = ErrorCode.NONE  # the consumer group's records are gone; now its offsets
        if error is not ErrorCode.NONE or owned is None:
            return error
        committed = owned.offsets.offsets(group_id)
        doomed = set(committed) | owned.offsets.pending_partitions(group_id)
        records = [encode_offset(group_id, t, p, None) for t, p in sorted(doomed)]
        records.append(encode_group(group_id, None))
        return await self.append(owned, records)

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: offsets of partitions the group does not consume (its members'
        subscriptions) are tombstoned; GROUP_SUBSCRIBED_TO_TOPIC for the others."""
        owned = self.owned_for(group_id)
        if isinstance(owned, ErrorCode):
            return owned, {}
        found = self.classic.get(group_id)
        if (
            isinstance(found, ErrorCode)
            and self.consumer.get(group_id) is None
            and not owned.offsets.has_offsets(group_id)
        ):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        subscribed = self.classic.subscribed_topics(group_id)
        consumer_group = self.consumer.get(group_id)
        if consumer_group is not None:
            subscribed = consumer_group.subscribed_topics()
        errors: dict[TopicPartition, ErrorCode] = {}
        doomed = []
        for tp in partitions:
            if tp[0] in subscribed:
                errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                errors[tp] = ErrorCode.NONE
                if owned.offsets.get(group_id, tp) is not None or owned.offsets.has_pending(
                    group_id, tp
                ):
                    doomed.append(encode_offset(group_id, tp[0], tp[1], None))
        if doomed:
            error = await self.append(owned, doomed)
            if error is not ErrorCode.NONE:
                return error, {}
        return ErrorCode.NONE, errors

    # --- housekeeping -------------------------------------------------------------------------

    def start(self) -> None:
        self._expiry = asyncio.get_running_loop().create_task(
            self._expire_loop(), name="offset-expiry"
        )

    async def stop(self) -> None:
        await self.stop_partitions(self._expiry)

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.retention_check_interval_ms / 1000)
            await self.expire_offsets()

    async def expire_offsets(self) -> int:
        """Kafka's ``cleanupGroupMetadata``: tombstone the expired offsets of every loaded
        partition, and the empty groups left without offsets; the count of offsets removed."""
        removed = 0
        for owned in list(self.owned.values()):
            while owned.loaded and self._current(owned):
                # chosen and appended with no await between: a commit that comes later is
                # appended after these tombstones, one already appended is pending
                offsets, groups = self._expired(owned)
                if not offsets and not groups:
                    break
                tombstones = [encode_offset(g, t, p, None) for g, (t, p) in offsets]
                tombstones += [record for _, records in groups for record in records]
                if await self.append(owned, tombstones) is not ErrorCode.NONE:
                    break
                removed += len(offsets)
                log.info(
                    "expired %d offsets and %d empty groups of %s",
                    len(offsets),
                    len(groups),
                    owned.part.name,
                )
                if len(offsets) + len(groups) < MAX_RECORDS_PER_BATCH:
                    break
        return removed

    def _expired(
        self, owned: OwnedPartition
    ) -> tuple[list[tuple[str, TopicPartition]], list[tuple[str, list[Record]]]]:
        """Up to a batch of expired offsets, then the empty groups they leave without any
        (those go Dead here: Kafka's ``maybeDeleteGroup``), each with its tombstones."""
        pending = owned.pending_commits
        offsets = owned.offsets.expired(
            self.clock_ms(), self.config.retention_ms, self._expiry_condition, pending
        )[:MAX_RECORDS_PER_BATCH]
        gone = Counter(group for group, _ in offsets)
        groups: list[tuple[str, list[Record]]] = []
        empty = [(g, True) for g in self.classic.empty_groups(owned)]
        empty += [(g, False) for g in self.consumer.empty_groups(owned)]
        for group_id, classic in empty:
            if len(offsets) + len(groups) >= MAX_RECORDS_PER_BATCH:
                break
            left = len(owned.offsets.offsets(group_id)) - gone[group_id]
            if (
                left == 0
                and not any(g == group_id for g, _ in pending)
                and not owned.offsets.has_open_transaction(group_id)  # Kafka keeps it then
            ):
                if not classic:
                    groups.append((group_id, self.consumer.take_deleted(group_id)))
                elif self.classic.delete(group_id)[0] is ErrorCode.NONE:
                    groups.append((group_id, [encode_group(group_id, None)]))
        return offsets, groups

    def _expiry_condition(self, group_id: str) -> ExpiryCondition | None:
        """A consumer group's offsets expire from their commit, except for the topics its
        members subscribe to (Kafka's ``ConsumerGroup.offsetExpirationCondition``)."""
        consumer_group = self.consumer.get(group_id)
        if consumer_group is not None:
            return ExpiryCondition(subscribed=frozenset(consumer_group.subscribed_topics()))
        return self.classic.expiry_condition(group_id)

    async def remove_offsets_of_topics(self, topics: Sequence[str]) -> int:
        """Offsets of deleted topics go (Kafka's ``cleanupGroupMetadata`` on topic deletion)."""
        removed = 0
        for owned in list(self.owned.values()):
            if owned.loaded:
                removed += await self._tombstone(owned, owned.offsets.of_topics(topics), "deleted")
        return removed

    async def _tombstone(
        self, owned: OwnedPartition, doomed: Sequence[tuple[str, TopicPartition]], why: str
    ) -> int:
        done = 0
        for i in range(0, len(doomed), MAX_RECORDS_PER_BATCH):
            chunk = doomed[i : i + MAX_RECORDS_PER_BATCH]
            records = [encode_offset(g, t, p, None) for g, (t, p) in chunk]
            if await self.append(owned, records) is not ErrorCode.NONE:
                break
            done += len(chunk)
        if done:
            log.info("removed %d %s offsets from %s", done, why, owned.part.name)
        return done
