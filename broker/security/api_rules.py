"""The per-API rules of :mod:`broker.security.api_authorization` (its docstring has the table).

Each rule takes the request's :class:`Check` and the request and answers a refusal (a whole
response) or a :class:`Passed` (the request with the refused items taken out, and how to put them
back, with their error, into the handler's answer).  Error codes and the shape of each refusal
follow Kafka's ``KafkaApis`` / ``ControllerApis`` (3.x).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Final

from broker.security.api_authorization import Check, Passed, Verdict
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka_protocol.record_batch import ATTR_TRANSACTIONAL, MAGIC
from kafka_protocol.types import BrokerId, ProducerId, TopicName
from metadata_log.acls import CLUSTER_NAME, AclOperation, ResourceType

TOPIC_DENIED: Final = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED: Final = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED: Final = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED: Final = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
GROUP_KEY: Final = 0
TRANSACTION_KEY: Final = 1


def replace(obj: Any, **changes: Any) -> Any:
    return dataclasses.replace(obj, **changes)


def split_topics(
    items: list[Any], name_of: Callable[[Any], str], allowed: set[str]
) -> tuple[list[Any], list[Any]]:
    """(allowed, refused) items of a request's topic list, in request order."""
    kept = [t for t in items if name_of(t) in allowed]
    refused = [t for t in items if name_of(t) not in allowed]
    return kept, refused


# --- Produce, Fetch, ListOffsets, OffsetForLeaderEpoch ---------------------------------------


_MAGIC_AT, _ATTRIBUTES_LOW_BYTE_AT = 16, 22  # in a v2 record batch's header


def _has_transactional_records(req: ProduceRequest) -> bool:
    """Kafka's ``RequestUtils.hasTransactionalRecords``: the first batch of some partition is
    transactional (only then is the transactional id checked)."""
    for t in req.topic_data:
        for p in t.partition_data:
            r = p.records
            if (
                isinstance(r, bytes | bytearray | memoryview)
                and len(r) > _ATTRIBUTES_LOW_BYTE_AT
                and r[_MAGIC_AT] == MAGIC
                and r[_ATTRIBUTES_LOW_BYTE_AT] & ATTR_TRANSACTIONAL
            ):
                return True
    return False


def produce(check: Check, req: ProduceRequest) -> Verdict:
    """Kafka's handleProduceRequest: transactional records need WRITE on the request's
    transactional id (none: refused too), then each topic WRITE."""
    Topic, Partition = (
        ProduceResponse.TopicProduceResponse,
        ProduceResponse.PartitionProduceResponse,
    )

    def answered(topics: list[Any], error: ErrorCode) -> list[Any]:
        return [
            Topic(
                name=t.name,
                partition_responses=[
                    Partition(index=p.index, error_code=error, base_offset=-1)
                    for p in t.partition_data
                ],
            )
            for t in topics
        ]

    if _has_transactional_records(req) and (
        req.transactional_id is None
        or not check.allowed(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id
        )
    ):
        if req.acks == 0:
            return Passed(replace(req, topic_data=[]), close_unanswered=True)
        return ProduceResponse(responses=answered(req.topic_data, TXN_DENIED))
    allowed = check.topics(AclOperation.WRITE, (t.name for t in req.topic_data))
    kept, refused = split_topics(req.topic_data, lambda t: t.name, allowed)
    if not refused:
        return Passed(req)

    def amend(response: ProduceResponse) -> ProduceResponse:
        response.responses.extend(answered(refused, TOPIC_DENIED))
        return response

    if req.acks == 0:  # the allowed partitions are appended, then the connection closed
        return Passed(replace(req, topic_data=kept), close_unanswered=True)
    return Passed(replace(req, topic_data=kept), amend, skip=not kept)


_UNKNOWN_ID = "\0unknown topic id"  # no topic name can hold a NUL


def fetch(check: Check, req: FetchRequest) -> Verdict:
    """READ on each topic (CLUSTER_ACTION for a follower); from v13 topics are named by id,
    resolved through the image (an unknown id is not refused here: the handler answers it
    UNKNOWN_TOPIC_ID, as Kafka's)."""

    def name_of(t: FetchRequest.FetchTopic) -> str:
        if check.api_version < 13:
            return str(t.topic)
        found = check.image.topics.by_id.get(t.topic_id)
        return found.name if found is not None else _UNKNOWN_ID

    replica_id = req.replica_state.replica_id if check.api_version >= 15 else req.replica_id
    if replica_id >= 0:  # a follower: CLUSTER_ACTION, else every partition refused
        follower = check.cluster(AclOperation.CLUSTER_ACTION)
        allowed: set[str] = {name_of(t) for t in req.topics} if follower else set()
    else:
        allowed = check.topics(AclOperation.READ, (name_of(t) for t in req.topics))
        allowed.add(_UNKNOWN_ID)  # answered UNKNOWN_TOPIC_ID by the handler, as Kafka does
    kept, refused = split_topics(req.topics, name_of, allowed)
    if not refused:
        return Passed(req)

    def amend(response: FetchResponse) -> FetchResponse:
        response.responses.extend(
            FetchResponse.FetchableTopicResponse(
                topic=t.topic,
                topic_id=t.topic_id,
                partitions=[
                    FetchResponse.PartitionData(
                        partition_index=p.partition, error_code=TOPIC_DENIED, high_watermark=-1
                    )
                    for p in t.partitions
                ],
            )
            for t in refused
        )
        return response

    return Passed(replace(req, topics=kept), amend, skip=not kept)


