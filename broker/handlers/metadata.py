"""Metadata 0-13 from the broker's image, with topic auto-creation.

The brokers listed are the registered, unfenced brokers of the image with their PLAINTEXT
endpoint (Kafka lists the alive brokers), and always this broker. ``controller_id`` is this
broker (clients need a listed broker there, and controllers are not client-reachable).
A request for unknown topics creates them when the request allows it (v4+, always before
v4) and ``auto.create.topics.enable`` is on, with the broker's ``num.partitions`` and
``default.replication.factor``.  Topic ids are reported from v10, and asked for by id from
v12 (an unknown id answers UNKNOWN_TOPIC_ID); v13 only adds a top-level error code.
``offline_replicas`` lists the replicas whose broker is unregistered, fenced, or lost its log
directory (KIP-112, as Kafka's KRaftMetadataCache); see :func:`partition_error` for the
partition's error.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from broker.controller_channel import ControllerChannel, NewTopic, created_topics, topic_creation
from broker.dispatcher import ApiHandler, RequestContext
from broker.identity import BrokerIdentity, ImageSource
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import MetadataRequest, MetadataResponse
from kafka_protocol.types import BrokerId, TopicName
from metadata_log.image import ClusterImage, PartitionImage, TopicImage


def partition_error(image: ClusterImage, p: PartitionImage) -> ErrorCode:
    """A partition's error in Metadata.  As Kafka's KRaftMetadataCache: LEADER_NOT_AVAILABLE
    without a leader, else NONE; and KAFKA_STORAGE_ERROR where a failed log directory is the
    reason the partition cannot be served: its leader's directory is offline (until the
    controller moves the leadership), or it has no leader and its remaining ISR is on an
    offline directory (the controller had no in-sync replica elsewhere to elect)."""
    if p.leader >= 0:
        storage = image.is_replica_storage_offline(p.leader, p.directory_of(p.leader))
        return ErrorCode.KAFKA_STORAGE_ERROR if storage else ErrorCode.NONE
    if p.isr and any(image.is_replica_storage_offline(b, p.directory_of(b)) for b in p.isr):
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.LEADER_NOT_AVAILABLE


INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
Topic = MetadataResponse.MetadataResponseTopic


@dataclass(frozen=True, slots=True)
class AutoCreate:
    """``auto.create.topics.enable`` and the shape of the topics it creates."""

    enabled: bool
    num_partitions: int  # num.partitions
    replication_factor: int  # default.replication.factor


class MetadataHandler:
    def __init__(
        self,
        node: BrokerIdentity,
        image: ImageSource,
        controller: ControllerChannel,
        auto_create: AutoCreate,
    ) -> None:
        self.node = node
        self.image = image
        self.controller = controller
        self.auto_create = auto_create

    def spec(self) -> ApiHandler:
        return ApiHandler(3, 0, 13, self.handle, "Metadata")

    def handle(
        self, ctx: RequestContext, req: MetadataRequest
    ) -> MetadataResponse | asyncio.Future[MetadataResponse | None]:
        names = self._requested(ctx, req)
        missing = [n for n in names or () if self.image().topics.get(n) is None]
        allow = ctx.api_version < 4 or req.allow_auto_topic_creation
        if missing and allow and self.auto_create.enabled:
            return asyncio.ensure_future(self._create_then_answer(ctx, req, names, missing))
        return self._answer(ctx, names, {}, self._unknown_ids(req))

    def _unknown_ids(self, req: MetadataRequest) -> list[uuid.UUID]:
        """Topic ids asked for (v12+) that the image does not know."""
        by_id = self.image().topics.by_id
        return [t.topic_id for t in req.topics or () if t.name is None and t.topic_id not in by_id]

    def _requested(self, ctx: RequestContext, req: MetadataRequest) -> list[str] | None:
        """Topic names asked for, or None for every topic."""
        if req.topics is None or (ctx.api_version == 0 and not req.topics):
            return None
        names: list[str] = []
        for t in req.topics:
            if t.name is not None:
                names.append(t.name)
            elif (topic := self.image().topics.by_id.get(t.topic_id)) is not None:
                names.append(topic.name)
        return names

    async def _create_then_answer(
        self, ctx: RequestContext, req: MetadataRequest, names: list[str] | None, missing: list[str]
    ) -> MetadataResponse:
        cfg = self.auto_create
        create = topic_creation(
            [NewTopic(n, cfg.num_partitions, cfg.replication_factor) for n in missing],
            timeout_ms=30_000,
        )
        result = created_topics(await self.controller.forward(create, 7))
        errors: dict[str, ErrorCode] = {
            t.name: ErrorCode(t.error_code)
            for t in result
            if t.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)
        }
        return self._answer(ctx, names, errors, self._unknown_ids(req))

    def _answer(
        self,
        ctx: RequestContext,
        names: list[str] | None,
        errors: dict[str, ErrorCode],
        unknown_ids: list[uuid.UUID],
    ) -> MetadataResponse:
        image = self.image()
        listener = self.node.listener_for(ctx.session.listener)
        host, port = self.node.address_on(listener)
        topics: list[Topic] = []
        if names is None:
            topics = [self._topic(t, listener) for t in image.topics.by_name.values()]
        else:
            for name in names:
                topic = image.topics.get(name)
                if topic is not None:
                    topics.append(self._topic(topic, listener))
                else:
                    error = errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    topics.append(Topic(error_code=error, name=TopicName(name)))
        topics.extend(
            Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=i) for i in unknown_ids
        )
        brokers = {
            self.node.node_id: MetadataResponse.MetadataResponseBroker(
                node_id=BrokerId(self.node.node_id),
                host=host,
                port=port,
                rack=self.node.rack,
            )
        }
        for reg in image.brokers.values():
            endpoint = reg.listener(listener)  # a broker without it is left out
            if reg.fenced or endpoint is None or reg.id == self.node.node_id:
                continue
            brokers[reg.id] = MetadataResponse.MetadataResponseBroker(
                node_id=BrokerId(reg.id), host=endpoint.host, port=endpoint.port, rack=reg.rack
            )
        return MetadataResponse(
            brokers=[brokers[b] for b in sorted(brokers)],
            cluster_id=self.node.cluster_id,
            controller_id=BrokerId(self.node.node_id),
            topics=topics,
        )

    def _topic(self, topic: TopicImage, listener: str) -> Topic:
        image = self.image()
        partitions = []
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            partitions.append(
                MetadataResponse.MetadataResponsePartition(
                    error_code=partition_error(image, p),
                    partition_index=index,
                    leader_id=BrokerId(p.leader),
                    leader_epoch=p.leader_epoch,
                    replica_nodes=[BrokerId(r) for r in p.replicas],
                    isr_nodes=[BrokerId(r) for r in p.isr],
                    offline_replicas=[
                        BrokerId(r)
                        for r in p.replicas
                        if image.is_replica_offline(r, listener, p.directory_of(r))
                    ],
                )
            )
        return Topic(
            name=TopicName(topic.name),
            topic_id=topic.topic_id if isinstance(topic.topic_id, uuid.UUID) else uuid.UUID(int=0),
            is_internal=topic.name in INTERNAL_TOPICS,
            partitions=partitions,
        )
