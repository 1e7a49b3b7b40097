"""pysyncobj 0.3.17 with its safety holes closed: the ``SyncObj`` the adapter (``raft``) runs.

Why a module of its own: this is the code that reaches into pysyncobj's private,
name-mangled internals and must be re-checked against every new pysyncobj version
(``TESTED_PYSYNCOBJ_VERSIONS``); the adapter above it uses only pysyncobj's public surface.

- **The fix** (pysyncobj.md hazard 1): :class:`FixedSyncObj` overrides two message
  handlers. Followers keep entries they already have with the same (index, term) and
  truncate only at the first conflicting entry; they acknowledge and commit only up to
  what the current leader's message verified. Leaders never move a follower's
  ``nextIndex`` backwards on an acknowledgement. Without this, a duplicated or re-sent
  AppendEntries makes a follower drop entries it already acknowledged, and committed,
  acknowledged writes are lost at the next election. ``tests/unit/quorum`` reproduces it.
  A candidate also counts each voter once per term: pysyncobj counts vote messages, so a
  duplicated vote could elect a leader without a majority (found by the 5-controller
  simulation in ``tests/unit/sim``). A conflict at an index this node already committed
  cannot happen in Raft: if it does, the node crash-stops (``broker.fatal``).
- **Durability** (hazard 2): we chose *flush before acknowledging*. A follower msyncs the
  journal before it acknowledges new entries, and the leader msyncs its journal at the
  start of each tick, before it counts itself towards a commit. Cost: one msync per
  AppendEntries that carried new entries (measured in ``test_quorum_durability``). The
  ``.meta`` file (current term and vote), which pysyncobj writes synchronously before it
  sends the vote or answers an AppendEntries of a newer term but never fsyncs, goes through
  :class:`DurableMetaStorer`: file fsync, rename, directory fsync. It is installed at the first
  tick, before any message is handled or any vote is cast (both happen only in ticks).
- **Compaction** (with a dump, ``journal_snapshot``): pysyncobj trims the journal by rewriting
  it in place, and at start-up clears it unless it begins at the dump. A node stopped during
  the rewrite, or in the tick between the dump's rename and the trim, restarted without
  entries it had acknowledged. :func:`delete_journal_prefix` replaces the journal durably
  instead, and the start-up load trims the journal to the dump before pysyncobj looks at it.
  A failed fsync of the term, the vote, the dump or the journal crash-stops the node.
- **Deposed leaders** answer their pending submits at once when the term moves on.
- **Simulation**: :class:`SimNode` hashes independently of ``PYTHONHASHSEED`` and
  :func:`simulated_time` puts pysyncobj on a virtual clock and a seeded RNG.
"""

from __future__ import annotations

import contextlib
import functools
import random
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Final

import pysyncobj.syncobj as _pso  # type: ignore[import-untyped]
from pysyncobj import FAIL_REASON, SyncObj
from pysyncobj.journal import (  # type: ignore[import-untyped]
    LAST_RECORD_OFFSET_OFFSET as _JOURNAL_LAST_RECORD_OFFSET_AT,
)
from pysyncobj.journal import MetaStorer, ResizableFile
from pysyncobj.node import TCPNode  # type: ignore[import-untyped]
from pysyncobj.pickle import dumps as _pso_dumps  # type: ignore[import-untyped]
from pysyncobj.pickle import loads as _pso_loads
from pysyncobj.pickle import to_bytes as _pso_to_bytes

from broker.fatal import fatal
from metadata_log.durable_files import replace_durably

# The fix reaches into pysyncobj's private (name-mangled) internals; it was written and
# tested against these versions only. Another version must be re-checked first.
TESTED_PYSYNCOBJ_VERSIONS: Final = frozenset({"0.3.17"})
_LEADER: Final = 2  # pysyncobj's _RAFT_STATE.LEADER
# pysyncobj's journal file format: each entry is size, (index, term, command), size
_JOURNAL_ENTRY: Final = struct.Struct("<QQ")
_JOURNAL_SIZE: Final = struct.Struct("<I")


