"""``LogConfig``: the per-partition storage settings, Kafka's topic config names in snake_case.

``from_topic_configs`` reads Kafka's names (``segment.bytes``, ``retention.ms``, ...) from a
topic's string configs; keys it does not own (``cleanup.policy``, ``min.insync.replicas``, ...)
are left to others.  Values outside Kafka's valid ranges raise ``ValueError`` naming the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from kafka_protocol.record_batch import HEADER_BYTES

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
SEVEN_DAYS_MS = 7 * 24 * 60 * 60 * 1000
OFFSET_INDEX_ENTRY_BYTES = 8
TIME_INDEX_ENTRY_BYTES = 12

# Kafka topic config name -> (LogConfig field, minimum value, maximum value)
TOPIC_CONFIG_KEYS: dict[str, tuple[str, int, int]] = {
    "segment.bytes": ("segment_bytes", HEADER_BYTES, INT32_MAX),
    "segment.ms": ("segment_ms", 1, INT64_MAX),
    "retention.ms": ("retention_ms", -1, INT64_MAX),
    "retention.bytes": ("retention_bytes", -1, INT64_MAX),
    "index.interval.bytes": ("index_interval_bytes", 0, INT32_MAX),
    "flush.messages": ("flush_interval_messages", 1, INT64_MAX),
    "flush.ms": ("flush_interval_ms", 0, INT64_MAX),
    "segment.index.bytes": ("segment_index_bytes", TIME_INDEX_ENTRY_BYTES, INT32_MAX),
    "file.delete.delay.ms": ("file_delete_delay_ms", 0, INT64_MAX),
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = SEVEN_DAYS_MS
    retention_ms: int = SEVEN_DAYS_MS  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    index_interval_bytes: int = 4096
    flush_interval_messages: int = INT64_MAX  # 1: fsync every append
    flush_interval_ms: int = INT64_MAX
    segment_index_bytes: int = 10 * 1024 * 1024
    # How long a deleted segment's open file stays open, so a sendfile already under way
    # finishes; the name is already gone from the directory.
    file_delete_delay_ms: int = 60_000
    # Broker-level in Kafka (log.flush.offset.checkpoint.interval.ms): how often the
    # recovery point is checkpointed; a stale one only means more to re-validate after a crash.
    recovery_point_checkpoint_interval_ms: int = 60_000

    def __post_init__(self) -> None:
        for key, (name, low, high) in TOPIC_CONFIG_KEYS.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise ValueError(f"{key}={value} is outside [{low}, {high}]")

    @classmethod
    def from_topic_configs(
        cls, configs: Mapping[str, str], defaults: LogConfig | None = None
    ) -> LogConfig:
        """Overlay a topic's configs (Kafka names, string values) on ``defaults``."""
        changes: dict[str, int] = {}
        for key, (name, _, _) in TOPIC_CONFIG_KEYS.items():
            if key not in configs:
                continue
            raw = configs[key]
            try:
                changes[name] = int(raw.strip())
            except ValueError:
                raise ValueError(f"{key}={raw!r} is not an integer") from None
        if (tiny := configs.get("internal.segment.bytes")) is not None:
            # Kafka's undescribed override for tests: segments below segment.bytes' minimum.
            try:
                changes["segment_bytes"] = int(tiny.strip())
            except ValueError:
                raise ValueError(f"internal.segment.bytes={tiny!r} is not an integer") from None
        return dataclasses.replace(defaults or cls(), **changes)

    @property
    def max_offset_index_entries(self) -> int:
        return self.segment_index_bytes // OFFSET_INDEX_ENTRY_BYTES

    @property
    def max_time_index_entries(self) -> int:
        return self.segment_index_bytes // TIME_INDEX_ENTRY_BYTES
