"""The classic group's ``__consumer_offsets`` record, restoring a group from it after a
coordinator failover, and the admin views (describe, delete, unload)."""

from __future__ import annotations

import random

import pytest
from classic_harness import CONFIG, SESSION_MS, Harness

from broker.group.classic import ClassicGroup
from broker.group.classic_member import GroupConfig, GroupState
from broker.group.classic_records import (
    GROUP_METADATA_VALUE_VERSION,
    append_error_to_response_error,
)
from kafka_protocol.coordinator.group_metadata_value import GroupMetadataValue
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DescribeGroupsResponse

S = GroupState


def restore(h: Harness, value: GroupMetadataValue, config: GroupConfig = CONFIG) -> None:
    h.group = ClassicGroup.restore("g", value, config, random.Random(7), h.now_ms)


def stored_value(h: Harness) -> GroupMetadataValue:
    """The latest record, once every write in flight is done, through its wire format."""
    h.ack_all()
    value = h.log[-1]
    return GroupMetadataValue.decode(value.encode(GROUP_METADATA_VALUE_VERSION), 3)


def test_a_stable_group_survives_a_failover_through_its_record() -> None:
    h = Harness()
    ids = h.stable_group(3)
    before = h.group.describe()
    value = stored_value(h)
    assert value.current_state_timestamp == h.group.current_state_timestamp_ms
    h.take(h.group.unload(h.now_ms))
    h.advance(1_000)
    restore(h, value)
    assert h.group.state is S.STABLE and h.group.generation_id == 1
    assert h.group.describe() == before
    assert h.group.leader_id == ids[0] and h.group.protocol_name == "range"
    for m in ids:
        assert h.heartbeat(m, 1) == ErrorCode.NONE
        assert h.sync_response(h.sync(m, 1)).assignment == m.encode()


def test_restored_members_must_heartbeat_within_their_session() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    value = stored_value(h)
    restore(h, value)
    assert h.group.next_deadline_ms() == h.now_ms + SESSION_MS
    h.advance(SESSION_MS - 1)
    assert h.heartbeat(a, 1) == ErrorCode.NONE
    h.advance(1)
    assert b not in h.group.members and h.group.state is S.PREPARING_REBALANCE


def test_an_empty_group_record_restores_an_empty_group() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    h.leave((a, None))
    value = stored_value(h)
    restore(h, value)
    assert h.group.state is S.EMPTY and h.group.generation_id == 2
    assert h.group.protocol_type == "consumer" and h.group.is_empty
    assert h.error(h.join()) == ErrorCode.MEMBER_ID_REQUIRED


def test_a_restored_group_over_the_size_limit_rebalances() -> None:
    h = Harness()
    h.stable_group(3)
    restore(h, stored_value(h), GroupConfig(min_session_timeout_ms=1_000, max_size=2))
    assert h.group.state is S.PREPARING_REBALANCE


def test_record_members_carry_everything_a_new_coordinator_needs() -> None:
    h = Harness()
    h.join(instance_id="pod-0", session_ms=12_000, rebalance_ms=40_000, client_id="app")
    h.advance(CONFIG.initial_rebalance_delay_ms)
    (member_id,) = h.group.members
    h.sync(member_id, 1, {member_id: b"assigned"})
    (member,) = stored_value(h).members
    assert member == GroupMetadataValue.MemberMetadata(
        member_id=member_id,
        group_instance_id="pod-0",
        client_id="app",
        client_host="/10.0.0.1",
        rebalance_timeout=40_000,
        session_timeout=12_000,
        subscription=b"sub",
        assignment=b"assigned",
    )


def test_an_old_record_without_rebalance_timeouts() -> None:
    h = Harness()
    h.stable_group(1)
    value = GroupMetadataValue.decode(stored_value(h).encode(0), 0)
    restore(h, value)
    (member,) = h.group.members.values()
    assert member.rebalance_timeout_ms == member.session_timeout_ms == SESSION_MS
    assert member.group_instance_id is None


def test_a_record_with_members_but_no_protocol_is_refused() -> None:
    h = Harness()
    h.stable_group(1)
    value = stored_value(h)
    value.protocol = None
    with pytest.raises(ValueError, match="no protocol"):
        restore(h, value)


@pytest.mark.parametrize(
    ("append_error", "error"),
    [
        (ErrorCode.NONE, ErrorCode.NONE),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.UNKNOWN_SERVER_ERROR),
        (ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.UNKNOWN_SERVER_ERROR),
        (ErrorCode.INVALID_FETCH_SIZE, ErrorCode.UNKNOWN_SERVER_ERROR),
        (ErrorCode.CORRUPT_MESSAGE, ErrorCode.CORRUPT_MESSAGE),
    ],
)
def test_append_errors_as_clients_see_them(append_error: ErrorCode, error: ErrorCode) -> None:
    assert append_error_to_response_error(append_error) == error


# --- describe, delete, unload ------------------------------------------------------------------


def test_describe_shows_metadata_and_assignments_only_when_stable() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    stable = h.group.describe()
    assert (stable.group_state, stable.protocol_type, stable.protocol_data) == (
        "Stable",
        "consumer",
        "range",
    )
    assert [(m.member_id, m.member_metadata, m.member_assignment) for m in stable.members] == [
        (a, b"sub", a.encode()),
        (b, b"sub", b.encode()),
    ]
    assert stable.members[0].client_id == "client"
    for version in range(7):
        DescribeGroupsResponse(groups=[stable]).encode(version)
    h.join(a)
    rebalancing = h.group.describe()
    assert (rebalancing.group_state, rebalancing.protocol_data) == ("PreparingRebalance", "")
    assert {(m.member_metadata, m.member_assignment) for m in rebalancing.members} == {(b"", b"")}
    h.join(b)
    assert h.group.describe().group_state == "CompletingRebalance"


def test_delete_only_an_empty_group() -> None:
    h = Harness()
    (a,) = h.stable_group(1)
    assert h.group.delete(h.now_ms) == ErrorCode.NON_EMPTY_GROUP
    h.leave((a, None))
    assert h.group.delete(h.now_ms) == ErrorCode.NONE
    assert h.group.state is S.DEAD and h.group.describe().group_state == "Dead"
    assert h.group.delete(h.now_ms) == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.group.next_deadline_ms() is None


def test_unload_answers_every_parked_request() -> None:
    h = Harness()
    a, b, c = h.stable_group(3)
    ta = h.join(a)
    tb = h.join(b)
    h.join(c)  # all joined: CompletingRebalance
    tb_sync = h.sync(b, 2)
    pending = h.join()  # MEMBER_ID_REQUIRED: answered already
    ta_again = h.join(a)  # answered at once (unchanged, CompletingRebalance)
    assert {h.error(t) for t in (ta, tb, pending, ta_again)} == {
        ErrorCode.NONE,
        ErrorCode.MEMBER_ID_REQUIRED,
    }
    leader_sync = h.sync(a, 2, {a: b"A", b: b"B", c: b"C"})
    store = h.stores[-1]
    out = h.take(h.group.unload(h.now_ms))
    assert {t for t, _ in out.replies} == {tb_sync, leader_sync}
    assert h.error(tb_sync) == h.error(leader_sync) == ErrorCode.NOT_COORDINATOR
    assert h.group.state is S.DEAD and h.group.parked_tokens() == set()
    h.ack(store)  # too late: nothing happens
    assert h.group.state is S.DEAD
    assert h.error(h.sync(c, 2)) == ErrorCode.COORDINATOR_NOT_AVAILABLE
