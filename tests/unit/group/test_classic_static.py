"""Static membership (``group.instance.id``, KIP-345) in the classic group."""

from __future__ import annotations

from classic_harness import DELAY_MS, REBALANCE_MS, SESSION_MS, Harness, keep_alive

from broker.group.classic_member import GroupState, Protocol
from kafka_protocol.errors import ErrorCode

S = GroupState
BOTH: tuple[Protocol, ...] = (("range", b"r"), ("roundrobin", b"o"))


def static_group(h: Harness, *instances: str, version: int = 9) -> dict[str, str]:
    """Static members (a dynamic one for each name starting with "dyn") made Stable: the
    member id of each instance."""
    tokens = {}
    for name in instances:
        if name.startswith("dyn"):
            tokens[name] = h.new_member(protocols=BOTH)[0]
        else:
            tokens[name] = h.join(instance_id=name, protocols=BOTH, version=version)
    while h.group.state is S.PREPARING_REBALANCE:
        h.advance(DELAY_MS)
    ids = {name: h.join_response(t).member_id for name, t in tokens.items()}
    leader = h.group.leader_id
    for member_id in ids.values():
        assignment = {m: m.encode() for m in ids.values()} if member_id == leader else None
        h.sync(member_id, h.group.generation_id, assignment)
    h.ack_all()
    assert h.group.state is S.STABLE
    return ids


def test_a_static_member_gets_its_id_without_member_id_required() -> None:
    h = Harness()
    t = h.join(instance_id="pod-0", version=5)
    assert not h.answered(t)
    h.advance(DELAY_MS)
    member_id = h.join_response(t).member_id
    assert member_id.startswith("pod-0-")
    assert h.group.members[member_id].group_instance_id == "pod-0"


