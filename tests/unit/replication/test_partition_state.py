"""The pure partition replication rules (``broker.replication.partition_state``), one by one,
with Kafka's edge cases."""

from __future__ import annotations

import pytest
from crash_stops import CrashStops

from broker.log.epochs import (
    UNDEFINED,
    EpochEndOffset,
    EpochEntry,
    assign_epoch,
    epoch_end_offset,
    truncate_epochs,
)
from broker.replication.partition_state import (
    NO_BROKER_EPOCH,
    PENDING,
    UNKNOWN_OFFSET,
    FollowerState,
    PartitionState,
    ReplicaState,
    Truncation,
)
from kafka_protocol.errors import ErrorCode

LAG_MS = 100


def leader(
    leo: int = 10, hw: int = 10, isr: tuple[int, ...] = (1, 2, 3), now_ms: int = 0
) -> PartitionState:
    return PartitionState.new_leader(1, (1, 2, 3), isr, 5, 7, leo, hw, now_ms)


def caught_up(state: PartitionState, now_ms: int = 0) -> PartitionState:
    for r in (2, 3):
        state.on_follower_fetch(r, state.log_end_offset, now_ms)
    return state


# --- leader epoch cache ------------------------------------------------------------------------

EPOCHS: list[EpochEntry] = [(1, 0), (3, 10), (4, 25)]


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (4, EpochEndOffset(4, 30)),  # the latest epoch ends at the log end offset
        (3, EpochEndOffset(3, 25)),
        (2, EpochEndOffset(1, 10)),  # a gap: the largest epoch <= 2, ending where 3 starts
        (0, EpochEndOffset(0, 0)),  # older than every cached epoch: ends where the first starts
        (9, EpochEndOffset(4, 30)),
    ],
)
def test_epoch_end_offset(requested: int, expected: EpochEndOffset) -> None:
    assert epoch_end_offset(EPOCHS, requested, 30) == expected


def test_epoch_end_offset_of_an_empty_cache_is_undefined() -> None:
    assert epoch_end_offset([], 3, 0) == UNDEFINED


def test_assign_and_truncate_epochs() -> None:
    epochs: list[EpochEntry] = []
    assign_epoch(epochs, 1, 0)
    assign_epoch(epochs, 1, 5)  # same epoch: no new entry
    assign_epoch(epochs, 3, 10)
    assert epochs == [(1, 0), (3, 10)]
    truncate_epochs(epochs, 10)  # epoch 3 started at the truncation point: gone
    assert epochs == [(1, 0)]
    with pytest.raises(AssertionError):
        assign_epoch(epochs, 0, 20)  # epochs only grow


# --- Replica.updateFetchStateOrThrow -----------------------------------------------------------


def test_fetch_at_leader_log_end_offset_is_caught_up_now() -> None:
    replica = ReplicaState()
    replica.update_fetch_state(10, 10, now_ms=500)
    assert (replica.log_end_offset, replica.last_caught_up_time_ms) == (10, 500)


def test_fetch_reaching_previous_leader_log_end_offset_is_caught_up_as_of_previous_fetch() -> None:
    replica = ReplicaState()
    replica.update_fetch_state(5, 10, now_ms=100)  # behind: leader was at 10 then
    assert replica.last_caught_up_time_ms == 0
    replica.update_fetch_state(10, 14, now_ms=200)  # reached 10 but the leader moved to 14
    assert replica.last_caught_up_time_ms == 100
    replica.update_fetch_state(12, 20, now_ms=300)  # did not reach 14
    assert replica.last_caught_up_time_ms == 100


def test_is_caught_up_by_offset_or_by_lag_time() -> None:
    replica = ReplicaState(log_end_offset=10, last_caught_up_time_ms=0)
    assert replica.is_caught_up(10, now_ms=10_000, lag_time_max_ms=LAG_MS)
    assert replica.is_caught_up(11, now_ms=LAG_MS, lag_time_max_ms=LAG_MS)
    assert not replica.is_caught_up(11, now_ms=LAG_MS + 1, lag_time_max_ms=LAG_MS)


# --- high watermark ------------------------------------------------------------------------------


def test_new_leader_keeps_its_high_watermark_until_followers_fetch() -> None:
    state = leader(leo=10, hw=4)
    assert state.high_watermark == 4  # followers' offsets are unknown
    assert state.followers[2].log_end_offset == UNKNOWN_OFFSET
    decision = state.on_follower_fetch(2, 8, now_ms=1)
    assert decision.high_watermark == 4 and not decision.high_watermark_changed
    decision = state.on_follower_fetch(3, 9, now_ms=1)
    assert (decision.high_watermark, decision.high_watermark_changed) == (8, True)


def test_high_watermark_is_min_of_isr_and_never_decreases() -> None:
    state = caught_up(leader(leo=10, hw=0))
    assert state.high_watermark == 10
    state.on_leader_append(15, now_ms=1)
    assert state.high_watermark == 10
    decision = state.on_follower_fetch(2, 15, now_ms=2)
    assert decision.high_watermark == 10  # 3 is still at 10
    decision = state.on_follower_fetch(3, 12, now_ms=2)
    assert (decision.high_watermark, decision.log_end_offset) == (12, 15)


