"""One blocking connection to one broker, and the retry clock of an operation: the blocking
shell over the sans-I/O client core (:mod:`kafka_protocol.client`).

Theory of operation
-------------------
A :class:`BrokerConnection` is created without a socket; the first request opens it (TCP,
``TCP_NODELAY``, within ``socket.connection.setup.timeout.ms``) and negotiates versions with
the core's KIP-35/KIP-511 steps (ApiVersions v3, once more lower if the broker answers
UNSUPPORTED_VERSION).  :meth:`BrokerConnection.version_for` is then the highest version of an
api that both sides support, or :class:`UnsupportedBroker`.

Requests may be pipelined: :meth:`~BrokerConnection.send` has the core encode a request (and
pick its correlation id), writes the bytes and returns an :class:`InFlight` ticket;
:meth:`~BrokerConnection.receive` reads frames and has the core match them, in order (a broker
answers in request order), until the ticket's: the answers ahead of it are abandoned, matched
and dropped undecoded.  A response frame is read with ``recv_into`` straight into one buffer of
its exact size (after the core checks its size prefix against the client's frame limit), so a
50 MB fetch costs one allocation and no copies; the records of a decoded Fetch response are
views into it.  Frames of ``LARGE_FRAME_BYTES`` or more come from Arrow's memory pool, which
keeps its pages between allocations: a fresh ``bytearray`` of 8 MiB is zeroed and faults in
2,000 pages on every fetch, which measured as two thirds of the time to fill it and decode it
into Arrow.

Every read and write is bounded by the deadline the caller passes (monotonic seconds, from
``kafka_protocol.clock``). Any failure (refused, reset, EOF, a deadline passed mid-frame, a
frame above the limit or that does not decode) closes the connection, so a late answer can never
be taken for the next request's, and raises :class:`ConnectionFailed` (or
:class:`InvalidResponse`); the next request opens a new socket. Nothing here retries:
:class:`Attempts` is the clock the client's operations retry with (the core's
:class:`~kafka_protocol.client.backoff.Backoff`: ``retry.backoff.ms`` doubling to
``retry.backoff.max.ms``, with Kafka's 20 % jitter, until ``default.api.timeout.ms``).
"""

from __future__ import annotations

import collections
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeAlias

import pyarrow as pa

from kafka_protocol._codec import Chunk, FileRegion, Request, Response
from kafka_protocol.api_versions import API_VERSIONS_VERSION
from kafka_protocol.client.backoff import Backoff
from kafka_protocol.client.connection import SIZE_BYTES, ClientConnection, InFlight
from kafka_protocol.client.metadata import parse_address
from kafka_protocol.clock import monotonic_s
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.framing import API_VERSIONS_KEY
from kafka_protocol.messages import ApiVersionsResponse
from spark_source._client_config import ClientConfig
from spark_source._client_types import (
    ConnectionFailed,
    KafkaClientError,
    OperationTimedOut,
    UnsupportedBroker,
)

log = logging.getLogger(__name__)

CLIENT_SOFTWARE_NAME: Final = "kraft-spark-client"
CLIENT_SOFTWARE_VERSION: Final = "0.1.0"
MAX_IN_FLIGHT: Final = 5  # requests pipelined on one connection
LARGE_FRAME_BYTES: Final = 256 * 1024

__all__ = ["Attempts", "BrokerConnection", "InFlight", "InvalidResponse", "parse_address"]


# A request, or how to build it at the version chosen (fields a version lacks must keep their
# defaults, or the codec refuses to encode).
RequestFor: TypeAlias = Request | Callable[[int], Request]


class InvalidResponse(KafkaClientError):
    """A broker sent a frame above the size limit, or bytes that do not decode."""


@dataclass(frozen=True, slots=True)
class Versions:
    """The versions of one api this client can send: ``[low, high]``."""

    api_key: int
    low: int
    high: int


