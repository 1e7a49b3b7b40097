"""Primitives the generated codecs call: readers, the chunked writer, and the message base.

Decoders are plain functions ``(buf, pos) -> (value, pos)`` over a ``memoryview`` of exactly one
message body.  They never trust a length: every string, bytes, records field and array count is
checked against the bytes that remain before anything is allocated, so a hostile frame costs at
most its own size.  Running off the end shows up as ``IndexError``/``struct.error``, which
:meth:`Message.decode` turns into :class:`InvalidFrameError`.

Encoders append to a :class:`Writer`.  Small fields go into one ``bytearray``; a ``records`` blob
of at least ``ZERO_COPY_MIN_BYTES`` becomes a chunk of its own, so encoding a 1 MiB Produce or
Fetch never copies the batch (write the chunks with ``writelines``/``sendmsg``).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeAlias

from kafka_protocol.exceptions import (
    InvalidFrameError,
    LocalProtocolError,
    UnsupportedVersionError,
)
from kafka_protocol.varint import encode_uvarint, read_uvarint


@dataclass(frozen=True, slots=True)
class FileRegion:
    """Bytes of an open file that the caller sends itself (``os.sendfile``).

    A records field may hold one; :meth:`Message.encode_chunks` passes it through as a chunk
    and the codec never reads it, so Fetch responses are served from segment files without
    copying through Python.  The fd belongs to whoever sends the chunks (they close it).
    """

    fd: int
    offset: int
    size: int

    def __len__(self) -> int:
        return self.size


Buffer: TypeAlias = bytes | bytearray | memoryview
Chunk: TypeAlias = bytes | bytearray | memoryview | FileRegion
ZERO_COPY_MIN_BYTES = 4096
ZERO_UUID = uuid.UUID(int=0)

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
F64 = struct.Struct(">d")
BOOL = struct.Struct(">?")
_I16_unpack = I16.unpack_from
_I32_unpack = I32.unpack_from


# --- readers ----------------------------------------------------------------------------------


def _take(buf: memoryview, pos: int, n: int, what: str) -> int:
    end = pos + n
    if end > len(buf):
        raise InvalidFrameError(f"{what} of {n} bytes overruns the frame at offset {pos}")
    return end


def _null(what: str) -> InvalidFrameError:
    return InvalidFrameError(f"null {what} in a non-nullable field")


def read_string(buf: memoryview, pos: int) -> tuple[Any, int]:
    (n,) = _I16_unpack(buf, pos)
    if n < 0:
        raise _null("string")
    end = _take(buf, pos + 2, n, "string")
    return str(buf[pos + 2 : end], "utf-8"), end


def read_nullable_string(buf: memoryview, pos: int) -> tuple[Any, int]:
    (n,) = _I16_unpack(buf, pos)
    if n < 0:
        return None, pos + 2
    end = _take(buf, pos + 2, n, "string")
    return str(buf[pos + 2 : end], "utf-8"), end


def read_compact_string(buf: memoryview, pos: int) -> tuple[Any, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise _null("string")
    end = _take(buf, pos, n - 1, "string")
    return str(buf[pos:end], "utf-8"), end


def read_compact_nullable_string(buf: memoryview, pos: int) -> tuple[Any, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = _take(buf, pos, n - 1, "string")
    return str(buf[pos:end], "utf-8"), end


def read_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    (n,) = _I32_unpack(buf, pos)
    if n < 0:
        raise _null("bytes")
    end = _take(buf, pos + 4, n, "bytes")
    return bytes(buf[pos + 4 : end]), end


def read_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    (n,) = _I32_unpack(buf, pos)
    if n < 0:
        return None, pos + 4
    end = _take(buf, pos + 4, n, "bytes")
    return bytes(buf[pos + 4 : end]), end


def read_compact_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise _null("bytes")
    end = _take(buf, pos, n - 1, "bytes")
    return bytes(buf[pos:end]), end


def read_compact_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = _take(buf, pos, n - 1, "bytes")
    return bytes(buf[pos:end]), end


# Records come out as zero-copy slices of the frame.
def read_records(buf: memoryview, pos: int) -> tuple[memoryview, int]:
    (n,) = _I32_unpack(buf, pos)
    if n < 0:
        raise _null("records")
    end = _take(buf, pos + 4, n, "records")
    return buf[pos + 4 : end], end


def read_nullable_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    (n,) = _I32_unpack(buf, pos)
    if n < 0:
        return None, pos + 4
    end = _take(buf, pos + 4, n, "records")
    return buf[pos + 4 : end], end


def read_compact_records(buf: memoryview, pos: int) -> tuple[memoryview, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise _null("records")
    end = _take(buf, pos, n - 1, "records")
    return buf[pos:end], end


def read_compact_nullable_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = _take(buf, pos, n - 1, "records")
    return buf[pos:end], end


def read_uuid(buf: memoryview, pos: int) -> tuple[uuid.UUID, int]:
    end = _take(buf, pos, 16, "uuid")
    value = int.from_bytes(buf[pos:end], "big")
    return (uuid.UUID(int=value) if value else ZERO_UUID), end


def read_array_len(buf: memoryview, pos: int) -> tuple[int, int]:
    """Classic array length; -1 (null) is returned as is for the caller to judge."""
    (n,) = _I32_unpack(buf, pos)
    pos += 4
    if n > len(buf) - pos:
        raise InvalidFrameError(f"array of {n} elements cannot fit in the frame")
    return n, pos


def read_compact_array_len(buf: memoryview, pos: int) -> tuple[int, int]:
    """Compact array length minus one: -1 means null."""
    n, pos = read_uvarint(buf, pos)
    if n - 1 > len(buf) - pos:
        raise InvalidFrameError(f"array of {n - 1} elements cannot fit in the frame")
    return n - 1, pos


def null_array() -> InvalidFrameError:
    return _null("array")


def read_struct_marker(buf: memoryview, pos: int) -> tuple[bool, int]:
    """Nullable struct fields carry an int8: -1 for null, 1 for present."""
    (b,) = I8.unpack_from(buf, pos)
    return b >= 0, pos + 1


def read_tag_header(buf: memoryview, pos: int) -> tuple[int, int, int]:
    """One tagged field's (tag, end of its value, start of its value)."""
    tag, pos = read_uvarint(buf, pos)
    size, pos = read_uvarint(buf, pos)
    return tag, _take(buf, pos, size, "tagged field"), pos


