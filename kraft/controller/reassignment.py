"""Partition reassignment (KIP-455): AlterPartitionReassignments and ListPartitionReassignments
(Kafka's ``ReplicationControlManager.alterPartitionReassignments`` with
``PartitionReassignmentReplicas``, ``PartitionReassignmentRevert`` and the reassignment part
of ``PartitionChangeBuilder``).

Theory of operation
-------------------
A reassignment moves a partition from its current replicas to a target set in three steps, each
a PartitionChangeRecord the brokers act on like any other registration change:

1. **start** (this module, on request): ``replicas`` becomes the target followed by the replicas
   being removed; ``adding_replicas`` = target - current, ``removing_replicas`` = current -
   target. Brokers in ``adding_replicas`` open the partition as followers and fetch from the
   leader; nothing else changes (the leader and the ISR stay).
2. **catch up** (the partition leader): the leader adds each new replica to the ISR with
   AlterPartition once it has caught up, exactly as for any follower.
3. **complete** (:func:`completed`, applied to every ISR change of ``alter_partition`` and to
   the start itself): once every target replica is in the ISR, ``replicas`` becomes the target,
   removed replicas leave the ISR, both lists are emptied and, if the leader was removed, the
   first target replica in the ISR that is active takes over (a clean election). Brokers that
   are no longer replicas delete the partition. A change that shrinks the replica set bumps the
   leader epoch, so fetches of the removed replicas are fenced.

A request that merely reorders replicas, or removes some while the rest are in the ISR,
completes in step 1. A new request for a partition under reassignment starts from its current
``replicas`` (those being added included), as Kafka's does. Cancelling (``replicas`` null)
reverts to the original replicas (``replicas`` - ``adding_replicas``) with the added ones taken
out of the ISR; if that would leave the ISR empty the revert needs an unclean election, which
only a topic allowing it gets (else INVALID_REPLICA_ASSIGNMENT).

Each partition of AlterPartitionReassignments answers the first error that applies:
UNKNOWN_TOPIC_OR_PARTITION (no such topic or partition); for a cancel,
NO_REASSIGNMENT_IN_PROGRESS; for a target, INVALID_REPLICA_ASSIGNMENT (empty, a broker named
twice, a broker that is not registered), then INVALID_REPLICATION_FACTOR when the v1 request
forbids changing the replication factor (KIP-860) and the target's size differs from the
current (original) replica count. A refused partition writes nothing; the others of the request
are applied (one batch). A target equal to the current registration writes nothing and answers
NONE.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kafka_protocol.metadata import PartitionChangeRecord
from kafka_protocol.types import BrokerId
from kraft.controller.partitions import (
    IsActive,
    PartitionChanges,
    UncleanPolicy,
    active_brokers,
)
from kraft.controller.result import ControllerResult
from metadata_log.image import (
    NO_LEADER,
    ClusterImage,
    LeaderRecoveryState,
    PartitionImage,
    TopicImage,
)

# Bounds one request's batch, as Kafka's MAX_RECORDS_PER_USER_OP does.
MAX_REASSIGNMENTS_PER_REQUEST: Final = 10_000

PartitionResponse = AlterPartitionReassignmentsResponse.ReassignablePartitionResponse
TopicResponse = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
Ongoing = ListPartitionReassignmentsResponse.OngoingPartitionReassignment
OngoingTopic = ListPartitionReassignmentsResponse.OngoingTopicReassignment


class _Refused(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass(frozen=True, slots=True)
class Target:
    """What a partition's registration should become (before completion is considered)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    unclean: bool = False  # the election may pick a replica outside the ISR


def in_progress(partition: PartitionImage) -> bool:
    return bool(partition.adding_replicas or partition.removing_replicas)


def original_replicas(partition: PartitionImage) -> tuple[int, ...]:
    """The replicas before the reassignment in progress (those being added left out)."""
    return tuple(b for b in partition.replicas if b not in partition.adding_replicas)


def started(partition: PartitionImage, target: Sequence[int]) -> Target:
    """Kafka's ``PartitionReassignmentReplicas(current, target)``: the target first, then the
    replicas being removed (both differences sorted, as Kafka's TreeSet)."""
    current = partition.replicas
    removing = tuple(sorted(set(current) - set(target)))
    adding = tuple(sorted(set(target) - set(current)))
    return Target(tuple(target) + removing, partition.isr, adding, removing)


