"""JoinGroup rules of the classic group (``broker.group.classic``), one by one."""

from __future__ import annotations

import random

import pytest
from classic_harness import CONFIG, DELAY_MS, REBALANCE_MS, SESSION_MS, Harness, keep_alive
from hypothesis import given
from hypothesis import strategies as st

from broker.group.classic import ClassicGroup
from broker.group.classic_member import (
    ClassicMember,
    GroupConfig,
    GroupState,
    select_protocol,
    supports_protocols,
)
from kafka_protocol.errors import ErrorCode

S = GroupState


# --- member ids --------------------------------------------------------------------------------


def test_join_without_member_id_gets_member_id_required() -> None:
    h = Harness()
    t = h.join(client_id="app")
    assert h.error(t) == ErrorCode.MEMBER_ID_REQUIRED
    member_id = h.join_response(t).member_id
    assert member_id.startswith("app-") and len(member_id) == len("app-") + 36
    assert h.group.state is S.EMPTY and h.group.pending_member_ids == {member_id}
    assert h.last.deadline_ms == SESSION_MS  # the pending id expires unless used


def test_join_with_the_given_member_id_starts_the_initial_rebalance() -> None:
    h = Harness()
    t, member_id = h.new_member()
    assert not h.answered(t)
    assert h.group.state is S.PREPARING_REBALANCE and list(h.group.members) == [member_id]
    assert h.group.pending_member_ids == frozenset()


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_before_v4_a_member_is_added_at_once(version: int) -> None:
    h = Harness()
    t = h.join(version=version)
    assert not h.answered(t) and len(h.group.members) == 1
    h.advance(DELAY_MS)
    response = h.join_response(t)
    assert response.error_code == ErrorCode.NONE and response.generation_id == 1
    assert response.member_id in h.group.members


def test_v0_uses_the_session_timeout_as_rebalance_timeout() -> None:
    h = Harness()
    h.join(version=0, session_ms=7_000, rebalance_ms=-1)
    (member,) = h.group.members.values()
    assert member.rebalance_timeout_ms == 7_000


def test_pending_member_id_expires_after_the_session_timeout() -> None:
    h = Harness()
    member_id = h.join_response(h.join()).member_id
    h.advance(SESSION_MS - 1)
    assert h.group.pending_member_ids == {member_id}
    h.advance(1)
    assert h.group.pending_member_ids == frozenset()
    assert h.error(h.join(member_id)) == ErrorCode.UNKNOWN_MEMBER_ID


def test_unknown_member_id_is_refused() -> None:
    h = Harness()
    h.stable_group(1)
    assert h.error(h.join("nobody")) == ErrorCode.UNKNOWN_MEMBER_ID


# --- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "session_ms", [CONFIG.min_session_timeout_ms - 1, CONFIG.max_session_timeout_ms + 1]
)
def test_session_timeout_outside_the_broker_limits(session_ms: int) -> None:
    h = Harness()
    assert h.error(h.join(session_ms=session_ms)) == ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.group.pending_member_ids == frozenset()


def test_an_empty_group_needs_a_protocol_type_and_protocols() -> None:
    h = Harness()
    assert h.error(h.join(protocol_type="")) == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.error(h.join(protocols=())) == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_type_must_match_the_group() -> None:
    h = Harness()
    h.stable_group(1)
    assert h.error(h.join(protocol_type="connect")) == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_a_new_member_must_share_a_protocol_with_every_member() -> None:
    h = Harness()
    h.stable_group(1)
    t = h.join(protocols=[("roundrobin", b"x")])
    assert h.error(t) == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.error(h.join(protocols=[("roundrobin", b"x"), ("range", b"y")])) == (
        ErrorCode.MEMBER_ID_REQUIRED
    )


def test_dead_group_answers_coordinator_not_available() -> None:
    h = Harness()
    h.take(h.group.unload(h.now_ms))
    assert h.error(h.join()) == ErrorCode.COORDINATOR_NOT_AVAILABLE


# --- protocol selection ------------------------------------------------------------------------


def member(member_id: str, *names: str) -> ClassicMember:
    return ClassicMember(
        member_id, None, "c", "h", 1, 1, "consumer", tuple((n, n.encode()) for n in names)
    )


