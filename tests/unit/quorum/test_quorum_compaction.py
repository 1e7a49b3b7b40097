"""Journal compaction and the durable vote, on a simulated 3-node quorum with real files.

The quorum runs on the in-memory network (``kraft.quorum.memnet``) and a virtual clock, but
each node's journal, ``.meta`` and compaction dump are files in its own directory, so a
"restart" is a new node on the same directory. The state machine is a toy key/value image
(each batch sets one key), small whatever the history: what compaction must keep bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pysyncobj.pickle as pso_pickle  # type: ignore[import-untyped]
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.quorum import fixed_syncobj
from kraft.quorum.fixed_syncobj import simulated_time
from kraft.quorum.journal_snapshot import (
    CorruptJournalSnapshotError,
    JournalSnapshot,
    decode_journal_snapshot,
    encode_journal_snapshot,
)
from kraft.quorum.memnet import MemoryNetwork
from kraft.quorum.raft import JOURNAL_FILE_NAME, RaftQuorum, SubmitResult
from kraft.quorum.state import Appended, LogState

MIN_ENTRIES = 50
TICK_S = 0.01


class KeyValueImage:
    """A toy image: batch ``b"key=value"`` sets a key. Implements ``ImageSnapshots``."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.end_offset = 0
        self.applied = 0  # batches seen through the listener (replay included)
        self.restores = 0

    def on_appended(self, appended: Appended) -> None:
        assert appended.offset == self.end_offset, (appended.offset, self.end_offset)
        key, _, value = appended.payload.decode().partition("=")
        self.values[key] = value
        self.end_offset = appended.last_offset + 1
        self.applied += 1

    def take_snapshot(self, end_offset: int) -> tuple[int, bytes]:
        assert end_offset == self.end_offset
        return 0, json.dumps(self.values, sort_keys=True).encode()

    def restore_snapshot(self, end_offset: int, epoch: int, data: bytes) -> None:
        self.values = json.loads(data) if data else {}
        self.end_offset = end_offset
        self.restores += 1


class Cluster:
    def __init__(self, root: Path, seed: int) -> None:
        self.root = root
        self.ids = [f"n{i}:{9000 + i}" for i in range(3)]
        self.net = MemoryNetwork()
        self.now = 0.0
        self.rng = random.Random(seed)
        self.nodes: dict[str, RaftQuorum] = {}
        self.images: dict[str, KeyValueImage] = {}
        self.down: set[str] = set()

    def start(self, node_id: str) -> None:
        image = KeyValueImage()
        self.images[node_id] = image
        self.nodes[node_id] = RaftQuorum.for_simulation(
            node_id,
            tuple(i for i in self.ids if i != node_id),
            self.net.transport_factory,
            data_dir=self.root / node_id.split(":")[0],
            listeners=(image.on_appended,),
            snapshots=image,
            compaction_min_entries=MIN_ENTRIES,
        )
        self.net.connect_all()

    def stop(self, node_id: str) -> None:
        self.nodes.pop(node_id).close()

    def step(self) -> None:
        self.now += TICK_S
        for node_id, node in list(self.nodes.items()):
            if node_id not in self.down:
                node.tick()
        self.net.deliver_all()

    def run_until(self, predicate: Any, max_steps: int = 3000) -> None:
        for _ in range(max_steps):
            if predicate():
                return
            self.step()
        raise AssertionError("condition not reached")

    def active(self) -> RaftQuorum | None:
        return next((n for i, n in self.nodes.items() if i not in self.down and n.is_active), None)

    def write(self, count: int, keys: int = 20) -> dict[str, str]:
        """``count`` committed changes over ``keys`` keys; returns the expected image."""
        expected: dict[str, str] = {}
        for start in range(0, count, 25):
            self.run_until(lambda: self.active() is not None)
            active = self.active()
            assert active is not None
            results: list[SubmitResult] = []
            end = min(count, start + 25)
            for i in range(start, end):
                key, value = f"k{self.rng.randrange(keys)}", f"v{i}"
                expected[key] = value
                active.submit(f"{key}={value}".encode(), results.append)
            self.run_until(lambda n=end - start, got=results: len(got) == n)
            assert all(r.offset is not None for r in results), results
        return expected

    @contextlib.contextmanager
    def running(self) -> Iterator[Cluster]:
        with simulated_time(lambda: self.now, random.Random(self.rng.random())):
            try:
                for node_id in self.ids:
                    self.start(node_id)
                self.run_until(lambda: self.active() is not None)
                yield self
            finally:
                for node in self.nodes.values():
                    node.close()


