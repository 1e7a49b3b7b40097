"""Prometheus metrics of one broker (``GET /metrics``), in a registry of its own.

Counters are bumped on the request path with label children cached per (api, error) and per
topic, so a produce costs a dictionary lookup and an ``inc``; gauges that describe state (log
sizes, partition count, connections) are read only when scraped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kafka_protocol.errors import ErrorCode

LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


class _StateCollector(Collector):
    def __init__(self, read: Callable[[], Iterable[Metric]]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        return self._read()


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "kafka_requests",
            "Requests handled, by API and top-level error",
            ["api", "error"],
            registry=r,
        )
        self.partition_errors = Counter(
            "kafka_partition_errors",
            "Per-partition errors returned, by API",
            ["api", "error"],
            registry=r,
        )
        self.consumer_fetches = Counter(
            "kafka_consumer_fetch_partitions",
            "Partitions of consumer fetches answered, by this replica's part",
            ["served_as"],
            registry=r,
        )
        self.bytes_in = Counter("kafka_bytes_in", "Record bytes appended", ["topic"], registry=r)
        self.bytes_out = Counter("kafka_bytes_out", "Record bytes fetched", ["topic"], registry=r)
        self.messages_in = Counter("kafka_messages_in", "Records appended", ["topic"], registry=r)
        self.corrupt_batches = Counter(
            "kafka_corrupt_batches",
            "Batches refused as corrupt before they were written, by where they came from",
            ["source"],
            registry=r,
        )
        self.produce_latency = Histogram(
            "kafka_produce_latency_seconds",
            "Produce request latency",
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.fetch_latency = Histogram(
            "kafka_fetch_latency_seconds",
            "Fetch request latency (includes long-poll waits)",
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )

    @cache  # noqa: B019 - one child per label pair, for the life of the broker
    def request_counter(self, api: str, error: int) -> Counter:
        return self.requests.labels(api, ErrorCode.from_code(error).name)

    @cache  # noqa: B019
    def consumer_fetch_counter(self, served_as: str) -> Counter:
        """Partitions of consumer fetches answered, by how: ``leader``, ``follower`` (KIP-392)
        or ``redirected`` (sent to a preferred read replica)."""
        return self.consumer_fetches.labels(served_as)

    @cache  # noqa: B019
    def partition_error_counter(self, api: str, error: int) -> Counter:
        return self.partition_errors.labels(api, ErrorCode.from_code(error).name)

    @cache  # noqa: B019
    def topic_counters(self, topic: str) -> tuple[Counter, Counter, Counter]:
        """(bytes in, messages in, bytes out) of a topic, as Kafka's BrokerTopicMetrics."""
        return (
            self.bytes_in.labels(topic),
            self.messages_in.labels(topic),
            self.bytes_out.labels(topic),
        )

    def add_state(self, read: Callable[[], Iterable[Metric]]) -> None:
        """Register a callback producing gauges when scraped."""
        self.registry.register(_StateCollector(read))

    def render(self) -> bytes:
        return generate_latest(self.registry)


def gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)
