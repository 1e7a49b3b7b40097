"""Frames and headers: splitting, limits, header-version rules, unsupported versions."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_protocol.exceptions import FrameTooLargeError, InvalidFrameError, UnsupportedVersionError
from kafka_protocol.framing import (
    FrameReader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_header_version,
    response_header_version,
)
from kafka_protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    RequestHeader,
)


def _frame(chunks: list[Any]) -> bytes:
    return b"".join(bytes(c) for c in chunks)


@given(
    bodies=st.lists(st.binary(max_size=40), min_size=1, max_size=6),
    cuts=st.lists(st.integers(1, 50), max_size=20),
)
def test_frame_reader_reassembles_any_split(bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
    reader = FrameReader(max_frame_bytes=1000)
    out, pos = [], 0
    for n in [*cuts, len(stream)]:
        reader.feed(stream[pos : pos + n])
        pos += n
        while (frame := reader.next_frame()) is not None:
            out.append(frame)
    assert out == bodies and reader.pending_bytes() == 0


def test_frame_limits() -> None:
    reader = FrameReader(max_frame_bytes=10)
    reader.feed((11).to_bytes(4, "big"))
    with pytest.raises(FrameTooLargeError):
        reader.next_frame()
    reader = FrameReader()
    reader.feed(b"\xff\xff\xff\xfe")
    with pytest.raises(InvalidFrameError):
        reader.next_frame()


def test_header_versions() -> None:
    assert request_header_version(0, 8) == 1 and request_header_version(0, 9) == 2
    assert request_header_version(7, 0) == 0  # ControlledShutdown v0
    assert response_header_version(3, 9) == 1 and response_header_version(3, 8) == 0
    assert response_header_version(18, 4) == 0  # ApiVersions: always v0 (KIP-511)


def test_request_round_trip_with_header() -> None:
    header = RequestHeader(
        request_api_key=0, request_api_version=9, correlation_id=42, client_id="me"
    )
    body = ProduceRequest(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b"x" * 9000)],
            )
        ],
    )
    chunks = encode_request(header, body)
    frame = _frame(chunks)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    payload = frame[4:]
    got_header, got_body = decode_request(payload)
    assert (got_header, got_body) == (header, body)
    records = got_body.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview), "records must be a zero-copy slice"
    assert records.obj is payload, "the slice must share the frame's memory"
    assert any(c is body.topic_data[0].partition_data[0].records for c in chunks)


def test_unsupported_version_keeps_the_correlation_id() -> None:
    header = RequestHeader(request_api_key=18, request_api_version=3, correlation_id=77)
    frame = bytearray(_frame(encode_request(header, ApiVersionsRequest()))[4:])
    frame[2:4] = (99).to_bytes(2, "big")
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(bytes(frame))
    assert info.value.correlation_id == 77 and info.value.api_key == 18
    frame[0:2] = (999).to_bytes(2, "big")
    with pytest.raises(UnsupportedVersionError):
        decode_request(bytes(frame))


def test_trailing_bytes_are_ignored_as_kafka_does_unless_strict() -> None:
    header = RequestHeader(request_api_key=3, request_api_version=12, correlation_id=1)
    frame = _frame(encode_request(header, MetadataRequest(topics=None)))[4:]
    # librdkafka 2.x: Metadata v12 for all topics followed by a stale 4-byte placeholder
    assert decode_request(frame + b"\x00\x00\x00\x00") == (header, MetadataRequest(topics=None))
    with pytest.raises(InvalidFrameError, match="trailing"):
        decode_request(frame + b"\x00", allow_trailing_bytes=False)


@pytest.mark.parametrize("version", [0, 3, 4])
def test_api_versions_response_uses_header_v0(version: int) -> None:
    body = ApiVersionsResponse(
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=0, min_version=0, max_version=9)]
    )
    frame = _frame(encode_response(version, 5, body))[4:]
    assert frame[:4] == (5).to_bytes(4, "big") and frame[4:6] == b"\x00\x00"  # error code
    assert decode_response(18, version, frame) == (5, body)


def test_flexible_response_has_a_tag_section_after_the_correlation_id() -> None:
    frame = _frame(encode_response(9, 5, MetadataResponse()))[4:]
    assert frame[:5] == b"\x00\x00\x00\x05\x00"
    assert decode_response(3, 9, frame) == (5, MetadataResponse())


def test_unknown_tagged_fields_are_skipped_and_known_ones_read() -> None:
    plain = ApiVersionsResponse(error_code=0)
    encoded = plain.encode(3)
    assert encoded.endswith(b"\x00")  # empty top-level tag section
    # tag 9 (unknown, 3 bytes), then tag 1 (FinalizedFeaturesEpoch, int64 = 7)
    tagged = encoded[:-1] + b"\x02" + b"\x09\x03abc" + b"\x01\x08" + (7).to_bytes(8, "big")
    decoded = ApiVersionsResponse.decode(tagged, 3)
    assert decoded.finalized_features_epoch == 7
    decoded.finalized_features_epoch = plain.finalized_features_epoch
    assert decoded == plain


def test_tagged_fields_are_written_only_when_not_default() -> None:
    default = ApiVersionsResponse().encode(3)
    with_epoch = ApiVersionsResponse(finalized_features_epoch=7).encode(3)
    assert len(with_epoch) == len(default) + 10  # tag, size and an int64


@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=8),
    cuts=st.lists(st.integers(1, 700), max_size=30),
    buffer_bytes=st.sampled_from([4, 16, 600, 5000]),
)
def test_frame_reader_receiving_in_place(
    sizes: list[int], cuts: list[int], buffer_bytes: int
) -> None:
    """recv_into-style use, with frames smaller and larger than the reusable buffer."""
    bodies = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    stream = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
    reader = FrameReader(max_frame_bytes=4000, buffer_bytes=buffer_bytes)
    out, pos = [], 0
    for n in [*cuts, len(stream)]:
        while pos < len(stream) and n > 0:
            target = reader.get_buffer()
            assert len(target) > 0
            k = min(len(target), n, len(stream) - pos)
            target[:k] = stream[pos : pos + k]
            reader.buffer_updated(k)
            pos, n = pos + k, n - k
            while (frame := reader.next_frame()) is not None:
                out.append(bytes(frame))
    assert out == bodies and reader.pending_bytes() == 0


def test_a_large_size_prefix_is_not_allocated_up_front() -> None:
    import tracemalloc

    reader = FrameReader(max_frame_bytes=200 << 20, buffer_bytes=64 * 1024)
    tracemalloc.start()
    reader.feed((100 << 20).to_bytes(4, "big") + b"x" * 100_000)
    assert reader.next_frame() is None
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 << 20, f"{peak} bytes allocated for 100 KB received"
