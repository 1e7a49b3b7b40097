"""The group APIs' rules of :mod:`broker.security.api_authorization` (Kafka's KafkaApis 3.x)."""

from __future__ import annotations

from typing import Any

from broker.security.api_authorization import Check, Passed, Verdict
from broker.security.api_rules import GROUP_DENIED, TOPIC_DENIED, replace, split_topics
from broker.security.authorization import AUTHORIZED_OPERATIONS_OMITTED
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka_protocol.types import GroupId
from metadata_log.acls import AclOperation, ResourceType

MULTI_GROUP_FETCH_VERSION = 8
PER_PARTITION_ERROR_VERSION = 2  # OffsetFetch v0-1 have no top-level error code


def join_group(check: Check, req: JoinGroupRequest) -> Verdict:
    if check.group(AclOperation.READ, req.group_id):
        return Passed(req)
    return JoinGroupResponse(error_code=GROUP_DENIED, generation_id=-1, member_id="", leader="")


def sync_group(check: Check, req: SyncGroupRequest) -> Verdict:
    if check.group(AclOperation.READ, req.group_id):
        return Passed(req)
    return SyncGroupResponse(error_code=GROUP_DENIED)


def heartbeat(check: Check, req: HeartbeatRequest) -> Verdict:
    if check.group(AclOperation.READ, req.group_id):
        return Passed(req)
    return HeartbeatResponse(error_code=GROUP_DENIED)


def leave_group(check: Check, req: LeaveGroupRequest) -> Verdict:
    if check.group(AclOperation.READ, req.group_id):
        return Passed(req)
    return LeaveGroupResponse(error_code=GROUP_DENIED)


def _topic_partitions(
    topic_type: Any, partition_type: Any, topics: list[Any], error: ErrorCode
) -> list[Any]:
    return [
        topic_type(
            name=t.name,
            partitions=[
                partition_type(partition_index=p.partition_index, error_code=error)
                for p in t.partitions
            ],
        )
        for t in topics
    ]


def offset_commit(check: Check, req: OffsetCommitRequest) -> Verdict:
    Topic = OffsetCommitResponse.OffsetCommitResponseTopic
    Partition = OffsetCommitResponse.OffsetCommitResponsePartition
    if not check.group(AclOperation.READ, req.group_id):
        return OffsetCommitResponse(
            topics=_topic_partitions(Topic, Partition, req.topics, GROUP_DENIED)
        )
    allowed = check.topics(AclOperation.READ, (t.name for t in req.topics))
    kept, refused = split_topics(req.topics, lambda t: t.name, allowed)
    if not refused:
        return Passed(req)

    def amend(response: OffsetCommitResponse) -> OffsetCommitResponse:
        response.topics.extend(_topic_partitions(Topic, Partition, refused, TOPIC_DENIED))
        return response

    return Passed(replace(req, topics=kept), amend, skip=not kept)


def offset_delete(check: Check, req: OffsetDeleteRequest) -> Verdict:
    if not check.group(AclOperation.DELETE, req.group_id):
        return OffsetDeleteResponse(error_code=GROUP_DENIED)
    allowed = check.topics(AclOperation.READ, (t.name for t in req.topics))
    kept, refused = split_topics(req.topics, lambda t: t.name, allowed)
    if not refused:
        return Passed(req)
    Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
    Partition = OffsetDeleteResponse.OffsetDeleteResponsePartition

    def amend(response: OffsetDeleteResponse) -> OffsetDeleteResponse:
        response.topics.extend(_topic_partitions(Topic, Partition, refused, TOPIC_DENIED))
        return response

    return Passed(replace(req, topics=kept), amend, skip=not kept)


def offset_fetch(check: Check, req: OffsetFetchRequest) -> Verdict:
    """DESCRIBE on the group, else the group's error; DESCRIBE on each topic: a named topic the
    principal may not describe is answered TOPIC_AUTHORIZATION_FAILED per partition, and a
    request for every committed offset omits it (Kafka's handleOffsetFetchRequest)."""
    if check.api_version >= MULTI_GROUP_FETCH_VERSION:
        return _offset_fetch_groups(check, req)
    if not check.group(AclOperation.DESCRIBE, req.group_id):
        return _group_refused(check, req)
    return _topics_checked(
        check,
        req,
        req.topics,
        lambda r: [
            (
                r.topics,
                OffsetFetchResponse.OffsetFetchResponseTopic,
                OffsetFetchResponse.OffsetFetchResponsePartition,
            )
        ],
        lambda q, kept: replace(q, topics=kept),
    )


def _group_refused(check: Check, req: OffsetFetchRequest) -> OffsetFetchResponse:
    if check.api_version >= PER_PARTITION_ERROR_VERSION:
        return OffsetFetchResponse(error_code=GROUP_DENIED)
    topics = [
        OffsetFetchResponse.OffsetFetchResponseTopic(
            name=t.name,
            partitions=[
                _unauthorized(OffsetFetchResponse.OffsetFetchResponsePartition, p, GROUP_DENIED)
                for p in t.partition_indexes
            ],
        )
        for t in req.topics or ()
    ]
    return OffsetFetchResponse(topics=topics)


def _unauthorized(partition_type: Any, index: int, error: ErrorCode) -> Any:
    return partition_type(
        partition_index=index,
        committed_offset=-1,
        committed_leader_epoch=-1,
        metadata="",
        error_code=error,
    )


