"""A 3-controller in-memory cluster: election, epochs, dense identical offsets, fencing."""

from __future__ import annotations

import pytest
from quorum_sim import SimCluster

from kraft.quorum.codec import EntryKind, encode_entry
from kraft.quorum.raft import SubmitError, SubmitResult


def test_three_nodes_elect_commit_and_agree() -> None:
    cluster = SimCluster(seed=11)
    with cluster.running():
        cluster.run_until(lambda: cluster.active() is not None)
        leader = cluster.active()
        assert leader is not None
        node = cluster.nodes[leader]
        assert node.is_leader and node.epoch == node.raft_term
        assert all(n.leader == leader for n in cluster.nodes.values())
        results = [cluster.submit(leader, b"batch-%d" % i) for i in range(20)]
        cluster.run_until(lambda: all(n.high_watermark == 20 for n in cluster.nodes.values()))
        assert [r[0].offset for r in results] == list(range(20))
        cluster.assert_dense_prefixes(cluster.ids)
        for node_id in cluster.ids:
            assert [a.payload for a in cluster.applied[node_id]] == [
                b"batch-%d" % i for i in range(20)
            ]
            assert cluster.nodes[node_id].last_committed_offset == 19


def test_followers_refuse_and_a_new_leader_fences_the_old_epoch() -> None:
    cluster = SimCluster(seed=12)
    with cluster.running():
        cluster.run_until(lambda: cluster.active() is not None)
        old = cluster.active()
        assert old is not None
        follower = next(i for i in cluster.ids if i != old)
        refused = cluster.submit(follower, b"nope")
        assert refused == [SubmitResult(error=SubmitError.NOT_ACTIVE)]
        old_epoch = cluster.nodes[old].epoch

        cluster.pause(old)
        cluster.run_until(lambda: cluster.active() not in (None, old), max_steps=2000)
        new = cluster.active()
        assert new is not None and cluster.nodes[new].epoch > old_epoch
        # A batch stamped by the deposed controller reaches the log: rejected everywhere.
        late: list[SubmitResult] = []
        stale = encode_entry(EntryKind.RECORDS, old_epoch, b"stale")
        cluster.nodes[new]._state.apply_entry(stale, callback=lambda r, e: late.append(r))
        fresh = cluster.submit(new, b"fresh")
        live = [i for i in cluster.ids if i != old]
        cluster.run_until(
            lambda: bool(fresh) and all(cluster.nodes[i].high_watermark == 1 for i in live)
        )
        assert fresh == [SubmitResult(offset=0)]
        assert all(cluster.nodes[i].rejected_count == 1 for i in live)
        assert [a.payload for a in cluster.applied[new]] == [b"fresh"]


@pytest.mark.parametrize(("fixed", "expect_rewind"), [(True, False), (False, True)])
def test_late_acknowledgement_does_not_rewind_next_index(fixed: bool, expect_rewind: bool) -> None:
    """Leader half of the fix: an old ack arriving late leaves nextIndex where it was."""
    cluster = SimCluster(seed=13, fixed=fixed)
    with cluster.running():
        cluster.run_until(lambda: cluster.active() is not None)
        leader = cluster.active()
        assert leader is not None
        follower = next(i for i in cluster.ids if i != leader)
        obj = cluster.nodes[leader]._obj
        next_index = obj._SyncObj__raftNextIndex
        node = next(n for n in next_index if n.id == follower)
        cluster.submit(leader, b"a")
        cluster.tick(only=lambda i: i == leader)
        cluster.deliver_all(keep=lambda m: m.src == follower)  # follower acks, held
        first_acks = cluster.net.pending(src=follower, type="next_node_idx")
        for ack in first_acks:
            cluster.net.drop(ack)
        cluster.submit(leader, b"b")
        cluster.tick(only=lambda i: i == leader)
        sent_up_to = next_index[node]
        cluster.deliver_all(keep=lambda m: m.src == follower and m.dst == leader)
        for ack in first_acks:  # the first acknowledgements arrive late
            cluster.net.inject(ack)
            cluster.net.deliver(ack)
        rewound = next_index[node] < sent_up_to
        assert rewound == expect_rewind, (fixed, next_index[node], sent_up_to)


def test_a_deposed_leaders_pending_submits_are_answered_without_further_writes() -> None:
    """A cut-off leader's appended writes are truncated by its successor. They still get an
    answer (outcome unknown) once its term moves on, not only when the log next grows."""
    cluster = SimCluster(seed=14)
    with cluster.running():
        cluster.run_until(lambda: cluster.active() is not None)
        old = cluster.active()
        assert old is not None
        cluster.net.down.add(old)  # cut off, but it keeps ticking and believes it leads
        pending = [cluster.submit(old, b"orphan-%d" % i) for i in range(3)]
        cluster.step()
        assert pending == [[], [], []]
        cluster.run_until(lambda: cluster.active() not in (None, old), max_steps=2000)
        cluster.net.down.discard(old)
        cluster.run_until(lambda: all(results for results in pending), max_steps=500)
        assert pending == [[SubmitResult(error=SubmitError.OUTCOME_UNKNOWN)]] * 3
        new = cluster.active()
        assert new is not None and new != old
        cluster.run_until(lambda: cluster.nodes[old].raft_term == cluster.nodes[new].raft_term)
        assert all(not a.payload.startswith(b"orphan") for a in cluster.applied[old])


def test_a_batch_larger_than_one_entry_commits_atomically_everywhere() -> None:
    cluster = SimCluster(seed=15)
    with cluster.running():
        cluster.run_until(lambda: cluster.active() is not None)
        leader = cluster.active()
        assert leader is not None
        big = bytes(range(256)) * 1000  # 256 kB: five entries
        results = cluster.submit_batch(leader, big, count=1000)
        after = cluster.submit(leader, b"after")
        cluster.run_until(lambda: bool(results) and bool(after))
        assert results == [SubmitResult(offset=0)] and after == [SubmitResult(offset=1000)]
        cluster.run_until(lambda: all(n.high_watermark == 1001 for n in cluster.nodes.values()))
        for node_id in cluster.ids:
            first, second = cluster.applied[node_id]
            assert (first.offset, first.count, first.payload) == (0, 1000, big)
            assert (second.offset, second.payload) == (1000, b"after")
