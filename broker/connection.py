"""One plaintext Kafka connection: frames in, responses out in request order, files sent
with ``sendfile``.  The listener that accepts connections, and the theory of operation of both,
are in :mod:`broker.server`; the TLS variant is :mod:`broker.tls_connection`."""

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

from broker.connection_limits import UNBOUNDED, RateLimitedWarning, RequestMemoryBudget
from broker.deferred import Deferred
from broker.security.session import ListenerSecurity, Session
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


class CloseConnection(Exception):
    """Raised by a dispatcher: answer nothing more and close after what is owed.  ``chunks``,
    when given, are this request's last answer, written before closing (a SASL failure)."""

    def __init__(self, chunks: list[Chunk] | None = None) -> None:
        super().__init__()
        self.chunks = chunks


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
    # TLS listeners: a connection that has not completed its handshake by then is closed (not
    # a Kafka key: Kafka leaves it to connections.max.idle.ms, which a slow peer can hold).
    tls_handshake_timeout_ms: int = 10_000


class ConnectionOwner(Protocol):
    """What a connection needs of its listener (:class:`broker.server.KafkaListener`)."""

    loop: asyncio.AbstractEventLoop
    limits: ListenerLimits
    security: ListenerSecurity
    dispatcher: Dispatcher
    scratch: bytearray
    budget: RequestMemoryBudget
    handshake_failures: RateLimitedWarning
    name: str

    def frame_error(self, peer: str, exc: ProtocolError) -> None: ...
    def wait_for_memory(self, conn: Connection) -> None: ...
    def forget(self, conn: Connection) -> None: ...


class _Slot:
    __slots__ = ("abandoned", "chunks", "close_after", "frame_bytes", "ready")

    def __init__(self, frame_bytes: int) -> None:
        self.frame_bytes = frame_bytes  # charged to the budget until the answer is ready
        self.ready = False
        self.chunks: list[Chunk] | None = None
        self.close_after = False
        self.abandoned = False  # dropped from the queue: its answer will never be sent


def close_regions(chunks: list[Chunk] | None) -> None:
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
        "_unmute_timer",
        "_writing",
        "ip",
        "last_active_s",
        "peer",
        "session",
        "waiting_for_memory",
    )

    def __init__(self, listener: ConnectionOwner, sock: socket.socket, ip: str, peer: str) -> None:
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
        self._unmute_timer: asyncio.TimerHandle | None = None
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
            self._listener.frame_error(self.peer, exc)
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
                self._listener.frame_error(self.peer, exc)
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
        except CloseConnection as close:
            self._answered(slot)
            slot.chunks = close.chunks
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
            slot.chunks = value.chunks
            slot.close_after = True
        else:
            slot.chunks = value
        if self._dead or slot.abandoned:
            slot.ready = True
            close_regions(slot.chunks)
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
            or self._muted()
        )

    def _muted(self) -> bool:
        """Throttled by a client quota (``session.muted_until_s``): read nothing until then;
        a timer comes back to :meth:`_apply_backpressure` at the end."""
        until = self.session.muted_until_s
        if not until or until <= self._loop.time():
            return False
        if self._unmute_timer is None:
            self._unmute_timer = self._loop.call_at(until, self._unmuted)
        return True

    def _unmuted(self) -> None:
        self._unmute_timer = None
        if not self._dead:
            self._apply_backpressure()

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
            close_regions(slot.chunks)
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
        if self._unmute_timer is not None:
            self._unmute_timer.cancel()
            self._unmute_timer = None
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
