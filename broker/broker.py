"""One broker: its partitions, its view of the metadata, its Kafka listener.

The broker never changes metadata itself.  It reads the :class:`ClusterImage` published by
the metadata log and reacts to each delta (``on_metadata``): partitions it hosts are opened,
reconfigured or deleted, and each one's registration makes this broker its leader or a
follower (the replica manager switches the role; the fetcher manager fetches followed
partitions from their leaders).  Writes (create a topic, alter a config, allocate producer
ids) go to the controller through a :class:`ControllerChannel`; leaders' ISR proposals go
through the replica manager's ``alter_partition`` hook (AlterPartition, set by the broker's
quorum role; none on a single combined node).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Coroutine, Iterable

from prometheus_client.core import Metric

from broker.broker_config import BrokerConfig as BrokerConfig  # where kraft imports it
from broker.controller_channel import ControllerChannel
from broker.coordinator.records import OFFSETS_TOPIC
from broker.coordinator.runtime import GroupCoordinator
from broker.dispatcher import RequestDispatcher
from broker.handlers import build_handlers
from broker.identity import BrokerIdentity
from broker.log.config import LogConfig
from broker.log_dir import open_log_directories
from broker.log_dir_assignments import DirectoryAssignments
from broker.metrics import BrokerMetrics, gauge
from broker.partition import Partition, Registration
from broker.quotas.manager import ClientQuotaManager, QuotaSettings
from broker.quotas.throttle import RequestThrottle
from broker.replica_manager import ReplicaManager
from broker.replication.fetcher import FetcherConfig, ReplicaFetcherManager
from broker.replication.partition_state import PartitionState
from broker.replication.throttle import ReplicationThrottles
from broker.server import KafkaListener
from broker.storage import Storage
from broker.transaction.coordinator import TransactionCoordinator
from broker.transaction.producer_ids import ProducerIdAllocator
from broker.transaction.records import TRANSACTION_STATE_TOPIC
from broker.transaction.remote import BrokerConnections
from kafka_protocol.clock import monotonic_ms
from kafka_protocol.messages import ApiVersionsResponse
from metadata_log.configs import effective_topic_config
from metadata_log.delta import MetadataDelta
from metadata_log.image import (
    NO_LEADER,
    ClusterImage,
    ConfigResourceType,
    LeaderRecoveryState,
    PartitionImage,
    TopicImage,
)

log = logging.getLogger("broker")


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        storage: Storage,
        controller: ControllerChannel,
        image: ClusterImage,
        cluster_id: str,
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = cluster_id
        self.controller = controller
        self.image = image
        self.node = BrokerIdentity(
            config.node_id,
            cluster_id,
            config.rack,
            lambda: self.advertised,
            self.advertised_on,
            config.primary_listener.name,
        )
        self._settings_image: ClusterImage | None = None
        self._settings: dict[str, tuple[dict[str, str], LogConfig]] = {}
        self.metrics = BrokerMetrics()
        self.replicas = ReplicaManager(
            storage,
            open_log_directories(
                storage, [str(p) for p in (config.log_dir, *config.more_log_dirs)]
            ),
            broker_id=config.node_id,
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            producer_id_expiration_ms=config.producer_id_expiration_ms,
        )
        self.replicas.on_append = self._count_append
        self.replicas.on_log_dir_offline = self._log_dir_failed
        # Several log.dirs: the controller hears where each replica lives (KIP-858).
        self.dir_assignments = (
            DirectoryAssignments(
                config.node_id,
                lambda: self.broker_epoch_of(self.node_id),
                controller,
                lambda: self.image,
            )
            if len(self.replicas.log_dirs) > 1
            else None
        )
        self.replicas.on_log_dir_moved = self._report_directory
        # Told when the log directory fails (the broker's lifecycle heartbeats at once).
        self.log_dir_listeners: list[Callable[[], None]] = []
        # leader.* / follower.replication.throttled.* from the image (KIP-73)
        self.replication_throttles = ReplicationThrottles(
            config.node_id, lambda: self.image, config.broker_defaults, monotonic_ms
        )
        self.fetchers = ReplicaFetcherManager(
            self.replicas,
            self.endpoint_of,
            FetcherConfig(
                config.node_id,
                max_wait_ms=config.replica_fetch_wait_max_ms,
                partition_max_bytes=config.replica_fetch_max_bytes,
                response_max_bytes=config.replica_fetch_response_max_bytes,
                on_corrupt_batch=self.metrics.corrupt_batches.labels("follower_fetch").inc,
                security=config.inter_broker_security,
                throttle=self.replication_throttles.follower,
            ),
        )
        self.coordinator = GroupCoordinator(
            self.replicas,
            controller,
            lambda: self.image,
            config.coordinator,
            self.replicas.clock_ms,
        )
        # one allocator for idempotent and transactional producers
        self.producer_ids = ProducerIdAllocator(controller, config.node_id)
        # the transaction coordinator; ``verify`` is the produce path's TransactionVerifier
        self.transactions = TransactionCoordinator(
            self.replicas,
            controller,
            lambda: self.image,
            config.transactions,
            self.replicas.clock_ms,
            self.producer_ids.allocate,
            BrokerConnections(
                self.endpoint_of,
                config.inter_broker_security,
                f"transaction-coordinator-{config.node_id}",
            ),
            config.node_id,
        )
        self.coordinator.verifier = self.transactions  # TxnOffsetCommit verifies (KIP-890)
        self._started = False
        self._tasks: set[asyncio.Task[object]] = set()
        self._became_leader: list[str] = []
        self._became_follower: list[str] = []
        # This process's registration; a leadership in the image counts only once the image
        # holds it (None: a single combined node, where no earlier incarnation can lead).
        self.incarnation_id: uuid.UUID | None = None
        self.dispatcher = RequestDispatcher(
            build_handlers(self),
            self.metrics,
            RequestThrottle(  # client quotas (broker.quotas)
                ClientQuotaManager(
                    lambda: self.image.client_quotas,
                    QuotaSettings.from_config(config.broker_defaults),
                )
            ),
        )
        self.listener: KafkaListener | None = None  # the primary one (config.primary_listener)
        self.listeners: dict[str, KafkaListener] = {}  # every one, by name
        self._maintenance: list[asyncio.Task[None]] = []
        self.metrics.add_state(self._state_metrics)
        self.metrics.add_state(self.transactions.state_metrics)
        self.apply_image(image)

    @property
    def advertised(self) -> tuple[str, int]:
        """The primary listener's advertised address."""
        address = self.advertised_on(self.config.primary_listener.name)
        assert address is not None
        return address

    def advertised_on(self, name: str) -> tuple[str, int] | None:
        """A listener's advertised address (its bound port when advertised with port 0)."""
        spec = next((x for x in self.config.served_listeners if x.name == name), None)
        if spec is None:
            return None
        bound = self.listeners.get(name)
        return spec.advertised_host, spec.advertised_port or (bound.port if bound else 0)

    def registered_endpoints(self) -> list[tuple[str, str, int, int]]:
        """(name, host, port, security protocol id) of every listener, as registered."""
        out = []
        for spec in self.config.served_listeners:
            host, port = self.advertised_on(spec.name) or (spec.advertised_host, 0)
            out.append((spec.name, host, port, int(spec.security.protocol)))
        return out

    def api_versions(self) -> list[ApiVersionsResponse.ApiVersion]:
        """What ApiVersions advertises: the dispatcher's table."""
        return self.dispatcher.api_versions()

    # --- metadata -----------------------------------------------------------------------------

    def on_metadata(self, delta: MetadataDelta, image: ClusterImage) -> None:
        """React to one delta (Kafka's ``ReplicaManager.applyDelta``): only partitions whose
        registration changed for this broker, or whose topic's configs changed, are touched,
        so a delta costs what it changed, not the size of the cluster."""
        if delta.image is not self.image:  # not built on what we hold (a snapshot): reconcile
            self.apply_image(image)
            return
        if image.brokers.get(self.node_id) != self.image.brokers.get(self.node_id):
            self.apply_image(image)  # our own registration changed: every leadership may
            return
        self.image = image
        changes = delta.local_changes(self.node_id)
        for tp in changes.deleted:
            if (tp.topic, tp.partition) in self.replicas.partitions:
                log.info("deleting partition %s-%d", tp.topic, tp.partition)
                self._remove(tp.topic, tp.partition)
        self._forget_offsets_of_deleted_topics(delta)
        touched = {(tp.topic, tp.partition) for tp in (*changes.leaders, *changes.followers)}
        if delta.configs_delta is not None:
            if any(
                r.resource_type == ConfigResourceType.BROKER for r in delta.configs_delta.changes
            ):
                touched.update(self.replicas.partitions)  # broker defaults reach every topic
            changed = {
                r.name
                for r in delta.configs_delta.changes
                if r.resource_type == ConfigResourceType.TOPIC
            }
            touched.update(key for key in self.replicas.partitions if key[0] in changed)
        for name, index in touched:
            topic = image.topics.get(name)
            partition = topic.partitions.get(index) if topic is not None else None
            if topic is not None and partition is not None and self.node_id in partition.replicas:
                self._open(topic, index, partition)
        self._log_role_changes()

    def apply_image(self, image: ClusterImage) -> None:
        """Open, reconfigure or delete hosted partitions to match the image."""
        self.image = image
        wanted: set[tuple[str, int]] = set()
        for topic in image.topics.by_name.values():
            for index, p in topic.partitions.items():
                if self.node_id in p.replicas:
                    wanted.add((topic.name, index))
                    self._open(topic, index, p)
        for key in list(self.replicas.partitions):
            if key not in wanted:
                log.info("deleting partition %s-%d", *key)
                self._remove(*key)
        self._log_role_changes()

    def _forget_offsets_of_deleted_topics(self, delta: MetadataDelta) -> None:
        topics = delta.topics_delta
        if topics is None or not topics.deleted_topic_ids or not self._started:
            return
        names = [
            t.name for i in topics.deleted_topic_ids if (t := topics.image.by_id.get(i)) is not None
        ]
        if names:
            self._background(self.coordinator.remove_offsets_of_topics(names))

    def _background(self, work: Coroutine[object, object, object]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _log_role_changes(self) -> None:
        """One line per metadata update that moved leaderships, not one per partition."""
        led, followed = self._became_leader, self._became_follower
        if led or followed:
            log.info(
                "now leading %d more partitions %s, following %d more %s",
                len(led),
                _sample(led),
                len(followed),
                _sample(followed),
            )
        self._became_leader, self._became_follower = [], []

    def _remove(self, topic: str, index: int) -> None:
        if topic == OFFSETS_TOPIC:
            self.coordinator.on_partition_removed(index)
        elif topic == TRANSACTION_STATE_TOPIC:
            self.transactions.on_partition_removed(index)
        self.fetchers.remove((topic, index))
        self.replicas.remove_partition(topic, index)

    def _registered_as_this_process(self) -> bool:
        """A restarted broker may find itself leading in the image it replays: that was its
        previous incarnation, whose log tail it may have lost (a power cut).  It leads only
        once the image holds its own registration; the controller moves leaderships away
        from a new incarnation when it can, and keeps the rest with it."""
        if self.incarnation_id is None:
            return True
        mine = self.image.brokers.get(self.node_id)
        return mine is not None and mine.incarnation_id == self.incarnation_id

    def broker_epoch_of(self, broker_id: int) -> int:
        """The epoch of a broker's current registration (-1 if unknown): a leader tags each
        follower fetch with it, so an ISR proposal names the incarnation that fetched."""
        broker = self.image.brokers.get(broker_id)
        return broker.epoch if broker is not None else -1

    def endpoint_of(self, broker_id: int, listener: str | None = None) -> tuple[str, int] | None:
        """A broker's address on ``listener`` (default: ``inter.broker.listener.name``, where
        replicas fetch); None if it has no such listener (Kafka leaves it out)."""
        name = listener or self.config.inter_broker_listener
        if broker_id == self.node_id:
            return self.advertised_on(name)
        broker = self.image.brokers.get(broker_id)
        endpoint = broker.listener(name) if broker is not None else None
        return (endpoint.host, endpoint.port) if endpoint is not None else None

    def topic_config(self, name: str) -> dict[str, str]:
        overrides = self.image.topic_configs(name)
        entries = effective_topic_config(overrides, self.config.broker_defaults)
        # Internal keys (never described) are not among the entries; keep their overrides.
        return {**overrides, **{k: e.value for k, e in entries.items() if e.value is not None}}

    def _topic_settings(self, name: str) -> tuple[dict[str, str], LogConfig]:
        """A topic's effective configs, computed once per topic and image (a topic of 10,000
        partitions would otherwise recompute them 10,000 times)."""
        if self._settings_image is not self.image:
            self._settings_image, self._settings = self.image, {}
        settings = self._settings.get(name)
        if settings is None:
            cfg = self.topic_config(name)
            settings = self._settings[name] = (cfg, LogConfig.from_topic_configs(cfg))
        return settings

    def _log_dir_failed(self, parts: list[Partition]) -> None:
        """The log directory went offline with these partitions: stop fetching them and
        unload the groups of the ``__consumer_offsets`` partitions among them (the heartbeat
        tells the controller, which moves the leaderships)."""
        for part in parts:
            self.fetchers.remove((part.topic, part.index))
            if part.topic == OFFSETS_TOPIC and self._started:
                self.coordinator.on_partition_removed(part.index)
            elif part.topic == TRANSACTION_STATE_TOPIC and self._started:
                self.transactions.on_partition_removed(part.index)
        for listener in self.log_dir_listeners:
            listener()

    def _report_directory(self, part: Partition) -> None:
        assignments = self.dir_assignments
        if assignments is not None and self._started and self._registered_as_this_process():
            assignments.check(part)

    def _open(
        self, topic: TopicImage, index: int, registration: PartitionImage
    ) -> Partition | None:
        cfg, log_config = self._topic_settings(topic.name)
        existing = self.replicas.get(topic.name, index)
        was_leader = existing is not None and existing.is_leader
        leader = registration.leader
        if leader == self.node_id and not self._registered_as_this_process():
            leader = NO_LEADER  # an earlier incarnation's leadership: wait for the controller
        part = self.replicas.open_partition(
            topic.name,
            index,
            topic.topic_id,
            log_config,
            max_message_bytes=int(cfg.get("max.message.bytes", "1048588")),
            log_append_time=cfg.get("message.timestamp.type") == "LogAppendTime",
            min_insync_replicas=int(cfg.get("min.insync.replicas", "1")),
            registration=Registration(
                leader,
                registration.leader_epoch,
                registration.partition_epoch,
                registration.replicas,
                registration.isr,
                registration.leader_recovery_state == LeaderRecoveryState.RECOVERING,
            ),
        )
        if part is None or part.offline:  # the log directory is offline
            return part
        if part.is_leader != was_leader or existing is None:
            (self._became_leader if part.is_leader else self._became_follower).append(part.name)
        if self._started:
            self._report_directory(part)
            self.fetchers.update(part)
            if topic.name == OFFSETS_TOPIC:
                self.coordinator.on_partition_role(part)
            elif topic.name == TRANSACTION_STATE_TOPIC:
                self.transactions.on_partition_role(part)
        return part

    # --- metrics ------------------------------------------------------------------------------

    def _count_append(self, part: Partition, size: int, count: int) -> None:
        bytes_in, messages_in, _ = self.metrics.topic_counters(part.topic)
        bytes_in.inc(size)
        messages_in.inc(count)

    def _state_metrics(self) -> Iterable[Metric]:
        sizes = gauge("kafka_log_size_bytes", "Bytes in a partition's log", ["topic", "partition"])
        hw = gauge("kafka_high_watermark", "High watermark", ["topic", "partition"])
        for (topic, index), part in self.replicas.partitions.items():
            sizes.add_metric([topic, str(index)], part.log.size_bytes)
            hw.add_metric([topic, str(index)], part.high_watermark)
        count = gauge("kafka_partitions", "Partitions hosted by this broker")
        count.add_metric([], len(self.replicas.partitions))
        leaders = list(self.replicas.leaders())
        led = gauge("kafka_leader_partitions", "Partitions this broker leads")
        led.add_metric([], len(leaders))
        under = gauge(
            "kafka_under_replicated_partitions", "Led partitions whose ISR lacks a replica"
        )
        under.add_metric([], sum(1 for p in leaders if _isr_size(p) < _replica_count(p)))
        conns = gauge("kafka_connections", "Open client connections")
        conns.add_metric([], sum(x.connection_count for x in self.listeners.values()))
        throttled = gauge(
            "kafka_replication_throttled_bytes_per_second",
            "Replication of throttled partitions, as the throttle measures it (KIP-73)",
            ["side"],
        )
        for side, quota in (
            ("leader", self.replication_throttles.leader),
            ("follower", self.replication_throttles.follower),
        ):
            throttled.add_metric([side], quota.measured.rate())
        return [sizes, hw, count, led, under, conns, throttled]

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        limits = self.config.listener_limits
        try:
            for spec in self.config.served_listeners:
                self.listeners[spec.name] = KafkaListener(
                    self.dispatcher, spec.host, spec.port, limits, security=spec.security
                )
        except OSError:
            for opened in self.listeners.values():
                opened.close()
            self.listeners = {}
            raise
        self.listener = self.listeners[self.config.primary_listener.name]
        self._started = True
        self.coordinator.start()
        self.transactions.start()
        for part in self.replicas.partitions.values():
            if part.offline:
                continue
            self.fetchers.update(part)
            if part.topic == OFFSETS_TOPIC:
                self.coordinator.on_partition_role(part)
            elif part.topic == TRANSACTION_STATE_TOPIC:
                self.transactions.on_partition_role(part)
        cfg = self.config
        self._maintenance = [
            self._every(cfg.retention_check_interval_ms, self.replicas.apply_retention),
            # Kafka's isr-expiration task runs every replica.lag.time.max.ms / 2.
            self._every(cfg.replica_lag_time_max_ms // 2, self.replicas.maybe_shrink_isrs),
            self._every(
                cfg.producer_id_expiration_check_interval_ms, self.replicas.expire_producers
            ),
            self._every(
                cfg.high_watermark_checkpoint_interval_ms,
                self.replicas.checkpoint_high_watermarks,
            ),
            asyncio.create_task(self._log_cleaner(), name="log-cleaner"),
        ]

    async def _log_cleaner(self) -> None:
        """Kafka's log cleaner thread: compacted partitions, every ``log.cleaner.backoff.ms``."""
        while True:
            await asyncio.sleep(self.config.log_cleaner_backoff_ms / 1000)
            try:
                await self.replicas.clean_logs()
            except Exception:
                log.exception("log cleaning failed")

    def _every(self, interval_ms: int, action: Callable[[], object]) -> asyncio.Task[None]:
        async def loop() -> None:
            while True:
                await asyncio.sleep(max(interval_ms, 10) / 1000)
                try:
                    action()  # each action isolates its partitions' failures
                except Exception:
                    log.exception("periodic %s failed", action.__name__)

        return asyncio.create_task(loop(), name=action.__name__)

    async def stop(self) -> None:
        for listener in self.listeners.values():
            listener.close()
        for task in self._maintenance:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.fetchers.close()
        await self.coordinator.stop()
        await self.transactions.stop()
        await self.dispatcher.close()
        if self.dir_assignments is not None:
            self.dir_assignments.close()
        self.replicas.close()


def _sample(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return f"[{shown}{', ...' if len(names) > limit else ''}]"


def _isr_size(part: Partition) -> int:
    role = part.role
    return len(role.isr) if isinstance(role, PartitionState) else 0


def _replica_count(part: Partition) -> int:
    role = part.role
    return len(role.replicas) if isinstance(role, PartitionState) else 0