def reverted(partition: PartitionImage) -> Target:
    """Kafka's ``PartitionReassignmentRevert``: the original replicas, the added ones out of
    the ISR; an ISR left empty needs an unclean election of the first original replica."""
    replicas = original_replicas(partition)
    isr = tuple(b for b in partition.isr if b not in partition.adding_replicas)
    if isr:
        return Target(replicas, isr, (), ())
    if not replicas:
        raise _Refused(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Invalid replica assignment: addingReplicas contains all replicas.",
        )
    return Target(replicas, (replicas[0],), (), (), unclean=True)


def completed(target: Target) -> Target:
    """Kafka's ``maybeCompleteReassignment``: once every replica not being removed is in the
    ISR, the removed ones leave both lists and the reassignment is over."""
    if not target.adding and not target.removing:
        return target
    isr = tuple(b for b in target.isr if b not in target.removing)
    replicas = tuple(b for b in target.replicas if b not in target.removing)
    if not isr or not replicas or not set(replicas) <= set(isr):
        return target
    return Target(replicas, isr, (), (), target.unclean)


def _elect(partition: PartitionImage, target: Target, is_active: IsActive) -> tuple[int, bool]:
    """(leader, unclean): Kafka's ``electAnyLeader`` over the target replicas."""
    if partition.leader in target.isr and is_active(partition.leader):
        return partition.leader, False
    clean = next((b for b in target.replicas if b in target.isr and is_active(b)), NO_LEADER)
    if clean != NO_LEADER or not target.unclean:
        return clean, False
    return next((b for b in target.replicas if is_active(b)), NO_LEADER), True


def change_record(
    topic_id: uuid.UUID,
    partition_id: int,
    partition: PartitionImage,
    target: Target,
    is_active: IsActive,
    recovery_state: int | None = None,
) -> PartitionChangeRecord | None:
    """The record taking ``partition`` to ``target`` (completed if it can be), with the election
    it implies; None when nothing changes (Kafka's ``PartitionChangeBuilder.build``)."""
    target = completed(target)
    record = PartitionChangeRecord(partition_id=partition_id, topic_id=topic_id)
    leader, unclean = _elect(partition, target, is_active)
    isr = target.isr
    if leader != partition.leader:
        record.leader = BrokerId(leader)
        if unclean:
            isr = (leader,)
            if partition.leader_recovery_state != LeaderRecoveryState.RECOVERING:
                record.leader_recovery_state = LeaderRecoveryState.RECOVERING
    elif not set(partition.replicas) <= set(target.replicas):
        # Removed replicas must not fetch at the old epoch: bump it.
        record.leader = BrokerId(partition.leader)
    if isr != partition.isr:
        record.isr = [BrokerId(b) for b in isr]
    if target.replicas != partition.replicas:
        record.replicas = [BrokerId(b) for b in target.replicas]
    if target.removing != partition.removing_replicas:
        record.removing_replicas = [BrokerId(b) for b in target.removing]
    if target.adding != partition.adding_replicas:
        record.adding_replicas = [BrokerId(b) for b in target.adding]
    if recovery_state is not None and recovery_state != partition.leader_recovery_state:
        record.leader_recovery_state = recovery_state
    unchanged = PartitionChangeRecord(partition_id=partition_id, topic_id=topic_id)
    return None if record == unchanged else record


def isr_change(
    topic_id: uuid.UUID,
    partition_id: int,
    partition: PartitionImage,
    isr: tuple[int, ...],
    is_active: IsActive,
    recovery_state: int,
) -> PartitionChangeRecord | None:
    """An accepted AlterPartition on a partition under reassignment: the new ISR, completing
    the reassignment when it holds every target replica."""
    target = Target(partition.replicas, isr, partition.adding_replicas, partition.removing_replicas)
    return change_record(topic_id, partition_id, partition, target, is_active, recovery_state)


# --- AlterPartitionReassignments ------------------------------------------------------------


