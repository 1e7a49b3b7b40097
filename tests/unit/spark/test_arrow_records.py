"""``to_arrow``: fetched record sets → Arrow, against the slow per-record reference built on
kafka_protocol's record iteration; corrupt input raises typed errors."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import cramjam
import numpy as np
import pyarrow as pa
import pytest
from crc32c import crc32c
from hypothesis import assume, given
from hypothesis import strategies as st

from kafka_protocol.compression import Compression, compress
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.record_batch import (
    HEADER_BYTES,
    ControlRecordType,
    SimpleRecord,
    build_batch,
    control_record,
    encode_record,
    iter_batches,
)
from spark_source import arrow_records
from spark_source._arrow_reference import reference_batch
from spark_source.arrow_records import kafka_schema, next_fetch_offset, to_arrow

TOPIC = "events"
PARTITION = 7
T0 = 1_700_000_000_000
RAW_SNAPPY = -1  # a codec choice: librdkafka's raw (unframed) snappy block

# --- building chunks ----------------------------------------------------------------------------


def pattern(n: int, seed: int) -> bytes:
    """``n`` deterministic bytes (large values without asking hypothesis for them)."""
    return bytes((seed + i * 31) & 0xFF for i in range(n))


sizes = st.sampled_from([0, 1, 5, 12, 13, 63, 64, 200, 1024, 8200, 20_000])
blob = st.none() | st.binary(max_size=40) | st.builds(pattern, sizes, st.integers(0, 255))
header = st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8))


@st.composite
def batch_records(draw: st.DrawFn) -> list[SimpleRecord]:
    """Records whose sizes vary freely, or come in runs of one size."""
    n = draw(st.integers(1, 120))
    runs = draw(st.booleans())
    size = draw(sizes)
    out = []
    for i in range(n):
        if runs and draw(st.integers(0, 40)) == 0:
            size = draw(sizes)
        value = pattern(size, i) if runs else draw(blob)
        key = None if runs else draw(blob)
        heads = draw(st.lists(header, max_size=3)) if draw(st.integers(0, 4)) == 0 else []
        stamp = draw(st.none() | st.integers(-1, 2**41))
        out.append(SimpleRecord(value=value, key=key, headers=heads, timestamp=stamp))
    return out


def reseal(batch: bytes, section: bytes, count: int | None = None) -> bytes:
    """``batch`` with another records section (and count): length and CRC made to fit."""
    header = bytearray(batch[:HEADER_BYTES])
    struct.pack_into(">i", header, 8, HEADER_BYTES - 12 + len(section))
    if count is not None:
        struct.pack_into(">i", header, 57, count)
    struct.pack_into(">I", header, 17, crc32c(section, crc32c(bytes(header[21:]))))
    return bytes(header) + section


def raw_snappy(records: list[SimpleRecord], base_offset: int, now_ms: int) -> bytes:
    plain = bytearray(build_batch(records, base_offset=base_offset, now_ms=now_ms))
    block = bytes(cramjam.snappy.compress_raw(plain[HEADER_BYTES:]))
    struct.pack_into(">h", plain, 21, Compression.SNAPPY)  # the attributes' codec bits
    return reseal(bytes(plain), block)


@dataclass
class Chunk:
    data: bytes
    first_offset: int
    next_offset: int | None  # after the last complete batch


@st.composite
def chunks(draw: st.DrawFn) -> Chunk:
    offset = first = draw(st.integers(0, 2**40))
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        offset += draw(st.sampled_from([0, 0, 1, 5]))  # gaps, as compaction leaves
        if draw(st.integers(0, 5)) == 0:
            kind = draw(st.sampled_from(list(ControlRecordType)[:2]))
            batch = build_batch(
                [control_record(kind, b"\x00\x00\x00\x00\x00\x00")],
                base_offset=offset,
                control=True,
                transactional=True,
            )
            parts.append(batch)
            offset += 1
            continue
        recs = draw(batch_records())
        codec = draw(st.sampled_from([*Compression, RAW_SNAPPY]))
        now = draw(st.integers(0, 2**41))
        if codec == RAW_SNAPPY:
            parts.append(raw_snappy(recs, offset, now))
        else:
            log_append = draw(st.booleans())
            parts.append(
                build_batch(
                    recs,
                    base_offset=offset,
                    compression=Compression(codec),
                    now_ms=now,
                    log_append_time=log_append,
                )
            )
        offset += len(recs)
    data = b"".join(parts)
    if draw(st.booleans()):  # a truncated batch at the end, as Fetch may return
        tail = build_batch([SimpleRecord(value=b"tail")], base_offset=offset)
        data += tail[: draw(st.integers(1, len(tail) - 1))]
    return Chunk(data, first, offset)


def decode(
    data: bytes | bytearray, start: int, end: int, headers: bool, check_crcs: bool = True
) -> tuple[pa.Table, int | None]:
    """All batches of ``to_arrow`` as one table, and the next offset it returned."""
    out: list[pa.RecordBatch] = []
    gen = to_arrow(data, TOPIC, PARTITION, start, end, headers, check_crcs=check_crcs)
    while True:
        try:
            out.append(next(gen))
        except StopIteration as stop:
            return pa.Table.from_batches(out, schema=kafka_schema(headers)), stop.value


def assert_same_as_reference(
    data: bytes | bytearray, start: int, end: int, headers: bool
) -> int | None:
    got, next_offset = decode(data, start, end, headers)
    want = reference_batch(data, TOPIC, PARTITION, start, end, headers)
    assert got.schema.equals(kafka_schema(headers))
    for name in got.schema.names:  # column by column, for a readable failure
        assert got[name].combine_chunks().equals(want.column(name)), name
    return next_offset


# --- equal to the reference -------------------------------------------------------------------


@given(chunk=chunks(), cut=st.tuples(st.floats(0, 1), st.floats(0, 1)), headers=st.booleans())
def test_matches_the_reference(chunk: Chunk, cut: tuple[float, float], headers: bool) -> None:
    span = (chunk.next_offset or chunk.first_offset) - chunk.first_offset + 2
    lo, hi = sorted(chunk.first_offset - 1 + int(f * span) for f in cut)
    assert assert_same_as_reference(chunk.data, lo, hi, headers) == chunk.next_offset
    assert next_fetch_offset(chunk.data) == chunk.next_offset


@given(chunk=chunks(), headers=st.booleans())
def test_whole_range_in_small_groups_and_batches(chunk: Chunk, headers: bool) -> None:
    """Many groups, each decoded alone, and many output batches per group."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(arrow_records, "GROUP_BYTES", 2000)
        patch.setattr(arrow_records, "MAX_ROWS_PER_BATCH", 7)
        assert assert_same_as_reference(chunk.data, 0, 2**62, headers) == chunk.next_offset


