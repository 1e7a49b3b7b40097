"""A broker's static settings (``server.properties``' broker keys), read once at start."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from broker.coordinator.runtime import CoordinatorConfig
from broker.server import ListenerLimits


@dataclass(frozen=True)
class BrokerConfig:
    node_id: int
    host: str
    port: int
    advertised_host: str
    advertised_port: int
    log_dir: Path
    rack: str | None = None
    auto_topic_creation: bool = True  # auto.create.topics.enable
    num_partitions: int = 1
    default_replication_factor: int = 1
    listener_limits: ListenerLimits = field(default_factory=ListenerLimits)
    retention_check_interval_ms: int = 300_000
    replica_lag_time_max_ms: int = 30_000
    producer_id_expiration_ms: int = 86_400_000
    producer_id_expiration_check_interval_ms: int = 600_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1 << 20
    replica_fetch_response_max_bytes: int = 10 << 20
    high_watermark_checkpoint_interval_ms: int = 5_000
    log_cleaner_backoff_ms: int = 15_000
    coordinator: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    broker_defaults: dict[str, str] = field(default_factory=dict)  # log.* keys as configured
