"""Run one node: controller, broker or both, until SIGTERM / Ctrl-C.

Two ways to run:

* **Single combined node** (``kraft dev``; no ``controller.quorum.voters``): configuration
  (already validated) -> ``meta.properties`` (cluster id, node id; refuse a data directory
  that belongs to another node) -> local metadata log and controller -> broker registration
  -> broker (replays the image, opens its partitions, recovers their logs) -> Kafka listener.
* **In a quorum** (``kraft.node.quorum_member``): a controller starts its Raft voter and its
  CONTROLLER listener; a broker starts its Kafka listener, tails the committed metadata log,
  registers and heartbeats. Either role, or both.

Then the REST admin API, and one ``READY`` line on stdout once the node serves (a broker in
a quorum: registered, unfenced and caught up; a controller: the quorum has a leader).
Shutdown reverses it: a broker in a quorum first moves its leaderships away (controlled
shutdown), then listeners stop, what is in flight finishes, and logs are flushed and closed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import logging
import signal
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.broker import Broker, BrokerConfig
from broker.controller_channel import Forwarder
from broker.coordinator.runtime import CoordinatorConfig
from broker.group.classic_member import GroupConfig
from broker.group.consumer import ConsumerGroupConfig
from broker.group.consumer_assignors import CLASS_NAMES
from broker.log.config import LogConfig
from broker.log.errors import LogError
from broker.metrics import BrokerMetrics
from broker.security.session import SecurityProtocol
from broker.storage import FileStorage
from broker.transaction.partitions import TransactionConfig
from kraft.controller.result import ControllerConfig
from kraft.node.bootstrap_scram import with_bootstrap_records
from kraft.node.config import ConfigError, NodeConfig, StartupError, listener_limits
from kraft.node.local_channel import ControllerError, LocalControllerChannel
from kraft.node.quorum_member import BrokerLifecycleError, BrokerMember, QuorumMember
from kraft.node.security_config import (
    broker_listeners,
    image_scram_lookup,
    inter_broker_client,
    security_of,
)
from metadata_log.configs import BROKER_CONFIGS, effective_topic_config
from metadata_log.image import ClusterImage

log = logging.getLogger("kraft.node.run")


M_TOP_PAD = -2  # glibc mallopt parameter
ALLOCATOR_TOP_PAD_BYTES = 64 * 1024 * 1024


def tune_allocator() -> None:
    """Keep 64 MiB of heap headroom instead of returning it to the kernel after every large
    request (glibc's ``M_TOP_PAD``): produce frames of ~1 MiB otherwise make the heap grow and
    shrink per request, and the page faults cost more CPU than the broker's own work
    (measured: 2.35 -> 1.05 broker CPU-s per GB produced).  A no-op off glibc."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(M_TOP_PAD, ALLOCATOR_TOP_PAD_BYTES)
    except (OSError, AttributeError):
        pass


def ensure_meta_properties(cfg: NodeConfig) -> str:
    """Kafka's ``meta.properties``: the cluster id this data belongs to, and the node id."""
    path = cfg.metadata_log_dir / "meta.properties"
    if path.exists():
        props = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        if props.get("node.id") != str(cfg.node_id):
            raise ConfigError(
                f"{path} belongs to node {props.get('node.id')}, not node.id={cfg.node_id};"
                " use another data directory"
            )
        if not props.get("cluster.id"):
            raise ConfigError(f"{path} has no cluster.id; restore it or use another directory")
        return props["cluster.id"]
    cluster_id = cfg.get("cluster.id") or _new_cluster_id()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"version=1\ncluster.id={cluster_id}\nnode.id={cfg.node_id}\n")
    tmp.replace(path)
    return cluster_id


def _new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _check_log_defaults(cfg: NodeConfig) -> None:
    """Broker-level log.* defaults become every topic's configs: refuse bad ones at start,
    not at the first topic creation."""
    entries = effective_topic_config({}, dict(cfg.values))
    try:
        LogConfig.from_topic_configs({k: e.value for k, e in entries.items() if e.value})
    except ValueError as exc:
        raise ConfigError(f"broker log defaults: {exc}") from None


def _group_config(cfg: NodeConfig) -> GroupConfig:
    low = cfg.get_bounded_int("group.min.session.timeout.ms")
    high = cfg.get_bounded_int("group.max.session.timeout.ms")
    if high < low:
        raise ConfigError(
            f"group.max.session.timeout.ms={high} is below group.min.session.timeout.ms={low}"
        )
    return GroupConfig(
        min_session_timeout_ms=low,
        max_session_timeout_ms=high,
        initial_rebalance_delay_ms=cfg.get_bounded_int("group.initial.rebalance.delay.ms"),
        max_size=cfg.get_bounded_int("group.max.size"),
    )