def test_fixed_size_runs_across_large_batches() -> None:
    """Keys ``key-0``..``key-2999``: record sizes change at 10, 100 and 1000 mid-batch."""
    recs = [SimpleRecord(value=pattern(1024, i), key=b"key-%d" % i) for i in range(3000)]
    data = build_batch(recs[:1500], now_ms=T0) + build_batch(
        recs[1500:], base_offset=1500, now_ms=T0, compression=Compression.LZ4
    )
    assert assert_same_as_reference(data, 3, 2990, False) == 3000


def test_records_of_64_kib_and_more() -> None:
    recs = [SimpleRecord(value=pattern(70_000 + i % 2, i)) for i in range(6)]
    data = build_batch(recs[:3], now_ms=T0) + build_batch(recs[3:], base_offset=3, now_ms=T0)
    assert assert_same_as_reference(data, 0, 6, False) == 6


def test_non_canonical_length_varints_are_decoded() -> None:
    """A length written with a redundant continuation byte (legal, though no client writes
    it) decodes like any other."""
    recs = [SimpleRecord(value=b"v" * 20, key=b"k") for _ in range(100)]
    section = bytearray()
    for i, rec in enumerate(recs):
        body = encode_record(rec, i, 0)[1:]  # the 1-byte length dropped
        section += bytes([(2 * len(body)) | 0x80, 0x00]) + body
    data = reseal(build_batch(recs, now_ms=T0), bytes(section))
    assert assert_same_as_reference(data, 0, 100, True) == 100


