"""Compiled loops over RecordBatch v2 records (numba): each record's fields, with its key and
value copied into Arrow buffers in the same pass, and the records' headers.

A record is ``length varint | body``, so finding record *i+1* needs every length before it:
a sequential walk, ~20 ns a record compiled against ~200 ns in Python.  Copying a record's key
and value as soon as its lengths are read, rather than in a second pass, reads each record from
memory once: a separate walk stalls on a cache miss for every record of 1 KiB and more.  Every
kernel checks each length against its record's (and section's) end before using it and returns
an error code, never reads outside ``data`` or writes outside its outputs (raising ValueError
for an output without room); :func:`check` turns the code into
:class:`~kafka_protocol.exceptions.CorruptRecordError`.

    record body:  attributes int8 | timestamp_delta varlong | offset_delta varint |
                  key_length varint | key | value_length varint | value |
                  header_count varint | (key_length varint, key, value_length varint, value)*

Compiled on first use (~1.5 s) and cached beside this file, or in the user's cache directory
if this one is read-only, or in ``NUMBA_CACHE_DIR``: later processes load them (~0.8 s).  With
no writable directory at all, every process compiles them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from kafka_protocol.exceptions import CorruptRecordError

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

# Columns of decode_records' ``meta``: one row per batch's records section.
SECTION_START, SECTION_END, COUNT, BASE_OFFSET, BASE_TIMESTAMP, LOG_APPEND = range(6)
META_FIELDS = 6

# Rows of decode_records' output (one column per kept record: each field is one contiguous
# array).  TIMESTAMP_US: Arrow's microseconds; TIMESTAMP_TYPE: 0 CreateTime, 1 LogAppendTime.
OFFSET, TIMESTAMP_US, TIMESTAMP_TYPE, KEY_LENGTH, VALUE_LENGTH = 0, 1, 2, 3, 4
HEADER_COUNT, HEADERS_START, END = 5, 6, 7
RECORD_FIELDS = 8

# Rows of scan_headers' output, one column per header.
HKEY_START, HKEY_LENGTH, HVALUE_START, HVALUE_LENGTH = 0, 1, 2, 3
HEADER_FIELDS = 4

OK = 0
ERRORS = (
    "",
    "record length varint is malformed or overruns its batch",
    "record length is impossible for its batch",
    "record varint is malformed or overruns its record",
    "record key or value overruns its record",
    "record claims a negative or impossible number of headers",
    "record length disagrees with its fields",
    "bytes after the last record of a batch",
    "record header overruns its record",
    "record header with a null key",
    "record length disagrees with its headers",
)
(
    _BAD_LENGTH_VARINT,
    _BAD_LENGTH,
    _BAD_VARINT,
    _BLOB_OVERRUN,
    _BAD_HEADER_COUNT,
    _FIELDS_MISMATCH,
    _TRAILING_BYTES,
    _HEADER_OVERRUN,
    _NULL_HEADER_KEY,
    _HEADERS_MISMATCH,
) = range(1, len(ERRORS))

MAX_VARINT_BYTES = 10
MIN_RECORD_BYTES = 7  # length, attributes, timestamp, offset, key, value, header count
_LOW_63 = (1 << 63) - 1  # raw >> 1 of a 64-bit varint, as an unsigned shift


def _jit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """numba's ``njit``, cached on disk where a directory is writable."""

    def compile_(fn: Callable[..., Any]) -> Any:
        try:
            return njit(cache=True, nogil=True, **options)(fn)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return njit(nogil=True, **options)(fn)

    return compile_


def check(code: int) -> None:
    """Raise :class:`CorruptRecordError` for a kernel's error code."""
    if code != OK:
        raise CorruptRecordError(ERRORS[code])


# Helpers take scalars only: numba increfs and decrefs every array passed to a function it
# calls (atomics through a pointer, ~10 ns each, several times a record), so the kernels hand
# the varint reader their buffer's address instead.


@intrinsic
def _byte(typingctx: Any, address: Any, pos: Any) -> Any:
    """The byte at ``address + pos``, ``address`` being a live array's ``ctypes.data``."""
    sig = types.int64(types.intp, types.intp)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        at = builder.inttoptr(builder.add(args[0], args[1]), ir.IntType(8).as_pointer())
        return builder.zext(builder.load(at), ir.IntType(64))

    return sig, codegen


@_jit()
def _varint(address: int, pos: int, limit: int) -> tuple[int, int]:
    """The zigzag varint at ``pos``: (value, position after it), or (0, -1) if it is longer
    than 10 bytes or does not end before ``limit``."""
    raw = 0
    for shift in range(0, 7 * MAX_VARINT_BYTES, 7):
        if pos >= limit:
            break
        b = _byte(address, pos)
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return ((raw >> 1) & _LOW_63) ^ -(raw & 1), pos
    return 0, -1


@intrinsic
def _memcpy(typingctx: Any, dst: Any, dst_pos: Any, src: Any, src_pos: Any, n: Any) -> Any:
    """``dst[dst_pos:dst_pos + n] = src[src_pos:src_pos + n]`` for uint8 arrays, as one
    ``llvm.memcpy`` (numba's slice assignment copies ~6x slower; a byte loop is not
    vectorized, as the arrays may alias)."""
    sig = types.void(dst, dst_pos, src, src_pos, n)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        out = context.make_array(signature.args[0])(context, builder, args[0])
        into = context.make_array(signature.args[2])(context, builder, args[2])
        to = builder.gep(out.data, [args[1]])
        source = builder.gep(into.data, [args[3]])
        cgutils.raw_memcpy(builder, to, source, args[4], 1)
        return context.get_dummy_value()

    return sig, codegen


