"""The records of ``__consumer_offsets`` (Kafka's ``GroupCoordinatorRecordSerde``), and where a
group lives.

Each record's key and value start with an int16 version that says which schema follows
(``kafka_protocol/coordinator``, generated from Kafka's group-coordinator specs)::

    key version 0, 1   OffsetCommitKey(group, topic, partition)   value OffsetCommitValue v0-4
    key version 2      GroupMetadataKey(group)                     value GroupMetadataValue v0-4

A null value is a tombstone: the offset, or the whole group, is deleted (and compaction
eventually drops every older record with that key).  This broker writes the versions
Kafka 3.x writes (offset value v3, or v1 for a commit with an explicit expire timestamp: only
v1 has that field; group value v3) and reads every version, so a data directory from Kafka's
group coordinator would load.  The consumer-group records of KIP-848 (keys 3-8) are handed over
still encoded (:class:`ConsumerGroupRecord`, decoded by ``broker/group/consumer_records``); the
share-group records (keys 9 and up) are skipped.

A group's coordinator is the leader of partition ``abs(java_hash(group_id)) % partitions``
(Kafka's ``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount``), so every
client and broker agree on it without asking anyone.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TypeVar

from broker.group.consumer_records import KEY_VERSIONS as CONSUMER_GROUP_KEY_VERSIONS
from kafka_protocol.coordinator import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1  # Kafka's offsetCommitValueVersion(expireTimestamp present)
GROUP_VALUE_VERSION = 3
_VERSION = struct.Struct(">h")
_V = TypeVar("_V", OffsetCommitValue, GroupMetadataValue)


def java_string_hash(text: str) -> int:
    """``String.hashCode`` over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs``: ``Integer.MIN_VALUE`` maps to 0, not to itself."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True, slots=True)
class OffsetRecord:
    group: str
    topic: str
    partition: int
    value: OffsetCommitValue | None  # None: a tombstone


@dataclass(frozen=True, slots=True)
class GroupRecord:
    group: str
    value: GroupMetadataValue | None  # None: a tombstone


@dataclass(frozen=True, slots=True)
class ConsumerGroupRecord:
    """A record of a consumer group (KIP-848, key versions 3-8: ``broker/group/consumer_records``),
    still encoded: the key without its version, the value with it."""

    key_version: int
    key: memoryview
    value: bytes | None


CoordinatorRecord = OffsetRecord | GroupRecord | ConsumerGroupRecord


def _versioned(version: int, body: bytes) -> bytes:
    return _VERSION.pack(version) + body


def encode_offset(
    group: str, topic: str, partition: int, value: OffsetCommitValue | None
) -> tuple[bytes, bytes | None]:
    key = OffsetCommitKey(group=group, topic=topic, partition=partition)
    encoded_key = _versioned(OFFSET_KEY_VERSION, key.encode(OFFSET_KEY_VERSION))
    if value is None:
        return encoded_key, None
    version = (
        OFFSET_VALUE_VERSION if value.expire_timestamp == -1 else OFFSET_VALUE_VERSION_WITH_EXPIRY
    )
    return encoded_key, _versioned(version, value.encode(version))


def encode_group(group: str, value: GroupMetadataValue | None) -> tuple[bytes, bytes | None]:
    key = GroupMetadataKey(group=group)
    encoded_key = _versioned(GROUP_KEY_VERSION, key.encode(GROUP_KEY_VERSION))
    if value is None:
        return encoded_key, None
    return encoded_key, _versioned(GROUP_VALUE_VERSION, value.encode(GROUP_VALUE_VERSION))


def decode(key: bytes, value: bytes | None) -> CoordinatorRecord | None:
    """One record of the topic; None for a key type this broker does not use.  Raises
    ``ValueError`` (or the codec's ``ProtocolError``) for bytes that are not a record."""
    if len(key) < 2:
        raise ValueError(f"a {len(key)}-byte key has no version")
    (key_version,) = _VERSION.unpack_from(key)
    body = memoryview(key)[2:]
    if key_version in (0, 1):
        k = OffsetCommitKey.decode(body, key_version)
        return OffsetRecord(k.group, k.topic, k.partition, _value(OffsetCommitValue, value))
    if key_version == GROUP_KEY_VERSION:
        g = GroupMetadataKey.decode(body, GROUP_KEY_VERSION)
        return GroupRecord(g.group, _value(GroupMetadataValue, value))
    if key_version in CONSUMER_GROUP_KEY_VERSIONS:
        return ConsumerGroupRecord(key_version, body, value)
    return None


def _value(cls: type[_V], value: bytes | None) -> _V | None:
    if value is None:
        return None
    if len(value) < 2:
        raise ValueError(f"a {len(value)}-byte value has no version")
    (version,) = _VERSION.unpack_from(value)
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        raise ValueError(f"{cls.NAME} version {version} is unknown")
    return cls.decode(memoryview(value)[2:], version)
