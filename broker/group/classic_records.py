"""A classic group's ``__consumer_offsets`` record: GroupMetadataKey / GroupMetadataValue (Kafka's
``GroupCoordinatorRecordHelpers.newGroupMetadataRecord`` and ``GroupMetadataManager.replay``).

The value is a snapshot of the whole group: generation, protocol type, selected protocol,
leader, and per member its id, instance id, client id and host, timeouts, its metadata for the
selected protocol (the subscription) and its assignment.  The latest value for a group wins
(the topic is compacted); a tombstone (null value) deletes the group.  A new coordinator loads
the latest value: a group with members comes back Stable in that generation, an empty one Empty.

Record framing (both key and value start with their schema version)::

    key   = int16 2 | GroupMetadataKey(group)                       (version 2)
    value = int16 3 | GroupMetadataValue(...)                       (version 3, as Kafka 3.x/4.x)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from broker.group.classic_member import ClassicMember
from kafka_protocol.coordinator.group_metadata_value import GroupMetadataValue
from kafka_protocol.errors import ErrorCode

GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3  # MetadataVersion.groupMetadataValueVersion() since IBP 2.3


def group_metadata_value(
    *,
    protocol_type: str | None,
    generation_id: int,
    protocol_name: str | None,
    leader_id: str | None,
    current_state_timestamp_ms: int | None,
    members: Iterable[ClassicMember],
    assignment: Mapping[str, bytes],
) -> GroupMetadataValue:
    """The record value for a group whose members get ``assignment`` (every member must have
    one; an empty group has no members and no protocol)."""
    records = []
    for member in members:
        assert protocol_name is not None, "a group with members has a protocol"
        assert member.member_id in assignment, (member.member_id, sorted(assignment))
        records.append(
            GroupMetadataValue.MemberMetadata(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                rebalance_timeout=member.rebalance_timeout_ms,
                session_timeout=member.session_timeout_ms,
                subscription=member.metadata(protocol_name),
                assignment=assignment[member.member_id],
            )
        )
    return GroupMetadataValue(
        protocol_type=protocol_type or "",
        generation=generation_id,
        protocol=protocol_name,
        leader=leader_id,
        current_state_timestamp=-1
        if current_state_timestamp_ms is None
        else current_state_timestamp_ms,
        members=records,
    )


def members_from_value(value: GroupMetadataValue, now_ms: int) -> list[ClassicMember]:
    """``GroupMetadataManager.replay``: each member supports just the selected protocol (with
    its stored subscription), keeps its assignment, and must heartbeat within its session
    timeout from now.  A record older than v1 has no rebalance timeout: the session's is used."""
    if value.members and not value.protocol:
        raise ValueError(f"group record with members but no protocol: {value!r}")
    protocol = value.protocol or ""
    return [
        ClassicMember(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout_ms=m.session_timeout
            if m.rebalance_timeout == -1
            else m.rebalance_timeout,
            session_timeout_ms=m.session_timeout,
            protocol_type=value.protocol_type,
            protocols=((protocol, m.subscription),),
            assignment=m.assignment,
            heartbeat_deadline_ms=now_ms + m.session_timeout,
        )
        for m in value.members
    ]


def append_error_to_response_error(error: ErrorCode) -> ErrorCode:
    """``appendGroupMetadataErrorToResponseError``: what a failed write of the group record
    tells the clients waiting on it."""
    if error in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.INVALID_FETCH_SIZE,
    ):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return error