def _everyone_has(cluster: Cluster, expected: dict[str, str], end_offset: int) -> bool:
    return all(
        image.end_offset == end_offset and image.values == expected
        for node_id, image in cluster.images.items()
        if node_id in cluster.nodes and node_id not in cluster.down
    )


def test_the_journal_stays_bounded_and_a_restart_restores_the_same_image(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, seed=1)
    with cluster.running():
        expected = cluster.write(1000)
        cluster.run_until(lambda: _everyone_has(cluster, expected, 1000))
        for node in cluster.nodes.values():
            assert node.journal_entries <= 2 * MIN_ENTRIES + 5, node.journal_entries
            assert node.high_watermark == 1000

        restarted = next(i for i, n in cluster.nodes.items() if not n.is_leader)
        cluster.stop(restarted)
        cluster.start(restarted)
        cluster.run_until(lambda: _everyone_has(cluster, expected, 1000))
        image = cluster.images[restarted]
        assert image.restores == 1  # it started from the compaction dump ...
        assert image.applied <= 2 * MIN_ENTRIES  # ... and replayed only the journal after it

        more = cluster.write(100)
        cluster.run_until(lambda: _everyone_has(cluster, expected | more, 1100))


def test_a_node_behind_the_compacted_journal_catches_up_by_snapshot(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, seed=2)
    with cluster.running():
        late = next(i for i, n in cluster.nodes.items() if not n.is_leader)
        cluster.down.add(late)
        cluster.net.down.add(late)
        expected = cluster.write(600)
        cluster.down.discard(late)
        cluster.net.down.discard(late)
        cluster.run_until(lambda: _everyone_has(cluster, expected, 600))
        assert cluster.images[late].restores >= 1, "caught up without a snapshot install"
        assert cluster.images[late].applied < 600
        cluster.stop(late)  # and what it installed survives its restart
        cluster.start(late)
        cluster.run_until(lambda: _everyone_has(cluster, expected, 600))


def _journal(node: RaftQuorum) -> Any:
    return node._obj._SyncObj__raftLog


def test_a_node_stopped_between_the_dump_and_the_journal_trim_keeps_its_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pysyncobj renames its compaction dump into place one tick before it trims the journal.
    A node stopped in between restarts with a journal that begins before the dump and holds
    entries after it, which it has acknowledged: they must survive the restart (pysyncobj's
    own start-up load cleared the journal down to the dump's two entries)."""
    victims: list[RaftQuorum] = []  # the node whose next trim is "interrupted"
    stopped_after_dump: list[int] = []
    trim = fixed_syncobj.delete_journal_prefix

    def trim_unless_stopped(journal: Any, entry_to: int) -> None:
        if not victims or journal is not _journal(victims[0]):
            return trim(journal, entry_to)
        node = victims.pop()
        stopped_after_dump.append(len(journal))
        # no compaction after the interrupted one: the entries written next stay after the dump
        node._obj._SyncObj__conf.logCompactionMinEntries = 10**9
        node._obj._SyncObj__conf.logCompactionMinTime = 10**9
        node._compaction_max_bytes = 10**12

    monkeypatch.setattr(fixed_syncobj, "delete_journal_prefix", trim_unless_stopped)
    cluster = Cluster(tmp_path, seed=4)
    with cluster.running():
        victim = next(i for i, n in cluster.nodes.items() if not n.is_leader)
        node = cluster.nodes[victim]
        victims.append(node)
        cluster.write(MIN_ENTRIES + 10)
        cluster.run_until(lambda: bool(stopped_after_dump))
        expected = cluster.write(3 * MIN_ENTRIES)
        end = 4 * MIN_ENTRIES + 10
        cluster.run_until(lambda: node.high_watermark == end)
        journal = _journal(node)
        first, last = journal[0][1], journal[-1][1]
        assert first <= 2 < MIN_ENTRIES < last, "the journal was trimmed after all"

        cluster.stop(victim)
        cluster.down.add(victim)
        cluster.net.down.add(victim)  # nothing from the leader: only its own files count
        cluster.start(victim)
        restarted = cluster.nodes[victim]
        for _ in range(3):
            restarted.tick()
        journal = _journal(restarted)
        assert journal[-1][1] == last, f"entries {journal[-1][1] + 1}..{last} lost at restart"
        assert journal[0][1] > first  # trimmed to the dump, not replayed from the start
        assert cluster.images[victim].restores == 1

        cluster.down.discard(victim)
        cluster.net.down.discard(victim)
        cluster.run_until(lambda: cluster.images[victim].end_offset == end)
        assert all(cluster.images[victim].values[k] == v for k, v in expected.items())


@given(
    entries=st.lists(
        st.tuples(st.binary(max_size=300), st.integers(0, 2**31)), min_size=1, max_size=40
    ),
    data=st.data(),
)
def test_a_compacted_journal_reads_back_with_the_entries_kept(
    entries: list[tuple[bytes, int]], data: st.DataObject
) -> None:
    """``delete_journal_prefix`` writes pysyncobj's own format: pysyncobj's ``FileJournal``
    reopens it with exactly the entries from the cut on, and appends after them."""
    import tempfile

    from pysyncobj.journal import FileJournal  # type: ignore[import-untyped]

    cut = data.draw(st.integers(0, len(entries)))
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "journal")
        journal = FileJournal(path)
        for index, (command, term) in enumerate(entries, start=1):
            journal.add(command, index, term)
        fixed_syncobj.delete_journal_prefix(journal, cut)
        kept = [(c, i, t) for i, (c, t) in enumerate(entries, start=1)][cut:]
        assert [journal[i] for i in range(len(journal))] == kept
        journal.add(b"next", len(entries) + 1, 7)
        journal._destroy()
        reopened = FileJournal(path)
        assert [reopened[i] for i in range(len(reopened))] == [
            *kept,
            (b"next", len(entries) + 1, 7),
        ]
        reopened._destroy()


