"""Malformed record batches with valid CRCs, for the validation tests (unit and integration).

A batch is built from records described field by field (:class:`Rec`), so that a corruption
can change one field (a length, a varint, a header count) and the batch is then sealed with
a header and a CRC32C computed over the damaged bytes: only the record walk can find it.
Also a plain Python reference decoder, :func:`reference_walk`, that the compiled walk
(``kafka_protocol/_record_walk.c``) must agree with.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from crc32c import crc32c

from kafka_protocol.compression import Compression, compress
from kafka_protocol.record_batch import CRC_START, HEADER_BYTES, LOG_OVERHEAD, MAGIC

_HEADER = struct.Struct(">qiibIhiqqqhii")


def zigzag_varint(value: int) -> bytes:
    """Kafka's zigzag varint of any width (so 2**40 gives the 6-byte encoding Kafka refuses
    where it expects an int32)."""
    raw = (value << 1) ^ (value >> 70) if value < 0 else value << 1
    out = bytearray()
    while True:
        byte = raw & 0x7F
        raw >>= 7
        if raw:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def padded_varint(value: int, width: int) -> bytes:
    """A non-canonical encoding of ``value`` in ``width`` bytes (continuation bits set)."""
    raw = (value << 1) ^ (value >> 70) if value < 0 else value << 1
    out = bytearray()
    for i in range(width):
        out.append((raw & 0x7F) | (0x80 if i < width - 1 else 0))
        raw >>= 7
    return bytes(out)


@dataclass
class Rec:
    """One record as its fields; each ``*_raw`` overrides the encoding of that field."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    timestamp_delta: int = 0
    offset_delta: int = 0
    length_raw: bytes | None = None
    offset_delta_raw: bytes | None = None
    value_length_raw: bytes | None = None
    header_count_raw: bytes | None = None

    def body(self) -> bytes:
        out = bytearray(b"\x00")
        out += zigzag_varint(self.timestamp_delta)
        out += self.offset_delta_raw or zigzag_varint(self.offset_delta)
        out += _blob(self.key)
        if self.value_length_raw is not None:
            out += self.value_length_raw + (self.value or b"")
        else:
            out += _blob(self.value)
        out += self.header_count_raw or zigzag_varint(len(self.headers))
        for hkey, hvalue in self.headers:
            out += _blob(hkey) + _blob(hvalue)
        return bytes(out)

    def encode(self) -> bytes:
        body = self.body()
        return (self.length_raw or zigzag_varint(len(body))) + body


def _blob(data: bytes | None) -> bytes:
    return b"\x01" if data is None else zigzag_varint(len(data)) + data


@dataclass
class Batch:
    records: list[Rec]
    base_timestamp: int = 0
    codec: Compression = Compression.NONE
    count: int | None = None  # the header's record count (default: len(records))
    last_offset_delta: int | None = None  # default: count - 1
    codec_flag: int | None = None  # the attributes' codec (default: ``codec``)
    trailing: bytes = b""  # after the last record, before compression

    def section(self) -> bytes:
        return b"".join(r.encode() for r in self.records) + self.trailing

    def seal(self, base_offset: int = 0) -> bytes:
        """The batch, with a CRC32C valid for whatever its bytes are."""
        count = len(self.records) if self.count is None else self.count
        last = count - 1 if self.last_offset_delta is None else self.last_offset_delta
        body = self.section()
        if self.codec is not Compression.NONE:
            body = compress(self.codec, body)
        flag = int(self.codec) if self.codec_flag is None else self.codec_flag
        deltas = [r.timestamp_delta for r in self.records] or [0]
        header = bytearray(
            _HEADER.pack(
                base_offset,
                HEADER_BYTES - LOG_OVERHEAD + len(body),
                -1,
                MAGIC,
                0,
                flag,
                last,
                self.base_timestamp,
                self.base_timestamp + max(deltas),
                -1,
                -1,
                -1,
                count,
            )
        )
        crc = crc32c(body, crc32c(memoryview(header)[CRC_START:]))
        struct.pack_into(">I", header, 17, crc)
        return bytes(header) + body


def valid_batch(
    records: list[tuple[bytes | None, bytes | None, list[tuple[bytes, bytes | None]], int]],
    base_timestamp: int = 0,
    codec: Compression = Compression.NONE,
) -> Batch:
    """``(key, value, headers, timestamp_delta)`` per record, offset deltas 0..n-1."""
    return Batch(
        [Rec(k, v, h, ts, i) for i, (k, v, h, ts) in enumerate(records)],
        base_timestamp,
        codec,
    )


# --- named corruptions: each takes a valid batch of >= 1 record and returns a bad one ------


def count_too_high(b: Batch) -> Batch:
    return replace(b, count=len(b.records) + 1)


def count_too_low(b: Batch) -> Batch:  # needs >= 2 records
    return replace(b, count=len(b.records) - 1)


def length_2_40(b: Batch) -> Batch:
    return _with_record(b, -1, length_raw=zigzag_varint(2**40))


def length_past_end(b: Batch) -> Batch:
    last = b.records[-1]
    return _with_record(b, -1, length_raw=zigzag_varint(len(last.body()) + 7))


