"""A consumer group's (KIP-848) records in ``__consumer_offsets`` (Kafka's
``GroupCoordinatorRecordHelpers``), and the group as its records say it is.

Unlike a classic group's single snapshot record, a consumer group is written as a set of keyed
records, each replaced by a later record with the same key (the topic is compacted) and deleted
by a tombstone::

    key version 3  ConsumerGroupMetadataKey(group)                  -> epoch (the group epoch)
    key version 4  ConsumerGroupPartitionMetadataKey(group)         -> subscribed topics' metadata
    key version 5  ConsumerGroupMemberMetadataKey(group, member)    -> the member's subscription
    key version 6  ConsumerGroupTargetAssignmentMetadataKey(group)  -> assignment epoch
    key version 7  ConsumerGroupTargetAssignmentMemberKey(group, m) -> the member's target
    key version 8  ConsumerGroupCurrentMemberAssignmentKey(group, m)-> epochs, state, assignment

Each key and value starts with its int16 version (the value's is 0).  Replaying the records of a
partition in order (:meth:`StoredConsumerGroups.apply`) leaves each group's latest records; the
coordinator rebuilds the group from them after a failover (``ConsumerGroup.restore``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from broker.group.consumer_member import Assignment, TopicId
from kafka_protocol.coordinator import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)

Record = tuple[bytes, bytes | None]
_VERSION = struct.Struct(">h")
METADATA, PARTITION_METADATA, MEMBER_METADATA = 3, 4, 5
TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = 6, 7, 8
KEY_VERSIONS = range(METADATA, CURRENT_ASSIGNMENT + 1)
_KEYS: dict[int, Any] = {
    METADATA: ConsumerGroupMetadataKey,
    PARTITION_METADATA: ConsumerGroupPartitionMetadataKey,
    MEMBER_METADATA: ConsumerGroupMemberMetadataKey,
    TARGET_METADATA: ConsumerGroupTargetAssignmentMetadataKey,
    TARGET_MEMBER: ConsumerGroupTargetAssignmentMemberKey,
    CURRENT_ASSIGNMENT: ConsumerGroupCurrentMemberAssignmentKey,
}
_VALUES: dict[int, Any] = {
    METADATA: ConsumerGroupMetadataValue,
    PARTITION_METADATA: ConsumerGroupPartitionMetadataValue,
    MEMBER_METADATA: ConsumerGroupMemberMetadataValue,
    TARGET_METADATA: ConsumerGroupTargetAssignmentMetadataValue,
    TARGET_MEMBER: ConsumerGroupTargetAssignmentMemberValue,
    CURRENT_ASSIGNMENT: ConsumerGroupCurrentMemberAssignmentValue,
}


def encode(key_version: int, group_id: str, member_id: str | None, value: Any | None) -> Record:
    """One record; ``value`` None: a tombstone."""
    fields: dict[str, str] = {"group_id": group_id}
    if member_id is not None:
        fields["member_id"] = member_id
    key = _VERSION.pack(key_version) + _KEYS[key_version](**fields).encode(key_version)
    if value is None:
        return key, None
    return key, _VERSION.pack(0) + value.encode(0)


@dataclass(slots=True)
class StoredConsumerGroup:
    """A group's latest records (decoded values)."""

    epoch: ConsumerGroupMetadataValue | None = None
    partition_metadata: ConsumerGroupPartitionMetadataValue | None = None
    assignment_epoch: ConsumerGroupTargetAssignmentMetadataValue | None = None
    members: dict[str, ConsumerGroupMemberMetadataValue] = field(default_factory=dict)
    targets: dict[str, ConsumerGroupTargetAssignmentMemberValue] = field(default_factory=dict)
    current: dict[str, ConsumerGroupCurrentMemberAssignmentValue] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return self.epoch is None and not self.members and not self.current


@dataclass(slots=True)
class StoredConsumerGroups:
    """The consumer groups of one ``__consumer_offsets`` partition, as its records say."""

    groups: dict[str, StoredConsumerGroup] = field(default_factory=dict)

    def apply(self, key_version: int, key: memoryview, value: bytes | None) -> None:
        """Replay one record (key and value without their version prefix for the key; the
        value with it).  Raises ``ValueError``/``ProtocolError`` on bytes that do not decode."""
        k = _KEYS[key_version].decode(key, key_version)
        decoded = None
        if value is not None:
            if len(value) < 2:
                raise ValueError(f"a {len(value)}-byte value has no version")
            (version,) = _VERSION.unpack_from(value)
            cls = _VALUES[key_version]
            if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
                raise ValueError(f"{cls.NAME} version {version} is unknown")
            decoded = cls.decode(memoryview(value)[2:], version)
        group = self.groups.setdefault(k.group_id, StoredConsumerGroup())
        member_id: str = getattr(k, "member_id", "")
        if key_version == METADATA:
            group.epoch = decoded
        elif key_version == PARTITION_METADATA:
            group.partition_metadata = decoded
        elif key_version == TARGET_METADATA:
            group.assignment_epoch = decoded
        else:
            tables: dict[int, dict[str, Any]] = {
                MEMBER_METADATA: group.members,
                TARGET_MEMBER: group.targets,
                CURRENT_ASSIGNMENT: group.current,
            }
            table = tables[key_version]
            if decoded is None:
                table.pop(member_id, None)
            else:
                table[member_id] = decoded
        if group.is_empty():
            del self.groups[k.group_id]


# --- values -------------------------------------------------------------------------------------


def assignment_of(topic_partitions: Any) -> dict[TopicId, frozenset[int]]:
    """An assignment from a list of (topic_id, partitions) entries of any of the codecs."""
    return {tp.topic_id: frozenset(tp.partitions) for tp in topic_partitions if tp.partitions}


def target_value(assignment: Assignment) -> ConsumerGroupTargetAssignmentMemberValue:
    cls = ConsumerGroupTargetAssignmentMemberValue
    return cls(
        topic_partitions=[
            cls.TopicPartition(topic_id=t, partitions=sorted(ps))
            for t, ps in sorted(assignment.items(), key=lambda x: str(x[0]))
        ]
    )


def current_value(
    member_epoch: int,
    previous_member_epoch: int,
    state: int,
    assigned: Assignment,
    pending_revocation: Assignment,
) -> ConsumerGroupCurrentMemberAssignmentValue:
    cls = ConsumerGroupCurrentMemberAssignmentValue

    def listed(a: Assignment) -> list[ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions]:
        return [
            cls.TopicPartitions(topic_id=t, partitions=sorted(ps))
            for t, ps in sorted(a.items(), key=lambda x: str(x[0]))
        ]

    return cls(
        member_epoch=member_epoch,
        previous_member_epoch=previous_member_epoch,
        state=state,
        assigned_partitions=listed(assigned),
        partitions_pending_revocation=listed(pending_revocation),
    )


def partition_metadata_value(
    topics: dict[str, tuple[TopicId, int]],
) -> ConsumerGroupPartitionMetadataValue:
    cls = ConsumerGroupPartitionMetadataValue
    return cls(
        topics=[
            cls.TopicMetadata(topic_id=tid, topic_name=name, num_partitions=n)
            for name, (tid, n) in sorted(topics.items())
        ]
    )