class FixedSyncObj(SyncObj):  # type: ignore[misc]
    """SyncObj with the acknowledged-write-loss fix and flush-before-acknowledge.

    Only two message handlers change; everything else is pysyncobj 0.3.17 as shipped.
    The names ``_SyncObj__x`` are how Python spells SyncObj's private ``__x`` from here.
    """

    # SyncObj's private attributes that we assign (declared for the type checker).
    _SyncObj__recvTransmission: bytes | str
    _SyncObj__raftCommitIndex: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Set before SyncObj.__init__ so that snapshots exclude them.
        self._kraft_flushed_mark: tuple[int, int] | None = None
        self._kraft_waits_term = 0
        self._kraft_votes_term: object = None
        self._kraft_voters: set[str] = set()
        self._kraft_meta_durable = False
        super().__init__(*args, **kwargs)
        assert not self.conf.dynamicMembershipChange, "the fix assumes static membership"

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        kind = message["type"]
        if (
            kind == "append_entries"
            and "prevLogIdx" in message
            and message["term"] >= self._SyncObj__raftCurrentTerm
            and message.get("transmission") not in ("start", "process")  # those only buffer
        ):
            self._follower_append_entries(node, message)
        elif kind == "next_node_idx" and self._SyncObj__raftState == _LEADER:
            self._leader_on_next_node_idx(node, message)
        elif kind == "response_vote" and not self._first_vote_from(node, message):
            return  # pysyncobj counts vote messages, not voters: a duplicate must not count
        else:
            SyncObj._SyncObj__onMessageReceived(self, node, message)

    def _first_vote_from(self, node: Any, message: Any) -> bool:
        """Whether this is ``node``'s first vote for us in the message's term."""
        term = message.get("term")
        if self._kraft_votes_term != term:
            self._kraft_votes_term, self._kraft_voters = term, set()
        if node.id in self._kraft_voters:
            return False
        self._kraft_voters.add(node.id)
        return True

    def _follower_append_entries(self, node: Any, message: Any) -> None:
        entries = message.get("entries", [])
        if message.get("transmission") == "finish":
            entries = [_pso_loads(self._SyncObj__recvTransmission + message["data"])]
            self._SyncObj__recvTransmission = ""
        # Term, leader, election timer and follower state: the library's own code, fed a
        # message that carries neither log entries nor a commit index.
        header = {"type": "append_entries", "term": message["term"], "commit_index": 0}
        SyncObj._SyncObj__onMessageReceived(self, node, header)
        self._SyncObj__leaderCommitIndex = message["commit_index"]

        prev_index, prev_term = message["prevLogIdx"], message["prevLogTerm"]
        prev = self._SyncObj__getEntries(prev_index, 1)
        if not prev:
            self._SyncObj__sendNextNodeIdx(node, success=False, reset=True)
            return
        if prev[0][2] != prev_term:
            self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=prev_index, success=False, reset=True)
            return
        if self._append_from_first_conflict(prev_index, entries):
            self._flush_journal()  # durable before we acknowledge (hazard 2)
        # Acknowledge and commit only what this message verified against the leader: our
        # log may continue past it with entries the current leader has not vouched for.
        verified = prev_index + len(entries)
        self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=verified + 1, success=True)
        commit_index = min(message["commit_index"], verified)
        if commit_index > self._SyncObj__raftCommitIndex:
            self._SyncObj__raftCommitIndex = commit_index
            self._SyncObj__raftLog.setRaftCommitIndex(commit_index)

    def _append_from_first_conflict(self, prev_index: int, entries: list[Any]) -> bool:
        """Raft §5.3: skip entries we already have; truncate only at the first conflict.

        pysyncobj instead deletes everything after ``prevLogIdx``, so a duplicated or
        re-sent AppendEntries shrinks the log below what this node already acknowledged.
        Returns whether the journal changed.
        """
        for position, entry in enumerate(entries):
            index, term = entry[1], entry[2]
            assert index == prev_index + 1 + position, (index, prev_index, position)
            mine = self._SyncObj__getEntries(index, 1)
            if mine and mine[0][2] == term:
                continue
            if mine:
                commit_index = self._SyncObj__raftCommitIndex
                if index <= commit_index:  # Raft: committed entries are never overwritten
                    fatal(
                        "raft.committed-entry-conflict",
                        "the leader sent another entry at an index this node committed",
                        index=index,
                        commit_index=commit_index,
                        term=mine[0][2],
                        leader_term=term,
                    )
                self._SyncObj__deleteEntriesFrom(index)
            for new_entry in entries[position:]:
                self._SyncObj__raftLog.add(*new_entry)
            return True
        return False

    def _leader_on_next_node_idx(self, node: Any, message: Any) -> None:
        next_index = self._SyncObj__raftNextIndex
        before = next_index.get(node)
        SyncObj._SyncObj__onMessageReceived(self, node, message)
        if before is None or node not in next_index:
            return
        if message["success"]:
            # A late acknowledgement must not rewind nextIndex: pysyncobj sends
            # optimistically, so several AppendEntries are in flight and acks lag.
            next_index[node] = max(next_index[node], before)
        # Entries up to matchIndex are verified on that follower; never re-send below them.
        next_index[node] = max(next_index[node], self._SyncObj__raftMatchIndex[node] + 1)

    def _onTick(self, timeToWait: float = 0.0) -> None:
        if not self._kraft_meta_durable:
            self._install_durable_meta()
        self._fail_waits_from_older_terms()
        if self._SyncObj__raftState == _LEADER:
            # The leader counts itself towards every commit (computed first thing in the
            # tick): make its own entries durable before that.
            log = self._SyncObj__raftLog
            mark = (len(log), log[-1][1])
            if mark != self._kraft_flushed_mark:
                self._flush_journal()
                self._kraft_flushed_mark = mark
        SyncObj._onTick(self, timeToWait)

    def _fail_waits_from_older_terms(self) -> None:
        """Answer submits of a deposed leader as LEADER_CHANGED (outcome unknown).

        pysyncobj answers a submit only when the log reaches its index. A leader deposed
        after appending is truncated by its successor, and if nobody writes again the
        callback never runs. Once the term moves on, each older pending submit may or may
        not commit; we say so at once, as Kafka's controller does when it resigns.
        """
        term = self._SyncObj__raftCurrentTerm
        if term == self._kraft_waits_term:
            return
        self._kraft_waits_term = term
        waiting = self._SyncObj__commandsWaitingCommit
        for index in [i for i, subs in waiting.items() if any(t < term for t, _ in subs)]:
            stale = [(t, cb) for t, cb in waiting[index] if t < term]
            kept = [(t, cb) for t, cb in waiting[index] if t >= term]
            if kept:
                waiting[index] = kept
            else:
                del waiting[index]
            for _term, callback in stale:
                callback(None, FAIL_REASON.LEADER_CHANGED)

    def _install_durable_meta(self) -> None:
        journal = self._SyncObj__raftLog
        storer = getattr(journal, "_FileJournal__metaStorer", None)  # MemoryJournal has none
        if storer is not None and not isinstance(storer, DurableMetaStorer):
            journal._FileJournal__metaStorer = DurableMetaStorer(storer.getPath())
            journal.deleteEntriesTo = functools.partial(delete_journal_prefix, journal)
        self._kraft_meta_durable = True

    def _SyncObj__loadDumpFile(self, clearJournal: bool) -> None:
        """pysyncobj's load of the compaction dump, without its loss on a restart.

        At start-up pysyncobj keeps the journal only if it begins with the dump's last two
        entries, and otherwise clears it. But it renames the dump into place one tick before it
        trims the journal: a node stopped between the two restarts with a journal that begins
        earlier and holds, after the dump's entries, entries it acknowledged, which the clear
        would lose. So the journal is trimmed to the dump's entries first, when it holds them.
        """
        serializer = self._SyncObj__serializer
        load = serializer.deserialize

        def deserialize_and_trim() -> Any:
            data = load()
            if not clearJournal:
                self._trim_journal_to(previous=data[2], last=data[1])
            return data

        serializer.deserialize = deserialize_and_trim
        try:
            SyncObj._SyncObj__loadDumpFile(self, clearJournal)
        finally:
            del serializer.deserialize  # the class's method again

    def _trim_journal_to(self, previous: Any, last: Any) -> None:
        journal = self._SyncObj__raftLog
        if len(journal) < 2:
            return
        at = previous[1] - journal[0][1]  # the journal's entries have consecutive indexes
        if 0 < at < len(journal) - 1 and journal[at] == previous and journal[at + 1] == last:
            journal.deleteEntriesTo(at)

    def _flush_journal(self) -> None:
        flush = getattr(self._SyncObj__raftLog, "flush", None)  # MemoryJournal has none
        if flush is not None:
            flush()  # FileJournal: msync of the journal's mmap


