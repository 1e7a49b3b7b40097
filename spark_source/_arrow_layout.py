"""Where the fields of RecordBatch v2 records lie, decoded for all records at once with numpy.

Given where each record's body starts and ends (:mod:`spark_source._arrow_chain`), every
field is one column: a varint column costs one gather per byte of its longest value (most are
one byte, lengths under 8 KiB two).  Headers, when asked for, are decoded one header index at
a time across the records that have that many, until few records are left.

Nothing trusts a length: every position is checked against its record's end before it is used
(:func:`varints`, :func:`blobs`), so a corrupt record raises :class:`CorruptRecordError`.

    record body:  attributes int8 | timestamp_delta varlong | offset_delta varint |
                  key_length varint | key | value_length varint | value |
                  header_count varint | (key_length varint, key, value_length varint, value)*
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kafka_protocol.exceptions import CorruptRecordError

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
Bools = npt.NDArray[np.bool_]

MAX_VARINT_BYTES = 10
VECTOR_MIN_RECORDS = 8  # fewer records with another header to decode: a Python loop is cheaper


def unchecked_varints(data: U8, pos: I64, limit: I64) -> tuple[I64, I64, Bools]:
    """Zigzag varints at ``pos``: (values, positions after them, ok).  Not ok: the varint is
    longer than 10 bytes or does not end before ``limit`` (its value is then meaningless)."""
    last = len(data) - 1
    b = data[np.minimum(pos, last)]
    more = b >= 0x80
    after = pos + 1
    if not more.any():  # one byte each: most fields of most records
        small = b.astype(np.int64)
        return (small >> 1) ^ -(small & 1), after, after <= limit
    b1 = data[np.minimum(after, last)]
    if not (more & (b1 >= 0x80)).any():  # two bytes at most: lengths under 8 KiB
        raw = (b & 0x7F).astype(np.int64) | np.where(more, b1.astype(np.int64) << 7, 0)
        after += more
        return (raw >> 1) ^ -(raw & 1), after, after <= limit
    wide = (b & 0x7F).astype(np.uint64)
    for shift in range(7, 7 * MAX_VARINT_BYTES, 7):
        todo = np.flatnonzero(more)
        b = data[np.minimum(after[todo], last)]
        wide[todo] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        after[todo] += 1
        more[todo] = b >= 0x80
        if not more.any():
            break
    one = np.uint64(1)
    values = ((wide >> one) ^ (np.uint64(0) - (wide & one))).view(np.int64)
    return values, after, ~more & (after <= limit)


def varints(data: U8, pos: I64, limit: I64, what: str) -> tuple[I64, I64]:
    """:func:`unchecked_varints`, raising :class:`CorruptRecordError` on any bad one."""
    values, after, ok = unchecked_varints(data, pos, limit)
    if not ok.all():
        raise CorruptRecordError(f"record {what} varint is malformed or overruns its record")
    return values, after


def blobs(data: U8, pos: I64, limit: I64, what: str) -> tuple[I64, I64, I64]:
    """Length-prefixed byte strings at ``pos``: (start, length (-1 = null), position after)."""
    length, start = varints(data, pos, limit, what + " length")
    if (length > limit - start).any():
        raise CorruptRecordError(f"record {what} overruns its record")
    return start, length, start + np.maximum(length, 0)


def py_varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """One zigzag varint at ``pos``, in Python: (value, position after), ending by ``end``."""
    raw = shift = 0
    while True:
        if pos >= end or shift >= 7 * MAX_VARINT_BYTES:
            raise CorruptRecordError("record varint is malformed or overruns its record")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos


@dataclass(frozen=True, slots=True)
class RecordFields:
    """Per record: where its fields are (positions in the data buffer; length -1 = null)."""

    end: I64
    timestamp_delta: I64
    offset_delta: I64
    key_start: I64
    key_length: I64
    value_start: I64
    value_length: I64
    header_count: I64
    headers_start: I64

    def take(self, rows: I64) -> RecordFields:
        """The fields of records ``rows`` only."""
        return RecordFields(*(getattr(self, name)[rows] for name in self.__slots__))


def record_fields(data: U8, body: I64, end: I64) -> RecordFields:
    """Decode every record's fields, given where its body starts and ends."""
    ts_delta, pos = varints(data, body + 1, end, "timestamp")  # + 1: attributes, unused
    offset_delta, pos = varints(data, pos, end, "offset delta")
    key_start, key_length, pos = blobs(data, pos, end, "key")
    value_start, value_length, pos = blobs(data, pos, end, "value")
    header_count, pos = varints(data, pos, end, "header count")
    if (header_count < 0).any() or (header_count > end - pos).any():
        raise CorruptRecordError("record claims a negative or impossible number of headers")
    if ((header_count == 0) & (pos != end)).any():
        raise CorruptRecordError("record length disagrees with its fields")
    return RecordFields(
        end,
        ts_delta,
        offset_delta,
        key_start,
        key_length,
        value_start,
        value_length,
        header_count,
        pos,
    )


@dataclass(frozen=True, slots=True)
class HeaderFields:
    """Every record's headers, record by record: ``list_offsets`` into the flat arrays."""

    list_offsets: I32
    key_start: I64
    key_length: I64
    value_start: I64
    value_length: I64


def header_fields(buf: memoryview, data: U8, fields: RecordFields) -> HeaderFields:
    """Decode the headers of every record, in order: header *j* of every record that has one
    in a numpy round, until few records are left (a record with thousands of headers then
    costs a Python loop, not thousands of rounds)."""
    counts = fields.header_count
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    total = int(offsets[-1])
    if total > np.iinfo(np.int32).max:
        raise CorruptRecordError(f"{total} headers do not fit one Arrow list column")
    out = np.empty((4, total), dtype=np.int64)  # key start, key length, value start, length
    pos, end = fields.headers_start.copy(), fields.end
    live = np.flatnonzero(counts > 0)
    index = 0
    while len(live) >= VECTOR_MIN_RECORDS:
        at = offsets[live] + index
        out[0, at], out[1, at], after_key = blobs(data, pos[live], end[live], "header key")
        out[2, at], out[3, at], pos[live] = blobs(data, after_key, end[live], "header value")
        index += 1
        live = live[counts[live] > index]
    for row in live.tolist():
        slots = range(int(offsets[row]) + index, int(offsets[row + 1]))
        pos[row] = _py_headers(buf, int(pos[row]), int(end[row]), out, slots)
    if (pos != end).any():
        raise CorruptRecordError("record length disagrees with its headers")
    if (out[1] < 0).any():
        raise CorruptRecordError("record header with a null key")
    return HeaderFields(offsets.astype(np.int32), out[0], out[1], out[2], out[3])


def _py_headers(buf: memoryview, pos: int, end: int, out: I64, slots: range) -> int:
    """The rest of one record's headers, in Python, into ``out[:, slots]``."""
    for slot in slots:
        for column in (0, 2):  # the key, then the value
            length, pos = py_varint(buf, pos, end)
            if length > end - pos:
                raise CorruptRecordError("record header overruns its record")
            out[column, slot], out[column + 1, slot] = pos, length
            pos += max(length, 0)
    return pos
