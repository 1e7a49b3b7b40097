"""The controller state machine: one entry point per command (Kafka's ``QuorumController``).

The admin requests brokers forward (``broker.controller_channel.FORWARDED``) all enter through
:meth:`Controller.handle`, which finds the request's rule in :data:`RULES` (one entry per
request type); the brokers' own requests and the periodic checks have a ``handle_*`` method each.
Every entry point is a pure function of (request, image): it reads the image and returns a
:class:`ControllerResult` with the records to append and the response to send once they are
durable. The controller keeps no state of its own; state changes only when the caller appends
the records and replays them into the next image, the same way on every node. The injected
``random.Random`` (topic ids, replica placement) is the only source of variation, so a seeded
controller given the same commands produces the same records.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeVar

from kafka_protocol._codec import Request, Response
from kafka_protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterClientQuotasRequest,
    AlterConfigsRequest,
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterUserScramCredentialsRequest,
    AssignReplicasToDirsRequest,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
    UnregisterBrokerRequest,
)
from kafka_protocol.metadata import PartitionChangeRecord
from kraft.controller import (
    acls,
    alter_partition,
    cluster,
    configuration,
    elections,
    log_dirs,
    producer_ids,
    quotas,
    reassignment,
    scram,
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
        self.topics_context = topics.TopicsContext(self.config, self.rng, new_topic_id)

    def bootstrap(self, image: ClusterImage) -> ControllerResult[None]:
        """The records a brand-new cluster starts with (empty once bootstrapped): the
        metadata.version, then the configured bootstrap records (SCRAM users)."""
        result = cluster.bootstrap(image)
        if not result.records or not self.config.bootstrap_records:
            return result
        return ControllerResult([*result.records, *self.config.bootstrap_records], None)

    def handle(self, request: Request, image: ClusterImage) -> ControllerResult[Response]:
        """A forwarded admin request, by its rule in :data:`RULES`."""
        rule = RULES.get(type(request))
        assert rule is not None, f"the controller has no rule for {request.NAME}"
        return rule(self, request, image)

    def with_elections(
        self, result: ControllerResult[R], image: ClusterImage
    ) -> ControllerResult[R]:
        """A config change's records, and the unclean elections they make possible (same
        batch)."""
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


Rule = Callable[[Controller, Any, ClusterImage], ControllerResult[Any]]

# The controller rule of each forwarded admin request.
RULES: Final[dict[type[Request], Rule]] = {
    CreateTopicsRequest: lambda c, r, image: topics.create_topics(c.topics_context, r, image),
    CreatePartitionsRequest: lambda c, r, image: topics.create_partitions(
        c.topics_context, r, image
    ),
    # By name (``topic_names`` in v0-5, ``topics[].name``) or id (``topics[].topic_id``).
    DeleteTopicsRequest: lambda c, r, image: topics.delete_topics(c.topics_context, r, image),
    IncrementalAlterConfigsRequest: lambda c, r, image: c.with_elections(
        configuration.incremental_alter_configs(c.config, r, image), image
    ),
    AlterConfigsRequest: lambda c, r, image: c.with_elections(
        configuration.alter_configs(c.config, r, image), image
    ),
    # Preferred or unclean elections for the named partitions (null: all of them).
    ElectLeadersRequest: lambda c, r, image: elections.elect_leaders(r, image),
    # Remove a fenced broker's registration (KIP-631).
    UnregisterBrokerRequest: lambda c, r, image: cluster.unregister_broker(
        r, image, c._unclean(image)
    ),
    # ACLs (SECURITY_DISABLED without authorizer.class.name) and SCRAM credentials.
    CreateAclsRequest: lambda c, r, image: acls.create_acls(c.config, c.rng, r, image),
    DeleteAclsRequest: lambda c, r, image: acls.delete_acls(c.config, r, image),
    AlterUserScramCredentialsRequest: lambda c, r, image: scram.alter_user_scram_credentials(
        r, image
    ),
    # Where a broker's replicas live (KIP-858); the broker sends it itself (log_dirs.py).
    AssignReplicasToDirsRequest: lambda c, r, image: log_dirs.assign_replicas_to_dirs(
        r, image, c._unclean(image)
    ),
    # Client quotas (ClientQuotaRecord), per entity.
    AlterClientQuotasRequest: lambda c, r, image: quotas.alter_client_quotas(r, image),
    # KIP-455 partition reassignment (a null target cancels one).
    AlterPartitionReassignmentsRequest: lambda c, r, image: (
        reassignment.alter_partition_reassignments(r, image, c._unclean(image))
    ),
    ListPartitionReassignmentsRequest: lambda c, r, image: (
        reassignment.list_partition_reassignments(r, image)
    ),
}


def _elected(image: ClusterImage, records: list[PartitionChangeRecord]) -> list[TopicPartition]:
    return [TopicPartition(image.topics.by_id[r.topic_id].name, r.partition_id) for r in records]
