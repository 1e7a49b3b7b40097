"""A Kafka connection over TLS (SSL and SASL_SSL listeners).

Theory of operation
-------------------
The accepted socket is wrapped with ``ssl_context.wrap_socket(server_side=True,
do_handshake_on_connect=False)`` and stays a non-blocking socket driven by
``loop.add_reader``/``add_writer``, exactly as a plaintext :class:`~broker.connection.Connection`
(which this class extends, so the plaintext path has no TLS branch at all).  Why an
``SSLSocket`` and not ``ssl.MemoryBIO`` + ``SSLObject``: OpenSSL then reads and writes the
socket itself, so every byte crosses Python once (into the frame buffer, out of the response
chunks); with memory BIOs each byte is copied once more on each side (socket -> bytes -> BIO
and BIO -> bytes -> socket) and every record costs extra Python calls.  The asyncio SSL
transport (MemoryBIO based) is what the memory-BIO design would look like, and it is the
slower of the two in ``scripts/bench_tls.py`` style measurements.

Handshake: ``do_handshake()`` is retried on readability (``SSLWantReadError``) or
writability (``SSLWantWriteError``) until it completes, for at most
``ListenerLimits.tls_handshake_timeout_ms`` (a peer that connects and never completes the
handshake would otherwise hold a connection slot until ``connections.max.idle.ms``).  A
failed handshake (plaintext on a TLS port, a missing or untrusted client certificate, no
common protocol or cipher) logs one rate-limited line per listener and closes the
connection.  Once complete, the client certificate (when one was given) becomes the session's
principal through ``ListenerSecurity.principal_of_certificate`` (on SASL_SSL the SASL identity
replaces it later).

Reading: OpenSSL may hold decrypted bytes (``pending()``) that do not make the socket
readable, so a read is followed by more reads while ``pending()`` says so, and resuming a
paused connection with bytes pending schedules a read.  A read may need to write (TLS 1.3
key updates): ``SSLWantWriteError`` then waits for writability and reads again.

Writing: ``SSLSocket`` has no ``sendmsg`` and TLS cannot use ``sendfile``, so responses are
written in pieces of at most :data:`TLS_PIECE_BYTES`: small chunks are joined, a large chunk
is sliced (no copy), and a :class:`FileRegion` (fetch) is read with ``os.pread`` one piece at
a time, so a 50 MiB fetch holds one piece in memory, not 50 MiB.  OpenSSL requires a write
that failed with ``SSLWantWriteError`` to be retried with the same bytes, so the piece being
written is kept (``_piece``) until it has gone.
"""

from __future__ import annotations

import errno
import os
import socket
import ssl
from typing import Final

from broker.connection import Connection, ConnectionOwner
from kafka_protocol._codec import FileRegion
from kafka_protocol.exceptions import ProtocolError

TLS_PIECE_BYTES: Final = 256 * 1024
# OpenSSL reasons that mean "the peer did not speak TLS" (plaintext on a TLS listener).
_NOT_TLS_REASONS: Final = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL"})


def _failure_text(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    if reason in _NOT_TLS_REASONS:
        return f"{reason} (looks like plaintext on a TLS listener)"
    if reason in ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "NO_CERTIFICATES_RETURNED"):
        return f"{reason} (ssl.client.auth=required and the client sent no certificate)"
    return str(reason or exc)


