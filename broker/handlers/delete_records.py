"""DeleteRecords 0-2: move partitions' log start offsets (broker/delete_records.py has the
rules).

Per partition, as Kafka's ``handleDeleteRecordsRequest`` answers: DELETE on the topic
(TOPIC_AUTHORIZATION_FAILED, broker/security), a partition the metadata does not have
(UNKNOWN_TOPIC_OR_PARTITION), an internal topic (INVALID_TOPIC_EXCEPTION), a partition not led
here (NOT_LEADER_OR_FOLLOWER), a topic whose ``cleanup.policy`` lacks ``delete``
(POLICY_VIOLATION), an offset beyond the high watermark (OFFSET_OUT_OF_RANGE).  The answer
waits until the in-sync followers moved their log start too, at most ``timeout_ms``
(REQUEST_TIMED_OUT).
"""

from __future__ import annotations

import asyncio

from broker.deferred import Deferred
from broker.delete_records import INVALID_LOW_WATERMARK, LowWatermarkAnswer, answered
from broker.dispatcher import ApiHandler, RequestContext
from broker.handlers.metadata import INTERNAL_TOPICS
from broker.identity import ImageSource
from broker.replica_manager import ReplicaManager
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse
from kafka_protocol.types import TopicName

PartitionResult = DeleteRecordsResponse.DeleteRecordsPartitionResult
Slot = tuple[TopicName, int, Deferred[LowWatermarkAnswer]]


class DeleteRecordsHandler:
    def __init__(self, replicas: ReplicaManager, image: ImageSource) -> None:
        self.replicas = replicas
        self.image = image

    def spec(self) -> ApiHandler:
        return ApiHandler(21, 0, 2, self.handle, "DeleteRecords")

    def handle(
        self, ctx: RequestContext, req: DeleteRecordsRequest
    ) -> DeleteRecordsResponse | Deferred[DeleteRecordsResponse | None]:
        del ctx
        slots = [
            (t.name, p.partition_index, self._one(t.name, p.partition_index, p.offset))
            for t in req.topics
            for p in t.partitions
        ]
        waiting = [answer for _, _, answer in slots if not answer.done]
        if not waiting:
            return _respond(slots)
        reply: Deferred[DeleteRecordsResponse | None] = Deferred()
        remaining = len(waiting)

        def one_done(_: LowWatermarkAnswer) -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0:
                timer.cancel()
                reply.resolve(_respond(slots))

        def expire() -> None:
            for answer in waiting:
                if not answer.done:
                    answer.resolve(
                        LowWatermarkAnswer(ErrorCode.REQUEST_TIMED_OUT, INVALID_LOW_WATERMARK)
                    )

        timer = asyncio.get_running_loop().call_later(max(0, req.timeout_ms) / 1000, expire)
        for answer in waiting:
            answer.then(one_done)
        return reply

    def _one(self, topic: str, index: int, offset: int) -> Deferred[LowWatermarkAnswer]:
        if self.image().topics.partition(topic, index) is None:
            return answered(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if topic in INTERNAL_TOPICS:
            return answered(ErrorCode.INVALID_TOPIC_EXCEPTION)
        part = self.replicas.get(topic, index)
        if part is None:
            missing = self.replicas.missing_error(topic, index)
            # in the metadata but not hosted here: Kafka's getPartitionOrException
            if missing is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                missing = ErrorCode.NOT_LEADER_OR_FOLLOWER
            return answered(missing)
        return self.replicas.delete_records(part, offset)


def _respond(slots: list[Slot]) -> DeleteRecordsResponse:
    topics: dict[TopicName, list[PartitionResult]] = {}
    for topic, index, answer in slots:
        result = answer.result()
        topics.setdefault(topic, []).append(
            PartitionResult(
                partition_index=index,
                low_watermark=result.low_watermark,
                error_code=result.error,
            )
        )
    return DeleteRecordsResponse(
        topics=[
            DeleteRecordsResponse.DeleteRecordsTopicResult(name=name, partitions=parts)
            for name, parts in topics.items()
        ]
    )