def test_a_vote_is_fsynced_before_it_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Raft's rule: term and vote on stable storage before the vote leaves the node."""
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        real_fsync(fd)
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(os, "fsync", recording_fsync)
    cluster = Cluster(tmp_path, seed=3)
    votes: list[tuple[str, int]] = []
    enqueue = cluster.net._enqueue

    def checking_enqueue(src: str, dst: str, message: Any) -> bool:
        if message.get("type") == "response_vote":
            directory = tmp_path / src.split(":")[0]
            meta_path = directory / f"{JOURNAL_FILE_NAME}.meta"
            meta = pso_pickle.loads(meta_path.read_bytes())
            assert (meta["currentTerm"], meta["votedForNodeId"]) == (message["term"], dst)
            assert synced[-2:] == [f"{meta_path}.tmp", str(directory)], synced[-2:]
            votes.append((src, message["term"]))
        return enqueue(src, dst, message)

    cluster.net._enqueue = checking_enqueue  # type: ignore[method-assign]
    with cluster.running():
        leader = cluster.active()
        assert leader is not None
        cluster.down.add(next(i for i, n in cluster.nodes.items() if n is leader))
        cluster.run_until(lambda: cluster.active() not in (None, leader))
    assert len(votes) >= 2  # two elections, a vote in each


_ENTRY = st.tuples(st.binary(max_size=64), st.integers(1, 2**40), st.integers(0, 2**31))


@st.composite
def _snapshots(draw: st.DrawFn) -> JournalSnapshot:
    command, index, term = draw(_ENTRY)
    pending = tuple(draw(st.lists(st.binary(max_size=32), max_size=3)))
    key = draw(st.none() | st.tuples(*[st.integers(0, 2**32 - 1)] * 3))
    state = LogState(draw(st.integers(-1, 2**31 - 1)), draw(st.integers(0, 2**50)), 3, pending, key)
    previous = (draw(st.binary(max_size=16)), index, term)
    return JournalSnapshot(
        previous,
        (command, index + 1, term),
        state,
        draw(st.integers(0, 2**31 - 1)),
        draw(st.binary(max_size=256)),
    )


@given(_snapshots())
def test_journal_snapshots_round_trip(snapshot: JournalSnapshot) -> None:
    assert decode_journal_snapshot(encode_journal_snapshot(snapshot)) == snapshot


@given(_snapshots(), st.data())
def test_a_damaged_journal_snapshot_is_refused(
    snapshot: JournalSnapshot, data: st.DataObject
) -> None:
    encoded = bytearray(encode_journal_snapshot(snapshot))
    if data.draw(st.booleans()):
        position = data.draw(st.integers(0, len(encoded) - 1))
        encoded[position] ^= data.draw(st.integers(1, 255))
    else:
        del encoded[data.draw(st.integers(0, len(encoded) - 1)) :]
    with pytest.raises(CorruptJournalSnapshotError):
        decode_journal_snapshot(bytes(encoded))
