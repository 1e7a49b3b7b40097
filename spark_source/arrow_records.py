"""Fetched record sets → Arrow record batches in the schema of Spark's Kafka source.

:func:`to_arrow` turns the records bytes of one Fetch partition (concatenated RecordBatch v2,
possibly ending with a truncated batch) into ``pyarrow.RecordBatch``es that a PySpark Python
data source yields as they are.  Python never touches a single record: compiled loops
(:mod:`spark_source._arrow_kernels`) find every record's fields and copy keys, values and
headers into Arrow buffers, and a few dozen numpy and Arrow calls a chunk do the rest, so a
chunk of several MiB costs about as much per record as its CRC and copies
(``scripts/bench_arrow_records.py``).  Batches are CRC-checked and decoded a slice of about
half a MiB at a time, so that decoding reads bytes the check just brought into the cache.

The schema is what PySpark's worker compares the first batch with (``Schema.equals``,
nullability included): ``to_arrow_schema(schema, timezone="UTC")`` of the connector's columns,
whatever the session's time zone::

    Spark (DDL, all nullable)        Arrow
    key binary                       binary
    value binary                     binary
    topic string                     string  (plain: Spark refuses a dictionary array)
    partition int                    int32
    offset long                      int64
    timestamp timestamp              timestamp[us, tz=UTC]  (Kafka's milliseconds * 1000)
    timestampType int                int32  (0 CreateTime, 1 LogAppendTime)
    headers array<struct<key:        list<element: struct<key: string, value: binary>>
      string, value: binary>>        (null for a record without headers, as Spark's own)

``timestamp`` must be Spark's TIMESTAMP (LTZ): with ``spark.sql.timestampType=TIMESTAMP_NTZ``
the DDL word ``timestamp`` means ``timestamp[us]`` without a zone and PySpark refuses these
batches; ``timestamp_ltz`` in the DDL means the same whatever that setting.

Output buffers never point into ``chunk``: keys and values are copied once, so the caller may
reuse it.
"""

from __future__ import annotations

import functools
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from kafka_protocol._codec import Buffer
from kafka_protocol.compression import Compression
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.record_batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    HEADER_BYTES,
    LOG_OVERHEAD,
    RecordBatch,
    iter_batches,
)
from spark_source.read_committed import AbortedBatchFilter, AbortedTransaction

if TYPE_CHECKING:
    from spark_source._arrow_kernels import I32, I64, U8

MIB = 1024 * 1024
GROUP_BYTES = 32 * MIB  # records decoded together: bounds the temporaries and int32 offsets
# Batches CRC-checked together, then decoded before their bytes leave a core's L2 cache (one
# pass from memory instead of three: ~0.17 us less per 1 KiB record).
SLICE_BYTES = 512 * 1024
MAX_ROWS_PER_BATCH = 1 << 20  # keeps the repeated topic column under 2 GiB
MS_TO_US = 1000

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))


@functools.cache
def _kernels() -> ModuleType:
    """The compiled loops, imported on first use: importing numba costs ~0.35 s, which
    processes that only plan (Spark's driver) need not pay."""
    from spark_source import _arrow_kernels

    return _arrow_kernels


@functools.cache
def kafka_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of Spark's Kafka source columns (all nullable, as in a DDL string)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


def next_fetch_offset(chunk: Buffer) -> int | None:
    """The offset after the last complete batch of ``chunk`` (None: it holds none)."""
    last = None
    for batch in iter_batches(chunk, allow_truncated_tail=True):
        last = batch.next_offset
    return last


