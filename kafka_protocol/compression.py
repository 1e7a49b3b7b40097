"""The five RecordBatch codecs, through ``cramjam``, with explicit fast levels.

- gzip: a gzip member (Kafka's GZIPOutputStream); level 1 by default.
- snappy: Java, kafka-python and aiokafka send *xerial* framing (a magic header, then
  ``int32 length + raw block`` pairs); librdkafka sends one *raw* block.  Both decompress; we
  write xerial, which every client reads.
- lz4: the LZ4 *frame* format with independent blocks and no content checksum (what Kafka's
  KafkaLZ4BlockOutputStream writes and what its reader requires); level 0 (the fast
  compressor, not cramjam's default HC level).
- zstd: a zstd frame; level 3 (cramjam's default is 11, far slower).

Decompression output is bounded by ``max_bytes`` so that a small hostile batch cannot expand
without limit (checked as it decompresses, not after).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from typing import TypeAlias

import cramjam

from kafka_protocol._codec import Buffer
from kafka_protocol.exceptions import CompressionError


class Compression(enum.IntEnum):
    """The low three bits of a RecordBatch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> Compression:
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(f"unknown compression {name!r}; use one of {_names()}") from None


def _names() -> str:
    return ", ".join(c.name.lower() for c in Compression)


DEFAULT_LEVELS = {Compression.GZIP: 1, Compression.LZ4: 0, Compression.ZSTD: 3}
DEFAULT_MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_BYTES = 32 * 1024
_I32 = struct.Struct(">i")
Decompressed: TypeAlias = bytes | memoryview | cramjam.Buffer  # sized buffers


def compress(codec: Compression, data: Buffer, level: int | None = None) -> bytes:
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=_level(codec, level)))
    if codec is Compression.SNAPPY:
        return _xerial_compress(memoryview(data))
    if codec is Compression.LZ4:
        c = cramjam.lz4.Compressor(
            level=_level(codec, level), content_checksum=False, block_linked=False
        )
        c.compress(data)
        return bytes(c.finish())
    if codec is Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=_level(codec, level)))
    raise CompressionError(f"unknown compression codec {codec}")


def _level(codec: Compression, level: int | None) -> int:
    return DEFAULT_LEVELS[codec] if level is None else level


def _xerial_compress(data: memoryview) -> bytes:
    out = bytearray(_XERIAL_HEADER)
    for start in range(0, len(data), _XERIAL_BLOCK_BYTES):
        block = cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK_BYTES])
        out += _I32.pack(len(block))
        out += block
    return bytes(out)


def decompress(codec: int, data: Buffer, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress one batch's records section; CompressionError on any failure."""
    return bytes(decompress_buffer(codec, data, max_bytes))


def decompress_buffer(
    codec: int, data: Buffer, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Decompressed:
    """As :func:`decompress`, without copying cramjam's output into ``bytes`` (for a reader
    that only walks it, such as the record validator)."""
    try:
        out = _decompress(codec, memoryview(data), max_bytes)
    except CompressionError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError and ValueError
        raise CompressionError(f"{_codec_name(codec)} data does not decompress: {exc}") from None
    if len(out) > max_bytes:
        raise CompressionError(f"batch decompresses to more than {max_bytes} bytes")
    return out


def _codec_name(codec: int) -> str:
    try:
        return Compression(codec).name.lower()
    except ValueError:
        return f"codec {codec}"


def _decompress(codec: int, data: memoryview, max_bytes: int) -> Decompressed:
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.SNAPPY:
        if data[: len(XERIAL_MAGIC)] == XERIAL_MAGIC:
            return _xerial_decompress(data, max_bytes)
        _check_raw_snappy_len(data, max_bytes)
        return cramjam.snappy.decompress_raw(data)
    into = _DECOMPRESS_INTO.get(codec)
    if into is None:
        raise CompressionError(f"unknown compression codec {codec}")
    return _bounded(into, data, max_bytes)


# gzip, lz4 and zstd frames need not say how large they decompress (Kafka's writers do not),
# and cramjam's ``decompress`` grows its output without limit: 1 MiB of gzip can claim 1 GiB.
# So they decompress into a buffer of a guessed size that grows (x4) up to ``max_bytes``; a
# buffer too small is cramjam's "failed to write whole buffer" (std::io::ErrorKind::WriteZero),
# any other error is corrupt data.  Decompressing into a buffer is also faster than letting
# cramjam grow its own.
_DECOMPRESS_INTO: dict[int, Callable[[memoryview, bytearray], int]] = {
    Compression.GZIP: cramjam.gzip.decompress_into,
    Compression.LZ4: cramjam.lz4.decompress_into,
    Compression.ZSTD: cramjam.zstd.decompress_into,
}
_FIRST_GUESS_RATIO = 4
_MIN_GUESS_BYTES = 64 * 1024
_BUFFER_TOO_SMALL = "failed to write whole buffer"


def _bounded(
    into: Callable[[memoryview, bytearray], int], data: memoryview, max_bytes: int
) -> memoryview:
    size = min(max_bytes + 1, max(_MIN_GUESS_BYTES, _FIRST_GUESS_RATIO * len(data)))
    while True:
        out = bytearray(size)
        try:
            return memoryview(out)[: into(data, out)]
        except cramjam.DecompressionError as exc:
            if _BUFFER_TOO_SMALL not in str(exc):
                raise
            if size > max_bytes:
                raise CompressionError(
                    f"batch decompresses to more than {max_bytes} bytes"
                ) from None
            size = min(max_bytes + 1, size * _FIRST_GUESS_RATIO)


def _check_raw_snappy_len(block: memoryview, max_bytes: int) -> None:
    if cramjam.snappy.decompress_raw_len(block) > max_bytes:
        raise CompressionError(f"snappy block claims more than {max_bytes} bytes")


def _xerial_decompress(data: memoryview, max_bytes: int) -> bytes:
    if len(data) < len(_XERIAL_HEADER):
        raise CompressionError("xerial snappy header is truncated")
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        if pos + 4 > len(data):
            raise CompressionError("xerial snappy block length is truncated")
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CompressionError(f"xerial snappy block of {n} bytes overruns the batch")
        block = data[pos : pos + n]
        _check_raw_snappy_len(block, max_bytes - len(out))
        out += cramjam.snappy.decompress_raw(block)
        pos += n
    return bytes(out)
