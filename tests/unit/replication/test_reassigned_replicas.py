"""A leader whose replica set grows at the same leader epoch (a reassignment adding replicas,
KIP-455) serves the new follower, counts it only once it has caught up, and proposes it for
the ISR then; the high watermark never waits for it before."""

from __future__ import annotations

from broker.replication.partition_state import PartitionState
from kafka_protocol.errors import ErrorCode


def test_an_added_replica_is_served_and_joins_the_isr_once_caught_up() -> None:
    state = PartitionState.new_leader(1, (1, 2), (1, 2), 5, 7, 100, 100, 0)
    assert state.on_follower_fetch(4, 0, 10).error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    state.update_replicas((4, 1, 2))  # the reassignment started: 4 is being added
    behind = state.on_follower_fetch(4, 0, 20)
    assert behind.error is None and behind.proposed_isr is None
    assert state.high_watermark == 100  # not held back by the new replica
    state.on_follower_fetch(4, 60, 30)
    joined = state.on_follower_fetch(4, 100, 40)
    assert joined.proposed_isr == frozenset({1, 2, 4})


def test_replicas_gone_stop_counting() -> None:
    state = PartitionState.new_leader(1, (1, 2, 3), (1, 2, 3), 5, 7, 100, 100, 0)
    state.update_replicas((1, 2))
    assert set(state.followers) == {2}
    assert state.on_follower_fetch(3, 100, 10).error is ErrorCode.NOT_LEADER_OR_FOLLOWER