def _consumer_group_config(cfg: NodeConfig) -> ConsumerGroupConfig:
    """The group.consumer.* keys; the session timeout and heartbeat interval within their
    min/max keys, as Kafka's GroupCoordinatorConfig requires."""
    session = cfg.get_bounded_int("group.consumer.session.timeout.ms")
    heartbeat = cfg.get_bounded_int("group.consumer.heartbeat.interval.ms")
    for key, value, low, high in (
        (
            "session.timeout.ms",
            session,
            cfg.get_bounded_int("group.consumer.min.session.timeout.ms"),
            cfg.get_bounded_int("group.consumer.max.session.timeout.ms"),
        ),
        (
            "heartbeat.interval.ms",
            heartbeat,
            cfg.get_bounded_int("group.consumer.min.heartbeat.interval.ms"),
            cfg.get_bounded_int("group.consumer.max.heartbeat.interval.ms"),
        ),
    ):
        if not low <= value <= high:
            raise ConfigError(f"group.consumer.{key}={value} must be within {low}-{high}")
    if heartbeat >= session:
        raise ConfigError("group.consumer.heartbeat.interval.ms must be below the session timeout")
    definition = BROKER_CONFIGS["group.consumer.assignors"]
    raw = cfg.get("group.consumer.assignors") or definition.default or ""
    if (error := definition.validate(raw)) is not None:
        raise ConfigError(f"group.consumer.assignors={raw!r}: {error}")
    names = [CLASS_NAMES[a.strip()] for a in raw.split(",") if a.strip()]
    if not names:
        raise ConfigError("group.consumer.assignors must name at least one assignor")
    return ConsumerGroupConfig(
        session_timeout_ms=session,
        heartbeat_interval_ms=heartbeat,
        max_size=cfg.get_bounded_int("group.consumer.max.size"),
        assignors=tuple(dict.fromkeys(names)),
    )


def _transaction_config(cfg: NodeConfig) -> TransactionConfig:
    return TransactionConfig(
        num_partitions=cfg.get_bounded_int("transaction.state.log.num.partitions"),
        replication_factor=cfg.get_bounded_int("transaction.state.log.replication.factor"),
        min_isr=cfg.get_bounded_int("transaction.state.log.min.isr"),
        segment_bytes=cfg.get_bounded_int("transaction.state.log.segment.bytes"),
        max_timeout_ms=cfg.get_bounded_int("transaction.max.timeout.ms"),
        id_expiration_ms=cfg.get_bounded_int("transactional.id.expiration.ms"),
        abort_timed_out_interval_ms=cfg.get_bounded_int(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        ),
        remove_expired_interval_ms=cfg.get_bounded_int(
            "transaction.remove.expired.transaction.cleanup.interval.ms"
        ),
        verification_enabled=cfg.get_bool("transaction.partition.verification.enable", True),
    )


def _checked_string(cfg: NodeConfig, key: str) -> str | None:
    """A string key of the config table, refused at startup when its validator refuses it."""
    raw = cfg.get(key)
    if raw is not None and (error := BROKER_CONFIGS[key].validate(raw)) is not None:
        raise ConfigError(error)
    return raw


