"""Metadata-record framing: round trips for every record class and version, typed errors on
garbage, and metadata batches."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import cases, message_strategy

import kafka_protocol.metadata as generated
from kafka_protocol.record_batch import (
    ControlRecordType,
    build_batch,
    control_record,
    iter_batches,
)
from metadata_log.exceptions import InvalidMetadataRecordError
from metadata_log.records import (
    FRAME_VERSION,
    RECORD_TYPES,
    RECORD_VERSIONS,
    build_metadata_batch,
    decode_record,
    encode_record,
    read_metadata_batch,
)

METADATA_CASES = [
    (name, version)
    for package, name, version in cases()
    if package == "metadata" and name != "QuorumStateData"
]
FIXED_CASES = [(cls.NAME, version) for cls, version in RECORD_VERSIONS.items()]


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def frame(record: Any, version: int) -> bytes:
    """Frame by hand, at any version: frame version, record type, version, body."""
    return (
        _uvarint(FRAME_VERSION)
        + _uvarint(record.API_KEY)
        + _uvarint(version)
        + record.encode(version)
    )


def test_registry_holds_every_generated_metadata_record() -> None:
    expected = {
        getattr(generated, name)
        for name in generated.__all__
        if getattr(generated, name).API_KEY is not None
    }
    assert set(RECORD_TYPES.values()) == expected == set(RECORD_VERSIONS)
    assert all(RECORD_TYPES[cls.API_KEY] is cls for cls in expected)


def test_kafka_record_types() -> None:
    # A few of Kafka's MetadataRecordType ids, to catch a shifted table.
    assert RECORD_TYPES[0] is generated.RegisterBrokerRecord
    assert RECORD_TYPES[2] is generated.TopicRecord
    assert RECORD_TYPES[3] is generated.PartitionRecord
    assert RECORD_TYPES[5] is generated.PartitionChangeRecord
    assert RECORD_TYPES[9] is generated.RemoveTopicRecord
    assert RECORD_TYPES[17] is generated.BrokerRegistrationChangeRecord


def test_known_framing_bytes() -> None:
    record = generated.NoOpRecord()
    assert encode_record(record) == b"\x01\x14\x00\x00"  # frame 1, type 20, v0, no tagged fields


@pytest.mark.parametrize(("name", "version"), FIXED_CASES)
@given(data=st.data())
def test_encode_decode_at_the_written_version(name: str, version: int, data: Any) -> None:
    record = data.draw(message_strategy("metadata", name, version))
    encoded = encode_record(record)
    assert encoded == frame(record, version)
    assert decode_record(encoded) == record


@pytest.mark.parametrize(("name", "version"), METADATA_CASES)
@given(data=st.data())
def test_decode_every_version(name: str, version: int, data: Any) -> None:
    record = data.draw(message_strategy("metadata", name, version))
    encoded = frame(record, version)
    assert decode_record(encoded) == record
    assert decode_record(memoryview(bytearray(encoded))) == record


@given(st.binary(max_size=64))
def test_garbage_raises_only_the_typed_error(data: bytes) -> None:
    with contextlib.suppress(InvalidMetadataRecordError):
        decode_record(data)


@pytest.mark.parametrize(("name", "version"), FIXED_CASES)
@given(data=st.data())
def test_truncated_and_extended_records_are_rejected(name: str, version: int, data: Any) -> None:
    encoded = encode_record(data.draw(message_strategy("metadata", name, version)))
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(InvalidMetadataRecordError):
        decode_record(encoded[:cut])
    with pytest.raises(InvalidMetadataRecordError):
        decode_record(encoded + b"\x00")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\x02\x14\x00\x00", "frame version"),
        (b"\x01\x7f\x00\x00", "unknown metadata record type 127"),
        (b"\x01\x14\x01\x00", "outside"),
        (b"\x01\xff\xff\xff\xff\xff", "longer than 5 bytes"),
        (b"", "truncated"),
    ],
)
def test_bad_frames(data: bytes, match: str) -> None:
    with pytest.raises(InvalidMetadataRecordError, match=match):
        decode_record(data)


def test_metadata_batch_round_trip() -> None:
    records = [
        generated.NoOpRecord(),
        generated.FeatureLevelRecord(name="metadata.version", feature_level=25),
    ]
    data = build_metadata_batch(records, base_offset=7, epoch=3, timestamp_ms=1000)
    (batch,) = iter_batches(data)
    batch.validate()
    assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch) == (7, 8, 3)
    assert read_metadata_batch(batch) == records
    assert all(r.key is None for r in batch.records())


def test_control_batches_hold_no_metadata_records() -> None:
    data = build_batch([control_record(ControlRecordType.LEADER_CHANGE, b"")], control=True)
    (batch,) = iter_batches(data)
    assert read_metadata_batch(batch) == []


def test_a_record_without_a_value_is_rejected() -> None:
    from kafka_protocol.record_batch import SimpleRecord

    (batch,) = iter_batches(build_batch([SimpleRecord(value=None)]))
    with pytest.raises(InvalidMetadataRecordError, match="no value"):
        read_metadata_batch(batch)
