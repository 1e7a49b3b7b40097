"""SyncGroup, Heartbeat and LeaveGroup rules of the classic group, and session expiry under the
virtual clock."""

from __future__ import annotations

import pytest
from classic_harness import DELAY_MS, REBALANCE_MS, SESSION_MS, Harness, keep_alive

from broker.group.classic_member import GroupState
from kafka_protocol.errors import ErrorCode

S = GroupState


def completing_group(h: Harness, n: int = 3) -> list[str]:
    joins = [h.new_member() for _ in range(n)]
    while h.group.state is S.PREPARING_REBALANCE:
        h.advance(DELAY_MS)
    assert h.group.state is S.COMPLETING_REBALANCE
    return [member_id for _, member_id in joins]


# --- SyncGroup ---------------------------------------------------------------------------------


def test_followers_wait_for_the_leaders_assignment_which_is_stored_first() -> None:
    h = Harness()
    a, b, c = completing_group(h)
    tb = h.sync(b, 1)
    assert not h.answered(tb) and not h.stores
    ta = h.sync(a, 1, {a: b"A", b: b"B", c: b"C"})
    assert not h.answered(ta) and not h.answered(tb)  # nothing before the record is durable
    (store,) = h.stores
    assert store.awaited and store.group_id == "g"
    value = store.value
    assert (value.generation, value.protocol, value.leader) == (1, "range", a)
    assert [(m.member_id, m.assignment) for m in value.members] == [(a, b"A"), (b, b"B"), (c, b"C")]
    assert h.group.state is S.COMPLETING_REBALANCE
    h.ack(store)
    assert h.group.state is S.STABLE
    assert h.sync_response(ta).assignment == b"A" and h.sync_response(tb).assignment == b"B"
    assert h.sync_response(ta).protocol_name == "range"
    assert h.sync_response(ta).protocol_type == "consumer"
    tc = h.sync(c, 1)  # after the group is Stable: answered at once
    assert h.sync_response(tc).assignment == b"C"


def test_members_the_leader_left_out_get_an_empty_assignment() -> None:
    h = Harness()
    a, b = completing_group(h, 2)
    h.sync(a, 1, {a: b"A", "stranger": b"X"})
    (store,) = h.stores
    assert [(m.member_id, m.assignment) for m in store.value.members] == [(a, b"A"), (b, b"")]
    h.ack(store)
    assert h.sync_response(h.sync(b, 1)).assignment == b""


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"member_id": "nobody"}, ErrorCode.UNKNOWN_MEMBER_ID),
        ({"generation_id": 7}, ErrorCode.ILLEGAL_GENERATION),
        ({"protocol_type": "connect"}, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        ({"protocol_name": "roundrobin"}, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        ({"instance_id": "unknown-instance"}, ErrorCode.UNKNOWN_MEMBER_ID),
    ],
)
def test_sync_validation(kwargs: dict[str, object], error: ErrorCode) -> None:
    h = Harness()
    a, _ = h.stable_group(2)
    args: dict[str, object] = {"member_id": a, "generation_id": 1, **kwargs}
    member_id, generation_id = args.pop("member_id"), args.pop("generation_id")
    assert isinstance(member_id, str) and isinstance(generation_id, int)
    t = h.sync(member_id, generation_id, **args)  # type: ignore[arg-type]
    assert h.error(t) == error


def test_sync_with_matching_protocol_fields_is_fine() -> None:
    h = Harness()
    a, _ = h.stable_group(2)
    t = h.sync(a, 1, protocol_type="consumer", protocol_name="range")
    assert h.error(t) == ErrorCode.NONE


def test_sync_during_a_rebalance() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    h.join(a)
    assert h.error(h.sync(b, 1)) == ErrorCode.REBALANCE_IN_PROGRESS


def test_a_rebalance_answers_the_parked_syncs() -> None:
    h = Harness()
    a, b = completing_group(h, 2)
    tb = h.sync(b, 1)
    h.new_member()  # a newcomer: the generation being completed is void
    assert h.error(tb) == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.group.state is S.PREPARING_REBALANCE
    assert a in h.group.members


def test_a_failed_store_answers_the_parked_syncs_and_rebalances() -> None:
    h = Harness()
    a, b = completing_group(h, 2)
    tb = h.sync(b, 1)
    ta = h.sync(a, 1, {a: b"A", b: b"B"})
    h.ack(error=ErrorCode.NOT_ENOUGH_REPLICAS)
    assert h.error(ta) == h.error(tb) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.group.state is S.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in h.group.members.values())


def test_a_store_acknowledged_after_the_group_moved_on_is_ignored() -> None:
    h = Harness()
    a, b = completing_group(h, 2)
    ta = h.sync(a, 1, {a: b"A", b: b"B"})
    store = h.stores[-1]
    h.join(b, protocols=[("range", b"other")])  # a rebalance before the record is durable
    assert h.error(ta) == ErrorCode.REBALANCE_IN_PROGRESS
    h.ack(store)
    assert h.group.state is S.PREPARING_REBALANCE