def to_arrow(
    chunk: Buffer,
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool,
    *,
    check_crcs: bool = True,
    aborted: Iterable[AbortedTransaction] | None = None,
) -> Generator[pa.RecordBatch, None, int | None]:
    """Yield the records of ``chunk`` with offsets in ``[start, end)`` as Arrow batches of
    ``kafka_schema(include_headers)``; return the offset to fetch next, so that a caller can
    write ``next_offset = yield from to_arrow(...)``.

    Usually one batch per chunk: one per 32 MiB of (decompressed) records, none when no record
    is in range.  The next offset is the last complete batch's last offset + 1, None when
    ``chunk`` holds no complete batch; a truncated batch at its end is ignored.  Every complete
    batch has its CRC checked (a flipped control bit or offset must not hide records); control
    batches and batches wholly outside the range are not decoded, and header bytes are parsed
    (and checked) only when ``include_headers``.  ``check_crcs=False`` (Kafka's consumer key
    ``check.crcs``) skips the CRCs, not the other checks: corrupt bytes are then decoded into
    wrong rows unless they break a length or a batch header.

    ``aborted`` (read_committed: the Fetch answer's aborted transactions, possibly none) skips
    the batches of aborted transactions whole, as Kafka's consumer does
    (:class:`~spark_source.read_committed.AbortedBatchFilter`); None reads uncommitted.

    Raises :class:`CorruptRecordError` for a CRC, header or record layout fault, and
    :class:`~kafka_protocol.exceptions.CompressionError` for a CRC-valid batch that does not
    decompress (both :class:`~kafka_protocol.exceptions.RemoteProtocolError`).
    """
    view = memoryview(chunk).cast("B")
    assert len(view) < 1 << 31  # a Fetch response's records: int32 Arrow offsets reach
    group = _Group(check_crcs)
    visible = None if aborted is None else AbortedBatchFilter(aborted)
    next_offset = None
    pos = 0
    for batch in iter_batches(view, allow_truncated_tail=True):
        last = batch.base_offset + batch.last_offset_delta
        next_offset, size = last + 1, LOG_OVERHEAD + batch.batch_length
        # every batch goes through the filter, in order: markers outside the range count too
        hidden = visible is not None and not visible.keep(batch, check_crc=check_crcs)
        if hidden or batch.attributes & ATTR_CONTROL or last < start or batch.base_offset >= end:
            batch.validate(crc=check_crcs)  # not decoded, but checked all the same
        else:
            group.add(batch, pos, size)
            if group.size_bytes >= GROUP_BYTES:
                yield from group.to_arrow(view, topic, partition, start, end, include_headers)
                group = _Group(check_crcs)
        pos += size
    yield from group.to_arrow(view, topic, partition, start, end, include_headers)
    return next_offset


