"""Size-prefixed frames, request/response headers, and the header-version rules.

A Kafka connection carries frames::

    +----------------+-------------------+------------------------+
    | size: int32 BE | header            | body                   |
    +----------------+-------------------+------------------------+

Request header v1: ``api_key int16, api_version int16, correlation_id int32, client_id`` (an
int16-length nullable string even in flexible versions); v2 adds a tagged-field section; v0 (no
client id) is used only by ControlledShutdown v0.  Response header v0 is the correlation id; v1
adds tagged fields, except that the ApiVersions response always uses v0 (KIP-511) so that a
client can read it before it knows what the broker supports.

Nothing here touches a socket: :class:`FrameReader` takes bytes and hands back frames.
"""

from __future__ import annotations

import importlib
import struct
from dataclasses import dataclass
from functools import cache

from kafka_protocol._codec import Buffer, Chunk, Request, Response, Writer
from kafka_protocol.exceptions import (
    FrameTooLargeError,
    InvalidFrameError,
    UnsupportedVersionError,
)
from kafka_protocol.messages import APIS, RequestHeader, ResponseHeader

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # socket.request.max.bytes
DEFAULT_RECEIVE_BUFFER_BYTES = 256 * 1024
_SIZE = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhi")


@cache
def api_classes(api_key: int) -> tuple[type[Request], type[Response]]:
    """The request and response classes of an api key (UnsupportedVersionError if unknown)."""
    names = APIS.get(api_key)
    if names is None:
        raise UnsupportedVersionError(f"unknown api key {api_key}", api_key)
    package = importlib.import_module("kafka_protocol.messages")
    request, response = (getattr(package, n) for n in names)
    return request, response


def request_header_version(api_key: int, api_version: int) -> int:
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 2 if api_classes(api_key)[0].is_flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if api_classes(api_key)[1].is_flexible(api_version) else 0


@dataclass(frozen=True, slots=True)
class RequestPrefix:
    """The three fields every request header starts with, readable before anything else."""

    api_key: int
    api_version: int
    correlation_id: int


def peek_request(frame: Buffer) -> RequestPrefix:
    if len(frame) < _HEADER_PREFIX.size:
        raise InvalidFrameError(f"request of {len(frame)} bytes is shorter than a header")
    return RequestPrefix(*_HEADER_PREFIX.unpack_from(frame, 0))


def decode_request(
    frame: Buffer, *, allow_trailing_bytes: bool = True
) -> tuple[RequestHeader, Request]:
    """Decode one request frame (without its size prefix).

    Raises :class:`UnsupportedVersionError` (carrying ``correlation_id``) for an api key or
    version we have no codec for, so that the caller can still answer, and
    :class:`InvalidFrameError` for malformed bytes.

    Bytes after the body are ignored by default, as Apache Kafka ignores them: librdkafka 2.x
    sends Metadata v12 for all topics with a 4-byte placeholder left after the body
    (librdkafka issue #5049), and refusing it breaks every confluent-kafka ``list_topics()``.
    """
    prefix = peek_request(frame)
    try:
        request_cls, _ = api_classes(prefix.api_key)
        request_cls._check_version(prefix.api_version)
    except UnsupportedVersionError as exc:
        exc.correlation_id = prefix.correlation_id
        raise
    buf = memoryview(frame)
    header_version = request_header_version(prefix.api_key, prefix.api_version)
    header, pos = RequestHeader.decode_from(buf, 0, header_version)
    body, end = request_cls.decode_from(buf, pos, prefix.api_version)
    if end != len(buf) and not allow_trailing_bytes:
        raise InvalidFrameError(
            f"{len(buf) - end} trailing bytes after {request_cls.NAME} v{prefix.api_version}"
        )
    return header, body


def _framed(w: Writer) -> list[Chunk]:
    chunks = w.chunks()
    return [_SIZE.pack(sum(len(c) for c in chunks)), *chunks]


def encode_request(header: RequestHeader, body: Request) -> list[Chunk]:
    """Size prefix, header and body as chunks (large records blobs are not copied)."""
    assert header.request_api_key == body.API_KEY
    w = Writer()
    header.encode_into(
        w, request_header_version(header.request_api_key, header.request_api_version)
    )
    body.encode_into(w, header.request_api_version)
    return _framed(w)


def encode_response(api_version: int, correlation_id: int, body: Response) -> list[Chunk]:
    assert body.API_KEY is not None
    w = Writer()
    ResponseHeader(correlation_id=correlation_id).encode_into(
        w, response_header_version(body.API_KEY, api_version)
    )
    body.encode_into(w, api_version)
    return _framed(w)