def list_offsets(check: Check, req: ListOffsetsRequest) -> Verdict:
    allowed = check.topics(AclOperation.DESCRIBE, (t.name for t in req.topics))
    kept, refused = split_topics(req.topics, lambda t: t.name, allowed)
    if not refused:
        return Passed(req)

    def amend(response: ListOffsetsResponse) -> ListOffsetsResponse:
        response.topics.extend(
            ListOffsetsResponse.ListOffsetsTopicResponse(
                name=t.name,
                partitions=[
                    ListOffsetsResponse.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        error_code=TOPIC_DENIED,
                        timestamp=-1,
                        offset=-1,
                        leader_epoch=-1,
                    )
                    for p in t.partitions
                ],
            )
            for t in refused
        )
        return response

    return Passed(replace(req, topics=kept), amend, skip=not kept)


def offset_for_leader_epoch(check: Check, req: OffsetForLeaderEpochRequest) -> Verdict:
    names = [t.topic for t in req.topics]
    if check.cluster(AclOperation.CLUSTER_ACTION):
        return Passed(req)
    allowed = check.topics(AclOperation.DESCRIBE, names)
    kept, refused = split_topics(req.topics, lambda t: t.topic, allowed)
    if not refused:
        return Passed(req)

    def amend(response: OffsetForLeaderEpochResponse) -> OffsetForLeaderEpochResponse:
        response.topics.extend(
            OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(
                topic=t.topic,
                partitions=[
                    OffsetForLeaderEpochResponse.EpochEndOffset(
                        error_code=TOPIC_DENIED,
                        partition=p.partition,
                        leader_epoch=-1,
                        end_offset=-1,
                    )
                    for p in t.partitions
                ],
            )
            for t in refused
        )
        return response

    return Passed(replace(req, topics=kept), amend, skip=not kept)


# --- Metadata, InitProducerId, FindCoordinator ------------------------------------------------


def metadata(check: Check, req: MetadataRequest) -> Verdict:
    """Kafka's handleTopicMetadataRequest: a listing omits the topics the principal may not
    DESCRIBE; a named one is answered TOPIC_AUTHORIZATION_FAILED (by id: with its id and no
    name); a topic that would be auto-created needs CREATE on the cluster or on it."""
    listing = req.topics is None or (check.api_version == 0 and not req.topics)
    refused_named: list[MetadataRequest.MetadataRequestTopic] = []
    kept_topics = req.topics
    if not listing:
        assert req.topics is not None
        kept_topics = []
        for t in req.topics:
            name: str | None = t.name
            if name is None:
                found = check.image.topics.by_id.get(t.topic_id)
                name = found.name if found is not None else None
            if name is None or check.topic(AclOperation.DESCRIBE, name):
                kept_topics.append(t)
            else:
                refused_named.append(t)
        kept_topics, create_refused = _create_check(check, req, kept_topics)
        refused_named.extend(create_refused)
    kept_names = {t.name for t in kept_topics or ()}
    kept_ids = {t.topic_id for t in kept_topics or () if t.name is None}
    include_topic_ops = check.api_version >= 8 and req.include_topic_authorized_operations
    include_cluster_ops = 8 <= check.api_version <= 10 and req.include_cluster_authorized_operations

    def amend(response: MetadataResponse) -> MetadataResponse:
        if listing:
            response.topics = [
                t
                for t in response.topics
                if t.name is not None and check.topic(AclOperation.DESCRIBE, t.name)
            ]
        else:  # (v0 reads an empty list as every topic)
            response.topics = [
                t for t in response.topics if t.name in kept_names or t.topic_id in kept_ids
            ]
        for t in response.topics:
            if include_topic_ops and t.error_code != TOPIC_DENIED and t.name is not None:
                t.topic_authorized_operations = check.operations(ResourceType.TOPIC, t.name)
        for r in refused_named:
            response.topics.append(
                MetadataResponse.MetadataResponseTopic(
                    error_code=TOPIC_DENIED,
                    name=None if r.name is None else TopicName(r.name),
                    topic_id=r.topic_id,
                )
            )
        if include_cluster_ops:
            response.cluster_authorized_operations = (
                check.operations(ResourceType.CLUSTER, CLUSTER_NAME)
                if check.cluster(AclOperation.DESCRIBE)
                else 0
            )
        return response

    return Passed(replace(req, topics=kept_topics), amend)


