"""pysyncobj's TCP transport with bounded input: what the adapter (``raft``) runs on its Raft port.

Why a module of its own: like ``fixed_syncobj`` it reaches into pysyncobj 0.3.17's private,
name-mangled internals (``TESTED_PYSYNCOBJ_VERSIONS`` guards both), here those of
``TcpConnection`` and ``TCPTransport``.

pysyncobj reads every available byte of a connection into one growing ``bytes`` buffer
(each read copies it: quadratic) until the length-prefixed message it declares is complete,
however large the declared length. One connection that declares a 2 GiB message and sends
zeros therefore holds the tick thread (no heartbeats: an election) and grows memory. Here:

- **Checked before buffering.** A connection reads only while its unprocessed input is
  below its limit, in chunks of at most ``recvBufferSize``, into a ``bytearray`` consumed
  in place. As soon as 4 bytes declare a length, a negative one or one above the limit
  closes the connection: nothing of an oversize message is buffered beyond its first read.
- **Two limits.** A connection that has not yet identified itself as one of our voters
  (a peer that proved the cluster password by its encrypted key exchange and then named a
  configured voter address) may send messages of at most
  :data:`MAX_HANDSHAKE_MESSAGE_BYTES`; an identified voter's messages may be up to
  :data:`MAX_RAFT_MESSAGE_BYTES`. So an unauthenticated connection can make us hold at most
  a few KiB, and bytes that do not decrypt (pysyncobj encrypts with the password) close it.
- **Only voters.** pysyncobj also accepts read-only nodes and admin ("utility") commands
  on this port; the product uses neither, so such a handshake closes the connection, as
  an unknown peer address already does in pysyncobj.
- **Few and brief.** At most :data:`MAX_UNIDENTIFIED_CONNECTIONS` connections may be
  unidentified at once (a new one evicts the oldest: a voter's handshake takes one round
  trip, an attacker's never completes), and each has :data:`HANDSHAKE_TIMEOUT_MS` to
  identify itself: a peer trickling bytes cannot hold file descriptors.
- **Costs nothing else.** Closing one connection affects no other connection and no Raft
  state; each close is one warning line naming the peer and the reason (at most
  :data:`CLOSE_LOG_LINES` per :data:`CLOSE_LOG_WINDOW_MS`, the rest counted in one line).
  A message that decrypts (a voter's) still may not inflate beyond
  :data:`MAX_DECOMPRESSED_MESSAGE_BYTES`.

A read is bounded per poll event: at most the limit of one connection, so even a peer
sending at line rate cannot keep the tick thread from its heartbeats.
"""

from __future__ import annotations

import errno
import logging
import socket
import struct
import zlib
from typing import Any, Final

import pysyncobj.pickle as _pso_pickle  # type: ignore[import-untyped]
from pysyncobj.tcp_connection import TcpConnection  # type: ignore[import-untyped]
from pysyncobj.transport import TCPTransport  # type: ignore[import-untyped]

from kafka_protocol.clock import monotonic_ms

logger = logging.getLogger(__name__)

_LENGTH: Final = struct.Struct("i")  # pysyncobj's prefix: native signed 32-bit
# A key exchange message (32 random bytes) or a voter's address, pickled, compressed and
# encrypted, is well under 1 KiB.
MAX_HANDSHAKE_MESSAGE_BYTES: Final = 4 * 1024
# The largest message pysyncobj sends us: an AppendEntries of at most
# appendEntriesBatchSizeBytes (64 KiB) plus one entry (<= 30 KiB, kraft.quorum.codec), or one
# snapshot chunk of logCompactionBatchSize (64 KiB); pickle protocol 2 may double bytes and
# the encryption adds a third: about 260 KiB at most. 1 MiB leaves a margin of four.
MAX_RAFT_MESSAGE_BYTES: Final = 1 << 20
# A message decompresses to at most this (pysyncobj compresses every message with zlib).
MAX_DECOMPRESSED_MESSAGE_BYTES: Final = 16 * MAX_RAFT_MESSAGE_BYTES
MAX_UNIDENTIFIED_CONNECTIONS: Final = 16
HANDSHAKE_TIMEOUT_MS: Final = 5_000
# Closed connections are logged one line each, at most this many per window; a flood of
# them is summed up in one line when the window ends.
CLOSE_LOG_LINES: Final = 10
CLOSE_LOG_WINDOW_MS: Final = 10_000


