"""Broken invariants in the Raft adapter and the quorum controller stop the node (``broker.fatal``).

Each test provokes one invariant and checks that the stop handler saw it, by name and with its
values; in a node the handler is ``halt`` (one CRITICAL line, exit status 70), here the test's
(``conftest.crash_stops``), which raises instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from crash_stops import CrashStops
from quorum_sim import SimCluster

import kraft.quorum.quorum_controller as quorum_controller_module
import kraft.quorum.raft as raft_module
from broker.fatal import InvariantViolation
from kraft.controller.result import ControllerConfig
from kraft.quorum.memnet import InFlight
from kraft.quorum.quorum_controller import QuorumController
from kraft.quorum.raft import RaftSettings, SubmitResult
from kraft.quorum.state import Appended
from metadata_log.records import build_metadata_batch


@contextlib.contextmanager
def active_cluster(seed: int, writes: int) -> Iterator[tuple[SimCluster, str]]:
    """Three nodes, an active leader, ``writes`` batches committed and applied everywhere."""
    cluster = SimCluster(seed=seed)
    with cluster.running():
        cluster.run_until(lambda: cluster.active() is not None)
        leader = cluster.active()
        assert leader is not None
        for i in range(writes):
            cluster.submit(leader, b"batch-%d" % i)
        cluster.run_until(lambda: all(n.high_watermark == writes for n in cluster.nodes.values()))
        yield cluster, leader


# --- the Raft adapter ----------------------------------------------------------------------------


def test_a_conflict_at_a_committed_index_stops_the_follower(crash_stops: CrashStops) -> None:
    """Raft never overwrites a committed entry; a leader's message that would is refused by
    stopping (the fixed follower used to log 'Raft invariant broken' and truncate anyway)."""
    with active_cluster(seed=21, writes=3) as (cluster, leader):
        follower = next(i for i in cluster.ids if i != leader)
        obj = cluster.nodes[follower]._obj
        commit_index = obj._SyncObj__raftCommitIndex
        (prev,) = obj._SyncObj__getEntries(commit_index - 1, 1)
        (mine,) = obj._SyncObj__getEntries(commit_index, 1)
        forged = {
            "type": "append_entries",
            "term": obj.raftCurrentTerm,
            "commit_index": commit_index,
            "prevLogIdx": prev[1],
            "prevLogTerm": prev[2],
            "entries": [(mine[0], commit_index, mine[2] + 1)],  # same index, another term
        }
        item = InFlight(10**6, leader, follower, pickle.dumps(forged))
        cluster.net.inject(item)
        with pytest.raises(InvariantViolation):
            cluster.net.deliver(item)
        (stop,) = crash_stops.take()
        assert stop.invariant == "raft.committed-entry-conflict"
        assert stop.values == {
            "index": commit_index,
            "commit_index": commit_index,
            "term": mine[2],
            "leader_term": mine[2] + 1,
        }
        # Nothing was truncated: the committed entry is still there.
        assert obj._SyncObj__getEntries(commit_index, 1) == [mine]


def test_apply_rules_that_raise_stop_the_node(
    crash_stops: CrashStops, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pure apply rules are total; if they raise, the node stops (it used to reject the
    entry and carry on, with a state that no longer follows from the log)."""
    with active_cluster(seed=22, writes=1) as (cluster, leader):

        def broken(state: Any, data: object) -> Any:
            raise KeyError("a bug")

        monkeypatch.setattr(raft_module, "apply_entry", broken)
        cluster.submit(leader, b"next")
        with pytest.raises(InvariantViolation):
            cluster.run_until(lambda: False, max_steps=50)
        stop = crash_stops.take()[0]
        assert stop.invariant == "quorum.apply-is-total"
        assert "KeyError" in stop.message


