"""RecordBatch v2 (magic 2): header views, validation, in-place patches, records, builders.

Layout (all big-endian; the CRC32C covers ``attributes`` to the end of the batch)::

    offset  size  field
         0     8  base_offset
         8     4  batch_length            bytes after this field (batch size = 12 + batch_length)
        12     4  partition_leader_epoch  \\ not covered by the CRC: the broker patches
        16     1  magic (2)               /  base_offset and the epoch without recomputing it
        17     4  crc (uint32, CRC32C)
        21     2  attributes              bits 0-2 codec, 3 timestamp type, 4 transactional,
                                          5 control, 6 delete horizon
        23     4  last_offset_delta
        27     8  base_timestamp
        35     8  max_timestamp
        43     8  producer_id
        51     2  producer_epoch
        53     4  base_sequence
        57     4  records_count
        61        records (compressed as one block when the codec is not NONE)

    record:  length varint | attributes int8 | timestamp_delta varlong | offset_delta varint |
             key_length varint | key | value_length varint | value |
             header_count varint | (key_length varint, key, value_length varint, value)*

The produce and fetch paths use only :class:`RecordBatch` header properties, ``validate`` and
the in-place patches; nothing there iterates records.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from crc32c import crc32c

from kafka_protocol._codec import Buffer
from kafka_protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    Compression,
    compress,
    decompress,
)
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.varint import encode_varint, read_varlong

MAGIC = 2
HEADER_BYTES = 61
LOG_OVERHEAD = 12  # base_offset + batch_length
CRC_START = 21
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08  # 1 = LogAppendTime
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_CONTROL_KEY = struct.Struct(">hh")


class RecordBatch:
    """A read-only view of one batch inside a buffer.  Header fields are parsed on creation."""

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "batch_length",
        "buf",
        "crc",
        "last_offset_delta",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "producer_epoch",
        "producer_id",
        "records_count",
    )
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    buf: memoryview

    def __init__(self, buf: memoryview) -> None:
        """``buf`` must start at the batch; it may extend past it."""
        if len(buf) < HEADER_BYTES:
            raise CorruptRecordError(f"batch of {len(buf)} bytes is shorter than its header")
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        ) = _HEADER.unpack_from(buf, 0)
        if self.magic != MAGIC:
            raise CorruptRecordError(f"unsupported record batch magic {self.magic}")
        size = LOG_OVERHEAD + self.batch_length
        if size < HEADER_BYTES:
            raise CorruptRecordError(f"batch length {self.batch_length} is below the header size")
        if size > len(buf):
            raise CorruptRecordError(f"batch of {size} bytes overruns its {len(buf)}-byte buffer")
        self.buf = buf[:size]

    @property
    def size_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def compression(self) -> Compression:
        codec = self.attributes & ATTR_COMPRESSION_MASK
        try:
            return Compression(codec)
        except ValueError:
            raise CorruptRecordError(f"unknown compression codec {codec}") from None

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_TIMESTAMP_TYPE)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    def compute_crc(self) -> int:
        return int(crc32c(self.buf[CRC_START:]))

    def validate(self, *, crc: bool = True) -> RecordBatch:
        """Check the CRC (unless ``crc`` is false, as a consumer with ``check.crcs=false``
        asks) and the header's own consistency; return self.

        This is on the produce path for every batch: keep it to one CRC call and a few
        integer comparisons (no enum lookups, no record parsing).
        """
        if crc and (computed := crc32c(self.buf[CRC_START:])) != self.crc:
            raise CorruptRecordError(
                f"batch at offset {self.base_offset} fails its CRC32C check"
                f" (stored {self.crc:#010x}, computed {computed:#010x})"
            )
        # Only a control batch may be empty (a transaction marker written by compaction).
        count, delta = self.records_count, self.last_offset_delta
        if (count <= 0 or delta < 0) and (count < 0 or delta < 0 or not self.is_control):
            raise CorruptRecordError(
                f"batch claims {count} records and a last offset delta of {delta}"
            )
        if self.attributes & ATTR_COMPRESSION_MASK > Compression.ZSTD:
            raise CorruptRecordError(
                f"unknown compression codec {self.attributes & ATTR_COMPRESSION_MASK}"
            )
        return self

    def records_section(self) -> bytes:
        """The records, decompressed."""
        raw = self.buf[HEADER_BYTES:]
        if self.compression is Compression.NONE:
            return bytes(raw)
        return decompress(self.compression, raw, DEFAULT_MAX_DECOMPRESSED_BYTES)

    def records(self) -> list[Record]:
        """Every record with absolute offsets and timestamps (decompressing as needed)."""
        return list(self.iter_records())

    def iter_records(self) -> Iterator[Record]:
        data = memoryview(self.records_section())
        pos = 0
        for _ in range(self.records_count):
            record, pos = _read_record(data, pos, self)
            yield record
        if pos != len(data):
            raise CorruptRecordError(f"{len(data) - pos} bytes after the last record")


def iter_batches(data: Buffer, *, allow_truncated_tail: bool = False) -> Iterator[RecordBatch]:
    """Split a records blob into batches (headers parsed, CRC not checked).

    A Fetch response may end with a partial batch (KIP-74); pass ``allow_truncated_tail``
    to stop there silently instead of raising :class:`CorruptRecordError`.
    """
    buf = memoryview(data)
    pos = 0
    while pos < len(buf):
        if allow_truncated_tail:
            if len(buf) - pos < LOG_OVERHEAD:
                return
            (_, length) = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
            if pos + LOG_OVERHEAD + length > len(buf):
                return
        batch = RecordBatch(buf[pos:])
        yield batch
        pos += batch.size_bytes


def set_base_offset(buf: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    """Patch the base offset in place; the CRC does not cover it."""
    _I64.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, pos: int = 0) -> None:
    """Patch the partition leader epoch in place; the CRC does not cover it."""
    _I32.pack_into(buf, pos + 12, epoch)


# --- records --------------------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def _read_blob(buf: memoryview, pos: int, what: str) -> tuple[bytes | None, int]:
    n, pos = read_varlong(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise CorruptRecordError(f"record {what} of {n} bytes overruns the batch")
    return bytes(buf[pos : pos + n]), pos + n


def _read_record(buf: memoryview, pos: int, batch: RecordBatch) -> tuple[Record, int]:
    length, pos = read_varlong(buf, pos)
    end = pos + length
    if length < 0 or end > len(buf):
        raise CorruptRecordError(f"record of {length} bytes overruns the batch")
    body = buf[:end]
    pos += 1  # attributes: unused since magic 2
    ts_delta, pos = read_varlong(body, pos)
    offset_delta, pos = read_varlong(body, pos)
    key, pos = _read_blob(body, pos, "key")
    value, pos = _read_blob(body, pos, "value")
    count, pos = read_varlong(body, pos)
    if count < 0 or count > end - pos:
        raise CorruptRecordError(f"record claims {count} headers")
    headers = []
    for _ in range(count):
        hkey, pos = _read_blob(body, pos, "header key")
        if hkey is None:
            raise CorruptRecordError("record header with a null key")
        hvalue, pos = _read_blob(body, pos, "header value")
        try:
            headers.append((hkey.decode(), hvalue))
        except UnicodeDecodeError:
            raise CorruptRecordError("record header key is not UTF-8") from None
    if pos != end:
        raise CorruptRecordError(f"record length {length} disagrees with its fields")
    timestamp = batch.max_timestamp if batch.is_log_append_time else batch.base_timestamp + ts_delta
    return Record(batch.base_offset + offset_delta, timestamp, key, value, headers), end


def _blob(data: bytes | None) -> bytes:
    return b"\x01" if data is None else encode_varint(len(data)) + data  # varint(-1) is 0x01


@dataclass(slots=True)
class SimpleRecord:
    """What a producer sends: offsets are assigned by the batch, the timestamp is optional."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp: int | None = None


