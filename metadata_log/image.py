"""The immutable cluster image: Kafka's ``MetadataImage``.

Theory of operation
-------------------
A :class:`ClusterImage` is the state of the cluster after the metadata record at ``offset``:
topics and their partitions, configs per resource, broker registrations, finalized features and
the next producer id to hand out. It never changes. A :class:`~metadata_log.delta.MetadataDelta`
replays records on top of an image and ``apply()`` builds the next image, copying only what
changed: an untouched topic, the ``PartitionImage`` of an untouched partition, the brokers map
when no broker changed, all carry over by reference (structural sharing). Mappings are
``MappingProxyType`` views of private dicts and sequences are tuples, so an image can be shared
freely between threads and publishers.

``to_records()`` writes the image as the records that rebuild it (a snapshot); replaying them
into :data:`ClusterImage.EMPTY` and applying with the same offset and epoch gives an equal image.

Naming: the whole image is ``ClusterImage`` here (Kafka: ``MetadataImage``); the brokers map is
Kafka's ``ClusterImage``; ``PartitionImage`` is Kafka's ``PartitionRegistration``.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar, Final, NamedTuple, TypeVar

from kafka_protocol.metadata import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UserScramCredentialRecord,
)
from kafka_protocol.types import BrokerId, TopicName
from metadata_log.acls import (
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from metadata_log.client_quotas import ClientQuotas, quota_records, sort_key
from metadata_log.records import MetadataRecord
from metadata_log.scram import SCRAM_MECHANISM_IDS, ScramCredential, ScramKey

NO_LEADER: Final = -1
NO_LEADER_CHANGE: Final = -2  # PartitionChangeRecord.leader: the leader did not change
METADATA_VERSION_FEATURE: Final = "metadata.version"
# Kafka's reserved directory ids (``DirectoryId``).  LOST in a broker's list of online
# directories says "none of its directories is online": an empty list means "unknown, assume
# online" (a broker registered before KIP-858), so it cannot say that.
DIRECTORY_UNASSIGNED: Final = uuid.UUID(int=0)
DIRECTORY_LOST: Final = uuid.UUID(int=1)
DIRECTORY_MIGRATING: Final = uuid.UUID(int=2)
K = TypeVar("K")
V = TypeVar("V")


class ConfigResourceType(enum.IntEnum):
    """Kafka's ``ConfigResource.Type`` ids, as carried in ConfigRecord and the config APIs."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class LeaderRecoveryState(enum.IntEnum):
    RECOVERED = 0
    RECOVERING = 1  # elected by unclean leader election, not yet recovered
    NO_CHANGE = -1  # only in PartitionChangeRecord


class ConfigResource(NamedTuple):
    resource_type: int
    name: str


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class VersionRange(NamedTuple):
    min_version: int
    max_version: int


def frozen_map(items: Mapping[K, V] | None = None) -> Mapping[K, V]:
    """A read-only view of a private copy of ``items``."""
    return MappingProxyType(dict(items or {}))


def overlay(base: Mapping[K, V], changes: Mapping[K, V | None]) -> dict[K, V]:
    """``base`` with ``changes`` laid over it, None removing a key: how every delta of a map
    (configs, brokers, features; the controller's new config sets) gives its next image."""
    data = dict(base)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