def _topics_checked(
    check: Check, req: Any, topics: list[Any] | None, places: Any, rebuild: Any
) -> Verdict:
    """One group's topics: refused named ones answered, a listing filtered."""
    if topics is None:

        def filtered(response: OffsetFetchResponse) -> OffsetFetchResponse:
            for existing, _, _ in places(response):
                existing[:] = [t for t in existing if check.topic(AclOperation.DESCRIBE, t.name)]
            return response

        return Passed(req, filtered)
    allowed = check.topics(AclOperation.DESCRIBE, (t.name for t in topics))
    kept, refused = split_topics(topics, lambda t: t.name, allowed)
    if not refused:
        return Passed(req)

    def amend(response: OffsetFetchResponse) -> OffsetFetchResponse:
        for existing, topic_type, partition_type in places(response):
            existing.extend(
                topic_type(
                    name=t.name,
                    partitions=[
                        _unauthorized(partition_type, p, TOPIC_DENIED) for p in t.partition_indexes
                    ],
                )
                for t in refused
            )
        return response

    return Passed(rebuild(req, kept), amend)


def _offset_fetch_groups(check: Check, req: OffsetFetchRequest) -> Verdict:
    """v8+: several groups; each is checked alone."""
    refused_groups = [
        g.group_id for g in req.groups if not check.group(AclOperation.DESCRIBE, g.group_id)
    ]
    kept_groups = []
    amends = []
    for g in req.groups:
        if g.group_id in refused_groups:
            continue
        verdict = _topics_checked(
            check,
            g,
            g.topics,
            lambda r, gid=g.group_id: [
                (
                    grp.topics,
                    OffsetFetchResponse.OffsetFetchResponseTopics,
                    OffsetFetchResponse.OffsetFetchResponsePartitions,
                )
                for grp in r.groups
                if grp.group_id == gid
            ],
            lambda q, kept: replace(q, topics=kept),
        )
        assert isinstance(verdict, Passed)
        kept_groups.append(verdict.request)
        if verdict.amend is not None:
            amends.append(verdict.amend)

    def amend(response: OffsetFetchResponse) -> OffsetFetchResponse:
        for a in amends:
            response = a(response)
        response.groups.extend(
            OffsetFetchResponse.OffsetFetchResponseGroup(
                group_id=GroupId(g), error_code=GROUP_DENIED
            )
            for g in refused_groups
        )
        return response

    return Passed(replace(req, groups=kept_groups), amend, skip=not kept_groups)


def list_groups(check: Check, req: ListGroupsRequest) -> Verdict:
    if check.cluster(AclOperation.DESCRIBE):
        return Passed(req)

    def amend(response: ListGroupsResponse) -> ListGroupsResponse:
        response.groups = [
            g for g in response.groups if check.group(AclOperation.DESCRIBE, g.group_id)
        ]
        return response

    return Passed(req, amend)


def describe_groups(check: Check, req: DescribeGroupsRequest) -> Verdict:
    refused = [g for g in req.groups if not check.group(AclOperation.DESCRIBE, g)]
    kept = [g for g in req.groups if g not in refused]
    include_ops = check.api_version >= 3 and req.include_authorized_operations

    def amend(response: DescribeGroupsResponse) -> DescribeGroupsResponse:
        for g in response.groups:
            g.authorized_operations = (
                check.operations(ResourceType.GROUP, g.group_id)
                if include_ops
                else AUTHORIZED_OPERATIONS_OMITTED
            )
        response.groups.extend(
            DescribeGroupsResponse.DescribedGroup(
                error_code=GROUP_DENIED,
                group_id=g,
                group_state="",
                protocol_type="",
                protocol_data="",
            )
            for g in refused
        )
        order = {g: i for i, g in enumerate(req.groups)}
        response.groups.sort(key=lambda g: order.get(g.group_id, len(order)))
        return response

    return Passed(replace(req, groups=kept), amend, skip=not kept)


def delete_groups(check: Check, req: DeleteGroupsRequest) -> Verdict:
    refused = [g for g in req.groups_names if not check.group(AclOperation.DELETE, g)]
    if not refused:
        return Passed(req)
    kept = [g for g in req.groups_names if g not in refused]

    def amend(response: DeleteGroupsResponse) -> DeleteGroupsResponse:
        response.results.extend(
            DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=GROUP_DENIED)
            for g in refused
        )
        return response

    return Passed(replace(req, groups_names=kept), amend, skip=not kept)


def consumer_group_heartbeat(check: Check, req: ConsumerGroupHeartbeatRequest) -> Verdict:
    """Kafka: READ on the group."""
    if check.group(AclOperation.READ, req.group_id):
        return Passed(req)
    return ConsumerGroupHeartbeatResponse(error_code=GROUP_DENIED)


def consumer_group_describe(check: Check, req: ConsumerGroupDescribeRequest) -> Verdict:
    """Kafka: DESCRIBE on each group; the others answered GROUP_AUTHORIZATION_FAILED."""
    refused = [g for g in req.group_ids if not check.group(AclOperation.DESCRIBE, g)]
    kept = [g for g in req.group_ids if g not in refused]

    def amend(response: ConsumerGroupDescribeResponse) -> ConsumerGroupDescribeResponse:
        for g in response.groups:
            g.authorized_operations = (
                check.operations(ResourceType.GROUP, g.group_id)
                if req.include_authorized_operations
                else AUTHORIZED_OPERATIONS_OMITTED
            )
        response.groups.extend(
            ConsumerGroupDescribeResponse.DescribedGroup(error_code=GROUP_DENIED, group_id=g)
            for g in refused
        )
        order = {g: i for i, g in enumerate(req.group_ids)}
        response.groups.sort(key=lambda g: order.get(g.group_id, len(order)))
        return response

    return Passed(replace(req, group_ids=kept), amend, skip=not kept)