def test_a_leader_retrying_sync_while_its_assignment_is_stored() -> None:
    h = Harness()
    a, b = completing_group(h, 2)
    first = h.sync(a, 1, {a: b"A", b: b"B"})
    second = h.sync(a, 1, {a: b"A2", b: b"B2"})
    assert h.error(first) == ErrorCode.REBALANCE_IN_PROGRESS
    assert len(h.stores) == 1  # the assignment being stored is the one handed out
    h.ack()
    assert h.sync_response(second).assignment == b"A"


def test_members_that_do_not_sync_within_the_rebalance_timeout_are_removed() -> None:
    h = Harness()
    a, b, c = completing_group(h)
    start = h.now_ms
    h.sync(a, 1, {a: b"A", b: b"B", c: b"C"})
    h.ack()
    # b and c heartbeat (so their sessions hold) but only b syncs
    h.sync(b, 1)
    while h.now_ms < start + REBALANCE_MS - 1:
        for m in (a, b, c):
            assert h.heartbeat(m, 1) == ErrorCode.NONE
        h.advance(min(SESSION_MS // 2, start + REBALANCE_MS - 1 - h.now_ms))
    assert h.group.state is S.STABLE and c in h.group.members
    h.advance(1)
    assert c not in h.group.members and h.group.state is S.PREPARING_REBALANCE


# --- Heartbeat ---------------------------------------------------------------------------------


def test_heartbeat_in_each_state() -> None:
    h = Harness()
    a, b = completing_group(h, 2)
    assert h.heartbeat(a, 1) == ErrorCode.NONE  # CompletingRebalance
    h.sync(a, 1, {a: b"A", b: b"B"})
    h.ack()
    assert h.heartbeat(b, 1) == ErrorCode.NONE  # Stable
    h.join(a)
    assert h.heartbeat(b, 1) == ErrorCode.REBALANCE_IN_PROGRESS  # PreparingRebalance
    assert h.heartbeat(b, 0) == ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat("nobody", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat(b, 1, instance_id="i") == ErrorCode.UNKNOWN_MEMBER_ID
    h.take(h.group.unload(h.now_ms))
    assert h.heartbeat(b, 1) == ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_session_expiry_removes_a_silent_member_and_rebalances() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    last_heartbeat = h.now_ms
    assert h.heartbeat(b, 1) == ErrorCode.NONE
    keep_alive(h, a, 1, last_heartbeat + SESSION_MS - 1)
    assert b in h.group.members
    assert h.group.next_deadline_ms() == last_heartbeat + SESSION_MS
    h.advance(1)
    assert b not in h.group.members and h.group.state is S.PREPARING_REBALANCE
    t = h.join(a)
    assert h.join_response(t).generation_id == 2  # only a left: it completes at once


def test_heartbeating_member_that_syncs_stays_for_many_sessions() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    for _ in range(40):
        assert h.heartbeat(a, 1) == h.heartbeat(b, 1) == ErrorCode.NONE
        h.advance(SESSION_MS - 1)
    assert h.group.state is S.STABLE and set(h.group.members) == {a, b}


# --- LeaveGroup --------------------------------------------------------------------------------


def test_batch_leave_removes_several_members_in_one_rebalance() -> None:
    h = Harness()
    a, b, c = h.stable_group(3)
    response = h.leave((b, None), (c, None), ("nobody", None))
    assert [(m.member_id, m.error_code) for m in response.members] == [
        (b, ErrorCode.NONE),
        (c, ErrorCode.NONE),
        ("nobody", ErrorCode.UNKNOWN_MEMBER_ID),
    ]
    assert list(h.group.members) == [a] and h.group.state is S.PREPARING_REBALANCE
    assert h.join_response(h.join(a)).generation_id == 2


@pytest.mark.parametrize("version", [0, 1, 2])
def test_leave_before_v3_names_one_member_and_answers_at_the_top(version: int) -> None:
    h = Harness()
    a, _ = h.stable_group(2)
    ok = h.leave((a, None), version=version)
    assert ok.error_code == ErrorCode.NONE and ok.members == []
    gone = h.leave((a, None), version=version)
    assert gone.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    ok.encode(version)
    gone.encode(version)


def test_leave_of_a_pending_member() -> None:
    h = Harness()
    member_id = h.join_response(h.join()).member_id
    response = h.leave((member_id, None))
    assert response.members[0].error_code == ErrorCode.NONE
    assert h.group.pending_member_ids == frozenset() and h.group.state is S.EMPTY


def test_a_leaving_member_with_a_parked_join_gets_an_answer() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    ta = h.join(a)
    h.leave((a, None))
    assert h.error(ta) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.join_response(h.join(b)).generation_id == 2


def test_the_last_member_leaving_empties_the_group_and_stores_it() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.stores.clear()
    h.leave((a, None))
    assert h.group.state is S.EMPTY and h.group.generation_id == 2
    (store,) = h.stores
    assert not store.awaited
    value = store.value
    assert (value.generation, value.protocol, value.leader, value.members) == (2, None, None, [])
    assert value.protocol_type == "consumer"
    h.ack(store, ErrorCode.REQUEST_TIMED_OUT)  # only logged in Kafka: nothing waits for it
    assert h.group.state is S.EMPTY


def test_leave_from_a_dead_group() -> None:
    h = Harness()
    a, _ = h.stable_group(2)
    h.take(h.group.unload(h.now_ms))
    assert h.leave((a, None)).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_leave_answers_encode() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    h.leave((a, None), (b, "x")).encode(5)
