"""The admin APIs' and the controller listener's rules of
:mod:`broker.security.api_authorization`, and the two tables (:data:`BROKER_RULES`,
:data:`CONTROLLER_RULES`) that map an api key to its rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from broker.controller_channel import forwarded_api
from broker.security import api_rules, group_rules, txn_rules
from broker.security.api_authorization import Check, Passed, Rule, Verdict
from broker.security.api_rules import CLUSTER_DENIED, GROUP_DENIED, TOPIC_DENIED, replace
from kafka_protocol._codec import Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    AllocateProducerIdsResponse,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterConfigsResponse,
    AlterPartitionReassignmentsResponse,
    AlterPartitionResponse,
    AlterReplicaLogDirsResponse,
    AssignReplicasToDirsResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsResponse,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClientQuotasResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsResponse,
    DescribeLogDirsResponse,
    DescribeProducersResponse,
    DescribeQuorumResponse,
    DescribeTransactionsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    EndTxnResponse,
    FetchResponse,
    FetchSnapshotResponse,
    FindCoordinatorResponse,
    HeartbeatResponse,
    IncrementalAlterConfigsResponse,
    InitProducerIdResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    ListOffsetsResponse,
    ListPartitionReassignmentsResponse,
    ListTransactionsResponse,
    MetadataResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    OffsetForLeaderEpochResponse,
    ProduceResponse,
    SyncGroupResponse,
    TxnOffsetCommitResponse,
    UnregisterBrokerResponse,
    WriteTxnMarkersResponse,
)
from kafka_protocol.types import TopicName
from metadata_log.acls import CLUSTER_NAME, AclOperation, ResourceType
from metadata_log.image import ConfigResourceType

BROKER_LOGGER: Final = 8  # ConfigResource.Type.BROKER_LOGGER


def _config_refusal(
    check: Check, operation: AclOperation, resource_type: int, name: str
) -> ErrorCode | None:
    """Kafka's configs authorization: a topic or a group needs ``operation`` on it, a broker
    (or its loggers) on the cluster."""
    if resource_type == ConfigResourceType.TOPIC:
        return None if check.topic(operation, name) else TOPIC_DENIED
    if resource_type == ConfigResourceType.GROUP:
        return None if check.group(operation, name) else GROUP_DENIED
    if resource_type in (ConfigResourceType.BROKER, BROKER_LOGGER):
        return None if check.cluster(operation) else CLUSTER_DENIED
    return None  # anything else: the handler answers it (INVALID_REQUEST)


def create_topics(check: Check, req: CreateTopicsRequest) -> Verdict:
    cluster = check.cluster(AclOperation.CREATE)
    refused = [
        t for t in req.topics if not cluster and not check.topic(AclOperation.CREATE, t.name)
    ]
    kept = [t for t in req.topics if t not in refused]
    hidden = {t.name for t in kept if not check.topic(AclOperation.DESCRIBE_CONFIGS, t.name)}

    def amend(response: CreateTopicsResponse) -> CreateTopicsResponse:
        for result in response.topics:
            if result.name in hidden:  # created, but its configs are not the principal's to see
                result.topic_config_error_code = TOPIC_DENIED
                result.configs = []
        response.topics.extend(
            CreateTopicsResponse.CreatableTopicResult(
                name=t.name,
                error_code=TOPIC_DENIED,
                error_message="Authorization failed.",
                num_partitions=-1,
                replication_factor=-1,
            )
            for t in refused
        )
        return response

    return Passed(replace(req, topics=kept), amend, skip=not kept)


def delete_topics(check: Check, req: DeleteTopicsRequest) -> Verdict:
    """DELETE on each topic; one named by id needs DESCRIBE first (else its name would leak)."""
    refused: list[DeleteTopicsResponse.DeletableTopicResult] = []
    if check.api_version >= 6:
        kept_states = []
        for t in req.topics:
            name: str | None = t.name
            if name is None:
                found = check.image.topics.by_id.get(t.topic_id)
                if found is None:
                    kept_states.append(t)  # the controller answers UNKNOWN_TOPIC_ID
                    continue
                if not check.topic(AclOperation.DESCRIBE, found.name):
                    refused.append(_deletion_refused(None, t.topic_id))
                    continue
                name = found.name
            if check.topic(AclOperation.DELETE, name):
                kept_states.append(t)
            else:
                refused.append(_deletion_refused(name, t.topic_id))
        request = replace(req, topics=kept_states)
        empty = not kept_states
    else:
        kept_names = [n for n in req.topic_names if check.topic(AclOperation.DELETE, n)]
        refused = [_deletion_refused(n, None) for n in req.topic_names if n not in kept_names]
        request = replace(req, topic_names=kept_names)
        empty = not kept_names
    if not refused:
        return Passed(req)

    def amend(response: DeleteTopicsResponse) -> DeleteTopicsResponse:
        response.responses.extend(refused)
        return response

    return Passed(request, amend, skip=empty)


def _deletion_refused(name: str | None, topic_id: Any) -> DeleteTopicsResponse.DeletableTopicResult:
    result = DeleteTopicsResponse.DeletableTopicResult(
        name=None if name is None else TopicName(name),
        error_code=TOPIC_DENIED,
        error_message=TOPIC_DENIED.message,
    )
    if topic_id is not None:
        result.topic_id = topic_id
    return result


def create_partitions(check: Check, req: CreatePartitionsRequest) -> Verdict:
    refused = [t.name for t in req.topics if not check.topic(AclOperation.ALTER, t.name)]
    if not refused:
        return Passed(req)
    kept = [t for t in req.topics if t.name not in refused]

    def amend(response: CreatePartitionsResponse) -> CreatePartitionsResponse:
        response.results.extend(
            CreatePartitionsResponse.CreatePartitionsTopicResult(
                name=TopicName(n), error_code=TOPIC_DENIED, error_message=TOPIC_DENIED.message
            )
            for n in refused
        )
        return response

    return Passed(replace(req, topics=kept), amend, skip=not kept)


def _configs_rule(
    response_type: Any, result_type: Any, operation: AclOperation
) -> Callable[[Check, Any], Verdict]:
    """AlterConfigs, IncrementalAlterConfigs: ALTER_CONFIGS on each resource."""

    def rule(check: Check, req: Any) -> Verdict:
        refused = [
            (r, e)
            for r in req.resources
            if (e := _config_refusal(check, operation, r.resource_type, r.resource_name))
        ]
        if not refused:
            return Passed(req)
        kept = [r for r in req.resources if all(r is not x for x, _ in refused)]

        def amend(response: Any) -> Any:
            response.responses.extend(
                result_type(
                    error_code=e,
                    error_message=e.message,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                )
                for r, e in refused
            )
            return response

        return Passed(replace(req, resources=kept), amend, skip=not kept)

    return rule


def describe_configs(check: Check, req: DescribeConfigsRequest) -> Verdict:
    refused = [
        (r, e)
        for r in req.resources
        if (
            e := _config_refusal(
                check, AclOperation.DESCRIBE_CONFIGS, r.resource_type, r.resource_name
            )
        )
    ]
    if not refused:
        return Passed(req)
    kept = [r for r in req.resources if all(r is not x for x, _ in refused)]

    def amend(response: DescribeConfigsResponse) -> DescribeConfigsResponse:
        response.results.extend(
            DescribeConfigsResponse.DescribeConfigsResult(
                error_code=e,
                error_message=e.message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
            for r, e in refused
        )
        order = {(r.resource_type, r.resource_name): i for i, r in enumerate(req.resources)}
        response.results.sort(key=lambda x: order.get((x.resource_type, x.resource_name), 0))
        return response

    return Passed(replace(req, resources=kept), amend, skip=not kept)


def elect_leaders(check: Check, req: ElectLeadersRequest) -> Verdict:
    if check.cluster(AclOperation.ALTER):
        return Passed(req)
    return ElectLeadersResponse(
        error_code=CLUSTER_DENIED,
        replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(
                topic=t.topic,
                partition_result=[
                    ElectLeadersResponse.PartitionResult(
                        partition_id=p,
                        error_code=CLUSTER_DENIED,
                        error_message=CLUSTER_DENIED.message,
                    )
                    for p in t.partitions
                ],
            )
            for t in req.topic_partitions or ()
        ],
    )


def describe_cluster(check: Check, req: DescribeClusterRequest) -> Verdict:
    """Kafka refuses no one DescribeCluster; the authorized operations need DESCRIBE."""

    def amend(response: DescribeClusterResponse) -> DescribeClusterResponse:
        if req.include_cluster_authorized_operations:
            response.cluster_authorized_operations = (
                check.operations(ResourceType.CLUSTER, CLUSTER_NAME)
                if check.cluster(AclOperation.DESCRIBE)
                else 0
            )
        return response

    return Passed(req, amend)


def cluster_operation(
    operation: AclOperation, refused: Callable[[], Response]
) -> Callable[[Check, Any], Verdict]:
    """Kafka's ``authorizeClusterOperation``: the whole request needs ``operation`` on the
    cluster, else ``refused()`` (CLUSTER_AUTHORIZATION_FAILED)."""

    def rule(check: Check, req: Any) -> Verdict:
        return Passed(req) if check.cluster(operation) else refused()

    return rule


def _refused(response_type: Callable[..., Response], **fields: Any) -> Callable[[], Response]:
    return lambda: response_type(error_code=CLUSTER_DENIED, **fields)


def trusted_broker(rule: Callable[[Check, Any], Verdict]) -> Callable[[Check, Any], Verdict]:
    """On the controller listener: a principal with CLUSTER_ACTION is a broker forwarding a
    request it checked already; anyone else gets the full rule."""

    def checked(check: Check, req: Any) -> Verdict:
        return Passed(req) if check.cluster(AclOperation.CLUSTER_ACTION) else rule(check, req)

    return checked


_UNREGISTER = cluster_operation(
    AclOperation.ALTER, _refused(UnregisterBrokerResponse, error_message=CLUSTER_DENIED.message)
)


def _quota_alterations_refused(check: Check, req: AlterClientQuotasRequest) -> Verdict:
    """AlterClientQuotas: ALTER_CONFIGS on the cluster, else every entity refused."""
    if check.cluster(AclOperation.ALTER_CONFIGS):
        return Passed(req)
    return forwarded_api(req).failed(req, CLUSTER_DENIED, CLUSTER_DENIED.message)  # type: ignore[no-any-return]


FORWARDED_RULES: Final[dict[int, Rule]] = {
    19: Rule(CreateTopicsResponse, create_topics),
    20: Rule(DeleteTopicsResponse, delete_topics),
    37: Rule(CreatePartitionsResponse, create_partitions),
    33: Rule(
        AlterConfigsResponse,
        _configs_rule(
            AlterConfigsResponse,
            AlterConfigsResponse.AlterConfigsResourceResponse,
            AclOperation.ALTER_CONFIGS,
        ),
    ),
    44: Rule(
        IncrementalAlterConfigsResponse,
        _configs_rule(
            IncrementalAlterConfigsResponse,
            IncrementalAlterConfigsResponse.AlterConfigsResourceResponse,
            AclOperation.ALTER_CONFIGS,
        ),
    ),
    43: Rule(ElectLeadersResponse, elect_leaders),
    64: Rule(UnregisterBrokerResponse, _UNREGISTER),
    # brokers only (KIP-858): CLUSTER_ACTION, as the controller listener's broker APIs
    73: Rule(
        AssignReplicasToDirsResponse,
        cluster_operation(AclOperation.CLUSTER_ACTION, _refused(AssignReplicasToDirsResponse)),
    ),
    49: Rule(AlterClientQuotasResponse, _quota_alterations_refused),
    # Kafka's authorizeClusterOperation: ALTER to move partitions, DESCRIBE to list moves.
    45: Rule(
        AlterPartitionReassignmentsResponse,
        cluster_operation(
            AclOperation.ALTER,
            _refused(AlterPartitionReassignmentsResponse, error_message=CLUSTER_DENIED.message),
        ),
    ),
    46: Rule(
        ListPartitionReassignmentsResponse,
        cluster_operation(
            AclOperation.DESCRIBE,
            _refused(ListPartitionReassignmentsResponse, error_message=CLUSTER_DENIED.message),
        ),
    ),
}

BROKER_RULES: Final[dict[int, Rule]] = {
    0: Rule(ProduceResponse, api_rules.produce),
    1: Rule(FetchResponse, api_rules.fetch),
    2: Rule(ListOffsetsResponse, api_rules.list_offsets),
    3: Rule(MetadataResponse, api_rules.metadata),
    8: Rule(OffsetCommitResponse, group_rules.offset_commit),
    9: Rule(OffsetFetchResponse, group_rules.offset_fetch),
    10: Rule(FindCoordinatorResponse, api_rules.find_coordinator),
    11: Rule(JoinGroupResponse, group_rules.join_group),
    12: Rule(HeartbeatResponse, group_rules.heartbeat),
    13: Rule(LeaveGroupResponse, group_rules.leave_group),
    14: Rule(SyncGroupResponse, group_rules.sync_group),
    15: Rule(DescribeGroupsResponse, group_rules.describe_groups),
    16: Rule(ListGroupsResponse, group_rules.list_groups),
    22: Rule(InitProducerIdResponse, api_rules.init_producer_id),
    23: Rule(OffsetForLeaderEpochResponse, api_rules.offset_for_leader_epoch),
    24: Rule(AddPartitionsToTxnResponse, txn_rules.add_partitions_to_txn),
    25: Rule(AddOffsetsToTxnResponse, txn_rules.add_offsets_to_txn),
    26: Rule(EndTxnResponse, txn_rules.end_txn),
    27: Rule(WriteTxnMarkersResponse, txn_rules.write_txn_markers),
    28: Rule(TxnOffsetCommitResponse, txn_rules.txn_offset_commit),
    32: Rule(DescribeConfigsResponse, describe_configs),
    42: Rule(DeleteGroupsResponse, group_rules.delete_groups),
    47: Rule(OffsetDeleteResponse, group_rules.offset_delete),
    # forwarded to the active controller, which checks the broker's principal: the client's
    # needs DESCRIBE on the cluster here (Kafka's ControllerApis.handleDescribeQuorum)
    55: Rule(
        DescribeQuorumResponse,
        cluster_operation(
            AclOperation.DESCRIBE,
            _refused(DescribeQuorumResponse, error_message=CLUSTER_DENIED.message),
        ),
    ),
    60: Rule(DescribeClusterResponse, describe_cluster),
    61: Rule(DescribeProducersResponse, txn_rules.describe_producers),
    65: Rule(DescribeTransactionsResponse, txn_rules.describe_transactions),
    66: Rule(ListTransactionsResponse, txn_rules.list_transactions),
    21: Rule(DeleteRecordsResponse, api_rules.delete_records),
    34: Rule(AlterReplicaLogDirsResponse, api_rules.alter_replica_log_dirs),
    35: Rule(DescribeLogDirsResponse, api_rules.describe_log_dirs),
    48: Rule(
        DescribeClientQuotasResponse,
        cluster_operation(
            AclOperation.DESCRIBE_CONFIGS,
            _refused(DescribeClientQuotasResponse, error_message=CLUSTER_DENIED.message),
        ),
    ),
    68: Rule(ConsumerGroupHeartbeatResponse, group_rules.consumer_group_heartbeat),
    69: Rule(ConsumerGroupDescribeResponse, group_rules.consumer_group_describe),
    **FORWARDED_RULES,
}

_CLUSTER_ACTION = AclOperation.CLUSTER_ACTION
CONTROLLER_RULES: Final[dict[int, Rule]] = {
    1: Rule(FetchResponse, cluster_operation(_CLUSTER_ACTION, _refused(FetchResponse))),
    55: Rule(
        DescribeQuorumResponse,
        cluster_operation(
            AclOperation.DESCRIBE,
            _refused(DescribeQuorumResponse, error_message=CLUSTER_DENIED.message),
        ),
    ),
    56: Rule(
        AlterPartitionResponse, cluster_operation(_CLUSTER_ACTION, _refused(AlterPartitionResponse))
    ),
    59: Rule(
        FetchSnapshotResponse, cluster_operation(_CLUSTER_ACTION, _refused(FetchSnapshotResponse))
    ),
    62: Rule(
        BrokerRegistrationResponse,
        cluster_operation(_CLUSTER_ACTION, _refused(BrokerRegistrationResponse, broker_epoch=-1)),
    ),
    63: Rule(
        BrokerHeartbeatResponse,
        cluster_operation(_CLUSTER_ACTION, _refused(BrokerHeartbeatResponse, is_fenced=True)),
    ),
    67: Rule(
        AllocateProducerIdsResponse,
        cluster_operation(_CLUSTER_ACTION, _refused(AllocateProducerIdsResponse)),
    ),
    **{
        key: Rule(rule.response_type, trusted_broker(rule.check))
        for key, rule in FORWARDED_RULES.items()
    },
}
