"""Driving the classic groups of the partitions this broker coordinates (the asyncio side of
``broker/group/classic.py``).

Theory of operation
-------------------
Each loaded ``__consumer_offsets`` partition holds its groups as :class:`ClassicGroup` state
machines (restored from their last GroupMetadata record on load).  A request becomes one call
on its group with a fresh *token*; the call returns an :class:`Outcome`, which this module
carries out:

* ``replies``: each token's future gets its response (the request's own, or a parked
  request's that this call released);
* ``stores``: group records, appended one after another per group (a chain of tasks); each
  append's result goes back through ``on_stored``, whose outcome is carried out in turn;
* ``deadline_ms``: one timer per group calls ``tick`` then.

Unloading a partition (leadership lost) unloads its groups: parked requests are answered
NOT_COORDINATOR.  OffsetCommit is checked against the group's membership here, with Kafka's
rules (``validateOffsetCommit``), and so is when a group's offsets may expire
(``offset_expiry_condition``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.coordinator.offsets import ExpiryCondition
from broker.coordinator.owned import OwnedPartition, OwnedPartitions
from broker.coordinator.records import encode_group
from broker.group.classic import ClassicGroup, Outcome, Response, StoreRequest
from broker.group.classic_member import GroupConfig, GroupState
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.messages import ConsumerProtocolSubscription

log = logging.getLogger("broker.coordinator")
GroupCall = Callable[[ClassicGroup, int, int], Outcome]  # (group, token, now_ms)


@dataclass(slots=True)
class _Driven:
    """One group and what carries out its outcomes."""

    group: ClassicGroup
    owned: OwnedPartition
    timer: asyncio.TimerHandle | None = None
    stores: asyncio.Task[None] | None = None  # the last append of the chain
    pending: list[StoreRequest] = field(default_factory=list)


def subscription_topics(metadata: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription (int16 version, then the body); None if
    the bytes are not one."""
    if len(metadata) < 2:
        return None
    version = min(int.from_bytes(metadata[:2], "big", signed=True), 3)
    try:
        return list(ConsumerProtocolSubscription.decode(memoryview(metadata)[2:], version).topics)
    except (ProtocolError, ValueError):
        return None


def group_subscriptions(group: ClassicGroup) -> list[list[str] | None]:
    """Each member's subscribed topics under the group's protocol (None: undecodable)."""
    if group.protocol_type != "consumer" or group.protocol_name is None:
        return []
    subscriptions = []
    for member in group.members.values():
        # during a rebalance a member may not (yet) support the chosen protocol
        metadata = dict(member.protocols).get(group.protocol_name)
        if metadata is not None:
            subscriptions.append(subscription_topics(metadata))
    return subscriptions


def offset_expiry_condition(group: ClassicGroup | None) -> ExpiryCondition | None:
    """Kafka's ``ClassicGroup.offsetExpirationCondition`` (``None``: nothing expires now).

    A simple consumer's offsets (no group, or one without a protocol type) expire from their
    commit; an empty group's from when it became empty (from each commit if that time is
    unknown); a Stable consumer group's only for topics no member subscribes to, and not at
    all when a subscription does not decode; a group that is rebalancing keeps them all."""
    if group is None or group.protocol_type is None:
        return ExpiryCondition()
    if group.state is GroupState.EMPTY:
        return ExpiryCondition(since_ms=group.current_state_timestamp_ms)
    if group.state is GroupState.STABLE and group.protocol_type == "consumer":
        subscriptions = group_subscriptions(group)
        if None not in subscriptions:
            return ExpiryCondition(subscribed=frozenset(t for s in subscriptions for t in s or ()))
    return None


