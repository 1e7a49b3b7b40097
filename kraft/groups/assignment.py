"""The consumer protocol of classic groups (protocol type ``consumer``), pure: what a member puts
in its JoinGroup (a ``ConsumerProtocolSubscription``), what the leader hands out in SyncGroup
(a ``ConsumerProtocolAssignment``), and the ``range`` and ``roundrobin`` assignors exactly as
Kafka's clients compute them, so that a Java, librdkafka or kafka-python member can lead a group
this CLI is in, and the other way round.

Both encodings are an int16 version followed by the body at that version::

    Subscription v1:  version:int16 | topics:[string] | user_data:nullable bytes
                      | owned_partitions:[topic:string partitions:[int32]]
    Assignment v1:    version:int16 | assigned_partitions:[topic:string partitions:[int32]]
                      | user_data:nullable bytes

Later versions only add fields at the end, so a newer one is read as the newest we know and the
rest ignored (Kafka's ``ConsumerProtocol`` does the same).  We write v1, the version every
client since Kafka 2.4 writes for eager assignors and every older one can read.

Assignors see members as :class:`Subscriber`\\ s ordered as Kafka's ``MemberInfo`` sorts them:
static members (``group.instance.id``) first by instance id, then the others by member id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kafka_protocol.types import TopicName
from metadata_log.image import TopicPartition

__all__ = [
    "ASSIGNORS",
    "PROTOCOL_TYPE",
    "Subscriber",
    "Subscription",
    "assign",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "range_assign",
    "roundrobin_assign",
]

PROTOCOL_TYPE: Final = "consumer"
SUBSCRIPTION_VERSION: Final = 1
ASSIGNMENT_VERSION: Final = 1

_M = TypeVar("_M", ConsumerProtocolSubscription, ConsumerProtocolAssignment)
Assignment = dict[str, list[TopicPartition]]  # member id -> partitions


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    owned: tuple[TopicPartition, ...] = ()  # the partitions the member held (v1+)
    user_data: bytes | None = None


@dataclass(frozen=True, slots=True)
class Subscriber:
    """A member as an assignor sees it."""

    member_id: str
    group_instance_id: str | None
    topics: frozenset[str]

    @property
    def sort_key(self) -> tuple[int, str]:
        """Kafka's ``MemberInfo.compareTo``: static members first, by instance id."""
        if self.group_instance_id is not None:
            return (0, self.group_instance_id)
        return (1, self.member_id)


# --- encodings --------------------------------------------------------------------------------


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def _flatten(pairs: Iterable[tuple[str, Iterable[int]]]) -> tuple[TopicPartition, ...]:
    return tuple(sorted(TopicPartition(str(t), p) for t, ps in pairs for p in ps))


def _versioned(version: int, body: bytes) -> bytes:
    return version.to_bytes(2, "big", signed=True) + body


def _decode_versioned(cls: type[_M], data: bytes) -> _M | None:
    """The body after an int16 version (a newer version read as the newest known); None if
    ``data`` is not one."""
    if len(data) < 2:
        return None
    version = int.from_bytes(data[:2], "big", signed=True)
    if version < 0:
        return None
    try:
        decoded, _ = cls.decode_from(memoryview(data), 2, min(version, cls.MAX_VERSION))
    except (ProtocolError, ValueError):
        return None
    return decoded


def encode_subscription(topics: Iterable[str], owned: Iterable[TopicPartition] = ()) -> bytes:
    body = ConsumerProtocolSubscription(
        topics=sorted(set(topics)),
        owned_partitions=[
            ConsumerProtocolSubscription.TopicPartition(topic=TopicName(t), partitions=ps)
            for t, ps in _by_topic(owned).items()
        ],
    )
    return _versioned(SUBSCRIPTION_VERSION, body.encode(SUBSCRIPTION_VERSION))


def decode_subscription(data: bytes) -> Subscription | None:
    """A member's JoinGroup metadata; None if it is not a consumer subscription."""
    decoded = _decode_versioned(ConsumerProtocolSubscription, data)
    if decoded is None:
        return None
    owned = _flatten((t.topic, t.partitions) for t in decoded.owned_partitions)
    return Subscription(tuple(decoded.topics), owned, decoded.user_data)


def encode_assignment(partitions: Iterable[TopicPartition]) -> bytes:
    body = ConsumerProtocolAssignment(
        assigned_partitions=[
            ConsumerProtocolAssignment.TopicPartition(topic=TopicName(t), partitions=ps)
            for t, ps in _by_topic(partitions).items()
        ],
    )
    return _versioned(ASSIGNMENT_VERSION, body.encode(ASSIGNMENT_VERSION))


def decode_assignment(data: bytes) -> tuple[TopicPartition, ...] | None:
    """A member's partitions, sorted; None if ``data`` is not a consumer assignment.  Empty
    bytes: no assignment yet (a rebalance)."""
    if not data:
        return ()
    decoded = _decode_versioned(ConsumerProtocolAssignment, data)
    if decoded is None:
        return None
    return _flatten((t.topic, t.partitions) for t in decoded.assigned_partitions)


# --- assignors --------------------------------------------------------------------------------


def range_assign(
    members: Sequence[Subscriber], partitions_per_topic: Mapping[str, int]
) -> Assignment:
    """Kafka's ``RangeAssignor``: per topic, its subscribers in order each take a contiguous
    range; the first ``partitions % subscribers`` take one more."""
    assignment: Assignment = {m.member_id: [] for m in members}
    for topic in sorted({t for m in members for t in m.topics}):
        count = partitions_per_topic.get(topic)
        if count is None:
            continue  # unknown to the cluster: nobody gets it
        consumers = sorted((m for m in members if topic in m.topics), key=lambda m: m.sort_key)
        per_member, extra = divmod(count, len(consumers))
        for i, member in enumerate(consumers):
            start = per_member * i + min(i, extra)
            length = per_member + (1 if i < extra else 0)
            assignment[member.member_id] += [
                TopicPartition(topic, p) for p in range(start, start + length)
            ]
    return assignment


def roundrobin_assign(
    members: Sequence[Subscriber], partitions_per_topic: Mapping[str, int]
) -> Assignment:
    """Kafka's ``RoundRobinAssignor``: every partition of every subscribed topic, sorted, dealt
    to the members in a circle, skipping a member not subscribed to the partition's topic."""
    assignment: Assignment = {m.member_id: [] for m in members}
    circle = sorted(members, key=lambda m: m.sort_key)
    topics = sorted({t for m in members for t in m.topics} & set(partitions_per_topic))
    i = 0
    for topic in topics:
        for partition in range(partitions_per_topic[topic]):
            while topic not in circle[i % len(circle)].topics:
                i += 1  # ends: someone subscribes to every topic in ``topics``
            assignment[circle[i % len(circle)].member_id].append(TopicPartition(topic, partition))
            i += 1
    return assignment


ASSIGNORS: Final[Mapping[str, Callable[[Sequence[Subscriber], Mapping[str, int]], Assignment]]] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
}


def assign(
    protocol: str, members: Sequence[Subscriber], partitions_per_topic: Mapping[str, int]
) -> dict[str, bytes]:
    """Every member's encoded assignment under the assignor named ``protocol`` (one of
    :data:`ASSIGNORS`; the coordinator chose it among those every member offered)."""
    assert protocol in ASSIGNORS, protocol
    assert len({m.member_id for m in members}) == len(members), "duplicate member ids"
    assigned = ASSIGNORS[protocol](members, partitions_per_topic)
    return {member_id: encode_assignment(tps) for member_id, tps in assigned.items()}