def broker_config(cfg: NodeConfig, image: Callable[[], Any] = lambda: None) -> BrokerConfig:
    """The broker's settings; ``image()`` is the metadata image SCRAM logins read."""
    listeners = broker_listeners(cfg, image_scram_lookup(image))
    inter_broker = security_of(cfg).inter_broker_listener
    _check_log_defaults(cfg)
    primary = next(
        (x for x in listeners if x.security.protocol == SecurityProtocol.PLAINTEXT), listeners[0]
    )
    return BrokerConfig(
        node_id=cfg.node_id,
        host=primary.host,
        port=primary.port,
        advertised_host=primary.advertised_host,
        advertised_port=primary.advertised_port,
        listeners=listeners,
        inter_broker_listener=inter_broker,
        inter_broker_security=inter_broker_client(cfg),
        log_dir=cfg.log_dirs[0],
        more_log_dirs=cfg.log_dirs[1:],
        rack=cfg.get("broker.rack"),
        replica_selector=_checked_string(cfg, "replica.selector.class"),
        auto_topic_creation=cfg.get_bool("auto.create.topics.enable", True),
        num_partitions=cfg.get_int("num.partitions", 1),
        default_replication_factor=cfg.get_int("default.replication.factor", 1),
        listener_limits=listener_limits(cfg),
        retention_check_interval_ms=cfg.get_bounded_int("log.retention.check.interval.ms"),
        replica_lag_time_max_ms=cfg.get_bounded_int("replica.lag.time.max.ms"),
        producer_id_expiration_ms=cfg.get_bounded_int("producer.id.expiration.ms"),
        producer_id_expiration_check_interval_ms=cfg.get_bounded_int(
            "producer.id.expiration.check.interval.ms"
        ),
        log_cleaner_backoff_ms=cfg.get_bounded_int("log.cleaner.backoff.ms"),
        replica_fetch_wait_max_ms=cfg.get_bounded_int("replica.fetch.wait.max.ms"),
        replica_fetch_max_bytes=cfg.get_bounded_int("replica.fetch.max.bytes"),
        replica_fetch_response_max_bytes=cfg.get_bounded_int("replica.fetch.response.max.bytes"),
        high_watermark_checkpoint_interval_ms=cfg.get_bounded_int(
            "replica.high.watermark.checkpoint.interval.ms"
        ),
        coordinator=CoordinatorConfig(
            num_partitions=cfg.get_bounded_int("offsets.topic.num.partitions"),
            replication_factor=cfg.get_bounded_int("offsets.topic.replication.factor"),
            segment_bytes=cfg.get_bounded_int("offsets.topic.segment.bytes"),
            retention_ms=cfg.get_bounded_int("offsets.retention.minutes") * 60_000,
            retention_check_interval_ms=cfg.get_bounded_int("offsets.retention.check.interval.ms"),
            commit_timeout_ms=cfg.get_bounded_int("offsets.commit.timeout.ms"),
            metadata_max_bytes=cfg.get_bounded_int("offset.metadata.max.bytes"),
            groups=_group_config(cfg),
            consumer_groups=_consumer_group_config(cfg),
        ),
        transactions=_transaction_config(cfg),
        broker_defaults=dict(cfg.values),
        max_request_partition_size_limit=cfg.get_bounded_int("max.request.partition.size.limit"),
    )