def varint_overflow(b: Batch) -> Batch:
    return _with_record(b, 0, offset_delta_raw=padded_varint(0, 6))


def trailing_bytes(b: Batch) -> Batch:
    return replace(b, trailing=b"\x00\x00\x00")


def truncated_value(b: Batch) -> Batch:
    """The last record's value length past the end of that record (its bytes unchanged)."""
    last = b.records[-1]
    return _with_record(b, -1, value_length_raw=zigzag_varint(len(last.body()) + 1))


def bad_header_count(b: Batch) -> Batch:
    return _with_record(b, 0, header_count_raw=zigzag_varint(-2))


def huge_header_count(b: Batch) -> Batch:
    return _with_record(b, 0, header_count_raw=zigzag_varint(1000))


def wrong_offset_delta(b: Batch) -> Batch:
    return _with_record(b, -1, offset_delta=len(b.records))


def gzip_flag_on_plain_data(b: Batch) -> Batch:
    return replace(b, codec=Compression.NONE, codec_flag=int(Compression.GZIP))


def _with_record(b: Batch, index: int, **changes: object) -> Batch:
    records = list(b.records)
    records[index] = replace(records[index], **changes)  # type: ignore[arg-type]
    return replace(b, records=records)


# name -> (corruption, minimum records, the code a producer gets, the record it names or -1)
CORRUPTIONS: dict[str, tuple[Callable[[Batch], Batch], int, str, str]] = {
    "count-too-high": (count_too_high, 1, "INVALID_RECORD", "the batch claims"),
    "count-too-low": (count_too_low, 2, "INVALID_RECORD", "after the last record"),
    "length-2^40": (length_2_40, 1, "INVALID_RECORD", "length varint is too long"),
    "length-past-end": (length_past_end, 1, "INVALID_RECORD", "overruns"),
    "varint-overflow": (varint_overflow, 1, "INVALID_RECORD", "offset delta varint is too long"),
    "trailing-bytes": (trailing_bytes, 1, "INVALID_RECORD", "3 bytes after the last record"),
    "truncated-value": (truncated_value, 1, "INVALID_RECORD", "value of"),
    "negative-header-count": (bad_header_count, 1, "INVALID_RECORD", "header count of -2"),
    "huge-header-count": (huge_header_count, 1, "INVALID_RECORD", "1000 headers"),
    "wrong-offset-delta": (wrong_offset_delta, 1, "INVALID_RECORD", "offset delta"),
    "gzip-flag-on-plain-data": (gzip_flag_on_plain_data, 1, "CORRUPT_MESSAGE", "gzip"),
}


# --- the reference decoder ------------------------------------------------------------------


class _Bad(Exception):
    pass


def _varint(buf: bytes, pos: int, end: int, bits: int) -> tuple[int, int]:
    raw, shift = 0, 0
    for _ in range((bits + 6) // 7):
        if pos >= end:
            raise _Bad
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if raw >> bits:
                raise _Bad
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    raise _Bad


def _skip(buf: bytes, pos: int, end: int, nullable: bool) -> tuple[int, int]:
    n, pos = _varint(buf, pos, end, 32)
    if n == -1 and nullable:
        return n, pos
    if n < 0 or n > end - pos:
        raise _Bad
    return n, pos + n


@dataclass(frozen=True)
class ReferenceWalk:
    bad_index: int  # -1 when valid
    valid: bool
    min_timestamp_delta: int = 0
    max_timestamp_delta: int = 0
    min_timestamp_index: int = -1
    max_timestamp_index: int = -1
    first_null_key: int = -1


def reference_walk(buf: bytes, count: int, last_offset_delta: int) -> ReferenceWalk:
    """The record walk written plainly, one record at a time."""
    pos, end, prev = 0, len(buf), -1
    deltas: list[int] = []
    null_keys: list[int] = []
    for i in range(count):
        try:
            if pos == end:
                raise _Bad
            n, pos = _varint(buf, pos, end, 32)
            if n < 0 or n > end - pos:
                raise _Bad
            rend, p = pos + n, pos
            if p >= rend:
                raise _Bad
            ts_delta, p = _varint(buf, p + 1, rend, 64)
            offset_delta, p = _varint(buf, p, rend, 32)
            if not prev < offset_delta <= last_offset_delta - (count - 1 - i):
                raise _Bad
            prev = offset_delta
            key_length, p = _skip(buf, p, rend, nullable=True)
            if key_length == -1:
                null_keys.append(i)
            _, p = _skip(buf, p, rend, nullable=True)
            headers, p = _varint(buf, p, rend, 32)
            if headers < 0 or headers > (rend - p) // 2:
                raise _Bad
            for _ in range(headers):
                _, p = _skip(buf, p, rend, nullable=False)
                _, p = _skip(buf, p, rend, nullable=True)
            if p != rend:
                raise _Bad
        except _Bad:
            return ReferenceWalk(i, False)
        deltas.append(ts_delta)
        pos = rend
    if pos != end:
        return ReferenceWalk(count - 1, False)
    if not deltas:
        return ReferenceWalk(-1, True)
    low, high = min(deltas), max(deltas)
    return ReferenceWalk(
        -1,
        True,
        low,
        high,
        deltas.index(low),
        deltas.index(high),
        null_keys[0] if null_keys else -1,
    )
