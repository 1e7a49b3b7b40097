"""Deltas: replay metadata records on top of an image (Kafka's ``MetadataDelta``).

Theory of operation
-------------------
``MetadataDelta(image)`` starts empty. ``replay(record)`` routes each record to the sub-delta of
its kind, created on first use (topics, configs, brokers, features), which remembers only what
the records changed. ``apply()`` builds the next :class:`ClusterImage`, sharing every untouched
part of the old one. The same records replayed on the same image always give the same image:
replay uses no clock, no randomness and no unordered iteration that could leak into the result.

Replay never raises. A record that does not fit the image (a PartitionRecord of an unknown
topic, a FenceBrokerRecord with a stale broker epoch, a TopicRecord whose name is taken, the
removal of an ACL or SCRAM credential that does not exist, an ACL with a filter-only enum value)
is ignored and counted in ``ignored_records``; Kafka throws there, which on a follower halts the
node. Record types the image does not model (delegation tokens, ...) only advance the
offset. ACLs are keyed by their record's id (an AccessControlEntryRecord with a known id
replaces that ACL, as Kafka's ``AclsDelta`` does); SCRAM credentials by (user, mechanism).

Special encodings (PartitionChangeRecord): leader ``-1`` means no leader and ``-2`` means
unchanged; null ``isr``/``replicas``/``removing_replicas``/``adding_replicas``/ELR lists mean
unchanged. ConfigRecord with a null value deletes the key. FeatureLevelRecord level 0 removes
the feature. RemoveTopicRecord also deletes the topic's config overrides. ProducerIdsRecord
moves the producer-id high-water mark forward (never back).

``local_changes(broker_id)`` answers, for one broker, which partitions it now leads, which it
follows, and which replicas it must delete (Kafka's ``TopicsDelta.localChanges``).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from kafka_protocol.metadata import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from metadata_log.client_quotas import ClientQuotasDelta
from metadata_log.image import (
    BrokerRegistration,
    ClusterImage,
    ConfigResource,
    ConfigResourceType,
    PartitionImage,
    TopicImage,
    TopicPartition,
    TopicsImage,
    frozen_map,
    overlay,
)
from metadata_log.records import MetadataRecord
from metadata_log.security_delta import AclsDelta, ScramDelta

logger = logging.getLogger(__name__)

# BrokerRegistrationChangeRecord encodings
_FENCE, _UNFENCE, _NO_CHANGE = 1, -1, 0
_IN_CONTROLLED_SHUTDOWN = 1


# --- local replica changes --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic_id: uuid.UUID
    partition: PartitionImage


@dataclass(frozen=True, slots=True)
class LocalReplicaChanges:
    """What one broker must do after a delta (Kafka's ``LocalReplicaChanges``).

    ``leaders``/``followers``: partitions whose registration changed (new partition epoch) and
    that this broker now leads / follows. ``elected_leaders``: the subset of ``leaders`` whose
    leader epoch changed. ``deleted`` (Kafka: ``deletes``): replicas this broker hosted and must
    drop, because the topic was removed or the broker left the replica set.
    """

    deleted: frozenset[TopicPartition]
    elected_leaders: Mapping[TopicPartition, PartitionInfo]
    leaders: Mapping[TopicPartition, PartitionInfo]
    followers: Mapping[TopicPartition, PartitionInfo]
    topic_ids: Mapping[str, uuid.UUID]

    @property
    def is_empty(self) -> bool:
        return not (self.deleted or self.leaders or self.followers)


EMPTY_LOCAL_CHANGES = LocalReplicaChanges(
    frozenset(), frozen_map(), frozen_map(), frozen_map(), frozen_map()
)


@dataclass(slots=True)
class _LocalChangesBuilder:
    deleted: set[TopicPartition]
    elected_leaders: dict[TopicPartition, PartitionInfo]
    leaders: dict[TopicPartition, PartitionInfo]
    followers: dict[TopicPartition, PartitionInfo]
    topic_ids: dict[str, uuid.UUID]

    def build(self) -> LocalReplicaChanges:
        return LocalReplicaChanges(
            frozenset(self.deleted),
            frozen_map(self.elected_leaders),
            frozen_map(self.leaders),
            frozen_map(self.followers),
            frozen_map(self.topic_ids),
        )


# --- topics -----------------------------------------------------------------------------------


class TopicDelta:
    """Changed partitions of one topic (new or existing)."""

    __slots__ = ("image", "partition_changes")

    def __init__(self, image: TopicImage) -> None:
        self.image = image
        self.partition_changes: dict[int, PartitionImage] = {}

    @property
    def name(self) -> str:
        return self.image.name

    @property
    def topic_id(self) -> uuid.UUID:
        return self.image.topic_id

    def partition(self, partition_id: int) -> PartitionImage | None:
        changed = self.partition_changes.get(partition_id)
        return changed if changed is not None else self.image.partitions.get(partition_id)

    def replay_partition(self, record: PartitionRecord) -> None:
        self.partition_changes[record.partition_id] = PartitionImage.from_record(record)

    def replay_partition_change(self, record: PartitionChangeRecord) -> bool:
        current = self.partition(record.partition_id)
        if current is None:
            return False
        self.partition_changes[record.partition_id] = current.merge(record)
        return True

    def apply(self) -> TopicImage:
        if not self.partition_changes:
            return self.image
        partitions = dict(self.image.partitions)
        partitions.update(self.partition_changes)
        return TopicImage(self.image.name, self.image.topic_id, frozen_map(partitions))

    def collect_local_changes(self, broker_id: int, out: _LocalChangesBuilder) -> None:
        for pid, new in sorted(self.partition_changes.items()):
            tp = TopicPartition(self.name, pid)
            prev = self.image.partitions.get(pid)
            if broker_id not in new.replicas:
                if prev is not None and broker_id in prev.replicas:
                    out.deleted.add(tp)
                continue
            if prev is not None and prev.partition_epoch == new.partition_epoch:
                continue
            info = PartitionInfo(self.topic_id, new)
            out.topic_ids[self.name] = self.topic_id
            if new.leader == broker_id:
                out.leaders[tp] = info
                if prev is None or prev.leader_epoch != new.leader_epoch:
                    out.elected_leaders[tp] = info
            else:
                out.followers[tp] = info


class TopicsDelta:
    """Created, removed and changed topics (Kafka's ``TopicsDelta``)."""

    __slots__ = (
        "_created_names",
        "changed_topics",
        "created_topic_ids",
        "deleted_topic_ids",
        "image",
    )

    def __init__(self, image: TopicsImage) -> None:
        self.image = image
        self.changed_topics: dict[uuid.UUID, TopicDelta] = {}
        self.created_topic_ids: set[uuid.UUID] = set()
        self.deleted_topic_ids: set[uuid.UUID] = set()  # topics of the image removed here
        self._created_names: dict[str, uuid.UUID] = {}

    def topic(self, topic_id: uuid.UUID) -> TopicDelta | None:
        """The delta of a live topic, created on first use; None if no such topic."""
        delta = self.changed_topics.get(topic_id)
        if delta is None:
            topic = self.image.by_id.get(topic_id)
            if topic is None or topic_id in self.deleted_topic_ids:
                return None
            delta = self.changed_topics[topic_id] = TopicDelta(topic)
        return delta

    def _name_taken(self, name: str) -> bool:
        if name in self._created_names:
            return True
        existing = self.image.by_name.get(name)
        return existing is not None and existing.topic_id not in self.deleted_topic_ids

    def replay_topic(self, record: TopicRecord) -> bool:
        topic_id = record.topic_id
        live = topic_id in self.changed_topics or (
            topic_id in self.image.by_id and topic_id not in self.deleted_topic_ids
        )
        if live or topic_id == uuid.UUID(int=0) or self._name_taken(record.name):
            return False
        self.changed_topics[topic_id] = TopicDelta(TopicImage(record.name, topic_id, frozen_map()))
        self.created_topic_ids.add(topic_id)
        self._created_names[record.name] = topic_id
        return True

    def replay_partition(self, record: PartitionRecord) -> bool:
        delta = self.topic(record.topic_id)
        if delta is None:
            return False
        delta.replay_partition(record)
        return True

    def replay_partition_change(self, record: PartitionChangeRecord) -> bool:
        delta = self.topic(record.topic_id)
        return delta is not None and delta.replay_partition_change(record)

    def replay_remove_topic(self, record: RemoveTopicRecord) -> str | None:
        """Remove the topic; return its name, or None if there was no such topic."""
        topic_id = record.topic_id
        delta = self.changed_topics.pop(topic_id, None)
        if delta is not None:
            if topic_id in self.created_topic_ids:
                self.created_topic_ids.discard(topic_id)
                del self._created_names[delta.name]
            else:
                self.deleted_topic_ids.add(topic_id)
            return delta.name
        topic = self.image.by_id.get(topic_id)
        if topic is None or topic_id in self.deleted_topic_ids:
            return None
        self.deleted_topic_ids.add(topic_id)
        return topic.name

    def apply(self) -> TopicsImage:
        if not self.changed_topics and not self.deleted_topic_ids:
            return self.image
        by_id = dict(self.image.by_id)
        by_name = dict(self.image.by_name)
        for topic_id in sorted(self.deleted_topic_ids):
            removed = by_id.pop(topic_id)
            if by_name.get(removed.name) is removed:
                del by_name[removed.name]
        for delta in self.changed_topics.values():
            topic = delta.apply()
            by_id[topic.topic_id] = topic
            by_name[topic.name] = topic
        return TopicsImage(by_id=frozen_map(by_id), by_name=frozen_map(by_name))

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        out = _LocalChangesBuilder(set(), {}, {}, {}, {})
        for delta in self.changed_topics.values():
            delta.collect_local_changes(broker_id, out)
        for topic_id in self.deleted_topic_ids:
            topic = self.image.by_id[topic_id]
            for pid, partition in topic.partitions.items():
                if broker_id in partition.replicas:
                    out.deleted.add(TopicPartition(topic.name, pid))
        return out.build()


# --- configs ----------------------------------------------------------------------------------


class ConfigurationDelta:
    """Changes to the configs of one resource; ``cleared`` drops every key of the base."""

    __slots__ = ("base", "changes", "cleared")

    def __init__(self, base: Mapping[str, str]) -> None:
        self.base = base
        self.cleared = False
        self.changes: dict[str, str | None] = {}

    def apply(self) -> dict[str, str]:
        return overlay({} if self.cleared else self.base, self.changes)


class ConfigurationsDelta:
    __slots__ = ("changes", "image")

    def __init__(self, image: Mapping[ConfigResource, Mapping[str, str]]) -> None:
        self.image = image
        self.changes: dict[ConfigResource, ConfigurationDelta] = {}

    def _delta(self, resource: ConfigResource) -> ConfigurationDelta:
        delta = self.changes.get(resource)
        if delta is None:
            delta = self.changes[resource] = ConfigurationDelta(self.image.get(resource, {}))
        return delta

    def replay_config(self, record: ConfigRecord) -> None:
        resource = ConfigResource(record.resource_type, record.resource_name)
        self._delta(resource).changes[record.name] = record.value

    def replay_remove_topic(self, topic_name: str) -> None:
        delta = self._delta(ConfigResource(ConfigResourceType.TOPIC, topic_name))
        delta.cleared = True
        delta.changes.clear()

    def apply(self) -> Mapping[ConfigResource, Mapping[str, str]]:
        applied = {resource: delta.apply() for resource, delta in self.changes.items()}
        # a resource left with no configs drops out of the image
        changed = {resource: frozen_map(v) if v else None for resource, v in applied.items()}
        return frozen_map(overlay(self.image, changed))


# --- brokers and features ---------------------------------------------------------------------


class BrokersDelta:
    """Registrations that changed (Kafka's ``ClusterDelta``); None means unregistered."""

    __slots__ = ("changed_brokers", "image")

    def __init__(self, image: Mapping[int, BrokerRegistration]) -> None:
        self.image = image
        self.changed_brokers: dict[int, BrokerRegistration | None] = {}

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self.changed_brokers:
            return self.changed_brokers[broker_id]
        return self.image.get(broker_id)

    def replay_register(self, record: RegisterBrokerRecord) -> None:
        self.changed_brokers[record.broker_id] = BrokerRegistration.from_record(record)

    def replay_unregister(self, record: UnregisterBrokerRecord) -> bool:
        if self.broker(record.broker_id) is None:
            return False
        self.changed_brokers[record.broker_id] = None
        return True

    def replay_change(
        self,
        broker_id: int,
        epoch: int,
        *,
        fenced: bool | None = None,
        in_controlled_shutdown: bool | None = None,
        directories: tuple[uuid.UUID, ...] = (),
    ) -> bool:
        current = self.broker(broker_id)
        if current is None or current.epoch != epoch:
            return False
        changed = dataclasses.replace(
            current,
            fenced=current.fenced if fenced is None else fenced,
            in_controlled_shutdown=current.in_controlled_shutdown
            if in_controlled_shutdown is None
            else in_controlled_shutdown,
        )
        if directories:  # empty: the directories did not change
            changed = changed.with_online_directories(directories)
        self.changed_brokers[broker_id] = changed
        return True

    def replay_registration_change(self, record: BrokerRegistrationChangeRecord) -> bool:
        fencing = {_FENCE: True, _UNFENCE: False, _NO_CHANGE: None}
        shutdown = {_IN_CONTROLLED_SHUTDOWN: True, _NO_CHANGE: None}
        if record.fenced not in fencing or record.in_controlled_shutdown not in shutdown:
            return False
        return self.replay_change(
            record.broker_id,
            record.broker_epoch,
            fenced=fencing[record.fenced],
            in_controlled_shutdown=shutdown[record.in_controlled_shutdown],
            directories=tuple(record.log_dirs),
        )

    def apply(self) -> Mapping[int, BrokerRegistration]:
        return frozen_map(overlay(self.image, self.changed_brokers))


class FeaturesDelta:
    __slots__ = ("changes", "image")

    def __init__(self, image: Mapping[str, int]) -> None:
        self.image = image
        self.changes: dict[str, int | None] = {}

    def replay(self, record: FeatureLevelRecord) -> None:
        self.changes[record.name] = record.feature_level or None  # level 0 removes the feature

    def apply(self) -> Mapping[str, int]:
        return frozen_map(overlay(self.image, self.changes))


# --- the whole delta --------------------------------------------------------------------------


class MetadataDelta:
    """Records replayed on top of ``image``; ``apply()`` gives the next image."""

    def __init__(self, image: ClusterImage) -> None:
        self.image = image
        self.topics_delta: TopicsDelta | None = None
        self.configs_delta: ConfigurationsDelta | None = None
        self.brokers_delta: BrokersDelta | None = None
        self.features_delta: FeaturesDelta | None = None
        self.acls_delta: AclsDelta | None = None
        self.scram_delta: ScramDelta | None = None
        self.client_quotas_delta: ClientQuotasDelta | None = None
        self.next_producer_id: int | None = None
        self.records_replayed = 0
        self.ignored_records = 0

    def _topics(self) -> TopicsDelta:
        if self.topics_delta is None:
            self.topics_delta = TopicsDelta(self.image.topics)
        return self.topics_delta

    def _configs(self) -> ConfigurationsDelta:
        if self.configs_delta is None:
            self.configs_delta = ConfigurationsDelta(self.image.configs)
        return self.configs_delta

    def _brokers(self) -> BrokersDelta:
        if self.brokers_delta is None:
            self.brokers_delta = BrokersDelta(self.image.brokers)
        return self.brokers_delta

    def _features(self) -> FeaturesDelta:
        if self.features_delta is None:
            self.features_delta = FeaturesDelta(self.image.features)
        return self.features_delta

    def _acls(self) -> AclsDelta:
        if self.acls_delta is None:
            self.acls_delta = AclsDelta(self.image.acls)
        return self.acls_delta

    def _scram(self) -> ScramDelta:
        if self.scram_delta is None:
            self.scram_delta = ScramDelta(self.image.scram)
        return self.scram_delta

    def replay(self, record: MetadataRecord) -> None:
        """Apply one record to this delta; never raises (see the module docstring)."""
        self.records_replayed += 1
        if not self._route(record):
            self.ignored_records += 1
            logger.warning("ignoring a metadata record that does not fit the image: %r", record)

    def replay_all(self, records: list[MetadataRecord]) -> MetadataDelta:
        for record in records:
            self.replay(record)
        return self

    def _route(self, record: MetadataRecord) -> bool:
        match record:
            case TopicRecord():
                return self._topics().replay_topic(record)
            case PartitionRecord():
                return self._topics().replay_partition(record)
            case PartitionChangeRecord():
                return self._topics().replay_partition_change(record)
            case RemoveTopicRecord():
                name = self._topics().replay_remove_topic(record)
                if name is not None:
                    self._configs().replay_remove_topic(name)
                return name is not None
            case ConfigRecord():
                self._configs().replay_config(record)
            case FeatureLevelRecord():
                self._features().replay(record)
            case ProducerIdsRecord():
                return self._replay_producer_ids(record)
            case AccessControlEntryRecord():
                return self._acls().replay(record)
            case RemoveAccessControlEntryRecord():
                return self._acls().replay_remove(record)
            case UserScramCredentialRecord():
                return self._scram().replay(record)
            case RemoveUserScramCredentialRecord():
                return self._scram().replay_remove(record)
            case ClientQuotaRecord():
                if self.client_quotas_delta is None:
                    self.client_quotas_delta = ClientQuotasDelta(self.image.client_quotas)
                return self.client_quotas_delta.replay(record)
            case _:
                return self._route_broker(record)
        return True

    def _replay_producer_ids(self, record: ProducerIdsRecord) -> bool:
        current = (
            self.image.next_producer_id if self.next_producer_id is None else self.next_producer_id
        )
        if record.next_producer_id < current:
            return False  # ids are never handed out twice
        self.next_producer_id = record.next_producer_id
        return True

    def _route_broker(self, record: MetadataRecord) -> bool:
        match record:
            case RegisterBrokerRecord():
                self._brokers().replay_register(record)
            case UnregisterBrokerRecord():
                return self._brokers().replay_unregister(record)
            case FenceBrokerRecord():
                return self._brokers().replay_change(record.id, record.epoch, fenced=True)
            case UnfenceBrokerRecord():
                return self._brokers().replay_change(record.id, record.epoch, fenced=False)
            case BrokerRegistrationChangeRecord():
                return self._brokers().replay_registration_change(record)
        # NoOpRecord and the record types the image does not model only advance the offset.
        return True

    def apply(self, *, offset: int | None = None, epoch: int | None = None) -> ClusterImage:
        """The next image. ``offset`` defaults to one past the image per replayed record
        (metadata offsets are dense); ``epoch`` defaults to the image's."""
        image = self.image
        return ClusterImage(
            topics=image.topics if self.topics_delta is None else self.topics_delta.apply(),
            configs=image.configs if self.configs_delta is None else self.configs_delta.apply(),
            brokers=image.brokers if self.brokers_delta is None else self.brokers_delta.apply(),
            features=image.features if self.features_delta is None else self.features_delta.apply(),
            next_producer_id=image.next_producer_id
            if self.next_producer_id is None
            else self.next_producer_id,
            offset=image.offset + self.records_replayed if offset is None else offset,
            epoch=image.epoch if epoch is None else epoch,
            acls=image.acls if self.acls_delta is None else self.acls_delta.apply(),
            scram=image.scram if self.scram_delta is None else self.scram_delta.apply(),
            client_quotas=image.client_quotas
            if self.client_quotas_delta is None
            else self.client_quotas_delta.apply(),
        )

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        if self.topics_delta is None:
            return EMPTY_LOCAL_CHANGES
        return self.topics_delta.local_changes(broker_id)


def replay_records(
    image: ClusterImage,
    records: list[MetadataRecord],
    *,
    offset: int | None = None,
    epoch: int | None = None,
) -> ClusterImage:
    """``image`` with ``records`` applied (one delta)."""
    return MetadataDelta(image).replay_all(records).apply(offset=offset, epoch=epoch)
