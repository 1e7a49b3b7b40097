"""The classic consumer group protocol for one group (the classic half of Kafka's
``GroupMetadataManager``; the group's state, Kafka's ``ClassicGroup``, is ``classic_state``),
sans-IO: no sockets, no tasks, no clock (time is ``now_ms``), no randomness of its own.
It stays one module (about 700 lines, its state, members, outcomes and records already in the
``classic_*`` modules beside it): what is left are the transitions of the one state machine
drawn below, and splitting them would scatter that diagram's edges across files.

Theory of operation
-------------------
::

                 join (new member)            all joined / rebalance timeout
    Empty ───────────────────────▶ PreparingRebalance ─────────────────▶ CompletingRebalance
      ▲ (last member gone:               ▲   (generation += 1,         │ leader's SyncGroup,
      │  generation += 1)                │    protocol chosen,         │ its assignment stored
      └──────────────────────────────────┤    JoinGroups answered)     ▼
                join, leave, expiry ─────┴────────────────────────── Stable

A rebalance gathers JoinGroups: each is *parked* until every member has rejoined (or the
rebalance timeout, the largest of the members', removes those that did not; static members stay
until their session expires).  The first rebalance of an empty group waits
``group.initial.rebalance.delay.ms`` for more members, extended by that delay whenever one
joins, up to the rebalance timeout in all (Kafka's ``InitialDelayedJoin``).  Completing the join
phase starts the next generation: a protocol every member supports is chosen by vote, the leader
(the first member to join, kept while it rejoins) gets every member's metadata, and every member
then sends SyncGroup.  The leader's SyncGroup carries the assignment; it is written to
``__consumer_offsets`` first, and only once it is stored does the group turn Stable and answer
the parked SyncGroups, so an assignment a member received survives a coordinator failover.
Members that do not send SyncGroup within the rebalance timeout are removed.

A member id is given out by the coordinator: from JoinGroup v4 a member without one gets
MEMBER_ID_REQUIRED and an id to join with (a *pending* member until it does).  A static member
(``group.instance.id``) that restarts joins without a member id; it takes over its old entry
under a new id, the old id is fenced (FENCED_INSTANCE_ID), and a Stable group does not rebalance
unless the protocol it would choose changes.  Every member must heartbeat within its session
timeout; a parked JoinGroup or SyncGroup stands in for heartbeats.

Driving it
----------
Every call takes the caller's ``token`` for the request and ``now_ms`` and returns an
:class:`Outcome`: the ``replies`` to deliver, as ``(token, response)`` pairs (the request's own
answer among them when it is not parked, and answers to earlier parked requests it released),
the group records to write (``stores``: write each to ``__consumer_offsets`` in order, then call
:meth:`ClassicGroup.on_stored` with its id and the append's error), and ``deadline_ms``, when to
call :meth:`ClassicGroup.tick` next (always later than ``now_ms``: every call first and last fires
the timers that are due).  Every parked request is answered exactly once: by a later call, by a
timer, by :meth:`ClassicGroup.on_stored`, or by :meth:`ClassicGroup.unload` when this broker
stops being the coordinator.  ``now_ms`` is wall-clock milliseconds, as Kafka's: it also stamps
the record (``current_state_timestamp``, which offset expiry of an empty group counts from).
"""

from __future__ import annotations

import random
import uuid

from broker.group.classic_member import (
    ClassicMember,
    GroupConfig,
    GroupState,
    Parked,
    Protocol,
    Token,
    select_protocol,
    supports_protocols,
)
from broker.group.classic_outcome import Outcome, Reply, Response, StoreRequest, leave_response
from broker.group.classic_records import append_error_to_response_error, members_from_value
from broker.group.classic_state import (
    UNKNOWN_MEMBER_ID,
    AssignmentStore,
    ClassicGroupState,
    EmptyStore,
    JoinTimer,
    StaticReplacementStore,
)
from kafka_protocol.coordinator.group_metadata_value import GroupMetadataValue
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
)

__all__ = ["ClassicGroup", "Outcome", "Reply", "Response", "StoreRequest"]