class BrokerConnection:
    """A lazily opened, blocking connection to one broker (see the module docstring)."""

    def __init__(self, host: str, port: int, config: ClientConfig) -> None:
        self.host = host
        self.port = port
        self.config = config
        self._sock: socket.socket | None = None
        self._protocol = ClientConnection(
            config.client_id,
            software_name=CLIENT_SOFTWARE_NAME,
            software_version=CLIENT_SOFTWARE_VERSION,
            max_frame_bytes=config.max_frame_bytes,
        )
        self._size_buf = bytearray(SIZE_BYTES)

    @property
    def peer(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_open(self) -> bool:
        return self._sock is not None

    @property
    def in_flight(self) -> int:
        return self._protocol.in_flight

    def open(self, deadline: float) -> None:
        """Connect and negotiate versions (nothing if already open)."""
        if self._sock is not None:
            return
        timeout = min(_remaining(deadline), self.config.connection_setup_timeout_ms / 1000)
        if timeout <= 0:
            raise ConnectionFailed(f"no time left to connect to {self.peer}")
        try:
            sock = socket.create_connection((self.host, self.port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.config.receive_buffer_bytes > 0:
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_RCVBUF, self.config.receive_buffer_bytes
                )
            if self.config.send_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.config.send_buffer_bytes)
        except OSError as exc:
            raise ConnectionFailed(f"cannot connect to {self.peer}: {exc}") from exc
        self._sock = sock
        try:
            self._negotiate(deadline)
        except BaseException:
            self.close()
            raise

    def version_for(self, versions: Versions) -> int:
        """The highest version of the api that both sides support."""
        version = self._protocol.version_for(versions.api_key, versions.low, versions.high)
        if version is not None:
            return version
        theirs = self._protocol.peer_range(versions.api_key)
        offered = "none" if theirs is None else f"v{theirs[0]}-v{theirs[1]}"
        raise UnsupportedBroker(
            f"broker {self.peer} supports api {versions.api_key} at {offered}; this client needs"
            f" a version in v{versions.low}-v{versions.high}",
            versions.api_key,
        )

    def request(self, request: RequestFor, versions: Versions, deadline: float) -> Response:
        """Open if needed, send at the best common version, and wait for the answer."""
        return self.receive(self.submit(request, versions, deadline), deadline)

    def submit(self, request: RequestFor, versions: Versions, deadline: float) -> InFlight:
        """Open if needed and send at the best common version; the answer is to receive."""
        self.open(deadline)
        version = self.version_for(versions)
        body = request if isinstance(request, Request) else request(version)
        return self.send(body, version, deadline)

    def send(self, request: Request, version: int, deadline: float) -> InFlight:
        """Write one request (the connection must be open)."""
        assert self._sock is not None
        assert self._protocol.in_flight < MAX_IN_FLIGHT, "too many requests in flight"
        try:
            ticket = self._protocol.send_request(request, version)
        except ProtocolError as exc:  # our bug, not the broker's: the connection is intact
            raise KafkaClientError(f"cannot encode {request.NAME} v{version}: {exc}") from exc
        self._send_chunks(self._protocol.data_to_send(), deadline)
        return ticket

    def receive(self, ticket: InFlight, deadline: float) -> Response:
        """The answer to ``ticket``; answers to earlier, abandoned tickets are dropped."""
        if not self._protocol.is_in_flight(ticket):
            raise ConnectionFailed(f"the connection to {self.peer} was closed before its answer")
        self._protocol.abandon_before(ticket)
        while True:
            frame = self._read_frame(deadline)
            try:
                received = self._protocol.receive_frame(frame)
            except ProtocolError as exc:  # out of order: the stream cannot be trusted
                self.close()
                raise InvalidResponse(f"{self.peer} {exc}") from exc
            if received is None:
                continue
            assert received.correlation_id == ticket.correlation_id
            if isinstance(received.response, ProtocolError):
                self.close()
                raise InvalidResponse(
                    f"{self.peer} sent an undecodable answer: {received.response}"
                ) from received.response
            return received.response

    def abandon(self, ticket: InFlight) -> None:
        """Its answer is no longer wanted.  Closing is cheaper than reading a large answer,
        but only if no other request is in flight on this connection; else the answer is
        dropped when a later one is received."""
        if self._protocol.in_flight == 1 and self._protocol.is_in_flight(ticket):
            self.close()
        else:
            self._protocol.abandon(ticket.correlation_id)

    def close(self) -> None:
        """Close the socket; requests in flight are lost (their tickets fail)."""
        sock, self._sock = self._sock, None
        self._protocol.reset()
        if sock is not None:
            sock.close()

    # --- internals ------------------------------------------------------------------------------

    def _negotiate(self, deadline: float) -> None:
        request = self._protocol.api_versions_request()
        version: int | None = API_VERSIONS_VERSION
        while version is not None:
            response = self.receive(self.send(request, version, deadline), deadline)
            assert isinstance(response, ApiVersionsResponse)
            try:
                version = self._protocol.on_api_versions(response, version)
            except ProtocolError as exc:
                raise UnsupportedBroker(f"{self.peer} {exc}", API_VERSIONS_KEY) from None

    def _send_chunks(self, chunks: list[Chunk], deadline: float) -> None:
        views = collections.deque(
            memoryview(c).cast("B") for c in chunks if not isinstance(c, FileRegion) and len(c)
        )
        assert len(views) == sum(1 for c in chunks if len(c)), "file regions are for brokers"
        sock = self._socket()
        try:
            while views:
                sock.settimeout(self._timeout(deadline))
                sent = sock.sendmsg(list(views)[:64])
                while sent:
                    head = views[0]
                    if sent >= len(head):
                        sent -= len(head)
                        views.popleft()
                    else:
                        views[0] = head[sent:]
                        sent = 0
        except OSError as exc:
            self.close()
            raise ConnectionFailed(f"sending to {self.peer} failed: {exc!r}") from exc

    def _read_frame(self, deadline: float) -> bytearray | memoryview:
        size_view = memoryview(self._size_buf)
        self._recv_into(size_view, deadline)
        try:
            size = self._protocol.frame_size(self._size_buf)
        except ProtocolError:
            self.close()
            announced = int.from_bytes(self._size_buf, "big", signed=True)
            raise InvalidResponse(
                f"{self.peer} sent a frame of {announced} bytes (the limit is"
                f" {self.config.max_frame_bytes}; raise fetch.max.bytes to allow larger ones)"
            ) from None
        frame = frame_buffer(size)
        self._recv_into(memoryview(frame), deadline)
        return frame

    def _recv_into(self, view: memoryview, deadline: float) -> None:
        sock = self._socket()
        got, size = 0, len(view)
        try:
            while got < size:
                sock.settimeout(self._timeout(deadline))
                n = sock.recv_into(view[got:], size - got)
                if n == 0:
                    raise ConnectionResetError(f"closed by the broker after {got} of {size} bytes")
                got += n
        except OSError as exc:
            self.close()
            if isinstance(exc, TimeoutError):
                raise ConnectionFailed(f"no answer from {self.peer} in time") from exc
            raise ConnectionFailed(f"receiving from {self.peer} failed: {exc!r}") from exc

    def _socket(self) -> socket.socket:
        if self._sock is None:
            raise ConnectionFailed(f"the connection to {self.peer} is closed")
        return self._sock

    def _timeout(self, deadline: float) -> float:
        left = _remaining(deadline)
        if left <= 0:
            raise TimeoutError("deadline passed")
        return left


def _remaining(deadline: float) -> float:
    return deadline - monotonic_s()


class Attempts:
    """The clock of one operation: its deadline, the backoff between tries, and what failed
    last (what the operation raises when its time is up)."""

    def __init__(self, config: ClientConfig, what: str, timeout_ms: int | None = None) -> None:
        self.config = config
        self.what = what
        self.timeout_ms = config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        self.deadline = monotonic_s() + self.timeout_ms / 1000
        self._backoff = Backoff(config.retry_backoff_ms / 1000, config.retry_backoff_max_ms / 1000)
        self._last: str = "no attempt finished"
        self._last_error: ErrorCode | None = None
        self._last_connection: ConnectionFailed | None = None

    def request_deadline(self, extra_ms: int = 0) -> float:
        """When one request sent now must have been answered."""
        per_request = monotonic_s() + (self.config.request_timeout_ms + extra_ms) / 1000
        return min(self.deadline, per_request)

    def note(self, failure: ErrorCode | ConnectionFailed | str) -> None:
        """Remember why the last try failed."""
        if isinstance(failure, ErrorCode):
            self._last, self._last_error, self._last_connection = failure.name, failure, None
        elif isinstance(failure, ConnectionFailed):
            self._last, self._last_error, self._last_connection = str(failure), None, failure
        else:
            self._last, self._last_error, self._last_connection = failure, None, None

    def progressed(self) -> None:
        """Something succeeded: restart the deadline and the backoff."""
        self.deadline = monotonic_s() + self.timeout_ms / 1000
        self._backoff.reset()

    def expired(self) -> bool:
        return monotonic_s() >= self.deadline

    def retry(self, failure: ErrorCode | ConnectionFailed | str | None = None) -> None:
        """Back off before the next try, or raise if the deadline has passed."""
        if failure is not None:
            self.note(failure)
        if self.expired():
            raise self.timed_out()
        self.pause()

    def pause(self) -> None:
        """Sleep the next backoff (never past the deadline)."""
        delay = self._backoff.next_delay()
        time.sleep(max(0.0, min(delay, _remaining(self.deadline))))

    def timed_out(self) -> KafkaClientError:
        message = f"{self.what} did not succeed within {self.timeout_ms} ms: {self._last}"
        if self._last_connection is not None:
            failed = ConnectionFailed(message)
            failed.__cause__ = self._last_connection
            return failed
        return OperationTimedOut(message, self._last_error)


def frame_buffer(size: int) -> bytearray | memoryview:
    """A writable buffer of ``size`` bytes for a frame to be received into (contents
    undefined): a ``bytearray`` when small, else a byte view of Arrow's memory pool."""
    if size < LARGE_FRAME_BYTES:
        return bytearray(size)
    return memoryview(pa.allocate_buffer(size)).cast("B")  # Arrow exports signed bytes
