"""The one varint implementation (kafka_protocol/varint.py): round trips, Kafka's byte layout,
and the clear errors a truncated or over-long value gets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_protocol.exceptions import CorruptRecordError, InvalidFrameError
from kafka_protocol.varint import (
    encode_uvarint,
    encode_varint,
    read_raw_varlong,
    read_uvarint,
    read_varlong,
    zigzag,
)

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
UINT32 = st.integers(min_value=0, max_value=(1 << 32) - 1)


@given(UINT32, st.binary(max_size=4))
def test_uvarint_round_trip_leaves_what_follows(value: int, tail: bytes) -> None:
    data = b"\xaa" + encode_uvarint(value) + tail
    assert read_uvarint(data, 1) == (value, len(data) - len(tail))


@given(INT64, st.binary(max_size=4))
def test_varlong_round_trip(value: int, tail: bytes) -> None:
    data = encode_varint(value) + tail
    assert read_varlong(data, 0) == (value, len(data) - len(tail))
    assert read_raw_varlong(data, 0) == (zigzag(value), len(data) - len(tail))


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
    ],
)
def test_zigzag_layout_is_kafkas(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded


def test_uvarint_errors_name_the_field() -> None:
    with pytest.raises(InvalidFrameError, match="is truncated"):
        read_uvarint(b"\x80", 0)
    with pytest.raises(InvalidFrameError, match="longer than 5 bytes"):
        read_uvarint(b"\xff" * 6, 0)
    with pytest.raises(InvalidFrameError, match="overflows 32 bits"):
        read_uvarint(b"\xff\xff\xff\xff\x1f", 0)
    with pytest.raises(ValueError, match="frame version is truncated"):
        read_uvarint(b"", 0, ValueError, "frame version")


def test_varlong_errors() -> None:
    with pytest.raises(CorruptRecordError, match="runs past the batch"):
        read_varlong(b"\x80\x80", 0)
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        read_varlong(b"\xff" * 11, 0)
