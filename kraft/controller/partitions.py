"""Partition registrations: new partitions, leader election and ISR changes when brokers come
and go (parts of Kafka's ``ReplicationControlManager`` and ``PartitionChangeBuilder``).

Rules:

* A new partition's ISR is its active replicas (unfenced, not in controlled shutdown) in replica
  order, and its leader is the first of them; leader and partition epochs start at 0.
* The leader stays while it is active and in the ISR; otherwise the first replica (in replica
  order) that is active and in the ISR becomes leader (a clean election), or nobody (-1).
* A broker leaving (fenced, in controlled shutdown) is removed from every ISR, except that the
  ISR never becomes empty: the last member stays so that it can lead again when it returns.
* Unclean election (only for topics whose effective ``unclean.leader.election.enable`` is
  true, see ``elections``): when no ISR member is active, the first active replica in replica
  order leads, the ISR becomes that leader alone and the leader recovery state RECOVERING; the
  leader reports RECOVERED with AlterPartition once it has recovered. It may lose committed
  records, which is why it is off by default.
* A PartitionChangeRecord carries only what changed; setting ``leader`` bumps the leader epoch
  and every record bumps the partition epoch (see ``PartitionImage.merge``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Set
from dataclasses import dataclass, field

from kafka_protocol.metadata import PartitionChangeRecord
from kafka_protocol.types import BrokerId
from metadata_log.image import (
    NO_LEADER,
    ClusterImage,
    LeaderRecoveryState,
    PartitionImage,
    TopicImage,
)
from metadata_log.records import MetadataRecord

IsActive = Callable[[int], bool]
UncleanPolicy = Callable[[str], bool]  # topic name -> may elect a leader outside the ISR


def never_unclean(_topic: str) -> bool:
    return False


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
    """The clean election: the leader if it may stay, else the first active ISR member."""
    if partition.leader in isr and is_active(partition.leader):
        return partition.leader
    return next((b for b in partition.replicas if b in isr and is_active(b)), NO_LEADER)


def elect_unclean_leader(partition: PartitionImage, is_active: IsActive) -> int:
    """The unclean election: the first active replica, in replica order, in the ISR or not."""
    return next((b for b in partition.replicas if is_active(b)), NO_LEADER)


def unclean_change(
    topic_id: uuid.UUID, partition_id: int, partition: PartitionImage, leader: int
) -> PartitionChangeRecord:
    """``leader`` leads alone, recovering (Kafka's ``PartitionChangeBuilder.tryElection``)."""
    assert leader != NO_LEADER and leader in partition.replicas
    record = PartitionChangeRecord(
        partition_id=partition_id,
        topic_id=topic_id,
        leader=BrokerId(leader),
        isr=[BrokerId(leader)],
    )
    if partition.leader_recovery_state != LeaderRecoveryState.RECOVERING:
        record.leader_recovery_state = LeaderRecoveryState.RECOVERING
    return record


def partition_change(
    topic_id: uuid.UUID,
    partition_id: int,
    partition: PartitionImage,
    isr: tuple[int, ...],
    is_active: IsActive,
    unclean: bool = False,
) -> PartitionChangeRecord | None:
    """The record moving ``partition`` to ``isr`` and the leader it implies; None if no change.
    With ``unclean``, a partition left with no active ISR member gets an unclean leader."""
    assert isr, "the ISR never becomes empty"
    leader = elect_leader(partition, isr, is_active)
    if leader == NO_LEADER and unclean:
        candidate = elect_unclean_leader(partition, is_active)
        if candidate != NO_LEADER:
            return unclean_change(topic_id, partition_id, partition, candidate)
    if leader == partition.leader and isr == partition.isr:
        return None
    record = PartitionChangeRecord(partition_id=partition_id, topic_id=topic_id)
    if isr != partition.isr:
        record.isr = [BrokerId(b) for b in isr]
    if leader != partition.leader:
        record.leader = BrokerId(leader)
    return record


def all_partitions(image: ClusterImage) -> Iterator[tuple[TopicImage, int, PartitionImage]]:
    """Every partition, by topic name and partition id (records come out in a stable order)."""
    for name in sorted(image.topics.by_name):
        topic = image.topics.by_name[name]
        for partition_id in sorted(topic.partitions):
            yield topic, partition_id, topic.partitions[partition_id]


def records_for_broker_leaving(
    image: ClusterImage,
    broker_id: int,
    unclean: UncleanPolicy = never_unclean,
    only: Set[tuple[uuid.UUID, int]] | None = None,
) -> list[PartitionChangeRecord]:
    """Remove ``broker_id`` from every ISR and move its leaderships (fencing, shutdown), or
    only those of the (topic id, partition) in ``only`` (its replicas on a failed log
    directory)."""
    base = active_brokers(image)

    def is_active(b: int) -> bool:
        return b != broker_id and base(b)

    out = []
    for topic, partition_id, partition in all_partitions(image):
        if broker_id not in partition.isr:
            continue
        if only is not None and (topic.topic_id, partition_id) not in only:
            continue
        isr = tuple(b for b in partition.isr if b != broker_id) or partition.isr
        record = partition_change(
            topic.topic_id, partition_id, partition, isr, is_active, unclean(topic.name)
        )
        if record is not None:
            out.append(record)
    return out


def records_for_broker_joining(
    image: ClusterImage, broker_id: int, unclean: UncleanPolicy = never_unclean
) -> list[PartitionChangeRecord]:
    """Elect leaders for every leaderless partition now that ``broker_id`` is active."""
    base = active_brokers(image)

    def is_active(b: int) -> bool:
        return b == broker_id or base(b)

    return leaderless_elections(image, is_active, unclean)


def leaderless_elections(
    image: ClusterImage, is_active: IsActive, unclean: UncleanPolicy
) -> list[PartitionChangeRecord]:
    """A leader for every leaderless partition that can have one: clean if an ISR member is
    active, else unclean where the topic allows it."""
    out = []
    for topic, partition_id, partition in all_partitions(image):
        if partition.has_leader:
            continue
        record = partition_change(
            topic.topic_id,
            partition_id,
            partition,
            partition.isr,
            is_active,
            unclean(topic.name),
        )
        if record is not None:
            out.append(record)
    return out


def leads_any_partition(image: ClusterImage, broker_id: int) -> bool:
    return any(p.leader == broker_id for _, _, p in all_partitions(image))


@dataclass(slots=True)
class PartitionChanges:
    """The records of one request that changes partitions (an ISR change, a leader election) and
    the partitions they changed, so that a partition named twice sees its first change."""

    image: ClusterImage
    records: list[MetadataRecord] = field(default_factory=list, init=False)
    changed: dict[tuple[uuid.UUID, int], PartitionImage] = field(default_factory=dict, init=False)

    def partition(self, topic: TopicImage, partition_id: int) -> PartitionImage | None:
        changed = self.changed.get((topic.topic_id, partition_id))
        return changed if changed is not None else topic.partitions.get(partition_id)

    def add(
        self,
        topic: TopicImage,
        partition_id: int,
        partition: PartitionImage,
        change: PartitionChangeRecord,
    ) -> PartitionImage:
        """One more change of ``partition``: the partition as it now stands."""
        self.records.append(change)
        merged = partition.merge(change)
        self.changed[(topic.topic_id, partition_id)] = merged
        return merged
