"""``controller_mutation_rate``: partitions created, added and deleted per second (KIP-599,
Kafka's ``ControllerMutationQuotaManager``), checked where the request arrives.

Theory of operation
-------------------
Each client under a quota has a token bucket (Kafka's ``TokenBucket``): it holds at most
``quota x quota.window.num x quota.window.size.seconds`` tokens, starts full, refills at the
quota per second, and each partition a request creates, adds or deletes takes one token.
Topic creations v6+, partition increases v3+ and topic deletions v5+ are *strict*: topic by topic, a
topic is refused with THROTTLING_QUOTA_EXCEEDED when the bucket is already below zero;
otherwise it goes through and takes its tokens, even if that leaves the bucket below zero (so a
single large topic is never refused forever).  Older versions are *permissive*: every topic
goes through.  Either way, while the bucket is below zero the answer carries
``throttle_time_ms`` = the time to refill to zero, which the dispatcher's throttling adds to.

Kafka enforces this on the controller, cluster-wide; here each broker keeps the buckets of the
clients that talk to it (the forwarded request does not carry the client's identity to the
controller), so a client spreading its requests over brokers gets the quota per broker.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from broker.deferred import Deferred
from broker.dispatcher import ApiHandler, HandlerResult, RequestContext
from broker.quotas.manager import QuotaSettings
from broker.quotas.throttle import quota_user
from kafka_protocol._codec import Response
from kafka_protocol.clock import monotonic_ms
from kafka_protocol.errors import ErrorCode
from kafka_protocol.framing import api_classes
from metadata_log.client_quotas import CONTROLLER_MUTATION_RATE, ClientQuotas, resolve
from metadata_log.image import ClusterImage

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37  # api keys
# The first strict version of each API (KIP-599).
STRICT_FROM: Final = {CREATE_TOPICS: 6, DELETE_TOPICS: 5, CREATE_PARTITIONS: 3}
THROTTLED: Final = ErrorCode.THROTTLING_QUOTA_EXCEEDED


@dataclass(slots=True)
class TokenBucket:
    """Kafka's ``TokenBucket``: pure, time passed in."""

    rate: float  # tokens per second
    burst: float
    tokens: float
    updated_ms: float

    def refill(self, now_ms: float) -> float:
        elapsed_s = max(now_ms - self.updated_ms, 0.0) / 1000.0
        self.tokens = min(self.burst, self.tokens + self.rate * elapsed_s)
        self.updated_ms = now_ms
        return self.tokens

    def take(self, tokens: float, now_ms: float) -> None:
        self.refill(now_ms)
        self.tokens = min(self.burst, self.tokens - tokens)

    def throttle_ms(self, now_ms: float) -> int:
        """How long until the bucket is back at zero (0: it is not below)."""
        tokens = self.refill(now_ms)
        return 0 if tokens >= 0 else round(-tokens / self.rate * 1000)


class MutationQuotas:
    """The buckets of the clients under a ``controller_mutation_rate``, bounded like the
    manager's rates (least recently used dropped first)."""

    def __init__(
        self,
        quotas: Callable[[], ClientQuotas],
        settings: QuotaSettings,
        clock_ms: Callable[[], float] = monotonic_ms,
    ) -> None:
        self.quotas = quotas
        self.settings = settings
        self.clock_ms = clock_ms
        self._buckets: OrderedDict[tuple[str, str], TokenBucket] = OrderedDict()

    def bucket(self, user: str, client_id: str, now_ms: float) -> TokenBucket | None:
        found = resolve(self.quotas(), user, client_id, CONTROLLER_MUTATION_RATE)
        if found is None:
            return None
        key = (found.user_tag, found.client_id_tag)
        burst = found.bound * self.settings.samples * self.settings.window_seconds
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(found.bound, burst, burst, now_ms)
            while len(self._buckets) > self.settings.max_rates:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
            bucket.rate, bucket.burst = found.bound, burst  # the quota may have changed
        return bucket


# --- per API: the topics of a request, what each mutates, and the refusal of one ---------------


def _partitions_created(default_partitions: int) -> Callable[[Any, ClusterImage], list[int]]:
    def count(request: Any, image: ClusterImage) -> list[int]:
        out = []
        for t in request.topics:
            if t.assignments:
                out.append(len(t.assignments))
            else:
                out.append(t.num_partitions if t.num_partitions > 0 else default_partitions)
        return out

    return count


def _partitions_deleted(request: Any, image: ClusterImage) -> list[int]:
    counts = []
    for t in _deleted_topics(request):
        topic = image.topics.get(t.name) if t.name else image.topics.by_id.get(t.topic_id)
        counts.append(len(topic.partitions) if topic is not None else 0)
    return counts


@dataclass(frozen=True, slots=True)
class _Named:
    name: str | None
    topic_id: Any = None


def _deleted_topics(request: Any) -> list[Any]:
    return [_Named(n) for n in request.topic_names] + list(request.topics)


def _partitions_added(request: Any, image: ClusterImage) -> list[int]:
    counts = []
    for t in request.topics:
        topic = image.topics.get(t.name)
        counts.append(max(t.count - len(topic.partitions), 0) if topic is not None else 0)
    return counts


