"""Committed offsets of the groups one ``__consumer_offsets`` partition holds (pure).

The store is a materialized view of the partition's offset records: :meth:`OffsetStore.apply`
replays one record (on load, and after each commit's append is committed), so what a
coordinator answers is always what the replicated log says.  Nothing else mutates it.
Expiry and topic deletion only *choose* the keys to delete; the caller appends tombstones
and the tombstones, replayed, delete them, exactly as after a coordinator failover.

Expiry (Kafka's ``offsets.retention.minutes``, KIP-211) asks each group for its
:class:`ExpiryCondition` (Kafka's ``OffsetExpirationCondition``; ``None``: nothing of the group
expires now, e.g. while it rebalances).  An offset then expires once ``now`` reaches its
explicit expire timestamp (an OffsetCommit v2-v4 ``retention_time_ms``, stored in a v1 record)
or, without one, ``retention`` after the condition's base time: when an empty group became
empty, else the offset's own commit.  Offsets of topics the group's members subscribe to, and
offsets with a commit on its way to the log, never expire.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass

from broker.coordinator.records import OffsetRecord

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1  # -1: by the retention rule


DEFAULT_RETENTION_TIME = -1  # OffsetCommitRequest v2-v4: the broker's retention applies


def explicit_expiry(retention_time_ms: int, now_ms: int) -> int:
    """The expire timestamp an OffsetCommit v2-v4 ``retention_time_ms`` sets, as Kafka's
    ``KafkaApis`` computes it: none (-1) for ``DEFAULT_RETENTION_TIME`` only; any other value,
    negative ones included, expires the offsets ``retention_time_ms`` after ``now_ms``."""
    if retention_time_ms == DEFAULT_RETENTION_TIME:
        return -1
    return now_ms + retention_time_ms


@dataclass(frozen=True, slots=True)
class ExpiryCondition:
    """When a group's offsets expire (Kafka's ``OffsetExpirationConditionImpl``, and the
    ``isSubscribedToTopic`` filter of ``OffsetMetadataManager.cleanupExpiredOffsets``)."""

    since_ms: int | None = None  # when an empty group became empty; None: from each commit
    subscribed: frozenset[str] = frozenset()  # topics whose offsets stay

    def is_expired(self, topic: str, c: CommittedOffset, now_ms: int, retention_ms: int) -> bool:
        if topic in self.subscribed:
            return False
        if c.expire_timestamp_ms != -1:  # an explicit expiry wins over the retention
            return now_ms >= c.expire_timestamp_ms
        base_ms = c.commit_timestamp_ms if self.since_ms is None else self.since_ms
        return now_ms - base_ms >= retention_ms


class OffsetStore:
    def __init__(self) -> None:
        self._groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}

    def apply(self, record: OffsetRecord) -> None:
        tp = (record.topic, record.partition)
        if record.value is None:
            offsets = self._groups.get(record.group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self._groups[record.group]
            return
        v = record.value
        self._groups.setdefault(record.group, {})[tp] = CommittedOffset(
            v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp
        )

    def get(self, group: str, tp: TopicPartition) -> CommittedOffset | None:
        return self._groups.get(group, {}).get(tp)

    def offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return dict(self._groups.get(group, {}))

    def groups(self) -> Iterator[str]:
        return iter(self._groups)

    def has_offsets(self, group: str) -> bool:
        return group in self._groups

    def expired(
        self,
        now_ms: int,
        retention_ms: int,
        condition: Callable[[str], ExpiryCondition | None],
        pending: Collection[tuple[str, TopicPartition]] = (),
    ) -> list[tuple[str, TopicPartition]]:
        """Offsets whose time is up under their group's ``condition``; none of those with a
        commit ``pending`` (Kafka's ``pendingOffsetCommits``)."""
        out = []
        for group, offsets in self._groups.items():
            rule = condition(group)
            if rule is None:
                continue
            for tp, c in offsets.items():
                if (group, tp) not in pending and rule.is_expired(tp[0], c, now_ms, retention_ms):
                    out.append((group, tp))
        return out

    def of_topics(self, topics: Iterable[str]) -> list[tuple[str, TopicPartition]]:
        """Every offset committed for these (deleted) topics."""
        gone = set(topics)
        return [
            (group, tp)
            for group, offsets in self._groups.items()
            for tp in offsets
            if tp[0] in gone
        ]
