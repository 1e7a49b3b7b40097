"""A simulated controller disk for the metadata simulation (``metadata_sim``).

pysyncobj keeps its Raft log in a journal: ``FileJournal`` in production (an mmap that
``FixedSyncObj._flush_journal`` msyncs, plus a ``.meta`` file with the term, the vote and
the commit index), ``MemoryJournal`` when no file is configured, as in simulation.
``MemoryJournal`` cannot model a crash: it has no ``flush`` and nothing survives it.

:class:`SimJournal` behaves like ``FileJournal`` against a :class:`SimDisk` that outlives
the node:

- **Entries** reach the disk only on ``flush()`` (msync). A power loss keeps what was
  flushed (drop the journal, keep the disk); :meth:`SimJournal.kill` (``kill -9``: the page
  cache survives) keeps everything written.
- **Term and vote** are stored durably on every change, before any message reflecting them
  is sent (``FileJournal.setCurrentTerm`` writes ``.meta`` synchronously and
  ``fixed_syncobj.DurableMetaStorer`` fsyncs it, so it survives a power loss too); the commit
  index is stored with them and by the one-second timer, as ``FileJournal`` does.
- **No compaction** here (the simulated disk has no dump file): journal compaction, its dump
  and snapshot installs are simulated on real files in ``tests/unit/quorum/
  test_quorum_compaction.py``.
- **Restart** replays: pysyncobj starts with ``raftCommitIndex = getRaftCommitIndex()`` and
  applies the journal up to it at its first tick, so listeners see the batches again from
  offset 0 (``MemoryJournal`` answers 1 there: it would replay nothing until a leader
  speaks). ``_destroy`` does not flush: a crash is not a clean shutdown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pysyncobj.journal import Journal  # type: ignore[import-untyped]

Entry = tuple[Any, int, int]  # pysyncobj's (command, raft index, raft term)


@dataclass
class SimDisk:
    """What one controller's storage holds, surviving crashes and restarts."""

    entries: list[Entry] = field(default_factory=list)  # the flushed journal
    term: int = 0
    voted_for: Any = None
    commit_index: int = 1  # FileJournal's default before anything is stored


class SimJournal(Journal):  # type: ignore[misc]
    """pysyncobj's journal interface over a :class:`SimDisk` (see the module docstring).

    Method and argument names are pysyncobj's.
    """

    def __init__(self, disk: SimDisk) -> None:
        self.disk = disk
        self._entries: list[Entry] = list(disk.entries)
        self._dirty_from = len(self._entries)  # entries from here on are not on the disk
        self._term = disk.term
        self._voted_for = disk.voted_for
        self._commit_index = disk.commit_index
        self._meta_saved = True

    # -- the log ------------------------------------------------------------------------

    def add(self, command: Any, idx: int, term: int) -> None:
        self._entries.append((command, idx, term))

    def clear(self) -> None:
        self._entries = []
        self._dirty_from = 0

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        del self._entries[entryFrom:]
        self._dirty_from = min(self._dirty_from, len(self._entries))

    def deleteEntriesTo(self, entryTo: int) -> None:
        self._entries = self._entries[entryTo:]
        self._dirty_from = 0

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def flush(self) -> None:
        """msync: the disk now holds exactly the journal."""
        start = min(self._dirty_from, len(self.disk.entries))
        self.disk.entries[start:] = self._entries[start:]
        self._dirty_from = len(self._entries)

    def unflushed(self) -> bool:
        """Whether a power loss now would lose journal writes."""
        return self._dirty_from < len(self._entries) or len(self.disk.entries) > len(self._entries)

    def _destroy(self) -> None:
        pass  # a crash: nothing more reaches the disk

    def kill(self) -> None:
        """``kill -9``: the page cache survives, so every write made reaches the disk; the
        commit index stays as last stored."""
        self.flush()

    # -- the .meta file -----------------------------------------------------------------

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        self._commit_index = raftCommitIndex
        self._meta_saved = False

    def getRaftCommitIndex(self) -> int:
        return self._commit_index

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        self._term, self._voted_for = term, votedForNodeId
        self._store_meta()

    def getCurrentTerm(self) -> int:
        return self._term

    def getVotedForNodeId(self) -> Any:
        return self._voted_for

    def onOneSecondTimer(self) -> None:
        if not self._meta_saved:
            self._store_meta()

    def _store_meta(self) -> None:
        disk = self.disk
        disk.term, disk.voted_for, disk.commit_index = (
            self._term,
            self._voted_for,
            self._commit_index,
        )
        self._meta_saved = True
