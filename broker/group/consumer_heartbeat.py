"""ConsumerGroupHeartbeat's request rules and answer parts (Kafka's
``throwIfConsumerGroupHeartbeatRequestIsInvalid``), sans-IO: what is refused before a group is
touched, and how partitions travel in the request and the response."""

from __future__ import annotations

from collections.abc import Iterable

from broker.group.consumer_member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    normalized,
)
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ConsumerGroupHeartbeatRequest as Heartbeat
from kafka_protocol.messages import ConsumerGroupHeartbeatResponse as HeartbeatResponse

CLIENT_MEMBER_ID_VERSION = 1  # KIP-1082: from v1 the client names itself


class HeartbeatError(Exception):
    """A heartbeat refused with Kafka's error (nothing changed)."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def validate(req: Heartbeat, api_version: int, assignors: Iterable[str]) -> None:
    """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``."""

    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.INVALID_REQUEST, message)

    if not req.group_id:
        raise invalid("GroupId can't be empty.")
    if req.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if req.rack_id == "":
        raise invalid("RackId can't be empty.")
    if req.subscribed_topic_regex:  # "" clears a regex: clients send it with a topic list
        raise invalid("SubscribedTopicRegex is not supported yet.")
    if api_version >= CLIENT_MEMBER_ID_VERSION and not req.member_id:
        raise invalid("MemberId can't be empty.")
    epoch = req.member_epoch
    if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        if not req.member_id:
            raise invalid("MemberId can't be empty.")
    elif epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or req.topic_partitions:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if not req.subscribed_topic_names:
            raise invalid("SubscribedTopicNames must be set in first request.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if not req.member_id:
            raise invalid("MemberId can't be empty.")
        if req.instance_id is None:
            raise invalid("InstanceId can't be null.")
    else:
        raise invalid("MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in assignors:
        raise HeartbeatError(
            ErrorCode.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {req.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(assignors)}.",
        )


def owned_partitions(req: Heartbeat) -> Assignment | None:
    if req.topic_partitions is None:
        return None
    return normalized({tp.topic_id: tp.partitions for tp in req.topic_partitions})


def response_assignment(assigned: Assignment) -> HeartbeatResponse.Assignment:
    return HeartbeatResponse.Assignment(
        topic_partitions=[
            HeartbeatResponse.TopicPartitions(topic_id=t, partitions=sorted(ps))
            for t, ps in sorted(assigned.items(), key=lambda x: str(x[0]))
        ]
    )