class DurableMetaStorer(MetaStorer):  # type: ignore[misc]
    """pysyncobj's ``.meta`` writer (term, vote, commit index), made durable.

    Raft's rule: the current term and vote are on stable storage before any message that
    reflects them leaves the node, or a crash after voting lets the node vote twice in one
    term. pysyncobj writes a temporary file and renames it, without fsync.
    """

    def storeMeta(self, meta: dict[str, object]) -> None:
        path = self.getPath()
        try:
            replace_durably(path, _pso_dumps(meta), mode=0o600)
        except OSError as exc:
            # A vote that may not be on disk must not be sent, and a failed fsync cannot be
            # retried into a durable state (the kernel may have dropped the dirty pages).
            fatal("quorum.meta-durable", f"raft term and vote not stored: {exc}", path=path)


def delete_journal_prefix(journal: Any, entry_to: int) -> None:
    """``FileJournal.deleteEntriesTo``, crash-safe: the journal keeps its entries from
    position ``entry_to`` on.

    pysyncobj rewrites the journal in place: it marks it empty, then appends the kept entries
    one by one, so a node stopped midway restarts without entries it acknowledged. Here the
    kept entries go to a new file in pysyncobj's format, which replaces the journal durably
    (``replace_durably``); then the journal is reopened on it.
    """
    kept = journal._FileJournal__journal[entry_to:]
    old = journal._FileJournal__journalFile
    path = old._ResizableFile__fileName
    header = bytearray(journal._FileJournal__getDefaultHeader())
    records = bytearray()
    for command, index, term in kept:
        data = _JOURNAL_ENTRY.pack(index, term) + _pso_to_bytes(command)
        size = _JOURNAL_SIZE.pack(len(data))
        records += size + data + size
    end = len(header) + len(records)
    _JOURNAL_SIZE.pack_into(header, _JOURNAL_LAST_RECORD_OFFSET_AT, end)
    old._destroy()  # msync and close: the old file stays whole until the rename
    try:
        replace_durably(path, bytes(header + records), mode=0o600)
    except OSError as exc:
        fatal("quorum.journal-compacted", f"raft journal not rewritten: {exc}", path=path)
    journal._FileJournal__journalFile = ResizableFile(path)
    journal._FileJournal__journal = list(kept)
    journal._FileJournal__currentOffset = end


class SimNode(TCPNode):  # type: ignore[misc]
    """A node whose hash does not depend on PYTHONHASHSEED.

    pysyncobj iterates over sets of nodes (votes, AppendEntries fan-out), so with the
    default string hash a simulation's message order, and its outcome, would vary from
    one process to the next even under the same seed.
    """

    def __hash__(self) -> int:
        return zlib.crc32(self.id.encode())


@contextlib.contextmanager
def simulated_time(clock: Callable[[], float], rng: random.Random) -> Iterator[None]:
    """Run pysyncobj on a virtual clock and a seeded RNG (process-global; tests only).

    pysyncobj reads ``monotonic()`` and ``random.random()`` through module globals, so
    this swaps them; no auto-ticking SyncObj may run in the process meanwhile.
    """
    saved = (_pso.monotonicTime, _pso.random)
    _pso.monotonicTime = clock
    _pso.random = rng
    try:
        yield
    finally:
        _pso.monotonicTime, _pso.random = saved
