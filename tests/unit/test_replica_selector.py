"""KIP-392's RackAwareReplicaSelector and the leader's choice of candidates, against a model
written from Kafka's description: the leader unless the client's rack has replicas and the
leader is not among them; then the most caught-up replica of that rack.  Candidates: in-sync
followers whose log holds the fetch offset."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.replica_selector import FollowerView, ReplicaView, preferred_read_replica, rack_aware

RACKS = st.sampled_from(["", "a", "b", "c"])


def views(draw: st.DrawFn) -> tuple[ReplicaView, list[ReplicaView]]:
    n = draw(st.integers(0, 5))
    replicas = [
        ReplicaView(i, draw(st.none() | RACKS), draw(st.integers(0, 9)), draw(st.integers(0, 9)))
        for i in range(1, n + 2)
    ]
    return replicas[0], replicas


@given(st.data(), RACKS)
def test_rack_aware_matches_the_model(data: st.DataObject, client_rack: str) -> None:
    leader, replicas = data.draw(st.composite(views)())
    chosen = rack_aware(client_rack, leader, replicas)
    same = [r for r in replicas if client_rack and r.rack == client_rack]
    if not same or leader in same:
        assert chosen == leader.broker_id
    else:
        best = max((r.log_end_offset, -r.time_since_caught_up_ms) for r in same)
        (picked,) = [r for r in replicas if r.broker_id == chosen]
        assert picked in same
        assert (picked.log_end_offset, -picked.time_since_caught_up_ms) == best


def test_only_in_sync_followers_holding_the_fetch_offset_are_candidates() -> None:
    racks = {1: "a", 2: "b", 3: "b", 4: "b"}
    followers = [
        FollowerView(2, in_sync=False, log_end_offset=100, last_caught_up_time_ms=0),
        FollowerView(3, in_sync=True, log_end_offset=40, last_caught_up_time_ms=900),
        FollowerView(4, in_sync=True, log_end_offset=60, last_caught_up_time_ms=500),
    ]

    def choose(offset: int, rack: str = "b") -> int | None:
        return preferred_read_replica(rack, offset, 1, 100, followers, racks.get, 1_000)

    assert choose(50) == 4  # 3 has not reached offset 50; 2 is out of the ISR
    assert choose(70) is None  # no in-sync replica of rack b holds 70: the leader
    assert choose(30) == 4  # both hold it: the higher log end offset wins
    assert choose(30, rack="a") is None  # the leader's own rack
    assert choose(30, rack="") is None
    # a follower whose log starts after the offset (DeleteRecords, retention) cannot serve it
    trimmed = [FollowerView(4, True, 60, 500, log_start_offset=40)]
    assert preferred_read_replica("b", 30, 1, 100, trimmed, racks.get, 1_000) is None
    assert preferred_read_replica("b", 40, 1, 100, trimmed, racks.get, 1_000) == 4
    tied = [FollowerView(3, True, 60, 900), FollowerView(4, True, 60, 500)]
    assert preferred_read_replica("b", 30, 1, 100, tied, racks.get, 1_000) == 3  # caught up later
