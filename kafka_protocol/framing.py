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
from collections import deque
from dataclasses import dataclass
from functools import cache

from kafka_protocol._codec import Buffer, Chunk, Request, Response, Writer
from kafka_protocol.exceptions import (
    FrameTooLargeError,
    InvalidFrameError,
    ProtocolError,
    UnsupportedVersionError,
)
from kafka_protocol.messages import APIS, RequestHeader, ResponseHeader

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # socket.request.max.bytes
DEFAULT_RECEIVE_BUFFER_BYTES = 256 * 1024  # one receive's worth; shared by a listener's readers
# A frame's first allocation is what its first piece proves, not what its size prefix claims:
# FRAME_PROOF_FACTOR times the bytes of it received, at least FRAME_FIRST_BYTES, at most
# FRAME_TRUST_BYTES (producers' default max.request.size) and the frame's size.  A burst of
# 256 KiB gets a 1 MiB request its exact allocation at once; a peer that sends a size prefix
# and stalls holds 16 KiB, not 1 MiB, of the listener's queued.max.request.bytes.
FRAME_FIRST_BYTES = 16 * 1024
FRAME_PROOF_FACTOR = 4
FRAME_TRUST_BYTES = 1024 * 1024
DIRECT_RECEIVE_BYTES = 64 * 1024  # this much of a frame still to come: receive it in place
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

    Memory is held on demand, so that an idle connection costs almost nothing:

    * Bytes are received into a *scratch* buffer that many readers may share (a listener's
      connections all run on one thread).  :meth:`buffer_updated` cuts every complete frame out
      of it with one copy and moves the start of an incomplete frame to that frame's own
      allocation, so nothing refers to the scratch once it returns.  Without a shared scratch a
      reader allocates its own on first use.
    * A frame being received gets a first allocation in proportion to the bytes of it that
      arrived with its size prefix (which is checked against the limit first), from
      :data:`FRAME_FIRST_BYTES` up to its exact size or :data:`FRAME_TRUST_BYTES`; it doubles
      as more bytes arrive, so a peer announcing 100 MiB and sending nothing costs 16 KiB.
      While :data:`DIRECT_RECEIVE_BYTES` or more of a frame are still to come and its
      allocation has that much room, :meth:`get_buffer` hands out the frame's own allocation,
      so the bulk of a large request is received in place, never copied.
    * Complete frames wait in a queue until :meth:`next_frame` takes them.  Frames are never
      written to again once complete, so zero-copy record slices of them stay valid.

    A size prefix out of bounds is reported by :meth:`next_frame` once the frames before it have
    been taken; the bytes after it are dropped.
    """

    __slots__ = (
        "_direct",
        "_error",
        "_filled",
        "_frame",
        "_frame_size",
        "_frames",
        "_head",
        "_queued_bytes",
        "_scratch",
        "_scratch_bytes",
        "max_frame_bytes",
    )

    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        buffer_bytes: int = DEFAULT_RECEIVE_BUFFER_BYTES,
        *,
        scratch: bytearray | None = None,
    ) -> None:
        assert buffer_bytes >= 1 and (scratch is None or len(scratch) >= 1)
        self.max_frame_bytes = max_frame_bytes
        self._scratch = scratch  # shared, or allocated by the first get_buffer()
        self._scratch_bytes = buffer_bytes
        self._direct = False  # the last get_buffer() was the frame's own allocation
        self._head = b""  # the first bytes (fewer than 4) of a size prefix
        self._frame: bytearray | None = None  # a frame being received, grown as bytes arrive
        self._frame_size = 0
        self._filled = 0  # bytes of it received
        self._frames: deque[bytes | bytearray] = deque()  # complete, not yet taken
        self._queued_bytes = 0
        self._error: ProtocolError | None = None

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go (non-empty); valid until :meth:`buffer_updated`."""
        frame = self._frame
        if frame is not None and self._frame_size - self._filled >= DIRECT_RECEIVE_BYTES:
            if self._filled == len(frame):  # full: what arrived proves the doubling
                frame = self._grow_frame(self._filled + 1)
            if len(frame) - self._filled >= DIRECT_RECEIVE_BYTES:
                self._direct = True
                return memoryview(frame)[self._filled :]
        self._direct = False
        if self._scratch is None:
            self._scratch = bytearray(self._scratch_bytes)
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        if self._direct:
            self._direct = False
            self._filled += nbytes
            if self._filled == self._frame_size:
                self._complete_frame()
            return
        assert self._scratch is not None, "buffer_updated() without get_buffer()"
        with memoryview(self._scratch) as view:
            self._consume(view[:nbytes])

    def feed(self, data: Buffer) -> None:
        """Take bytes the caller already holds (copied where kept)."""
        with memoryview(data) as view:
            self._consume(view.cast("B") if view.format != "B" else view)

    def pending_bytes(self) -> int:
        """Bytes received and not yet returned as frames."""
        return self._queued_bytes + self._filled + len(self._head)

    def held_bytes(self) -> int:
        """Memory this reader holds for received requests (allocations, not just bytes
        received), not counting a shared scratch buffer."""
        frame = 0 if self._frame is None else len(self._frame)
        return self._queued_bytes + frame + len(self._head)

    def in_frame(self) -> bool:
        """Part of a frame (or of its size prefix) has arrived and the rest has not."""
        return self._frame is not None or bool(self._head)

    def next_frame(self) -> bytes | bytearray | None:
        """The next complete frame, or None if more bytes are needed."""
        if self._frames:
            frame = self._frames.popleft()
            self._queued_bytes -= len(frame)
            return frame
        if self._error is not None:
            raise self._error
        return None

    def _consume(self, data: memoryview) -> None:
        """Queue every frame ``data`` completes; keep (a copy of) an incomplete one."""
        if self._error is not None:
            return
        pos, end = 0, len(data)
        if self._frame is not None:
            pos = min(self._frame_size - self._filled, end)
            self._append_to_frame(data[:pos])
            if self._filled < self._frame_size:
                return
            self._complete_frame()
        elif self._head:  # rare: a size prefix split between receives
            joined = self._head + bytes(data)
            self._head = b""
            data, end = memoryview(joined), len(joined)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(data, pos)
            if size < 0 or size > self.max_frame_bytes:
                self._error = (
                    InvalidFrameError(f"negative frame size {size}")
                    if size < 0
                    else FrameTooLargeError(size, self.max_frame_bytes)
                )
                return
            begin = pos + 4
            if end - begin < size:
                self._begin_frame(size, data[begin:end])
                return
            self._frames.append(bytes(data[begin : begin + size]))
            self._queued_bytes += size
            pos = begin + size
        if pos < end:
            self._head = bytes(data[pos:end])

    def _begin_frame(self, size: int, have: memoryview) -> None:
        proven = max(FRAME_FIRST_BYTES, FRAME_PROOF_FACTOR * len(have))
        frame = bytearray(max(len(have), min(size, FRAME_TRUST_BYTES, proven)))
        frame[: len(have)] = have
        self._frame, self._frame_size, self._filled = frame, size, len(have)

    def _append_to_frame(self, chunk: memoryview) -> None:
        frame = self._frame
        assert frame is not None
        end = self._filled + len(chunk)
        if end > len(frame):
            frame = self._grow_frame(end)
        frame[self._filled : end] = chunk
        self._filled = end

    def _grow_frame(self, need: int) -> bytearray:
        """A larger allocation for the frame being received (a new one: the old may still be
        exported by a memoryview the caller holds)."""
        assert self._frame is not None and need <= self._frame_size
        grown = bytearray(min(self._frame_size, max(need, 2 * len(self._frame))))
        grown[: self._filled] = memoryview(self._frame)[: self._filled]
        self._frame = grown
        return grown

    def _complete_frame(self) -> None:
        frame = self._frame
        assert frame is not None and len(frame) == self._frame_size == self._filled
        self._frames.append(frame)
        self._queued_bytes += self._frame_size
        self._frame, self._frame_size, self._filled = None, 0, 0
