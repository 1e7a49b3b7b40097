"""Kafka's variable-length integers, written once for every package.

Two encodings share one base-128 layout (seven bits a byte, least significant group first, the
high bit set on every byte but the last):

* the *unsigned varint* of the flexible-version wire format (compact lengths, tagged fields)
  and of the metadata record frame: a non-negative int32, at most 5 bytes;
* the *varint/varlong* of RecordBatch v2 records: a signed 64-bit value, zigzag-mapped
  (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...) before the base-128 step, at most 10 bytes.

Readers take the exception class to raise, so a truncated frame is an ``InvalidFrameError``
to the request parser and a ``CorruptRecordError`` to the record decoder, with one
implementation behind both.  The record scanners of the log cleaner and the Spark kernels
inline the one- and two-byte cases on their hot loops and fall back to :func:`read_raw_varlong`.
"""

from __future__ import annotations

from typing import Final

from kafka_protocol.exceptions import CorruptRecordError, InvalidFrameError

MAX_UVARINT_BYTES: Final = 5
MAX_VARLONG_BYTES: Final = 10
_UINT32_MAX: Final = 0xFFFFFFFF

ReadBuffer = bytes | bytearray | memoryview


def encode_uvarint(value: int) -> bytes:
    """Base-128 bytes of a non-negative integer (the caller bounds it)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def zigzag(value: int) -> int:
    """The zigzag mapping of a signed 64-bit value."""
    return (value << 1) ^ (value >> 63)


def encode_varint(value: int) -> bytes:
    """A record varint/varlong: ``value`` zigzag-mapped, then base-128."""
    return encode_uvarint(zigzag(value))


def read_uvarint(
    buf: ReadBuffer,
    pos: int,
    error: type[Exception] = InvalidFrameError,
    what: str = "unsigned varint",
) -> tuple[int, int]:
    """The unsigned int32 varint at ``pos``: ``(value, next position)``."""
    try:
        b = buf[pos]
        if b < 0x80:  # the common case: one byte
            return b, pos + 1
        value, shift = b & 0x7F, 7
        for i in range(1, MAX_UVARINT_BYTES):
            b = buf[pos + i]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                if value > _UINT32_MAX:
                    raise error(f"{what} overflows 32 bits")
                return value, pos + i + 1
            shift += 7
    except IndexError:
        raise error(f"{what} is truncated at offset {pos}") from None
    raise error(f"{what} longer than {MAX_UVARINT_BYTES} bytes")


def read_raw_varlong(
    buf: ReadBuffer, pos: int, error: type[Exception] = CorruptRecordError
) -> tuple[int, int]:
    """The base-128 value at ``pos`` before zigzag decoding: ``(raw, next position)``."""
    raw = shift = 0
    size = len(buf)
    while True:
        if pos >= size:
            raise error("record varint runs past the batch")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return raw, pos
        shift += 7
        if shift >= 7 * MAX_VARLONG_BYTES:
            raise error(f"record varint longer than {MAX_VARLONG_BYTES} bytes")


def read_varlong(
    buf: ReadBuffer, pos: int, error: type[Exception] = CorruptRecordError
) -> tuple[int, int]:
    """The record varint/varlong at ``pos``: ``(value, next position)``."""
    raw, pos = read_raw_varlong(buf, pos, error)
    return (raw >> 1) ^ -(raw & 1), pos
