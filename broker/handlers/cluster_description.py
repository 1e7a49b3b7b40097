"""DescribeCluster 0-2 and DescribeTopicPartitions 0 (KIP-966): the brokers and the topics'
partitions as this broker's metadata image has them; DescribeQuorum 0-2, which a broker
forwards to the active controller as Kafka's do (``ControllerChannel.describe_quorum``).

DescribeCluster (as Kafka's ``KafkaApis.handleDescribeCluster`` / ``AuthHelper``): the
registered brokers with an endpoint on the listener the request came in on (always this
broker), unfenced ones only unless v2's ``include_fenced_brokers`` asks for every one (then
``is_fenced`` says which); ``controller_id`` is a live broker (this one: clients cannot reach
KRaft controllers, so Kafka answers a random alive broker).  A broker serves
``endpoint_type`` 1 (brokers) only: 2 (controllers) is MISMATCHED_ENDPOINT_TYPE, any other
UNSUPPORTED_ENDPOINT_TYPE (INVALID_REQUEST at v0, which has no such field).  The cluster's
authorized operations, when asked, need DESCRIBE on the cluster (else 0).

DescribeTopicPartitions (as Kafka's ``DescribeTopicPartitionsRequestHandler`` and
``KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse``): the named topics (or, with
none named, every topic) from the ``cursor`` on, in name order, at most
``min(response_partition_limit, max.request.partition.size.limit)`` partitions (at least 1);
``next_cursor`` is the first topic and partition left out.  Topics the principal may not
DESCRIBE are left out of a listing and answered TOPIC_AUTHORIZATION_FAILED (no topic id) when
named, before any existence check; unknown named topics get UNKNOWN_TOPIC_OR_PARTITION (an
illegal name INVALID_TOPIC_EXCEPTION).  A cursor whose topic is not among the named ones, or
whose partition is negative, is INVALID_REQUEST for every named topic.  Partitions carry the
leader (-1 unless its broker is registered with this listener), the leader epoch, replicas,
ISR, the eligible leader replicas and last known ELR (KIP-966) and the offline replicas;
every topic carries its authorized operations (KIP-430).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from typing import Final

from broker.controller_channel import ControllerChannel
from broker.dispatcher import ApiHandler, RequestContext
from broker.identity import BrokerIdentity, ImageSource
from broker.security.authorization import BrokerAuthorizer
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)
from kafka_protocol.types import BrokerId, TopicName
from metadata_log.acls import AclOperation, ResourceType
from metadata_log.image import ClusterImage, TopicImage

INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})
ENDPOINT_BROKERS: Final = 1
ENDPOINT_CONTROLLERS: Final = 2
_LEGAL_TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_ZERO_UUID: Final = uuid.UUID(int=0)

Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
Partition = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition
Cursor = DescribeTopicPartitionsResponse.Cursor
Broker = DescribeClusterResponse.DescribeClusterBroker


class ClusterDescriptionHandlers:
    def __init__(
        self,
        node: BrokerIdentity,
        image: ImageSource,
        authorizer: BrokerAuthorizer,
        max_partitions: int,  # max.request.partition.size.limit
        controller: ControllerChannel,
    ) -> None:
        self.controller = controller
        self.node = node
        self.image = image
        self.authorizer = authorizer
        self.max_partitions = max_partitions

    def specs(self) -> list[ApiHandler]:
        return [
            ApiHandler(60, 0, 2, self.describe_cluster, "DescribeCluster"),
            ApiHandler(75, 0, 0, self.describe_topic_partitions, "DescribeTopicPartitions"),
            ApiHandler(55, 0, 2, self.describe_quorum, "DescribeQuorum"),
        ]

    # --- DescribeQuorum -----------------------------------------------------------------------

    async def describe_quorum(
        self, ctx: RequestContext, req: DescribeQuorumRequest
    ) -> DescribeQuorumResponse:
        """Forwarded, at the client's version (the rule checked DESCRIBE on the cluster)."""
        return await self.controller.describe_quorum(req, ctx.api_version)

    # --- DescribeCluster ----------------------------------------------------------------------

    def describe_cluster(
        self, ctx: RequestContext, req: DescribeClusterRequest
    ) -> DescribeClusterResponse:
        if req.endpoint_type != ENDPOINT_BROKERS:
            return _endpoint_type_error(ctx.api_version, req.endpoint_type)
        listener = self.node.listener_for(ctx.session.listener)
        host, port = self.node.address_on(listener)
        own = Broker(
            broker_id=BrokerId(self.node.node_id), host=host, port=port, rack=self.node.rack
        )
        brokers = {self.node.node_id: own}
        for reg in self.image().brokers.values():
            endpoint = reg.listener(listener)
            if endpoint is None or reg.id == self.node.node_id:
                continue
            if reg.fenced and not req.include_fenced_brokers:
                continue
            brokers[reg.id] = Broker(
                broker_id=BrokerId(reg.id),
                host=endpoint.host,
                port=endpoint.port,
                rack=reg.rack,
                is_fenced=reg.fenced,
            )
        operations = -(2**31)  # the schema's default: not asked for
        if req.include_cluster_authorized_operations:
            operations = (
                self.authorizer.authorized_operations_bits(ctx.session, ResourceType.CLUSTER)
                if self.authorizer.authorize(
                    ctx.session, AclOperation.DESCRIBE, ResourceType.CLUSTER
                )
                else 0
            )
        return DescribeClusterResponse(
            endpoint_type=ENDPOINT_BROKERS,
            cluster_id=self.node.cluster_id,
            controller_id=BrokerId(self.node.node_id),
            brokers=[brokers[b] for b in sorted(brokers)],
            cluster_authorized_operations=operations,
        )

    # --- DescribeTopicPartitions --------------------------------------------------------------

    def describe_topic_partitions(
        self, ctx: RequestContext, req: DescribeTopicPartitionsRequest
    ) -> DescribeTopicPartitionsResponse:
        image = self.image()
        listing = not req.topics
        cursor = req.cursor
        first = cursor.topic_name if cursor is not None else ""
        if listing:
            names = {name for name in image.topics.by_name if name >= first}
        else:
            names = {t.name for t in req.topics if t.name >= first}
        if cursor is not None and (
            (not listing and cursor.topic_name not in names) or cursor.partition_index < 0
        ):
            return _invalid_request(req)

        def may_describe(name: str) -> bool:
            return self.authorizer.authorize(
                ctx.session, AclOperation.DESCRIBE, ResourceType.TOPIC, name
            )

        ordered = sorted(names)
        authorized = [n for n in ordered if may_describe(n)]
        allowed = set(authorized)
        refused = [] if listing else [n for n in ordered if n not in allowed]
        limit = max(min(self.max_partitions, req.response_partition_limit), 1)
        start = cursor.partition_index if cursor is not None else 0
        listener = self.node.listener_for(ctx.session.listener)
        response = describe_page(image, authorized, first, start, limit, listener, listing)
        for topic in response.topics:
            topic.topic_authorized_operations = self.authorizer.authorized_operations_bits(
                ctx.session, ResourceType.TOPIC, str(topic.name)
            )
        response.topics.extend(
            Topic(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                name=TopicName(name),
                topic_id=_ZERO_UUID,
            )
            for name in refused
        )
        return response


