"""Partition registrations: new partitions, leader election and ISR changes when brokers come
and go (parts of Kafka's ``ReplicationControlManager`` and ``PartitionChangeBuilder``).

Rules (clean election only; unclean leader election is not implemented):

* A new partition's ISR is its active replicas (unfenced, not in controlled shutdown) in replica
  order, and its leader is the first of them; leader and partition epochs start at 0.
* The leader stays while it is active and in the ISR; otherwise the first replica (in replica
  order) that is active and in the ISR becomes leader, or nobody (-1).
* A broker leaving (fenced, in controlled shutdown) is removed from every ISR, except that the
  ISR never becomes empty: the last member stays so that it can lead again when it returns
  (without it, the partition would need an unclean election).
* A PartitionChangeRecord carries only what changed; setting ``leader`` bumps the leader epoch
  and every record bumps the partition epoch (see ``PartitionImage.merge``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

from kafka_protocol.metadata import PartitionChangeRecord
from kafka_protocol.types import BrokerId
from metadata_log.image import NO_LEADER, ClusterImage, PartitionImage

IsActive = Callable[[int], bool]


def active_brokers(image: ClusterImage) -> IsActive:
    def is_active(broker_id: int) -> bool:
        broker = image.brokers.get(broker_id)
        return broker is not None and broker.is_active

    return is_active


def new_partition(replicas: list[int], is_active: IsActive) -> PartitionImage | None:
    """The registration of a new partition, or None when no replica is active."""
    isr = tuple(b for b in replicas if is_active(b))
    if not isr:
        return None
    return PartitionImage(
        replicas=tuple(replicas), isr=isr, leader=isr[0], leader_epoch=0, partition_epoch=0
    )


def elect_leader(partition: PartitionImage, isr: tuple[int, ...], is_active: IsActive) -> int:
    if partition.leader in isr and is_active(partition.leader):
        return partition.leader
    return next((b for b in partition.replicas if b in isr and is_active(b)), NO_LEADER)


def partition_change(
    topic_id: uuid.UUID,
    partition_id: int,
    partition: PartitionImage,
    isr: tuple[int, ...],
    is_active: IsActive,
) -> PartitionChangeRecord | None:
    """The record moving ``partition`` to ``isr`` and the leader it implies; None if no change."""
    assert isr, "the ISR never becomes empty"
    leader = elect_leader(partition, isr, is_active)
    if leader == partition.leader and isr == partition.isr:
        return None
    record = PartitionChangeRecord(partition_id=partition_id, topic_id=topic_id)
    if isr != partition.isr:
        record.isr = [BrokerId(b) for b in isr]
    if leader != partition.leader:
        record.leader = BrokerId(leader)
    return record


def _partitions(image: ClusterImage) -> Iterator[tuple[uuid.UUID, int, PartitionImage]]:
    for name in sorted(image.topics.by_name):
        topic = image.topics.by_name[name]
        for partition_id in sorted(topic.partitions):
            yield topic.topic_id, partition_id, topic.partitions[partition_id]


def records_for_broker_leaving(image: ClusterImage, broker_id: int) -> list[PartitionChangeRecord]:
    """Remove ``broker_id`` from every ISR and move its leaderships (fencing, shutdown)."""
    base = active_brokers(image)

    def is_active(b: int) -> bool:
        return b != broker_id and base(b)

    out = []
    for topic_id, partition_id, partition in _partitions(image):
        if broker_id not in partition.isr:
            continue
        isr = tuple(b for b in partition.isr if b != broker_id) or partition.isr
        record = partition_change(topic_id, partition_id, partition, isr, is_active)
        if record is not None:
            out.append(record)
    return out


def records_for_broker_joining(image: ClusterImage, broker_id: int) -> list[PartitionChangeRecord]:
    """Elect leaders for every leaderless partition now that ``broker_id`` is active."""
    base = active_brokers(image)

    def is_active(b: int) -> bool:
        return b == broker_id or base(b)

    out = []
    for topic_id, partition_id, partition in _partitions(image):
        if partition.has_leader:
            continue
        record = partition_change(topic_id, partition_id, partition, partition.isr, is_active)
        if record is not None:
            out.append(record)
    return out


def leads_any_partition(image: ClusterImage, broker_id: int) -> bool:
    return any(p.leader == broker_id for _, _, p in _partitions(image))
