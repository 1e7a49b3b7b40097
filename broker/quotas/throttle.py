"""Kafka's throttling around every request (KIP-219), applied by the dispatcher.

Once a request's response is ready, :meth:`RequestThrottle.decide` records what the request
cost against the client's quotas and says how long the client is throttled:

* Produce: the request's bytes against ``producer_byte_rate``;
* a consumer's Fetch (not a follower's): the response's bytes against ``consumer_byte_rate``;
* every request of a client: the handler's time against ``request_percentage`` (percent of one
  thread: 100 is the whole event loop).  The time measured is what the handler ran before it
  returned (its synchronous part, where the CPU goes) plus encoding.

With a throttle, the response carries it in ``throttle_time_ms`` (the larger of the two when
the handler set one) and the dispatcher mutes the connection for that long: nothing more is
read from it (Kafka mutes the channel).  A throttled consumer Fetch is answered empty, its bytes
taken back from the rate, as Kafka's ``getThrottledResponse`` does: the records are fetched
again once the throttle is over.  The requests a broker sends another (a follower's Fetch,
WriteTxnMarkers) and the handshake (ApiVersions, SASL) are never throttled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from broker.quotas.manager import ClientQuotaManager, QuotaType
from kafka_protocol._codec import Request, Response
from kafka_protocol.messages import FetchRequest, FetchResponse

PRODUCE_KEY: Final = 0
FETCH_KEY: Final = 1
# ApiVersions, SaslHandshake, SaslAuthenticate, WriteTxnMarkers (Kafka: cluster actions and
# the connection's handshake are exempt from the request quota).
_EXEMPT_KEYS: Final = frozenset({17, 18, 27, 36})
_PRINCIPAL_TYPE: Final = "User:"


@dataclass(frozen=True, slots=True)
class Throttle:
    """How long the client is throttled, and the response to send instead (None: the one the
    handler gave, with ``throttle_time_ms`` raised to ``ms``)."""

    ms: int
    replacement: Response | None = None


NOT_THROTTLED: Final = Throttle(0)


def quota_user(principal: str) -> str:
    """The user name quotas are keyed by (Kafka's ``KafkaPrincipal.getName``)."""
    return principal.removeprefix(_PRINCIPAL_TYPE)


def is_follower_fetch(request: FetchRequest) -> bool:
    state = request.replica_state
    return request.replica_id >= 0 or (state is not None and state.replica_id >= 0)


class RequestThrottle:
    def __init__(self, manager: ClientQuotaManager) -> None:
        self.manager = manager

    def decide(
        self,
        request: Request,
        response: Response | None,
        *,
        principal: str,
        client_id: str | None,
        request_bytes: int,
        response_bytes: int,
        handler_s: float,
        now_ms: float,
    ) -> Throttle:
        """Record the request's cost; ``response`` None: a Produce with acks=0 (throttled by
        muting alone)."""
        api_key = request.API_KEY
        if api_key in _EXEMPT_KEYS:
            return NOT_THROTTLED
        if api_key == FETCH_KEY:
            assert isinstance(request, FetchRequest)
            if is_follower_fetch(request):
                return NOT_THROTTLED
        user, client = quota_user(principal), client_id or ""
        record = self.manager.record
        ms = record(QuotaType.REQUEST, user, client, handler_s * 100.0, now_ms)
        if api_key == PRODUCE_KEY:
            ms = max(ms, record(QuotaType.PRODUCE, user, client, request_bytes, now_ms))
        elif api_key == FETCH_KEY:
            fetch_ms = record(QuotaType.FETCH, user, client, response_bytes, now_ms)
            ms = max(ms, fetch_ms)
            if ms > 0:
                self.manager.unrecord(QuotaType.FETCH, user, client, response_bytes, now_ms)
                assert isinstance(response, FetchResponse)
                return Throttle(ms, _empty_fetch(response, ms))
        if ms <= 0 or response is None:
            return Throttle(max(ms, 0))
        return Throttle(ms)


def _empty_fetch(response: FetchResponse, throttle_ms: int) -> FetchResponse:
    return FetchResponse(
        throttle_time_ms=throttle_ms,
        error_code=response.error_code,
        session_id=response.session_id,
        responses=[],
        node_endpoints=[],
    )