@dataclass(slots=True)
class _Group:
    """Batches decoded together into one set of Arrow buffers, each with its records section:
    a range of the chunk when uncompressed (its CRC not yet checked), its decompressed bytes
    otherwise (checked before decompressing)."""

    check_crcs: bool
    batches: list[RecordBatch] = field(default_factory=list)
    sections: list[tuple[int, int] | bytes] = field(default_factory=list)
    size_bytes: int = 0

    def add(self, batch: RecordBatch, pos: int, size: int) -> None:
        """``batch`` lies at ``chunk[pos:pos + size]``."""
        section: tuple[int, int] | bytes
        if batch.attributes & ATTR_COMPRESSION_MASK == Compression.NONE:
            section = (pos + HEADER_BYTES, pos + size)
            self.size_bytes += size - HEADER_BYTES
        else:
            section = batch.validate(crc=self.check_crcs).records_section()
            self.size_bytes += len(section)
        self.batches.append(batch)
        self.sections.append(section)

    def _layout(self, chunk: memoryview) -> tuple[memoryview, list[tuple[int, int]]]:
        """One buffer holding every section, and where each lies in it: the chunk itself when
        no batch is compressed, else the sections copied together (after their CRC checks)."""
        if all(isinstance(s, tuple) for s in self.sections):
            return chunk, [s for s in self.sections if isinstance(s, tuple)]
        pieces = []
        for batch, section in zip(self.batches, self.sections, strict=True):
            if isinstance(section, tuple):
                batch.validate(crc=self.check_crcs)
                pieces.append(chunk[section[0] : section[1]])
            else:
                pieces.append(memoryview(section))
        bounds, pos = [], 0
        for piece in pieces:
            bounds.append((pos, pos + len(piece)))
            pos += len(piece)
        # Into Arrow's pool, which keeps its pages: megabytes from malloc fault in a page per
        # 4 KiB every time once two such buffers are alive (measured: 7x the copy itself).
        joined = pa.allocate_buffer(pos)
        np.concatenate(
            [np.frombuffer(piece, dtype=np.uint8) for piece in pieces],
            out=np.frombuffer(joined, dtype=np.uint8),
        )
        return memoryview(joined).cast("B"), bounds  # Arrow exports signed bytes

    def _meta(self, bounds: list[tuple[int, int]]) -> I64:
        """decode_records' ``meta``: one row per batch."""
        k = _kernels()
        meta = np.empty((len(self.batches), k.META_FIELDS), dtype=np.int64)
        meta[:, [k.SECTION_START, k.SECTION_END]] = bounds
        meta[:, k.COUNT] = [b.records_count for b in self.batches]
        meta[:, k.BASE_OFFSET] = [b.base_offset for b in self.batches]
        meta[:, k.LOG_APPEND] = [b.is_log_append_time for b in self.batches]
        meta[:, k.BASE_TIMESTAMP] = [
            b.max_timestamp if b.is_log_append_time else b.base_timestamp for b in self.batches
        ]
        room = (meta[:, k.SECTION_END] - meta[:, k.SECTION_START]) // k.MIN_RECORD_BYTES
        counts = meta[:, k.COUNT]
        if (counts < 0).any() or (counts > room).any():  # before allocating for them
            raise CorruptRecordError("a batch claims more records than its bytes can hold")
        return meta

    def to_arrow(
        self,
        chunk: memoryview,
        topic: str,
        partition: int,
        start: int,
        end: int,
        include_headers: bool,
    ) -> Iterator[pa.RecordBatch]:
        if not self.batches:
            return
        k = _kernels()
        buf, bounds = self._layout(chunk)
        data: U8 = np.frombuffer(buf, dtype=np.uint8)
        meta = self._meta(bounds)
        capacity = int(meta[:, k.COUNT].sum())
        out = np.empty((k.RECORD_FIELDS, capacity), dtype=np.int64)
        keys = _BinaryOutput(capacity, self.size_bytes)
        values = _BinaryOutput(capacity, self.size_bytes)
        cursor = np.zeros(3, dtype=np.int64)  # rows, key bytes, value bytes
        unchecked = buf is chunk  # else _layout checked every batch as it copied them
        first = 0
        while first < len(bounds):
            # A slice of batches is CRC-checked, then decoded while its bytes are in the cache.
            last, size = first + 1, bounds[first][1] - bounds[first][0]
            while last < len(bounds) and size + bounds[last][1] - bounds[last][0] <= SLICE_BYTES:
                size += bounds[last][1] - bounds[last][0]
                last += 1
            if unchecked:
                for batch in self.batches[first:last]:
                    batch.validate(crc=self.check_crcs)
            outputs = (out, keys.offsets, keys.payload_array, values.offsets, values.payload_array)
            k.check(k.decode_records(data, meta, first, last, start, end, *outputs, cursor))
            first = last
        rows = int(cursor[0])
        if not rows:
            return
        out = out[:, :rows]
        micros = pa.py_buffer(out[k.TIMESTAMP_US])
        columns = {
            "key": keys.array(rows, int(cursor[1]), out[k.KEY_LENGTH]),
            "value": values.array(rows, int(cursor[2]), out[k.VALUE_LENGTH]),
            "partition": pa.array(np.full(rows, partition, dtype=np.int32)),
            "offset": pa.array(out[k.OFFSET]),
            "timestamp": pa.Array.from_buffers(TIMESTAMP_TYPE, rows, [None, micros]),
            "timestampType": pa.array(out[k.TIMESTAMP_TYPE].astype(np.int32)),
        }
        if include_headers:
            columns["headers"] = _headers(data, out)
        yield from _batches(columns, topic, rows, include_headers)


