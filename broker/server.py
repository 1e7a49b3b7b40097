"""The Kafka listener: frames in, responses out in request order, files sent with sendfile.

Theory of operation
-------------------
Each connection is a non-blocking socket driven by ``loop.add_reader``/``add_writer`` (no
asyncio transport: a transport owns its socket, and we need the raw socket for
``os.sendfile``, which uvloop's transports do not offer).

Reading: bytes are received into one scratch buffer the listener's connections share, and a
:class:`FrameReader` per connection cuts the frames out of it (enforcing
``socket.request.max.bytes``), so an idle connection holds no receive buffer at all; a frame
that arrives in pieces gets its own allocation, sized from its size prefix.  Every complete
frame gets a *slot* at the tail of the connection's pending queue and is handed to the
dispatcher.  The dispatcher answers with the response chunks, ``None`` (acks=0: no
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

Limits across connections (:mod:`broker.connection_limits`): a connection over
``max.connections`` or ``max.connections.per.ip`` is closed as soon as it is accepted, with a
rate-limited warning; one idle (nothing read or written, nothing owed) for
``connections.max.idle.ms`` is closed; and the bytes a listener holds for requests (received,
not yet answered: :meth:`Connection._recharge`) are charged to its ``queued.max.request.bytes``
budget, new reading pausing on every connection while it is exhausted.  A connection in the
middle of a frame keeps reading: finishing the frame is how its memory gets released.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import socket
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

from broker.connection_limits import (
    UNBOUNDED,
    ConnectionQuotas,
    RateLimitedWarning,
    RequestMemoryBudget,
    idle_connection_check_interval_s,
    normalize_ip,
)
from broker.deferred import Deferred
from broker.security.session import PLAINTEXT_LISTENER, ListenerSecurity, Session
from kafka_protocol._codec import Chunk, FileRegion
from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.framing import DEFAULT_RECEIVE_BUFFER_BYTES, FrameReader

log = logging.getLogger("broker.server")

# What a dispatcher answers: chunks, nothing (acks=0), or either later; CloseConnection as a
# value means "answer nothing more and close".
ReplyValue: TypeAlias = "list[Chunk] | CloseConnection | None"
Reply: TypeAlias = "list[Chunk] | Deferred[ReplyValue] | None"
MAX_IOVECS = 512
MAX_SENDMSG_BYTES = 4 * 1024 * 1024
ACCEPT_PAUSE_S = 0.1  # out of file descriptors: accept again after this
ACCEPT_FAILURES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class CloseConnection(Exception):
    """Raised by a dispatcher: answer nothing more and close after what is owed."""


class Dispatcher(Protocol):
    def dispatch(self, frame: bytes | bytearray, session: Session) -> Reply: ...


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    """One listener's limits; the keys are Kafka's (defaults: ``metadata_log.configs``)."""

    max_frame_bytes: int = 100 * 1024 * 1024  # socket.request.max.bytes
    max_inflight_requests: int = 100
    max_buffered_response_bytes: int = 64 * 1024 * 1024
    max_connections: int = UNBOUNDED  # max.connections
    max_connections_per_ip: int = UNBOUNDED  # max.connections.per.ip
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    connections_max_idle_ms: int = 600_000  # connections.max.idle.ms; < 0: never
    queued_max_request_bytes: int = 256 * 1024 * 1024  # queued.max.request.bytes; <= 0: none
    receive_buffer_bytes: int = DEFAULT_RECEIVE_BUFFER_BYTES  # shared by the connections


class _Slot:
    __slots__ = ("abandoned", "chunks", "close_after", "frame_bytes", "ready")

    def __init__(self, frame_bytes: int) -> None:
        self.frame_bytes = frame_bytes  # charged to the budget until the answer is ready
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
        "_dispatched",
        "_fd",
        "_frames",
        "_held",
        "_listener",
        "_loop",
        "_out",
        "_pending",
        "_pump_scheduled",
        "_reading",
        "_sock",
        "_writing",
        "ip",
        "last_active_s",
        "peer",
        "session",
        "waiting_for_memory",
    )

    def __init__(self, listener: KafkaListener, sock: socket.socket, ip: str, peer: str) -> None:
        self._listener = listener
        self._loop = listener.loop
        self._sock = sock
        self._fd = sock.fileno()
        self.ip = ip
        self.peer = peer
        self.session = Session.for_listener(listener.security, ip, peer)
        self._frames = FrameReader(listener.limits.max_frame_bytes, scratch=listener.scratch)
        self._dispatched = 0  # bytes of frames dispatched whose answer is not ready yet
        self._held = 0  # bytes charged to the listener's budget
        self.waiting_for_memory = False
        self.last_active_s = self._loop.time()
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
        if self._listener.budget.exhausted and not self._frames.in_frame():
            self._wait_for_memory()
            return
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
        self.last_active_s = self._loop.time()
        self._take_frames()

    def _wait_for_memory(self) -> None:
        """The listener's request memory is exhausted: read again once some is released."""
        self._pause_reading()
        if not self.waiting_for_memory:
            self.waiting_for_memory = True
            self._listener.wait_for_memory(self)

    def memory_available(self) -> None:
        self.waiting_for_memory = False
        if not self._dead:
            self._apply_backpressure()

    def _recharge(self) -> None:
        """Charge the listener's budget with what this connection now holds for requests:
        frames being received or not yet dispatched, and those not answered yet."""
        held = self._frames.held_bytes() + self._dispatched
        if held != self._held:
            delta, self._held = held - self._held, held
            self._listener.budget.change(delta)

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
        self._recharge()
        self._apply_backpressure()

    def _handle(self, frame: bytes | bytearray) -> None:
        slot = _Slot(len(frame))
        self._dispatched += slot.frame_bytes
        self._pending.append(slot)
        try:
            reply = self._listener.dispatcher.dispatch(frame, self.session)
        except CloseConnection:
            self._answered(slot)
            slot.close_after = True
            self._close_after_owed()
        except Exception:  # a handler bug: answer nothing more on this connection
            log.exception("request failed peer=%s", self.peer)
            self._answered(slot)
            slot.close_after = True
            self._close_after_owed()
        else:
            if isinstance(reply, Deferred):
                reply.then(functools.partial(self._resolved, slot))
            else:
                self._answered(slot)
                slot.chunks = reply
        self._pump()

    def _answered(self, slot: _Slot) -> None:
        slot.ready = True
        self._dispatched -= slot.frame_bytes

    def _resolved(self, slot: _Slot, value: ReplyValue) -> None:
        if isinstance(value, CloseConnection):
            slot.close_after = True
        else:
            slot.chunks = value
        if self._dead or slot.abandoned:
            slot.ready = True
            _close_regions(slot.chunks)
            return
        self._answered(slot)
        if not self._pump_scheduled:  # one write for every response settled in this pass
            self._pump_scheduled = True
            self._loop.call_soon(self._scheduled_pump)

    def _scheduled_pump(self) -> None:
        self._pump_scheduled = False
        if not self._dead:
            self._recharge()
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
        elif self.waiting_for_memory:
            pass  # memory_available() comes back here
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
            if not slot.ready:
                self._dispatched -= slot.frame_bytes
            _close_regions(slot.chunks)
        self._pending.clear()
        self._recharge()

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
        self.last_active_s = self._loop.time()
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

    def is_idle(self, now_s: float, max_idle_s: float) -> bool:
        """Nothing read or written for ``max_idle_s``, nothing owed, and not kept from reading
        by the listener's memory budget."""
        return (
            now_s - self.last_active_s >= max_idle_s
            and not self._pending
            and not self._out
            and not self.waiting_for_memory
            and not self._dead
        )

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
        self._frames = FrameReader(0)  # what was received is dropped
        self._dispatched = 0
        self._recharge()
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
        security: ListenerSecurity = PLAINTEXT_LISTENER,
    ) -> None:
        self.dispatcher = dispatcher
        self.limits = limits = limits or ListenerLimits()
        self.loop = loop or asyncio.get_running_loop()
        self.security = security
        self.name = security.name
        self._sock = socket.create_server((host, port), reuse_port=False, backlog=1024)
        self._sock.setblocking(False)
        self._connections: set[Connection] = set()
        self.scratch = bytearray(limits.receive_buffer_bytes)  # every connection receives here
        self.quotas = ConnectionQuotas(
            limits.max_connections,
            limits.max_connections_per_ip,
            limits.max_connections_per_ip_overrides,
        )
        self.budget = RequestMemoryBudget(limits.queued_max_request_bytes, self._memory_released)
        self._waiting_for_memory: dict[Connection, None] = {}  # in the order they began waiting
        self._refusals = RateLimitedWarning()
        self._accept_failures = RateLimitedWarning()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._accept_timer: asyncio.TimerHandle | None = None
        self._accepting = False
        self._resume_accepting()
        self._schedule_idle_check()

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def _resume_accepting(self) -> None:
        self._accept_timer = None
        if not self._accepting and self._sock.fileno() >= 0:
            self.loop.add_reader(self._sock.fileno(), self._on_accept)
            self._accepting = True

    def _on_accept(self) -> None:
        for _ in range(64):  # bounded so a connection storm cannot starve the loop
            try:
                sock, addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._accept_failed(exc)
                return
            ip = normalize_ip(addr[0])
            peer = f"{addr[0]}:{addr[1]}"
            refused = self.quotas.admit(ip)
            if refused is not None:
                sock.close()
                limit = (
                    self.quotas.max_connections
                    if refused == "max.connections"
                    else self.quotas.limit_for(ip)
                )
                self._refusals.warn(
                    self.loop.time(),
                    "connection refused listener=%s peer=%s reason=%s limit=%d open=%d",
                    self.name,
                    peer,
                    refused,
                    limit,
                    self.quotas.total,
                )
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._connections.add(Connection(self, sock, ip, peer))

    def _accept_failed(self, exc: OSError) -> None:
        """Out of file descriptors (or memory) the pending connection stays in the backlog and
        the socket stays readable: stop accepting for a moment instead of spinning."""
        self._accept_failures.warn(
            self.loop.time(),
            "accept failed listener=%s error=%r open=%d",
            self.name,
            exc.strerror or str(exc),
            len(self._connections),
        )
        if exc.errno in ACCEPT_FAILURES and self._accepting:
            self.loop.remove_reader(self._sock.fileno())
            self._accepting = False
            self._accept_timer = self.loop.call_later(ACCEPT_PAUSE_S, self._resume_accepting)

    # --- idle connections ---------------------------------------------------------------------

    def _schedule_idle_check(self) -> None:
        interval_s = idle_connection_check_interval_s(self.limits.connections_max_idle_ms)
        if interval_s is not None:
            self._idle_timer = self.loop.call_later(interval_s, self._close_idle)

    def _close_idle(self) -> None:
        max_idle_s = self.limits.connections_max_idle_ms / 1000
        now_s = self.loop.time()
        for conn in [c for c in self._connections if c.is_idle(now_s, max_idle_s)]:
            conn.abort(f"idle for more than connections.max.idle.ms={max_idle_s * 1000:.0f}")
        self._schedule_idle_check()

    # --- request memory -----------------------------------------------------------------------

    def wait_for_memory(self, conn: Connection) -> None:
        self._waiting_for_memory[conn] = None

    def _memory_released(self) -> None:
        """The budget dropped below its limit: let the waiting connections read again (on the
        next loop pass: this runs inside whichever connection released memory)."""
        if self._waiting_for_memory:
            waiting, self._waiting_for_memory = self._waiting_for_memory, {}
            for conn in waiting:
                self.loop.call_soon(conn.memory_available)

    # --- closing ------------------------------------------------------------------------------

    def forget(self, conn: Connection) -> None:
        if conn in self._connections:
            self._connections.discard(conn)
            self._waiting_for_memory.pop(conn, None)
            self.quotas.release(conn.ip)

    def close(self) -> None:
        if self._accepting:
            self.loop.remove_reader(self._sock.fileno())
            self._accepting = False
        for timer in (self._idle_timer, self._accept_timer):
            if timer is not None:
                timer.cancel()
        self._idle_timer = self._accept_timer = None
        self._sock.close()
        for conn in list(self._connections):
            conn.abort("listener closed")