@pytest.mark.parametrize("delta", [-(2**63), 2**63 - 1, -1, 2**62, -(2**35) - 3])
def test_timestamp_delta_varints_of_up_to_ten_bytes(delta: int) -> None:
    """A varlong at the ends of int64 (10 bytes, the top bit of its zigzag form set)
    decodes to the value, with the record's other fields where they are."""
    from spark_source import _arrow_kernels as kernels

    zigzag = (delta << 1) ^ (delta >> 63)
    varlong = bytearray()
    while True:
        byte, zigzag = zigzag & 0x7F, zigzag >> 7
        varlong.append(byte | (0x80 if zigzag else 0))
        if not zigzag:
            break
    body = b"\x00" + bytes(varlong) + b"\x0a" + b"\x01" + b"\x04ab" + b"\x00"  # offset 5
    section = bytes([2 * len(body)]) + body  # key null, value b"ab", no headers
    data = np.frombuffer(section, dtype=np.uint8)
    out, keys, values, cursor = kernel_outputs(kernels, 1, len(section))
    meta = kernel_meta(kernels, [0, len(section), 1, 100, T0, 0])
    assert kernels.decode_records(data, meta, 0, 1, 0, 200, out, *keys, *values, cursor) == 0
    micros = ((T0 + delta) * 1000 + 2**63) % 2**64 - 2**63  # int64 arithmetic wraps
    assert out[kernels.TIMESTAMP_US, 0] == micros
    assert out[kernels.OFFSET, 0] == 105
    assert out[kernels.KEY_LENGTH, 0] == -1
    assert out[kernels.VALUE_LENGTH, 0] == 2
    assert bytes(values[1][:2]) == b"ab"
    assert out[kernels.END, 0] == len(section)
    assert list(cursor) == [1, 0, 2]


def kernel_outputs(kernels: Any, rows: int, payload: int) -> tuple[Any, ...]:
    """decode_records' outputs: fields, (key offsets, payload), (value ...), cursor."""
    out = np.zeros((kernels.RECORD_FIELDS, rows), dtype=np.int64)
    keys = (np.zeros(rows + 1, dtype=np.int32), np.zeros(payload, dtype=np.uint8))
    values = (np.zeros(rows + 1, dtype=np.int32), np.zeros(payload, dtype=np.uint8))
    return out, keys, values, np.zeros(3, dtype=np.int64)


def kernel_meta(kernels: Any, *rows: list[int]) -> Any:
    meta = np.array(rows, dtype=np.int64)
    assert meta.shape[1] == kernels.META_FIELDS
    return meta


def test_a_section_outside_the_buffer_or_outputs_without_room_are_refused_not_used() -> None:
    from spark_source import _arrow_kernels as kernels

    record = b"\x0e\x00\x00\x00\x01\x02v\x00"  # key null, value b"v"
    data = np.frombuffer(record * 2, dtype=np.uint8)

    def run(section: list[int], rows: int = 2, payload: int = 2) -> int:
        out, keys, values, cursor = kernel_outputs(kernels, rows, payload)
        meta = kernel_meta(kernels, [*section, 0, 0, 0])
        return int(kernels.decode_records(data, meta, 0, 1, 0, 9, out, *keys, *values, cursor))

    assert run([0, 16, 2]) == kernels.OK
    for bounds in ([0, 17, 2], [-1, 8, 1], [9, 8, 1]):
        with pytest.raises(ValueError, match="outside the buffer"):
            run(bounds)
    for count in (3, -1):
        with pytest.raises(ValueError, match="no room"):
            run([0, 16, count])
    with pytest.raises(ValueError, match="no room"):
        run([0, 16, 2], payload=1)


def test_any_negative_length_is_a_null() -> None:
    """Kafka reads a key or value length below -1 as null too (``DefaultRecord.readFrom``)."""
    section = b"\x0c\x00\x00\x00\x05\x03\x00"  # key length -3, value length -2
    data = reseal(build_batch([SimpleRecord(value=None)], now_ms=T0), section)
    assert assert_same_as_reference(data, 0, 1, True) == 1
    got, _ = decode(data, 0, 1, False)
    assert got.column("key").null_count == got.column("value").null_count == 1


def test_headers_of_a_record_with_many_are_decoded() -> None:
    heads = [(f"h{i}", None if i % 3 == 0 else pattern(i, i)) for i in range(300)]
    recs = [SimpleRecord(value=b"v", headers=heads if i == 5 else heads[:2]) for i in range(20)]
    assert assert_same_as_reference(build_batch(recs, now_ms=T0), 0, 20, True) == 20


