"""Hostile bytes: random frames, truncations and mutations of valid frames.

Decoding must raise a typed ProtocolError and nothing else, allocate no more than a small
multiple of the frame's size (a length field claiming 2 GiB must not be believed), and finish
promptly (hypothesis' deadline).
"""

from __future__ import annotations

import contextlib
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from protocol_strategies import all_specs, cases, message_class, message_strategy

from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.framing import decode_request, encode_request, request_header_version
from kafka_protocol.messages import RequestHeader
from kafka_protocol.record_batch import iter_batches

FUZZ = settings(
    max_examples=settings().max_examples * 20,
    deadline=2000,
    suppress_health_check=[HealthCheck.too_slow],
)
CASES = cases()
REQUEST_CASES = [c for c in CASES if c[1].endswith("Request") and c[0] == "messages"]


def _class(package: str, name: str) -> Any:
    return next(message_class(p, m) for p, m in all_specs() if p == package and m.name == name)


def _decode_bounded(cls: Any, data: bytes, version: int) -> None:
    """Decode; only ProtocolError may escape, and allocation stays proportional."""
    tracemalloc.start()
    try:
        cls.decode(data, version)
    except ProtocolError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    # Python objects cost more than their wire bytes (a 1-byte struct becomes a ~100-byte
    # object), so allow a constant factor, but nothing a hostile length field could inflate.
    assert peak <= 512 * len(data) + 256 * 1024, f"{peak} bytes for a {len(data)}-byte frame"


@FUZZ
@given(case=st.sampled_from(CASES), data=st.binary(max_size=256))
def test_random_bytes(case: tuple[str, str, int], data: bytes) -> None:
    package, name, version = case
    _decode_bounded(_class(package, name), data, version)


@FUZZ
@given(case=st.sampled_from(CASES), data=st.data())
def test_truncations_are_errors(case: tuple[str, str, int], data: Any) -> None:
    package, name, version = case
    message = data.draw(message_strategy(package, name, version))
    encoded = message.encode(version)
    assume(encoded)  # an empty message (ListGroups v0) has no strict prefix
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(ProtocolError):
        type(message).decode(encoded[:cut], version)


@FUZZ
@given(case=st.sampled_from(CASES), data=st.data())
def test_mutations(case: tuple[str, str, int], data: Any) -> None:
    package, name, version = case
    message = data.draw(message_strategy(package, name, version))
    frame = bytearray(message.encode(version))
    if not frame:
        return
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, frame[i] ^ 0x01]))
    _decode_bounded(type(message), bytes(frame), version)


@FUZZ
@given(case=st.sampled_from(REQUEST_CASES), data=st.data())
def test_mutated_request_frames(case: tuple[str, str, int], data: Any) -> None:
    """Whole frames with headers, mutated anywhere, including the api key and version."""
    _, name, version = case
    body = data.draw(message_strategy("messages", name, version))
    header = RequestHeader(
        request_api_key=body.API_KEY,
        request_api_version=version,
        correlation_id=data.draw(st.integers(0, 2**31 - 1)),
        # Header v0 (ControlledShutdown v0 only) has no client id: keep its default.
        client_id=data.draw(st.none() | st.text(max_size=8))
        if request_header_version(body.API_KEY, version) > 0
        else "",
    )
    frame = bytearray(b"".join(bytes(c) for c in encode_request(header, body))[4:])
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
    with contextlib.suppress(ProtocolError):
        decode_request(bytes(frame))


def test_huge_lengths_are_not_believed() -> None:
    """A Produce v3 body claiming a 2 GiB transactional id, topic array and records blob."""
    cls = _class("messages", "ProduceRequest")
    for frame in (
        b"\x7f\xff" + b"x" * 10,  # transactional id of 32767 bytes, 10 present
        b"\xff\xff\x00\x01\x00\x00\x00\x10\x7f\xff\xff\xff",  # 2**31-1 topics
        b"\xff\xff\x00\x01\x00\x00\x00\x10\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01"
        b"\x00\x00\x00\x00\x7f\xff\xff\xff",  # records of 2**31-1 bytes
    ):
        with pytest.raises(ProtocolError):
            cls.decode(frame, 3)
        _decode_bounded(cls, frame, 3)


@FUZZ
@given(data=st.binary(max_size=200))
def test_record_batches_from_random_bytes(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        for batch in iter_batches(data):
            batch.validate().records()
