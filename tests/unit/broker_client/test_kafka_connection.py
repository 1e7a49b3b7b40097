"""KafkaConnection against a fake controller on real sockets: pipelining, connection loss,
ApiVersions negotiation (with the KIP-511 fallback) and version choice."""

from __future__ import annotations

import asyncio

import pytest
from fake_controller import FakeController, running

from broker.kafka_client import KafkaConnection, KafkaConnectionError
from kafka_protocol.messages import CreateTopicsRequest, CreateTopicsResponse
from kafka_protocol.types import TopicName


def create(name: str) -> CreateTopicsRequest:
    topic = CreateTopicsRequest.CreatableTopic(
        name=TopicName(name), num_partitions=1, replication_factor=1
    )
    return CreateTopicsRequest(topics=[topic])


async def created_name(conn: KafkaConnection, name: str) -> str:
    response = await conn.send(create(name), 7)
    assert isinstance(response, CreateTopicsResponse)
    return response.topics[0].name


def test_pipelined_requests_are_all_in_flight_and_answered_in_order() -> None:
    async def scenario() -> None:
        fake = FakeController()
        async with running(fake):
            conn = await KafkaConnection.open(*fake.address, "test")
            fake.answer_after = len(fake.received) + 5  # nothing answered until all 5 arrived
            names = [f"t{i}" for i in range(5)]
            answered = await asyncio.gather(*(created_name(conn, n) for n in names))
            assert answered == names
            ids = [h.correlation_id for h, _ in fake.requests_of(19)]
            assert len(set(ids)) == 5 and ids == sorted(ids)
            headers = [h for h, _ in fake.requests_of(19)]
            assert all(h.client_id == "test" and h.request_api_version == 7 for h in headers)
            conn.close()
            await conn.wait_closed()

    asyncio.run(scenario())


def test_connection_loss_fails_every_pending_request_and_later_sends() -> None:
    async def scenario() -> None:
        fake = FakeController(hold={19})
        async with running(fake):
            conn = await KafkaConnection.open(*fake.address, "test")
            sends = [asyncio.create_task(conn.send(create(f"t{i}"), 7)) for i in range(3)]
            while len(fake.requests_of(19)) < 3:
                await asyncio.sleep(0.005)
            fake.drop_connections()
            results = await asyncio.gather(*sends, return_exceptions=True)
            assert all(isinstance(r, KafkaConnectionError) for r in results), results
            assert all(isinstance(r, ConnectionError) for r in results)
            assert conn.closed
            with pytest.raises(KafkaConnectionError):
                await conn.send(create("late"), 7)
            await conn.wait_closed()

    asyncio.run(scenario())


def test_close_fails_pending_requests() -> None:
    async def scenario() -> None:
        fake = FakeController(hold={19})
        async with running(fake):
            conn = await KafkaConnection.open(*fake.address, "test")
            pending = asyncio.create_task(conn.send(create("t"), 7))
            while not fake.requests_of(19):
                await asyncio.sleep(0.005)
            conn.close()
            with pytest.raises(KafkaConnectionError):
                await pending
            await conn.wait_closed()

    asyncio.run(scenario())


def test_a_cancelled_request_does_not_break_the_connection() -> None:
    async def scenario() -> None:
        fake = FakeController()
        async with running(fake):
            conn = await KafkaConnection.open(*fake.address, "test")
            fake.answer_after = len(fake.received) + 2
            first = asyncio.create_task(created_name(conn, "gone"))
            await asyncio.sleep(0.02)
            first.cancel()
            # The late answer to the cancelled request is recognised and dropped.
            assert await created_name(conn, "kept") == "kept"
            assert first.cancelled()
            assert not conn.closed
            conn.close()

    asyncio.run(scenario())


def test_api_versions_v3_then_version_for_picks_the_highest_common_version() -> None:
    async def scenario() -> None:
        fake = FakeController(ranges={19: (2, 5), 63: (0, 1)})
        async with running(fake):
            conn = await KafkaConnection.open(*fake.address, "test")
            assert [h.request_api_version for h, _ in fake.requests_of(18)] == [3]
            assert conn.version_for(19, 7) == 5
            assert conn.version_for(19, 4) == 4
            assert conn.version_for(19, 1) is None  # below their minimum
            assert conn.version_for(63, 1) == 1
            assert conn.version_for(60, 1) is None  # DescribeCluster: not advertised
            conn.close()

    asyncio.run(scenario())


def test_api_versions_falls_back_when_the_peer_answers_unsupported_version() -> None:
    async def scenario() -> None:
        fake = FakeController(api_versions_max=0)
        async with running(fake):
            conn = await KafkaConnection.open(*fake.address, "test")
            assert [h.request_api_version for h, _ in fake.requests_of(18)] == [3, 0]
            assert conn.version_for(19, 7) == 7
            conn.close()

    asyncio.run(scenario())


def test_open_fails_with_a_connection_error_when_nothing_listens() -> None:
    from fake_controller import closed_port

    async def scenario() -> None:
        with pytest.raises(KafkaConnectionError):
            await KafkaConnection.open("127.0.0.1", closed_port(), "test")

    asyncio.run(scenario())


def test_a_frame_above_the_limit_closes_the_connection() -> None:
    async def scenario() -> None:
        async def huge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(4096)  # the ApiVersions request
            writer.write((200 * 1024 * 1024).to_bytes(4, "big"))  # the bytes come before EOF
            writer.close()

        server = await asyncio.start_server(huge, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(KafkaConnectionError, match="exceeds the limit"):
            await KafkaConnection.open("127.0.0.1", port, "test")
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())
