"""One broker: its partitions, its view of the metadata, its Kafka listener.

The broker never changes metadata itself.  It reads the :class:`ClusterImage` published by
the metadata log and reacts to each delta (``on_metadata``): partitions it hosts are opened,
reconfigured or deleted.  Writes (create a topic, alter a config, allocate producer ids) go to
the controller through a :class:`ControllerChannel`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import Metric

from broker.controller_channel import ControllerChannel
from broker.dispatcher import RequestDispatcher
from broker.log.config import LogConfig
from broker.metrics import BrokerMetrics, gauge
from broker.replica_manager import Partition, ReplicaManager
from broker.server import KafkaListener, ListenerLimits
from broker.storage import Storage
from metadata_log.configs import effective_topic_config
from metadata_log.delta import MetadataDelta
from metadata_log.image import ClusterImage, ConfigResourceType, TopicImage

log = logging.getLogger("broker")


@dataclass(frozen=True)
class BrokerConfig:
    node_id: int
    host: str
    port: int
    advertised_host: str
    advertised_port: int
    log_dir: Path
    rack: str | None = None
    auto_create_topics: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    socket_request_max_bytes: int = 100 * 1024 * 1024
    retention_check_interval_ms: int = 300_000
    broker_defaults: dict[str, str] = field(default_factory=dict)  # log.* keys as configured


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        storage: Storage,
        controller: ControllerChannel,
        image: ClusterImage,
        cluster_id: str,
    ) -> None:
        from broker.handlers import build_handlers  # handlers import this module's type

        self.config = config
        self.node_id = config.node_id
        self.cluster_id = cluster_id
        self.controller = controller
        self.image = image
        self._settings_image: ClusterImage | None = None
        self._settings: dict[str, tuple[dict[str, str], LogConfig]] = {}
        self.metrics = BrokerMetrics()
        self.replicas = ReplicaManager(storage, config.log_dir)
        self.replicas.on_append = self._count_append
        self.dispatcher = RequestDispatcher(build_handlers(self), self.metrics)
        self.listener: KafkaListener | None = None
        self._maintenance: asyncio.Task[None] | None = None
        self.metrics.add_state(self._state_metrics)
        self.apply_image(image)

    @property
    def advertised(self) -> tuple[str, int]:
        port = self.config.advertised_port or (self.listener.port if self.listener else 0)
        return self.config.advertised_host, port

    # --- metadata -----------------------------------------------------------------------------

    def on_metadata(self, delta: MetadataDelta, image: ClusterImage) -> None:
        """React to one delta (Kafka's ``ReplicaManager.applyDelta``): only partitions whose
        registration changed for this broker, or whose topic's configs changed, are touched,
        so a delta costs what it changed, not the size of the cluster."""
        if delta.image is not self.image:  # not built on what we hold (a snapshot): reconcile
            self.apply_image(image)
            return
        self.image = image
        changes = delta.local_changes(self.node_id)
        for tp in changes.deleted:
            if (tp.topic, tp.partition) in self.replicas.partitions:
                log.info("deleting partition %s-%d", tp.topic, tp.partition)
                self.replicas.remove_partition(tp.topic, tp.partition)
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
                self._open(topic, index, partition.leader_epoch, len(partition.isr))

    def apply_image(self, image: ClusterImage) -> None:
        """Open, reconfigure or delete hosted partitions to match the image."""
        self.image = image
        wanted: set[tuple[str, int]] = set()
        for topic in image.topics.by_name.values():
            for index, p in topic.partitions.items():
                if self.node_id in p.replicas:
                    wanted.add((topic.name, index))
                    self._open(topic, index, p.leader_epoch, len(p.isr))
        for key in list(self.replicas.partitions):
            if key not in wanted:
                log.info("deleting partition %s-%d", *key)
                self.replicas.remove_partition(*key)

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

    def _open(self, topic: TopicImage, index: int, leader_epoch: int, isr_size: int) -> Partition:
        cfg, log_config = self._topic_settings(topic.name)
        return self.replicas.open_partition(
            topic.name,
            index,
            topic.topic_id,
            log_config,
            max_message_bytes=int(cfg.get("max.message.bytes", "1048588")),
            log_append_time=cfg.get("message.timestamp.type") == "LogAppendTime",
            leader_epoch=leader_epoch,
            min_insync_replicas=int(cfg.get("min.insync.replicas", "1")),
            isr_size=isr_size,
        )

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
        conns = gauge("kafka_connections", "Open client connections")
        conns.add_metric([], self.listener.connection_count if self.listener else 0)
        return [sizes, hw, count, conns]

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        limits = ListenerLimits(max_frame_bytes=self.config.socket_request_max_bytes)
        self.listener = KafkaListener(self.dispatcher, self.config.host, self.config.port, limits)
        self._maintenance = asyncio.create_task(self._retention_loop(), name="retention")

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.retention_check_interval_ms / 1000)
            self.replicas.apply_retention()  # isolates each partition's failures

    async def stop(self) -> None:
        if self.listener is not None:
            self.listener.close()
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._maintenance
        await self.dispatcher.close()
        self.replicas.close()