class _BinaryOutput:
    """A ``binary`` column being filled by decode_records: offsets and a payload buffer sized
    for the worst case (every byte of the sections), of which the array keeps what was used."""

    def __init__(self, rows: int, payload_bytes: int) -> None:
        self.offsets: I32 = np.empty(rows + 1, dtype=np.int32)
        self.offsets[0] = 0
        self.payload = pa.allocate_buffer(payload_bytes)
        self.payload_array: U8 = np.frombuffer(self.payload, dtype=np.uint8)

    def array(self, rows: int, used: int, length: I64) -> pa.Array:
        """The column of ``rows`` values, ``used`` payload bytes; a negative length is null."""
        valid = length >= 0
        if not valid.any():
            return pa.nulls(rows, pa.binary())
        validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        buffers = [validity, pa.py_buffer(self.offsets[: rows + 1]), self.payload.slice(0, used)]
        return pa.Array.from_buffers(pa.binary(), rows, buffers)


def _batches(
    columns: dict[str, pa.Array], topic: str, rows: int, include_headers: bool
) -> Iterator[pa.RecordBatch]:
    schema = kafka_schema(include_headers)
    for first in range(0, rows, MAX_ROWS_PER_BATCH):
        n = min(MAX_ROWS_PER_BATCH, rows - first)
        sliced = {name: col if n == rows else col.slice(first, n) for name, col in columns.items()}
        sliced["topic"] = _topic(topic, n)
        yield pa.RecordBatch.from_arrays([sliced[name] for name in schema.names], schema=schema)


# --- columns ----------------------------------------------------------------------------------


def _topic(topic: str, rows: int) -> pa.Array:
    """``rows`` copies of ``topic``, as a plain string array."""
    name = topic.encode()
    offsets = np.arange(rows + 1, dtype=np.int32) * np.int32(len(name))
    return pa.Array.from_buffers(
        pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(name * rows)]
    )


def _binary(data: U8, start: I64, length: I64) -> pa.Array:
    """``data[start:start + length]`` per row (a negative length: null) as one ``binary`` array."""
    n = len(start)
    valid = length >= 0
    if not valid.any():
        return pa.nulls(n, pa.binary())
    offsets = np.empty(n + 1, dtype=np.int32)
    payload = pa.allocate_buffer(int(np.maximum(length, 0).sum()))
    kernels = _kernels()
    kernels.gather(data, start, length, offsets, np.frombuffer(payload, dtype=np.uint8))
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), payload])


def _headers(data: U8, fields: I64) -> pa.Array:
    """Each row's headers as a list (null without headers, as Spark's connector does)."""
    kernels = _kernels()
    counts = fields[kernels.HEADER_COUNT]
    absent = counts == 0
    if absent.all():
        return pa.nulls(len(absent), HEADERS_TYPE)
    list_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=list_offsets[1:])
    total = int(list_offsets[-1])
    if total > np.iinfo(np.int32).max:
        raise CorruptRecordError(f"{total} headers do not fit one Arrow list column")
    h = np.empty((kernels.HEADER_FIELDS, total), dtype=np.int64)
    starts, ends = fields[kernels.HEADERS_START], fields[kernels.END]
    kernels.check(kernels.scan_headers(data, starts, ends, list_offsets, h))
    try:
        keys = _binary(data, h[kernels.HKEY_START], h[kernels.HKEY_LENGTH])
        keys = keys.cast(pa.string())
    except pa.ArrowInvalid:
        raise CorruptRecordError("record header key is not UTF-8") from None
    values = _binary(data, h[kernels.HVALUE_START], h[kernels.HVALUE_LENGTH])
    entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE))
    return pa.ListArray.from_arrays(
        pa.array(list_offsets.astype(np.int32)), entries, type=HEADERS_TYPE, mask=pa.array(absent)
    )


__all__ = ["HEADERS_TYPE", "kafka_schema", "next_fetch_offset", "to_arrow"]
