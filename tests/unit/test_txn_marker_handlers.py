"""WriteTxnMarkers and DescribeProducers handlers over a real ReplicaManager: markers per
partition with Kafka's error codes, the group coordinator told of committed markers on
``__consumer_offsets`` only, DescribeProducers answering for leaders only."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from broker.dispatcher import RequestContext
from broker.handlers.txn_markers import DescribeProducersHandler, WriteTxnMarkersHandler
from broker.log.config import LogConfig
from broker.replica_manager import Registration, ReplicaManager
from broker.security.session import Session
from broker.storage import MemoryStorage
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    DescribeProducersRequest,
    RequestHeader,
    WriteTxnMarkersRequest,
)
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch
from kafka_protocol.types import ProducerId, TopicName

CTX = RequestContext(RequestHeader(), Session.internal(), 0.0, 0.0)
PID = 42


class RecordingListener:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int, bool]] = []

    def complete_transaction(
        self, offsets_partition: int, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        self.calls.append((offsets_partition, producer_id, producer_epoch, commit))


def _replicas() -> ReplicaManager:
    rm = ReplicaManager(MemoryStorage(), Path("/data"), broker_id=1)
    for topic, index, leader in (("t", 0, 1), ("__consumer_offsets", 3, 1), ("t", 1, 2)):
        rm.open_partition(
            topic,
            index,
            uuid.uuid4(),
            LogConfig(),
            max_message_bytes=1 << 20,
            registration=Registration(leader, 0, 0, (1, 2), (1,) if leader == 1 else (1, 2)),
        )
    return rm


def _marker(commit: bool, epoch: int, *partitions: tuple[str, int]) -> WriteTxnMarkersRequest:
    return WriteTxnMarkersRequest(
        markers=[
            WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=ProducerId(PID),
                producer_epoch=epoch,
                transaction_result=commit,
                coordinator_epoch=0,
                topics=[
                    WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                        name=TopicName(t), partition_indexes=[i]
                    )
                    for t, i in partitions
                ],
            )
        ]
    )


def _errors(response: object) -> dict[tuple[str, int], ErrorCode]:
    (result,) = response.markers  # type: ignore[attr-defined]
    assert result.producer_id == PID
    return {(t.name, p.partition_index): p.error_code for t in result.topics for p in t.partitions}


def test_markers_per_partition_and_the_group_coordinator_told_of_committed_ones() -> None:
    async def main() -> None:
        rm = _replicas()
        listener = RecordingListener()
        handler = WriteTxnMarkersHandler(rm, listener)
        for topic, index in (("t", 0), ("__consumer_offsets", 3)):
            part = rm.get(topic, index)
            assert part is not None
            batch = build_batch(
                [SimpleRecord(b"v")], producer_id=PID, producer_epoch=1, transactional=True
            )
            rm.append_nowait(part, RecordBatch(memoryview(batch)), acks=1)
        everywhere = (("t", 0), ("__consumer_offsets", 3), ("t", 1), ("t", 9))
        response = await handler.handle(CTX, _marker(True, 1, *everywhere))
        assert _errors(response) == {
            ("t", 0): ErrorCode.NONE,
            ("__consumer_offsets", 3): ErrorCode.NONE,
            ("t", 1): ErrorCode.NOT_LEADER_OR_FOLLOWER,
            ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert listener.calls == [(3, PID, 1, True)]
        stale = await handler.handle(CTX, _marker(False, 0, ("__consumer_offsets", 3)))
        assert _errors(stale) == {("__consumer_offsets", 3): ErrorCode.INVALID_PRODUCER_EPOCH}
        assert listener.calls == [(3, PID, 1, True)], "a refused marker completes nothing"

    asyncio.run(main())


def test_describe_producers_answers_on_every_replica() -> None:
    async def main() -> None:
        rm = _replicas()
        part = rm.get("t", 0)
        assert part is not None
        batch = build_batch(
            [SimpleRecord(b"v")],
            producer_id=PID,
            producer_epoch=2,
            base_sequence=0,
            transactional=True,
            now_ms=1234,
        )
        rm.append_nowait(part, RecordBatch(memoryview(batch)), acks=1)
        await asyncio.sleep(0)
        request = DescribeProducersRequest(
            topics=[
                DescribeProducersRequest.TopicRequest(
                    name=TopicName("t"), partition_indexes=[0, 1, 7]
                )
            ]
        )
        response = DescribeProducersHandler(rm).handle(CTX, request)
        answers = {p.partition_index: p for p in response.topics[0].partitions}
        follower = rm.get("t", 1)
        assert follower is not None and not follower.is_leader
        assert (answers[1].error_code, answers[1].active_producers) == (ErrorCode.NONE, [])
        assert answers[7].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        (producer,) = answers[0].active_producers
        assert (
            producer.producer_id,
            producer.producer_epoch,
            producer.last_sequence,
            producer.last_timestamp,
            producer.coordinator_epoch,
            producer.current_txn_start_offset,
        ) == (PID, 2, 0, 1234, -1, 0)

    asyncio.run(main())
