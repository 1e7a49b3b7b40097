"""Small distinct types for the spec's ``entityType`` hints (as Redpanda's generator does)."""

from typing import NamedTuple, NewType

TopicName = NewType("TopicName", str)
GroupId = NewType("GroupId", str)
TransactionalId = NewType("TransactionalId", str)
BrokerId = NewType("BrokerId", int)
ProducerId = NewType("ProducerId", int)
Offset = NewType("Offset", int)
LeaderEpoch = NewType("LeaderEpoch", int)
PartitionIndex = NewType("PartitionIndex", int)


class TopicPartition(NamedTuple):
    """A partition of a topic, as clients name it."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