@_jit()
def decode_records(
    data: U8,
    meta: I64,
    first: int,
    last: int,
    start: int,
    end: int,
    out: I64,
    key_offsets: I32,
    key_payload: U8,
    value_offsets: I32,
    value_payload: U8,
    cursor: I64,
) -> int:
    """Decode the records of sections ``first`` to ``last - 1`` of ``meta`` (columns above),
    each filling ``data[meta[s, SECTION_START]:meta[s, SECTION_END]]`` with exactly
    ``meta[s, COUNT]`` records, keeping those with offsets in ``[start, end)``.

    A kept record's fields go to ``out[field, row]`` and its key and value are copied at once,
    while its bytes are in the cache, after the rows before it: into ``key_payload`` and
    ``value_payload``, with Arrow ``binary`` offsets in ``key_offsets`` and ``value_offsets``
    (a negative length, a null, copies nothing).  ``cursor`` holds (rows, key bytes, value
    bytes) so far and is advanced, so that one group's outputs fill over several calls."""
    address = data.ctypes.data
    row, key_pos, value_pos = cursor[0], cursor[1], cursor[2]
    for s in range(first, last):
        pos = meta[s, SECTION_START]
        stop = meta[s, SECTION_END]
        count = meta[s, COUNT]
        if pos < 0 or pos > stop or stop > data.shape[0]:  # read through a raw address below
            raise ValueError("a records section lies outside the buffer")
        if count < 0 or row + count > out.shape[1] or row + count >= key_offsets.shape[0]:
            raise ValueError("out has no room for every record")
        base_offset = meta[s, BASE_OFFSET]
        base_time = meta[s, BASE_TIMESTAMP]
        log_append = meta[s, LOG_APPEND] != 0
        for _ in range(count):
            # The length, then the body's varints: field 0 the length, 1 the timestamp delta,
            # 2 the offset delta, 3 and 4 the key and value lengths (their bytes follow),
            # 5 the header count.
            limit = stop
            p = pos
            offset = -1
            for f in range(6):
                value, p = _varint(address, p, limit)
                if p < 0:
                    return _BAD_LENGTH_VARINT if f == 0 else _BAD_VARINT
                if f == 0:
                    if value < 1 or value > limit - p:
                        return _BAD_LENGTH
                    limit = p + value
                    p += 1  # the attributes, unused
                elif f == 1:
                    # LogAppendTime: the batch's max timestamp (the broker's append time).
                    stamp = base_time if log_append else base_time + value
                    out[TIMESTAMP_US, row] = stamp * 1000
                    out[TIMESTAMP_TYPE, row] = 1 if log_append else 0
                elif f == 2:
                    offset = base_offset + value
                    out[OFFSET, row] = offset
                elif f == 5:
                    if value < 0 or value > limit - p:
                        return _BAD_HEADER_COUNT
                    if value == 0 and p != limit:
                        return _FIELDS_MISMATCH
                    out[HEADER_COUNT, row] = value
                    out[HEADERS_START, row] = p
                else:  # f 3, 4: a key or value of ``value`` bytes (negative: null)
                    if value > limit - p:  # any negative length is a null, as in Kafka
                        return _BLOB_OVERRUN
                    out[KEY_LENGTH if f == 3 else VALUE_LENGTH, row] = value
                    if start <= offset < end and value > 0:
                        if f == 3:
                            if key_pos + value > key_payload.shape[0]:
                                raise ValueError("key_payload has no room")
                            _memcpy(key_payload, key_pos, data, p, value)
                            key_pos += value
                        else:
                            if value_pos + value > value_payload.shape[0]:
                                raise ValueError("value_payload has no room")
                            _memcpy(value_payload, value_pos, data, p, value)
                            value_pos += value
                    p += max(value, 0)
            out[END, row] = limit
            pos = limit
            if start <= offset < end:
                row += 1
                key_offsets[row] = key_pos
                value_offsets[row] = value_pos
        if pos != stop:
            return _TRAILING_BYTES
    cursor[0], cursor[1], cursor[2] = row, key_pos, value_pos
    return OK


@_jit()
def scan_headers(data: U8, start: I64, end: I64, list_offsets: I64, out: I64) -> int:
    """The headers of each record ``r`` (``list_offsets[r + 1] - list_offsets[r]`` of them
    between ``start[r]`` and ``end[r]``) into ``out[field, header]`` (fields above)."""
    address = data.ctypes.data
    for r in range(start.shape[0]):
        p = start[r]
        limit = end[r]
        for h in range(list_offsets[r], list_offsets[r + 1]):
            for f in range(2):  # the key, then the value: a length, then its bytes
                length, p = _varint(address, p, limit)
                if p < 0:
                    return _BAD_VARINT
                if length > limit - p:
                    return _HEADER_OVERRUN
                if f == 0 and length < 0:
                    return _NULL_HEADER_KEY
                out[2 * f, h] = p
                out[2 * f + 1, h] = length
                p += max(length, 0)
        if p != limit:
            return _HEADERS_MISMATCH
    return OK


@_jit()
def gather(data: U8, start: I64, length: I64, offsets: I32, payload: U8) -> None:
    """Copy ``data[start[i]:start[i] + length[i]]`` (nothing for a null, a negative length) one
    after another into ``payload``, with Arrow ``binary`` offsets into ``offsets``."""
    pos = 0
    offsets[0] = 0
    for i in range(start.shape[0]):
        n = length[i]
        if n > 0:
            _memcpy(payload, pos, data, start[i], n)
            pos += n
        offsets[i + 1] = pos


__all__ = ["check", "decode_records", "gather", "scan_headers"]
