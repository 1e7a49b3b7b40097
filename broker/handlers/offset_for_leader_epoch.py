"""OffsetForLeaderEpoch 2-4: where an epoch ends in the leader's log (KIP-101, KIP-279).

A follower asks for the end of its latest epoch after a leader change and truncates what lies
beyond; a consumer (KIP-320) asks after a leader change whether its position is still in the
log.  The answer is the largest epoch not above the requested one and the start offset of the
next larger epoch (the log end offset for the latest), from the log's leader-epoch cache.
Only the leader answers; a stale or future ``current_leader_epoch`` is fenced as for Fetch.
"""

from __future__ import annotations

from broker.dispatcher import ApiHandler, RequestContext
from broker.handlers.fetch import check_leader
from broker.replica_manager import ReplicaManager
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

Answer = OffsetForLeaderEpochResponse.EpochEndOffset


class OffsetForLeaderEpochHandler:
    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def spec(self) -> ApiHandler:
        return ApiHandler(23, 2, 4, self.handle, "OffsetForLeaderEpoch")

    def handle(
        self, ctx: RequestContext, req: OffsetForLeaderEpochRequest
    ) -> OffsetForLeaderEpochResponse:
        return OffsetForLeaderEpochResponse(
            topics=[
                OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(
                    topic=topic.topic,
                    partitions=[self._one(topic.topic, p) for p in topic.partitions],
                )
                for topic in req.topics
            ]
        )

    def _one(self, topic: str, p: OffsetForLeaderEpochRequest.OffsetForLeaderPartition) -> Answer:
        part = self.replicas.get(topic, p.partition)
        if part is None:
            return Answer(
                error_code=self.replicas.missing_error(topic, p.partition), partition=p.partition
            )
        error = check_leader(part, p.current_leader_epoch)
        if error is not ErrorCode.NONE:
            return Answer(error_code=error, partition=p.partition)
        if part.log.offline:  # the cache is in memory, but the log it describes is not
            return Answer(error_code=ErrorCode.KAFKA_STORAGE_ERROR, partition=p.partition)
        found = part.log.end_offset_for_epoch(p.leader_epoch)
        return Answer(
            error_code=ErrorCode.NONE,
            partition=p.partition,
            leader_epoch=found.leader_epoch,
            end_offset=found.end_offset,
        )