def test_single_member_isr_advances_with_the_leader_append() -> None:
    state = leader(leo=0, hw=0, isr=(1,))
    assert state.on_leader_append(3, now_ms=0)
    assert state.high_watermark == 3


def test_out_of_sync_follower_does_not_hold_the_high_watermark() -> None:
    state = leader(leo=10, hw=0, isr=(1, 2))
    state.on_follower_fetch(2, 10, now_ms=0)
    state.on_follower_fetch(3, 0, now_ms=0)
    assert state.high_watermark == 10


@pytest.mark.parametrize(
    ("replica", "epoch", "offset", "error"),
    [
        (9, None, 0, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (2, 4, 0, ErrorCode.FENCED_LEADER_EPOCH),
        (2, 6, 0, ErrorCode.UNKNOWN_LEADER_EPOCH),
        (2, 5, 11, ErrorCode.OFFSET_OUT_OF_RANGE),
    ],
)
def test_follower_fetch_errors(
    replica: int, epoch: int | None, offset: int, error: ErrorCode
) -> None:
    assert leader().on_follower_fetch(replica, offset, 0, epoch).error == error


# --- ISR shrink and expand ---------------------------------------------------------------------


def test_shrink_drops_lagging_followers_never_the_leader() -> None:
    state = caught_up(leader(leo=10, hw=0), now_ms=0)
    state.on_leader_append(20, now_ms=10)
    state.on_follower_fetch(2, 20, now_ms=150)
    assert state.maybe_shrink_isr(now_ms=LAG_MS, replica_lag_time_max_ms=LAG_MS) is None
    assert state.maybe_shrink_isr(now_ms=LAG_MS + 1, replica_lag_time_max_ms=LAG_MS) == frozenset(
        {1, 2}
    )
    assert (
        state.maybe_shrink_isr(now_ms=10_000, replica_lag_time_max_ms=LAG_MS) is None
    )  # in flight


def test_follower_at_leader_log_end_offset_is_never_shrunk() -> None:
    state = caught_up(leader(leo=10, hw=0), now_ms=0)  # idle partition: nobody fetched since
    assert state.maybe_shrink_isr(now_ms=1_000_000, replica_lag_time_max_ms=LAG_MS) is None


def test_pending_shrink_uses_maximal_isr_for_the_high_watermark() -> None:
    state = caught_up(leader(leo=10, hw=0), now_ms=0)
    state.on_leader_append(20, now_ms=0)
    state.on_follower_fetch(2, 20, now_ms=500)
    proposed = state.maybe_shrink_isr(now_ms=500, replica_lag_time_max_ms=LAG_MS)
    assert proposed == frozenset({1, 2})
    assert state.high_watermark == 10  # 3 still counts until the controller agrees
    assert state.on_alter_partition_response(proposed, 5, 8)
    assert (state.isr, state.pending_isr, state.high_watermark) == (frozenset({1, 2}), None, 20)


def test_expand_needs_high_watermark_and_leader_epoch_start_offset() -> None:
    state = leader(leo=10, hw=6, isr=(1, 2))
    assert state.on_follower_fetch(3, 5, now_ms=0).proposed_isr is None  # below the hw
    assert state.on_follower_fetch(3, 8, now_ms=0).proposed_isr is None  # below epoch start 10
    decision = state.on_follower_fetch(3, 10, now_ms=0, broker_epoch=42)
    assert decision.proposed_isr == frozenset({1, 2, 3})
    assert state.isr_with_broker_epochs(decision.proposed_isr) == (
        (1, NO_BROKER_EPOCH),
        (2, NO_BROKER_EPOCH),
        (3, 42),
    )


def test_pending_expansion_holds_the_high_watermark_for_the_joiner() -> None:
    state = leader(leo=10, hw=10, isr=(1, 2))
    state.on_follower_fetch(3, 10, now_ms=0)  # proposes {1, 2, 3}
    state.on_leader_append(20, now_ms=0)
    state.on_follower_fetch(2, 20, now_ms=0)
    assert state.high_watermark == 10  # 3 is in the maximal ISR


def test_stale_alter_partition_answers_are_ignored() -> None:
    state = leader(leo=10, hw=10, isr=(1, 2))
    proposed = state.on_follower_fetch(3, 10, now_ms=0).proposed_isr
    assert proposed is not None
    state.on_alter_partition_response({1}, 5, 7)  # same partition epoch: stale
    state.on_alter_partition_response({1}, 4, 9)  # another leadership
    assert (state.isr, state.pending_isr) == (frozenset({1, 2}), proposed)
    state.on_alter_partition_error(ErrorCode.INVALID_UPDATE_VERSION, frozenset({1}))
    assert state.pending_isr == proposed  # not the answer to this proposal
    state.on_alter_partition_error(ErrorCode.INVALID_UPDATE_VERSION, proposed)
    assert state.pending_isr is None


# --- produce -------------------------------------------------------------------------------------


def test_check_produce_min_insync_replicas() -> None:
    state = leader(isr=(1, 2))
    assert state.check_produce(-1, 2) is None
    assert state.check_produce(-1, 3) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert state.check_produce(1, 3) is None  # acks=1 does not care


def test_acks_all_completion() -> None:
    state = caught_up(leader(leo=10, hw=0), now_ms=0)
    state.on_leader_append(15, now_ms=0)
    assert state.is_acks_all_complete(15, 2) == PENDING
    state.on_follower_fetch(2, 15, now_ms=0)
    state.on_follower_fetch(3, 15, now_ms=0)
    assert state.is_acks_all_complete(15, 2) is None


def test_acks_all_after_isr_shrank_below_min_insync() -> None:
    state = leader(leo=10, hw=10, isr=(1, 2))
    state.on_leader_append(15, now_ms=0)
    proposed = state.maybe_shrink_isr(now_ms=LAG_MS + 1, replica_lag_time_max_ms=LAG_MS)
    assert proposed == frozenset({1})
    state.on_alter_partition_response(proposed, 5, 8)
    assert state.is_acks_all_complete(15, 2) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


# --- transitions ---------------------------------------------------------------------------------


def test_leader_refuses_stale_epochs() -> None:
    state = leader()
    assert state.become_follower(2, 4, 99) == ErrorCode.FENCED_LEADER_EPOCH
    assert state.become_follower(2, 5, 6) == ErrorCode.FENCED_LEADER_EPOCH
    assert state.become_leader((1, 2, 3), (1,), 4, 99, 0) == ErrorCode.FENCED_LEADER_EPOCH
    follower = state.become_follower(2, 6, 8)
    assert isinstance(follower, FollowerState)
    assert (follower.leader_id, follower.log_end_offset, follower.high_watermark) == (2, 10, 10)


def test_follower_becomes_leader_with_its_own_offsets() -> None:
    follower = FollowerState(2, 1, 5, 7, log_end_offset=12, high_watermark=9)
    assert follower.become_leader((1, 2, 3), (1, 2, 3), 5, 6, 0) == ErrorCode.FENCED_LEADER_EPOCH
    state = follower.become_leader((1, 2, 3), (1, 2, 3), 6, 8, now_ms=0)
    assert isinstance(state, PartitionState)
    assert (state.high_watermark, state.leader_epoch_start_offset) == (9, 12)
    assert follower.become_follower(3, 4, 0) == ErrorCode.FENCED_LEADER_EPOCH


def test_isr_must_contain_the_leader(crash_stops: CrashStops) -> None:
    with pytest.raises(AssertionError):
        PartitionState.new_leader(1, (1, 2, 3), (2, 3), 0, 0, 0, 0, 0)
    with pytest.raises(AssertionError):
        PartitionState.new_leader(1, (1, 2), (1, 4), 0, 0, 0, 0, 0)
    # Outside tests these stop the broker (broker.fatal).
    assert [v.invariant for v in crash_stops.take()] == [
        "partition.leader-in-isr-within-replicas"
    ] * 2


# --- follower truncation (KIP-101, KIP-279) and high watermark ---------------------------------


def follower(leo: int, hw: int = 0) -> FollowerState:
    return FollowerState(2, 1, 5, 7, leo, hw)


def test_truncate_to_leader_end_of_our_latest_epoch() -> None:
    mine: list[EpochEntry] = [(1, 0), (3, 10)]
    answer = epoch_end_offset([(1, 0), (3, 10), (5, 14)], 3, 20)
    assert answer == EpochEndOffset(3, 14)
    assert follower(18).truncation_offset(answer, mine) == Truncation(14, True)
    assert follower(12).truncation_offset(answer, mine) == Truncation(12, True)  # nothing extra


def test_leader_never_had_our_epoch_kip_279() -> None:
    mine: list[EpochEntry] = [(1, 0), (2, 8)]  # epoch 2 was a leader that never replicated
    answer = epoch_end_offset([(1, 0), (3, 6)], 2, 20)
    assert answer == EpochEndOffset(1, 6)
    assert follower(12).truncation_offset(answer, mine) == Truncation(6, True)


def test_follower_missing_the_leader_epoch_asks_again() -> None:
    mine: list[EpochEntry] = [(1, 0), (4, 8)]
    answer = EpochEndOffset(2, 9)  # the leader's floor of 4 is 2, which this log never saw
    assert follower(12).truncation_offset(answer, mine) == Truncation(8, False)


def test_undefined_answer_truncates_to_high_watermark() -> None:
    assert follower(12, hw=7).truncation_offset(UNDEFINED, [(1, 0)]) == Truncation(7, True)


def test_follower_high_watermark_from_fetch_response() -> None:
    state = follower(10, hw=3)
    assert state.on_fetch_response(20) == 10  # capped by what this log holds
    assert state.on_fetch_response(5) == 10  # never lower
    state.on_truncate(6)
    assert (state.log_end_offset, state.high_watermark) == (6, 6)