class _CloseLog:
    """The warnings about closed Raft connections, rate-limited (tick thread only)."""

    def __init__(self) -> None:
        self.window_start_ms = -CLOSE_LOG_WINDOW_MS
        self.lines = 0
        self.suppressed = 0

    def warn(self, peer: str, reason: str) -> None:
        now = monotonic_ms()
        if now - self.window_start_ms >= CLOSE_LOG_WINDOW_MS:
            if self.suppressed:
                logger.warning("%d more raft connections closed (not logged)", self.suppressed)
            self.window_start_ms, self.lines, self.suppressed = now, 0, 0
        if self.lines < CLOSE_LOG_LINES:
            self.lines += 1
            logger.warning("raft connection from %s closed: it %s", peer, reason)
        else:
            self.suppressed += 1


_close_log = _CloseLog()


class BoundedTcpConnection(TcpConnection):  # type: ignore[misc]
    """A ``TcpConnection`` whose unprocessed input is bounded (see the module docstring).

    Instances are made by pysyncobj as plain ``TcpConnection`` and given this class by
    :class:`BoundedTCPTransport` before their first read; it adds no state of its own but
    ``max_message_bytes``, which the transport raises once the peer is identified.
    """

    max_message_bytes: int = MAX_HANDSHAKE_MESSAGE_BYTES
    accepted_at_ms: int = 0  # when a peer opened it (monotonic)
    # pysyncobj's private attributes that we use (declared for the type checker).
    _TcpConnection__readBuffer: bytes | bytearray
    _TcpConnection__recvBufferSize: int
    _TcpConnection__socket: Any
    recvLastTimestamp: int

    @property
    def input_limit_bytes(self) -> int:
        """The most unprocessed input held: one whole message and its length prefix."""
        return _LENGTH.size + self.max_message_bytes

    def _TcpConnection__processRead(self) -> bool:
        """One bounded read; ``False`` once nothing more may or can be read now.

        pysyncobj's own read with two changes: it reads at most the room left below the
        limit, into a bytearray, and checks a declared length as soon as it has one.
        """
        buffer = self._TcpConnection__readBuffer
        if not isinstance(buffer, bytearray):  # pysyncobj resets it to bytes() on (re)connect
            buffer = self._TcpConnection__readBuffer = bytearray(buffer)
        room = self.input_limit_bytes - len(buffer)
        if room <= 0:
            return False  # level-triggered poll: the rest is read once this is parsed
        sock = self._TcpConnection__socket
        try:
            incoming = sock.recv(min(room, self._TcpConnection__recvBufferSize))
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                self.disconnect()
            return False
        if not incoming or sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            self.disconnect()
            return False
        buffer += incoming
        return self._declared_length_ok()

    def _declared_length_ok(self) -> bool:
        buffer = self._TcpConnection__readBuffer
        if len(buffer) < _LENGTH.size:
            return True
        (declared,) = _LENGTH.unpack_from(buffer)
        if 0 <= declared <= self.max_message_bytes:
            return True
        self._close(f"declares a message of {declared} bytes, limit {self.max_message_bytes}")
        return False

    def _TcpConnection__processParseMessage(self) -> Any:
        """pysyncobj's parse, on the bytearray, consuming it in place."""
        buffer = self._TcpConnection__readBuffer
        if not isinstance(buffer, bytearray) or len(buffer) < _LENGTH.size:
            return None  # bytes: nothing read since pysyncobj reset it
        if not self._declared_length_ok():
            return None
        (length,) = _LENGTH.unpack_from(buffer)
        end = _LENGTH.size + length
        if len(buffer) < end:
            return None
        data = bytes(buffer[_LENGTH.size : end])
        del buffer[:end]
        try:
            if self.encryptor:
                timestamp = self.encryptor.extract_timestamp(data)
                if timestamp < self.recvLastTimestamp:
                    raise ValueError("replayed or reordered message")
                self.recvLastTimestamp = timestamp
                data = self.encryptor.decrypt(data)
            inflater = zlib.decompressobj()
            plain = inflater.decompress(data, MAX_DECOMPRESSED_MESSAGE_BYTES)
            if inflater.unconsumed_tail or not inflater.eof:
                raise ValueError("message does not decompress within the limit")
            message = _pso_pickle.loads(plain)
            if self.recvRandKey:
                rand_key, message = message
                if rand_key != self.recvRandKey:
                    raise ValueError("message of another connection")
        except Exception as exc:
            self._close(f"sent a message that does not decrypt or decode ({type(exc).__name__})")
            return None
        return message

    def _close(self, reason: str) -> None:
        _close_log.warn(self._peer(), reason)
        self.disconnect()

    def _peer(self) -> str:
        sock = self._TcpConnection__socket
        try:
            host, port = sock.getpeername()[:2]
        except (OSError, AttributeError, ValueError):
            return "an unknown peer"
        return f"{host}:{port}"


