"""ControllerClient: finding the active controller among the bootstrap addresses."""

from __future__ import annotations

import asyncio
import logging

import pytest
from fake_controller import FakeController, closed_port, running

from broker.kafka_client import ControllerClient, NoUsableVersionError, is_not_controller
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeClusterRequest,
)
from kafka_protocol.types import BrokerId, TopicName

NOT_CONTROLLER = ErrorCode.NOT_CONTROLLER


def create(*names: str) -> CreateTopicsRequest:
    return CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name=TopicName(n)) for n in names]
    )


def test_not_controller_moves_to_the_next_address(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="broker.kafka_client")

    async def scenario() -> None:
        standby, active = FakeController(active=False), FakeController()
        async with running(standby, active):
            client = ControllerClient([standby.address, active.address], "broker-1")
            response = await client.request(create("a", "b"), 7)
            assert isinstance(response, CreateTopicsResponse)
            assert [t.error_code for t in response.topics] == [0, 0]
            assert len(standby.requests_of(19)) == 1 and len(active.requests_of(19)) == 1
            # The client now believes in the second address: no more detours.
            await client.request(create("c"), 7)
            assert len(standby.requests_of(19)) == 1
            client.close()

    asyncio.run(scenario())
    assert any("NOT_CONTROLLER" in r.getMessage() for r in caplog.records)


def test_top_level_not_controller_also_moves_on() -> None:
    async def scenario() -> None:
        standby, active = FakeController(active=False), FakeController()
        async with running(standby, active):
            active.broker_epochs[1] = 7
            client = ControllerClient([standby.address, active.address], "broker-1")
            beat = BrokerHeartbeatRequest(broker_id=BrokerId(1), broker_epoch=7)
            response = await client.request(beat, 1)
            assert isinstance(response, BrokerHeartbeatResponse)
            assert response.error_code == 0
            client.close()

    asyncio.run(scenario())


def test_an_unreachable_address_is_skipped() -> None:
    async def scenario() -> None:
        active = FakeController()
        async with running(active):
            client = ControllerClient([("127.0.0.1", closed_port()), active.address], "b")
            response = await client.request(create("a"), 7)
            assert isinstance(response, CreateTopicsResponse)
            client.close()

    asyncio.run(scenario())


def test_a_controller_that_stops_answering_is_left_after_the_request_timeout() -> None:
    async def scenario() -> None:
        hung, active = FakeController(hold={19}), FakeController()
        async with running(hung, active):
            client = ControllerClient([hung.address, active.address], "b", request_timeout_ms=200)
            response = await client.request(create("a"), 7)
            assert isinstance(response, CreateTopicsResponse)
            assert hung.requests_of(19) and len(active.requests_of(19)) == 1
            client.close()

    asyncio.run(scenario())


def test_the_caller_deadline_bounds_the_retries() -> None:
    async def scenario() -> None:
        standby = FakeController(active=False)
        async with running(standby):
            client = ControllerClient([standby.address], "b")
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.4):
                    await client.request(create("a"), 7)
            # Tries at 0, 50, 150 and 350 ms (backoff 50, 100, 200 ms), not a busy loop.
            assert 2 <= len(standby.requests_of(19)) <= 5
            client.close()

    asyncio.run(scenario())


def test_any_controller_route_takes_not_controller_answers_as_they_are() -> None:
    async def scenario() -> None:
        standby = FakeController(active=False)
        async with running(standby):
            client = ControllerClient([standby.address], "b")
            beat = BrokerHeartbeatRequest(broker_id=BrokerId(1), broker_epoch=7)
            response = await client.request(beat, 1, to_active=False)
            assert isinstance(response, BrokerHeartbeatResponse)
            assert response.error_code == NOT_CONTROLLER
            client.close()

    asyncio.run(scenario())


def test_no_common_version_is_a_local_error() -> None:
    async def scenario() -> None:
        active = FakeController()
        async with running(active):
            client = ControllerClient([active.address], "b")
            with pytest.raises(NoUsableVersionError):
                await client.request(DescribeClusterRequest(), 1)
            client.close()

    asyncio.run(scenario())


def test_a_dropped_connection_is_reopened() -> None:
    async def scenario() -> None:
        active = FakeController()
        async with running(active):
            client = ControllerClient([active.address], "b")
            await client.request(create("a"), 7)
            active.drop_connections()
            await asyncio.sleep(0.01)
            response = await client.request(create("b"), 7)
            assert isinstance(response, CreateTopicsResponse)
            assert len(active.requests_of(18)) == 2  # a second connection, negotiated again
            client.close()

    asyncio.run(scenario())


def test_is_not_controller_needs_every_item() -> None:
    Result = DeleteTopicsResponse.DeletableTopicResult
    every = DeleteTopicsResponse(responses=[Result(error_code=NOT_CONTROLLER)] * 2)
    some = DeleteTopicsResponse(responses=[Result(error_code=NOT_CONTROLLER), Result()])
    assert is_not_controller(every)
    assert not is_not_controller(some)
    assert not is_not_controller(DeleteTopicsResponse())
    assert is_not_controller(BrokerHeartbeatResponse(error_code=NOT_CONTROLLER))