def test_log_append_time_takes_the_batch_max_timestamp() -> None:
    recs = [SimpleRecord(value=b"v", timestamp=T0 + i) for i in range(3)]
    data = build_batch(recs, now_ms=T0, log_append_time=True)
    table, _ = decode(data, 0, 10, False)
    assert table["timestampType"].to_pylist() == [1, 1, 1]
    assert table["timestamp"].cast(pa.int64()).to_pylist() == [(T0 + 2) * 1000] * 3


def test_nothing_in_range_yields_no_batch_but_the_next_offset() -> None:
    data = build_batch([SimpleRecord(value=b"v")] * 4, base_offset=10)
    assert decode(data, 0, 10, False)[0].num_rows == 0
    assert decode(data, 14, 20, False) == (pa.Table.from_batches([], kafka_schema(False)), 14)
    assert decode(b"", 0, 10, False)[1] is None
    assert decode(data[:-1], 0, 20, False)[1] is None  # only a truncated batch


def test_output_does_not_alias_the_chunk() -> None:
    recs = [SimpleRecord(value=pattern(100, i), key=b"k%d" % i) for i in range(50)]
    data = bytearray(build_batch(recs))
    table, _ = decode(data, 0, 50, True)
    data[HEADER_BYTES:] = bytes(len(data) - HEADER_BYTES)
    assert table["value"].to_pylist() == [r.value for r in recs]


# --- corrupt input --------------------------------------------------------------------------


@given(chunk=chunks(), where=st.floats(0, 1), bit=st.integers(0, 7), which=st.integers(0, 3))
def test_a_flipped_bit_under_the_crc_is_a_corrupt_record(
    chunk: Chunk, where: float, bit: int, which: int
) -> None:
    """Anywhere from the CRC on, in any complete batch (control batches and batches outside
    the range included: a flipped control bit or offset delta must not hide records)."""
    bounds, pos = [], 0
    for batch in iter_batches(chunk.data, allow_truncated_tail=True):
        bounds.append((pos, pos + batch.size_bytes))
        pos += batch.size_bytes
    lo, hi = bounds[which % len(bounds)]
    data = bytearray(chunk.data)
    data[lo + 17 + int(where * (hi - lo - 18))] ^= 1 << bit
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode(data, chunk.first_offset, chunk.first_offset + 1, False)


@given(chunk=chunks(), headers=st.booleans())
def test_without_crc_checks_a_wrong_crc_decodes_as_the_right_one_would(
    chunk: Chunk, headers: bool
) -> None:
    """``check.crcs=false``, Kafka's consumer key: CRCs are not computed, nothing else changes."""
    data, pos = bytearray(chunk.data), 0
    for batch in iter_batches(chunk.data, allow_truncated_tail=True):
        data[pos + 17] ^= 0xFF  # the stored CRC's first byte
        pos += batch.size_bytes
    got, next_offset = decode(data, chunk.first_offset, 2**62, headers, check_crcs=False)
    want = reference_batch(chunk.data, TOPIC, PARTITION, chunk.first_offset, 2**62, headers)
    assert next_offset == chunk.next_offset
    for name in got.schema.names:
        assert got[name].combine_chunks().equals(want.column(name)), name
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode(data, chunk.first_offset, 2**62, headers)


@pytest.mark.parametrize("outside", [False, True])
def test_without_crc_checks_batch_headers_are_still_checked(outside: bool) -> None:
    data = bytearray(build_batch([SimpleRecord(value=b"v")] * 3, base_offset=10))
    data[22] |= 0x07  # compression codec 7: unknown
    start = 20 if outside else 0  # not decoded, checked all the same
    with pytest.raises(CorruptRecordError, match="unknown compression codec 7"):
        decode(data, start, 30, False, check_crcs=False)


@given(
    recs=batch_records(),
    edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=4),
    codec=st.sampled_from(list(Compression)),
)
def test_garbage_under_a_valid_crc_is_rejected_like_the_reference(
    recs: list[SimpleRecord], edits: list[tuple[float, int]], codec: Compression
) -> None:
    """Bytes changed in the records (lengths included) and the CRC recomputed: to_arrow
    raises CorruptRecordError exactly when kafka_protocol's record iteration does, and
    otherwise returns the same rows."""
    plain = build_batch(recs, now_ms=T0)
    section = bytearray(plain[HEADER_BYTES:])
    for where, byte in edits:
        section[int(where * (len(section) - 1))] = byte
    data = reseal(plain, bytes(section))
    if codec is not Compression.NONE:
        data = reseal(build_batch(recs, compression=codec), compress(codec, bytes(section)))
    try:
        want = reference_batch(data, TOPIC, PARTITION, 0, 2**62, True)
    except CorruptRecordError:
        with pytest.raises(CorruptRecordError):
            decode(data, 0, 2**62, True)
        return
    except (OverflowError, pa.ArrowInvalid):
        assume(False)  # garbage timestamps beyond int64 microseconds: the reference gives up
    got, _ = decode(data, 0, 2**62, True)
    assert got.equals(pa.Table.from_batches([want]))


