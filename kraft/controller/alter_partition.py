"""AlterPartition: a partition leader changes its ISR (Kafka's
``ReplicationControlManager.alterPartition``).

Theory of operation
-------------------
The leader of a partition shrinks the ISR when followers fall behind and expands it when they
catch up; the controller is the only writer of the partition registration, so the leader asks.
The request names the registration it was computed from (``leader_epoch``, ``partition_epoch``);
the controller accepts it only if that is still the current one, so a change made meanwhile (a
broker fenced, a new leader elected) wins and the leader retries from fresh metadata.

Checks, in Kafka's order; the first that fails answers the partition (the first, the request):

1. the requester is registered with this ``broker_epoch``: STALE_BROKER_EPOCH for the request;
2. the topic exists: UNKNOWN_TOPIC_ID (by id, v2+) or UNKNOWN_TOPIC_OR_PARTITION (by name);
3. the partition exists: UNKNOWN_TOPIC_OR_PARTITION;
4. ``leader_epoch`` is the current one: FENCED_LEADER_EPOCH (the requester missed an election);
5. the requester is the leader: NOT_LEADER_OR_FOLLOWER (Kafka answers INVALID_REQUEST);
6. ``partition_epoch`` is the current one: INVALID_UPDATE_VERSION;
7. the new ISR holds distinct replicas, the leader among them: INVALID_REQUEST;
8. leader recovery goes RECOVERING -> RECOVERED only, and a recovering leader's ISR is the
   leader alone: INVALID_REQUEST;
9. every ISR member is registered, unfenced, not in controlled shutdown and, when the v3
   ``new_isr_with_epochs`` gives a broker epoch (not -1), still has it (the follower did not
   restart): INELIGIBLE_REPLICA, or OPERATION_NOT_ATTEMPTED for v0-1 clients, which predate it.

An accepted change is one PartitionChangeRecord with the new ISR (and recovery state); the leader
and its epoch stay, the partition epoch grows by one on replay. On a partition under
reassignment an ISR holding every target replica also completes the reassignment
(``reassignment``); if that removes the requester, the leader moves and the requester is answered
NEW_LEADER_ELECTED (FENCED_LEADER_EPOCH for v0-1). The answer is the registration
after the change (or the current one, with no record, when nothing changes). A partition named
twice in one request sees the first change, as if the requests came one after the other.

The request carries no version here: topics addressed by id are read as v2+, by name as v0-1.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AlterPartitionRequest, AlterPartitionResponse
from kafka_protocol.metadata import PartitionChangeRecord
from kafka_protocol.types import BrokerId
from kraft.controller import reassignment
from kraft.controller.partitions import PartitionChanges, active_brokers, elect_leader
from kraft.controller.result import ZERO_UUID, ControllerResult
from metadata_log.image import ClusterImage, LeaderRecoveryState, PartitionImage, TopicImage

NO_BROKER_EPOCH = -1  # BrokerState.broker_epoch: the broker epoch is not checked

PartitionData = AlterPartitionRequest.PartitionData
PartitionResult = AlterPartitionResponse.PartitionData


@dataclass(slots=True)
class _Alteration(PartitionChanges):
    """One AlterPartition request: the broker that sent it, and its changes so far."""

    broker_id: int


def alter_partition(
    request: AlterPartitionRequest, image: ClusterImage
) -> ControllerResult[AlterPartitionResponse]:
    broker = image.brokers.get(request.broker_id)
    if broker is None or broker.epoch != request.broker_epoch:
        response = AlterPartitionResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        return ControllerResult([], response)
    state = _Alteration(image, request.broker_id)
    topics = [_alter_topic(state, topic) for topic in request.topics]
    return ControllerResult(state.records, AlterPartitionResponse(topics=topics))


def _by_id(topic: AlterPartitionRequest.TopicData) -> bool:
    """v2+ names topics by id; v0-1 by name (and leave the id zero)."""
    return topic.topic_id != ZERO_UUID or not topic.topic_name


def _alter_topic(
    state: _Alteration, request: AlterPartitionRequest.TopicData
) -> AlterPartitionResponse.TopicData:
    by_id = _by_id(request)
    topics = state.image.topics
    topic = topics.by_id.get(request.topic_id) if by_id else topics.get(request.topic_name)
    if topic is None:
        error = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        partitions = [
            PartitionResult(partition_index=p.partition_index, error_code=error)
            for p in request.partitions
        ]
    else:
        partitions = [_alter_one(state, topic, p, by_id) for p in request.partitions]
    return AlterPartitionResponse.TopicData(
        topic_name=request.topic_name, topic_id=request.topic_id, partitions=partitions
    )


def _alter_one(
    state: _Alteration, topic: TopicImage, request: PartitionData, by_id: bool
) -> PartitionResult:
    partition_id = request.partition_index
    partition = state.partition(topic, partition_id)
    if partition is None:
        return PartitionResult(
            partition_index=partition_id, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
    error = _check(state, partition, request, by_id)
    if error is not None:
        return PartitionResult(partition_index=partition_id, error_code=error)
    record = _change(state.image, topic.topic_id, partition_id, partition, request)
    if record is not None:
        partition = state.add(topic, partition_id, partition, record)
        if partition.leader != state.broker_id:
            # The ISR change completed a reassignment that removed the requester: it must
            # learn of the new leader from the metadata (Kafka answers the same; v0-1 clients
            # predate NEW_LEADER_ELECTED).
            error = ErrorCode.NEW_LEADER_ELECTED if by_id else ErrorCode.FENCED_LEADER_EPOCH
            return PartitionResult(partition_index=partition_id, error_code=error)
    return PartitionResult(
        partition_index=partition_id,
        error_code=ErrorCode.NONE,
        leader_id=BrokerId(partition.leader),
        leader_epoch=partition.leader_epoch,
        isr=[BrokerId(b) for b in partition.isr],
        leader_recovery_state=partition.leader_recovery_state,
        partition_epoch=partition.partition_epoch,
    )


def _new_isr(request: PartitionData) -> list[tuple[int, int]]:
    """(broker id, broker epoch) per new ISR member: ``new_isr_with_epochs`` in v3,
    ``new_isr`` (epochs unchecked) before."""
    if request.new_isr_with_epochs:
        return [(int(s.broker_id), s.broker_epoch) for s in request.new_isr_with_epochs]
    return [(int(b), NO_BROKER_EPOCH) for b in request.new_isr]


def _check(
    state: _Alteration, partition: PartitionImage, request: PartitionData, by_id: bool
) -> ErrorCode | None:
    """Kafka's ``validateAlterPartitionData``, in its order."""
    if request.leader_epoch != partition.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH  # the requester missed a leader election
    if state.broker_id != partition.leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if request.partition_epoch != partition.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION  # computed from another registration
    new_isr = _new_isr(request)
    isr = [b for b, _ in new_isr]
    if len(set(isr)) != len(isr) or not set(isr) <= set(partition.replicas):
        return ErrorCode.INVALID_REQUEST
    if partition.leader not in isr:
        return ErrorCode.INVALID_REQUEST  # the ISR always includes the leader
    if not _valid_recovery(partition, request.leader_recovery_state, len(isr)):
        return ErrorCode.INVALID_REQUEST
    if not all(_eligible(state.image, b, epoch) for b, epoch in new_isr):
        # v0-1 clients predate INELIGIBLE_REPLICA (Kafka answers them this way too).
        return ErrorCode.INELIGIBLE_REPLICA if by_id else ErrorCode.OPERATION_NOT_ATTEMPTED
    return None


