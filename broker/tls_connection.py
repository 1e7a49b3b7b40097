"""A Kafka connection over TLS (SSL and SASL_SSL listeners).

Theory of operation
-------------------
The socket stays a raw non-blocking socket driven by ``loop.add_reader``/``add_writer``,
exactly as a plaintext :class:`~broker.connection.Connection` (which this class extends, so the
plaintext path has no TLS branch at all); TLS runs in an ``ssl.SSLObject`` between two
``ssl.MemoryBIO``s.  Why memory BIOs and not ``wrap_socket`` (an ``SSLSocket``): both were
built and measured with ``scripts/bench_tls.py`` (confluent-kafka, 1 KiB records, 150k per
run, 3 repeats).  Broker CPU per GB was the same within noise (produce 2.15 vs 2.34 CPU-s/GB,
consume 0.46 vs 0.46; plaintext: 0.52 and 0.20), while throughput, on a shared 2-core
machine, favoured memory BIOs (SSL produce 295 vs 122-188 MB/s, consume 610 vs 265-406).  The
deciding differences are structural: an ``SSLSocket`` reads the socket itself, two ``recv``
calls per TLS record (header, then body), and librdkafka writes small records (1.8 KiB on
average, measured), so a produce costs about a thousand syscalls per MB; with memory BIOs one
``recv`` takes up to :data:`TLS_READ_BYTES` of ciphertext and the records are decrypted from
memory in a tight loop, and a 256 KiB piece is encrypted into the outgoing BIO and sent with
one ``send`` instead of one write per 16 KiB record.  Nothing waits inside OpenSSL unseen by
the event loop (the ``pending()`` trap of an ``SSLSocket``), and a failed handshake's alert
can be flushed.  The price is one extra copy of each byte in each direction.  What remains
per byte is the cipher and one ``SSLObject.read`` call per TLS record.

Handshake: ``do_handshake()`` runs on each arrival of bytes until it completes, its output
flushed to the socket, for at most ``ListenerLimits.tls_handshake_timeout_ms`` (a peer that
connects and never completes the handshake would otherwise hold a connection slot until
``connections.max.idle.ms``).  A failed handshake (plaintext on a TLS port, a missing or
untrusted client certificate, no common protocol or cipher) sends OpenSSL's alert if the
socket takes it, logs one rate-limited line per listener and closes the connection.  Once
complete, the client certificate (when one was given) becomes the session's principal through
``ListenerSecurity.principal_of_certificate`` (on SASL_SSL the SASL identity replaces it).

Reading: ciphertext that arrived may hold more records than the frame reader's buffer takes;
decrypting goes on while the incoming BIO or OpenSSL (``pending()``) holds bytes, and resuming
a paused connection with bytes held schedules a read (the socket will not become readable for
them).  Writing: TLS cannot use ``sendfile`` nor ``sendmsg``: small chunks are joined, a large
chunk is sliced (no copy), and a :class:`FileRegion` (fetch) is read with ``os.pread`` one
:data:`TLS_PIECE_BYTES` piece at a time, so a 50 MiB fetch holds one piece (and its
ciphertext) in memory, not 50 MiB.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import ssl
from typing import Final, cast

from broker.connection import Connection, ConnectionOwner
from kafka_protocol._codec import FileRegion
from kafka_protocol.exceptions import ProtocolError

TLS_PIECE_BYTES: Final = 256 * 1024  # plaintext encrypted per send
TLS_READ_BYTES: Final = 256 * 1024  # ciphertext taken per recv
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
    __slots__ = (
        "_handshake_failing",
        "_handshake_timer",
        "_handshaken",
        "_incoming",
        "_outgoing",
        "_raw_out",
        "_tls",
    )

    def __init__(self, listener: ConnectionOwner, sock: socket.socket, ip: str, peer: str) -> None:
        context = listener.security.ssl_context
        assert context is not None
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._handshaken = False
        self._handshake_failing = False  # the alert is sent: close after a delay
        self._raw_out: memoryview | None = None  # ciphertext the socket has not taken yet
        timeout_s = listener.limits.tls_handshake_timeout_ms / 1000
        self._handshake_timer = listener.loop.call_later(timeout_s, self._handshake_timed_out)
        super().__init__(listener, sock, ip, peer)

    # --- handshake ----------------------------------------------------------------------------

    def _handshake(self) -> None:
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            self._write()  # our part of the handshake so far
            return
        except ssl.SSLError as exc:
            self._handshake_failed(_failure_text(exc), alert=True)
            return
        self._handshaken = True
        self._handshake_timer.cancel()
        security = self._listener.security
        cert = self._tls.getpeercert()
        if cert and security.principal_of_certificate is not None:
            self.session.principal = security.principal_of_certificate(cert)
        self._write()  # the end of the handshake (TLS 1.3: session tickets)

    def _handshake_failed(self, reason: str, alert: bool = False) -> None:
        self._listener.handshake_failures.warn(
            self._loop.time(),
            "TLS handshake failed listener=%s peer=%s reason=%s",
            self._listener.name,
            self.peer,
            reason,
        )
        if not alert:
            self.abort(f"TLS handshake failed: {reason}")
            return
        # Our alert goes out and our side ends (FIN), and the socket is closed only after
        # connection.failed.authentication.delay.ms, what the client still sends being read
        # and dropped: closed with unread bytes, the connection would be reset, and a reset
        # makes the client's kernel drop the alert before the client reads why (it would see a
        # transport failure instead of the TLS error).  Kafka delays this close too.
        with contextlib.suppress(OSError):
            self._sock.send(self._outgoing.read())
            self._sock.shutdown(socket.SHUT_WR)
        self._handshake_failing = True
        self._handshake_timer.cancel()
        delay_s = self._listener.security.failed_authentication_delay_ms / 1000
        self._handshake_timer = self._loop.call_later(
            delay_s, self.abort, f"TLS handshake failed: {reason}"
        )

    def _handshake_timed_out(self) -> None:
        if not self._handshaken and not self._dead:
            timeout_ms = self._listener.limits.tls_handshake_timeout_ms
            self._handshake_failed(f"not completed within {timeout_ms} ms")

    # --- reading ------------------------------------------------------------------------------

    def _holds_plaintext(self) -> bool:
        return self._handshaken and bool(self._incoming.pending or self._tls.pending())

    def _resume_reading(self) -> None:
        was_reading = self._reading
        super()._resume_reading()
        if not was_reading and self._reading and self._holds_plaintext():
            self._loop.call_soon(self._drain)  # the socket will not become readable for them

    def _on_readable(self) -> None:
        if self._handshake_failing:
            self._discard_input()
            return
        if self._handshaken and self._listener.budget.exhausted and not self._frames.in_frame():
            self._wait_for_memory()
            return
        data = self._receive("peer closed the connection")
        if data is None:
            return
        self._incoming.write(data)
        self.last_active_s = self._loop.time()
        if not self._handshaken:
            self._handshake()
            if not self._handshaken or self._dead:
                return
        self._drain()

    def _receive(self, closed_reason: str) -> bytes | None:
        """The ciphertext the socket holds; None if none yet, or if the connection ended (it
        is then aborted, ``closed_reason`` saying why when the peer closed it)."""
        try:
            data = self._sock.recv(TLS_READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            self.abort(f"read failed: {exc}")
            return None
        if not data:
            self.abort(closed_reason)
            return None
        return data

    def _discard_input(self) -> None:
        """After a failed handshake: read and drop until the peer closes or the delay ends."""
        self._receive("peer closed the connection after a failed TLS handshake")

    def _drain(self) -> None:
        """Decrypt what the incoming BIO holds into the frame reader, cutting frames, while
        the connection reads."""
        while self._reading and not self._dead:
            if self._listener.budget.exhausted and not self._frames.in_frame():
                self._wait_for_memory()
                return
            if not self._decrypt():
                return
            self._take_frames()
        if self._outgoing.pending and not self._dead and not self._writing:
            self._write()  # what reading produced (a TLS 1.3 key update answer)

    def _decrypt(self) -> bool:
        """Fill the frame reader's buffer from the TLS records held; False if none were."""
        try:
            buffer = self._frames.get_buffer()
        except ProtocolError as exc:  # a size prefix above the limit, found while compacting
            self._listener.frame_error(self.peer, exc)
            self._close_after_owed()
            return False
        read, room, filled = self._tls.read, len(buffer), 0
        try:
            while filled < room:
                # with a buffer, SSLObject.read returns the count (typeshed says bytes)
                count = cast(int, read(room - filled, buffer[filled:] if filled else buffer))
                if not count:  # close_notify: shows again on the next read
                    if not filled:
                        self.abort("peer closed the TLS session")
                        return False
                    break
                filled += count
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError as exc:
            self.abort(f"TLS read failed: {exc}")
            return False
        if not filled:
            return False
        self._frames.buffer_updated(filled)
        return True

    # --- writing ------------------------------------------------------------------------------

    def _on_writable(self) -> None:
        self._write()

    def _write(self) -> None:
        try:
            while True:
                raw = self._raw_out
                if raw is None:
                    if self._outgoing.pending:
                        raw = memoryview(self._outgoing.read())
                    elif self._out and self._handshaken:
                        piece = self._next_piece()
                        self._tls.write(piece)  # a memory BIO takes it all
                        self._buffered -= len(piece)
                        continue
                    else:
                        break
                sent = self._sock.send(raw)
                if sent < len(raw):
                    self._raw_out = raw[sent:]
                    raise BlockingIOError
                self._raw_out = None
        except (BlockingIOError, InterruptedError):
            if not self._writing and not self._dead:
                self._loop.add_writer(self._fd, self._on_writable)
                self._writing = True
            return
        except (OSError, ssl.SSLError) as exc:
            self.abort(f"write failed: {exc}")
            return
        self.last_active_s = self._loop.time()
        if self._writing:
            self._loop.remove_writer(self._fd)
            self._writing = False
        if self._closing and not self._pending and not self._out:
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
        self._raw_out = None
        super().abort(reason)
