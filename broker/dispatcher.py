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
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

from broker.deferred import Deferred
from broker.metrics import BrokerMetrics
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


class RequestDispatcher:
    def __init__(self, handlers: Iterable[ApiHandler], metrics: BrokerMetrics) -> None:
        self.handlers = {h.api_key: h for h in handlers}
        self.metrics = metrics
        self.tasks: set[asyncio.Task[Any]] = set()

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
        ctx = RequestContext(header, session, time.perf_counter(), self._loop_time())
        result = handler.handle(ctx, body)
        return self._finish(handler, ctx, body, result)

    def _finish(
        self, handler: ApiHandler, ctx: RequestContext, body: Request, result: HandlerResult
    ) -> Reply:
        if result is None:
            return None
        if isinstance(result, Response):
            return self._encode(handler, ctx, result)
        reply: Deferred[ReplyValue] = Deferred()

        def settle(response: Response | None) -> None:
            if response is None:
                reply.resolve(None)
                return
            try:
                chunks = self._encode(handler, ctx, response)
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

    def _encode(self, handler: ApiHandler, ctx: RequestContext, response: Response) -> list[Chunk]:
        self.metrics.request_counter(handler.name, getattr(response, "error_code", 0)).inc()
        try:
            return encode_response(ctx.api_version, ctx.header.correlation_id, response)
        except LocalProtocolError:
            # Our bug: a response field this version cannot carry. Say so loudly; the
            # connection is closed because the client would otherwise wait forever.
            log.exception("cannot encode %s v%d response", handler.name, ctx.api_version)
            raise CloseConnection from None

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
