"""BrokerConnection and the retry clock, against a scripted broker on a real socket:
ApiVersions negotiation (with the KIP-511 fallback), version choice, pipelining, the frame
limit, lost connections and deadlines."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest
from fake_kafka_broker import CLOSE, SILENT, FakeBroker, Raw, running

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
    RequestHeader,
)
from kafka_protocol.types import BrokerId
from spark_source._client_config import ClientConfig
from spark_source._client_conn import (
    LARGE_FRAME_BYTES,
    Attempts,
    BrokerConnection,
    InvalidResponse,
    Versions,
    frame_buffer,
)
from spark_source.client import (
    ConnectionFailed,
    OperationTimedOut,
    UnsupportedBroker,
)

METADATA = Versions(3, 1, 12)


def soon(seconds: float = 5.0) -> float:
    return time.monotonic() + seconds


def answer_metadata(header: RequestHeader, body: MetadataRequest) -> MetadataResponse:
    return MetadataResponse(controller_id=BrokerId(header.correlation_id))


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with running(FakeBroker(handlers={3: answer_metadata})) as b:
        yield b


def connect(broker: FakeBroker, **config: str) -> BrokerConnection:
    return BrokerConnection(*broker.address, ClientConfig.from_mapping(config))


def test_opens_lazily_negotiates_and_picks_the_highest_common_version(broker: FakeBroker) -> None:
    conn = connect(broker)
    assert not conn.is_open and broker.connections == 0
    response = conn.request(MetadataRequest(topics=None), METADATA, soon())
    assert isinstance(response, MetadataResponse)
    assert conn.is_open and broker.connections == 1
    headers = [h for h, _ in broker.received]
    assert [(h.request_api_key, h.request_api_version) for h in headers] == [(18, 3), (3, 12)]
    assert headers[1].client_id == "kraft-spark"
    assert conn.version_for(Versions(3, 1, 9)) == 9  # ours is the lower maximum
    with pytest.raises(UnsupportedBroker, match="api 3 at v0-v12; this client needs"):
        conn.version_for(Versions(3, 13, 14))
    with pytest.raises(UnsupportedBroker, match="at none"):
        conn.version_for(Versions(77, 0, 1))
    conn.close()


def test_falls_back_to_the_apiversions_version_the_broker_offers() -> None:
    """KIP-511: a broker without ApiVersions v3 answers UNSUPPORTED_VERSION as a v0 body."""

    def api_versions(header: RequestHeader, body: object) -> ApiVersionsResponse | Raw:
        keys = [
            ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=2),
            ApiVersionsResponse.ApiVersion(api_key=3, min_version=0, max_version=5),
        ]
        if header.request_api_version <= 2:
            return ApiVersionsResponse(api_keys=keys)
        v0 = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=keys)
        body_bytes = v0.encode(0)
        frame = struct.pack(">i", header.correlation_id) + body_bytes
        return Raw(struct.pack(">i", len(frame)) + frame)

    with running(FakeBroker(handlers={18: api_versions, 3: answer_metadata})) as broker:
        conn = connect(broker)
        conn.request(MetadataRequest(topics=None), METADATA, soon())
        versions = [h.request_api_version for h, _ in broker.received if h.request_api_key == 18]
        assert versions == [3, 2]
        assert [h.request_api_version for h, _ in broker.received][-1] == 5
        conn.close()


def test_a_refused_apiversions_is_an_unsupported_broker() -> None:
    refuse = {18: lambda h, b: ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST)}
    with running(FakeBroker(handlers=refuse)) as broker:
        conn = connect(broker)
        with pytest.raises(UnsupportedBroker, match="refused ApiVersions: INVALID_REQUEST"):
            conn.open(soon())
        assert not conn.is_open


def test_pipelined_requests_are_answered_in_order_and_abandoned_answers_dropped(
    broker: FakeBroker,
) -> None:
    conn = connect(broker)
    conn.open(soon())
    version = conn.version_for(METADATA)
    tickets = [conn.send(MetadataRequest(topics=None), version, soon()) for _ in range(3)]
    assert conn.in_flight == 3
    last = conn.receive(tickets[2], soon())  # the first two are read and dropped
    assert isinstance(last, MetadataResponse)
    assert last.controller_id == tickets[2].correlation_id
    assert conn.in_flight == 0
    with pytest.raises(ConnectionFailed, match="closed before its answer"):
        conn.receive(tickets[0], soon())
    conn.close()


def test_large_answers_arrive_whole_in_reused_pool_buffers() -> None:
    """Answers at and above LARGE_FRAME_BYTES are received into Arrow's pool, whose memory
    is reused and not zeroed: each must still hold exactly its own bytes."""

    def answer(header: RequestHeader, body: MetadataRequest) -> MetadataResponse:
        n = header.correlation_id
        name = f"{n:04d}-" + "x" * (LARGE_FRAME_BYTES + 97 * n)  # sizes differ, all large
        return MetadataResponse(
            controller_id=BrokerId(n),
            cluster_id=name,
        )

    with running(FakeBroker(handlers={3: answer})) as broker:
        conn = connect(broker)
        conn.open(soon())
        version = conn.version_for(METADATA)
        for _ in range(4):  # freed buffers come back with the previous answer's bytes
            tickets = [conn.send(MetadataRequest(topics=None), version, soon()) for _ in range(3)]
            for ticket in tickets:
                got = conn.receive(ticket, soon())
                assert isinstance(got, MetadataResponse)
                n = ticket.correlation_id
                assert got.controller_id == n
                assert got.cluster_id == f"{n:04d}-" + "x" * (LARGE_FRAME_BYTES + 97 * n)
        conn.close()


def test_frame_buffers_are_writable_bytes_of_the_asked_size() -> None:
    for size in (0, 5, LARGE_FRAME_BYTES - 1, LARGE_FRAME_BYTES, 3 * LARGE_FRAME_BYTES + 1):
        buf = memoryview(frame_buffer(size))
        assert (len(buf), buf.format, buf.readonly) == (size, "B", False)
        if size:
            buf[-1] = 255
            assert buf[-1] == 255


def test_a_frame_above_the_limit_closes_the_connection() -> None:
    huge = struct.pack(">i", 2**30)  # 1 GiB announced, nothing sent
    with running(FakeBroker(handlers={3: lambda h, b: Raw(huge)})) as broker:
        conn = connect(broker)
        with pytest.raises(InvalidResponse, match="frame of 1073741824 bytes"):
            conn.request(MetadataRequest(topics=None), METADATA, soon())
        assert not conn.is_open


def test_a_lost_connection_fails_the_request_and_the_next_one_reconnects() -> None:
    script = iter([CLOSE, None])

    def flaky(header: RequestHeader, body: MetadataRequest) -> MetadataResponse | str:
        return next(script) or answer_metadata(header, body)

    with running(FakeBroker(handlers={3: flaky})) as broker:
        conn = connect(broker)
        with pytest.raises(ConnectionFailed, match="closed by the broker"):
            conn.request(MetadataRequest(topics=None), METADATA, soon())
        assert not conn.is_open
        conn.request(MetadataRequest(topics=None), METADATA, soon())
        assert broker.connections == 2
        conn.close()


def test_a_silent_broker_fails_the_request_at_its_deadline() -> None:
    with running(FakeBroker(handlers={3: lambda h, b: SILENT})) as broker:
        conn = connect(broker)
        started = time.monotonic()
        with pytest.raises(ConnectionFailed, match="no answer"):
            conn.request(MetadataRequest(topics=None), METADATA, soon(0.3))
        assert time.monotonic() - started < 5
        assert not conn.is_open  # a late answer must never be taken for the next request's


def test_connection_refused_is_a_connection_failure() -> None:
    with running(FakeBroker()) as broker:
        address = broker.address
    conn = BrokerConnection(*address, ClientConfig())
    with pytest.raises(ConnectionFailed, match="cannot connect"):
        conn.open(soon())


def test_attempts_back_off_and_time_out_with_the_last_failure() -> None:
    config = ClientConfig(retry_backoff_ms=10, retry_backoff_max_ms=40)
    attempts = Attempts(config, "Thing", timeout_ms=200)
    started = time.monotonic()
    with pytest.raises(
        OperationTimedOut, match="Thing did not succeed within 200 ms: NOT_LEAD"
    ) as e:
        while True:
            attempts.retry(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert e.value.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert isinstance(e.value, TimeoutError)
    assert 0.15 < time.monotonic() - started < 3

    lost = Attempts(config, "Other", timeout_ms=50)
    with pytest.raises(ConnectionFailed, match=r"Other did not succeed.*refused"):
        while True:
            lost.retry(ConnectionFailed("refused"))


def test_progress_restarts_the_deadline() -> None:
    attempts = Attempts(ClientConfig(retry_backoff_ms=1), "X", timeout_ms=100)
    time.sleep(0.12)
    assert attempts.expired()
    attempts.progressed()
    assert not attempts.expired()
    assert attempts.request_deadline() <= attempts.deadline