def decode_response(api_key: int, api_version: int, frame: Buffer) -> tuple[int, Response]:
    """Decode a response frame (without size prefix); return (correlation id, body)."""
    _, response_cls = api_classes(api_key)
    buf = memoryview(frame)
    header, pos = ResponseHeader.decode_from(buf, 0, response_header_version(api_key, api_version))
    body = response_cls.decode_from(buf, pos, api_version)
    if body[1] != len(buf):
        raise InvalidFrameError(f"{len(buf) - body[1]} trailing bytes after {response_cls.NAME}")
    return header.correlation_id, body[0]


class FrameReader:
    """Splits a byte stream into frames, refusing any frame above ``max_frame_bytes``.

    Receiving copies nothing it need not (the shape of asyncio's ``BufferedProtocol``): the
    caller ``recv_into``s :meth:`get_buffer` and reports the count with :meth:`buffer_updated`.
    Small frames are cut from one reusable buffer with a single copy; a frame larger than that
    buffer gets an allocation of its exact size (known from its size prefix, which is checked
    against the limit first) and the rest of it is received straight into it.  Frames are never
    written to again once returned, so zero-copy record slices of them stay valid.
    """

    __slots__ = ("_big", "_big_filled", "_big_size", "_buf", "_end", "_start", "max_frame_bytes")

    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        buffer_bytes: int = DEFAULT_RECEIVE_BUFFER_BYTES,
    ) -> None:
        assert buffer_bytes >= 4
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray(buffer_bytes)
        self._start = 0  # first unconsumed byte of _buf
        self._end = 0  # end of received bytes in _buf
        self._big: bytearray | None = None  # a large frame being received in place
        self._big_filled = 0
        self._big_size = 0  # its size; the allocation grows towards it as bytes arrive

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go (non-empty)."""
        if self._big is not None:
            return self._big_target()
        if self._end == len(self._buf):  # compact: move the partial frame to the front
            pending = self._end - self._start
            self._buf[:pending] = self._buf[self._start : self._end]
            self._start, self._end = 0, pending
            if pending == len(self._buf):  # one frame larger than the buffer
                self._start_big_frame()
                assert self._big is not None, "call next_frame() before receiving more"
                return self._big_target()
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._big_filled += nbytes
        else:
            self._end += nbytes

    def feed(self, data: Buffer) -> None:
        """Copy ``data`` in (for callers that already hold the bytes)."""
        view = memoryview(data)
        while view:
            target = self.get_buffer()
            n = min(len(target), len(view))
            target[:n] = view[:n]
            self.buffer_updated(n)
            view = view[n:]

    def pending_bytes(self) -> int:
        big = self._big_filled if self._big is not None else 0
        return self._end - self._start + big

    def next_frame(self) -> bytes | bytearray | None:
        """The next complete frame, or None if more bytes are needed."""
        if self._big is not None:
            if self._big_filled < self._big_size:
                return None
            frame, self._big = self._big, None
            return frame
        available = self._end - self._start
        if available < 4:
            return None
        size = self._checked_size()
        if available < 4 + size:
            self._start_big_frame()
            return None
        begin = self._start + 4
        self._start = begin + size
        if self._start == self._end:
            self._start = self._end = 0
        return bytes(memoryview(self._buf)[begin : begin + size])

    def _checked_size(self) -> int:
        (size,) = _SIZE.unpack_from(self._buf, self._start)
        if size < 0:
            raise InvalidFrameError(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            raise FrameTooLargeError(size, self.max_frame_bytes)
        return int(size)

    def _big_target(self) -> memoryview:
        """Room for the next bytes of a large frame.  The allocation doubles as data arrives
        instead of trusting the size prefix: a peer announcing 100 MiB and sending nothing
        costs one buffer's worth, not 100 MiB."""
        assert self._big is not None
        if self._big_filled == len(self._big):  # a new allocation: the old may be exported
            grown = bytearray(min(self._big_size, 2 * len(self._big)))
            grown[: self._big_filled] = self._big
            self._big = grown
        return memoryview(self._big)[self._big_filled :]

    def _start_big_frame(self) -> None:
        """If the frame at the front cannot fit the buffer, move it to its own allocation."""
        if self._big is not None or self._end - self._start < 4:
            return
        size = self._checked_size()
        if 4 + size <= len(self._buf):
            return
        have = self._end - self._start - 4
        big = bytearray(max(have, min(size, len(self._buf))))
        big[:have] = memoryview(self._buf)[self._start + 4 : self._end]
        self._big, self._big_filled, self._big_size = big, have, size
        self._start = self._end = 0