def test_protocol_chosen_by_votes_among_the_common_ones() -> None:
    members = [
        member("a", "sticky", "roundrobin", "range"),
        member("b", "range", "roundrobin"),
        member("c", "roundrobin", "range"),
    ]
    # sticky is not common; a votes roundrobin, b range, c roundrobin
    assert select_protocol(members) == "roundrobin"
    assert select_protocol([*members, member("d", "range")]) == "range"  # the only common one


def test_protocol_tie_goes_to_the_first_voter() -> None:
    assert select_protocol([member("a", "x", "y"), member("b", "y", "x")]) == "x"
    assert select_protocol([member("b", "y", "x"), member("a", "x", "y")]) == "y"


def test_supports_protocols() -> None:
    members = [member("a", "x", "y"), member("b", "y")]
    assert supports_protocols(S.STABLE, "consumer", members, "consumer", ["z", "y"])
    assert not supports_protocols(S.STABLE, "consumer", members, "consumer", ["x"])
    assert not supports_protocols(S.STABLE, "consumer", members, "other", ["y"])
    assert supports_protocols(S.EMPTY, "consumer", [], "other", ["q"])


def test_the_group_protocol_and_the_leader_in_join_responses() -> None:
    h = Harness()
    t1, m1 = h.new_member(protocols=[("range", b"r1"), ("roundrobin", b"o1")])
    t2, m2 = h.new_member(protocols=[("roundrobin", b"o2"), ("range", b"r2")])
    t3, m3 = h.new_member(protocols=[("roundrobin", b"o3")])
    h.advance(2 * DELAY_MS)
    leader, f2, f3 = (h.join_response(t) for t in (t1, t2, t3))
    assert {r.protocol_name for r in (leader, f2, f3)} == {"roundrobin"}
    assert {r.leader for r in (leader, f2, f3)} == {m1}  # the first to join leads
    assert [(m.member_id, m.metadata) for m in leader.members] == [
        (m1, b"o1"),
        (m2, b"o2"),
        (m3, b"o3"),
    ]
    assert f2.members == [] and f3.members == []
    assert h.group.state is S.COMPLETING_REBALANCE and h.group.protocol_name == "roundrobin"


# --- the initial rebalance delay ---------------------------------------------------------------


def test_initial_delay_with_one_member() -> None:
    h = Harness()
    t, _ = h.new_member()
    h.advance(DELAY_MS - 1)
    assert not h.answered(t)
    h.advance(1)
    assert h.join_response(t).generation_id == 1


def test_initial_delay_is_extended_while_members_arrive() -> None:
    """InitialDelayedJoin(delay=3000, remaining=27000): a join during a wait buys another."""
    h = Harness()
    t1, _ = h.new_member()
    h.advance(1_000)
    h.new_member()
    h.advance(DELAY_MS - 1_000)  # t=3000: someone came, wait min(3000, 27000) more
    assert not h.answered(t1)
    h.advance(1_000)
    h.new_member()  # t=4000
    h.advance(2_000)  # t=6000: someone came again
    assert not h.answered(t1)
    h.advance(DELAY_MS - 1)
    assert not h.answered(t1)
    h.advance(1)  # t=9000: nobody since 6000
    assert h.join_response(t1).generation_id == 1
    assert len(h.join_response(t1).members) == 3


def test_initial_delay_is_capped_by_the_rebalance_timeout() -> None:
    """delay 3000, rebalance timeout 7000, so 4000 remain after the first wait: members at
    1000, 4000 and 6500 extend it to 6000, then by what remains (1000) to 7000, no further."""
    h = Harness()
    t1, _ = h.new_member(rebalance_ms=7_000)
    for at_ms in (1_000, 4_000, 6_500):
        h.advance(at_ms - h.now_ms)
        h.new_member(rebalance_ms=7_000)
    h.advance(7_000 - 1 - h.now_ms)
    assert not h.answered(t1)
    h.advance(1)
    assert h.join_response(t1).generation_id == 1 and len(h.join_response(t1).members) == 4


