"""The Kafka listener: frames in, responses out in request order, files sent with sendfile.

Theory of operation
-------------------
Each connection is a non-blocking socket driven by ``loop.add_reader``/``add_writer`` (no
asyncio transport: a transport owns its socket, and we need the raw socket for
``os.sendfile``, which uvloop's transports do not offer).

Reading: bytes go into a :class:`FrameReader` (which enforces ``socket.request.max.bytes``);
every complete frame gets a *slot* at the tail of the connection's pending queue and is handed
to the dispatcher.  The dispatcher answers with the response chunks, ``None`` (acks=0: no
response at all), or a future of either (long-poll fetch, a controller round trip).  Kafka
clients pipeline requests and match responses by order, so a slot is written only once every
slot before it has been written.

Writing: ready chunks are written with ``sendmsg`` (scatter-gather, so large records blobs
are not copied) and :class:`FileRegion` chunks with ``os.sendfile``; on ``EAGAIN`` we wait
for writability.  The connection owns the file descriptors inside FileRegions and closes
them once sent or when the connection dies.

Backpressure: a connection stops reading while it has ``max_inflight_requests`` unanswered
requests or more than ``max_buffered_response_bytes`` queued for the socket, and resumes once
below both.  A frame that cannot be decoded closes the connection after the responses already
owed have been written; other connections are unaffected.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from broker.deferred import Deferred
from kafka_protocol._codec import Chunk, FileRegion
from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.framing import FrameReader

log = logging.getLogger("broker.server")

# What a dispatcher answers: chunks, nothing (acks=0), or either later; CloseConnection as a
# value means "answer nothing more and close".
ReplyValue: TypeAlias = "list[Chunk] | CloseConnection | None"
Reply: TypeAlias = "list[Chunk] | Deferred[ReplyValue] | None"
MAX_IOVECS = 512
MAX_SENDMSG_BYTES = 4 * 1024 * 1024


class CloseConnection(Exception):
    """Raised by a dispatcher: answer nothing more and close after what is owed."""


class Dispatcher(Protocol):
    def dispatch(self, frame: bytes | bytearray, peer: str) -> Reply: ...


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    max_frame_bytes: int = 100 * 1024 * 1024  # socket.request.max.bytes
    max_inflight_requests: int = 100
    max_buffered_response_bytes: int = 64 * 1024 * 1024
    max_connections: int = 10_000


class _Slot:
    __slots__ = ("abandoned", "chunks", "close_after", "ready")

    def __init__(self) -> None:
        self.ready = False
        self.chunks: list[Chunk] | None = None
        self.close_after = False
        self.abandoned = False  # dropped from the queue: its answer will never be sent


def _close_regions(chunks: list[Chunk] | None) -> None:
    for c in chunks or ():
        if isinstance(c, FileRegion):
            os.close(c.fd)


class Connection:
    __slots__ = (
        "_buffered",
        "_closing",
        "_dead",
        "_fd",
        "_frames",
        "_listener",
        "_loop",
        "_out",
        "_pending",
        "_pump_scheduled",
        "_reading",
        "_sock",
        "_writing",
        "peer",
    )

    def __init__(self, listener: KafkaListener, sock: socket.socket, peer: str) -> None:
        self._listener = listener
        self._loop = listener.loop
        self._sock = sock
        self._fd = sock.fileno()
        self.peer = peer
        self._frames = FrameReader(listener.limits.max_frame_bytes)
        self._pending: deque[_Slot] = deque()
        self._out: deque[Chunk] = deque()
        self._buffered = 0
        self._reading = False
        self._writing = False
        self._closing = False
        self._dead = False
        self._pump_scheduled = False
        self._resume_reading()

    # --- reading ------------------------------------------------------------------------------

    def _resume_reading(self) -> None:
        if not self._reading and not self._closing and not self._dead:
            self._loop.add_reader(self._fd, self._on_readable)
            self._reading = True

    def _pause_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def _on_readable(self) -> None:
        try:
            received = self._sock.recv_into(self._frames.get_buffer())
        except (BlockingIOError, InterruptedError):
            return
        except ProtocolError as exc:  # a size prefix above the limit, found while compacting
            log.warning("closing connection peer=%s reason=%r", self.peer, str(exc))
            self._close_after_owed()
            return
        except OSError as exc:
            self.abort(f"read failed: {exc}")
            return
        if not received:
            self.abort("peer closed the connection")
            return
        self._frames.buffer_updated(received)
        self._take_frames()

    def _take_frames(self) -> None:
        """Dispatch buffered frames while the connection is under its limits.  Checked per
        frame: one receive can hold thousands of small requests."""
        while not (self._closing or self._dead or self._busy()):
            try:
                frame = self._frames.next_frame()
            except ProtocolError as exc:
                log.warning("closing connection peer=%s reason=%r", self.peer, str(exc))
                self._close_after_owed()
                return
            if frame is None:
                break
            self._handle(frame)
        self._apply_backpressure()

    def _handle(self, frame: bytes | bytearray) -> None:
        slot = _Slot()
        self._pending.append(slot)
        try:
            reply = self._listener.dispatcher.dispatch(frame, self.peer)
        except CloseConnection:
            slot.ready, slot.close_after = True, True
            self._close_after_owed()
        except Exception:  # a handler bug: answer nothing more on this connection
            log.exception("request failed peer=%s", self.peer)
            slot.ready, slot.close_after = True, True
            self._close_after_owed()
        else:
            if isinstance(reply, Deferred):
                reply.then(functools.partial(self._resolved, slot))
            else:
                slot.ready, slot.chunks = True, reply
        self._pump()

    def _resolved(self, slot: _Slot, value: ReplyValue) -> None:
        slot.ready = True
        if isinstance(value, CloseConnection):
            slot.close_after = True
        else:
            slot.chunks = value
        if self._dead or slot.abandoned:
            _close_regions(slot.chunks)
            return
        if not self._pump_scheduled:  # one write for every response settled in this pass
            self._pump_scheduled = True
            self._loop.call_soon(self._scheduled_pump)

    def _scheduled_pump(self) -> None:
        self._pump_scheduled = False
        if not self._dead:
            self._pump()
            self._apply_backpressure()

    def _close_after_owed(self) -> None:
        self._closing = True
        self._pause_reading()
        if not self._pending and not self._out:
            self.abort("closed after protocol error")

    def _busy(self) -> bool:
        limits = self._listener.limits
        return (
            len(self._pending) >= limits.max_inflight_requests
            or self._buffered >= limits.max_buffered_response_bytes
        )

    def _apply_backpressure(self) -> None:
        if self._busy():
            self._pause_reading()
        elif not self._reading and not self._closing and not self._dead:
            self._resume_reading()
            if self._frames.pending_bytes():
                self._take_frames()  # frames received before we paused

    # --- writing ------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Move ready slots, in order, to the output queue and write what the socket takes."""
        pending = self._pending
        if self._dead:
            self._abandon_pending()
            return
        while pending and pending[0].ready:
            slot = pending.popleft()
            if slot.chunks:
                self._out.extend(slot.chunks)
                self._buffered += sum(len(c) for c in slot.chunks)
            if slot.close_after:
                self._closing = True
                self._pause_reading()
                self._abandon_pending()
                break
        if not self._writing:
            self._write()

    def _abandon_pending(self) -> None:
        for slot in self._pending:
            slot.abandoned = True
            _close_regions(slot.chunks)
        self._pending.clear()

    def _write(self) -> None:
        out = self._out
        try:
            while out:
                head = out[0]
                if isinstance(head, FileRegion):
                    self._send_region(head)
                else:
                    self._send_buffers()
        except (BlockingIOError, InterruptedError):
            if not self._writing:
                self._loop.add_writer(self._fd, self._on_writable)
                self._writing = True
            return
        except OSError as exc:
            self.abort(f"write failed: {exc}")
            return
        if self._writing:
            self._loop.remove_writer(self._fd)
            self._writing = False
        if self._closing and not self._pending:
            self.abort("closed after protocol error")
        else:
            self._apply_backpressure()

    def _on_writable(self) -> None:
        self._write()

    def _send_region(self, region: FileRegion) -> None:
        sent = os.sendfile(self._fd, region.fd, region.offset, region.size)
        if sent == 0:
            raise OSError(errno.EIO, "segment file ended before the region did")
        self._buffered -= sent
        if sent < region.size:
            self._out[0] = FileRegion(region.fd, region.offset + sent, region.size - sent)
            raise BlockingIOError
        self._out.popleft()
        os.close(region.fd)

    def _send_buffers(self) -> None:
        out = self._out
        bufs: list[bytes | bytearray | memoryview] = []
        total = 0
        for c in out:
            if isinstance(c, FileRegion) or len(bufs) >= MAX_IOVECS or total >= MAX_SENDMSG_BYTES:
                break
            bufs.append(c)
            total += len(c)
        sent = self._sock.sendmsg(bufs)
        self._buffered -= sent
        remaining = sent
        while remaining:
            head = out[0]
            assert not isinstance(head, FileRegion)
            if remaining >= len(head):
                remaining -= len(head)
                out.popleft()
            else:
                out[0] = memoryview(head)[remaining:]
                remaining = 0
        if sent < total:
            raise BlockingIOError  # the socket buffer is full: wait for writability

    # --- closing ------------------------------------------------------------------------------

    def abort(self, reason: str) -> None:
        if self._dead:
            return
        self._dead = True
        self._closing = True
        log.debug("connection closed peer=%s reason=%s", self.peer, reason)
        self._pause_reading()
        if self._writing:
            self._loop.remove_writer(self._fd)
            self._writing = False
        for c in self._out:
            if isinstance(c, FileRegion):
                os.close(c.fd)
        self._out.clear()
        self._abandon_pending()
        self._sock.close()
        self._listener.forget(self)


class KafkaListener:
    """Accepts connections on one address and serves them with a dispatcher."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        host: str,
        port: int,
        limits: ListenerLimits | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.limits = limits or ListenerLimits()
        self.loop = loop or asyncio.get_running_loop()
        self._sock = socket.create_server((host, port), reuse_port=False, backlog=1024)
        self._sock.setblocking(False)
        self._connections: set[Connection] = set()
        self.loop.add_reader(self._sock.fileno(), self._on_accept)
        self.on_connection_count: Callable[[int], None] | None = None

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def _on_accept(self) -> None:
        for _ in range(64):  # bounded so a connection storm cannot starve the loop
            try:
                sock, addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("accept failed: %s", exc)
                return
            if len(self._connections) >= self.limits.max_connections:
                log.warning("refusing connection from %s: %d open", addr, len(self._connections))
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._connections.add(Connection(self, sock, f"{addr[0]}:{addr[1]}"))

    def forget(self, conn: Connection) -> None:
        self._connections.discard(conn)

    def close(self) -> None:
        self.loop.remove_reader(self._sock.fileno())
        self._sock.close()
        for conn in list(self._connections):
            conn.abort("listener closed")
