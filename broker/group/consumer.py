"""A consumer group of the KIP-848 protocol (Kafka's ``ConsumerGroup`` and the consumer half of
``GroupMetadataManager``), sans-IO: no sockets, no tasks, no clock (time is ``now_ms``).

Theory of operation
-------------------
Members heartbeat (ConsumerGroupHeartbeat); the coordinator owns the assignment::

    heartbeat ─▶ 1. member joins / updates its subscription ─▶ group epoch + 1 if the
                    subscriptions or the subscribed topics' partitions changed
                 2. group epoch > assignment epoch ─▶ new target assignment by the group's
                    assignor (uniform, range), assignment epoch = group epoch
                 3. the member's current assignment reconciles one step towards its target
                    (broker/group/consumer_member.py: revoke first, then assign what is free)
                 4. answer: member epoch, heartbeat interval, the assignment if it changed

A member that does not heartbeat within the session timeout is removed, and so is one that
does not revoke partitions within its rebalance timeout; removal (and leaving: member epoch
-1) bumps the group epoch, so the next heartbeat computes a new target for the others.

Group state (Kafka's ``ConsumerGroupState``): Empty without members; Assigning while the group
epoch is ahead of the assignment epoch; Reconciling while some member is not at the assignment
epoch or not STABLE; else Stable.

Every change is a list of records (``consumer_records``) the caller appends to
``__consumer_offsets``; :meth:`ConsumerGroup.restore` rebuilds the group from them.  The state
changes before the append: an append that fails leaves memory ahead of the log (Kafka reverts
its timeline instead; here the caller answers the error and a failover reloads the log).

Invariant (checked after every change, crash-stop if broken): no partition is owned (assigned or
pending revocation) by two members.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass

from broker.fatal import fatal
from broker.group.consumer_assignors import ASSIGNORS, UNIFORM, MemberSubscription
from broker.group.consumer_heartbeat import (
    HeartbeatError,
    owned_partitions,
    response_assignment,
)
from broker.group.consumer_member import (
    EMPTY,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerMember,
    CurrentAssignment,
    MemberState,
    TopicId,
    reconcile,
)
from broker.group.consumer_records import (
    CURRENT_ASSIGNMENT,
    MEMBER_METADATA,
    METADATA,
    PARTITION_METADATA,
    TARGET_MEMBER,
    TARGET_METADATA,
    Record,
    StoredConsumerGroup,
    assignment_of,
    current_value,
    encode,
    partition_metadata_value,
    target_value,
)
from kafka_protocol.coordinator import (
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ConsumerGroupHeartbeatRequest as Heartbeat
from kafka_protocol.messages import ConsumerGroupHeartbeatResponse as HeartbeatResponse

OFFSET_COMMIT_MEMBER_EPOCH_VERSION = 9
TopicLookup = Callable[[str], tuple[TopicId, int] | None]  # name -> (id, partition count)


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """The broker's ``group.consumer.*`` settings, Kafka's names and defaults."""

    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    assignors: tuple[str, ...] = (UNIFORM, "range")  # group.consumer.assignors (short names)

    def __post_init__(self) -> None:
        assert self.session_timeout_ms > 0 and self.heartbeat_interval_ms > 0, self
        assert self.assignors and all(a in ASSIGNORS for a in self.assignors), self


class ConsumerGroup:
    def __init__(self, group_id: str, config: ConsumerGroupConfig) -> None:
        self.group_id = group_id
        self.config = config
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.targets: dict[str, Assignment] = {}
        # subscribed topics as last computed: name -> (topic id, partition count)
        self.subscription: dict[str, tuple[TopicId, int]] = {}
        self.dead = False

    # --- state --------------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.current.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owner_epochs(self) -> dict[tuple[TopicId, int], int]:
        """Each owned partition -> the epoch of its owner (Kafka's ``currentPartitionEpoch``)."""
        epochs: dict[tuple[TopicId, int], int] = {}
        for m in self.members.values():
            for tp in m.current.owned():
                if tp in epochs:
                    fatal(
                        "consumer-group-single-owner",
                        "a partition is owned by two members",
                        group=self.group_id,
                        partition=tp,
                    )
                epochs[tp] = m.member_epoch
        return epochs

    def preferred_assignor(self) -> str:
        """The most popular server assignor of the members, else the default (the first of
        group.consumer.assignors): Kafka's ``computePreferredServerAssignor``."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor is not None:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return self.config.assignors[0]
        return max(sorted(votes), key=lambda a: votes[a])

    def next_deadline_ms(self) -> int | None:
        deadlines = [
            d
            for m in self.members.values()
            for d in (m.session_deadline_ms, m.rebalance_deadline_ms)
            if d is not None
        ]
        return min(deadlines, default=None)

    # --- heartbeat ----------------------------------------------------------------------------

    def heartbeat(
        self,
        req: Heartbeat,
        client_id: str,
        client_host: str,
        now_ms: int,
        topics: TopicLookup,
        new_member_id: str,
    ) -> tuple[HeartbeatResponse, list[Record]]:
        """One ConsumerGroupHeartbeat (validated).  Raises :class:`HeartbeatError` with nothing
        changed when refused.  ``new_member_id``: the id given to a v0 member without one."""
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(req)
        records: list[Record] = []
        member_id = req.member_id or new_member_id
        old = self.members.get(member_id)
        static = self._static_member(req.instance_id)
        replaced = None
        if req.member_epoch == 0:
            if static is not None and static.member_id != member_id:
                if static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                    raise HeartbeatError(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"Static member {member_id} with instance id {req.instance_id} cannot "
                        f"join the group because the instance id is owned by {static.member_id}.",
                    )
                replaced = static
            elif old is None and len(self.members) >= self.config.max_size:
                raise HeartbeatError(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    "The consumer group has reached its maximum capacity of "
                    f"{self.config.max_size} members.",
                )
        else:
            if static is not None and static.member_id != member_id:
                raise HeartbeatError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {req.instance_id} was fenced "
                    f"by member {static.member_id}.",
                )
            if old is None:
                raise HeartbeatError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {member_id} is not a member of group {self.group_id}.",
                )
            self._check_epoch(old, req)
        if replaced is not None:  # from here on nothing is refused
            old = self._replace_static(replaced, member_id, records)
        member = ConsumerMember(member_id) if old is None else old
        subscription_before = member.subscription()
        before_meta = self._member_metadata(member) if old is not None else None
        if replaced is not None:
            before_meta = None  # the new id's records are all written
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.server_assignor is not None:
            member.server_assignor = req.server_assignor
        if req.subscribed_topic_names is not None:
            member.subscribed_topic_names = tuple(sorted(set(req.subscribed_topic_names)))
        member.client_id, member.client_host = client_id, client_host
        self.members[member_id] = member
        bump = old is None or subscription_before != member.subscription()
        metadata = self._member_metadata(member)
        if metadata != before_meta:
            records.append(encode(MEMBER_METADATA, self.group_id, member_id, metadata))
        bump = self._refresh_subscription(topics, records) or bump
        if bump:
            self._bump(records)
        if self.group_epoch > self.assignment_epoch:
            self._assign(records)
        previous_assigned = member.current.assigned if old is not None else None
        self._reconcile(member, owned_partitions(req), now_ms, records)
        member.session_deadline_ms = now_ms + self.config.session_timeout_ms
        self.owner_epochs()  # the invariant
        response = HeartbeatResponse(
            member_id=member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
        )
        full = req.member_epoch == 0 or (
            req.rebalance_timeout_ms != -1
            and req.subscribed_topic_names is not None
            and req.topic_partitions is not None
        )
        if full or previous_assigned != member.current.assigned:
            response.assignment = response_assignment(member.current.assigned)
        return response, records

    def _static_member(self, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def _replace_static(
        self, old: ConsumerMember, member_id: str, records: list[Record]
    ) -> ConsumerMember:
        """A static member that left with epoch -2 rejoins under a new member id: the new id
        takes its subscription and assignment at epoch 0, the old id's records go (Kafka's
        ``replaceMember``); the group epoch is not bumped, so nobody else rebalances."""
        del self.members[old.member_id]
        target = self.targets.pop(old.member_id, EMPTY)
        self.targets[member_id] = target
        current = dataclasses.replace(old.current, member_epoch=0, previous_member_epoch=0)
        new = dataclasses.replace(old, member_id=member_id, current=current)
        self.members[member_id] = new
        records += [
            encode(CURRENT_ASSIGNMENT, self.group_id, old.member_id, None),
            encode(TARGET_MEMBER, self.group_id, old.member_id, None),
            encode(MEMBER_METADATA, self.group_id, old.member_id, None),
            encode(TARGET_MEMBER, self.group_id, member_id, target_value(target)),
            encode(CURRENT_ASSIGNMENT, self.group_id, member_id, _current(current)),
        ]
        return new

    def _check_epoch(self, member: ConsumerMember, req: Heartbeat) -> None:
        """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid``."""
        received, known = req.member_epoch, member.member_epoch
        if received > known:
            raise HeartbeatError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({received}) than the "
                f"one known by the group coordinator ({known}). The member must abandon all its "
                "partitions and rejoin.",
            )
        if received < known:
            owned = owned_partitions(req)
            subset = owned is not None and all(
                ps <= member.current.assigned.get(t, frozenset()) for t, ps in owned.items()
            )
            if received != member.current.previous_member_epoch or not subset:
                raise HeartbeatError(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The consumer group member has a smaller member epoch ({received}) than "
                    f"the one known by the group coordinator ({known}). The member must abandon "
                    "all its partitions and rejoin.",
                )

    def _member_metadata(self, m: ConsumerMember) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=None,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            server_assignor=m.server_assignor,
            classic_member_metadata=None,
        )

    def _refresh_subscription(self, topics: TopicLookup, records: list[Record]) -> bool:
        """Recompute the subscribed topics' metadata; True (and a record) if it changed."""
        names = {t for m in self.members.values() for t in m.subscribed_topic_names}
        found = {n: meta for n in sorted(names) if (meta := topics(n)) is not None}
        if found == self.subscription:
            return False
        self.subscription = found
        records.append(
            encode(PARTITION_METADATA, self.group_id, None, partition_metadata_value(found))
        )
        return True

    def _bump(self, records: list[Record]) -> None:
        self.group_epoch += 1
        records.append(
            encode(
                METADATA, self.group_id, None, ConsumerGroupMetadataValue(epoch=self.group_epoch)
            )
        )

    def _assign(self, records: list[Record]) -> None:
        """A new target assignment for the group epoch (Kafka's ``TargetAssignmentBuilder``):
        only the members whose target changed get a record, then the assignment epoch."""
        subscriptions = {
            m.member_id: MemberSubscription(
                frozenset(
                    self.subscription[t][0]
                    for t in m.subscribed_topic_names
                    if t in self.subscription
                ),
                self.targets.get(m.member_id, EMPTY),
            )
            for m in self.members.values()
        }
        counts = {tid: n for tid, n in self.subscription.values()}
        new = ASSIGNORS[self.preferred_assignor()](subscriptions, counts)
        for member_id, assignment in sorted(new.items()):
            if self.targets.get(member_id, EMPTY) != assignment:
                records.append(
                    encode(TARGET_MEMBER, self.group_id, member_id, target_value(assignment))
                )
            self.targets[member_id] = assignment
        self.assignment_epoch = self.group_epoch
        records.append(
            encode(
                TARGET_METADATA,
                self.group_id,
                None,
                ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=self.assignment_epoch),
            )
        )

    def _reconcile(
        self, member: ConsumerMember, owned: Assignment | None, now_ms: int, records: list[Record]
    ) -> None:
        before = member.current
        epochs = self.owner_epochs()
        after = reconcile(
            before,
            self.assignment_epoch,
            self.targets.get(member.member_id, EMPTY),
            owned,
            lambda t, p: epochs.get((t, p), -1),
        )
        if after == before:
            return
        member.current = after
        records.append(encode(CURRENT_ASSIGNMENT, self.group_id, member.member_id, _current(after)))
        if after.state is MemberState.UNREVOKED_PARTITIONS:
            if before.state is not MemberState.UNREVOKED_PARTITIONS or (
                before.member_epoch != after.member_epoch
            ):
                member.rebalance_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
        else:
            member.rebalance_deadline_ms = None

    # --- leaving and expiry -------------------------------------------------------------------

    def _leave(self, req: Heartbeat) -> tuple[HeartbeatResponse, list[Record]]:
        """Epoch -1: the member leaves.  A static member (instance id) leaving with -2 only
        steps out: it keeps its partitions (nobody else gets them) until its session expires
        or its instance rejoins (Kafka's ``consumerGroupStaticMemberGroupLeave``)."""
        if req.instance_id is None:
            member = self.members.get(req.member_id)
        else:
            member = self._static_member(req.instance_id)
            if member is not None and member.member_id != req.member_id:
                raise HeartbeatError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"Static member {req.member_id} with instance id {req.instance_id} was "
                    f"fenced by member {member.member_id}.",
                )
        if member is None:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {req.member_id} is not a member of group {self.group_id}.",
            )
        response = HeartbeatResponse(member_id=req.member_id, member_epoch=req.member_epoch)
        if req.instance_id is not None and req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            member.current = dataclasses.replace(
                member.current, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={}
            )
            member.rebalance_deadline_ms = None
            return response, [
                encode(
                    CURRENT_ASSIGNMENT, self.group_id, member.member_id, _current(member.current)
                )
            ]
        return response, self.remove_member(member.member_id)

    def remove_member(self, member_id: str, topics: TopicLookup | None = None) -> list[Record]:
        """The member goes, its partitions are free at once, the group epoch is bumped
        (Kafka's ``consumerGroupFenceMember``)."""
        del self.members[member_id]
        self.targets.pop(member_id, None)
        records = [
            encode(CURRENT_ASSIGNMENT, self.group_id, member_id, None),
            encode(TARGET_MEMBER, self.group_id, member_id, None),
            encode(MEMBER_METADATA, self.group_id, member_id, None),
        ]
        names = {t for m in self.members.values() for t in m.subscribed_topic_names}
        kept = {n: meta for n, meta in self.subscription.items() if n in names}
        if kept != self.subscription:
            self.subscription = kept
            records.append(
                encode(PARTITION_METADATA, self.group_id, None, partition_metadata_value(kept))
            )
        self._bump(records)
        return records

    def tick(self, now_ms: int) -> list[Record]:
        """Remove the members whose session expired or who did not revoke in time."""
        records: list[Record] = []
        for member_id, m in list(self.members.items()):
            session_over = m.session_deadline_ms is not None and m.session_deadline_ms <= now_ms
            revocation_over = (
                m.rebalance_deadline_ms is not None and m.rebalance_deadline_ms <= now_ms
            )
            if session_over or revocation_over:
                records += self.remove_member(member_id)
        return records

    # --- offsets and admin --------------------------------------------------------------------

    def validate_offset_commit(
        self, member_id: str, member_epoch: int, api_version: int
    ) -> ErrorCode | None:
        """Kafka's ``ConsumerGroup.validateOffsetCommit``: anyone may commit to an empty
        group without an epoch; a member commits with its current epoch, in OffsetCommit v9+
        (UNSUPPORTED_VERSION before: only v9 carries a member epoch)."""
        if member_epoch < 0 and not self.members:
            return None
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if api_version < OFFSET_COMMIT_MEMBER_EPOCH_VERSION:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return None

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        if member_id is None and member_epoch < 0:
            return None
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return None

    def delete(self) -> tuple[ErrorCode, list[Record]]:
        """DeleteGroups: only an Empty group; its tombstones."""
        if self.members:
            return ErrorCode.NON_EMPTY_GROUP, []
        self.dead = True
        return ErrorCode.NONE, [
            encode(TARGET_METADATA, self.group_id, None, None),
            encode(PARTITION_METADATA, self.group_id, None, None),
            encode(METADATA, self.group_id, None, None),
        ]

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    # --- restoring ----------------------------------------------------------------------------

    @classmethod
    def restore(
        cls, group_id: str, stored: StoredConsumerGroup, config: ConsumerGroupConfig, now_ms: int
    ) -> ConsumerGroup:
        """The group as its records say; every member gets a fresh session (Kafka's
        ``onLoaded``)."""
        group = cls(group_id, config)
        group.group_epoch = stored.epoch.epoch if stored.epoch is not None else 0
        if stored.assignment_epoch is not None:
            group.assignment_epoch = stored.assignment_epoch.assignment_epoch
        if stored.partition_metadata is not None:
            group.subscription = {
                t.topic_name: (t.topic_id, t.num_partitions)
                for t in stored.partition_metadata.topics
            }
        for member_id, meta in stored.members.items():
            m = ConsumerMember(
                member_id,
                instance_id=meta.instance_id,
                rack_id=meta.rack_id,
                client_id=meta.client_id,
                client_host=meta.client_host,
                subscribed_topic_names=tuple(meta.subscribed_topic_names),
                rebalance_timeout_ms=meta.rebalance_timeout_ms,
                server_assignor=meta.server_assignor,
                session_deadline_ms=now_ms + config.session_timeout_ms,
            )
            c = stored.current.get(member_id)
            if c is not None:
                m.current = CurrentAssignment(
                    c.member_epoch,
                    c.previous_member_epoch,
                    MemberState(c.state)
                    if c.state in MemberState._value2member_map_
                    else MemberState.UNKNOWN,
                    assignment_of(c.assigned_partitions),
                    assignment_of(c.partitions_pending_revocation),
                )
                if m.current.state is MemberState.UNREVOKED_PARTITIONS:
                    m.rebalance_deadline_ms = now_ms + max(m.rebalance_timeout_ms, 0)
            group.members[member_id] = m
        for member_id, target in stored.targets.items():
            group.targets[member_id] = assignment_of(target.topic_partitions)
        group.owner_epochs()
        return group


def _current(c: CurrentAssignment) -> object:
    return current_value(
        c.member_epoch, c.previous_member_epoch, int(c.state), c.assigned, c.pending_revocation
    )