class BoundedTCPTransport(TCPTransport):  # type: ignore[misc]
    """pysyncobj's TCP transport on :class:`BoundedTcpConnection`, voters only."""

    _connections: dict[Any, Any]
    _unknownConnections: set[Any]
    _nodes: set[Any]
    _syncObj: Any

    def _onNewIncomingConnection(self, conn: Any) -> None:
        conn.__class__ = BoundedTcpConnection  # before its first read (same thread, no I/O yet)
        conn.accepted_at_ms = monotonic_ms()
        if len(self._unknownConnections) >= MAX_UNIDENTIFIED_CONNECTIONS:
            oldest = min(self._unknownConnections, key=lambda c: c.accepted_at_ms)
            oldest._close(f"was evicted: {MAX_UNIDENTIFIED_CONNECTIONS} unidentified connections")
            self._unknownConnections.discard(oldest)
        TCPTransport._onNewIncomingConnection(self, conn)

    def _onTick(self) -> None:
        TCPTransport._onTick(self)
        deadline = monotonic_ms() - HANDSHAKE_TIMEOUT_MS
        for conn in [c for c in self._unknownConnections if c.accepted_at_ms < deadline]:
            conn._close(f"did not identify itself within {HANDSHAKE_TIMEOUT_MS} ms")
            self._unknownConnections.discard(conn)

    def addNode(self, node: Any) -> None:
        TCPTransport.addNode(self, node)
        conn = self._connections.get(node)
        if conn is not None and type(conn) is TcpConnection:  # ours to dial: not connected yet
            conn.__class__ = BoundedTcpConnection

    def _onIncomingMessageReceived(self, conn: Any, message: Any) -> None:
        """The handshake of a connection a peer opened: key exchange, then its address."""
        exchanging_keys = self._syncObj.encryptor and not conn.sendRandKey
        if not exchanging_keys and (isinstance(message, list) or message == "readonly"):
            refused = "an admin command" if isinstance(message, list) else "a read-only node"
            conn._close(f"asked to be {refused}, which this quorum does not serve")
            self._unknownConnections.discard(conn)
            return
        TCPTransport._onIncomingMessageReceived(self, conn, message)
        if conn not in self._unknownConnections and self._connToNode(conn) in self._nodes:
            conn.max_message_bytes = MAX_RAFT_MESSAGE_BYTES  # identified as one of our voters

    def _onOutgoingConnected(self, conn: Any) -> None:
        if not self._syncObj.encryptor:  # no password (never in the product): nothing to prove
            conn.max_message_bytes = MAX_RAFT_MESSAGE_BYTES
        TCPTransport._onOutgoingConnected(self, conn)

    def _onOutgoingMessageReceived(self, conn: Any, message: Any) -> None:
        """The key exchange of a connection we opened to a voter: its key proves the password."""
        TCPTransport._onOutgoingMessageReceived(self, conn, message)
        conn.max_message_bytes = MAX_RAFT_MESSAGE_BYTES
