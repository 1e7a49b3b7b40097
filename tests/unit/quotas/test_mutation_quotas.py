"""controller_mutation_rate (KIP-599): the token bucket and the strict / permissive rules."""

from __future__ import annotations

import uuid
from typing import Any

from broker.dispatcher import ApiHandler, RequestContext
from broker.quotas.manager import QuotaSettings
from broker.quotas.mutations import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    MutationQuotaGuard,
    MutationQuotas,
    TokenBucket,
)
from broker.security.session import Session
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    RequestHeader,
)
from kafka_protocol.metadata import PartitionRecord, TopicRecord
from metadata_log.client_quotas import quota_entity, set_record
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage

THROTTLED = ErrorCode.THROTTLING_QUOTA_EXCEEDED


def test_the_bucket_starts_full_refills_and_owes_time_below_zero() -> None:
    bucket = TokenBucket(rate=2.0, burst=4.0, tokens=4.0, updated_ms=0)
    bucket.take(5, 0)
    assert bucket.tokens == -1 and bucket.throttle_ms(0) == 500
    assert bucket.throttle_ms(500) == 0
    assert bucket.refill(10_000) == 4.0  # never above the burst


T1 = uuid.UUID(int=7)


def image(rate: float = 1.0) -> ClusterImage:
    records: list[Any] = [
        set_record(quota_entity([("client-id", "c")]), "controller_mutation_rate", rate),
        TopicRecord(name="old", topic_id=T1),
        *[
            PartitionRecord(partition_id=p, topic_id=T1, replicas=[1], isr=[1], leader=1)
            for p in range(3)
        ],
    ]
    return replay_records(ClusterImage.EMPTY, records)


def context(api_key: int, version: int, client_id: str = "c") -> RequestContext:
    header = RequestHeader(
        request_api_key=api_key, request_api_version=version, correlation_id=1, client_id=client_id
    )
    return RequestContext(header, Session("PLAINTEXT", 0, "h", "h:1"), 0.0, 0.0)  # type: ignore[arg-type]


def guarded(api_key: int, answer: Any, seen: list[Any]) -> ApiHandler:
    def handle(ctx: RequestContext, request: Any) -> Any:
        seen.append(request)
        return answer(request)

    current = image()
    quotas = MutationQuotas(lambda: current.client_quotas, QuotaSettings(2, 1), lambda: 0.0)
    guard = MutationQuotaGuard(quotas, lambda: current, default_partitions=1)
    (wrapped,) = guard.guard([ApiHandler(api_key, 0, 7, handle, "X")])
    return wrapped


def created(request: CreateTopicsRequest) -> CreateTopicsResponse:
    Result = CreateTopicsResponse.CreatableTopicResult
    return CreateTopicsResponse(topics=[Result(name=t.name) for t in request.topics])


def creation(*names: str) -> CreateTopicsRequest:
    Topic = CreateTopicsRequest.CreatableTopic
    return CreateTopicsRequest(topics=[Topic(name=n, num_partitions=1) for n in names])


def test_strict_creations_go_through_until_the_bucket_is_below_zero() -> None:
    seen: list[Any] = []
    handler = guarded(CREATE_TOPICS, created, seen)
    # burst 2 tokens: a, b take them, c goes through leaving -1, d is refused
    answer = handler.handle(context(CREATE_TOPICS, 7), creation("a", "b", "c", "d"))
    assert [t.name for t in seen[0].topics] == ["a", "b", "c"]
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("a", 0),
        ("b", 0),
        ("c", 0),
        ("d", THROTTLED),
    ]
    assert answer.throttle_time_ms == 1000
    # everything refused: answered without the handler
    again = handler.handle(context(CREATE_TOPICS, 7), creation("e"))
    assert [(t.name, t.error_code) for t in again.topics] == [("e", THROTTLED)] and len(seen) == 1


def test_permissive_versions_and_other_clients_go_through() -> None:
    seen: list[Any] = []
    handler = guarded(CREATE_TOPICS, created, seen)
    answer = handler.handle(context(CREATE_TOPICS, 5), creation("a", "b", "c", "d"))
    assert [t.error_code for t in answer.topics] == [0, 0, 0, 0]
    assert answer.throttle_time_ms == 2000  # 4 taken of 2: -2 at 1 per second
    other = handler.handle(context(CREATE_TOPICS, 7, "other"), creation("x"))
    assert other.throttle_time_ms == 0


def test_deletions_and_increases_count_partitions_from_the_image() -> None:
    seen: list[Any] = []
    handler = guarded(DELETE_TOPICS, lambda r: DeleteTopicsResponse(responses=[]), seen)
    State = DeleteTopicsRequest.DeleteTopicState
    request = DeleteTopicsRequest(topics=[State(name="old"), State(name=None, topic_id=T1)])
    answer = handler.handle(context(DELETE_TOPICS, 6), request)
    # "old" has 3 partitions: 2 - 3 = -1, the second is refused
    assert [(r.name, r.topic_id, r.error_code) for r in answer.responses] == [(None, T1, THROTTLED)]
    increase = guarded(
        CREATE_PARTITIONS, lambda r: CreatePartitionsResponse(results=[]), seen := []
    )
    Topic = CreatePartitionsRequest.CreatePartitionsTopic
    grow = CreatePartitionsRequest(topics=[Topic(name="old", count=6), Topic(name="old", count=4)])
    answer = increase.handle(context(CREATE_PARTITIONS, 3), grow)
    assert [r.error_code for r in answer.results] == [THROTTLED] and answer.throttle_time_ms == 1000
