"""Decode a request frame, route it to its API handler, encode the answer.

Handlers declare their version range next to their code (:class:`ApiHandler`); ApiVersions
advertises exactly that table.  A handler returns a response, ``None`` (acks=0: nothing is
sent), a :class:`Deferred` of either (resolved synchronously, e.g. by the append that
completes a produce), or an awaitable (run as a task the broker owns).

Unsupported versions: an ApiVersions request at a version we do not serve is answered as v0
with UNSUPPORTED_VERSION and our ranges, so that the client retries lower (KIP-511).  Any other
api key or version outside the advertised table closes the connection, as Kafka does; a frame
that does not decode does too.  Neither affects other connections.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

from broker.connection import close_regions
from broker.connection_limits import RateLimitedWarning
from broker.deferred import Deferred
from broker.metrics import BrokerMetrics
from broker.quotas.throttle import RequestThrottle, Throttle
from broker.security import authenticator
from broker.security.session import Session
from broker.server import CloseConnection, Reply, ReplyValue
from kafka_protocol._codec import Chunk, Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import LocalProtocolError, ProtocolError, UnsupportedVersionError
from kafka_protocol.framing import API_VERSIONS_KEY, decode_request, encode_response
from kafka_protocol.messages import ApiVersionsResponse, RequestHeader

log = logging.getLogger("broker.dispatcher")


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: RequestHeader
    session: Session  # the connection's listener, principal and authentication state
    received_s: float  # perf_counter, for latency metrics
    received_loop_time: float  # loop.time(), for deadlines

    @property
    def api_version(self) -> int:
        return self.header.request_api_version

    @property
    def peer(self) -> str:
        return self.session.peer


HandlerResult: TypeAlias = (
    "Response | Deferred[Response | None] | Awaitable[Response | None] | None"
)
HandlerFn: TypeAlias = Callable[[RequestContext, Any], HandlerResult]


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    min_version: int
    max_version: int
    handle: HandlerFn
    name: str


class CloseAfterResponse(Exception):
    """Raised by a handler: send ``response``, then close the connection ``delay_ms`` later
    (a failed SASL exchange: Kafka's ``connection.failed.authentication.delay.ms``)."""

    def __init__(self, response: Response, delay_ms: int = 0) -> None:
        super().__init__()
        self.response = response
        self.delay_ms = delay_ms


@dataclass(frozen=True, slots=True)
class _Cost:
    """What a request cost, for client quotas."""

    request: Request
    request_bytes: int
    handler_s: float  # the handler's synchronous part


class RequestDispatcher:
    def __init__(
        self,
        handlers: Iterable[ApiHandler],
        metrics: BrokerMetrics,
        throttle: RequestThrottle | None = None,
    ) -> None:
        self.handlers = {h.api_key: h for h in handlers}
        self.metrics = metrics
        self.throttle = throttle  # client quotas (None: none enforced)
        self.tasks: set[asyncio.Task[Any]] = set()
        self._refused = RateLimitedWarning()  # requests refused before SASL authentication

    @staticmethod
    def _loop_time() -> float:
        return asyncio.get_running_loop().time()

    def api_versions(self) -> list[ApiVersionsResponse.ApiVersion]:
        return [
            ApiVersionsResponse.ApiVersion(
                api_key=h.api_key, min_version=h.min_version, max_version=h.max_version
            )
            for h in sorted(self.handlers.values(), key=lambda h: h.api_key)
        ]

    def dispatch(self, frame: bytes | bytearray, session: Session) -> Reply:
        peer = session.peer
        if not session.authenticated and authenticator.expects_raw_token(session):
            return self._raw_sasl_token(frame, session)
        try:
            header, body = decode_request(frame)
        except UnsupportedVersionError as exc:
            return self._unsupported(exc, peer)
        except ProtocolError as exc:
            log.warning("undecodable request peer=%s error=%r", peer, str(exc))
            raise CloseConnection from None
        handler = self.handlers.get(header.request_api_key)
        version = header.request_api_version
        if handler is None or not handler.min_version <= version <= handler.max_version:
            if header.request_api_key == API_VERSIONS_KEY:
                return self._api_versions_fallback(header.correlation_id)
            log.warning(
                "unsupported request peer=%s api_key=%d version=%d",
                peer,
                header.request_api_key,
                version,
            )
            raise CloseConnection
        if not session.authenticated or session.expires_at_ms is not None:
            refused = authenticator.gate_reason(session, header.request_api_key)
            if refused is not None:
                self._refused.warn(
                    self._loop_time(), "closing connection peer=%s reason=%r", peer, refused
                )
                raise CloseConnection
        ctx = RequestContext(header, session, time.perf_counter(), self._loop_time())
        try:
            result = handler.handle(ctx, body)
        except CloseAfterResponse as close:
            chunks = self._encode(handler, ctx, close.response)
            return self._close_later(chunks, close.delay_ms)
        cost = None
        if self.throttle is not None:
            cost = _Cost(body, len(frame), time.perf_counter() - ctx.received_s)
        return self._finish(handler, ctx, cost, result)

    def _close_later(self, chunks: list[Chunk] | None, delay_ms: int) -> Reply:
        """Answer ``chunks`` and close, ``delay_ms`` from now (the answer is held)."""
        if delay_ms <= 0:
            raise CloseConnection(chunks)
        reply: Deferred[ReplyValue] = Deferred()
        asyncio.get_running_loop().call_later(
            delay_ms / 1000, reply.resolve, CloseConnection(chunks)
        )
        return reply

    def _raw_sasl_token(self, frame: bytes | bytearray, session: Session) -> Reply:
        """After SaslHandshake v0: a raw SASL token in, a size-prefixed raw token out."""
        try:
            token, _ = authenticator.step(session, bytes(frame), can_reauthenticate=False)
        except authenticator.SaslExchangeError:
            return self._close_later(None, session.security.failed_authentication_delay_ms)
        return [struct.pack(">i", len(token)) + token]

    def _finish(
        self, handler: ApiHandler, ctx: RequestContext, cost: _Cost | None, result: HandlerResult
    ) -> Reply:
        if result is None:
            if cost is not None:  # acks=0: throttled by muting alone
                self._throttled(ctx, cost, None, 0)
            return None
        if isinstance(result, Response):
            return self._encode(handler, ctx, result, cost)
        reply: Deferred[ReplyValue] = Deferred()

        def settle(response: Response | None) -> None:
            if response is None:
                if cost is not None:
                    self._throttled(ctx, cost, None, 0)
                reply.resolve(None)
                return
            try:
                chunks = self._encode(handler, ctx, response, cost)
            except CloseConnection as close:
                reply.resolve(close)
            except Exception:
                log.exception("cannot encode %s v%d response", handler.name, ctx.api_version)
                reply.resolve(CloseConnection())
            else:
                reply.resolve(chunks)

        if isinstance(result, Deferred):  # synchronous hand-off: no extra loop pass
            result.then(settle)
            return reply
        task = asyncio.ensure_future(result)
        self.tasks.add(task)

        def done(fut: asyncio.Future[Response | None]) -> None:
            self.tasks.discard(fut)
            if fut.cancelled():
                reply.resolve(CloseConnection())
            elif (exc := fut.exception()) is not None:
                log.error("handler %s failed", handler.name, exc_info=exc)
                self.metrics.request_counter(handler.name, ErrorCode.UNKNOWN_SERVER_ERROR).inc()
                reply.resolve(CloseConnection())
            else:
                settle(fut.result())

        task.add_done_callback(done)
        return reply

    def _encode(
        self,
        handler: ApiHandler,
        ctx: RequestContext,
        response: Response,
        cost: _Cost | None = None,
    ) -> list[Chunk]:
        self.metrics.request_counter(handler.name, getattr(response, "error_code", 0)).inc()
        try:
            chunks = encode_response(ctx.api_version, ctx.header.correlation_id, response)
            if cost is None:
                return chunks
            throttle = self._throttled(ctx, cost, response, sum(len(c) for c in chunks))
            if throttle.ms <= 0:
                return chunks
            if throttle.replacement is not None:
                close_regions(chunks)  # a throttled fetch: its records are not sent
                response = throttle.replacement
            elif getattr(response, "throttle_time_ms", throttle.ms) < throttle.ms:
                response.throttle_time_ms = throttle.ms  # type: ignore[attr-defined]
            else:
                return chunks
            return encode_response(ctx.api_version, ctx.header.correlation_id, response)
        except LocalProtocolError:
            # Our bug: a response field this version cannot carry. Say so loudly; the
            # connection is closed because the client would otherwise wait forever.
            log.exception("cannot encode %s v%d response", handler.name, ctx.api_version)
            raise CloseConnection from None

    def _throttled(
        self, ctx: RequestContext, cost: _Cost, response: Response | None, response_bytes: int
    ) -> Throttle:
        """Record the request against the client's quotas; mute the connection for the
        throttle time, if any (:mod:`broker.quotas.throttle`)."""
        assert self.throttle is not None
        now_s = self._loop_time()
        throttle = self.throttle.decide(
            cost.request,
            response,
            principal=ctx.session.principal,
            client_id=ctx.header.client_id,
            request_bytes=cost.request_bytes,
            response_bytes=response_bytes,
            handler_s=cost.handler_s,
            now_ms=now_s * 1000.0,
        )
        if throttle.ms > 0:
            until = now_s + throttle.ms / 1000.0
            ctx.session.muted_until_s = max(ctx.session.muted_until_s, until)
        return throttle

    def _unsupported(self, exc: UnsupportedVersionError, peer: str) -> Reply:
        if exc.api_key == API_VERSIONS_KEY and exc.correlation_id is not None:
            return self._api_versions_fallback(exc.correlation_id)
        log.warning("unsupported request peer=%s error=%r", peer, str(exc))
        raise CloseConnection

    def _api_versions_fallback(self, correlation_id: int) -> list[Chunk]:
        """KIP-511: answer as v0 with UNSUPPORTED_VERSION and our ranges."""
        self.metrics.request_counter("ApiVersions", ErrorCode.UNSUPPORTED_VERSION).inc()
        body = ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=self.api_versions()
        )
        return encode_response(0, correlation_id, body)

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
