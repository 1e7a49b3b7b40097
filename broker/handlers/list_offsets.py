"""ListOffsets 1-10: earliest (-2), latest (-1), max timestamp (-3, v7), earliest local (-4, v8),
latest tiered (-5, v9) or by timestamp.

"Latest" is the high watermark (read_uncommitted) or the last stable offset (read_committed);
without transactions both are the high watermark.  A timestamp with no record at or after it
answers offset -1 and timestamp -1, as Kafka does.  Without tiered storage (KIP-405) the local
log is the whole log: earliest local is the log start offset, and latest tiered is offset -1
with leader epoch -1, as Kafka answers for a topic with remote storage off.  v10 (KIP-1075) adds
a timeout for remote lookups, which there are none of.
"""

from __future__ import annotations

from broker.dispatcher import ApiHandler, RequestContext
from broker.handlers.fetch import check_leader
from broker.log.errors import LogError
from broker.partition import Partition
from broker.replica_manager import ReplicaManager
from broker.replication.partition_state import PartitionState
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.messages import ListOffsetsRequest, ListOffsetsResponse

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4  # KIP-405
LATEST_TIERED = -5  # KIP-1005
READ_COMMITTED = 1  # isolation_level (v2+)
LEADER_EPOCH_VERSION = 4  # ListOffsets v4 added the leader epoch (KIP-320)

Answer = ListOffsetsResponse.ListOffsetsPartitionResponse


def _lookup(part: Partition, timestamp: int) -> tuple[int, int] | ErrorCode | None:
    """The log's answer, or the error code of a log that cannot answer (offline, corrupt)."""
    try:
        return part.log.offset_for_timestamp(timestamp)
    except LogError as exc:
        return exc.error_code
    except ProtocolError as exc:  # a batch whose records do not decode
        return exc.error_code


class ListOffsetsHandler:
    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def spec(self) -> ApiHandler:
        return ApiHandler(2, 1, 10, self.handle, "ListOffsets")

    def handle(self, ctx: RequestContext, req: ListOffsetsRequest) -> ListOffsetsResponse:
        return ListOffsetsResponse(
            topics=[
                ListOffsetsResponse.ListOffsetsTopicResponse(
                    name=topic.name,
                    partitions=[
                        self._one(topic.name, p, ctx.api_version, req.isolation_level)
                        for p in topic.partitions
                    ],
                )
                for topic in req.topics
            ]
        )

    def _one(
        self,
        topic: str,
        p: ListOffsetsRequest.ListOffsetsPartition,
        version: int,
        isolation_level: int,
    ) -> Answer:
        part = self.replicas.get(topic, p.partition_index)
        if part is None:
            error = self.replicas.missing_error(topic, p.partition_index)
            return Answer(partition_index=p.partition_index, error_code=error)
        error = check_leader(part, p.current_leader_epoch)
        if error is not ErrorCode.NONE:
            return Answer(partition_index=p.partition_index, error_code=error)
        epoch = part.leader_epoch if version >= LEADER_EPOCH_VERSION else -1
        # Kafka's lastFetchableOffset: what a consumer of this isolation level may read.
        fetchable = (
            part.last_stable_offset if isolation_level == READ_COMMITTED else part.high_watermark
        )
        # KIP-207: a new leader's high watermark may lag what its predecessor exposed until
        # the followers fetch; "latest" must not go backwards, so answer the retriable
        # OFFSET_NOT_AVAILABLE until the high watermark reaches this leadership's start.
        catching_up = isinstance(part.role, PartitionState) and (
            part.high_watermark < part.role.leader_epoch_start_offset
        )
        if p.timestamp == LATEST:
            if catching_up:
                return Answer(
                    partition_index=p.partition_index, error_code=ErrorCode.OFFSET_NOT_AVAILABLE
                )
            offset, ts = fetchable, -1
        elif p.timestamp in (EARLIEST, EARLIEST_LOCAL):
            offset, ts = part.log_start_offset, -1
        elif p.timestamp == LATEST_TIERED:
            offset, ts, epoch = -1, -1, -1
        elif p.timestamp == MAX_TIMESTAMP:
            found = _lookup(part, MAX_TIMESTAMP)
            if isinstance(found, ErrorCode):
                return Answer(partition_index=p.partition_index, error_code=found)
            offset, ts = found if found is not None else (-1, -1)
        elif p.timestamp < 0:
            return Answer(partition_index=p.partition_index, error_code=ErrorCode.INVALID_REQUEST)
        else:
            found = _lookup(part, p.timestamp)
            if isinstance(found, ErrorCode):
                return Answer(partition_index=p.partition_index, error_code=found)
            if found is not None and found[0] >= part.high_watermark and catching_up:
                return Answer(
                    partition_index=p.partition_index, error_code=ErrorCode.OFFSET_NOT_AVAILABLE
                )
            if found is None or found[0] >= fetchable:
                offset, ts = -1, -1
            else:
                offset, ts = found
        return Answer(
            partition_index=p.partition_index,
            error_code=ErrorCode.NONE,
            timestamp=ts,
            offset=offset,
            leader_epoch=epoch,
            old_style_offsets=[],
        )
