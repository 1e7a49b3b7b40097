"""The state of one classic group (Kafka's ``ClassicGroup``): its members, generation, chosen
protocol and leader, the requests it has parked, its timers and the records being written; the
changes the protocol rules (``broker.group.classic``) make to it, and its invariants.

Timers are data: a member's session deadline (suspended while it has a JoinGroup or SyncGroup
parked, except for a new member), a pending member id's expiry, the end of the join phase, the
SyncGroup deadline.  ``next_deadline_ms`` is the earliest that would fire.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeAlias

from broker.group.classic_member import (
    VALID_PREVIOUS_STATES,
    ClassicMember,
    GroupConfig,
    GroupState,
    Parked,
    Protocol,
    Token,
)
from broker.group.classic_outcome import Outcome, StoreRequest, described_group
from broker.group.classic_records import group_metadata_value
from kafka_protocol.coordinator.group_metadata_value import GroupMetadataValue
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DescribeGroupsResponse

UNKNOWN_MEMBER_ID = ""
_S = GroupState


# --- what a stored record was for ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AssignmentStore:
    generation_id: int
    assignment: dict[str, bytes]


@dataclass(frozen=True, slots=True)
class StaticReplacementStore:
    """Undo information: Kafka reverts the replacement if the record cannot be written."""

    generation_id: int
    group_instance_id: str
    old_member_id: str
    new_member_id: str
    previous_leader_id: str | None
    parked: Parked
    old_protocols: tuple[Protocol, ...]
    old_rebalance_timeout_ms: int
    old_session_timeout_ms: int
    old_heartbeat_deadline_ms: int
    old_client: tuple[str, str]


@dataclass(frozen=True, slots=True)
class EmptyStore:
    generation_id: int


StoreContext: TypeAlias = AssignmentStore | StaticReplacementStore | EmptyStore


@dataclass(frozen=True, slots=True)
class JoinTimer:
    """When the join phase ends.  ``initial_delay_ms`` set: Kafka's InitialDelayedJoin(delay,
    remaining), which waits again while new members keep arriving."""

    deadline_ms: int
    initial_delay_ms: int | None = None
    remaining_ms: int = 0


class ClassicGroupState:
    """One group's state.  Every change happens inside a call on :class:`ClassicGroup`, which
    collects what it produces in ``self._out`` and checks the invariants at its end."""

    def __init__(self, group_id: str, config: GroupConfig, rng: random.Random, now_ms: int) -> None:
        self.group_id = group_id
        self.config = config
        self._rng = rng  # member ids
        self._now_ms = now_ms
        self._state = _S.EMPTY
        self._previous_state = _S.EMPTY
        self._state_timestamp_ms: int | None = now_ms
        self._generation_id = 0
        self._protocol_type: str | None = None
        self._protocol_name: str | None = None
        self._leader_id: str | None = None
        self._members: dict[str, ClassicMember] = {}  # in join order
        self._static_members: dict[str, str] = {}  # group.instance.id -> member id
        self._pending_members: dict[str, int] = {}  # MEMBER_ID_REQUIRED ids -> expiry
        self._pending_sync: set[str] = set()
        self._sync_deadline_ms: int | None = None
        self._join_timer: JoinTimer | None = None
        self._new_member_added = False
        self._stores: dict[int, StoreContext] = {}
        self._next_store_id = 0
        self._assignment_store_id: int | None = None  # the leader's assignment, being written
        self._out = Outcome()
        self.join_phases_completed = 0  # each one is a new generation

    # --- reading ----------------------------------------------------------------------------------

    @property
    def state(self) -> GroupState:
        return self._state

    @property
    def generation_id(self) -> int:
        return self._generation_id

    @property
    def protocol_type(self) -> str | None:
        return self._protocol_type

    @property
    def protocol_name(self) -> str | None:
        return self._protocol_name

    @property
    def leader_id(self) -> str | None:
        return self._leader_id

    @property
    def members(self) -> Mapping[str, ClassicMember]:
        return MappingProxyType(self._members)

    @property
    def pending_member_ids(self) -> frozenset[str]:
        return frozenset(self._pending_members)

    @property
    def current_state_timestamp_ms(self) -> int | None:
        return self._state_timestamp_ms

    @property
    def is_empty(self) -> bool:
        return self._state is _S.EMPTY

    def parked_tokens(self) -> set[Token]:
        parked = set()
        for m in self._members.values():
            for p in (m.awaiting_join, m.awaiting_sync):
                if p is not None:
                    parked.add(p.token)
        return parked

    def describe(self) -> DescribeGroupsResponse.DescribedGroup:
        return described_group(
            self.group_id,
            self._state,
            self._protocol_type,
            self._protocol_name,
            self._members.values(),
        )

    def to_record(self) -> GroupMetadataValue:
        """The group as a record now; members' current assignments (empty unless Stable)."""
        return self._record({m.member_id: m.assignment for m in self._members.values()})

    def next_deadline_ms(self) -> int | None:
        return min((t[0] for t in self._timers()), default=None)

    # --- changes, for the rules in ``classic`` ----------------------------------------------------

    def _begin(self, now_ms: int) -> None:
        """A call starts: what was due before it happens first."""
        self._now_ms = now_ms
        self._out = Outcome()
        self._fire_due_timers()

    def _end(self) -> Outcome:
        """A call ends: whatever it made due fires now, so the next deadline is in the future."""
        self._fire_due_timers()
        out, self._out = self._out, Outcome()
        out.deadline_ms = self.next_deadline_ms()
        assert out.deadline_ms is None or out.deadline_ms > self._now_ms, out.deadline_ms
        self.check_invariants()
        return out

    def _fire_due_timers(self) -> None:
        raise NotImplementedError  # the rules (``ClassicGroup``) say what a timer does

    def _transition(self, state: GroupState) -> None:
        assert self._state in VALID_PREVIOUS_STATES[state], (self._state, state)
        self._previous_state, self._state = self._state, state
        self._state_timestamp_ms = self._now_ms

    def _become_dead(self) -> None:
        self._transition(_S.DEAD)
        self._pending_members.clear()
        self._clear_pending_sync()
        self._join_timer = None
        self._stores.clear()
        self._assignment_store_id = None

    def _add(self, member: ClassicMember) -> None:
        assert member.member_id not in self._members, member.member_id
        if member.group_instance_id is not None:
            assert member.group_instance_id not in self._static_members, member
            self._static_members[member.group_instance_id] = member.member_id
        if not self._members:
            self._protocol_type = member.protocol_type
        self._members[member.member_id] = member
        if self._leader_id is None:
            self._leader_id = member.member_id
        self._pending_members.pop(member.member_id, None)

    def _remove_member(self, member_id: str) -> None:
        """Gone: its parked requests are answered UNKNOWN_MEMBER_ID (a live client rejoins)."""
        member = self._members.pop(member_id)
        if member.awaiting_join is not None:
            self._out.join_error(
                member.awaiting_join, ErrorCode.UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID
            )
        if member.awaiting_sync is not None:
            self._out.sync_error(member.awaiting_sync, ErrorCode.UNKNOWN_MEMBER_ID)
        if member.group_instance_id is not None:
            del self._static_members[member.group_instance_id]
        self._remove_pending_sync(member_id)
        if self._leader_id == member_id:
            self._leader_id = next(iter(self._members), None)

    def _swap_member_id(
        self, instance_id: str, old_member_id: str, new_member_id: str
    ) -> ClassicMember:
        """``replaceStaticMember``: whatever the old id has parked is fenced."""
        member = self._members.pop(old_member_id)
        if member.awaiting_join is not None:
            self._out.join_error(member.awaiting_join, ErrorCode.FENCED_INSTANCE_ID, old_member_id)
            member.awaiting_join = None
        if member.awaiting_sync is not None:
            self._out.sync_error(member.awaiting_sync, ErrorCode.FENCED_INSTANCE_ID)
            member.awaiting_sync = None
        member.member_id = new_member_id
        self._members[new_member_id] = member
        if self._leader_id == old_member_id:
            self._leader_id = new_member_id
        self._static_members[instance_id] = new_member_id
        if old_member_id in self._pending_sync:
            self._pending_sync.discard(old_member_id)
            self._pending_sync.add(new_member_id)
        return member

    def validate_txn_offset_commit(
        self, member_id: str, instance_id: str | None, generation: int
    ) -> ErrorCode | None:
        """Kafka's ``ClassicGroup.validateOffsetCommit`` for a TxnOffsetCommit (KIP-447): the
        member and generation are checked only when given (v3+), and neither an unknown member
        of a non-empty group without them nor a rebalance refuses the commit."""
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and self.state is GroupState.EMPTY:
            return None
        if generation >= 0 or member_id or instance_id is not None:
            error = self._validate_member(member_id, instance_id)
            if error is not None:
                return error
            if generation != self._generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        return None

    def _validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode | None:
        """``validateMember``: a static member's instance id must map to this member id."""
        if instance_id is not None:
            current = self._static_members.get(instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self._members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def _has_all_members_joined(self) -> bool:
        return not self._pending_members and all(
            m.awaiting_join is not None for m in self._members.values()
        )

    def _rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self._members.values()), default=0)

    def _refresh_heartbeat(self, member: ClassicMember) -> None:
        timeout_ms = member.session_timeout_ms
        if member.is_new:  # it cannot heartbeat before its JoinGroup is answered
            timeout_ms = self.config.new_member_join_timeout_ms
        member.heartbeat_deadline_ms = self._now_ms + timeout_ms

    def _remove_pending_sync(self, member_id: str) -> None:
        self._pending_sync.discard(member_id)
        if not self._pending_sync:
            self._sync_deadline_ms = None

    def _clear_pending_sync(self) -> None:
        self._pending_sync.clear()
        self._sync_deadline_ms = None

    def _timers(self) -> Iterator[tuple[int, int, str, str]]:
        """(deadline, order among equal deadlines, kind, member id).  Expiries go first, so a
        member that is gone is not carried into a new generation."""
        for member_id, deadline_ms in self._pending_members.items():
            yield deadline_ms, 0, "pending", member_id
        for m in self._members.values():
            if not m.session_suspended:
                yield m.heartbeat_deadline_ms, 0, "session", m.member_id
        if self._sync_deadline_ms is not None:
            yield self._sync_deadline_ms, 1, "sync", ""
        if self._join_timer is not None:
            yield self._join_timer.deadline_ms, 2, "join", ""

    def _store(self, context: StoreContext, value: GroupMetadataValue, awaited: bool) -> int:
        self._next_store_id += 1
        self._stores[self._next_store_id] = context
        self._out.stores.append(StoreRequest(self._next_store_id, self.group_id, value, awaited))
        return self._next_store_id

    def _record(self, assignment: Mapping[str, bytes]) -> GroupMetadataValue:
        return group_metadata_value(
            protocol_type=self._protocol_type,
            generation_id=self._generation_id,
            protocol_name=self._protocol_name,
            leader_id=self._leader_id,
            current_state_timestamp_ms=self._state_timestamp_ms,
            members=self._members.values(),
            assignment=assignment,
        )

    def _answer_join(
        self,
        parked: Parked,
        member: ClassicMember,
        *,
        with_members: bool,
        skip: bool = False,
        leader_id: str | None = None,
    ) -> None:
        assert self._protocol_name is not None and self._leader_id is not None
        self._out.join_ok(
            parked,
            generation_id=self._generation_id,
            protocol_type=self._protocol_type,
            protocol_name=self._protocol_name,
            leader_id=leader_id or self._leader_id,
            member_id=member.member_id,
            members=self._members.values() if with_members else (),
            skip_assignment=skip,
        )

    # --- invariants -------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        members = self._members
        state = self._state
        assert (self._leader_id is None) == (not members), (self._leader_id, list(members))
        assert self._leader_id is None or self._leader_id in members, self._leader_id
        static = {m.group_instance_id: mid for mid, m in members.items() if m.is_static}
        assert static == self._static_members, (static, self._static_members)
        assert all(mid == m.member_id for mid, m in members.items())
        assert not set(self._pending_members) & set(members), self._pending_members
        assert self._pending_sync <= set(members), (self._pending_sync, list(members))
        assert (self._sync_deadline_ms is not None) == bool(self._pending_sync), self._pending_sync
        assert (self._join_timer is not None) == (state is _S.PREPARING_REBALANCE), state
        if state is _S.EMPTY:
            assert not members and self._protocol_name is None, (members, self._protocol_name)
        if state is _S.DEAD:
            assert not self.parked_tokens() and not self._pending_members and not self._stores
        if self._pending_sync:
            assert state in (_S.COMPLETING_REBALANCE, _S.STABLE), state
        if state in (_S.COMPLETING_REBALANCE, _S.STABLE):
            assert self._protocol_name is not None and members, self._protocol_name
            assert all(self._protocol_name in m.protocol_names for m in members.values())
        if self._assignment_store_id is not None:
            assert state is _S.COMPLETING_REBALANCE, state
        replacements = {
            c.new_member_id: c.parked
            for c in self._stores.values()
            if isinstance(c, StaticReplacementStore)
        }
        for m in members.values():
            if m.awaiting_sync is not None:
                assert state is _S.COMPLETING_REBALANCE, (state, m.member_id)
            if m.awaiting_join is not None and state is not _S.PREPARING_REBALANCE:
                # only a restarted static member waiting for its new id to be stored
                assert state is _S.STABLE and replacements.get(m.member_id) == m.awaiting_join
            if state is _S.COMPLETING_REBALANCE:
                assert m.assignment == b"", m.member_id  # until the leader's is stored
            if m.is_new and state is not _S.DEAD:
                assert m.awaiting_join is not None, m.member_id
