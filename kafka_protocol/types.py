"""Small distinct types for the spec's ``entityType`` hints (as Redpanda's generator does)."""

from typing import NewType

TopicName = NewType("TopicName", str)
GroupId = NewType("GroupId", str)
TransactionalId = NewType("TransactionalId", str)
BrokerId = NewType("BrokerId", int)
ProducerId = NewType("ProducerId", int)
Offset = NewType("Offset", int)
LeaderEpoch = NewType("LeaderEpoch", int)
PartitionIndex = NewType("PartitionIndex", int)