@dataclass(frozen=True, slots=True)
class _Api:
    count: Callable[[Any, ClusterImage], list[int]]  # per topic, in the request's order
    keep: Callable[[Any, list[bool]], Any]  # the request with only the kept topics
    refuse: Callable[[Response, Any, list[bool], int], None]  # add the refused topics' answers


def _keep_topics(request: Any, kept: list[bool]) -> Any:
    return dataclasses.replace(
        request, topics=[t for t, k in zip(request.topics, kept, strict=True) if k]
    )


def _keep_deletions(request: Any, kept: list[bool]) -> Any:
    names = len(request.topic_names)
    return dataclasses.replace(
        request,
        topic_names=[n for n, k in zip(request.topic_names, kept[:names], strict=True) if k],
        topics=[t for t, k in zip(request.topics, kept[names:], strict=True) if k],
    )


def _refuse(
    results_field: str, result_type: Any, topics_of: Callable[[Any], list[Any]]
) -> Callable[[Response, Any, list[bool], int], None]:
    """Add a THROTTLING_QUOTA_EXCEEDED answer for each refused topic to ``results_field``."""

    def refuse(response: Response, request: Any, kept: list[bool], throttle_ms: int) -> None:
        results = getattr(response, results_field)
        for topic, k in zip(topics_of(request), kept, strict=True):
            if not k:
                topic_id = getattr(topic, "topic_id", None)
                by_id = {"topic_id": topic_id} if topic_id is not None else {}
                message = THROTTLED.message
                results.append(
                    result_type(
                        name=topic.name, error_code=THROTTLED, error_message=message, **by_id
                    )
                )

    return refuse


def _result_type(api_key: int, name: str) -> Any:
    """A per-topic result class of an API's response (by api key: the forwarding table is the
    one place these forwarded APIs are named)."""
    return getattr(api_classes(api_key)[1], name)


def _topics(request: Any) -> list[Any]:
    return list(request.topics)


class MutationQuotaGuard:
    """Wraps the three handlers: refuses (strict) or throttles (permissive) by the client's
    bucket, before forwarding."""

    def __init__(
        self, quotas: MutationQuotas, image: Callable[[], ClusterImage], default_partitions: int
    ) -> None:
        self.quotas = quotas
        self.image = image
        self.apis: dict[int, _Api] = {
            CREATE_TOPICS: _Api(
                _partitions_created(default_partitions),
                _keep_topics,
                _refuse("topics", _result_type(CREATE_TOPICS, "CreatableTopicResult"), _topics),
            ),
            DELETE_TOPICS: _Api(
                _partitions_deleted,
                _keep_deletions,
                _refuse(
                    "responses",
                    _result_type(DELETE_TOPICS, "DeletableTopicResult"),
                    _deleted_topics,
                ),
            ),
            CREATE_PARTITIONS: _Api(
                _partitions_added,
                _keep_topics,
                _refuse(
                    "results",
                    _result_type(CREATE_PARTITIONS, "CreatePartitionsTopicResult"),
                    _topics,
                ),
            ),
        }

    def guard(self, handlers: Iterable[ApiHandler]) -> list[ApiHandler]:
        return [self._guard_one(h) if h.api_key in self.apis else h for h in handlers]

    def _guard_one(self, handler: ApiHandler) -> ApiHandler:
        api = self.apis[handler.api_key]
        inner = handler.handle

        def handle(ctx: RequestContext, request: Any) -> HandlerResult:
            now_ms = self.quotas.clock_ms()
            session = ctx.session
            bucket = self.quotas.bucket(
                quota_user(session.principal), ctx.header.client_id or "", now_ms
            )
            if bucket is None:
                return inner(ctx, request)
            strict = ctx.api_version >= STRICT_FROM[handler.api_key]
            kept = []
            for partitions in api.count(request, self.image()):
                refused = strict and bucket.refill(now_ms) < 0
                kept.append(not refused)
                if not refused:
                    bucket.take(partitions, now_ms)
            throttle_ms = bucket.throttle_ms(now_ms)
            if all(kept) and throttle_ms == 0:
                return inner(ctx, request)

            def amend(response: Response) -> Response:
                api.refuse(response, request, kept, throttle_ms)
                current = getattr(response, "throttle_time_ms", 0)
                response.throttle_time_ms = max(current, throttle_ms)  # type: ignore[attr-defined]
                return response

            if not any(kept):
                return amend(handler_response(handler))
            return _amended(inner(ctx, api.keep(request, kept)), amend)

        return ApiHandler(
            handler.api_key, handler.min_version, handler.max_version, handle, handler.name
        )


def handler_response(handler: ApiHandler) -> Response:
    """An empty response of the handler's API, to which refused topics are added."""
    _, response_type = api_classes(handler.api_key)
    response: Response = response_type()
    return response


def _amended(result: HandlerResult, amend: Callable[[Response], Response]) -> HandlerResult:
    if result is None or isinstance(result, Response):
        return None if result is None else amend(result)
    if isinstance(result, Deferred):
        out: Deferred[Response | None] = Deferred()
        result.then(lambda r: out.resolve(None if r is None else amend(r)))
        return out

    async def later() -> Response | None:
        answer = await result
        return None if answer is None else amend(answer)

    return later()
