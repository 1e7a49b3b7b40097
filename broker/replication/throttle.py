"""Replication throttles (KIP-73): a byte-rate bound on the replication traffic of chosen
partitions, so that moving a partition (a reassignment) does not starve clients (Kafka's
``ReplicationQuotaManager``).

Theory of operation
-------------------
Each broker has two quotas, each a byte rate measured over the last
``replication.quota.window.num`` windows of ``replication.quota.window.size.seconds``:

* the **leader** quota (``leader.replication.throttled.rate``) counts what this broker sends to
  followers for partitions listed for it in their topic's
  ``leader.replication.throttled.replicas`` (``partition:broker`` pairs, or ``*``); while the
  rate is above the bound, a follower that is **not in the ISR** gets no records for those
  partitions (the fetch is answered, empty);
* the **follower** quota (``follower.replication.throttled.rate``) counts what this broker
  fetches for partitions listed for it in ``follower.replication.throttled.replicas``; while it
  is above the bound, partitions that lag the leader are left out of the next Fetch request.

Replicas in sync are never held back (their traffic still counts), so a throttle can slow a
move but never shrink an ISR or delay acks=all. The rates are dynamic broker configs
(``BROKER "<id>"`` over the cluster default ``BROKER ""``, over the static config, default
unbounded) read from the metadata image on use, so ``kafka-configs.sh --alter`` takes effect at
the next fetch.

One deviation from Kafka: its rate divides by at least ``window.num - 1`` windows, which lets a
move that starts after a quiet spell send ten seconds' worth of bytes at once; here the divisor
is at least one window, so the bound holds within a window's worth from the start.

This module is sans-IO: time comes from the injected clock, the image from the injected source.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from metadata_log.configs import BROKER_CONFIGS, LONG_MAX, BrokerConfigSources
from metadata_log.image import ClusterImage

LEADER_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_RATE: Final = "follower.replication.throttled.rate"
LEADER_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS: Final = "follower.replication.throttled.replicas"
WINDOW_NUM: Final = "replication.quota.window.num"
WINDOW_SECONDS: Final = "replication.quota.window.size.seconds"
MAX_WAIT_MS: Final = 1_000  # a held-back follower looks again at least this often


@dataclass(slots=True)
class _Sample:
    start_ms: int
    size_bytes: int = 0


class ByteRate:
    """Bytes per second over the last ``samples`` windows of ``window_ms`` (Kafka's ``Rate``
    over a ``SampledStat``, with the shorter minimum span described in the module docstring)."""

    def __init__(self, clock_ms: Callable[[], int], samples: int = 11, window_ms: int = 1000):
        assert samples >= 1 and window_ms >= 1
        self.clock_ms = clock_ms
        self.samples = samples
        self.window_ms = window_ms
        self._samples: deque[_Sample] = deque(maxlen=samples)

    def record(self, size_bytes: int) -> None:
        now = self.clock_ms()
        self._purge(now)
        if not self._samples or now - self._samples[-1].start_ms >= self.window_ms:
            self._samples.append(_Sample(now))
        self._samples[-1].size_bytes += size_bytes

    def _purge(self, now: int) -> None:
        horizon = now - self.samples * self.window_ms
        while self._samples and self._samples[0].start_ms <= horizon:
            self._samples.popleft()

    def _span_ms(self, now: int) -> int:
        return max(now - self._samples[0].start_ms, self.window_ms) if self._samples else 1

    def total_bytes(self) -> int:
        self._purge(self.clock_ms())
        return sum(s.size_bytes for s in self._samples)

    def rate(self) -> float:
        """Bytes per second now."""
        now = self.clock_ms()
        self._purge(now)
        return self.total_bytes() * 1000 / self._span_ms(now)

    def wait_ms(self, bound_bytes_per_s: float) -> int:
        """How long until the rate is back within the bound (0: it is)."""
        now = self.clock_ms()
        self._purge(now)
        total = sum(s.size_bytes for s in self._samples)
        if total * 1000 <= bound_bytes_per_s * self._span_ms(now):
            return 0
        if bound_bytes_per_s <= 0:
            return MAX_WAIT_MS
        elapsed = now - self._samples[0].start_ms
        return max(1, min(MAX_WAIT_MS, int(total * 1000 / bound_bytes_per_s) - elapsed))


def parse_throttled_replicas(value: str, broker_id: int) -> frozenset[int] | None:
    """The partitions ``broker_id`` is listed for in a throttled-replicas value; None: all
    (``*``). Values were validated on the way in (``metadata_log.configs``)."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if items == ["*"]:
        return None
    out = set()
    for item in items:
        partition, _, broker = item.partition(":")
        if broker.isdigit() and partition.isdigit() and int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuota:
    """One side's quota on one broker: which partitions it throttles and whether it is over."""

    def __init__(self, throttles: ReplicationThrottles, rate_key: str, replicas_key: str) -> None:
        self.throttles = throttles
        self.rate_key = rate_key
        self.replicas_key = replicas_key
        self.measured = ByteRate(throttles.clock_ms, throttles.window_num, throttles.window_ms)
        self._parsed: dict[str, tuple[str, frozenset[int] | None]] = {}

    def bound(self) -> int | None:
        """Bytes per second, or None when unbounded (the default)."""
        value = self.throttles.broker_value(self.rate_key)
        return None if value >= LONG_MAX else value

    def is_throttled(self, topic: str, partition: int) -> bool:
        raw = self.throttles.image_source().topic_configs(topic).get(self.replicas_key, "")
        if not raw:
            return False
        cached = self._parsed.get(topic)
        if cached is None or cached[0] != raw:
            cached = self._parsed[topic] = (
                raw,
                parse_throttled_replicas(raw, self.throttles.broker_id),
            )
        listed = cached[1]
        return listed is None or partition in listed

    def is_exceeded(self) -> bool:
        bound = self.bound()
        return bound is not None and self.measured.wait_ms(bound) > 0

    def wait_ms(self) -> int:
        bound = self.bound()
        return 0 if bound is None else self.measured.wait_ms(bound)

    def record(self, size_bytes: int) -> None:
        if size_bytes > 0:
            self.measured.record(size_bytes)

    def holds_back(self, topic: str, partition: int, in_sync: bool) -> bool:
        """Kafka's ``shouldLeaderThrottle`` / ``shouldFollowerThrottle``."""
        return not in_sync and self.is_throttled(topic, partition) and self.is_exceeded()


