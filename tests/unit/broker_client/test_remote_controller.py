"""RemoteControllerChannel: forwarding to the active controller, per-item timeouts, and
responses that fit the client's version."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

import pytest
from fake_controller import FakeController, closed_port, running

from broker.controller_channel import ControllerChannel
from broker.kafka_client import ControllerClient
from broker.remote_controller import ControllerRequestError, RemoteControllerChannel
from kafka_protocol._codec import Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka_protocol.types import TopicName


@dataclass
class Epoch:
    broker_epoch: int = 101


def create(*names: str, timeout_ms: int = 60_000) -> CreateTopicsRequest:
    return CreateTopicsRequest(
        timeout_ms=timeout_ms,
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=TopicName(n), num_partitions=1, replication_factor=1
            )
            for n in names
        ],
    )


def channel_to(
    addresses: list[tuple[str, int]], timeout_s: float = 5.0
) -> tuple[RemoteControllerChannel, ControllerClient]:
    client = ControllerClient(addresses, "broker-1")
    channel = RemoteControllerChannel(client, Epoch(), unreachable_timeout_s=timeout_s)
    as_protocol: ControllerChannel = channel  # the broker takes it as its controller channel
    assert as_protocol is channel
    return channel, client


def test_create_topics_is_forwarded_to_the_active_controller_at_the_clients_version() -> None:
    async def scenario() -> None:
        standby, active = FakeController(active=False), FakeController()
        async with running(standby, active):
            channel, client = channel_to([standby.address, active.address])
            response = await channel.forward(create("a", "b"), 5)
            assert [(t.name, t.error_code) for t in response.topics] == [("a", 0), ("b", 0)]
            ((header, forwarded),) = active.requests_of(19)
            assert header.request_api_version == 5
            assert isinstance(forwarded, CreateTopicsRequest)
            assert [t.name for t in forwarded.topics] == ["a", "b"]
            response.encode(5)  # what the broker then sends its client
            client.close()

    asyncio.run(scenario())


def test_no_controller_answers_every_item_request_timed_out() -> None:
    async def scenario() -> None:
        channel, client = channel_to([("127.0.0.1", closed_port())], timeout_s=0.1)
        started = time.monotonic()
        response = await channel.forward(create("a", "b", timeout_ms=100), 7)
        assert time.monotonic() - started < 1.0
        assert [t.error_code for t in response.topics] == [ErrorCode.REQUEST_TIMED_OUT] * 2
        assert [t.name for t in response.topics] == ["a", "b"]

        deleted = await channel.forward(DeleteTopicsRequest(topic_names=[TopicName("a")]), 5)
        assert [(r.name, r.error_code) for r in deleted.responses] == [("a", 7)]
        grown = await channel.forward(
            CreatePartitionsRequest(
                topics=[CreatePartitionsRequest.CreatePartitionsTopic(name=TopicName("a"))]
            ),
            3,
        )
        assert [(r.name, r.error_code) for r in grown.results] == [("a", 7)]
        resource = IncrementalAlterConfigsRequest.AlterConfigsResource(
            resource_type=2, resource_name="a"
        )
        altered = await channel.forward(IncrementalAlterConfigsRequest(resources=[resource]), 1)
        assert [(r.resource_name, r.error_code) for r in altered.responses] == [("a", 7)]
        with pytest.raises(ControllerRequestError) as raised:
            await channel.allocate_producer_ids(1, 1000)
        assert raised.value.error_code is ErrorCode.REQUEST_TIMED_OUT
        client.close()

    asyncio.run(scenario())


def test_a_request_waits_out_a_failover_shorter_than_its_own_timeout() -> None:
    """No active controller for 0.4 s (an election): CreateTopics with timeout_ms 5000 is
    answered once one is, though the channel's own limit is 0.1 s; DeleteTopics, whose
    timeout_ms is 0, gets that 0.1 s."""

    async def scenario() -> None:
        controller = FakeController(active=False)
        async with running(controller):
            channel, client = channel_to([controller.address], timeout_s=0.1)

            async def elected() -> None:
                await asyncio.sleep(0.4)
                controller.active = True

            election = asyncio.create_task(elected())
            deleted = await channel.forward(DeleteTopicsRequest(topic_names=[TopicName("x")]), 5)
            assert [r.error_code for r in deleted.responses] == [ErrorCode.REQUEST_TIMED_OUT]
            started = time.monotonic()
            response = await channel.forward(create("a", timeout_ms=5000), 7)
            assert [t.error_code for t in response.topics] == [ErrorCode.NONE]
            assert 0.1 < time.monotonic() - started < 4.0
            await election
            client.close()

    asyncio.run(scenario())


def test_a_version_the_controller_cannot_take_is_answered_unsupported_version() -> None:
    async def scenario() -> None:
        active = FakeController(ranges={19: (6, 7)})
        async with running(active):
            channel, client = channel_to([active.address])
            response = await channel.forward(create("a"), 5)
            assert [t.error_code for t in response.topics] == [ErrorCode.UNSUPPORTED_VERSION]
            assert not active.requests_of(19)
            client.close()

    asyncio.run(scenario())


def test_allocate_producer_ids_sends_the_broker_epoch() -> None:
    async def scenario() -> None:
        active = FakeController()
        async with running(active):
            channel, client = channel_to([active.address])
            active.broker_epochs[1] = 101
            assert await channel.allocate_producer_ids(1, 1000) == (1000, 1000)
            active.broker_epochs[1] = 102  # re-registered meanwhile: our epoch is stale
            with pytest.raises(ControllerRequestError) as raised:
                await channel.allocate_producer_ids(1, 1000)
            assert raised.value.error_code is ErrorCode.STALE_BROKER_EPOCH
            client.close()

    asyncio.run(scenario())


def filled_responses() -> list[Response]:
    """One response per forwarded api, every field away from its default."""
    topic_id = uuid.UUID(int=7)
    created = CreateTopicsResponse.CreatableTopicResult(
        name=TopicName("a"),
        topic_id=topic_id,
        error_code=0,
        error_message="m",
        topic_config_error_code=1,
        num_partitions=3,
        replication_factor=1,
        configs=[CreateTopicsResponse.CreatableTopicConfigs(name="k", value="v")],
    )
    deleted = DeleteTopicsResponse.DeletableTopicResult(
        name=TopicName("a"), topic_id=topic_id, error_code=3, error_message="m"
    )
    grown = CreatePartitionsResponse.CreatePartitionsTopicResult(
        name=TopicName("a"), error_code=37, error_message="m"
    )
    return [
        CreateTopicsResponse(throttle_time_ms=1, topics=[created]),
        DeleteTopicsResponse(throttle_time_ms=1, responses=[deleted]),
        CreatePartitionsResponse(throttle_time_ms=1, results=[grown]),
        AlterConfigsResponse(
            throttle_time_ms=1,
            responses=[
                AlterConfigsResponse.AlterConfigsResourceResponse(
                    error_code=1, error_message="m", resource_type=2, resource_name="a"
                )
            ],
        ),
        IncrementalAlterConfigsResponse(
            throttle_time_ms=1,
            responses=[
                IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
                    error_code=1, error_message="m", resource_type=2, resource_name="a"
                )
            ],
        ),
    ]


@pytest.mark.parametrize("response", filled_responses(), ids=lambda r: type(r).__name__)
def test_a_response_decoded_at_a_lower_version_encodes_at_the_clients_version(
    response: Response,
) -> None:
    """The channel never forwards above the client's version, so what the controller answers
    at version ``low`` must encode at every client version ``high >= low``."""
    cls = type(response)
    for low in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
        decoded = cls.decode(response.encode(low), low)
        for high in range(low, cls.MAX_VERSION + 1):
            decoded.encode(high)


def test_not_controller_is_retried_until_the_deadline_answers() -> None:
    async def scenario() -> None:
        standby = FakeController(active=False)
        async with running(standby):
            channel, client = channel_to([standby.address], timeout_s=0.2)
            resource = AlterConfigsRequest.AlterConfigsResource(resource_type=2, resource_name="a")
            altered = await channel.forward(AlterConfigsRequest(resources=[resource]), 2)
            # Only a standby answers: NOT_CONTROLLER is retried, then the deadline answers.
            assert [r.error_code for r in altered.responses] == [ErrorCode.REQUEST_TIMED_OUT]
            assert len(standby.requests_of(33)) >= 2
            client.close()

    asyncio.run(scenario())
