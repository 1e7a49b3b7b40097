"""Replication throttles: the byte rate a greedy sender gets through a quota, under a virtual
clock, and which partitions a throttled-replicas list names."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.replication.throttle import ByteRate, ReplicationThrottles, parse_throttled_replicas
from kafka_protocol.metadata import ConfigRecord, TopicRecord
from kafka_protocol.types import TopicName
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage, ConfigResourceType
from metadata_log.records import MetadataRecord


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


def greedy(rate: ByteRate, bound: int, chunk: int, duration_ms: int, clock: Clock) -> int:
    """Send ``chunk`` whenever the quota allows, waiting as told otherwise; bytes sent."""
    sent, end = 0, clock.now_ms + duration_ms
    while clock.now_ms < end:
        wait = rate.wait_ms(bound)
        if wait:
            clock.now_ms += wait
            continue
        rate.record(chunk)
        sent += chunk
        clock.now_ms += 1  # a fetch takes time
    return sent


@settings(max_examples=60, deadline=None)
@given(
    bound=st.integers(min_value=10_000, max_value=50_000_000),
    chunk_share=st.floats(min_value=0.001, max_value=0.5),
    seconds=st.integers(min_value=20, max_value=120),
    samples=st.integers(min_value=2, max_value=11),
)
def test_a_greedy_sender_gets_the_bound_within_20_percent(
    bound: int, chunk_share: float, seconds: int, samples: int
) -> None:
    clock = Clock()
    rate = ByteRate(clock, samples=samples, window_ms=1000)
    chunk = max(1, int(bound * chunk_share))
    sent = greedy(rate, bound, chunk, seconds * 1000, clock)
    achieved = sent / seconds
    assert 0.8 * bound <= achieved <= 1.2 * bound, (achieved, bound)


def test_idle_then_burst_is_bounded_by_one_window() -> None:
    clock = Clock()
    rate = ByteRate(clock, samples=11, window_ms=1000)
    rate.record(5_000)
    clock.now_ms += 60_000  # quiet for a minute: nothing of it counts
    sent = greedy(rate, 100_000, 10_000, 1_000, clock)
    assert sent <= 110_000


def test_unlimited_and_zero_bounds() -> None:
    clock = Clock()
    rate = ByteRate(clock)
    assert rate.wait_ms(1) == 0  # nothing sent yet
    rate.record(10)
    assert rate.wait_ms(0) > 0 and rate.wait_ms(10_000) == 0


def test_parse_throttled_replicas() -> None:
    assert parse_throttled_replicas("*", 3) is None
    assert parse_throttled_replicas("0:1,0:3, 2:3,5:30", 3) == frozenset({0, 2})
    assert parse_throttled_replicas("", 3) == frozenset()


def _image(configs: dict[tuple[int, str], dict[str, str]]) -> ClusterImage:
    records: list[MetadataRecord] = [TopicRecord(name=TopicName("t"), topic_id=uuid.uuid4())]
    for (kind, name), values in configs.items():
        records += [
            ConfigRecord(resource_type=kind, resource_name=name, name=k, value=v)
            for k, v in values.items()
        ]
    return replay_records(ClusterImage.EMPTY, records)


def test_rates_resolve_per_broker_over_cluster_default_over_static() -> None:
    B, T = ConfigResourceType.BROKER, ConfigResourceType.TOPIC
    image = _image(
        {
            (B, ""): {"leader.replication.throttled.rate": "1000"},
            (B, "3"): {"follower.replication.throttled.rate": "2000"},
            (T, "t"): {
                "leader.replication.throttled.replicas": "0:3,1:4",
                "follower.replication.throttled.replicas": "*",
            },
        }
    )
    static = {"follower.replication.throttled.rate": "9"}
    mine = ReplicationThrottles(3, lambda: image, static, Clock())
    other = ReplicationThrottles(4, lambda: image, static, Clock())
    assert mine.leader.bound() == 1000 and mine.follower.bound() == 2000
    assert other.follower.bound() == 9
    assert ReplicationThrottles(5, lambda: ClusterImage.EMPTY, {}, Clock()).leader.bound() is None
    assert mine.leader.is_throttled("t", 0) and not mine.leader.is_throttled("t", 1)
    assert other.leader.is_throttled("t", 1) and not other.leader.is_throttled("u", 1)
    assert mine.follower.is_throttled("t", 7)
    # In sync: never held back, even over the quota.
    mine.leader.record(10_000_000)
    assert mine.leader.is_exceeded()
    assert mine.leader.holds_back("t", 0, in_sync=False)
    assert not mine.leader.holds_back("t", 0, in_sync=True)
    assert not mine.leader.holds_back("t", 1, in_sync=False)
