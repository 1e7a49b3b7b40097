"""``LogConfig``: the per-partition storage settings, Kafka's topic config names in snake_case.

``from_topic_configs`` reads Kafka's names (``segment.bytes``, ``retention.ms``,
``cleanup.policy``, ...) from a topic's string configs; keys it does not own
(``min.insync.replicas``, ...) are left to others.  Values outside Kafka's valid ranges raise
``ValueError`` naming the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
    "delete.retention.ms": ("delete_retention_ms", 0, INT64_MAX),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", 0, INT64_MAX),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", 1, INT64_MAX),
}
CLEANUP_POLICIES = ("compact", "delete")
ONE_DAY_MS = 24 * 60 * 60 * 1000


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
    # Compaction (cleaner.py).  ``cleanup_policy``: any of "compact", "delete" (retention).
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = ONE_DAY_MS  # how long a cleaned tombstone stays readable
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX
    min_cleanable_dirty_ratio: float = 0.5

    def __post_init__(self) -> None:
        for key, (name, low, high) in TOPIC_CONFIG_KEYS.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise ValueError(f"{key}={value} is outside [{low}, {high}]")
        if unknown := set(self.cleanup_policy) - set(CLEANUP_POLICIES):
            raise ValueError(f"cleanup.policy={','.join(self.cleanup_policy)}: unknown {unknown}")
        if not 0 <= self.min_cleanable_dirty_ratio <= 1:
            raise ValueError(
                f"min.cleanable.dirty.ratio={self.min_cleanable_dirty_ratio} is outside [0, 1]"
            )

    @property
    def compact(self) -> bool:
        """``cleanup.policy`` includes compaction (the log cleaner keeps the latest per key)."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """``cleanup.policy`` includes deletion (retention by ``retention.ms``/``.bytes``)."""
        return "delete" in self.cleanup_policy

    @property
    def roll_ms(self) -> int:
        """``segment.ms``, capped for a compacted log by ``max.compaction.lag.ms``: the active
        segment is never cleaned, so it must roll for its records to become cleanable."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms

    @classmethod
    def from_topic_configs(
        cls, configs: Mapping[str, str], defaults: LogConfig | None = None
    ) -> LogConfig:
        """Overlay a topic's configs (Kafka names, string values) on ``defaults``."""
        changes: dict[str, Any] = {}
        for key, (name, _, _) in TOPIC_CONFIG_KEYS.items():
            if key not in configs:
                continue
            raw = configs[key]
            try:
                changes[name] = int(raw.strip())
            except ValueError:
                raise ValueError(f"{key}={raw!r} is not an integer") from None
        changes.update(_compaction_configs(configs))
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


def _compaction_configs(configs: Mapping[str, str]) -> dict[str, Any]:
    """``cleanup.policy`` (a comma list) and ``min.cleanable.dirty.ratio`` (a float)."""
    changes: dict[str, Any] = {}
    if (policy := configs.get("cleanup.policy")) is not None:
        changes["cleanup_policy"] = tuple(p.strip() for p in policy.split(",") if p.strip())
    if (ratio := configs.get("min.cleanable.dirty.ratio")) is not None:
        try:
            changes["min_cleanable_dirty_ratio"] = float(ratio.strip())
        except ValueError:
            raise ValueError(f"min.cleanable.dirty.ratio={ratio!r} is not a number") from None
    return changes