def alter_partition_reassignments(
    request: AlterPartitionReassignmentsRequest, image: ClusterImage, unclean: UncleanPolicy
) -> ControllerResult[AlterPartitionReassignmentsResponse]:
    changes = PartitionChanges(image)
    is_active = active_brokers(image)
    responses, count = [], 0
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            count += 1
            error: ErrorCode
            message: str | None
            if count > MAX_REASSIGNMENTS_PER_REQUEST:
                error = ErrorCode.INVALID_REQUEST
                message = f"at most {MAX_REASSIGNMENTS_PER_REQUEST} partitions per request"
            else:
                error, message = _alter_one(changes, is_active, unclean, request, topic.name, p)
            partitions.append(
                PartitionResponse(
                    partition_index=p.partition_index, error_code=error, error_message=message
                )
            )
        responses.append(TopicResponse(name=topic.name, partitions=partitions))
    response = AlterPartitionReassignmentsResponse(
        allow_replication_factor_change=request.allow_replication_factor_change,
        responses=responses,
    )
    return ControllerResult(changes.records, response)


def _alter_one(
    changes: PartitionChanges,
    is_active: IsActive,
    unclean: UncleanPolicy,
    request: AlterPartitionReassignmentsRequest,
    name: str,
    wanted: AlterPartitionReassignmentsRequest.ReassignablePartition,
) -> tuple[ErrorCode, str | None]:
    topic = changes.image.topics.get(name)
    partition = None if topic is None else changes.partition(topic, wanted.partition_index)
    if topic is None or partition is None:
        message = f"Unable to find partition {name}:{wanted.partition_index}."
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message
    try:
        target = _target(changes.image, request, name, partition, wanted.replicas, unclean)
    except _Refused as refused:
        return refused.error, refused.message
    record = change_record(topic.topic_id, wanted.partition_index, partition, target, is_active)
    if record is not None:
        changes.add(topic, wanted.partition_index, partition, record)
    return ErrorCode.NONE, None


def _target(
    image: ClusterImage,
    request: AlterPartitionReassignmentsRequest,
    name: str,
    partition: PartitionImage,
    replicas: list[BrokerId] | None,
    unclean: UncleanPolicy,
) -> Target:
    if replicas is None:
        if not in_progress(partition):
            raise _Refused(
                ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                "No partition reassignment is in progress for this topic or partition.",
            )
        target = reverted(partition)
        if target.unclean and not unclean(name):
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Unable to revert partition assignment for {name} because it would "
                "require an unclean leader election.",
            )
        return target
    _validate(image, replicas)
    if not request.allow_replication_factor_change and len(replicas) != len(
        original_replicas(partition)
    ):
        raise _Refused(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "The replication factor is changed from "
            f"{len(original_replicas(partition))} to {len(replicas)}, which the request "
            "does not allow.",
        )
    return started(partition, [int(b) for b in replicas])


def _validate(image: ClusterImage, replicas: Sequence[int]) -> None:
    """Kafka's ``validateManualPartitionAssignment``."""
    if not replicas:
        raise _Refused(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        )
    seen: set[int] = set()
    for broker_id in sorted(replicas):
        if broker_id not in image.brokers:
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {broker_id}, but no such "
                "broker is registered.",
            )
        if broker_id in seen:
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {broker_id} more than once.",
            )
        seen.add(broker_id)


# --- ListPartitionReassignments -------------------------------------------------------------


def list_partition_reassignments(
    request: ListPartitionReassignmentsRequest, image: ClusterImage
) -> ControllerResult[ListPartitionReassignmentsResponse]:
    """The partitions under reassignment: every one (``topics`` null) or those named; unknown
    topics and partitions are left out, as Kafka does."""
    out = []
    if request.topics is None:
        wanted = [(topic, sorted(topic.partitions)) for topic in _by_name(image)]
    else:
        wanted = [
            (topic, list(t.partition_indexes))
            for t in request.topics
            if (topic := image.topics.get(t.name)) is not None
        ]
    for topic, indexes in wanted:
        ongoing = [
            Ongoing(
                partition_index=i,
                replicas=[BrokerId(b) for b in p.replicas],
                adding_replicas=[BrokerId(b) for b in p.adding_replicas],
                removing_replicas=[BrokerId(b) for b in p.removing_replicas],
            )
            for i in indexes
            if (p := topic.partitions.get(i)) is not None and in_progress(p)
        ]
        if ongoing:
            out.append(OngoingTopic(name=topic.name, partitions=ongoing))  # type: ignore[arg-type]
    return ControllerResult([], ListPartitionReassignmentsResponse(topics=out))


def _by_name(image: ClusterImage) -> list[TopicImage]:
    return [image.topics.by_name[n] for n in sorted(image.topics.by_name)]
