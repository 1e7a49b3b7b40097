"""Replicas' log directories in the metadata (KIP-858): AssignReplicasToDirs, and what a
failed directory takes away.

A broker with several log directories tells the controller where each replica lives
(AssignReplicasToDirs, when it places a new replica or has moved one); the controller records
it in the partition (``PartitionChangeRecord.directories``, in replica order).  When a
heartbeat reports directories offline, the replicas assigned to them leave their ISRs and
their leaderships move to in-sync replicas elsewhere (Kafka's ``handleDirectoriesOffline``);
the broker's replicas in its other directories are untouched.  A replica not assigned to any
directory (a broker with one directory, or one not yet reported) goes only when the broker has
no directory online at all (``cluster.offline_dir_records``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AssignReplicasToDirsRequest, AssignReplicasToDirsResponse
from kafka_protocol.metadata import PartitionChangeRecord
from kraft.controller.partitions import UncleanPolicy, all_partitions, records_for_broker_leaving
from kraft.controller.result import ControllerResult
from metadata_log.delta import replay_records
from metadata_log.image import DIRECTORY_UNASSIGNED, ClusterImage, PartitionImage
from metadata_log.records import MetadataRecord

Response = AssignReplicasToDirsResponse


def assign_replicas_to_dirs(
    request: AssignReplicasToDirsRequest, image: ClusterImage, unclean: UncleanPolicy
) -> ControllerResult[Response]:
    broker = image.brokers.get(request.broker_id)
    if broker is None:
        return ControllerResult([], Response(error_code=ErrorCode.BROKER_ID_NOT_REGISTERED))
    if broker.epoch != request.broker_epoch:
        return ControllerResult([], Response(error_code=ErrorCode.STALE_BROKER_EPOCH))
    records: list[MetadataRecord] = []
    answered = []
    offline_assigned: list[tuple[uuid.UUID, int]] = []
    for directory in request.directories:
        topics = []
        for topic in directory.topics:
            parts = []
            for p in topic.partitions:
                error, record = _assign(image, request.broker_id, topic.topic_id, p, directory.id)
                if record is not None:
                    records.append(record)
                    if directory.id in broker.offline_directories:
                        offline_assigned.append((topic.topic_id, p.partition_index))
                parts.append(
                    Response.PartitionData(partition_index=p.partition_index, error_code=error)
                )
            topics.append(Response.TopicData(topic_id=topic.topic_id, partitions=parts))
        answered.append(Response.DirectoryData(id=directory.id, topics=topics))
    if offline_assigned:  # assigned to a directory already offline: the replica goes too
        after = replay_records(image, records)
        records += records_for_broker_leaving(
            after, request.broker_id, unclean, only=set(offline_assigned)
        )
    return ControllerResult(records, Response(directories=answered))


def _assign(
    image: ClusterImage,
    broker_id: int,
    topic_id: uuid.UUID,
    p: AssignReplicasToDirsRequest.PartitionData,
    directory: uuid.UUID,
) -> tuple[ErrorCode, PartitionChangeRecord | None]:
    topic = image.topics.by_id.get(topic_id)
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_ID, None
    partition = topic.partitions.get(p.partition_index)
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    if broker_id not in partition.replicas:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
    if partition.directory_of(broker_id) == directory:
        return ErrorCode.NONE, None
    return ErrorCode.NONE, PartitionChangeRecord(
        partition_id=p.partition_index,
        topic_id=topic_id,
        directories=_with(partition, broker_id, directory),
    )


def _with(partition: PartitionImage, broker_id: int, directory: uuid.UUID) -> list[uuid.UUID]:
    dirs = [partition.directory_of(b) for b in partition.replicas]
    dirs[partition.replicas.index(broker_id)] = directory
    return dirs


def replicas_in_dirs(
    image: ClusterImage, broker_id: int, directories: Iterable[uuid.UUID]
) -> set[tuple[uuid.UUID, int]]:
    """The (topic id, partition) of the broker's replicas assigned to ``directories``."""
    wanted = set(directories) - {DIRECTORY_UNASSIGNED}
    return {
        (topic.topic_id, partition_id)
        for topic, partition_id, partition in all_partitions(image)
        if broker_id in partition.replicas and partition.directory_of(broker_id) in wanted
    }
