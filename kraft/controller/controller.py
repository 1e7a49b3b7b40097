"""The controller state machine: one entry point per command (Kafka's ``QuorumController``).

Every ``handle_*`` method is a pure function of (request, image): it reads the image and returns
a :class:`ControllerResult` with the records to append and the response to send once they are
durable. The controller keeps no state of its own; state changes only when the caller appends
the records and replays them into the next image, the same way on every node. The injected
``random.Random`` (topic ids, replica placement) is the only source of variation, so a seeded
controller given the same commands produces the same records.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable

from kafka_protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kraft.controller import alter_partition, cluster, configuration, producer_ids, topics
from kraft.controller.cluster import HasValidSession
from kraft.controller.result import ControllerConfig, ControllerResult
from metadata_log.image import ClusterImage

TopicIdSource = Callable[[Callable[[uuid.UUID], bool]], uuid.UUID]  # (is taken) -> new id


def _no_session(_broker_id: int) -> bool:
    return False


class Controller:
    """Pure command handlers over a :class:`ClusterImage`."""

    def __init__(
        self,
        config: ControllerConfig | None = None,
        *,
        rng: random.Random | None = None,
        new_topic_id: TopicIdSource | None = None,
    ) -> None:
        self.config = config or ControllerConfig()
        self.rng = rng if rng is not None else random.Random()
        self._topics = topics.TopicsContext(self.config, self.rng, new_topic_id)

    def bootstrap(self, image: ClusterImage) -> ControllerResult[None]:
        """The records a brand-new cluster starts with (empty once bootstrapped)."""
        return cluster.bootstrap(image)

    def handle_create_topics(
        self, request: CreateTopicsRequest, image: ClusterImage
    ) -> ControllerResult[CreateTopicsResponse]:
        return topics.create_topics(self._topics, request, image)

    def handle_create_partitions(
        self, request: CreatePartitionsRequest, image: ClusterImage
    ) -> ControllerResult[CreatePartitionsResponse]:
        return topics.create_partitions(self._topics, request, image)

    def handle_delete_topics(
        self, request: DeleteTopicsRequest, image: ClusterImage
    ) -> ControllerResult[DeleteTopicsResponse]:
        """By name (``topic_names`` in v0-5, ``topics[].name``) or id (``topics[].topic_id``)."""
        return topics.delete_topics(self._topics, request, image)

    def handle_incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest, image: ClusterImage
    ) -> ControllerResult[IncrementalAlterConfigsResponse]:
        return configuration.incremental_alter_configs(self.config, request, image)

    def handle_alter_configs(
        self, request: AlterConfigsRequest, image: ClusterImage
    ) -> ControllerResult[AlterConfigsResponse]:
        return configuration.alter_configs(self.config, request, image)

    def handle_register_broker(
        self,
        request: BrokerRegistrationRequest,
        image: ClusterImage,
        has_valid_session: HasValidSession = _no_session,
    ) -> ControllerResult[BrokerRegistrationResponse]:
        """``has_valid_session(broker_id)``: whether the current registration still heartbeats
        (then another incarnation gets DUPLICATE_BROKER_REGISTRATION)."""
        return cluster.register_broker(self.config, request, image, has_valid_session)

    def handle_broker_heartbeat(
        self, request: BrokerHeartbeatRequest, image: ClusterImage
    ) -> ControllerResult[BrokerHeartbeatResponse]:
        return cluster.broker_heartbeat(request, image)

    def handle_fence_brokers(
        self, broker_ids: Iterable[int], image: ClusterImage
    ) -> ControllerResult[list[int]]:
        """Fence brokers whose session expired; the response lists those actually fenced."""
        return cluster.fence_brokers(image, broker_ids)

    def handle_allocate_producer_ids(
        self,
        request: AllocateProducerIdsRequest,
        image: ClusterImage,
        block_size: int = producer_ids.PRODUCER_ID_BLOCK_SIZE,
    ) -> ControllerResult[AllocateProducerIdsResponse]:
        """A block of producer ids never handed out before."""
        return producer_ids.allocate_producer_ids(request, image, block_size)

    def handle_alter_partition(
        self, request: AlterPartitionRequest, image: ClusterImage
    ) -> ControllerResult[AlterPartitionResponse]:
        """A partition leader's new ISR (topics by id in v2+, by name in v0-1)."""
        return alter_partition.alter_partition(request, image)