class ClassicGroups:
    def __init__(self, coordinator: OwnedPartitions, config: GroupConfig) -> None:
        self.coordinator = coordinator
        self.config = config
        self.rng = random.Random()
        self.groups: dict[str, _Driven] = {}
        self._tokens = itertools.count()
        self._waiting: dict[int, asyncio.Future[Response]] = {}
        # whether a group id is a consumer group of KIP-848 (set by the runtime)
        self.is_consumer_group: Callable[[str], bool] = lambda group_id: False

    # --- partitions ---------------------------------------------------------------------------

    def on_loaded(self, owned: OwnedPartition) -> None:
        now = self.coordinator.clock_ms()
        for group_id, value in owned.groups.items():
            group = ClassicGroup.restore(group_id, value, self.config, self.rng, now)
            driven = self.groups[group_id] = _Driven(group, owned)
            self._schedule(driven, group.next_deadline_ms())

    def on_unloaded(self, owned: OwnedPartition) -> None:
        now = self.coordinator.clock_ms()
        for group_id, driven in list(self.groups.items()):
            if driven.owned is owned:
                del self.groups[group_id]
                if driven.timer is not None:
                    driven.timer.cancel()
                self._carry_out(driven, driven.group.unload(now))

    # --- requests -----------------------------------------------------------------------------

    def get(self, group_id: str) -> ClassicGroup | ErrorCode:
        """A group this broker coordinates (or why not); GROUP_ID_NOT_FOUND if there is none."""
        owned = self.coordinator.owned_for(group_id)
        if isinstance(owned, ErrorCode):
            return owned
        driven = self.groups.get(group_id)
        return driven.group if driven is not None else ErrorCode.GROUP_ID_NOT_FOUND

    async def call(self, group_id: str, create: bool, call: GroupCall) -> Response | ErrorCode:
        """Run ``call`` on the group (created if ``create``) and wait for its answer."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        owned = self.coordinator.owned_for(group_id)
        if isinstance(owned, ErrorCode):
            return owned
        if self.is_consumer_group(group_id):
            # a new member's JoinGroup: its protocol is not the group's; the others name a
            # classic group that does not exist (Kafka's "is not a classic group")
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL if create else ErrorCode.GROUP_ID_NOT_FOUND
        driven = self.groups.get(group_id)
        now = self.coordinator.clock_ms()
        if driven is None or driven.group.state is GroupState.DEAD:
            if not create:
                return ErrorCode.UNKNOWN_MEMBER_ID
            group = ClassicGroup(group_id, self.config, self.rng, now)
            driven = self.groups[group_id] = _Driven(group, owned)
        token = next(self._tokens)
        answer: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._waiting[token] = answer
        self._carry_out(driven, call(driven.group, token, now))
        try:
            return await answer
        finally:
            self._waiting.pop(token, None)

    def _carry_out(self, driven: _Driven, outcome: Outcome) -> None:
        for token, response in outcome.replies:
            answer = self._waiting.pop(token, None) if isinstance(token, int) else None
            if answer is not None and not answer.done():
                answer.set_result(response)
        if outcome.stores:
            driven.pending.extend(outcome.stores)
            if driven.stores is None or driven.stores.done():
                driven.stores = asyncio.get_running_loop().create_task(self._store(driven))
        if self.groups.get(driven.group.group_id) is driven:
            self._schedule(driven, driven.group.next_deadline_ms())

    async def _store(self, driven: _Driven) -> None:
        """Append the group's records in order; each result goes back to the group."""
        while driven.pending:
            store = driven.pending.pop(0)
            error = await self.coordinator.append(
                driven.owned, [encode_group(store.group_id, store.value)]
            )
            if error is not ErrorCode.NONE:
                level = logging.WARNING if store.awaited else logging.INFO
                log.log(level, "storing group %s failed: %s", store.group_id, error.name)
            outcome = driven.group.on_stored(store.store_id, error, self.coordinator.clock_ms())
            self._carry_out(driven, outcome)

    def _schedule(self, driven: _Driven, deadline_ms: int | None) -> None:
        if driven.timer is not None:
            driven.timer.cancel()
            driven.timer = None
        if deadline_ms is None:
            return
        delay_s = max(0, deadline_ms - self.coordinator.clock_ms()) / 1000
        driven.timer = asyncio.get_running_loop().call_later(delay_s, self._tick, driven)

    def _tick(self, driven: _Driven) -> None:
        driven.timer = None
        if self.groups.get(driven.group.group_id) is driven:
            self._carry_out(driven, driven.group.tick(self.coordinator.clock_ms()))

    # --- commits and admin --------------------------------------------------------------------

    def check_commit(
        self, group_id: str, member_id: str, generation: int, instance_id: str | None
    ) -> ErrorCode | None:
        """Kafka's ``validateOffsetCommit`` for the classic protocol."""
        driven = self.groups.get(group_id)
        group = driven.group if driven is not None else None
        if group is None or group.state is GroupState.DEAD:
            if generation < 0 and not member_id:
                return None  # a simple consumer (assign(), no group membership)
            return (
                ErrorCode.UNKNOWN_MEMBER_ID
                if group is None
                else ErrorCode.COORDINATOR_NOT_AVAILABLE
            )
        if generation < 0 and not member_id and group.state is GroupState.EMPTY:
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if instance_id is not None and member.group_instance_id != instance_id:
            return ErrorCode.FENCED_INSTANCE_ID
        if generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return None

    def check_txn_commit(
        self, group_id: str, member_id: str, generation: int, instance_id: str | None
    ) -> ErrorCode | None:
        """Kafka's ``validateTransactionalOffsetCommit``: a group that does not exist takes
        commits only without a generation (a producer that is no group member)."""
        driven = self.groups.get(group_id)
        if driven is None:
            return None if generation < 0 else ErrorCode.ILLEGAL_GENERATION
        return driven.group.validate_txn_offset_commit(member_id, instance_id, generation)

    def loaded_groups(self) -> list[tuple[str, ClassicGroup]]:
        return [
            (g, d.group) for g, d in self.groups.items() if d.group.state is not GroupState.DEAD
        ]

    def subscribed_topics(self, group_id: str) -> set[str]:
        """The topics a consumer group's members subscribe to (their ConsumerProtocol
        subscriptions; a member whose metadata does not decode counts for nothing)."""
        driven = self.groups.get(group_id)
        if driven is None:
            return set()
        return {t for topics in group_subscriptions(driven.group) for t in topics or ()}

    def expiry_condition(self, group_id: str) -> ExpiryCondition | None:
        driven = self.groups.get(group_id)
        return offset_expiry_condition(driven.group if driven is not None else None)

    def empty_groups(self, owned: OwnedPartition) -> list[str]:
        """The Empty groups of a partition (Kafka deletes those left without offsets)."""
        return [g for g, d in self.groups.items() if d.owned is owned and d.group.is_empty]

    def delete(self, group_id: str) -> tuple[ErrorCode, OwnedPartition | None]:
        """DeleteGroups' first half: the group goes Dead if it is empty; the caller then
        writes the tombstones (its record and its offsets)."""
        owned = self.coordinator.owned_for(group_id)
        if isinstance(owned, ErrorCode):
            return owned, None
        driven = self.groups.get(group_id)
        if driven is None:
            has_offsets = owned.offsets.has_offsets(group_id)
            return (ErrorCode.NONE if has_offsets else ErrorCode.GROUP_ID_NOT_FOUND), owned
        error = driven.group.delete(self.coordinator.clock_ms())
        if error is ErrorCode.NONE:
            del self.groups[group_id]
            if driven.timer is not None:
                driven.timer.cancel()
        return error, owned
