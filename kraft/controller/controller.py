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
from typing import TypeVar

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
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka_protocol.metadata import PartitionChangeRecord
from kraft.controller import (
    alter_partition,
    cluster,
    configuration,
    elections,
    producer_ids,
    topics,
)
from kraft.controller.cluster import HasValidSession
from kraft.controller.partitions import UncleanPolicy
from kraft.controller.result import ControllerConfig, ControllerResult
from metadata_log.image import ClusterImage, TopicPartition
from metadata_log.records import MetadataRecord

R = TypeVar("R")
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
        """Config changes, and the unclean elections they make possible (same batch)."""
        result = configuration.incremental_alter_configs(self.config, request, image)
        return self._with_elections(result, image)

    def handle_alter_configs(
        self, request: AlterConfigsRequest, image: ClusterImage
    ) -> ControllerResult[AlterConfigsResponse]:
        result = configuration.alter_configs(self.config, request, image)
        return self._with_elections(result, image)

    def _with_elections(
        self, result: ControllerResult[R], image: ClusterImage
    ) -> ControllerResult[R]:
        static = self.config.static_broker_config
        more = elections.elections_after_config_change(image, result.records, static)
        return ControllerResult([*result.records, *more], result.response) if more else result

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
        return cluster.broker_heartbeat(request, image, self._unclean(image))

    def handle_fence_brokers(
        self, broker_ids: Iterable[int], image: ClusterImage
    ) -> ControllerResult[list[int]]:
        """Fence brokers whose session expired; the response lists those actually fenced."""
        return cluster.fence_brokers(image, broker_ids, self._unclean(image))

    def _unclean(self, image: ClusterImage) -> UncleanPolicy:
        return elections.unclean_policy(image, self.config.static_broker_config)

    # --- elections ------------------------------------------------------------------------------

    def handle_elect_leaders(
        self, request: ElectLeadersRequest, image: ClusterImage
    ) -> ControllerResult[ElectLeadersResponse]:
        """Preferred or unclean elections for the named partitions (null: all of them)."""
        return elections.elect_leaders(request, image)

    def handle_unclean_elections(
        self, image: ClusterImage
    ) -> ControllerResult[list[TopicPartition]]:
        """Leaders for leaderless partitions of topics that allow unclean election (the
        periodic check); the response lists the partitions that got one."""
        found = elections.unclean_elections(image, self._unclean(image))
        records: list[MetadataRecord] = list(found)
        return ControllerResult(records, _elected(image, found))

    def handle_rebalance_leaders(
        self, image: ClusterImage, limit: int = elections.MAX_ELECTIONS_PER_IMBALANCE
    ) -> ControllerResult[list[TopicPartition]]:
        """Preferred elections where a broker's leader imbalance is above
        ``leader.imbalance.per.broker.percentage``; the response lists the partitions moved."""
        return elections.rebalance_leaders(
            image, self.config.leader_imbalance_per_broker_percentage, limit
        )

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


def _elected(image: ClusterImage, records: list[PartitionChangeRecord]) -> list[TopicPartition]:
    return [TopicPartition(image.topics.by_id[r.topic_id].name, r.partition_id) for r in records]
