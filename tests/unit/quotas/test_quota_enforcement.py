"""Client-quota enforcement, pure parts: the sampled rate (Kafka's ``Rate``), throttle times,
the manager's shared rates and bounds, and which requests are throttled how."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.quotas.manager import ClientQuotaManager, QuotaSettings, QuotaType
from broker.quotas.rate import SampledRate, throttle_time_ms
from broker.quotas.throttle import RequestThrottle
from kafka_protocol.messages import (
    ApiVersionsRequest,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
)
from metadata_log.client_quotas import ClientQuotas, quota_entity, set_record
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage


def quotas_of(entries: dict[tuple[tuple[str, str | None], ...], dict[str, float]]) -> ClientQuotas:
    records = [
        set_record(quota_entity(e), k, v)
        for e, values in entries.items()
        for k, v in values.items()
    ]
    return replay_records(ClusterImage.EMPTY, list(records)).client_quotas


def test_a_first_burst_is_measured_over_the_minimum_span() -> None:
    rate = SampledRate(samples=11, window_ms=1000)
    rate.record(10_000, now_ms=0)
    assert rate.span_ms(0) == 10_000  # (samples - 1) windows, not the 0 ms elapsed
    assert rate.per_second(0) == 1000.0
    assert throttle_time_ms(rate, 1000.0, 0) == 0
    rate.record(10_000, now_ms=0)
    # twice the bound over 10 s: 10 s more of silence brings it back
    assert throttle_time_ms(rate, 1000.0, 0) == 10_000


def test_samples_older_than_the_windows_are_forgotten() -> None:
    rate = SampledRate(samples=2, window_ms=1000)
    rate.record(5000, now_ms=0)
    assert rate.per_second(0) == 5000.0
    assert rate.span_ms(500) == 1500  # 500 ms elapsed, plus the missing full window
    assert rate.per_second(2000) == 0.0  # last event 2 windows ago: reset


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(1, 10_000)), max_size=60))
def test_the_rate_counts_what_the_windows_hold(events: list[tuple[int, int]]) -> None:
    """Over any sequence (times moving forward), the measured rate is the recent values over
    a span of at least samples - 1 windows, and never negative."""
    rate = SampledRate(samples=3, window_ms=1000)
    now = 0
    for step, value in events:
        now += step
        rate.record(value, now)
        span = rate.span_ms(now)
        assert span >= 2000
        per_s = rate.per_second(now)
        assert 0 <= per_s <= sum(v for _, v in events) / 2.0
        bound = 1000.0
        throttle = throttle_time_ms(rate, bound, now)
        assert throttle == 0 if per_s <= bound else throttle > 0


def test_clients_sharing_an_entity_share_one_rate() -> None:
    quotas = quotas_of(
        {
            (("user", "alice"),): {"producer_byte_rate": 100.0},
            (("client-id", None),): {"producer_byte_rate": 100.0},
        }
    )
    manager = ClientQuotaManager(lambda: quotas, QuotaSettings(samples=2, window_seconds=1))
    produce = QuotaType.PRODUCE
    assert manager.record(produce, "alice", "a", 100, 0) == 0
    assert manager.record(produce, "alice", "b", 100, 0) > 0  # the same user-only quota
    assert manager.record(produce, "bob", "x", 100, 0) == 0  # the default client-id quota:
    assert manager.record(produce, "bob", "y", 100, 0) == 0  # one rate per client id
    assert manager.record(QuotaType.FETCH, "alice", "a", 10**9, 0) == 0  # no fetch quota
    assert len(manager) == 3


def test_rates_are_bounded_and_expire() -> None:
    quotas = quotas_of({(("client-id", None),): {"producer_byte_rate": 100.0}})
    manager = ClientQuotaManager(lambda: quotas, QuotaSettings(1, 1, max_rates=5))
    for i in range(20):
        manager.record(QuotaType.PRODUCE, "u", f"c{i}", 1, 0)
    assert len(manager) == 5
    manager.record(QuotaType.PRODUCE, "u", "late", 1, 3_600_000 + 1)
    assert len(manager) == 1


def test_a_quota_change_applies_to_the_next_request() -> None:
    current = {"q": quotas_of({(("client-id", "c"),): {"producer_byte_rate": 100.0}})}
    manager = ClientQuotaManager(lambda: current["q"], QuotaSettings(2, 1))
    assert manager.record(QuotaType.PRODUCE, "u", "c", 1000, 0) > 0
    current["q"] = quotas_of({})
    assert manager.record(QuotaType.PRODUCE, "u", "c", 1000, 0) == 0


def produce() -> ProduceRequest:
    return ProduceRequest(acks=1, timeout_ms=1000, topic_data=[])


def consumer_fetch(replica_id: int = -1) -> FetchRequest:
    return FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=1, topics=[])


def throttle_for(quotas: ClientQuotas) -> RequestThrottle:
    return RequestThrottle(ClientQuotaManager(lambda: quotas, QuotaSettings(2, 1)))


def decide(throttle: RequestThrottle, request, response, **kw):  # type: ignore[no-untyped-def]
    base = dict(
        principal="User:alice",
        client_id="c",
        request_bytes=0,
        response_bytes=0,
        handler_s=0.0,
        now_ms=0.0,
    )
    return throttle.decide(request, response, **(base | kw))


def test_produce_counts_request_bytes_and_fetch_response_bytes() -> None:
    throttle = throttle_for(
        quotas_of(
            {(("user", "alice"),): {"producer_byte_rate": 1000.0, "consumer_byte_rate": 1000.0}}
        )
    )
    assert decide(throttle, produce(), None, request_bytes=1000).ms == 0
    assert decide(throttle, produce(), None, request_bytes=1000).ms == 1000
    fetched = FetchResponse(session_id=7, responses=[FetchResponse.FetchableTopicResponse()])
    assert decide(throttle, consumer_fetch(), fetched, response_bytes=500).ms == 0
    throttled = decide(throttle, consumer_fetch(), fetched, response_bytes=2500)
    assert throttled.ms == 2000
    replacement = throttled.replacement
    assert isinstance(replacement, FetchResponse)
    assert (replacement.responses, replacement.session_id, replacement.throttle_time_ms) == (
        [],
        7,
        2000,
    )
    # the throttled fetch's bytes were taken back: the rate holds the first 500 only
    assert decide(throttle, consumer_fetch(), fetched, response_bytes=500).ms == 0
    # a follower's fetch is never throttled, whatever its size
    assert decide(throttle, consumer_fetch(replica_id=2), fetched, response_bytes=10**9).ms == 0


def test_request_percentage_counts_handler_time_and_the_handshake_is_exempt() -> None:
    throttle = throttle_for(quotas_of({(("client-id", "c"),): {"request_percentage": 10.0}}))
    metadata = MetadataRequest(topics=None)
    answer = MetadataResponse(brokers=[], topics=[])
    assert decide(throttle, metadata, answer, handler_s=0.05).ms == 0  # 5 % of 1 s
    assert decide(throttle, metadata, answer, handler_s=0.10).ms == 500  # 15 % over 1 s
    assert decide(throttle, ApiVersionsRequest(), None, handler_s=10.0).ms == 0
    assert decide(throttle, metadata, answer, client_id="other", handler_s=10.0).ms == 0
