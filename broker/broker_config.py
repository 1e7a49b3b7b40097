"""A broker's static settings (``server.properties``' broker keys), read once at start."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from broker.coordinator.runtime import CoordinatorConfig
from broker.security.client_security import ClientSecurity
from broker.security.session import ListenerSecurity, SecurityProtocol
from broker.server import ListenerLimits
from broker.transaction.partitions import TransactionConfig


@dataclass(frozen=True, slots=True)
class BrokerListener:
    """One named listener the broker serves (``listeners`` / ``advertised.listeners``)."""

    name: str
    host: str
    port: int  # 0: any free port
    advertised_host: str
    advertised_port: int  # 0: the port bound
    security: ListenerSecurity = field(default_factory=ListenerSecurity)


@dataclass(frozen=True)
class BrokerConfig:
    node_id: int
    host: str
    port: int
    advertised_host: str
    advertised_port: int
    log_dir: Path
    more_log_dirs: tuple[Path, ...] = ()  # the other entries of log.dirs (JBOD)
    rack: str | None = None  # broker.rack
    replica_selector: str | None = None  # replica.selector.class (KIP-392)
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
    transactions: TransactionConfig = field(default_factory=TransactionConfig)  # transaction.*
    broker_defaults: dict[str, str] = field(default_factory=dict)  # log.* keys as configured
    # Every listener served; empty: one PLAINTEXT listener on host:port (tests build it so).
    listeners: tuple[BrokerListener, ...] = ()
    inter_broker_listener: str = "PLAINTEXT"  # inter.broker.listener.name
    inter_broker_security: ClientSecurity | None = None  # how this broker fetches from leaders
    max_request_partition_size_limit: int = 2000  # DescribeTopicPartitions' page size cap

    @property
    def served_listeners(self) -> tuple[BrokerListener, ...]:
        if self.listeners:
            return self.listeners
        plaintext = ListenerSecurity(name=self.inter_broker_listener)
        return (
            BrokerListener(
                self.inter_broker_listener,
                self.host,
                self.port,
                self.advertised_host,
                self.advertised_port,
                plaintext,
            ),
        )

    @property
    def primary_listener(self) -> BrokerListener:
        """The listener of the READY line's ``bootstrap=`` and of internal requests: the first
        PLAINTEXT one, else the first."""
        served = self.served_listeners
        return next(
            (x for x in served if x.security.protocol == SecurityProtocol.PLAINTEXT), served[0]
        )
