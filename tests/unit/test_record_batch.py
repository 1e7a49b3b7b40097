"""RecordBatch v2 and compression: round trips, CRC, in-place patches, corruption."""

from __future__ import annotations

import struct
from typing import Any

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from kafka_protocol.compression import XERIAL_MAGIC, Compression, compress, decompress
from kafka_protocol.exceptions import CompressionError, CorruptRecordError
from kafka_protocol.record_batch import (
    HEADER_BYTES,
    ControlRecordType,
    Record,
    RecordBatch,
    SimpleRecord,
    build_batch,
    control_record,
    control_record_type,
    iter_batches,
    set_base_offset,
    set_partition_leader_epoch,
)

blobs = st.none() | st.binary(max_size=64)
records = st.lists(
    st.builds(
        SimpleRecord,
        value=blobs,
        key=blobs,
        headers=st.lists(st.tuples(st.text(max_size=8), blobs), max_size=3),
        timestamp=st.none() | st.integers(0, 2**41),
    ),
    min_size=1,
    max_size=20,
)


@given(
    recs=records,
    codec=st.sampled_from(list(Compression)),
    base_offset=st.integers(0, 2**62),
    now_ms=st.integers(0, 2**41),
)
def test_build_then_read(
    recs: list[SimpleRecord], codec: Compression, base_offset: int, now_ms: int
) -> None:
    data = build_batch(recs, base_offset=base_offset, compression=codec, now_ms=now_ms)
    (batch,) = iter_batches(data)
    batch.validate()
    assert batch.compression is codec
    assert batch.records_count == len(recs)
    assert batch.last_offset == base_offset + len(recs) - 1
    out = batch.records()
    stamps = [now_ms if r.timestamp is None else r.timestamp for r in recs]
    assert batch.max_timestamp == max(stamps)
    for i, (want, got) in enumerate(zip(recs, out, strict=True)):
        assert got.offset == base_offset + i
        assert got.timestamp == stamps[i]
        assert (got.key, got.value, got.headers) == (want.key, want.value, list(want.headers))


@given(recs=records, offset=st.integers(0, 2**62), epoch=st.integers(-1, 2**31 - 1))
def test_patches_keep_the_crc(recs: list[SimpleRecord], offset: int, epoch: int) -> None:
    buf = bytearray(build_batch(recs))
    set_base_offset(buf, offset)
    set_partition_leader_epoch(buf, epoch)
    batch = RecordBatch(memoryview(buf)).validate()
    assert (batch.base_offset, batch.partition_leader_epoch) == (offset, epoch)
    assert batch.records()[0].offset == offset


@given(recs=records, data=st.data())
def test_any_flipped_byte_after_the_crc_is_caught(recs: list[SimpleRecord], data: Any) -> None:
    buf = bytearray(build_batch(recs))
    i = data.draw(st.integers(21, len(buf) - 1))
    buf[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptRecordError):
        RecordBatch(memoryview(buf)).validate()


def test_crc_is_crc32c_of_attributes_to_end() -> None:
    data = build_batch([SimpleRecord(b"v")])
    (stored,) = struct.unpack_from(">I", data, 17)
    assert stored == crc32c(data[21:])


def test_several_batches_and_a_truncated_tail() -> None:
    a = build_batch([SimpleRecord(b"a")], base_offset=0)
    b = build_batch([SimpleRecord(b"b"), SimpleRecord(b"c")], base_offset=1)
    blob = a + b
    assert [x.base_offset for x in iter_batches(blob)] == [0, 1]
    cut = blob[: len(a) + 20]
    assert [x.base_offset for x in iter_batches(cut, allow_truncated_tail=True)] == [0]
    with pytest.raises(CorruptRecordError):
        list(iter_batches(cut))


def test_wrong_magic_and_short_header_are_refused() -> None:
    data = bytearray(build_batch([SimpleRecord(b"v")]))
    data[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        RecordBatch(memoryview(data))
    with pytest.raises(CorruptRecordError):
        RecordBatch(memoryview(bytes(HEADER_BYTES - 1)))


@given(data=st.binary(max_size=100_000), codec=st.sampled_from(list(Compression)))
def test_compression_round_trip(data: bytes, codec: Compression) -> None:
    assert decompress(codec, compress(codec, data)) == data


def test_snappy_raw_and_xerial_both_decompress() -> None:
    data = b"kafka " * 20_000  # more than one 32 KiB xerial block
    xerial = compress(Compression.SNAPPY, data)
    assert xerial.startswith(XERIAL_MAGIC)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Compression.SNAPPY, xerial) == data
    assert decompress(Compression.SNAPPY, raw) == data


def test_lz4_frames_use_independent_blocks() -> None:
    frame = compress(Compression.LZ4, b"x" * 1000)
    flg = frame[4]
    assert frame[:4] == b"\x04\x22\x4d\x18" and flg & 0x20, "block independence flag"
    assert not flg & 0x04, "no content checksum"


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_garbage_does_not_decompress(codec: Compression) -> None:
    with pytest.raises(CompressionError):
        decompress(codec, b"\x00\x01garbage" * 3)


def test_decompression_is_bounded() -> None:
    bomb = compress(Compression.SNAPPY, bytes(1_000_000))
    with pytest.raises(CompressionError):
        decompress(Compression.SNAPPY, bomb, max_bytes=1000)


def test_control_batches() -> None:
    marker = control_record(ControlRecordType.COMMIT, b"\x00\x00\x00\x00\x00\x07")
    data = build_batch([marker], control=True, transactional=True, producer_id=9)
    (batch,) = iter_batches(data)
    assert batch.validate().is_control and batch.is_transactional
    (record,) = batch.records()
    assert control_record_type(record) is ControlRecordType.COMMIT
    with pytest.raises(CorruptRecordError):
        control_record_type(Record(offset=0, timestamp=0, key=b"\x00", value=None))