@pytest.mark.parametrize(
    ("count", "section"),
    [
        (2**31 - 1, b"\x0e" + bytes(7)),  # a count no section of this size can hold
        (1, b"\xff" * 20),  # a length varint longer than 10 bytes
        (1, b"\x01" + bytes(10)),  # a negative length
        (1, b"\xfe\xff\xff\xff\x07" + bytes(8)),  # a length far past the batch
        (1, b"\x0e\x00\x00\x00\x7e" + bytes(3)),  # a key length past its record
        (1, b"\x0e\x00\x00\x00\x00\x00\x7f\x00"),  # a negative header count (-64)
        (2, b"\x0c" + bytes(6) + b"\x0e" + bytes(7)),  # a record shorter than its fields
        (1, b"\x0c" + bytes(6) + b"\x00"),  # a byte after the last record
        (2, (b"\x0c" + bytes(6)) * 2 + b"\x00"),  # the same, after records of one size
        (2, b"\x0c" + bytes(6) + b"\x0e" + bytes(7) + b"\x00"),  # ... and of two sizes
        (1, b"\x1a\x00" + b"\xff" * 12),  # a timestamp varint longer than 10 bytes
    ],
)
def test_bad_lengths_are_corrupt_records(count: int, section: bytes) -> None:
    data = reseal(build_batch([SimpleRecord(value=b"v")]), section, count)
    for headers in (False, True):
        with pytest.raises(CorruptRecordError):
            decode(data, 0, 10, headers)


@pytest.mark.parametrize("records", [1, 10])  # a Python loop for a few, numpy for many
@pytest.mark.parametrize(
    "headers",
    [
        b"\x02\x01\x01",  # one header, with a null key
        b"\x02\x7e\x01",  # one header, with a key past its record
        b"\x04\x02a\x01",  # two headers, one present
        b"\x02\x02a\x01\x00",  # one header, then a stray byte
    ],
)
def test_bad_headers_are_corrupt_records(records: int, headers: bytes) -> None:
    body = b"\x00\x00\x00\x01\x01" + headers  # attributes, timestamp, offset, null key/value
    section = (bytes([2 * len(body)]) + body) * records
    data = reseal(build_batch([SimpleRecord(value=b"v")] * records), section)
    with pytest.raises(CorruptRecordError):
        decode(data, 0, 10, True)


def test_header_key_that_is_not_utf8_is_a_corrupt_record() -> None:
    good = build_batch([SimpleRecord(value=b"v", headers=[("ab", b"x")])] * 20)
    data = reseal(good, good[HEADER_BYTES:].replace(b"\x04ab", b"\x04\xff\xfe"))
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        decode(data, 0, 20, True)


@pytest.mark.parametrize("headers", [False, True])
def test_schema_is_what_pyspark_expects_of_the_connector_columns(headers: bool) -> None:
    """PySpark's worker compares each source's first batch with exactly this (no JVM needed
    here; test_arrow_records_spark.py reads the batches through a real Spark)."""
    types = pytest.importorskip("pyspark.sql.types")
    from pyspark.sql.pandas.types import to_arrow_schema

    header = types.StructType(
        [
            types.StructField("key", types.StringType()),
            types.StructField("value", types.BinaryType()),
        ]
    )
    fields = [
        types.StructField("key", types.BinaryType()),
        types.StructField("value", types.BinaryType()),
        types.StructField("topic", types.StringType()),
        types.StructField("partition", types.IntegerType()),
        types.StructField("offset", types.LongType()),
        types.StructField("timestamp", types.TimestampType()),
        types.StructField("timestampType", types.IntegerType()),
    ]
    if headers:
        fields.append(types.StructField("headers", types.ArrayType(header)))
    expected = to_arrow_schema(types.StructType(fields), timezone="UTC")
    assert kafka_schema(headers).equals(expected)