def read_tag_count(buf: memoryview, pos: int) -> tuple[int, int]:
    n, pos = read_uvarint(buf, pos)
    if n > len(buf) - pos:
        raise InvalidFrameError(f"{n} tagged fields cannot fit in the frame")
    return n, pos


def check_tag_end(pos: int, end: int, tag: int) -> None:
    if pos != end:
        raise InvalidFrameError(f"tagged field {tag} declared {end - pos} more bytes than it used")


def unpack_array(fmt: str, buf: memoryview, pos: int, n: int) -> tuple[list[Any], int]:
    s = struct.Struct(f">{n}{fmt}")
    return list(s.unpack_from(buf, pos)), pos + s.size


# --- writer -----------------------------------------------------------------------------------


def _uvarint(value: int) -> bytes:
    if value < 0 or value > 0xFFFFFFFF:
        raise LocalProtocolError(f"{value} does not fit an unsigned varint")
    return encode_uvarint(value)


class Writer:
    """Accumulates an encoded message as small bytes plus large zero-copy chunks."""

    __slots__ = ("_chunks", "buf")

    def __init__(self) -> None:
        self.buf = bytearray()
        self._chunks: list[Chunk] = []

    def chunks(self) -> list[Chunk]:
        if self.buf:
            self._chunks.append(bytes(self.buf))
            self.buf.clear()
        return self._chunks

    def getvalue(self) -> bytes:
        if not self._chunks:
            return bytes(self.buf)
        chunks = self.chunks()
        if any(isinstance(c, FileRegion) for c in chunks):
            raise LocalProtocolError("a FileRegion can only be sent with encode_chunks()")
        return b"".join(chunks)  # type: ignore[arg-type]

    def size(self) -> int:
        return len(self.buf) + sum(len(c) for c in self._chunks)

    def uvarint(self, value: int) -> None:
        self.buf += _uvarint(value)

    def string(self, s: str | None) -> None:
        if s is None:
            raise LocalProtocolError("null string in a non-nullable field")
        data = s.encode()
        self.buf += I16.pack(len(data))
        self.buf += data

    def nullable_string(self, s: str | None) -> None:
        if s is None:
            self.buf += b"\xff\xff"
        else:
            self.string(s)

    def compact_string(self, s: str | None) -> None:
        if s is None:
            raise LocalProtocolError("null string in a non-nullable field")
        data = s.encode()
        self.buf += _uvarint(len(data) + 1)
        self.buf += data

    def compact_nullable_string(self, s: str | None) -> None:
        if s is None:
            self.buf += b"\x00"
        else:
            self.compact_string(s)

    def bytes_(self, b: Chunk | None) -> None:
        if b is None:
            raise LocalProtocolError("null bytes in a non-nullable field")
        self.buf += I32.pack(len(b))
        self._blob(b)

    def nullable_bytes(self, b: Chunk | None) -> None:
        if b is None:
            self.buf += b"\xff\xff\xff\xff"
        else:
            self.bytes_(b)

    def compact_bytes(self, b: Chunk | None) -> None:
        if b is None:
            raise LocalProtocolError("null bytes in a non-nullable field")
        self.buf += _uvarint(len(b) + 1)
        self._blob(b)

    def compact_nullable_bytes(self, b: Chunk | None) -> None:
        if b is None:
            self.buf += b"\x00"
        else:
            self.compact_bytes(b)

    def _blob(self, b: Chunk) -> None:
        if isinstance(b, FileRegion) or len(b) >= ZERO_COPY_MIN_BYTES:
            self.chunks()
            self._chunks.append(b)
        else:
            self.buf += b

    def uuid(self, u: uuid.UUID) -> None:
        self.buf += u.bytes

    def array_len(self, items: list[Any] | None) -> None:
        if items is None:
            raise LocalProtocolError("null array in a non-nullable field")
        self.buf += I32.pack(len(items))

    def nullable_array_len(self, items: list[Any] | None) -> None:
        self.buf += I32.pack(-1 if items is None else len(items))

    def compact_array_len(self, items: list[Any] | None) -> None:
        if items is None:
            raise LocalProtocolError("null array in a non-nullable field")
        self.buf += _uvarint(len(items) + 1)

    def compact_nullable_array_len(self, items: list[Any] | None) -> None:
        self.buf += b"\x00" if items is None else _uvarint(len(items) + 1)

    def tagged(self, tags: list[tuple[int, Writer]]) -> None:
        """Tagged-field section; ``tags`` are (tag, encoded value) in ascending tag order."""
        self.buf += _uvarint(len(tags))
        for tag, sub in tags:
            self.buf += _uvarint(tag)
            self.buf += _uvarint(sub.size())
            self.buf += sub.getvalue()


