"""The coordinator's marker channel: markers for partitions its own broker leads are written in
process (the WriteTxnMarkers handler's work, no request to itself), the others go to their
leaders over the inter-broker connections; a retriable answer either way is retried."""

from __future__ import annotations

import asyncio
import uuid
from typing import cast

from broker.transaction.markers import Marker, MarkerChannel
from broker.transaction.remote import BrokerConnections
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from kafka_protocol.metadata import PartitionRecord, TopicRecord
from kafka_protocol.types import BrokerId, TopicName
from metadata_log.delta import MetadataDelta
from metadata_log.image import ClusterImage
from metadata_log.records import MetadataRecord

SELF = 1
LEADERS = {0: 1, 1: 2, 2: 1}  # partition of topic "t" -> its leader


def _image() -> ClusterImage:
    topic_id = uuid.uuid4()
    records: list[MetadataRecord] = [TopicRecord(name="t", topic_id=topic_id)]
    for index, leader in LEADERS.items():
        records.append(
            PartitionRecord(
                partition_id=index,
                topic_id=topic_id,
                replicas=[BrokerId(1), BrokerId(2)],
                isr=[BrokerId(1), BrokerId(2)],
                leader=BrokerId(leader),
                leader_epoch=0,
                partition_epoch=0,
            )
        )
    return MetadataDelta(ClusterImage.EMPTY).replay_all(records).apply()


def _answer(markers: list[Marker], error: ErrorCode) -> WriteTxnMarkersResponse:
    Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
    Topic = WriteTxnMarkersResponse.WritableTxnMarkerTopicResult
    Part = WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult
    return WriteTxnMarkersResponse(
        markers=[
            Result(
                producer_id=m.producer_id,
                topics=[
                    Topic(
                        name=TopicName(t.name),
                        partitions=[
                            Part(partition_index=i, error_code=error) for i in t.partition_indexes
                        ],
                    )
                    for t in m.topics
                ],
            )
            for m in markers
        ]
    )


def _partitions(markers: list[Marker]) -> list[tuple[str, int]]:
    return [(str(t.name), i) for m in markers for t in m.topics for i in t.partition_indexes]


class Network:
    """The inter-broker connections: what each broker was asked, every marker answered
    NONE."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, list[tuple[str, int]]]] = []

    async def request(
        self, broker_id: int, request: Request, max_version: int, min_version: int = 0
    ) -> Response:
        assert isinstance(request, WriteTxnMarkersRequest)
        self.asked.append((broker_id, _partitions(request.markers)))
        return _answer(request.markers, ErrorCode.NONE)


class LocalHandler:
    """The handler's ``write``: answers ``first`` once, then NONE."""

    def __init__(self, first: ErrorCode = ErrorCode.NONE) -> None:
        self.calls: list[list[tuple[str, int]]] = []
        self.first = first

    async def write(self, markers: list[Marker]) -> WriteTxnMarkersResponse:
        self.calls.append(_partitions(markers))
        error, self.first = self.first, ErrorCode.NONE
        return _answer(markers, error)


def _write(channel: MarkerChannel) -> bool:
    async def run() -> bool:
        try:
            return await channel.write(7, 0, True, 0, [("t", 0), ("t", 1), ("t", 2)], lambda: True)
        finally:
            await channel.close()

    return asyncio.run(run())


def test_the_partitions_this_broker_leads_are_written_in_process() -> None:
    network, local = Network(), LocalHandler()
    channel = MarkerChannel(cast(BrokerConnections, network), _image, SELF)
    channel.deliver_locally(local.write)
    assert _write(channel)
    assert local.calls == [[("t", 0), ("t", 2)]]
    assert network.asked == [(2, [("t", 1)])]  # nothing sent to broker 1 itself


def test_without_a_local_writer_every_leader_is_asked_over_the_network() -> None:
    network = Network()
    channel = MarkerChannel(cast(BrokerConnections, network), _image, SELF)
    assert _write(channel)
    assert sorted(network.asked) == [(1, [("t", 0), ("t", 2)]), (2, [("t", 1)])]


def test_a_retriable_answer_from_the_local_write_is_retried() -> None:
    network, local = Network(), LocalHandler(first=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    channel = MarkerChannel(cast(BrokerConnections, network), _image, SELF)
    channel.deliver_locally(local.write)
    assert _write(channel)
    assert local.calls == [[("t", 0), ("t", 2)], [("t", 0), ("t", 2)]]
    assert network.asked == [(2, [("t", 1)])]


def test_a_fenced_answer_from_the_local_write_stops_the_sending() -> None:
    network, local = Network(), LocalHandler(first=ErrorCode.TRANSACTION_COORDINATOR_FENCED)
    channel = MarkerChannel(cast(BrokerConnections, network), _image, SELF)
    channel.deliver_locally(local.write)
    assert not _write(channel)
    assert local.calls == [[("t", 0), ("t", 2)]]
