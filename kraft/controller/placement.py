"""Replica placement: a port of Kafka's ``StripedReplicaPlacer``.

Goals, in order: spread each partition's replicas across racks, spread replicas and leaders
across brokers, prefer unfenced brokers. Constraints: no broker twice in one partition, and the
first replica (the preferred leader) is unfenced.

Racks are visited round-robin from a starting rack that advances by one per partition, which
gives the "striped" pattern (A B C, B C A, C A B); inside a rack, brokers are visited
round-robin too, unfenced before fenced. Each ``BrokerList`` hands out every broker at most
once per partition (an iteration epoch), which is what rules out duplicates. After as many
partitions as there are unfenced brokers, racks and brokers are reshuffled so that the same
replica sets do not repeat. All randomness comes from the injected ``random.Random``.

Brokers in controlled shutdown are not usable; fenced brokers may hold followers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


class InvalidReplicationFactorError(Exception):
    """Maps to INVALID_REPLICATION_FACTOR; the message is Kafka's."""


@dataclass(frozen=True, slots=True)
class UsableBroker:
    id: int
    rack: str | None
    fenced: bool


@dataclass(slots=True)
class _BrokerList:
    brokers: list[int] = field(default_factory=list)
    index: int = 0  # brokers handed out in the current epoch
    offset: int = 0
    epoch: int = 0

    def initialize(self, rng: random.Random) -> None:
        if self.brokers:
            self.brokers.sort()
            self.offset = rng.randrange(len(self.brokers))

    def next(self, epoch: int) -> int:
        """The next broker, or -1 once every broker was handed out in this epoch."""
        if not self.brokers:
            return -1
        if self.epoch != epoch:
            self.epoch, self.index = epoch, 0
            self.offset = (self.offset + 1) % len(self.brokers)
        if self.index >= len(self.brokers):
            return -1
        broker = self.brokers[(self.index + self.offset) % len(self.brokers)]
        self.index += 1
        return broker


@dataclass(slots=True)
class _Rack:
    fenced: _BrokerList = field(default_factory=_BrokerList)
    unfenced: _BrokerList = field(default_factory=_BrokerList)

    def next(self, epoch: int) -> int:
        broker = self.unfenced.next(epoch)
        return broker if broker >= 0 else self.fenced.next(epoch)


class _RackList:
    def __init__(self, rng: random.Random, brokers: list[UsableBroker]) -> None:
        self.rng = rng
        self.racks: dict[str | None, _Rack] = {}
        for broker in sorted(brokers, key=lambda b: b.id):
            rack = self.racks.setdefault(broker.rack, _Rack())
            (rack.fenced if broker.fenced else rack.unfenced).brokers.append(broker.id)
        self.names = sorted(self.racks, key=lambda r: (r is not None, r or ""))
        for name in self.names:
            self.racks[name].fenced.initialize(rng)
            self.racks[name].unfenced.initialize(rng)
        self.total = len(brokers)
        self.unfenced = sum(1 for b in brokers if not b.fenced)
        self.epoch = 0
        self.offset = rng.randrange(len(self.names)) if self.names else 0

    def shuffle(self) -> None:
        self.rng.shuffle(self.names)
        for name in sorted(self.racks, key=lambda r: (r is not None, r or "")):
            self.rng.shuffle(self.racks[name].fenced.brokers)
            self.rng.shuffle(self.racks[name].unfenced.brokers)

    def place(self, replication_factor: int) -> list[int]:
        if self.epoch == self.unfenced and self.unfenced > 1:
            self.shuffle()
            self.epoch = 0
        if self.offset == len(self.names):
            self.offset = 0
        first_rack = self.offset
        while True:  # the leader: the first unfenced broker, starting at the offset rack
            leader = self.racks[self.names[first_rack]].unfenced.next(self.epoch)
            if leader >= 0:
                break
            first_rack = (first_rack + 1) % len(self.names)
        replicas = [leader]
        rack_index = self.offset
        while len(replicas) < replication_factor:
            broker = -1
            if rack_index == first_rack:
                first_rack = -1  # the leader's rack gets a second turn only after the others
            else:
                broker = self.racks[self.names[rack_index]].next(self.epoch)
            rack_index = (rack_index + 1) % len(self.names)
            if broker >= 0:
                replicas.append(broker)
        self.epoch += 1
        self.offset += 1
        return replicas


def place_replicas(
    brokers: list[UsableBroker],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random,
) -> list[list[int]]:
    """Replica lists for ``num_partitions`` new partitions; the first replica is the leader."""
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(
            f"Invalid replication factor {replication_factor}: "
            "the replication factor must be positive."
        )
    if not any(not b.fenced for b in brokers):
        raise InvalidReplicationFactorError("All brokers are currently fenced.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"The target replication factor of {replication_factor} cannot be reached because "
            f"only {len(brokers)} broker(s) are registered."
        )
    racks = _RackList(rng, brokers)
    return [racks.place(replication_factor) for _ in range(num_partitions)]