def describe_page(
    image: ClusterImage,
    names: Iterable[str],
    cursor_topic: str,
    cursor_partition: int,
    limit: int,
    listener: str,
    listing: bool,
) -> DescribeTopicPartitionsResponse:
    """The topics ``names`` (in order) from the cursor on, at most ``limit`` partitions, with
    ``next_cursor`` at the first one left out (Kafka's
    ``getTopicMetadataForDescribeTopicResponse``); a listing leaves unknown topics out."""
    response = DescribeTopicPartitionsResponse(topics=[])
    remaining = limit
    for name in names:
        if remaining == 0:  # every partition of the topics before fitted
            response.next_cursor = Cursor(topic_name=TopicName(name), partition_index=0)
            break
        topic = image.topics.get(name)
        if topic is None:
            if not listing:
                response.topics.append(_missing(name))
            continue
        start = cursor_partition if name == cursor_topic else 0
        count = len(topic.partitions)
        upper = min(count, start + remaining)
        response.topics.append(_described(image, topic, range(start, upper), listener))
        if upper < count:
            response.next_cursor = Cursor(topic_name=TopicName(name), partition_index=upper)
            break
        remaining -= max(upper - start, 0)
    return response


def _described(
    image: ClusterImage, topic: TopicImage, indexes: range, listener: str
) -> DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic:
    partitions = []
    for index in indexes:
        p = topic.partitions.get(index)
        if p is None:
            continue
        leader = image.brokers.get(p.leader)
        has_leader = leader is not None and leader.listener(listener) is not None
        partitions.append(
            Partition(
                error_code=ErrorCode.NONE,
                partition_index=index,
                leader_id=BrokerId(p.leader if has_leader else -1),
                leader_epoch=p.leader_epoch,
                replica_nodes=[BrokerId(r) for r in p.replicas],
                isr_nodes=[BrokerId(r) for r in p.isr],
                eligible_leader_replicas=[BrokerId(r) for r in p.elr],
                last_known_elr=[BrokerId(r) for r in p.last_known_elr],
                offline_replicas=[
                    BrokerId(r)
                    for r in p.replicas
                    if image.is_replica_offline(r, listener, p.directory_of(r))
                ],
            )
        )
    topic_id = topic.topic_id if isinstance(topic.topic_id, uuid.UUID) else _ZERO_UUID
    return Topic(
        error_code=ErrorCode.NONE,
        name=TopicName(topic.name),
        topic_id=topic_id,
        is_internal=topic.name in INTERNAL_TOPICS,
        partitions=partitions,
    )


def _missing(name: str) -> DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic:
    legal = _LEGAL_TOPIC_NAME.fullmatch(name) is not None and name not in (".", "..")
    error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if legal else ErrorCode.INVALID_TOPIC_EXCEPTION
    return Topic(error_code=error, name=TopicName(name), topic_id=_ZERO_UUID)


def _invalid_request(req: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
    """Kafka's ``getErrorResponse`` for the InvalidRequestException of a bad cursor: every
    named topic with the error, no partitions."""
    return DescribeTopicPartitionsResponse(
        topics=[
            Topic(error_code=ErrorCode.INVALID_REQUEST, name=TopicName(t.name), partitions=[])
            for t in req.topics
        ]
    )


def _endpoint_type_error(version: int, endpoint_type: int) -> DescribeClusterResponse:
    if version == 0:
        error = ErrorCode.INVALID_REQUEST
    elif endpoint_type == ENDPOINT_CONTROLLERS:
        error = ErrorCode.MISMATCHED_ENDPOINT_TYPE
    else:
        error = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
    message = (
        f"The request was sent to an endpoint of type BROKER, but we wanted an endpoint of"
        f" type {endpoint_type}"
        if endpoint_type == ENDPOINT_CONTROLLERS
        else f"Unsupported endpoint type {endpoint_type}"
    )
    return DescribeClusterResponse(
        error_code=error, error_message=message, endpoint_type=endpoint_type, cluster_id=""
    )
