"""A member of a classic group and the rules about protocols (Kafka's ``ClassicGroupMember``,
``ClassicGroupState`` and the protocol parts of ``ClassicGroup``), sans-IO.

A member joins with a protocol type (``"consumer"``) and a list of protocols in its order of
preference, each a name (an assignor: ``range``, ``roundrobin``, ``cooperative-sticky``) with
opaque metadata (its subscription).  The group's protocol is one that every member supports,
chosen by vote: each member votes for the first of its own protocols that all members support,
and the most votes win.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

Token = Hashable  # the caller's name for one request it is waiting to answer
Protocol = tuple[str, bytes]  # (name, metadata), as in JoinGroupRequest.protocols


class GroupState(enum.Enum):
    """Kafka's ``ClassicGroupState``; the values are the names DescribeGroups and ListGroups use."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset(_S),
}


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker's classic group settings, Kafka's names and defaults."""

    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    # group.classic.new.member.join.timeout.ms (internal): a new member's JoinGroup is given up
    # after this long, since it has no member id to heartbeat with yet
    new_member_join_timeout_ms: int = 300_000

    def __post_init__(self) -> None:
        assert 0 < self.min_session_timeout_ms <= self.max_session_timeout_ms, self
        assert self.initial_rebalance_delay_ms >= 0 and self.max_size > 0, self
        assert self.new_member_join_timeout_ms > 0, self


@dataclass(frozen=True, slots=True)
class Parked:
    """A JoinGroup or SyncGroup the group answers later, and the version to answer it in."""

    token: Token
    api_version: int


@dataclass(slots=True)
class ClassicMember:
    """One member.  ``awaiting_join`` / ``awaiting_sync`` hold its parked requests; while one is
    parked the member counts as alive (its session timer is suspended), except a new member,
    which may wait at most ``new_member_join_timeout_ms``."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    assignment: bytes = b""
    heartbeat_deadline_ms: int = 0
    is_new: bool = False
    awaiting_join: Parked | None = None
    awaiting_sync: Parked | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def protocol_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.protocols)

    def metadata(self, protocol_name: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise AssertionError(f"member {self.member_id} does not support {protocol_name!r}")

    def matches(self, protocols: Sequence[Protocol]) -> bool:
        """Same protocols, same metadata, same order: a rejoin that changes nothing."""
        return self.protocols == tuple(protocols)

    def vote(self, candidates: frozenset[str]) -> str:
        """The first protocol in this member's order of preference that the group supports."""
        for name in self.protocol_names:
            if name in candidates:
                return name
        raise AssertionError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def heartbeat_expired(self, now_ms: int) -> bool:
        """``!hasSatisfiedHeartbeat``: a parked request stands in for heartbeats, except for
        a new member (it cannot heartbeat and may be a client that gave up and went away)."""
        if now_ms < self.heartbeat_deadline_ms:
            return False
        return self.is_new or (self.awaiting_join is None and self.awaiting_sync is None)

    @property
    def session_suspended(self) -> bool:
        return not self.is_new and (
            self.awaiting_join is not None or self.awaiting_sync is not None
        )


def candidate_protocols(members: Iterable[ClassicMember]) -> frozenset[str]:
    """The protocols every member supports."""
    common: frozenset[str] | None = None
    for member in members:
        names = frozenset(member.protocol_names)
        common = names if common is None else common & names
    return common or frozenset()


def select_protocol(members: Sequence[ClassicMember]) -> str:
    """``ClassicGroup.selectProtocol``: every member votes; the most votes win.  Kafka breaks a
    tie arbitrarily (a hash map); here the protocol first voted for, in member order, wins."""
    assert members, "cannot select a protocol for an empty group"
    candidates = candidate_protocols(members)
    assert candidates, [m.protocol_names for m in members]
    votes: dict[str, int] = {}
    for member in members:
        choice = member.vote(candidates)
        votes[choice] = votes.get(choice, 0) + 1
    return max(votes, key=votes.__getitem__)  # max() keeps the first of equal maxima


def supports_protocols(
    state: GroupState,
    group_protocol_type: str | None,
    members: Sequence[ClassicMember],
    protocol_type: str,
    protocol_names: Sequence[str],
) -> bool:
    """``ClassicGroup.supportsProtocols``: an empty group takes any non-empty protocol type and
    list; otherwise the type must be the group's and one of the protocols supported by all."""
    if state is GroupState.EMPTY:
        return bool(protocol_type) and bool(protocol_names)
    if group_protocol_type != protocol_type:
        return False
    return any(all(name in m.protocol_names for m in members) for name in protocol_names)
