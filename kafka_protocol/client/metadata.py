"""Bootstrap and leader lookup: the client's cache of which broker leads which partition.

Theory of operation
-------------------
A :class:`MetadataCache` is filled from Metadata responses (:meth:`~MetadataCache.update`): the
brokers' addresses, each partition's leader and leader epoch (KIP-320: requests carry it, so a
stale leader cannot answer), and each topic's partition count.  A partition's entry is dropped
(:meth:`~MetadataCache.invalidate`) when an answer says the leader moved
(:data:`~kafka_protocol.client.error_policy.STALE_LEADER_ERRORS`) or its connection failed; a
lookup (:meth:`~MetadataCache.leader`) then says the shell must refresh before it asks again.
Where to send a Metadata request at all is :meth:`~MetadataCache.candidates`: connections
already open, then the known brokers in random order (spreading load), then the bootstrap list.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kafka_protocol.client.error_policy import TOPIC_GONE_ERRORS
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import MetadataResponse
from kafka_protocol.types import TopicPartition

Address = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Leader:
    """A partition's leader as the cached metadata has it (``node`` -1: none known)."""

    node: int
    epoch: int


def parse_address(text: str) -> Address:
    """``host:port`` or ``[v6]:port``."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{text!r} is not host:port")
    return host.strip("[]"), int(port)


class MetadataCache:
    """Brokers, partition leaders and partition counts (see the module docstring)."""

    def __init__(self) -> None:
        self.brokers: dict[int, Address] = {}
        self.leaders: dict[TopicPartition, Leader] = {}
        self.partition_counts: dict[str, int] = {}

    def update(self, response: MetadataResponse) -> None:
        """Take what a Metadata answer says (a topic it reports gone is forgotten)."""
        if response.brokers:
            self.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        for topic in response.topics:
            if topic.name is None:
                continue
            if topic.error_code in TOPIC_GONE_ERRORS:
                self.forget_topic(topic.name)
                continue
            if topic.error_code != ErrorCode.NONE and not topic.partitions:
                continue
            self.forget_topic(topic.name)
            self.partition_counts[topic.name] = len(topic.partitions)
            for p in topic.partitions:
                node = p.leader_id if p.error_code != ErrorCode.LEADER_NOT_AVAILABLE else -1
                self.leaders[TopicPartition(topic.name, p.partition_index)] = Leader(
                    node, p.leader_epoch
                )

    def forget_topic(self, topic: str) -> None:
        self.partition_counts.pop(topic, None)
        for tp in [tp for tp in self.leaders if tp.topic == topic]:
            del self.leaders[tp]

    def invalidate(self, tp: TopicPartition) -> None:
        """Forget ``tp``'s leader: the next lookup asks for a refresh."""
        self.leaders.pop(tp, None)

    def needs_refresh(self, tp: TopicPartition) -> bool:
        """No usable leader cached for ``tp``: refresh metadata before asking it."""
        cached = self.leaders.get(tp)
        return cached is None or cached.node < 0 or cached.node not in self.brokers

    def leader(self, tp: TopicPartition) -> tuple[Address, int] | None:
        """(address, leader epoch) of ``tp``'s leader, or None if no usable one is cached."""
        cached = self.leaders.get(tp)
        if cached is None or cached.node < 0:
            return None
        address = self.brokers.get(cached.node)
        return None if address is None else (address, cached.epoch)

    def topic_error(self, response: MetadataResponse, topic: str) -> ErrorCode:
        """What ``response`` says of ``topic`` (UNKNOWN_TOPIC_OR_PARTITION if not named)."""
        return next(
            (ErrorCode.from_code(t.error_code) for t in response.topics if t.name == topic),
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        )

    def candidates(
        self,
        open_addresses: Iterable[Address],
        bootstrap: Sequence[Address],
        rng: random.Random | None = None,
    ) -> list[Address]:
        """Where to send a request any broker can answer: open connections first, then the
        known brokers (shuffled), then the bootstrap list; each address once."""
        known = list(self.brokers.values())
        (rng or random).shuffle(known)
        return list(dict.fromkeys([*open_addresses, *known, *bootstrap]))
