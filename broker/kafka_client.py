"""The asyncio Kafka client shell: one pipelined connection, and a client of the controller quorum.

Theory of operation
-------------------
Everything a client decides lives in the sans-I/O core, :mod:`kafka_protocol.client`: this
module owns only the socket, the reader task and the waiting.  :class:`KafkaConnection` pairs one
TCP connection with one :class:`~kafka_protocol.client.connection.ClientConnection`.
``send()`` queues the request there (which picks the correlation id), parks a future under its
correlation id, writes the queued bytes and waits; the reader task feeds whatever bytes arrive
to the core (which enforces :data:`MAX_FRAME_BYTES`, matches each frame to the oldest request in
flight and decodes it at the version it was sent with) and resolves the futures.  Any number of
requests may be in flight (up to :data:`MAX_IN_FLIGHT_REQUESTS`); the peer answers them in
order.  When the connection fails (EOF, reset, a frame we cannot accept) every pending future
fails with :class:`KafkaConnectionError` and so does every later ``send()``.  A caller that
gives up (cancellation) abandons its request in the core, so that the late answer is still
matched, then dropped undecoded.

Opening a connection with a :class:`~broker.security.client_security.ClientSecurity` first
does the TLS handshake (``ssl.endpoint.identification.algorithm=https``: the peer's certificate
must name the host), then ApiVersions, then on SASL listeners SaslHandshake v1 and
SaslAuthenticate rounds (v1+ when the peer has them) driven by :mod:`kafka_protocol.sasl`'s
client state machines.  Versions are negotiated with the core's KIP-35/KIP-511 steps
(ApiVersions v3 first, once more lower if the peer answers UNSUPPORTED_VERSION).
``version_for(api_key, max)`` is then the highest version both sides support.

:class:`ControllerClient` sends requests to a controller quorum given as bootstrap addresses.
It keeps two *routes*, each one connection: one to the controller it believes active (admin
requests, registration, heartbeats) and one to any reachable controller (metadata fetches, so a
500 ms long poll never delays a heartbeat queued behind it).  A route that fails (connection
lost, no answer within ``request_timeout_ms``, or NOT_CONTROLLER on the active route) closes its
connection and moves to the next bootstrap address; the request is retried with backoff (50 ms
doubling to 1 s) until the caller's deadline (``asyncio.timeout``).  A caller whose deadline
expires, or who gets an answer only another controller can cure, calls ``rotate()``.

Local failures (remote outcomes are Kafka error codes in the responses)::

    KafkaClientError
    ├── KafkaConnectionError     connect failed, connection lost or closed, ApiVersions refused
    │                            (also a ConnectionError, so an OSError)
    ├── AuthenticationError      the peer refused our SASL login (or our TLS certificate):
    │                            not retriable with the same credentials
    └── NoUsableVersionError     the peer supports no version of the api that we can send

A response that does not decode raises the codec's ``RemoteProtocolError`` from ``send()``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Sequence
from typing import Final

from broker.security.client_security import ClientSecurity
from kafka_protocol._codec import FileRegion, Request, Response
from kafka_protocol.api_versions import API_VERSIONS_VERSION
from kafka_protocol.client import backoff
from kafka_protocol.client.connection import ClientConnection, Received
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.framing import DEFAULT_MAX_FRAME_BYTES
from kafka_protocol.messages import (
    ApiVersionsResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kafka_protocol.sasl import SaslAuthenticationError, client_for

log = logging.getLogger(__name__)

MAX_FRAME_BYTES: Final = DEFAULT_MAX_FRAME_BYTES  # 100 MiB, as socket.request.max.bytes
MAX_IN_FLIGHT_REQUESTS: Final = 1000
CLIENT_SOFTWARE_NAME: Final = "kraft-platform-broker"
CLIENT_SOFTWARE_VERSION: Final = "0.1.0"
DEFAULT_REQUEST_TIMEOUT_MS: Final = 5000
CONTROLLER_RETRY_MAX_S: Final = 0.2
AUTHENTICATION_RETRY_S: Final = 1.0  # after a refused login (Kafka's reconnect.backoff.max.ms)
READ_CHUNK_BYTES: Final = 256 * 1024  # one read from the socket
# Per-item result lists of the forwarded admin responses (broker/controller_channel.py's
# FORWARDED table) checked for NOT_CONTROLLER.
_RESULT_LISTS: Final = ("topics", "responses", "results")


class KafkaClientError(Exception):
    """Base of the local failures of this module."""


class KafkaConnectionError(KafkaClientError, ConnectionError):
    """The connection could not be opened, was lost or closed, or refused ApiVersions."""


class AuthenticationError(KafkaClientError):
    """The peer refused this node's login: wrong credentials, a mechanism it does not enable,
    or a TLS certificate it does not trust.  Retrying with the same settings cannot help."""


class NoUsableVersionError(KafkaClientError):
    """The peer supports no version of an api that we can send (or does not know the api)."""

    def __init__(self, api_key: int, max_version: int, peer: str) -> None:
        super().__init__(f"{peer} supports no version of api {api_key} up to v{max_version}")
        self.api_key = api_key


class Backoff(backoff.Backoff):
    """The core's retry backoff, slept on the event loop: 50 ms doubling to 1 s by default.
    Without jitter: the brokers' own retries (heartbeats, metadata fetches) are few and spread
    out already, and their timing is what the failover tests were tuned for."""

    def __init__(self, initial_s: float = 0.05, max_s: float = 1.0) -> None:
        assert 0 < initial_s <= max_s
        super().__init__(initial_s, max_s, jitter=0.0)

    async def sleep(self) -> None:
        await asyncio.sleep(self.next_delay())


class KafkaConnection:
    """One Kafka connection with pipelined requests (see the module docstring)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client_id: str,
        peer: str,
    ) -> None:
        self.peer = peer
        self.client_id = client_id
        self._reader = reader
        self._writer = writer
        self._protocol = ClientConnection(
            client_id,
            software_name=CLIENT_SOFTWARE_NAME,
            software_version=CLIENT_SOFTWARE_VERSION,
            max_frame_bytes=MAX_FRAME_BYTES,
        )
        self._futures: dict[int, asyncio.Future[Response]] = {}
        self._failure: str | None = None
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT_REQUESTS)
        self._read_task = asyncio.create_task(self._read_loop(), name=f"kafka-reader {peer}")

    @classmethod
    async def open(
        cls, host: str, port: int, client_id: str, security: ClientSecurity | None = None
    ) -> KafkaConnection:
        """Connect (TLS first on SSL listeners), negotiate versions with ApiVersions, and log
        in with SASL on SASL listeners (see the module docstring)."""
        peer = f"{host}:{port}"
        context = security.ssl_context if security is not None else None
        try:
            if context is not None:
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=context, server_hostname=host
                )
            else:
                reader, writer = await asyncio.open_connection(host, port)
        except ssl.SSLCertVerificationError as exc:
            raise AuthenticationError(
                f"TLS handshake with {peer} failed: {exc.verify_message or exc}"
            ) from exc
        except ssl.SSLError as exc:
            raise KafkaConnectionError(f"TLS handshake with {peer} failed: {exc}") from exc
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {peer}: {exc}") from exc
        conn = cls(reader, writer, client_id, peer)
        try:
            await conn._negotiate_api_versions()
            if security is not None and security.protocol.uses_sasl:
                await conn._authenticate(security)
        except ProtocolError as exc:
            conn.close()
            raise KafkaConnectionError(f"{peer} sent a bad ApiVersions response: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    @property
    def closed(self) -> bool:
        return self._failure is not None

    @property
    def api_versions(self) -> dict[int, tuple[int, int]]:
        """The peer's (min, max) version per api key."""
        return self._protocol.api_versions

    def version_for(self, api_key: int, max_supported: int) -> int | None:
        """The highest version of ``api_key`` both sides support, at most ``max_supported``."""
        return self._protocol.version_for(api_key, high=max_supported)

    async def request(self, request: Request, max_version: int, min_version: int = 0) -> Response:
        """Send ``request`` at the highest version both sides support in
        ``[min_version, max_version]``; :class:`NoUsableVersionError` if there is none."""
        api_key = request.API_KEY
        assert api_key is not None, request.NAME
        version = self._protocol.version_for(api_key, min_version, max_version)
        if version is None:
            raise NoUsableVersionError(api_key, max_version, self.peer)
        return await self.send(request, version)

    async def send(self, request: Request, version: int) -> Response:
        """Send ``request`` at ``version`` and wait for its response."""
        async with self._in_flight:
            if self._failure is not None:
                raise KafkaConnectionError(self._failure)
            ticket = self._protocol.send_request(request, version)
            future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
            self._futures[ticket.correlation_id] = future
            chunks = self._protocol.data_to_send()
            self._writer.writelines(c for c in chunks if not isinstance(c, FileRegion))
            try:
                await self._writer.drain()
            except OSError as exc:
                self._fail(f"write to {self.peer} failed: {exc}")
            try:
                return await future
            except asyncio.CancelledError:  # the answer may still come: match it, drop it
                self._futures.pop(ticket.correlation_id, None)
                self._protocol.abandon(ticket.correlation_id)
                raise

    def close(self) -> None:
        """Close the connection; requests in flight fail with :class:`KafkaConnectionError`."""
        self._fail(f"connection to {self.peer} closed")
        self._read_task.cancel()

    async def wait_closed(self) -> None:
        """Wait until the reader task has finished (after :meth:`close` or a failure)."""
        await asyncio.wait([self._read_task])

    # --- internals ----------------------------------------------------------------------------

    async def _negotiate_api_versions(self) -> None:
        request = self._protocol.api_versions_request()
        version: int | None = API_VERSIONS_VERSION
        while version is not None:
            response = await self.send(request, version)
            assert isinstance(response, ApiVersionsResponse)
            try:
                version = self._protocol.on_api_versions(response, version)
            except ProtocolError as exc:
                raise KafkaConnectionError(f"{self.peer} {exc}") from None

    async def _authenticate(self, security: ClientSecurity) -> None:
        """SaslHandshake v1, then SaslAuthenticate until the mechanism completes."""
        mechanism = security.sasl_mechanism or "PLAIN"
        who = f"{self.peer} refused {mechanism} login of user {security.username!r}"
        handshake = await self.request(SaslHandshakeRequest(mechanism=mechanism), 1, 1)
        assert isinstance(handshake, SaslHandshakeResponse)
        if handshake.error_code != ErrorCode.NONE:
            raise AuthenticationError(
                f"{who}: {ErrorCode(handshake.error_code).name}"
                f" (it enables {', '.join(handshake.mechanisms) or 'none'})"
            )
        client = client_for(mechanism, security.username or "", security.password or "")
        token: bytes | None = client.first()
        while token is not None:
            response = await self.request(SaslAuthenticateRequest(auth_bytes=token), 2)
            assert isinstance(response, SaslAuthenticateResponse)
            if response.error_code != ErrorCode.NONE:
                reason = response.error_message or ErrorCode(response.error_code).name
                raise AuthenticationError(f"{who}: {reason}")
            try:
                token = client.step(bytes(response.auth_bytes))
            except SaslAuthenticationError as exc:
                raise AuthenticationError(f"{who}: {exc}") from None
        if not client.complete:
            raise AuthenticationError(f"{who}: the exchange ended before it completed")

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._reader.read(READ_CHUNK_BYTES)
                if not data:
                    raise ConnectionResetError("closed by the peer")
                for received in self._protocol.receive_bytes(data):
                    self._deliver(received)
        except (OSError, ProtocolError) as exc:
            self._fail(f"connection to {self.peer} lost: {exc!r}")
        except Exception as exc:  # a bug here must not leave requests waiting forever
            log.exception("reader of the connection to %s failed", self.peer)
            self._fail(f"connection to {self.peer} failed: {exc!r}")

    def _deliver(self, received: Received) -> None:
        future = self._futures.pop(received.correlation_id, None)
        if future is None or future.done():  # the caller gave up waiting
            return
        if isinstance(received.response, ProtocolError):  # the framing is still intact
            future.set_exception(received.response)
        else:
            future.set_result(received.response)

    def _fail(self, reason: str) -> None:
        if self._failure is not None:
            return
        self._failure = reason
        log.debug("%s", reason)
        futures, self._futures = self._futures, {}
        self._protocol.reset()
        for future in futures.values():
            if not future.done():
                future.set_exception(KafkaConnectionError(reason))
        self._writer.close()


def is_not_controller(response: Response) -> bool:
    """True if ``response`` says NOT_CONTROLLER: at the top level, or for every item."""
    top = getattr(response, "error_code", None)
    if top is not None:
        return bool(top == ErrorCode.NOT_CONTROLLER)
    for name in _RESULT_LISTS:
        items = getattr(response, name, None)
        if isinstance(items, list) and items and hasattr(items[0], "error_code"):
            return all(item.error_code == ErrorCode.NOT_CONTROLLER for item in items)
    return False


class _Route:
    """The connection one kind of traffic goes to, and the bootstrap address it points at."""

    __slots__ = ("conn", "index", "lock", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.index = 0
        self.conn: KafkaConnection | None = None
        self.lock = asyncio.Lock()  # one connection attempt at a time


class ControllerClient:
    """Requests to the controller quorum (see the module docstring)."""

    def __init__(
        self,
        bootstrap: Sequence[tuple[str, int]],
        client_id: str,
        *,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        security: ClientSecurity | None = None,
    ) -> None:
        assert bootstrap, "no controller addresses"
        self.bootstrap = list(bootstrap)
        self.client_id = client_id
        self.security = security
        self._auth_failure: str | None = None  # the last one logged (logged once until cured)
        self.request_timeout_s = request_timeout_ms / 1000
        self._active = _Route("active controller")
        self._any = _Route("any controller")
        self._closed = False
        # bootstrap indexes whose last connection attempt was refused: no process listens
        self._refused: set[int] = set()

    async def request(
        self,
        request: Request,
        max_version: int,
        *,
        to_active: bool = True,
        unless_none_listens: bool = False,
    ) -> Response:
        """Send ``request`` at the highest common version up to ``max_version``; retry on
        connection failures (and NOT_CONTROLLER when ``to_active``) until the caller's
        deadline.  Raises :class:`NoUsableVersionError` if the controller cannot take it.
        ``unless_none_listens``: raise :class:`KafkaConnectionError` instead of retrying once
        every controller address has refused the connection (no controller process runs)."""
        route = self._active if to_active else self._any
        # Short and flat: during an election no controller is active for a few hundred ms,
        # and a growing backoff would add up to a second to every failover.
        backoff = Backoff(0.05, CONTROLLER_RETRY_MAX_S)
        failures = 0
        while True:
            if self._closed:
                raise KafkaConnectionError("controller client closed")
            try:
                response = await self._attempt(route, request, max_version, to_active)
            except AuthenticationError as exc:
                self._log_auth_failure(str(exc))
                await asyncio.sleep(AUTHENTICATION_RETRY_S)  # a refused login is not cured soon
                continue
            if response is not None:
                self._auth_failure = None
                return response
            # Try every controller once before backing off: during a failover the new
            # active controller is usually the next address, and a backoff between each
            # one would delay heartbeats past the brokers' session timeout.
            failures += 1
            if unless_none_listens and self.none_listening():
                raise KafkaConnectionError(
                    "no controller is running: every controller address refused the connection"
                )
            if failures % len(self.bootstrap) == 0:
                await backoff.sleep()

    def none_listening(self) -> bool:
        """Whether the last connection attempt to every controller address was refused."""
        return len(self._refused) == len(self.bootstrap)

    def _log_auth_failure(self, reason: str) -> None:
        """Once per distinct failure until a request succeeds: the node keeps retrying (an
        operator may fix the credentials) without a line per attempt."""
        if reason != self._auth_failure:
            log.warning("cannot authenticate to the controller: %s; retrying", reason)
            self._auth_failure = reason

    def rotate(self, *, to_active: bool, reason: str) -> None:
        """Drop the route's connection and move it to the next address: the caller found the
        controller there unusable (no answer within the caller's deadline, or an error only
        another controller can cure, such as NOT_LEADER_OR_FOLLOWER to a fetch)."""
        route = self._active if to_active else self._any
        if route.conn is not None:
            route.conn.close()
            route.conn = None
        self._advance(route, reason)

    def close(self) -> None:
        self._closed = True
        for route in (self._active, self._any):
            if route.conn is not None:
                route.conn.close()
                route.conn = None

    async def _attempt(
        self, route: _Route, request: Request, max_version: int, to_active: bool
    ) -> Response | None:
        """One try on the route's connection; None (after moving the route on) if it failed."""
        conn: KafkaConnection | None = None
        try:
            async with asyncio.timeout(self.request_timeout_s):
                conn = await self._connection(route)
                response = await conn.request(request, max_version)
        except TimeoutError:
            self._move_on(route, conn, f"no answer within {self.request_timeout_s:g} s")
            return None
        except OSError as exc:  # KafkaConnectionError included
            self._move_on(route, conn, str(exc))
            return None
        if to_active and is_not_controller(response):
            self._move_on(route, conn, f"answered {request.NAME} with NOT_CONTROLLER")
            return None
        return response

    async def _connection(self, route: _Route) -> KafkaConnection:
        async with route.lock:
            if route.conn is not None and not route.conn.closed:
                return route.conn
            route.conn = None
            index = route.index
            host, port = self.bootstrap[index]
            try:
                route.conn = await KafkaConnection.open(host, port, self.client_id, self.security)
            except (OSError, AuthenticationError, asyncio.CancelledError) as exc:  # re-raised
                if isinstance(exc.__cause__, ConnectionRefusedError):
                    self._refused.add(index)
                self._advance(route, f"cannot be reached ({exc!r})")
                raise
            self._refused.discard(index)
            return route.conn

    def _move_on(self, route: _Route, conn: KafkaConnection | None, reason: str) -> None:
        """Drop ``conn`` and point the route at the next address, unless someone already did
        (or the connection attempt itself failed, which moved the route already)."""
        if conn is None or route.conn is not conn:
            return
        conn.close()
        route.conn = None
        self._advance(route, reason)

    def _advance(self, route: _Route, reason: str) -> None:
        host, port = self.bootstrap[route.index]
        route.index = (route.index + 1) % len(self.bootstrap)
        next_host, next_port = self.bootstrap[route.index]
        log.debug(
            "%s route: controller %s:%d %s; trying %s:%d",
            route.name,
            host,
            port,
            reason,
            next_host,
            next_port,
        )
