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

Transactions (KIP-98, KIP-447; Kafka's ``OffsetMetadataManager``)
------------------------------------------------------------------
An offset record in a *transactional* batch (TxnOffsetCommit) is held as **pending** under its
batch's producer id, invisible to OffsetFetch, until that producer's COMMIT or ABORT marker
reaches the partition (:meth:`OffsetStore.complete`): a commit moves the pending offsets into
the committed ones, keeping for each partition whichever of the two commits lies *later in the
log* (a plain OffsetCommit appended after the transactional one wins, as it would after a
reload); an abort drops them.  A tombstone deletes the committed offset and every pending one
of its key.  While a group has an open transaction (pending offsets under some producer id,
even if tombstones emptied them) the expiry keeps the offsets of partitions with a pending
transactional offset, and never deletes the group.  Replaying the same log therefore always
rebuilds the same state, pending offsets included.
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
    record_offset: int = -1  # where its record lies in the partition's log (-1: unknown)


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


NO_PRODUCER_ID = -1


class OffsetStore:
    def __init__(self) -> None:
        self._groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        # producer id -> group -> partition -> offset of its open transaction (a group stays
        # listed, emptied, when tombstones removed its pending offsets: still open)
        self._pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}

    def apply(
        self, record: OffsetRecord, record_offset: int = -1, producer_id: int = NO_PRODUCER_ID
    ) -> None:
        """Replay one offset record found at ``record_offset`` in a batch of ``producer_id``
        (a transactional batch's; ``NO_PRODUCER_ID``: a plain one)."""
        tp = (record.topic, record.partition)
        if record.value is None:
            offsets = self._groups.get(record.group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self._groups[record.group]
            for by_group in self._pending.values():
                by_group.get(record.group, {}).pop(tp, None)
            return
        v = record.value
        committed = CommittedOffset(
            v.offset,
            v.leader_epoch,
            v.metadata,
            v.commit_timestamp,
            v.expire_timestamp,
            record_offset,
        )
        if producer_id == NO_PRODUCER_ID:
            self._groups.setdefault(record.group, {})[tp] = committed
        else:
            self._pending.setdefault(producer_id, {}).setdefault(record.group, {})[tp] = committed

    def complete(self, producer_id: int, commit: bool) -> int:
        """The COMMIT (``commit``) or ABORT marker of ``producer_id``: its pending offsets become
        committed, unless a commit later in the log holds the partition, or are dropped.  The
        count of offsets that became visible."""
        pending = self._pending.pop(producer_id, None)
        if pending is None or not commit:
            return 0
        moved = 0
        for group, offsets in pending.items():
            for tp, c in offsets.items():
                current = self._groups.get(group, {}).get(tp)
                if current is None or c.record_offset > current.record_offset:
                    self._groups.setdefault(group, {})[tp] = c
                    moved += 1
        return moved

    def has_pending(self, group: str, tp: TopicPartition) -> bool:
        """Whether a transaction not yet completed committed an offset of ``tp``."""
        return any(tp in by_group.get(group, {}) for by_group in self._pending.values())

    def has_open_transaction(self, group: str) -> bool:
        return any(group in by_group for by_group in self._pending.values())

    def pending_partitions(self, group: str) -> set[TopicPartition]:
        return {tp for by_group in self._pending.values() for tp in by_group.get(group, {})}

    def pending_of(self, producer_id: int) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """The pending offsets of one producer's open transaction, per group (a copy)."""
        return {g: dict(o) for g, o in self._pending.get(producer_id, {}).items()}

    def open_producers(self) -> list[int]:
        return sorted(self._pending)

    def get(self, group: str, tp: TopicPartition) -> CommittedOffset | None:
        return self._groups.get(group, {}).get(tp)

    def offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return dict(self._groups.get(group, {}))

    def groups(self) -> Iterator[str]:
        """Groups with committed offsets or an open transaction (Kafka creates a simple group
        for a transactional commit too)."""
        pending = {g for by_group in self._pending.values() for g in by_group}
        return iter(self._groups.keys() | pending)

    def has_offsets(self, group: str) -> bool:
        return group in self._groups or self.has_open_transaction(group)

    def expired(
        self,
        now_ms: int,
        retention_ms: int,
        condition: Callable[[str], ExpiryCondition | None],
        pending: Collection[tuple[str, TopicPartition]] = (),
    ) -> list[tuple[str, TopicPartition]]:
        """Offsets whose time is up under their group's ``condition``; none of those with a
        commit ``pending`` (Kafka's ``pendingOffsetCommits``) nor with a pending transactional
        offset."""
        out = []
        for group, offsets in self._groups.items():
            rule = condition(group)
            if rule is None:
                continue
            in_transactions = self.pending_partitions(group)
            for tp, c in offsets.items():
                if (
                    (group, tp) not in pending
                    and tp not in in_transactions
                    and rule.is_expired(tp[0], c, now_ms, retention_ms)
                ):
                    out.append((group, tp))
        return out

    def of_topics(self, topics: Iterable[str]) -> list[tuple[str, TopicPartition]]:
        """Every offset committed for these (deleted) topics, pending ones included."""
        gone = set(topics)
        found = {
            (group, tp)
            for group, offsets in self._groups.items()
            for tp in offsets
            if tp[0] in gone
        }
        found.update(
            (group, tp)
            for by_group in self._pending.values()
            for group, offsets in by_group.items()
            for tp in offsets
            if tp[0] in gone
        )
        return sorted(found)