def _valid_recovery(partition: PartitionImage, target: int, isr_size: int) -> bool:
    if target not in (LeaderRecoveryState.RECOVERED, LeaderRecoveryState.RECOVERING):
        return False
    if target == LeaderRecoveryState.RECOVERING:
        # A leader elected uncleanly replicates alone until it has recovered; nothing can
        # go back to recovering.
        return isr_size == 1 and partition.leader_recovery_state == LeaderRecoveryState.RECOVERING
    return True


def _eligible(image: ClusterImage, broker_id: int, broker_epoch: int) -> bool:
    """Kafka's ``ineligibleReplicasForIsr``: registered, unfenced, not shutting down, and the
    broker epoch the leader saw (if given) is the current one (the follower did not restart)."""
    broker = image.brokers.get(broker_id)
    return (
        broker is not None and broker.is_active and broker_epoch in (NO_BROKER_EPOCH, broker.epoch)
    )


def _change(
    image: ClusterImage,
    topic_id: uuid.UUID,
    partition_id: int,
    partition: PartitionImage,
    request: PartitionData,
) -> PartitionChangeRecord | None:
    """The record for an accepted request, or None when it changes nothing."""
    isr = tuple(b for b, _ in _new_isr(request))
    if reassignment.in_progress(partition):
        return reassignment.isr_change(
            topic_id,
            partition_id,
            partition,
            isr,
            active_brokers(image),
            request.leader_recovery_state,
        )
    # Every ISR member, the leader included, was checked active: the leader stays.
    assert elect_leader(partition, isr, active_brokers(image)) == partition.leader
    record = PartitionChangeRecord(partition_id=partition_id, topic_id=topic_id)
    changed = False
    if isr != partition.isr:
        record.isr = [BrokerId(b) for b in isr]
        changed = True
    if request.leader_recovery_state != partition.leader_recovery_state:
        record.leader_recovery_state = request.leader_recovery_state
        changed = True
    return record if changed else None
