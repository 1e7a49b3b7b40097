"""Committed offsets of the groups one ``__consumer_offsets`` partition holds (pure).

The store is a materialized view of the partition's offset records: :meth:`OffsetStore.apply`
replays one record (on load, and after each commit's append is committed), so what a
coordinator answers is always what the replicated log says.  Nothing else mutates it.
Expiry and topic deletion only *choose* the keys to delete; the caller appends tombstones
and the tombstones, replayed, delete them, exactly as after a coordinator failover.

Expiry (Kafka's ``offsets.retention.minutes``, KIP-211): an offset expires ``retention`` after
its commit, counted only while its group is empty (no members); an explicit expire timestamp
from an OffsetCommit v1 record wins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
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
        self, now_ms: int, retention_ms: int, is_empty: Callable[[str], bool]
    ) -> list[tuple[str, TopicPartition]]:
        """Offsets whose time is up: an explicit expire timestamp passed, or the group is
        empty and the commit is older than the retention."""
        out = []
        for group, offsets in self._groups.items():
            empty = is_empty(group)
            for tp, c in offsets.items():
                if c.expire_timestamp_ms >= 0:
                    if now_ms >= c.expire_timestamp_ms:
                        out.append((group, tp))
                elif empty and now_ms - c.commit_timestamp_ms >= retention_ms:
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
