"""The sans-I/O connection: correlation ids, response matching over any split of the byte
stream, abandoned requests, and version negotiation; no socket anywhere."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_protocol._codec import Chunk, FileRegion
from kafka_protocol.api_versions import API_VERSIONS_VERSION
from kafka_protocol.client.connection import ClientConnection, InFlight, Received
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import FrameTooLargeError, InvalidFrameError, ProtocolError
from kafka_protocol.framing import API_VERSIONS_KEY, decode_request, encode_response
from kafka_protocol.messages import (
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)

METADATA_KEY = 3


def client(max_frame_bytes: int = 1 << 20) -> ClientConnection:
    return ClientConnection(
        "test", software_name="t", software_version="1", max_frame_bytes=max_frame_bytes
    )


def wire(chunks: Sequence[Chunk]) -> bytes:
    return b"".join(bytes(c) for c in chunks if not isinstance(c, FileRegion))


def metadata_answer(ticket: InFlight, controller_id: int) -> bytes:
    body = MetadataResponse(controller_id=controller_id)
    return wire(encode_response(ticket.version, ticket.correlation_id, body))


def test_requests_get_increasing_correlation_ids_and_their_bytes_are_queued() -> None:
    conn = client()
    first = conn.send_request(MetadataRequest(topics=None), 12)
    second = conn.send_request(MetadataRequest(topics=None), 1)
    assert (first.correlation_id, second.correlation_id) == (1, 2)
    assert (first.api_key, first.version) == (METADATA_KEY, 12)
    sent = wire(conn.data_to_send())
    assert conn.data_to_send() == []
    size = int.from_bytes(sent[:4], "big")
    header, request = decode_request(sent[4 : 4 + size])
    assert (header.correlation_id, header.client_id) == (1, "test")
    assert isinstance(request, MetadataRequest)
    assert conn.in_flight == 2


@given(
    versions=st.lists(st.sampled_from([1, 4, 9, 12]), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
)
def test_any_split_of_the_stream_yields_the_same_responses(
    versions: list[int], cuts: list[int]
) -> None:
    conn = client()
    tickets = [conn.send_request(MetadataRequest(topics=None), v) for v in versions]
    stream = b"".join(metadata_answer(t, i) for i, t in enumerate(tickets))
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    received: list[Received] = []
    for begin, end in itertools.pairwise(points):
        received += conn.receive_bytes(stream[begin:end])
    assert [r.correlation_id for r in received] == [t.correlation_id for t in tickets]
    for i, r in enumerate(received):
        assert isinstance(r.response, MetadataResponse)
        assert r.response.controller_id == i
    assert conn.in_flight == 0


def test_an_abandoned_request_is_matched_but_not_returned() -> None:
    conn = client()
    a = conn.send_request(MetadataRequest(topics=None), 12)
    b = conn.send_request(MetadataRequest(topics=None), 12)
    conn.abandon(a.correlation_id)
    got = conn.receive_bytes(metadata_answer(a, 1) + metadata_answer(b, 2))
    assert [r.correlation_id for r in got] == [b.correlation_id]


def test_abandon_before_drops_every_earlier_answer() -> None:
    conn = client()
    tickets = [conn.send_request(MetadataRequest(topics=None), 12) for _ in range(3)]
    conn.abandon_before(tickets[2])
    got = conn.receive_bytes(b"".join(metadata_answer(t, 0) for t in tickets))
    assert [r.correlation_id for r in got] == [tickets[2].correlation_id]


def test_an_answer_out_of_order_or_unasked_breaks_the_stream() -> None:
    conn = client()
    a = conn.send_request(MetadataRequest(topics=None), 12)
    b = conn.send_request(MetadataRequest(topics=None), 12)
    with pytest.raises(InvalidFrameError, match=f"correlation id {b.correlation_id}"):
        conn.receive_bytes(metadata_answer(b, 0))
    del a
    with pytest.raises(InvalidFrameError, match="unknown correlation id"):
        client().receive_bytes(metadata_answer(b, 0))


def test_frames_above_the_limit_or_too_short_are_refused() -> None:
    with pytest.raises(FrameTooLargeError):
        client(max_frame_bytes=100).receive_bytes((101).to_bytes(4, "big"))
    with pytest.raises(FrameTooLargeError):
        client(max_frame_bytes=100).frame_size((101).to_bytes(4, "big"))
    with pytest.raises(InvalidFrameError):
        client().frame_size((2).to_bytes(4, "big"))
    with pytest.raises(InvalidFrameError):
        client().receive_frame(b"\x00\x01")


def test_an_undecodable_body_is_returned_as_its_error_and_the_stream_goes_on() -> None:
    conn = client()
    bad = conn.send_request(MetadataRequest(topics=None), 12)
    good = conn.send_request(MetadataRequest(topics=None), 12)
    garbage = bad.correlation_id.to_bytes(4, "big") + b"\xff\xff"
    stream = len(garbage).to_bytes(4, "big") + garbage + metadata_answer(good, 5)
    first, second = conn.receive_bytes(stream)
    assert isinstance(first.response, ProtocolError)
    assert isinstance(second.response, MetadataResponse)


def test_correlation_ids_wrap_at_int32() -> None:
    conn = client()
    conn._correlation_id = 0x7FFFFFFF
    assert conn.send_request(MetadataRequest(topics=None), 12).correlation_id == 0


def api_versions(error: ErrorCode, *ranges: tuple[int, int, int]) -> ApiVersionsResponse:
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
        for k, lo, hi in ranges
    ]
    return ApiVersionsResponse(error_code=error, api_keys=keys)


def test_negotiation_asks_again_lower_once_then_picks_common_versions() -> None:
    conn = client()
    refusal = api_versions(ErrorCode.UNSUPPORTED_VERSION, (API_VERSIONS_KEY, 0, 2))
    assert conn.on_api_versions(refusal, API_VERSIONS_VERSION) == 2
    accepted = api_versions(ErrorCode.NONE, (API_VERSIONS_KEY, 0, 2), (METADATA_KEY, 1, 9))
    assert conn.on_api_versions(accepted, 2) is None
    assert conn.version_for(METADATA_KEY) == 9
    assert conn.version_for(METADATA_KEY, high=4) == 4
    assert conn.version_for(METADATA_KEY, low=10) is None
    assert conn.version_for(1) is None  # the peer does not offer Fetch
    with pytest.raises(ProtocolError, match="CLUSTER_AUTHORIZATION_FAILED"):
        client().on_api_versions(
            api_versions(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), API_VERSIONS_VERSION
        )


def test_reset_forgets_what_was_in_flight_and_the_versions() -> None:
    conn = client()
    conn.on_api_versions(api_versions(ErrorCode.NONE, (METADATA_KEY, 1, 9)), 3)
    ticket = conn.send_request(MetadataRequest(topics=None), 9)
    conn.reset()
    assert not conn.is_in_flight(ticket) and conn.api_versions == {}
    assert conn.send_request(MetadataRequest(topics=None), 9).correlation_id == 2
