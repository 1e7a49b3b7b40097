"""Regression test for pysyncobj's acknowledged-write-loss bug (pysyncobj.md hazard 1).

Scenario (deterministic: virtual clock, in-memory network, every delivery chosen here):

1. Three controllers elect a leader L; it claims its epoch on all three.
2. Follower C pauses (no ticks, traffic dropped). L and B form the majority.
3. L commits and acknowledges 8 batches. The AppendEntries carrying the first one to B
   is duplicated by the network and held back.
4. The stale duplicate reaches B. Shipped pysyncobj deletes every entry after its
   ``prevLogIdx`` ("truncating already-applied log entries"): B's log shrinks below what
   it acknowledged. Then L dies and C comes back.
5. B and C elect a new leader and commit its epoch claim; with the fix it then commits 2
   more batches.

Raft allows message duplication and reordering, so a correct implementation loses nothing.
With the shipped library 7 of the 8 acknowledged batches vanish from C's log; with the
adapter's fix none do. The test runs both, so it proves that it reproduces the bug.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import pytest
from quorum_sim import SimCluster

WRITES = 8
SEEDS = range(5)


@dataclass
class Report:
    seed: int
    acked: int
    lost: list[tuple[int, bytes]]
    critical: list[str]
    survivors_agree: bool
    new_leader_wedged: bool


def _carries_entries(wire: bytes) -> bool:
    return bool(pickle.loads(wire).get("entries"))


def run_duplicate_append_entries(seed: int, *, fixed: bool) -> Report:
    cluster = SimCluster(seed=seed, fixed=fixed)
    with cluster.running():
        cluster.run_until(lambda: cluster.active() is not None)
        leader = cluster.active()
        assert leader is not None
        cluster.run_until(
            lambda: all(n.epoch == cluster.nodes[leader].epoch for n in cluster.nodes.values())
        )
        b, c = (i for i in cluster.ids if i != leader)
        cluster.pause(c)

        held = None
        for i in range(WRITES):
            cluster.submit(leader, b"write-%d" % i)
            cluster.tick(only=lambda node_id: node_id == leader)
            if held is None:
                (first,) = [
                    m
                    for m in cluster.net.pending(src=leader, dst=b, type="append_entries")
                    if _carries_entries(m.wire)
                ]
                held = cluster.net.duplicate(first)
                cluster.net.drop(held)
            cluster.deliver_all()
        cluster.run_until(lambda: len(cluster.acked) == WRITES)
        cluster.run_until(lambda: cluster.nodes[b].high_watermark == WRITES)  # B applied all

        assert held is not None
        cluster.net.inject(held)
        cluster.net.deliver(held)  # the stale duplicate arrives
        cluster.pause(leader)  # ... and the leader dies before anything else happens
        cluster.resume(c)

        # A new leader is elected and its epoch claim commits: C applies it.
        def new_epoch_applied_on_c() -> bool:
            leaders = [n for n in (b, c) if cluster.nodes[n].is_leader]
            return bool(leaders) and cluster.nodes[c].epoch == cluster.nodes[leaders[0]].raft_term

        cluster.run_until(new_epoch_applied_on_c, max_steps=2000)
        (new_leader,) = [n for n in (b, c) if cluster.nodes[n].is_leader]
        # With the fix the new leader is active and takes writes. Shipped pysyncobj leaves it
        # wedged instead: its last-applied index is past the end of its truncated log, so it
        # never applies its own epoch claim.
        wedged = not cluster.nodes[new_leader].is_active
        if not wedged:
            for i in range(2):
                cluster.submit(new_leader, b"after-%d" % i)
            cluster.run_until(lambda: len(cluster.acked) == WRITES + 2)
            target = cluster.nodes[new_leader].high_watermark
            cluster.run_until(
                lambda: all(cluster.nodes[n].high_watermark == target for n in (b, c))
            )
        lost = cluster.lost_acknowledged([b, c])
        agree = cluster.applied[b] == cluster.applied[c]
        return Report(seed, WRITES, lost, cluster.critical.messages, agree, wedged)


@pytest.mark.parametrize("seed", SEEDS)
def test_unpatched_pysyncobj_loses_acknowledged_writes(seed: int) -> None:
    report = run_duplicate_append_entries(seed, fixed=False)
    print(f"seed {seed} unpatched: lost {len(report.lost)} of {report.acked}: {report.lost}")
    assert len(report.lost) == WRITES - 1, f"seed {seed}: expected the bug to reproduce"
    assert any("truncating already-applied" in m for m in report.critical), report.critical
    assert not report.survivors_agree
    assert report.new_leader_wedged


@pytest.mark.parametrize("seed", SEEDS)
def test_patched_adapter_keeps_acknowledged_writes(seed: int) -> None:
    report = run_duplicate_append_entries(seed, fixed=True)
    assert report.lost == [], f"seed {seed}: lost acknowledged writes {report.lost}"
    assert report.critical == [], f"seed {seed}: {report.critical}"
    assert report.survivors_agree, f"seed {seed}: survivors diverged"
    assert not report.new_leader_wedged
