"""ElectLeaders from a broker to the controller: the broker's handler, the remote channel
(forwarded at v2 whatever the client's version; no controller: every partition and the request
REQUEST_TIMED_OUT) and the combined node's in-process channel."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from broker.controller_channel import ControllerChannel
from broker.dispatcher import RequestContext
from broker.handlers.admin import AdminHandlers
from broker.identity import BrokerIdentity
from broker.kafka_client import NoUsableVersionError
from broker.remote_controller import RemoteControllerChannel
from broker.security.session import Session
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    CreateTopicsRequest,
    ElectLeadersRequest,
    ElectLeadersResponse,
    RequestHeader,
)
from kafka_protocol.types import TopicName
from kraft.controller import ControllerConfig
from kraft.node.local_channel import LocalControllerChannel
from metadata_log.image import ClusterImage


def request(
    *partitions: int, election_type: int = 0, timeout_ms: int = 60_000
) -> ElectLeadersRequest:
    return ElectLeadersRequest(
        election_type=election_type,
        timeout_ms=timeout_ms,
        topic_partitions=[
            ElectLeadersRequest.TopicPartitions(topic=TopicName("t"), partitions=list(partitions))
        ],
    )


def answers(response: ElectLeadersResponse) -> list[tuple[str, int, int]]:
    return [
        (t.topic, r.partition_id, r.error_code)
        for t in response.replica_election_results
        for r in t.partition_result
    ]


class StubClient:
    """What RemoteControllerChannel needs of a ControllerClient."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.sent: list[tuple[Any, int]] = []

    async def request(self, request: Any, max_version: int, *, to_active: bool = True) -> Any:
        self.sent.append((request, max_version))
        if self.answer == "hang":
            await asyncio.Event().wait()
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Epoch:
    broker_epoch = 5


def remote(answer: Any) -> tuple[RemoteControllerChannel, StubClient]:
    client = StubClient(answer)
    channel = RemoteControllerChannel(client, Epoch(), unreachable_timeout_s=0.05)  # type: ignore[arg-type]
    as_protocol: ControllerChannel = channel
    assert as_protocol is channel
    return channel, client


@pytest.mark.parametrize("client_version", [0, 1, 2])
def test_forwarded_at_v2_and_answered_at_the_clients_version(client_version: int) -> None:
    controller_answer = ElectLeadersResponse(
        replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(
                topic=TopicName("t"),
                partition_result=[
                    ElectLeadersResponse.PartitionResult(
                        partition_id=0, error_code=ErrorCode.ELECTION_NOT_NEEDED
                    )
                ],
            )
        ]
    )
    channel, client = remote(controller_answer)
    response = asyncio.run(channel.forward(request(0), client_version))
    assert response is controller_answer
    ((sent, version),) = client.sent
    assert version == 2 and sent.election_type == 0
    decoded = ElectLeadersResponse.decode(response.encode(client_version), client_version)
    assert answers(decoded) == [("t", 0, ErrorCode.ELECTION_NOT_NEEDED)]


def test_no_controller_times_every_partition_out() -> None:
    channel, _ = remote("hang")
    response = asyncio.run(channel.forward(request(0, 1, timeout_ms=50), 2))
    assert response.error_code == ErrorCode.REQUEST_TIMED_OUT
    assert answers(response) == [
        ("t", 0, ErrorCode.REQUEST_TIMED_OUT),
        ("t", 1, ErrorCode.REQUEST_TIMED_OUT),
    ]
    every = asyncio.run(
        channel.forward(ElectLeadersRequest(topic_partitions=None, timeout_ms=50), 1)
    )
    assert (every.error_code, every.replica_election_results) == (ErrorCode.REQUEST_TIMED_OUT, [])


def test_a_controller_without_elect_leaders() -> None:
    channel, _ = remote(NoUsableVersionError(43, 2, "c:1"))
    response = asyncio.run(channel.forward(request(0), 2))
    assert answers(response) == [("t", 0, ErrorCode.UNSUPPORTED_VERSION)]


def test_the_broker_handler_forwards_at_the_clients_version() -> None:
    seen: list[tuple[ElectLeadersRequest, int]] = []

    class Channel:
        async def forward(self, req: ElectLeadersRequest, version: int) -> ElectLeadersResponse:
            seen.append((req, version))
            return ElectLeadersResponse()

    node = BrokerIdentity(1, "c", None, lambda: ("127.0.0.1", 9092))
    handlers = AdminHandlers(Channel(), node, lambda: ClusterImage.EMPTY, {})
    (spec,) = [h for h in handlers.specs() if h.api_key == 43]
    assert (spec.min_version, spec.max_version, spec.name) == (0, 2, "ElectLeaders")
    header = RequestHeader(request_api_key=43, request_api_version=1, correlation_id=1)
    ctx = RequestContext(header, Session.internal(), 0.0, 0.0)
    asyncio.run(spec.handle(ctx, request(0)))  # type: ignore[arg-type]
    assert seen == [(request(0), 1)]


def test_the_combined_nodes_channel(tmp_path: Path) -> None:
    async def scenario() -> None:
        channel = LocalControllerChannel.open(tmp_path, 1, "", ControllerConfig())
        try:
            await channel.register_broker("127.0.0.1", 9092, None)
            created = await channel.forward(
                CreateTopicsRequest(
                    topics=[
                        CreateTopicsRequest.CreatableTopic(
                            name=TopicName("t"), num_partitions=2, replication_factor=1
                        )
                    ]
                ),
                7,
            )
            assert created.topics[0].error_code == ErrorCode.NONE
            preferred = await channel.forward(request(0, 1, 2), 2)
            assert answers(preferred) == [
                ("t", 0, ErrorCode.ELECTION_NOT_NEEDED),
                ("t", 1, ErrorCode.ELECTION_NOT_NEEDED),
                ("t", 2, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            ]
            unclean = await channel.forward(request(0, election_type=1), 2)
            assert answers(unclean) == [("t", 0, ErrorCode.ELECTION_NOT_NEEDED)]
        finally:
            channel.close()

    asyncio.run(scenario())