def test_a_failing_listener_stops_the_node(crash_stops: CrashStops) -> None:
    """A listener (the controller's image) that fails on a committed batch would miss it for
    good: the node stops instead of logging 'metadata log listener failed'."""
    with active_cluster(seed=23, writes=1) as (cluster, leader):
        follower = next(i for i in cluster.ids if i != leader)

        def failing(appended: Appended) -> None:
            raise ValueError(f"cannot apply {appended.offset}")

        cluster.nodes[follower].add_listener(failing)
        cluster.submit(leader, b"next")
        with pytest.raises(InvariantViolation):
            cluster.run_until(lambda: False, max_steps=50)
        (stop,) = crash_stops.take()
        assert stop.invariant == "quorum.listeners-see-every-batch"
        assert stop.values["offset"] == 1


# --- the quorum controller -------------------------------------------------------------------


class _FakeQuorum:
    """Stands in for ``RaftQuorum``: always active, commits at an offset the test chooses."""

    def __init__(
        self, settings: RaftSettings, listeners: tuple[Any, ...] = (), snapshots: Any = None
    ) -> None:
        self.is_active = True
        self.epoch = 1
        self.commit_at = 0

    def submit_future(self, payload: bytes, count: int = 1) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[SubmitResult] = concurrent.futures.Future()
        future.set_result(SubmitResult(offset=self.commit_at))
        return future

    def close(self) -> None:
        pass


def _controller() -> QuorumController:
    settings = RaftSettings("c:1", (), "c:1", "unused", Path("/nonexistent"))
    with mock.patch.object(quorum_controller_module, "RaftQuorum", _FakeQuorum):
        return QuorumController(settings, ControllerConfig())


def _batch(qc: QuorumController) -> tuple[bytes, int]:
    records = qc.controller.bootstrap(qc.image).records
    return build_metadata_batch(records, base_offset=0, epoch=1, timestamp_ms=0), len(records)


def test_a_command_committed_elsewhere_than_after_its_image_stops(
    crash_stops: CrashStops,
) -> None:
    """Commands run one at a time on the committed image, so their records commit at the next
    offset; anything else used to be logged as 'command handled at N committed at M'."""
    qc = _controller()
    qc.quorum.commit_at = 7  # type: ignore[attr-defined]
    with pytest.raises(InvariantViolation):
        asyncio.run(qc.submit(qc.controller.bootstrap))
    (stop,) = crash_stops.take()
    assert stop.invariant == "controller.command-commits-after-its-image"
    assert stop.values == {"handled_at": -1, "committed_at": 7}


def test_a_batch_that_does_not_follow_the_image_stops(crash_stops: CrashStops) -> None:
    qc = _controller()
    payload, count = _batch(qc)
    with pytest.raises(InvariantViolation):
        qc._on_appended(Appended(offset=3, epoch=1, payload=payload, count=count))
    (stop,) = crash_stops.take()
    assert stop.invariant == "controller.image-follows-the-log"
    assert stop.values == {"image_offset": -1, "batch_offset": 3}
    assert qc.image.offset == -1


def test_a_committed_batch_that_does_not_replay_stops(crash_stops: CrashStops) -> None:
    """Used to be 'skipping undecodable metadata batch': the image then differed from the log."""
    qc = _controller()
    payload, count = _batch(qc)
    damaged = payload[:-1] + bytes([payload[-1] ^ 0xFF])  # the batch CRC no longer matches
    with pytest.raises(InvariantViolation):
        qc._on_appended(Appended(offset=0, epoch=1, payload=damaged, count=count))
    with pytest.raises(InvariantViolation):
        qc._on_appended(Appended(offset=0, epoch=1, payload=payload, count=count + 1))
    stops = crash_stops.take()
    assert [s.invariant for s in stops] == ["controller.committed-batches-replay"] * 2
    assert stops[1].values == {"offset": 0, "count": count + 1, "epoch": 1}
    qc._on_appended(Appended(offset=0, epoch=1, payload=payload, count=count))
    assert qc.image.offset == count - 1  # the good batch applies as before
