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
import socket

from broker.connection import (
    CloseConnection,
    Connection,
    Dispatcher,
    ListenerLimits,
    Reply,
    ReplyValue,
    log,
)
from broker.connection_limits import (
    ConnectionQuotas,
    RateLimitedWarning,
    RequestMemoryBudget,
    idle_connection_check_interval_s,
    normalize_ip,
)
from broker.security.session import PLAINTEXT_LISTENER, ListenerSecurity
from broker.tls_connection import TlsConnection
from kafka_protocol.exceptions import FrameTooLargeError, ProtocolError

__all__ = [
    "CloseConnection",
    "Connection",
    "Dispatcher",
    "KafkaListener",
    "ListenerLimits",
    "Reply",
    "ReplyValue",
]

ACCEPT_PAUSE_S = 0.1  # out of file descriptors: accept again after this
ACCEPT_FAILURES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# A TLS handshake record (content type 22, version 3.x) read as a Kafka size prefix.
TLS_HANDSHAKE_PREFIX = 0x1603


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
        self.handshake_failures = RateLimitedWarning()  # TLS handshakes that fail or time out
        self._connection_type: type[Connection] = Connection
        if security.ssl_context is not None:
            self._connection_type = TlsConnection
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
            self._connections.add(self._connection_type(self, sock, ip, peer))

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

    def frame_error(self, peer: str, exc: ProtocolError) -> None:
        """A frame that cannot be cut out of the stream: the connection is closed."""
        hint = ""
        if isinstance(exc, FrameTooLargeError) and exc.size_bytes >> 16 == TLS_HANDSHAKE_PREFIX:
            hint = " (looks like TLS on a plaintext listener)"
        log.warning(
            "closing connection listener=%s peer=%s reason=%r%s", self.name, peer, str(exc), hint
        )

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