def _create_check(
    check: Check, req: MetadataRequest, topics: list[MetadataRequest.MetadataRequestTopic]
) -> tuple[list[MetadataRequest.MetadataRequestTopic], list[MetadataRequest.MetadataRequestTopic]]:
    """The topics that would be auto-created need CREATE (cluster-wide or on the topic)."""
    allow = check.api_version < 4 or req.allow_auto_topic_creation
    missing = {
        t.name for t in topics if t.name is not None and check.image.topics.get(t.name) is None
    }
    if not (allow and check.auto_create_topics and missing):
        return topics, []
    if check.cluster(AclOperation.CREATE):
        return topics, []
    creatable = check.topics(AclOperation.CREATE, missing)
    refused = missing - creatable
    return (
        [t for t in topics if t.name not in refused],
        [t for t in topics if t.name in refused],
    )


def init_producer_id(check: Check, req: InitProducerIdRequest) -> Verdict:
    if req.transactional_id is not None:
        if not check.allowed(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id
        ):
            return InitProducerIdResponse(
                error_code=TXN_DENIED, producer_id=ProducerId(-1), producer_epoch=-1
            )
    elif not check.cluster(AclOperation.IDEMPOTENT_WRITE) and not check.any_topic(
        AclOperation.WRITE
    ):
        return InitProducerIdResponse(
            error_code=CLUSTER_DENIED, producer_id=ProducerId(-1), producer_epoch=-1
        )
    return Passed(req)


def find_coordinator(check: Check, req: FindCoordinatorRequest) -> Verdict:
    def refusal(key: str) -> ErrorCode | None:
        if req.key_type == TRANSACTION_KEY:
            allowed = check.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key)
            return None if allowed else TXN_DENIED
        return None if check.group(AclOperation.DESCRIBE, key) else GROUP_DENIED

    if check.api_version < 4:
        error = refusal(req.key)
        if error is None:
            return Passed(req)
        return FindCoordinatorResponse(
            error_code=error, error_message=error.message, node_id=BrokerId(-1), host="", port=-1
        )
    refused = {k: e for k in req.coordinator_keys if (e := refusal(k)) is not None}
    if not refused:
        return Passed(req)
    kept = [k for k in req.coordinator_keys if k not in refused]

    def amend(response: FindCoordinatorResponse) -> FindCoordinatorResponse:
        response.coordinators.extend(
            FindCoordinatorResponse.Coordinator(
                key=k, node_id=BrokerId(-1), host="", port=-1, error_code=e, error_message=e.message
            )
            for k, e in refused.items()
        )
        return response

    return Passed(replace(req, coordinator_keys=kept), amend, skip=not kept)


# --- DeleteRecords ---------------------------------------------------------------------------


def delete_records(check: Check, req: DeleteRecordsRequest) -> Verdict:
    """DELETE on each topic (Kafka's ``handleDeleteRecordsRequest``)."""
    allowed = check.topics(AclOperation.DELETE, (t.name for t in req.topics))
    kept, refused = split_topics(req.topics, lambda t: t.name, allowed)
    if not refused:
        return Passed(req)

    def amend(response: DeleteRecordsResponse) -> DeleteRecordsResponse:
        response.topics.extend(
            DeleteRecordsResponse.DeleteRecordsTopicResult(
                name=t.name,
                partitions=[
                    DeleteRecordsResponse.DeleteRecordsPartitionResult(
                        partition_index=p.partition_index, low_watermark=-1, error_code=TOPIC_DENIED
                    )
                    for p in t.partitions
                ],
            )
            for t in refused
        )
        return response

    return Passed(replace(req, topics=kept), amend, skip=not kept)


# --- DescribeLogDirs, AlterReplicaLogDirs ----------------------------------------------------


def describe_log_dirs(check: Check, req: DescribeLogDirsRequest) -> Verdict:
    """DESCRIBE on the cluster, else no directory (v3+: CLUSTER_AUTHORIZATION_FAILED)."""
    if check.cluster(AclOperation.DESCRIBE):
        return Passed(req)
    return DescribeLogDirsResponse(error_code=CLUSTER_DENIED, results=[])


def alter_replica_log_dirs(check: Check, req: AlterReplicaLogDirsRequest) -> Verdict:
    """ALTER on the cluster, else every partition CLUSTER_AUTHORIZATION_FAILED."""
    if check.cluster(AclOperation.ALTER):
        return Passed(req)
    R = AlterReplicaLogDirsResponse
    denied = R.AlterReplicaLogDirPartitionResult
    refused: dict[TopicName, list[int]] = {}
    for target in req.dirs:
        for topic in target.topics:
            refused.setdefault(topic.name, []).extend(topic.partitions)
    return R(
        results=[
            R.AlterReplicaLogDirTopicResult(
                topic_name=name,
                partitions=[denied(partition_index=p, error_code=CLUSTER_DENIED) for p in parts],
            )
            for name, parts in refused.items()
        ]
    )