class TlsConnection(Connection):
    __slots__ = ("_handshake_timer", "_handshaken", "_piece", "_read_wants_write", "_tls")

    def __init__(self, listener: ConnectionOwner, sock: socket.socket, ip: str, peer: str) -> None:
        context = listener.security.ssl_context
        assert context is not None
        self._tls = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        self._handshaken = False
        self._piece: bytes | memoryview | None = None  # being written: retried as is
        self._read_wants_write = False
        timeout_s = listener.limits.tls_handshake_timeout_ms / 1000
        self._handshake_timer = listener.loop.call_later(timeout_s, self._handshake_timed_out)
        super().__init__(listener, self._tls, ip, peer)

    # --- handshake ----------------------------------------------------------------------------

    def _handshake(self) -> None:
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            self._stop_writer()
            return
        except ssl.SSLWantWriteError:
            self._start_writer()
            return
        except (ssl.SSLError, OSError) as exc:
            self._handshake_failed(_failure_text(exc))
            return
        self._handshaken = True
        self._handshake_timer.cancel()
        self._stop_writer()
        self.last_active_s = self._loop.time()
        security = self._listener.security
        cert = self._tls.getpeercert()
        if cert and security.principal_of_certificate is not None:
            self.session.principal = security.principal_of_certificate(cert)
        if self._tls.pending():
            self._on_readable()

    def _handshake_failed(self, reason: str) -> None:
        self._listener.handshake_failures.warn(
            self._loop.time(),
            "TLS handshake failed listener=%s peer=%s reason=%s",
            self._listener.name,
            self.peer,
            reason,
        )
        self.abort(f"TLS handshake failed: {reason}")

    def _handshake_timed_out(self) -> None:
        if not self._handshaken and not self._dead:
            timeout_ms = self._listener.limits.tls_handshake_timeout_ms
            self._handshake_failed(f"not completed within {timeout_ms} ms")

    # --- reading ------------------------------------------------------------------------------

    def _resume_reading(self) -> None:
        was_reading = self._reading
        super()._resume_reading()
        if not was_reading and self._reading and self._handshaken and self._tls.pending():
            self._loop.call_soon(self._on_readable)  # decrypted bytes wait inside OpenSSL

    def _on_readable(self) -> None:
        if not self._handshaken:
            self._handshake()
            return
        while self._reading and not self._dead:
            if self._listener.budget.exhausted and not self._frames.in_frame():
                self._wait_for_memory()
                return
            if not self._receive():
                return
            self._take_frames()
            if not self._tls.pending():
                return

    def _receive(self) -> bool:
        """One decrypted read into the frame reader; False when nothing more can be read now."""
        try:
            received = self._tls.recv_into(self._frames.get_buffer())
        except ssl.SSLWantReadError:
            return False
        except ssl.SSLWantWriteError:
            self._read_wants_write = True
            self._start_writer()
            return False
        except (BlockingIOError, InterruptedError):
            return False
        except ProtocolError as exc:  # a size prefix above the limit, found while compacting
            self._listener.frame_error(self.peer, exc)
            self._close_after_owed()
            return False
        except OSError as exc:  # ssl.SSLError included
            self.abort(f"read failed: {exc}")
            return False
        if not received:
            self.abort("peer closed the connection")
            return False
        self._frames.buffer_updated(received)
        self.last_active_s = self._loop.time()
        return True

    # --- writing ------------------------------------------------------------------------------

    def _start_writer(self) -> None:
        if not self._writing and not self._dead:
            self._loop.add_writer(self._fd, self._on_writable)
            self._writing = True

    def _stop_writer(self) -> None:
        if self._writing:
            self._loop.remove_writer(self._fd)
            self._writing = False

    def _on_writable(self) -> None:
        if not self._handshaken:
            self._handshake()
            return
        if self._read_wants_write:
            self._read_wants_write = False
            self._on_readable()
            if self._dead:
                return
        self._write()

    def _write(self) -> None:
        try:
            while self._piece is not None or self._out:
                if self._piece is None:
                    self._piece = self._next_piece()
                piece = self._piece
                sent = self._tls.send(piece)
                self._buffered -= sent
                self._piece = None if sent == len(piece) else memoryview(piece)[sent:]
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError, InterruptedError):
            self._start_writer()  # (WantRead, a renegotiation, is refused by TLS 1.3 anyway)
            return
        except OSError as exc:
            self.abort(f"write failed: {exc}")
            return
        self.last_active_s = self._loop.time()
        if not self._read_wants_write:
            self._stop_writer()
        if self._closing and not self._pending:
            self.abort("closed after protocol error")
        else:
            self._apply_backpressure()

    def _next_piece(self) -> bytes | memoryview:
        """Take at most TLS_PIECE_BYTES off the output queue (which is not empty)."""
        out = self._out
        head = out[0]
        if isinstance(head, FileRegion):
            data = os.pread(head.fd, min(head.size, TLS_PIECE_BYTES), head.offset)
            if not data:
                raise OSError(errno.EIO, "segment file ended before the region did")
            if len(data) < head.size:
                out[0] = FileRegion(head.fd, head.offset + len(data), head.size - len(data))
            else:
                out.popleft()
                os.close(head.fd)
            return data
        parts: list[bytes | bytearray | memoryview] = []
        total = 0
        while out and total < TLS_PIECE_BYTES:
            chunk = out[0]
            if isinstance(chunk, FileRegion):
                break
            room = TLS_PIECE_BYTES - total
            if len(chunk) > room:
                view = memoryview(chunk)
                parts.append(view[:room])
                out[0] = view[room:]
                total += room
                break
            parts.append(chunk)
            out.popleft()
            total += len(chunk)
        if len(parts) == 1:
            return memoryview(parts[0])
        return b"".join(parts)

    # --- closing ------------------------------------------------------------------------------

    def abort(self, reason: str) -> None:
        self._handshake_timer.cancel()
        self._piece = None
        super().abort(reason)