# --- partitions and topics --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionImage:
    """One partition's registration: replicas, ISR, leader and the epochs that order changes."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = LeaderRecoveryState.RECOVERED
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    # KIP-858: the log directory of each replica, in replica order (empty: none assigned)
    directories: tuple[uuid.UUID, ...] = ()

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    def directory_of(self, broker_id: int) -> uuid.UUID:
        """The log directory the replica on ``broker_id`` lives in (UNASSIGNED if none)."""
        if broker_id in self.replicas and len(self.directories) == len(self.replicas):
            return self.directories[self.replicas.index(broker_id)]
        return DIRECTORY_UNASSIGNED

    @classmethod
    def from_record(cls, r: PartitionRecord) -> PartitionImage:
        return cls(
            replicas=tuple(r.replicas),
            isr=tuple(r.isr),
            leader=r.leader,
            leader_epoch=r.leader_epoch,
            partition_epoch=r.partition_epoch,
            removing_replicas=tuple(r.removing_replicas),
            adding_replicas=tuple(r.adding_replicas),
            leader_recovery_state=r.leader_recovery_state,
            elr=tuple(r.eligible_leader_replicas or ()),
            last_known_elr=tuple(r.last_known_elr or ()),
            directories=tuple(r.directories),
        )

    def merge(self, r: PartitionChangeRecord) -> PartitionImage:
        """Apply a change record as Kafka's ``PartitionRegistration.merge`` does.

        Null lists mean "unchanged"; leader -2 keeps leader and leader epoch; any other leader
        value (including -1, no leader) bumps the leader epoch; every change bumps the
        partition epoch.
        """
        if r.leader == NO_LEADER_CHANGE:
            leader, leader_epoch = self.leader, self.leader_epoch
        else:
            leader, leader_epoch = r.leader, self.leader_epoch + 1
        recovery = self.leader_recovery_state
        if r.leader_recovery_state != LeaderRecoveryState.NO_CHANGE:
            recovery = r.leader_recovery_state
        replicas = self.replicas if r.replicas is None else tuple(r.replicas)
        if r.directories is not None:
            directories = tuple(r.directories)
        elif self.directories and replicas != self.replicas:  # each replica keeps its own
            directories = tuple(self.directory_of(b) for b in replicas)
        else:
            directories = self.directories
        return PartitionImage(
            replicas=replicas,
            isr=self.isr if r.isr is None else tuple(r.isr),
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            removing_replicas=_or(r.removing_replicas, self.removing_replicas),
            adding_replicas=_or(r.adding_replicas, self.adding_replicas),
            leader_recovery_state=recovery,
            elr=_or(r.eligible_leader_replicas, self.elr),
            last_known_elr=_or(r.last_known_elr, self.last_known_elr),
            directories=directories,
        )

    def to_record(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRecord:
        return PartitionRecord(
            partition_id=partition_id,
            topic_id=topic_id,
            replicas=[BrokerId(b) for b in self.replicas],
            isr=list(self.isr),
            removing_replicas=[BrokerId(b) for b in self.removing_replicas],
            adding_replicas=[BrokerId(b) for b in self.adding_replicas],
            leader=BrokerId(self.leader),
            leader_recovery_state=self.leader_recovery_state,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            eligible_leader_replicas=[BrokerId(b) for b in self.elr] if self.elr else None,
            last_known_elr=[BrokerId(b) for b in self.last_known_elr]
            if self.last_known_elr
            else None,
            directories=list(self.directories),
        )


def _or(new: list[BrokerId] | None, old: tuple[int, ...]) -> tuple[int, ...]:
    return old if new is None else tuple(new)


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionImage]

    def to_records(self) -> list[MetadataRecord]:
        out: list[MetadataRecord] = [TopicRecord(name=TopicName(self.name), topic_id=self.topic_id)]
        for pid in sorted(self.partitions):
            out.append(self.partitions[pid].to_record(self.topic_id, pid))
        return out


@dataclass(frozen=True, slots=True)
class TopicsImage:
    """Topics by id and by name; both maps hold the same ``TopicImage`` objects."""

    by_id: Mapping[uuid.UUID, TopicImage]
    by_name: Mapping[str, TopicImage]

    EMPTY: ClassVar[TopicsImage]

    def get(self, name: str) -> TopicImage | None:
        return self.by_name.get(name)

    def __len__(self) -> int:
        return len(self.by_id)

    def partition(self, name: str, partition: int) -> PartitionImage | None:
        topic = self.by_name.get(name)
        return None if topic is None else topic.partitions.get(partition)


TopicsImage.EMPTY = TopicsImage(by_id=frozen_map(), by_name=frozen_map())


# --- brokers ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str  # the listener name, e.g. PLAINTEXT
    host: str
    port: int
    security_protocol: int  # SecurityProtocol id: PLAINTEXT 0, SSL 1, SASL_PLAINTEXT 2, SASL_SSL 3


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker (Kafka's ``BrokerRegistration``)."""

    id: int
    epoch: int
    incarnation_id: uuid.UUID
    listeners: tuple[Endpoint, ...]
    supported_features: Mapping[str, VersionRange]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    directories: tuple[uuid.UUID, ...] = ()  # the online log directories (KIP-858)
    # Log directories the broker registered with and reported offline since (its heartbeat's
    # ``offline_log_dirs``); they come back with the next registration.
    offline_directories: tuple[uuid.UUID, ...] = ()

    @property
    def has_online_dir(self) -> bool:
        """Whether any of the broker's log directories is online; a broker that registered no
        directory at all (before KIP-858) counts as online, as in Kafka's ``DirectoryId``."""
        return bool(self.directories) or not self.offline_directories

    def hosts_online(self, directory: uuid.UUID) -> bool:
        """Whether a replica assigned to ``directory`` here is in an online directory
        (Kafka's ``DirectoryId.isOnline``): an unassigned or migrating replica is wherever the
        broker has a directory online, a lost one nowhere."""
        if directory in (DIRECTORY_UNASSIGNED, DIRECTORY_MIGRATING):
            return self.has_online_dir
        if directory == DIRECTORY_LOST:
            return False
        return directory in self.directories or not (self.directories or self.offline_directories)

    @property
    def is_active(self) -> bool:
        """Eligible for leadership and the ISR: unfenced, not shutting down, and a log
        directory online (Kafka moves replicas off an offline directory)."""
        return not self.fenced and not self.in_controlled_shutdown and self.has_online_dir

    def listener(self, name: str) -> Endpoint | None:
        return next((e for e in self.listeners if e.name == name), None)

    @classmethod
    def from_record(cls, r: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(
            id=r.broker_id,
            epoch=r.broker_epoch,
            incarnation_id=r.incarnation_id,
            listeners=tuple(
                Endpoint(e.name, e.host, e.port, e.security_protocol) for e in r.end_points
            ),
            supported_features=frozen_map(
                {
                    f.name: VersionRange(f.min_supported_version, f.max_supported_version)
                    for f in r.features
                }
            ),
            rack=r.rack,
            fenced=r.fenced,
            in_controlled_shutdown=r.in_controlled_shutdown,
            directories=tuple(r.log_dirs),
        )

    def to_record(self) -> RegisterBrokerRecord:
        return RegisterBrokerRecord(
            broker_id=BrokerId(self.id),
            incarnation_id=self.incarnation_id,
            broker_epoch=self.epoch,
            end_points=[
                RegisterBrokerRecord.BrokerEndpoint(
                    name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                )
                for e in self.listeners
            ],
            features=[
                RegisterBrokerRecord.BrokerFeature(
                    name=name,
                    min_supported_version=r.min_version,
                    max_supported_version=r.max_version,
                )
                for name, r in sorted(self.supported_features.items())
            ],
            rack=self.rack,
            fenced=self.fenced,
            in_controlled_shutdown=self.in_controlled_shutdown,
            log_dirs=list(self.directories) + list(self.offline_directories),
        )

    def to_records(self) -> list[MetadataRecord]:
        """The registration, then (if some directory went offline) the change saying which."""
        out: list[MetadataRecord] = [self.to_record()]
        if self.offline_directories:
            out.append(self.directories_change())
        return out

    def directories_change(self) -> BrokerRegistrationChangeRecord:
        """The BrokerRegistrationChangeRecord setting the online directories to these."""
        return BrokerRegistrationChangeRecord(
            broker_id=BrokerId(self.id),
            broker_epoch=self.epoch,
            log_dirs=list(self.directories) or [DIRECTORY_LOST],
        )

    def with_online_directories(self, online: tuple[uuid.UUID, ...]) -> BrokerRegistration:
        """This registration once its online directories are ``online`` (LOST: none); every
        other directory it knew of is offline."""
        online = tuple(d for d in online if d != DIRECTORY_LOST)
        known = (*self.directories, *self.offline_directories)
        return dataclasses.replace(
            self,
            directories=online,
            offline_directories=tuple(d for d in known if d not in online),
        )


# --- the whole image --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterImage:
    """Everything the metadata log says, as of ``offset`` (the last applied record)."""

    topics: TopicsImage
    configs: Mapping[ConfigResource, Mapping[str, str]]
    brokers: Mapping[int, BrokerRegistration]
    features: Mapping[str, int]
    next_producer_id: int = (
        0  # the first id of the next producer-id block (Kafka: ProducerIdsImage)
    )
    offset: int = -1
    epoch: int = -1
    # ACLs by their record's id (Kafka: AclsImage) and SCRAM credentials by (user, mechanism)
    # (Kafka: ScramImage).
    acls: Mapping[uuid.UUID, AclEntry] = field(default_factory=frozen_map)
    scram: Mapping[ScramKey, ScramCredential] = field(default_factory=frozen_map)
    # Client quotas by entity (Kafka: ClientQuotasImage), see metadata_log.client_quotas.
    client_quotas: ClientQuotas = field(default_factory=frozen_map)

    EMPTY: ClassVar[ClusterImage]

    @property
    def is_empty(self) -> bool:
        return not (
            self.topics.by_id
            or self.configs
            or self.brokers
            or self.features
            or self.acls
            or self.scram
            or self.client_quotas
        )

    @property
    def metadata_version(self) -> int:
        """The finalized ``metadata.version`` feature level (0: not bootstrapped)."""
        return self.features.get(METADATA_VERSION_FEATURE, 0)

    def is_replica_offline(
        self,
        broker_id: int,
        listener: str = "PLAINTEXT",
        directory: uuid.UUID = DIRECTORY_UNASSIGNED,
    ) -> bool:
        """Kafka's ``KRaftMetadataCache.isReplicaOffline``: the broker is not registered, is
        fenced, lacks the listener, or the replica's log directory (``directory``, from
        :meth:`PartitionImage.directory_of`) is not online there."""
        broker = self.brokers.get(broker_id)
        return (
            broker is None
            or broker.fenced
            or broker.listener(listener) is None
            or not broker.hosts_online(directory)
        )

    def is_replica_storage_offline(
        self, broker_id: int, directory: uuid.UUID = DIRECTORY_UNASSIGNED
    ) -> bool:
        """The replica is offline because its log directory on its broker failed."""
        broker = self.brokers.get(broker_id)
        return broker is not None and not broker.hosts_online(directory)

    def topic_configs(self, name: str) -> Mapping[str, str]:
        """The dynamic overrides of topic ``name`` (empty when it has none)."""
        return self.configs.get(ConfigResource(ConfigResourceType.TOPIC, name), frozen_map())

    def to_records(self) -> list[MetadataRecord]:
        """Records that rebuild this image from empty, in a deterministic order."""
        out: list[MetadataRecord] = []
        # metadata.version first: Kafka requires it before anything else in a snapshot.
        for name in sorted(self.features, key=lambda n: (n != METADATA_VERSION_FEATURE, n)):
            out.append(FeatureLevelRecord(name=name, feature_level=self.features[name]))
        for broker_id in sorted(self.brokers):
            out.extend(self.brokers[broker_id].to_records())
        for name in sorted(self.topics.by_name):
            out.extend(self.topics.by_name[name].to_records())
        if self.next_producer_id:
            out.append(
                ProducerIdsRecord(
                    broker_id=BrokerId(-1), broker_epoch=-1, next_producer_id=self.next_producer_id
                )
            )
        for resource in sorted(self.configs):
            for key, value in sorted(self.configs[resource].items()):
                out.append(
                    ConfigRecord(
                        resource_type=resource.resource_type,
                        resource_name=resource.name,
                        name=key,
                        value=value,
                    )
                )
        out.extend(acl_record(acl_id, self.acls[acl_id]) for acl_id in sorted(self.acls))
        for user, mechanism in sorted(self.scram):
            out.append(scram_record(user, mechanism, self.scram[user, mechanism]))
        for entity in sorted(self.client_quotas, key=sort_key):
            out.extend(quota_records(entity, self.client_quotas[entity]))
        return out


def acl_from_record(r: AccessControlEntryRecord) -> AclEntry | None:
    """The ACL a record adds, or None when a field holds a value no ACL can have (ANY, MATCH,
    UNKNOWN or an unknown code): such a record does not fit the image."""
    try:
        entry = AclEntry(
            resource_type=ResourceType(r.resource_type),
            resource_name=r.resource_name,
            pattern_type=PatternType(r.pattern_type),
            principal=r.principal,
            host=r.host,
            operation=AclOperation(r.operation),
            permission=AclPermissionType(r.permission_type),
        )
    except ValueError:
        return None
    return entry if is_concrete_acl(entry) else None


def is_concrete_acl(entry: AclEntry) -> bool:
    """Whether every field of ``entry`` names one thing (no filter-only value)."""
    return (
        entry.resource_type > ResourceType.ANY
        and entry.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED)
        and entry.operation > AclOperation.ANY
        and entry.permission in (AclPermissionType.ALLOW, AclPermissionType.DENY)
    )


def acl_record(acl_id: uuid.UUID, acl: AclEntry) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=acl_id,
        resource_type=acl.resource_type,
        resource_name=acl.resource_name,
        pattern_type=acl.pattern_type,
        principal=acl.principal,
        host=acl.host,
        operation=acl.operation,
        permission_type=acl.permission,
    )


def scram_record(
    user: str, mechanism: str, credential: ScramCredential
) -> UserScramCredentialRecord:
    return UserScramCredentialRecord(
        name=user,
        mechanism=SCRAM_MECHANISM_IDS[mechanism],
        salt=credential.salt,
        stored_key=credential.stored_key,
        server_key=credential.server_key,
        iterations=credential.iterations,
    )


ClusterImage.EMPTY = ClusterImage(
    topics=TopicsImage.EMPTY, configs=frozen_map(), brokers=frozen_map(), features=frozen_map()
)