class ReplicationThrottles:
    """Both quotas of one broker."""

    def __init__(
        self,
        broker_id: int,
        image_source: Callable[[], ClusterImage],
        static_config: Mapping[str, str],
        clock_ms: Callable[[], int],
    ) -> None:
        self.broker_id = broker_id
        self.image_source = image_source
        self.static_config = static_config
        self.clock_ms = clock_ms
        self.window_num = self._static_int(WINDOW_NUM)
        self.window_ms = self._static_int(WINDOW_SECONDS) * 1000
        self.leader = ReplicationQuota(self, LEADER_RATE, LEADER_REPLICAS)
        self.follower = ReplicationQuota(self, FOLLOWER_RATE, FOLLOWER_REPLICAS)

    def _static_int(self, key: str) -> int:
        raw = self.static_config.get(key)
        return int(raw) if raw is not None else BROKER_CONFIGS[key].int_default

    def broker_value(self, key: str) -> int:
        """A dynamic broker config as this broker resolves it: BROKER "<id>", BROKER "",
        static, default."""
        sources = BrokerConfigSources.from_image(
            self.image_source(), self.broker_id, self.static_config
        )
        for layer, _source in sources.layers():
            raw = layer.get(key)
            if raw is not None:
                return int(raw)
        return BROKER_CONFIGS[key].int_default