def test_initial_delay_of_zero_completes_at_once() -> None:
    h = Harness(GroupConfig(min_session_timeout_ms=1_000, initial_rebalance_delay_ms=0))
    t, _ = h.new_member()
    assert h.join_response(t).generation_id == 1


def test_later_rebalances_complete_as_soon_as_everyone_rejoined() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    t_new, _ = h.new_member()
    assert h.group.state is S.PREPARING_REBALANCE
    ta, tb = h.join(a), h.join(b)
    for t in (t_new, ta, tb):
        assert h.join_response(t).generation_id == 2  # no delay, no timer needed
    assert h.group.state is S.COMPLETING_REBALANCE


# --- members that do not rejoin ----------------------------------------------------------------


def test_members_that_do_not_rejoin_in_the_rebalance_timeout_are_removed() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    start = h.now_ms
    ta = h.join(a)  # the leader rejoins: a rebalance
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.heartbeat(b, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    keep_alive(h, b, 1, start + REBALANCE_MS - 1)
    assert not h.answered(ta)
    h.advance(1)
    assert h.join_response(ta).generation_id == 2 and b not in h.group.members
    assert h.heartbeat(b, 2) == ErrorCode.UNKNOWN_MEMBER_ID


def test_leadership_passes_to_a_member_that_rejoined() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    assert h.group.leader_id == a
    tb = h.join(b, protocols=[("range", b"changed")])
    keep_alive(h, a, 1, h.now_ms + REBALANCE_MS)
    response = h.join_response(tb)
    assert response.leader == b and [m.member_id for m in response.members] == [b]


def test_a_parked_join_stands_in_for_heartbeats() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    h.join(a)
    keep_alive(h, b, 1, h.now_ms + 2 * SESSION_MS + 5_000)  # a is silent for 2.5 sessions
    assert a in h.group.members and h.group.state is S.PREPARING_REBALANCE


def test_a_new_member_gives_up_after_the_new_member_join_timeout() -> None:
    config = GroupConfig(
        min_session_timeout_ms=1_000,
        initial_rebalance_delay_ms=DELAY_MS,
        new_member_join_timeout_ms=20_000,
    )
    h = Harness(config)
    a, _ = h.stable_group(2)
    t, c = h.new_member()
    keep_alive(h, a, 1, h.now_ms + 20_000)
    assert h.error(t) == ErrorCode.UNKNOWN_MEMBER_ID and c not in h.group.members


# --- rejoining members -------------------------------------------------------------------------


def test_stable_follower_rejoining_unchanged_gets_the_current_generation() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    response = h.join_response(h.join(b))
    assert (response.generation_id, response.leader, response.members) == (1, a, [])
    assert h.group.state is S.STABLE


def test_stable_follower_with_new_metadata_triggers_a_rebalance() -> None:
    h = Harness()
    _, b = h.stable_group(2)
    t = h.join(b, protocols=[("range", b"new topics")])
    assert not h.answered(t) and h.group.state is S.PREPARING_REBALANCE


def test_stable_leader_rejoining_triggers_a_rebalance() -> None:
    h = Harness()
    a, _ = h.stable_group(2)
    t = h.join(a)
    assert not h.answered(t) and h.group.state is S.PREPARING_REBALANCE


def test_completing_rebalance_rejoin_unchanged_repeats_the_answer() -> None:
    h = Harness()
    (_, a), (_, b) = h.new_member(), h.new_member()
    h.advance(2 * DELAY_MS)
    assert h.group.state is S.COMPLETING_REBALANCE
    again = h.join_response(h.join(a))
    assert again.generation_id == 1 and len(again.members) == 2 and again.leader == a
    assert h.join_response(h.join(b)).members == []
    assert h.group.state is S.COMPLETING_REBALANCE


def test_a_duplicate_join_answers_the_first_one() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    first = h.join(a)
    second = h.join(a)
    assert h.error(first) == ErrorCode.REBALANCE_IN_PROGRESS
    assert not h.answered(second)
    h.join(b)
    assert h.join_response(second).generation_id == 2


# --- group.max.size ----------------------------------------------------------------------------


def small_group_config(max_size: int) -> GroupConfig:
    return GroupConfig(
        min_session_timeout_ms=1_000, initial_rebalance_delay_ms=DELAY_MS, max_size=max_size
    )


def test_group_max_size_reached() -> None:
    h = Harness(small_group_config(2))
    h.stable_group(2)
    t = h.join()
    assert h.error(t) == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert h.join_response(t).member_id == "" and len(h.group.members) == 2


def test_group_max_size_counts_members_rejoining_during_a_rebalance() -> None:
    """A group over the limit (the limit was lowered) rebalances; the last to rejoin is out."""
    h = Harness()
    ids = h.stable_group(3)
    value = h.group.to_record()
    h.group = ClassicGroup.restore("g", value, small_group_config(2), random.Random(1), h.now_ms)
    assert h.group.state is S.PREPARING_REBALANCE
    t0, t1, t2 = (h.join(m) for m in ids)
    assert h.error(t2) == ErrorCode.GROUP_MAX_SIZE_REACHED and ids[2] not in h.group.members
    assert h.join_response(t0).generation_id == h.join_response(t1).generation_id == 2


@pytest.mark.parametrize("version", range(10))
def test_join_answers_encode_at_every_version(version: int) -> None:
    h = Harness()
    error = h.join(version=version, session_ms=1)
    ok = h.join(version=version)
    if version >= 4:
        ok = h.join(h.join_response(ok).member_id, version=version)
    h.advance(DELAY_MS)
    for t in (error, ok):
        h.join_response(t).encode(version)


def test_rebalance_timeout_of_the_group_is_the_largest_members() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    h.join(a, rebalance_ms=50_000)
    assert h.group.next_deadline_ms() is not None
    keep_alive(h, b, 1, h.now_ms + REBALANCE_MS)
    assert h.group.state is S.PREPARING_REBALANCE  # waits 50 s, not 30 s
    keep_alive(h, b, 1, h.now_ms + 20_000)
    assert h.group.state is S.COMPLETING_REBALANCE


def initial_rebalance_end_ms(delay_ms: int, rebalance_ms: int, joins_ms: list[int]) -> int:
    """Kafka's InitialDelayedJoin, written out: wait ``delay``; while members joined during
    the last wait and time remains, wait min(delay, remaining) more, remaining shrinking by
    the previous wait."""
    fire_ms, wait_ms, remaining_ms, last_ms = delay_ms, delay_ms, max(rebalance_ms - delay_ms, 0), 0
    while any(last_ms < j < fire_ms for j in joins_ms) and remaining_ms:
        next_wait_ms = min(delay_ms, remaining_ms)
        remaining_ms = max(remaining_ms - wait_ms, 0)
        last_ms, wait_ms, fire_ms = fire_ms, next_wait_ms, fire_ms + next_wait_ms
    return fire_ms


@given(
    delay_ms=st.integers(0, 300).map(lambda x: 10 * x),
    rebalance_ms=st.integers(1, 2_000).map(lambda x: 10 * x),
    joins_ms=st.lists(st.integers(0, 4_000).map(lambda x: 10 * x + 5), max_size=8),
)
def test_initial_rebalance_delay_arithmetic(
    delay_ms: int, rebalance_ms: int, joins_ms: list[int]
) -> None:
    """Members joining at odd times (never on a deadline): the join phase ends exactly when
    the model says, and holds everyone who came before."""
    config = GroupConfig(
        min_session_timeout_ms=1_000,
        initial_rebalance_delay_ms=delay_ms,
        new_member_join_timeout_ms=10**9,
    )
    h = Harness(config)
    first = h.join(version=3, rebalance_ms=rebalance_ms)
    end_ms = initial_rebalance_end_ms(delay_ms, rebalance_ms, joins_ms)
    for at_ms in sorted(joins_ms):
        if at_ms > end_ms:
            break
        h.advance(at_ms - h.now_ms)
        h.join(version=3, rebalance_ms=rebalance_ms)
    if end_ms > h.now_ms:
        h.advance(end_ms - 1 - h.now_ms)
        assert not h.answered(first)
    h.advance(end_ms - h.now_ms)
    response = h.join_response(first)
    assert response.generation_id == 1 and h.now_ms == end_ms
    assert len(response.members) == 1 + sum(j < end_ms for j in joins_ms)
