"""What a call on a classic group hands back to its caller (:class:`Outcome`): answers to
deliver, records to write, when to call again; and the answers themselves, shaped for the
version each request came in.

An answer goes to the request's ``token`` (whatever the caller uses to find the connection and
correlation id).  A record to write is a :class:`StoreRequest`: the caller appends
``GroupMetadataKey(group_id) -> value`` to the group's ``__consumer_offsets`` partition, in the
order given, and reports each append's result back (``ClassicGroup.on_stored``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeAlias

from broker.group.classic_member import ClassicMember, GroupState, Parked, Token
from kafka_protocol.coordinator.group_metadata_value import GroupMetadataValue
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    DescribeGroupsResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
)
from kafka_protocol.types import GroupId

Response: TypeAlias = JoinGroupResponse | SyncGroupResponse | HeartbeatResponse | LeaveGroupResponse
Reply: TypeAlias = tuple[Token, Response]


@dataclass(frozen=True, slots=True)
class StoreRequest:
    """A GroupMetadataValue to append under GroupMetadataKey(group_id).  ``awaited``: clients
    wait for the result (otherwise a failure is only worth a log line)."""

    store_id: int
    group_id: str
    value: GroupMetadataValue
    awaited: bool


@dataclass(slots=True)
class Outcome:
    """``replies``: deliver each answer to its token.  ``stores``: write each record, in order.
    ``deadline_ms``: call ``tick`` then (always after the call's ``now_ms``); None: no timer."""

    replies: list[Reply] = field(default_factory=list)
    stores: list[StoreRequest] = field(default_factory=list)
    deadline_ms: int | None = None

    def join_error(self, parked: Parked, error: ErrorCode, member_id: str) -> None:
        response = JoinGroupResponse(error_code=error, member_id=member_id)
        if parked.api_version >= 7:
            response.protocol_name = None  # nullable from v7, as Kafka sends it
        self.replies.append((parked.token, response))

    def join_ok(
        self,
        parked: Parked,
        *,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str,
        leader_id: str,
        member_id: str,
        members: Iterable[ClassicMember] = (),
        skip_assignment: bool = False,
    ) -> None:
        """The group's generation; the leader also gets every member's metadata for the chosen
        protocol (to assign with).  ``skip_assignment`` (v9, KIP-814): it should not."""
        response = JoinGroupResponse(
            error_code=ErrorCode.NONE,
            generation_id=generation_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            leader=leader_id,
            skip_assignment=skip_assignment and parked.api_version >= 9,
            member_id=member_id,
            members=[
                JoinGroupResponse.JoinGroupResponseMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata(protocol_name),
                )
                for m in members
            ],
        )
        self.replies.append((parked.token, response))

    def sync_error(self, parked: Parked, error: ErrorCode) -> None:
        self.replies.append((parked.token, SyncGroupResponse(error_code=error)))

    def sync_ok(
        self,
        parked: Parked,
        protocol_type: str | None,
        protocol_name: str | None,
        assignment: bytes,
    ) -> None:
        response = SyncGroupResponse(
            error_code=ErrorCode.NONE,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignment=assignment,
        )
        self.replies.append((parked.token, response))


def leave_response(
    api_version: int, results: list[LeaveGroupResponse.MemberResponse]
) -> LeaveGroupResponse:
    """From v3 an answer per member; before, one member and its error at the top."""
    if api_version < 3:
        assert len(results) == 1, results
        return LeaveGroupResponse(error_code=results[0].error_code)
    return LeaveGroupResponse(error_code=ErrorCode.NONE, members=results)


def described_group(
    group_id: str,
    state: GroupState,
    protocol_type: str | None,
    protocol_name: str | None,
    members: Iterable[ClassicMember],
) -> DescribeGroupsResponse.DescribedGroup:
    """DescribeGroups: member metadata, assignments and the protocol only once Stable (Kafka)."""
    stable = state is GroupState.STABLE
    return DescribeGroupsResponse.DescribedGroup(
        error_code=ErrorCode.NONE,
        group_id=GroupId(group_id),
        group_state=state.value,
        protocol_type=protocol_type or "",
        protocol_data=(protocol_name or "") if stable else "",
        members=[
            DescribeGroupsResponse.DescribedGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata(protocol_name or "") if stable else b"",
                member_assignment=m.assignment if stable else b"",
            )
            for m in members
        ],
    )