_MAX_TIMERS_PER_TICK = 100_000  # each firing removes or completes something; a loop is a bug
_S = GroupState


class ClassicGroup(ClassicGroupState):
    """The classic protocol's rules over one group's state (Kafka's ``GroupMetadataManager``,
    classic half)."""

    # --- the requests -----------------------------------------------------------------------------

    @classmethod
    def restore(
        cls,
        group_id: str,
        value: GroupMetadataValue,
        config: GroupConfig,
        rng: random.Random,
        now_ms: int,
    ) -> ClassicGroup:
        """A group loaded from its latest record by a new coordinator (``onGroupLoaded``):
        Stable with its members (each must heartbeat within its session timeout from now) or
        Empty; a group over ``group.max.size`` rebalances at once."""
        group = cls(group_id, config, rng, now_ms)
        group._generation_id = value.generation
        group._protocol_type = value.protocol_type or None
        # -1 (a record older than v2): unknown, and offset expiry counts from each commit
        stamp = value.current_state_timestamp
        group._state_timestamp_ms = None if stamp == -1 else stamp
        for member in members_from_value(value, now_ms):
            group._add(member)
        if group._members:
            group._state = group._previous_state = _S.STABLE
            group._protocol_name = value.protocol
            if value.leader in group._members:
                group._leader_id = value.leader
        if len(group._members) > config.max_size:
            group._begin(now_ms)
            group._prepare_rebalance()
            out = group._end()
            assert not out.replies and not out.stores, out
        group.check_invariants()
        return group

    def join(
        self,
        token: Token,
        request: JoinGroupRequest,
        api_version: int,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> Outcome:
        """JoinGroup v0-9 (``client_id`` from the request header, ``client_host`` the peer)."""
        self._begin(now_ms)
        self._join(Parked(token, api_version), request, client_id, client_host)
        return self._end()

    def sync(
        self, token: Token, request: SyncGroupRequest, api_version: int, now_ms: int
    ) -> Outcome:
        """SyncGroup v0-5."""
        self._begin(now_ms)
        self._sync(Parked(token, api_version), request)
        return self._end()

    def heartbeat(
        self, token: Token, request: HeartbeatRequest, api_version: int, now_ms: int
    ) -> Outcome:
        """Heartbeat v0-4: never parked."""
        del api_version  # every version has the same fields that matter here
        self._begin(now_ms)
        error = self._heartbeat(request)
        self._out.replies.append((token, HeartbeatResponse(error_code=error)))
        return self._end()

    def leave(
        self, token: Token, request: LeaveGroupRequest, api_version: int, now_ms: int
    ) -> Outcome:
        """LeaveGroup v0-5: one member (v0-2) or a batch, by member id or, from an admin, by
        group.instance.id alone; never parked."""
        self._begin(now_ms)
        self._out.replies.append((token, self._leave(request, api_version)))
        return self._end()

    def tick(self, now_ms: int) -> Outcome:
        """Fire every timer due at ``now_ms``: session expiries, the end of a join phase, the
        SyncGroup deadline.  (Every other call does too, before and after its own work.)"""
        self._begin(now_ms)
        return self._end()

    def on_stored(self, store_id: int, error: ErrorCode, now_ms: int) -> Outcome:
        """The append of ``StoreRequest(store_id)`` finished with ``error`` (NONE: durable)."""
        self._begin(now_ms)
        context = self._stores.pop(store_id, None)
        if context is not None and self._state is not _S.DEAD:
            error = append_error_to_response_error(error)
            if isinstance(context, AssignmentStore):
                self._on_assignment_stored(store_id, context, error)
            elif isinstance(context, StaticReplacementStore):
                self._on_static_replacement_stored(context, error)
        return self._end()

    def unload(self, now_ms: int) -> Outcome:
        """This broker is no longer the coordinator: parked requests get NOT_COORDINATOR (the
        clients find the new one) and the group is Dead."""
        self._begin(now_ms)
        for m in self._members.values():
            if m.awaiting_join is not None:
                self._out.join_error(m.awaiting_join, ErrorCode.NOT_COORDINATOR, m.member_id)
                m.awaiting_join = None
            if m.awaiting_sync is not None:
                self._out.sync_error(m.awaiting_sync, ErrorCode.NOT_COORDINATOR)
                m.awaiting_sync = None
        self._become_dead()
        return self._end()

    def delete(self, now_ms: int) -> ErrorCode:
        """DeleteGroups: only an empty group; the caller then writes the tombstones."""
        if self._state is _S.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if self._state is not _S.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        self._begin(now_ms)
        self._become_dead()
        self._end()
        return ErrorCode.NONE

    # --- JoinGroup --------------------------------------------------------------------------------

    def _join(
        self, parked: Parked, request: JoinGroupRequest, client_id: str, client_host: str
    ) -> None:
        member_id = request.member_id
        config = self.config
        if not (
            config.min_session_timeout_ms
            <= request.session_timeout_ms
            <= config.max_session_timeout_ms
        ):
            self._out.join_error(parked, ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        elif not self._accept_joining_member(member_id):
            # Kafka drops a member that rejoins once the group is full again (the last ones)
            self._pending_members.pop(member_id, None)
            if member_id in self._members:
                self._remove_member(member_id)
            self._out.join_error(parked, ErrorCode.GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID)
            self._maybe_complete_join_phase()
        elif self._state is _S.DEAD:
            self._out.join_error(parked, ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        elif not supports_protocols(
            self._state,
            self._protocol_type,
            list(self._members.values()),
            request.protocol_type,
            [p.name for p in request.protocols],
        ):
            self._out.join_error(parked, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        elif member_id == UNKNOWN_MEMBER_ID:
            self._join_new_member(parked, request, client_id, client_host)
        else:
            self._join_existing_member(parked, request, client_id, client_host)

    def _accept_joining_member(self, member_id: str) -> bool:
        """``acceptJoiningMember``: while rebalancing, the members already rejoined count (so
        the last to rejoin are turned away when the limit was lowered); otherwise the size."""
        if self._state in (_S.EMPTY, _S.DEAD):
            return True
        member = self._members.get(member_id)
        if self._state is _S.PREPARING_REBALANCE:
            awaiting = sum(m.awaiting_join is not None for m in self._members.values())
            already = member is not None and member.awaiting_join is not None
            return already or awaiting < self.config.max_size
        return member is not None or len(self._members) < self.config.max_size

    def _join_new_member(
        self, parked: Parked, request: JoinGroupRequest, client_id: str, client_host: str
    ) -> None:
        instance_id = request.group_instance_id
        new_member_id = (
            f"{instance_id or client_id}-{uuid.UUID(int=self._rng.getrandbits(128), version=4)}"
        )
        if instance_id is not None:
            old_member_id = self._static_members.get(instance_id)
            if old_member_id is not None:
                self._replace_static_member(
                    parked, request, old_member_id, new_member_id, client_id, client_host
                )
            else:
                self._add_member_and_rebalance(
                    parked, request, new_member_id, client_id, client_host
                )
        elif parked.api_version >= 4:
            # KIP-394: the member must come back with this id, so a client retrying after a
            # lost response cannot leave orphan members behind
            self._pending_members[new_member_id] = self._now_ms + request.session_timeout_ms
            self._out.join_error(parked, ErrorCode.MEMBER_ID_REQUIRED, new_member_id)
        else:
            self._add_member_and_rebalance(parked, request, new_member_id, client_id, client_host)

    def _join_existing_member(
        self, parked: Parked, request: JoinGroupRequest, client_id: str, client_host: str
    ) -> None:
        member_id = request.member_id
        if member_id in self._pending_members and request.group_instance_id is None:
            self._add_member_and_rebalance(parked, request, member_id, client_id, client_host)
            return
        error = self._validate_member(member_id, request.group_instance_id)
        if error is not None:
            self._out.join_error(parked, error, member_id)
            return
        member = self._members[member_id]
        self._refresh_heartbeat(member)
        protocols = _protocols(request)
        if self._state is _S.PREPARING_REBALANCE:
            self._update_member(member, request, parked)
            self._maybe_complete_join_phase()
        elif self._state is _S.COMPLETING_REBALANCE and member.matches(protocols):
            # it lost the JoinGroup response: the same answer again
            self._supersede_join(member)
            self._answer_join(parked, member, with_members=member_id == self._leader_id)
        elif (
            self._state is _S.STABLE and member_id != self._leader_id and member.matches(protocols)
        ):
            self._supersede_join(member)
            self._answer_join(parked, member, with_members=False)
        else:
            # changed metadata, or the leader asking for a rebalance (e.g. topics changed)
            assert self._state in (_S.COMPLETING_REBALANCE, _S.STABLE), self._state
            self._update_member(member, request, parked)
            self._prepare_rebalance()

    def _add_member_and_rebalance(
        self,
        parked: Parked,
        request: JoinGroupRequest,
        member_id: str,
        client_id: str,
        client_host: str,
    ) -> None:
        member = ClassicMember(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=_rebalance_timeout_ms(request, parked.api_version),
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=_protocols(request),
            heartbeat_deadline_ms=self._now_ms + self.config.new_member_join_timeout_ms,
            is_new=True,
            awaiting_join=parked,
        )
        if self._state is _S.PREPARING_REBALANCE and self._previous_state is _S.EMPTY:
            self._new_member_added = True  # the initial rebalance waits a while longer
        self._add(member)
        self._maybe_prepare_rebalance_or_complete_join()

    def _update_member(
        self, member: ClassicMember, request: JoinGroupRequest, parked: Parked
    ) -> None:
        self._supersede_join(member)
        member.protocols = _protocols(request)
        member.rebalance_timeout_ms = _rebalance_timeout_ms(request, parked.api_version)
        member.session_timeout_ms = request.session_timeout_ms
        member.awaiting_join = parked

    def _supersede_join(self, member: ClassicMember) -> None:
        """A member sent JoinGroup again (its client gave up on the first): the first one is
        answered now, so every parked request gets exactly one answer."""
        if member.awaiting_join is not None:
            self._out.join_error(
                member.awaiting_join, ErrorCode.REBALANCE_IN_PROGRESS, member.member_id
            )
            member.awaiting_join = None

    # --- static membership ------------------------------------------------------------------------

    def _replace_static_member(
        self,
        parked: Parked,
        request: JoinGroupRequest,
        old_member_id: str,
        new_member_id: str,
        client_id: str,
        client_host: str,
    ) -> None:
        """A known group.instance.id joins without a member id: it restarted.  It takes over
        the old entry (the old id is fenced) and, in a Stable group whose protocol would not
        change, keeps its assignment without a rebalance once the new id is stored."""
        instance_id = request.group_instance_id
        assert instance_id is not None
        previous_leader_id = self._leader_id
        member = self._swap_member_id(instance_id, old_member_id, new_member_id)
        undo = StaticReplacementStore(
            self._generation_id,
            instance_id,
            old_member_id,
            new_member_id,
            previous_leader_id,
            parked,
            member.protocols,
            member.rebalance_timeout_ms,
            member.session_timeout_ms,
            member.heartbeat_deadline_ms,
            (member.client_id, member.client_host),
        )
        member.client_id, member.client_host = client_id, client_host
        self._update_member(member, request, parked)
        self._refresh_heartbeat(member)
        if self._state is _S.STABLE:
            if self._protocol_name == select_protocol(list(self._members.values())):
                self._store(undo, self.to_record(), awaited=True)
            else:
                self._prepare_rebalance()
        elif self._state is _S.COMPLETING_REBALANCE:
            # the leader may be assigning to the old id: only a new rebalance is safe
            self._prepare_rebalance()
        else:
            assert self._state is _S.PREPARING_REBALANCE, self._state
            self._maybe_complete_join_phase()

    def _on_static_replacement_stored(self, undo: StaticReplacementStore, error: ErrorCode) -> None:
        member = self._members.get(undo.new_member_id)
        if (
            self._state is not _S.STABLE
            or self._generation_id != undo.generation_id
            or member is None
            or member.awaiting_join != undo.parked
        ):
            return  # superseded: a rebalance (which answers the JoinGroup) or another restart
        member.awaiting_join = None
        if error != ErrorCode.NONE:
            self._swap_member_id(undo.group_instance_id, undo.new_member_id, undo.old_member_id)
            member.protocols = undo.old_protocols
            member.rebalance_timeout_ms = undo.old_rebalance_timeout_ms
            member.session_timeout_ms = undo.old_session_timeout_ms
            # the old incarnation has not been heard from since: its session runs on
            member.heartbeat_deadline_ms = undo.old_heartbeat_deadline_ms
            member.client_id, member.client_host = undo.old_client
            self._out.join_error(undo.parked, error, UNKNOWN_MEMBER_ID)
        elif undo.parked.api_version >= 9:
            # KIP-814: a returning leader learns the members without reassigning (a Stable
            # group would not pass a new assignment on)
            is_leader = undo.new_member_id == self._leader_id
            self._answer_join(undo.parked, member, with_members=is_leader, skip=is_leader)
        else:
            # older clients would assign if told they lead: name the leader as it was, which
            # for a returning leader is its old id, so it only follows
            self._answer_join(
                undo.parked, member, with_members=False, leader_id=undo.previous_leader_id
            )

    # --- the join phase ---------------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self) -> None:
        if self._state in (_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY):
            self._prepare_rebalance()
        else:
            self._maybe_complete_join_phase()

    def _prepare_rebalance(self) -> None:
        if self._state is _S.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(ErrorCode.REBALANCE_IN_PROGRESS)
        self._clear_pending_sync()
        self._assignment_store_id = None
        initial = self._state is _S.EMPTY
        self._transition(_S.PREPARING_REBALANCE)
        if initial:
            delay_ms = self.config.initial_rebalance_delay_ms
            remaining_ms = max(self._rebalance_timeout_ms() - delay_ms, 0)
            self._join_timer = JoinTimer(self._now_ms + delay_ms, delay_ms, remaining_ms)
        elif self._has_all_members_joined():
            self._complete_join()
        else:
            self._join_timer = JoinTimer(self._now_ms + self._rebalance_timeout_ms())

    def _maybe_complete_join_phase(self) -> None:
        """Complete the join phase once every member (and no pending one) has rejoined; the
        initial rebalance of an empty group ends only on its timer."""
        if (
            self._state is _S.PREPARING_REBALANCE
            and self._previous_state is not _S.EMPTY
            and self._has_all_members_joined()
        ):
            self._complete_join()

    def _on_join_timer(self, timer: JoinTimer) -> None:
        if timer.initial_delay_ms is not None and self._new_member_added and timer.remaining_ms:
            self._new_member_added = False
            delay_ms = min(self.config.initial_rebalance_delay_ms, timer.remaining_ms)
            remaining_ms = max(timer.remaining_ms - timer.initial_delay_ms, 0)
            self._join_timer = JoinTimer(self._now_ms + delay_ms, delay_ms, remaining_ms)
        else:
            self._complete_join()

    def _complete_join(self) -> None:
        """``completeClassicGroupJoin``: dynamic members that did not rejoin are gone; the next
        generation starts and every parked JoinGroup is answered."""
        assert self._state is _S.PREPARING_REBALANCE, self._state
        self._join_timer = None
        self._new_member_added = False
        for m in list(self._members.values()):
            if m.awaiting_join is None and not m.is_static:
                self._remove_member(m.member_id)
        if not self._maybe_elect_new_joined_leader() and self._members:
            # only static members that have not rejoined: wait for them, or their expiry
            self._join_timer = JoinTimer(self._now_ms + max(self._rebalance_timeout_ms(), 1))
            return
        self._init_next_generation()
        if not self._members:  # now Empty
            self._store(EmptyStore(self._generation_id), self._record({}), awaited=False)
            return
        for m in self._members.values():
            m.is_new = False
            if m.awaiting_join is not None:
                self._answer_join(m.awaiting_join, m, with_members=m.member_id == self._leader_id)
                m.awaiting_join = None
                # Kafka reschedules every member here; a static member that has not rejoined
                # keeps its deadline instead, so nobody outlives a session without a word
                self._refresh_heartbeat(m)
            self._pending_sync.add(m.member_id)
        self._sync_deadline_ms = self._now_ms + self._rebalance_timeout_ms()

    def _maybe_elect_new_joined_leader(self) -> bool:
        if self._leader_id is None:
            return False
        if self._members[self._leader_id].awaiting_join is not None:
            return True
        for m in self._members.values():
            if m.awaiting_join is not None:
                self._leader_id = m.member_id
                return True
        return False

    def _init_next_generation(self) -> None:
        self._generation_id += 1
        self.join_phases_completed += 1
        for m in self._members.values():
            m.assignment = b""  # the last generation's assignment is void
        if self._members:
            self._protocol_name = select_protocol(list(self._members.values()))
            self._transition(_S.COMPLETING_REBALANCE)
        else:
            self._protocol_name = None
            self._transition(_S.EMPTY)
        self._clear_pending_sync()

    # --- SyncGroup --------------------------------------------------------------------------------

    def _sync(self, parked: Parked, request: SyncGroupRequest) -> None:
        error = self._validate_sync(request)
        if error is not None:
            self._out.sync_error(parked, error)
            return
        member = self._members[request.member_id]
        self._refresh_heartbeat(member)
        if self._state is _S.COMPLETING_REBALANCE:
            if member.awaiting_sync is not None:  # a retry: the first one is answered now
                self._out.sync_error(member.awaiting_sync, ErrorCode.REBALANCE_IN_PROGRESS)
            member.awaiting_sync = parked
            self._remove_pending_sync(member.member_id)
            if member.member_id == self._leader_id and self._assignment_store_id is None:
                given = {a.member_id: a.assignment for a in request.assignments}
                assignment = {mid: given.get(mid, b"") for mid in self._members}
                self._assignment_store_id = self._store(
                    AssignmentStore(self._generation_id, assignment),
                    self._record(assignment),
                    awaited=True,
                )
        else:
            assert self._state is _S.STABLE, self._state
            self._remove_pending_sync(member.member_id)
            self._out.sync_ok(parked, self._protocol_type, self._protocol_name, member.assignment)

    def _validate_generation(
        self, request: SyncGroupRequest | HeartbeatRequest
    ) -> ErrorCode | None:
        """What SyncGroup and Heartbeat check first: a live group, a known (unfenced) member,
        the current generation."""
        if self._state is _S.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(request.member_id, request.group_instance_id)
        if error is not None:
            return error
        if request.generation_id != self._generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return None

    def _validate_sync(self, request: SyncGroupRequest) -> ErrorCode | None:
        error = self._validate_generation(request)
        if error is not None:
            return error
        if _inconsistent(request.protocol_type, self._protocol_type) or _inconsistent(
            request.protocol_name, self._protocol_name
        ):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if self._state is _S.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return None  # an Empty group has no members: UNKNOWN_MEMBER_ID above

    def _on_assignment_stored(
        self, store_id: int, context: AssignmentStore, error: ErrorCode
    ) -> None:
        if (
            self._state is not _S.COMPLETING_REBALANCE
            or self._generation_id != context.generation_id
            or self._assignment_store_id != store_id
        ):
            return  # the group moved on; the rebalance that moved it answered the SyncGroups
        self._assignment_store_id = None
        if error != ErrorCode.NONE:
            self._reset_and_propagate_assignment_error(error)
            self._prepare_rebalance()
            return
        assert set(context.assignment) == set(self._members), (context, list(self._members))
        for m in self._members.values():
            m.assignment = context.assignment[m.member_id]
        self._propagate_assignment(ErrorCode.NONE)
        self._transition(_S.STABLE)

    def _reset_and_propagate_assignment_error(self, error: ErrorCode) -> None:
        assert self._state is _S.COMPLETING_REBALANCE, self._state
        for m in self._members.values():
            m.assignment = b""
        self._propagate_assignment(error)

    def _propagate_assignment(self, error: ErrorCode) -> None:
        for m in self._members.values():
            if m.awaiting_sync is None:
                continue
            if error == ErrorCode.NONE:
                self._out.sync_ok(
                    m.awaiting_sync, self._protocol_type, self._protocol_name, m.assignment
                )
            else:
                self._out.sync_error(m.awaiting_sync, error)
            m.awaiting_sync = None
            self._refresh_heartbeat(m)

    def _on_sync_deadline(self) -> None:
        """Members that got their JoinGroup answer but did not send SyncGroup in time."""
        self._sync_deadline_ms = None
        if self._state in (_S.COMPLETING_REBALANCE, _S.STABLE) and self._pending_sync:
            for member_id in sorted(self._pending_sync):
                self._remove_member(member_id)
            self._prepare_rebalance()

    # --- Heartbeat, LeaveGroup, expiry ------------------------------------------------------------

    def _heartbeat(self, request: HeartbeatRequest) -> ErrorCode:
        error = self._validate_generation(request)
        if error is not None:
            return error
        self._refresh_heartbeat(self._members[request.member_id])
        if self._state is _S.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _leave(self, request: LeaveGroupRequest, api_version: int) -> LeaveGroupResponse:
        if api_version < 3:
            identities = [LeaveGroupRequest.MemberIdentity(member_id=request.member_id)]
        else:
            identities = request.members
        if self._state is _S.DEAD:
            return LeaveGroupResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        results = []
        left = False
        for identity in identities:
            error = self._leave_one(identity.member_id, identity.group_instance_id)
            left = left or error == ErrorCode.NONE
            results.append(
                LeaveGroupResponse.MemberResponse(
                    member_id=identity.member_id,
                    group_instance_id=identity.group_instance_id,
                    error_code=error,
                )
            )
        if left:
            self._after_removal()
        return leave_response(api_version, results)

    def _leave_one(self, member_id: str, instance_id: str | None) -> ErrorCode:
        if member_id == UNKNOWN_MEMBER_ID:
            # an admin removes a static member by its instance id alone
            current = self._static_members.get(instance_id) if instance_id is not None else None
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            self._remove_member(current)
            return ErrorCode.NONE
        if member_id in self._pending_members:
            del self._pending_members[member_id]
            return ErrorCode.NONE
        error = self._validate_member(member_id, instance_id)
        if error is not None:
            return error
        self._remove_member(member_id)
        return ErrorCode.NONE

    def _after_removal(self) -> None:
        if self._state in (_S.STABLE, _S.COMPLETING_REBALANCE):
            self._prepare_rebalance()
        else:
            self._maybe_complete_join_phase()

    def _fire_due_timers(self) -> None:
        for _ in range(_MAX_TIMERS_PER_TICK):
            due = min((t for t in self._timers() if t[0] <= self._now_ms), default=None)
            if due is None:
                return
            self._fire(due[2], due[3])
        raise AssertionError(f"group {self.group_id}: timers keep firing at {self._now_ms}")

    def _fire(self, kind: str, member_id: str) -> None:
        if kind == "pending":
            del self._pending_members[member_id]
            self._maybe_complete_join_phase()
        elif kind == "session":
            assert self._members[member_id].heartbeat_expired(self._now_ms)
            self._remove_member(member_id)
            self._after_removal()
        elif kind == "sync":
            self._on_sync_deadline()
        else:
            assert self._join_timer is not None
            self._on_join_timer(self._join_timer)


def _protocols(request: JoinGroupRequest) -> tuple[Protocol, ...]:
    return tuple((p.name, p.metadata) for p in request.protocols)


def _rebalance_timeout_ms(request: JoinGroupRequest, api_version: int) -> int:
    """JoinGroup v0 has no rebalance timeout: the session timeout serves (as in Kafka)."""
    if api_version == 0 or request.rebalance_timeout_ms < 0:
        return request.session_timeout_ms
    return request.rebalance_timeout_ms


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
