"""A member of a consumer group (KIP-848) and its reconciliation, sans-IO (Kafka's
``ConsumerGroupMember``, ``MemberState`` and ``CurrentAssignmentBuilder``).

Theory of operation
-------------------
The group coordinator computes a *target assignment* for every group epoch; each member moves
towards its share of it on its own, one heartbeat at a time, and never takes a partition that
another member still owns.  A member's *current assignment* is:

* ``member_epoch`` (and the ``previous_member_epoch`` it came from), the epoch the member is at;
* ``assigned``: the partitions it owns;
* ``pending_revocation``: partitions it owned that the target took away; it still owns them
  until a heartbeat no longer lists them (the client has stopped consuming them);
* ``state``: STABLE (at its target), UNREVOKED_PARTITIONS (waiting for a revocation),
  UNRELEASED_PARTITIONS (at the target epoch, but some target partitions are still owned by
  others: they are given to it once released).

``reconcile`` is the step (Kafka's ``CurrentAssignmentBuilder.build``)::

    next = assigned & target            revoke = assigned - target
    add  = target - assigned - {partitions some member still owns}

    revoke non-empty and still owned ─▶ UNREVOKED_PARTITIONS (epoch unchanged,
                                         assigned = next, pending_revocation = revoke)
    otherwise                       ─▶ epoch = target epoch, assigned = next | add,
                                         UNRELEASED_PARTITIONS if some partition was held
                                         back, else STABLE

Revocation always comes first, so no partition is ever owned (assigned or pending
revocation) by two members at once: the invariant the group checks after every change and
that ``tests/unit/test_consumer_group_reconciliation.py`` drives with hypothesis.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

TopicId = uuid.UUID
Assignment = Mapping[TopicId, frozenset[int]]
EMPTY: Assignment = {}
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.IntEnum):
    """Kafka's ``MemberState``; the values are those ConsumerGroupCurrentMemberAssignmentValue
    stores."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


def normalized(assignment: Mapping[TopicId, Iterable[int]]) -> dict[TopicId, frozenset[int]]:
    """The assignment without empty topics, each topic's partitions a frozenset."""
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def partitions_of(assignment: Assignment) -> set[tuple[TopicId, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    def owned(self) -> set[tuple[TopicId, int]]:
        """What the member may still be consuming: assigned or pending revocation."""
        return partitions_of(self.assigned) | partitions_of(self.pending_revocation)


def owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member's reported partitions include any of ``partitions``; a member that
    reported nothing (``None``: unchanged since its last heartbeat) is taken to still own
    them (Kafka's ``ownsRevokedPartitions``)."""
    if owned is None:
        return True
    return any(partitions.get(t, frozenset()) & ps for t, ps in owned.items())


def reconcile(
    current: CurrentAssignment,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owner_epoch: Callable[[TopicId, int], int],
) -> CurrentAssignment:
    """One reconciliation step (see the module docstring).  ``owned``: the partitions the
    member's heartbeat reported (None: not reported); ``owner_epoch(topic, partition)``: the
    epoch of the member that owns the partition, -1 if none does."""
    if current.state is MemberState.STABLE:
        if current.member_epoch == target_epoch:
            return current
        return _next(current, current.member_epoch, target_epoch, target, owned, owner_epoch)
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, current.pending_revocation):
            return current
        return _next(current, current.member_epoch + 1, target_epoch, target, owned, owner_epoch)
    if current.state is MemberState.UNRELEASED_PARTITIONS:
        return _next(current, current.member_epoch, target_epoch, target, owned, owner_epoch)
    # UNKNOWN: only a record from a newer Kafka could say so; start over from nothing
    return _next(current, target_epoch, target_epoch, target, owned, owner_epoch)


def _with_epoch(
    current: CurrentAssignment,
    epoch: int,
    state: MemberState,
    assigned: Assignment,
    pending_revocation: Assignment,
) -> CurrentAssignment:
    """Kafka's ``updateMemberEpoch``: the epoch the member was at becomes its previous one."""
    return CurrentAssignment(epoch, current.member_epoch, state, assigned, pending_revocation)


def _next(
    current: CurrentAssignment,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owner_epoch: Callable[[TopicId, int], int],
) -> CurrentAssignment:
    """Kafka's ``computeNextAssignment``."""
    held_back = False
    assigned: dict[TopicId, set[int]] = {}
    revoke: dict[TopicId, set[int]] = {}
    add: dict[TopicId, set[int]] = {}
    for topic in set(target) | set(current.assigned):
        wanted = target.get(topic, frozenset())
        have = current.assigned.get(topic, frozenset())
        assigned[topic] = set(have & wanted)
        revoke[topic] = set(have - wanted)
        free = {p for p in wanted - have if owner_epoch(topic, p) == -1}
        held_back = held_back or len(free) < len(wanted - have)
        add[topic] = free
    kept, revoking, adding = normalized(assigned), normalized(revoke), normalized(add)
    if revoking and owns_any(owned, revoking):
        return _with_epoch(
            current,
            member_epoch,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=kept,
            pending_revocation=revoking,
        )
    merged = normalized(
        {t: kept.get(t, frozenset()) | adding.get(t, frozenset()) for t in set(kept) | set(adding)}
    )
    state = MemberState.UNRELEASED_PARTITIONS if held_back else MemberState.STABLE
    return _with_epoch(current, target_epoch, state=state, assigned=merged, pending_revocation={})


@dataclass(slots=True)
class ConsumerMember:
    """A member's subscription and where it stands (Kafka's ``ConsumerGroupMember``)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    current: CurrentAssignment = field(default_factory=CurrentAssignment)
    session_deadline_ms: int | None = None
    # set while the member must revoke partitions: it is removed if it has not by then
    rebalance_deadline_ms: int | None = None

    @property
    def member_epoch(self) -> int:
        return self.current.member_epoch

    def subscription(self) -> tuple[tuple[str, ...], str | None]:
        """What changes the group epoch when it changes (Kafka's
        ``hasMemberSubscriptionChanged``; the rack too, for rack-aware assignors)."""
        return self.subscribed_topic_names, self.server_assignor