@dataclass
class Node:
    config: NodeConfig
    broker: Broker | None = None
    channel: LocalControllerChannel | None = None
    quorum: QuorumMember | None = None
    follower: BrokerMember | None = None
    admin_port: int | None = None
    cluster_id: str = ""
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    _cleanups: list[Callable[[], object]] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        if self.quorum is not None and not self.quorum.ready:
            return False
        if self.follower is not None:
            return self.follower.ready
        if self.config.is_broker:
            return self.broker is not None and self.broker.listener is not None
        return self.quorum is not None

    @property
    def controller(self) -> Forwarder | None:
        """Where this node's admin writes go: its broker's controller channel, else (a
        controller-only node) its quorum controller's forwarder."""
        if self.broker is not None:
            return self.broker.controller
        return self.quorum.forwarder if self.quorum is not None else None

    @property
    def metrics(self) -> BrokerMetrics | None:
        if self.broker is not None:
            return self.broker.metrics
        return self.quorum.dispatcher.metrics if self.quorum is not None else None

    @property
    def image(self) -> ClusterImage | None:
        if self.broker is not None:
            return self.broker.image
        return self.quorum.controller.image if self.quorum is not None else None

    async def controller_status(self) -> dict[str, Any]:
        """The quorum as this node sees it (REST ``/v1/cluster``)."""
        if self.quorum is not None:
            return self.quorum.status()
        if self.follower is not None:
            return await self.follower.controller_status()
        node_id, image = self.config.node_id, self.image
        voter = {"id": node_id, "address": None, "lag": 0}
        return {"leader_id": node_id, "epoch": image.epoch if image else -1, "voters": [voter]}

    async def start(self) -> None:
        cfg = self.config
        if not cfg.get("controller.quorum.voters") and not cfg.get(
            "controller.quorum.bootstrap.servers"
        ):
            await self._start_single()
        else:
            await self._start_in_quorum()
        if cfg.admin_listener is not None:
            from kraft.rest import start_admin_api

            host, port = cfg.admin_listener
            runner, self.admin_port = await start_admin_api(self, host, port)
            self._cleanups.append(runner.cleanup)

    async def _start_in_quorum(self) -> None:
        cfg = self.config
        if not cfg.get("cluster.id") and not (cfg.metadata_log_dir / "meta.properties").exists():
            raise ConfigError(
                "cluster.id is required in a multi-node cluster: give every node the same id"
                " (kraft dev generates one)"
            )
        cluster_id = self.cluster_id = ensure_meta_properties(cfg)
        if cfg.is_controller:
            self.quorum = await QuorumMember.start(cfg, cluster_id)
            self._cleanups.append(self.quorum.stop)
        if cfg.is_broker:
            bcfg = broker_config(cfg, lambda: self.image)
            self.follower = await BrokerMember.start(cfg, cluster_id, bcfg)
            self.broker = self.follower.broker
            self._cleanups.append(self.follower.stop)

    async def _start_single(self) -> None:
        cfg = self.config
        if not (cfg.is_broker and cfg.is_controller):
            raise ConfigError(
                "process.roles: a broker-only or controller-only node needs"
                " controller.quorum.voters (controllers) or"
                " controller.quorum.bootstrap.servers (brokers)"
            )
        cluster_id = self.cluster_id = ensure_meta_properties(cfg)
        try:
            controller_config = ControllerConfig.from_properties(cfg.values, cluster_id=cluster_id)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        controller_config = with_bootstrap_records(controller_config, cfg.metadata_log_dir)
        self.channel = LocalControllerChannel.open(
            cfg.metadata_log_dir, cfg.node_id, cluster_id, controller_config
        )
        bcfg = broker_config(cfg, lambda: self.image)
        self.broker = Broker(bcfg, FileStorage(), self.channel, self.channel.image, cluster_id)
        self.channel.subscribe(self.broker.on_metadata)
        await self.broker.start()
        # Registered once listening, so a port of 0 (kraft dev --port 0) is registered as the
        # port bound, which is what Metadata and REST then name.
        host, port = self.broker.advertised
        await self.channel.register_broker(
            host,
            port,
            bcfg.rack,
            self.broker.replicas.log_dirs,
            endpoints=self.broker.registered_endpoints(),
        )
        self.broker.log_dir_listeners.append(self.channel.log_dirs_changed)

    async def stop(self) -> None:
        for cleanup in reversed(self._cleanups):
            result = cleanup()
            if asyncio.iscoroutine(result):
                await result
        try:
            if self.broker is not None and self.follower is None:
                await self.broker.stop()
        finally:
            if self.channel is not None:
                self.channel.close()

    async def wait_ready(self) -> None:
        """Return once the node serves (a broker in a quorum: registered, unfenced, caught
        up; a controller: the quorum has an active controller)."""
        while not self.ready:
            await asyncio.sleep(0.05)

    def ready_line(self) -> str:
        admin = ""
        if self.config.admin_listener is not None:
            admin_host = self.config.admin_listener[0]
            admin_host = "127.0.0.1" if admin_host in ("0.0.0.0", "") else admin_host
            scheme = "https" if self.config.admin_https else "http"
            admin = f" admin={scheme}://{admin_host}:{self.admin_port}"
        if self.broker is None:
            assert self.quorum is not None
            return f"READY controller={self.quorum.advertised}{admin}"
        assert self.broker.listener is not None
        host, port = self.broker.advertised
        listeners = ",".join(
            f"{name}://{h}:{p}" for name, h, p, _ in self.broker.registered_endpoints()
        )
        return f"READY bootstrap={host}:{port}{admin} listeners={listeners}"


async def serve(cfg: NodeConfig, announce: Callable[[str], None]) -> None:
    """Run a node until SIGTERM/SIGINT; announce the READY line once serving."""
    tune_allocator()
    node = Node(cfg)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, node.stopping.set)
    try:
        starting = asyncio.ensure_future(node.start())
        stop = asyncio.ensure_future(node.stopping.wait())
        await asyncio.wait({starting, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():  # SIGTERM while starting: do not announce READY
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            return
        try:
            starting.result()
        except (OSError, ControllerError, LogError, BrokerLifecycleError) as exc:
            raise StartupError(str(exc)) from exc
        ready = asyncio.ensure_future(node.wait_ready())
        await asyncio.wait({ready, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            ready.cancel()
            return
        announce(node.ready_line())
        await stop
        log.info("stopping node %d", cfg.node_id)
    finally:
        await node.stop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)


def run(main: Callable[[], object]) -> None:
    """Run a coroutine function on uvloop when installed, else asyncio."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())  # type: ignore[arg-type]
    else:
        uvloop.run(main())  # type: ignore[arg-type]


def data_path(value: str) -> Path:
    return Path(value).expanduser()
