"""One module per Kafka API family; each declares its version range next to its code.

Each handler receives only what it uses (the replica manager, the group coordinator, the
controller channel, the metadata image, this broker's identity); ``build_handlers`` hands the
parts out.  Nothing here imports :mod:`broker.broker`: the broker assembles the handlers.
"""

from __future__ import annotations

from typing import Protocol

from broker.broker_config import BrokerConfig
from broker.controller_channel import ControllerChannel
from broker.coordinator.runtime import GroupCoordinator
from broker.dispatcher import ApiHandler
from broker.handlers.acls import SecurityAdminHandlers
from broker.handlers.admin import AdminHandlers
from broker.handlers.basics import ApiVersionsHandler, InitProducerIdHandler
from broker.handlers.client_quotas import ClientQuotaHandlers
from broker.handlers.cluster_description import ClusterDescriptionHandlers
from broker.handlers.consumer_groups import ConsumerGroupHandlers
from broker.handlers.delete_records import DeleteRecordsHandler
from broker.handlers.fetch import FetchHandler
from broker.handlers.groups import GroupHandlers
from broker.handlers.leader_hints import LeaderHints
from broker.handlers.list_offsets import ListOffsetsHandler
from broker.handlers.log_dirs import LogDirsHandlers
from broker.handlers.metadata import AutoCreate, MetadataHandler
from broker.handlers.offset_for_leader_epoch import OffsetForLeaderEpochHandler
from broker.handlers.produce import ProduceHandler
from broker.handlers.sasl import SaslHandlers
from broker.handlers.transactions import TransactionHandlers
from broker.handlers.txn_markers import (
    DescribeProducersHandler,
    WriteTxnMarkersHandler,
)
from broker.identity import BrokerIdentity
from broker.metrics import BrokerMetrics
from broker.quotas.manager import QuotaSettings
from broker.quotas.mutations import MutationQuotaGuard, MutationQuotas
from broker.replica_manager import ReplicaManager
from broker.replication.throttle import ReplicationThrottles
from broker.security.admin_rules import BROKER_RULES
from broker.security.api_authorization import guard
from broker.security.authorization import BrokerAuthorizer
from broker.transaction.coordinator import TransactionCoordinator
from broker.transaction.producer_ids import ProducerIdAllocator
from kafka_protocol.messages import ApiVersionsResponse
from metadata_log.image import ClusterImage


class BrokerParts(Protocol):
    """The parts of a broker its handlers are built from (:class:`broker.broker.Broker`)."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def node(self) -> BrokerIdentity: ...
    @property
    def image(self) -> ClusterImage: ...
    @property
    def replicas(self) -> ReplicaManager: ...
    @property
    def replication_throttles(self) -> ReplicationThrottles: ...
    @property
    def coordinator(self) -> GroupCoordinator: ...
    @property
    def transactions(self) -> TransactionCoordinator: ...
    @property
    def producer_ids(self) -> ProducerIdAllocator: ...
    @property
    def controller(self) -> ControllerChannel: ...
    @property
    def metrics(self) -> BrokerMetrics: ...

    def broker_epoch_of(self, broker_id: int) -> int: ...
    def endpoint_of(
        self, broker_id: int, listener: str | None = None
    ) -> tuple[str, int] | None: ...
    def api_versions(self) -> list[ApiVersionsResponse.ApiVersion]: ...


def build_handlers(parts: BrokerParts) -> list[ApiHandler]:
    cfg = parts.config
    auto_create = AutoCreate(
        cfg.auto_topic_creation, cfg.num_partitions, cfg.default_replication_factor
    )
    replicas = parts.replicas
    authorizer = BrokerAuthorizer.from_config(cfg.broker_defaults, lambda: parts.image)
    security = SecurityAdminHandlers(authorizer, lambda: parts.image)
    hints = LeaderHints(  # KIP-951: the leader's address on the listener the client used
        lambda: parts.image,
        lambda broker, listener: parts.endpoint_of(broker, parts.node.listener_for(listener)),
    )
    markers = WriteTxnMarkersHandler(replicas, parts.coordinator)
    # this broker's transaction coordinator writes the markers of partitions it leads directly
    parts.transactions.markers.deliver_locally(markers.write)
    handlers = [
        ProduceHandler(
            replicas,
            parts.metrics,
            # transaction.partition.verification.enable=false: appended unverified, unawaited
            verifier=parts.transactions if parts.transactions.config.verification_enabled else None,
            hints=hints,
        ).spec(),
        FetchHandler(
            replicas,
            parts.metrics,
            parts.broker_epoch_of,
            lambda: parts.image,
            cfg.replica_selector,
            throttle=parts.replication_throttles.leader,
            hints=hints,
        ).spec(),
        ListOffsetsHandler(replicas).spec(),
        OffsetForLeaderEpochHandler(replicas).spec(),
        # markers on __consumer_offsets complete the group coordinator's pending offsets
        markers.spec(),
        DescribeProducersHandler(replicas).spec(),
        DeleteRecordsHandler(replicas, lambda: parts.image).spec(),
        *LogDirsHandlers(replicas).specs(),
        MetadataHandler(parts.node, lambda: parts.image, parts.controller, auto_create).spec(),
        *GroupHandlers(
            parts.coordinator,
            lambda broker, listener: parts.endpoint_of(broker, parts.node.listener_for(listener)),
            parts.transactions.coordinator_of,
        ).specs(),
        *ConsumerGroupHandlers(
            parts.coordinator,
            lambda topic_id: t.name if (t := parts.image.topics.by_id.get(topic_id)) else None,
        ).specs(),
        ApiVersionsHandler(parts.api_versions).spec(),
        *SaslHandlers().specs(),
        InitProducerIdHandler(parts.producer_ids, parts.transactions).spec(),
        *TransactionHandlers(
            parts.transactions, lambda: parts.image, cfg.coordinator.num_partitions
        ).specs(),
        *security.guard(
            AdminHandlers(
                parts.controller, parts.node, lambda: parts.image, cfg.broker_defaults
            ).specs()
        ),
        *security.specs(),
        *ClusterDescriptionHandlers(
            parts.node,
            lambda: parts.image,
            authorizer,
            cfg.max_request_partition_size_limit,
            parts.controller,
        ).specs(),
        *ClientQuotaHandlers(lambda: parts.image).specs(),
    ]
    # every API checks what Kafka checks (broker.security.api_authorization); a no-op while
    # authorizer.class.name is unset
    # controller_mutation_rate (KIP-599) on topic creations, deletions and partition increases
    mutation_quotas = MutationQuotaGuard(
        MutationQuotas(
            lambda: parts.image.client_quotas, QuotaSettings.from_config(cfg.broker_defaults)
        ),
        lambda: parts.image,
        cfg.num_partitions,
    )
    handlers = mutation_quotas.guard(handlers)
    return guard(handlers, BROKER_RULES, authorizer, lambda: parts.image, auto_create.enabled)