def absent(name: str, version: int) -> LocalProtocolError:
    return LocalProtocolError(f"field {name!r} is set but does not exist in version {version}")


def null_struct() -> LocalProtocolError:
    return LocalProtocolError("null struct in a non-nullable field")


# --- message base -----------------------------------------------------------------------------

Decoder: TypeAlias = Callable[[memoryview, int], tuple[Any, int]]
Encoder: TypeAlias = Callable[[Writer, Any], None]


class Message:
    """A spec-defined message: a request, response, header, or data/metadata record."""

    __slots__ = ()
    NAME: ClassVar[str]
    API_KEY: ClassVar[int | None]
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    FLEXIBLE_MIN_VERSION: ClassVar[int | None]  # None: never flexible
    _DECODERS: ClassVar[tuple[Decoder, ...]]
    _ENCODERS: ClassVar[tuple[Encoder, ...]]

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return cls.FLEXIBLE_MIN_VERSION is not None and version >= cls.FLEXIBLE_MIN_VERSION

    @classmethod
    def _check_version(cls, version: int) -> None:
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise UnsupportedVersionError(
                f"{cls.NAME} v{version} is outside {cls.MIN_VERSION}-{cls.MAX_VERSION}",
                -1 if cls.API_KEY is None else cls.API_KEY,
                version,
            )

    @classmethod
    def decode(cls, data: Buffer, version: int) -> Self:
        """Decode exactly one message body; trailing bytes are an error."""
        obj, pos = cls.decode_from(memoryview(data), 0, version)
        if pos != len(data):
            raise InvalidFrameError(f"{len(data) - pos} trailing bytes after {cls.NAME} v{version}")
        return obj

    @classmethod
    def decode_from(cls, buf: memoryview, pos: int, version: int) -> tuple[Self, int]:
        """Decode one message starting at ``pos``; return it and the position after it."""
        cls._check_version(version)
        if buf.format != "B" or buf.ndim != 1:
            buf = buf.cast("B")
        try:
            obj, end = cls._DECODERS[version - cls.MIN_VERSION](buf, pos)
        except (IndexError, struct.error) as exc:
            raise InvalidFrameError(f"{cls.NAME} v{version} is truncated: {exc}") from None
        except UnicodeDecodeError as exc:
            raise InvalidFrameError(f"{cls.NAME} v{version} has invalid UTF-8: {exc}") from None
        assert isinstance(obj, cls)
        return obj, end

    def encode_into(self, w: Writer, version: int) -> None:
        self._check_version(version)
        try:
            self._ENCODERS[version - self.MIN_VERSION](w, self)
        except (struct.error, OverflowError) as exc:
            raise LocalProtocolError(f"{self.NAME} v{version}: {exc}") from None
        except (TypeError, AttributeError) as exc:
            raise LocalProtocolError(f"{self.NAME} v{version}: bad field value: {exc}") from None

    def encode(self, version: int) -> bytes:
        w = Writer()
        self.encode_into(w, version)
        return w.getvalue()

    def encode_chunks(self, version: int) -> list[Chunk]:
        """The encoding as a list of buffers; large records blobs are not copied."""
        w = Writer()
        self.encode_into(w, version)
        return w.chunks()


class Request(Message):
    __slots__ = ()
    KAFKA4_MIN_VERSION: ClassVar[int]
    LATEST_VERSION_UNSTABLE: ClassVar[bool]


class Response(Message):
    __slots__ = ()
    KAFKA4_MIN_VERSION: ClassVar[int]
    LATEST_VERSION_UNSTABLE: ClassVar[bool]


class Header(Message):
    __slots__ = ()


class Data(Message):
    """Records stored in logs: metadata records, ``__consumer_offsets`` keys and values."""

    __slots__ = ()


def skip_tagged_fields(buf: memoryview, pos: int) -> int:
    """Skip a tagged-field section whose tags are all unknown at this version."""
    n, pos = read_tag_count(buf, pos)
    for _ in range(n):
        _tag, pos, _start = read_tag_header(buf, pos)
    return pos