def encode_record(rec: SimpleRecord, offset_delta: int, timestamp_delta: int) -> bytes:
    body = bytearray(b"\x00")
    body += encode_varint(timestamp_delta)
    body += encode_varint(offset_delta)
    body += _blob(rec.key)
    body += _blob(rec.value)
    body += encode_varint(len(rec.headers))
    for hkey, hvalue in rec.headers:
        body += _blob(hkey.encode())
        body += _blob(hvalue)
    return encode_varint(len(body)) + bytes(body)


def build_batch(
    records: Sequence[SimpleRecord],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    level: int | None = None,
    now_ms: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
) -> bytes:
    """Build one batch; records without a timestamp get ``now_ms``."""
    if not records:
        raise ValueError("a batch needs at least one record")
    stamps = [now_ms if r.timestamp is None else r.timestamp for r in records]
    base_ts = stamps[0]
    body = b"".join(
        encode_record(r, i, ts - base_ts)
        for i, (r, ts) in enumerate(zip(records, stamps, strict=True))
    )
    if compression is not Compression.NONE:
        body = compress(compression, body, level)
    attributes = (
        int(compression)
        | (ATTR_TIMESTAMP_TYPE if log_append_time else 0)
        | (ATTR_TRANSACTIONAL if transactional else 0)
        | (ATTR_CONTROL if control else 0)
    )
    header = bytearray(
        _HEADER.pack(
            base_offset,
            HEADER_BYTES - LOG_OVERHEAD + len(body),
            partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            len(records) - 1,
            base_ts,
            max(stamps),
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    crc = crc32c(body, crc32c(memoryview(header)[CRC_START:]))
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + body


class ControlRecordType(enum.IntEnum):
    """The ``type`` in a control record's key (``version int16, type int16``)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


def control_record(kind: ControlRecordType, value: bytes) -> SimpleRecord:
    """A control record for a control batch (``build_batch(..., control=True)``)."""
    return SimpleRecord(value=value, key=_CONTROL_KEY.pack(0, kind))


def control_record_type(record: Record) -> ControlRecordType:
    """The type of a record read from a control batch."""
    if record.key is None or len(record.key) < _CONTROL_KEY.size:
        raise CorruptRecordError("control record without a version and type key")
    _, kind = _CONTROL_KEY.unpack_from(record.key)
    try:
        return ControlRecordType(kind)
    except ValueError:
        raise CorruptRecordError(f"unknown control record type {kind}") from None
