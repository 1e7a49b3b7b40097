"""DescribeLogDirs 0-4 and AlterReplicaLogDirs 0-2: this broker's log directories (JBOD,
``log.dirs``), answered by the broker itself (Kafka sends them to each broker).

DescribeLogDirs lists every configured directory: an offline one with KAFKA_STORAGE_ERROR and
nothing else, an online one with its partitions (size in bytes, ``offset_lag``: how far the
replica's log end is below the high watermark, or for a replica being moved, ``is_future_key``,
how far the future log is below the current one) and, v4, the volume's total and usable bytes.
``topics`` null means every partition.  Authorization: DESCRIBE on the cluster (else, v3+,
CLUSTER_AUTHORIZATION_FAILED and no directory).

AlterReplicaLogDirs moves replicas between this broker's directories while they serve
(broker/log_dir_moves.py): per partition NONE (the move started, or the replica is already
there), LOG_DIR_NOT_FOUND for a path that is not one of ``log.dirs`` (nothing changed),
KAFKA_STORAGE_ERROR for an offline directory or replica, REPLICA_NOT_AVAILABLE for a partition
not hosted here.  Authorization: ALTER on the cluster.
"""

from __future__ import annotations

import shutil

from broker.dispatcher import ApiHandler, RequestContext
from broker.log_dir import LogDirectory
from broker.partition import Partition
from broker.replica_manager import ReplicaManager
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)
from kafka_protocol.types import TopicName

UNKNOWN_VOLUME_BYTES = -1  # DescribeLogDirsResponse.UNKNOWN_VOLUME_BYTES

Described = DescribeLogDirsResponse.DescribeLogDirsResult
DescribedTopic = DescribeLogDirsResponse.DescribeLogDirsTopic
DescribedPartition = DescribeLogDirsResponse.DescribeLogDirsPartition
Moved = AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult
MovedPartition = AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult


def _volume_bytes(path: str) -> tuple[int, int]:
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return UNKNOWN_VOLUME_BYTES, UNKNOWN_VOLUME_BYTES
    return usage.total, usage.free


class LogDirsHandlers:
    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def specs(self) -> list[ApiHandler]:
        return [
            ApiHandler(35, 0, 4, self.describe, "DescribeLogDirs"),
            ApiHandler(34, 0, 2, self.alter, "AlterReplicaLogDirs"),
        ]

    # --- DescribeLogDirs ----------------------------------------------------------------------

    def describe(self, ctx: RequestContext, req: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
        del ctx
        wanted: set[tuple[str, int]] | None = None
        if req.topics is not None:
            wanted = {(t.topic, p) for t in req.topics for p in t.partitions}
        return describe_log_dirs(self.replicas, wanted)

    # --- AlterReplicaLogDirs ------------------------------------------------------------------

    def alter(
        self, ctx: RequestContext, req: AlterReplicaLogDirsRequest
    ) -> AlterReplicaLogDirsResponse:
        del ctx
        results: dict[str, list[MovedPartition]] = {}
        for target in req.dirs:
            for topic in target.topics:
                for index in topic.partitions:
                    error = self.replicas.move_replica(topic.name, index, target.path)
                    results.setdefault(topic.name, []).append(
                        MovedPartition(partition_index=index, error_code=error)
                    )
        return AlterReplicaLogDirsResponse(
            results=[
                Moved(topic_name=TopicName(name), partitions=parts)
                for name, parts in results.items()
            ]
        )


def describe_log_dirs(
    replicas: ReplicaManager, wanted: set[tuple[str, int]] | None = None
) -> DescribeLogDirsResponse:
    """Every directory of this broker, with the partitions in ``wanted`` (None: all)."""
    return DescribeLogDirsResponse(
        results=[_describe_dir(replicas, d, wanted) for d in replicas.log_dirs]
    )


def _describe_dir(
    replicas: ReplicaManager, log_dir: LogDirectory, wanted: set[tuple[str, int]] | None
) -> Described:
    if not log_dir.online:
        return Described(
            error_code=ErrorCode.KAFKA_STORAGE_ERROR,
            log_dir=log_dir.path,
            topics=[],
            total_bytes=UNKNOWN_VOLUME_BYTES,
            usable_bytes=UNKNOWN_VOLUME_BYTES,
        )
    topics: dict[str, list[DescribedPartition]] = {}
    for (topic, index), part in sorted(replicas.partitions.items()):
        if wanted is not None and (topic, index) not in wanted:
            continue
        if part.log_dir is log_dir and not part.offline:
            topics.setdefault(topic, []).append(_current(part))
        future = replicas.moving.get(part)
        if future is not None and future.dest is log_dir:
            topics.setdefault(topic, []).append(
                DescribedPartition(
                    partition_index=index,
                    partition_size=future.log.size_bytes,
                    offset_lag=max(0, part.log_end_offset - future.log.log_end_offset),
                    is_future_key=True,
                )
            )
    total, usable = _volume_bytes(log_dir.path)
    return Described(
        log_dir=log_dir.path,
        topics=[
            DescribedTopic(name=TopicName(name), partitions=parts) for name, parts in topics.items()
        ],
        total_bytes=total,
        usable_bytes=usable,
    )


def _current(part: Partition) -> DescribedPartition:
    return DescribedPartition(
        partition_index=part.index,
        partition_size=part.log.size_bytes,
        offset_lag=max(0, part.high_watermark - part.log_end_offset),
        is_future_key=False,
    )
