"""TxnOffsetCommit's membership checks (Kafka's ``ClassicGroup.validateOffsetCommit`` with
``isTransactional``, KIP-447): checked only when the request carries a member, a generation
or an instance id (v3+); no REBALANCE_IN_PROGRESS, and a producer outside the group (v0-2,
no member) may commit for a non-empty group."""

from __future__ import annotations

from classic_harness import Harness
from test_classic_static import BOTH, static_group

from broker.group.classic_member import GroupState
from kafka_protocol.errors import ErrorCode


def test_a_member_of_the_current_generation_may_commit() -> None:
    h = Harness()
    a, _ = h.stable_group(2)
    gen = h.group.generation_id
    assert h.group.validate_txn_offset_commit(a, None, gen) is None
    assert h.group.validate_txn_offset_commit(a, None, gen - 1) is ErrorCode.ILLEGAL_GENERATION
    assert h.group.validate_txn_offset_commit("ghost", None, gen) is ErrorCode.UNKNOWN_MEMBER_ID


def test_without_member_and_generation_the_group_is_not_checked() -> None:
    h = Harness()
    h.stable_group(2)
    assert h.group.validate_txn_offset_commit("", None, -1) is None
    # (a plain OffsetCommit would be refused UNKNOWN_MEMBER_ID here)


def test_a_rebalance_does_not_refuse_the_commit() -> None:
    h = Harness()
    a, _ = h.stable_group(2)
    gen = h.group.generation_id
    h.new_member(protocols=BOTH)  # the group rebalances
    assert h.group.state is GroupState.PREPARING_REBALANCE
    assert h.group.validate_txn_offset_commit(a, None, gen) is None


def test_a_fenced_static_instance_is_refused() -> None:
    h = Harness()
    ids = static_group(h, "pod-0", "pod-1")
    gen = h.group.generation_id
    assert h.group.validate_txn_offset_commit(ids["pod-0"], "pod-0", gen) is None
    assert (
        h.group.validate_txn_offset_commit(ids["pod-1"], "pod-0", gen)
        is ErrorCode.FENCED_INSTANCE_ID
    )
    assert h.group.validate_txn_offset_commit("x", "pod-9", gen) is ErrorCode.UNKNOWN_MEMBER_ID


def test_an_empty_group_takes_commits_without_a_generation() -> None:
    h = Harness()
    assert h.group.state is GroupState.EMPTY
    assert h.group.validate_txn_offset_commit("", None, -1) is None
    assert h.group.validate_txn_offset_commit("m", None, 0) is ErrorCode.UNKNOWN_MEMBER_ID