def test_a_restarted_static_member_takes_over_without_a_rebalance() -> None:
    h = Harness()
    ids = static_group(h, "pod-0", "pod-1")
    old = ids["pod-1"]
    h.stores.clear()
    t = h.join(instance_id="pod-1", protocols=BOTH)
    assert not h.answered(t)  # until the new member id is stored
    (store,) = h.stores
    new = next(m.member_id for m in store.value.members if m.group_instance_id == "pod-1")
    assert new != old and store.value.generation == 1
    h.ack(store)
    response = h.join_response(t)
    assert (response.member_id, response.generation_id, response.leader) == (new, 1, ids["pod-0"])
    assert h.group.state is S.STABLE and h.group.generation_id == 1
    assert h.sync_response(h.sync(new, 1, instance_id="pod-1")).assignment == old.encode()
    # the old incarnation is fenced
    assert h.heartbeat(old, 1, instance_id="pod-1") == ErrorCode.FENCED_INSTANCE_ID
    assert h.heartbeat(old, 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.error(h.sync(old, 1, instance_id="pod-1")) == ErrorCode.FENCED_INSTANCE_ID
    assert h.error(h.join(old, instance_id="pod-1", protocols=BOTH)) == (
        ErrorCode.FENCED_INSTANCE_ID
    )
    assert h.leave((old, "pod-1")).members[0].error_code == ErrorCode.FENCED_INSTANCE_ID


def test_a_restarted_static_leader_before_v9_is_told_the_old_leader() -> None:
    """It must not believe it leads (it would assign, and a Stable group passes nothing on)."""
    h = Harness()
    ids = static_group(h, "pod-0", "pod-1")
    t = h.join(instance_id="pod-0", protocols=BOTH, version=8)
    h.ack()
    response = h.join_response(t)
    assert response.leader == ids["pod-0"] != response.member_id and response.members == []
    assert h.group.leader_id == response.member_id
    response.encode(8)


def test_a_restarted_static_leader_from_v9_skips_the_assignment() -> None:
    h = Harness()
    static_group(h, "pod-0", "pod-1")
    t = h.join(instance_id="pod-0", protocols=BOTH, version=9)
    h.ack()
    response = h.join_response(t)
    assert response.leader == response.member_id and response.skip_assignment
    assert len(response.members) == 2


def test_a_restart_that_changes_the_chosen_protocol_rebalances() -> None:
    h = Harness()
    static_group(h, "pod-0", "pod-1", "pod-2")  # all prefer range
    assert h.group.protocol_name == "range"
    h.join(instance_id="pod-0", protocols=BOTH)
    h.ack()
    assert h.group.state is S.STABLE
    h.join(instance_id="pod-1", protocols=tuple(reversed(BOTH)))
    h.join(instance_id="pod-2", protocols=tuple(reversed(BOTH)))
    assert h.group.state is S.PREPARING_REBALANCE


def test_a_failed_store_reverts_the_replacement() -> None:
    h = Harness()
    ids = static_group(h, "pod-0", "pod-1")
    t = h.join(instance_id="pod-1", protocols=BOTH)
    h.ack(error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    response = h.join_response(t)
    assert response.error_code == ErrorCode.NOT_COORDINATOR and response.member_id == ""
    assert set(h.group.members) == set(ids.values())
    assert h.heartbeat(ids["pod-1"], 1, instance_id="pod-1") == ErrorCode.NONE


def test_restart_during_a_rebalance_fences_the_old_parked_join() -> None:
    h = Harness()
    ids = static_group(h, "pod-0", "pod-1", "pod-2")
    h.join(ids["pod-0"], instance_id="pod-0", protocols=BOTH)  # the leader: a rebalance
    old_join = h.join(ids["pod-1"], instance_id="pod-1", protocols=BOTH)
    new_join = h.join(instance_id="pod-1", protocols=BOTH)  # pod-1 restarted meanwhile
    assert h.error(old_join) == ErrorCode.FENCED_INSTANCE_ID
    assert h.join_response(old_join).member_id == ids["pod-1"]
    assert not h.answered(new_join) and h.group.state is S.PREPARING_REBALANCE
    h.join(ids["pod-2"], instance_id="pod-2", protocols=BOTH)
    response = h.join_response(new_join)
    assert response.generation_id == 2 and response.member_id != ids["pod-1"]
    assert response.member_id in h.group.members and ids["pod-1"] not in h.group.members


def test_restart_while_completing_fences_the_parked_sync_and_rebalances() -> None:
    h = Harness()
    ids = static_group(h, "pod-0", "pod-1")
    h.join(ids["pod-0"], instance_id="pod-0", protocols=BOTH)  # the leader: a rebalance
    h.join(ids["pod-1"], instance_id="pod-1", protocols=BOTH)
    assert h.group.state is S.COMPLETING_REBALANCE
    parked = h.sync(ids["pod-1"], 2, instance_id="pod-1")
    h.join(instance_id="pod-1", protocols=BOTH)
    assert h.error(parked) == ErrorCode.FENCED_INSTANCE_ID
    assert h.group.state is S.PREPARING_REBALANCE


def test_static_members_are_kept_when_they_miss_a_rebalance() -> None:
    """Only their session expiry removes them (a dynamic member would be gone)."""
    h = Harness()
    ids = static_group(h, "pod-0", "pod-1")
    start = h.now_ms
    t0 = h.join(ids["pod-0"], instance_id="pod-0", protocols=BOTH)
    keep_alive(h, ids["pod-1"], 1, start + REBALANCE_MS)
    response = h.join_response(t0)
    assert response.generation_id == 2 and len(response.members) == 2
    assert ids["pod-1"] in h.group.members
    assert h.heartbeat(ids["pod-1"], 1, instance_id="pod-1") == ErrorCode.ILLEGAL_GENERATION


def test_a_rebalance_nobody_rejoins_waits_for_another_timeout() -> None:
    h = Harness()
    ids = static_group(h, "pod-0", "pod-1")
    start = h.now_ms
    _, newcomer = h.new_member(protocols=BOTH)
    h.leave((newcomer, None))  # the rebalance it started goes on, with nobody joined
    while h.now_ms < start + REBALANCE_MS:
        for member_id in ids.values():
            assert h.heartbeat(member_id, 1) == ErrorCode.REBALANCE_IN_PROGRESS
        h.advance(min(SESSION_MS // 2, start + REBALANCE_MS - h.now_ms))
    assert h.group.state is S.PREPARING_REBALANCE
    assert set(h.group.members) == set(ids.values())  # gone only after their sessions end
    h.advance(SESSION_MS)
    assert h.group.state is S.EMPTY and h.group.generation_id == 2


def test_leave_by_instance_id_alone() -> None:
    h = Harness()
    ids = static_group(h, "pod-0", "pod-1", "dyn")
    response = h.leave(("", "pod-0"), ("", "pod-9"), (ids["dyn"], None))
    assert [m.error_code for m in response.members] == [
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.NONE,
    ]
    assert list(h.group.members) == [ids["pod-1"]]
