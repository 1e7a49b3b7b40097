"""``LogConfig``: the per-partition storage settings, Kafka's topic config names in snake_case.

``from_topic_configs`` reads Kafka's names (``segment.bytes``, ``retention.ms``,
``cleanup.policy``, ...) from a topic's string configs; keys it does not own
(``min.insync.replicas``, ...) are left to others.  Values outside Kafka's valid ranges raise
``ValueError`` naming the key.

Defaults and ranges come from the one table of topic configs,
:data:`metadata_log.configs.TOPIC_CONFIGS`; this module states only where the storage layer's
minimum differs (:data:`STORAGE_MINIMUMS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from kafka_protocol.record_batch import HEADER_BYTES
from metadata_log.configs import (
    INT_MAX,
    LONG_MAX,
    TOPIC_CONFIGS,
    EachOneOf,
    Range,
)

INT32_MAX: Final = INT_MAX
INT64_MAX: Final = LONG_MAX
OFFSET_INDEX_ENTRY_BYTES = 8
TIME_INDEX_ENTRY_BYTES = 12

# Kafka topic config name -> LogConfig field, for the integer keys the log reads.
_FIELDS: Final = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "flush.messages": "flush_interval_messages",
    "flush.ms": "flush_interval_ms",
    "segment.index.bytes": "segment_index_bytes",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "delete.retention.ms": "delete_retention_ms",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
}
# Where the log's minimum is not the topic config's: it takes segments as small as one batch
# header (``internal.segment.bytes``, for tests) and an index of one time-index entry, and it
# refuses a retention.bytes below -1 (no size limit), which Kafka leaves unvalidated.
STORAGE_MINIMUMS: Final = {
    "segment.bytes": HEADER_BYTES,
    "segment.index.bytes": TIME_INDEX_ENTRY_BYTES,
    "retention.bytes": -1,
}
# Kafka topic config name -> (LogConfig field, minimum value, maximum value)
TOPIC_CONFIG_KEYS: Final[dict[str, tuple[str, int, int]]] = {
    key: (name, STORAGE_MINIMUMS.get(key, low), high)
    for key, name in _FIELDS.items()
    for low, high in [TOPIC_CONFIGS[key].bounds]
}
_V = TypeVar("_V")


def _validator(key: str, kind: type[_V]) -> _V:
    validator = TOPIC_CONFIGS[key].validator
    assert isinstance(validator, kind), f"{key}'s validator is a {kind.__name__}"
    return validator


CLEANUP_POLICIES: Final = _validator("cleanup.policy", EachOneOf).allowed
_DIRTY_RATIO: Final = _validator("min.cleanable.dirty.ratio", Range)


def _default(key: str) -> int:
    return TOPIC_CONFIGS[key].int_default


def _default_policy() -> tuple[str, ...]:
    value = TOPIC_CONFIGS["cleanup.policy"].default_value
    assert isinstance(value, list)
    return tuple(value)


def _default_ratio() -> float:
    value = TOPIC_CONFIGS["min.cleanable.dirty.ratio"].default_value
    assert isinstance(value, float)
    return value


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = _default("segment.bytes")
    segment_ms: int = _default("segment.ms")
    retention_ms: int = _default("retention.ms")  # -1: keep forever
    retention_bytes: int = _default("retention.bytes")  # -1: no size limit
    index_interval_bytes: int = _default("index.interval.bytes")
    flush_interval_messages: int = _default("flush.messages")  # 1: fsync every append
    flush_interval_ms: int = _default("flush.ms")
    segment_index_bytes: int = _default("segment.index.bytes")
    # How long a deleted segment's open file stays open, so a sendfile already under way
    # finishes; the name is already gone from the directory.
    file_delete_delay_ms: int = _default("file.delete.delay.ms")
    # Broker-level in Kafka (log.flush.offset.checkpoint.interval.ms): how often the
    # recovery point is checkpointed; a stale one only means more to re-validate after a crash.
    recovery_point_checkpoint_interval_ms: int = 60_000
    # Compaction (cleaner.py).  ``cleanup_policy``: any of "compact", "delete" (retention).
    cleanup_policy: tuple[str, ...] = _default_policy()
    delete_retention_ms: int = _default("delete.retention.ms")  # how long a tombstone stays
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    min_cleanable_dirty_ratio: float = _default_ratio()
    # Produce validation (validator.py, KIP-937): how far a CreateTime timestamp may be
    # before or after the broker's clock.
    message_timestamp_before_max_ms: int = _default("message.timestamp.before.max.ms")
    message_timestamp_after_max_ms: int = _default("message.timestamp.after.max.ms")

    def __post_init__(self) -> None:
        for key, (name, low, high) in TOPIC_CONFIG_KEYS.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise ValueError(f"{key}={value} is outside [{low}, {high}]")
        if unknown := set(self.cleanup_policy) - set(CLEANUP_POLICIES):
            raise ValueError(f"cleanup.policy={','.join(self.cleanup_policy)}: unknown {unknown}")
        if _DIRTY_RATIO(self.min_cleanable_dirty_ratio) is not None:
            raise ValueError(
                f"min.cleanable.dirty.ratio={self.min_cleanable_dirty_ratio}"
                f" is outside [{_DIRTY_RATIO.minimum}, {_DIRTY_RATIO.maximum}]"
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
