"""``LeaderEpochCache``: where each leader epoch starts in this log (Kafka's
``LeaderEpochFileCache``), written through to ``leader-epoch-checkpoint`` (Kafka's
``LeaderEpochCheckpointFile``).

File, in the partition directory, Kafka's text format::

    0                  format version
    3                  number of entries
    0 0                <leader_epoch> <start_offset>: epoch 0 starts at offset 0
    4 1200             epoch 4 starts at 1200 (epochs 1-3 left no batch here)
    7 5310

Theory of operation.  An entry ``(epoch, start_offset)`` says that the first batch stamped with
``epoch`` (or, for the first entry, the log start offset) is at ``start_offset``; epochs and
start offsets both strictly increase.  The entries are a function of the log's batch headers and
its log start offset:

    derive        walk the batch headers in offset order; a batch whose partition leader epoch
                  (>= 0) is newer than the latest entry opens an entry at its base offset (the
                  rule Kafka's segment recovery uses)
    from start    ``truncate_epochs_from_start(log_start_offset)`` (``truncateFromStart``):
                  entries at or below the log start collapse into the last of them, moved up
                  to the log start offset

"Every batch" means those still in the segment files, below the log start too, so a restart,
which can only read the headers left, finds the same cache.  That departs from Kafka's cache in
two corners, both about the entry for the log start: after retention deleted every batch at or
below the log start (the log is empty, or, with compaction gaps, starts in a gap), Kafka keeps
that entry and this cache drops it; after a truncation down to the log start, Kafka drops it and
this cache keeps it (the epoch of the last batch below, still in the files).  Without gaps (this
broker does not compact) the first changes no OffsetForLeaderEpoch answer of a log holding a
record; with a gap, an epoch older than every entry ends at the first batch after the gap
instead of at the log start.

Every change to the log keeps that function true incrementally: an append assigns its newer
epochs (``derive_epochs``); ``truncate_to`` drops entries at or after the new log end
(``truncate_epochs``); moving the log start (retention, DeleteRecords) truncates from the start;
a full truncation clears; retention that deletes the last batch at or below the log start
drops the entry for it.  The log refuses batches whose epochs go backwards, so epochs along
the log never decrease: that is what makes the incremental rules agree with a re-derivation.

Each change rewrites the file atomically (checkpoint.py), after the data change it follows and
after the log start offset checkpoint.  So after a crash the file may name epochs of data that
was lost, or lack epochs of data not yet flushed, both at or after the recovery point: the
loader keeps what lies below it and re-derives the rest from the headers it re-validates anyway
(loader.py).  A missing file (a log from before this file existed) or an unreadable one (logged)
is rebuilt from every batch header.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from broker.log.checkpoint import write_atomically
from broker.log.epochs import (
    EpochEndOffset,
    EpochEntry,
    assign_epoch,
    epoch_end_offset,
    truncate_epochs,
)
from broker.storage import Storage, join

logger = logging.getLogger("broker.log")

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
LEADER_EPOCH_CHECKPOINT_VERSION = 0


# --- pure rules --------------------------------------------------------------------------------


def derive_epochs(epochs: list[EpochEntry], batches: Iterable[EpochEntry]) -> bool:
    """Apply the derive rule to ``(partition_leader_epoch, base_offset)`` of batches in offset
    order (every batch, or only those whose epoch differs from the previous batch's: the
    result is the same).  Returns whether an entry was added."""
    changed = False
    for leader_epoch, base_offset in batches:
        if leader_epoch < 0 or (epochs and leader_epoch <= epochs[-1][0]):
            continue
        # Only an entry moved up to the log start can start here (the log was empty above it):
        # the new epoch replaces it, as Kafka's ``assign`` drops non-monotonic entries.
        truncate_epochs(epochs, base_offset)
        assign_epoch(epochs, leader_epoch, base_offset)
        changed = True
    return changed


def truncate_epochs_from_start(epochs: list[EpochEntry], start_offset: int) -> None:
    """``truncateFromStart``: entries starting at or below ``start_offset`` go, but the last of
    them stays with its start moved up to ``start_offset`` (the epoch of the log's first
    offset)."""
    below = 0
    while below < len(epochs) and epochs[below][1] <= start_offset:
        below += 1
    if below:
        epochs[:below] = [(epochs[below - 1][0], start_offset)]


def check_epochs(epochs: Sequence[EpochEntry]) -> str | None:
    """What is wrong with a list of entries (None if nothing): each epoch and start offset
    non-negative, both strictly increasing."""
    previous: EpochEntry | None = None
    for epoch, start_offset in epochs:
        if epoch < 0 or start_offset < 0:
            return f"negative entry {epoch} {start_offset}"
        if previous is not None and (epoch <= previous[0] or start_offset <= previous[1]):
            return f"entry {epoch} {start_offset} after {previous[0]} {previous[1]}"
        previous = (epoch, start_offset)
    return None


def encode_epochs(epochs: Sequence[EpochEntry]) -> bytes:
    lines = [str(LEADER_EPOCH_CHECKPOINT_VERSION), str(len(epochs))]
    lines += [f"{epoch} {start_offset}" for epoch, start_offset in epochs]
    return ("\n".join(lines) + "\n").encode()


def decode_epochs(data: bytes) -> list[EpochEntry]:
    """Parse the file; ``ValueError`` if it is not a well-formed checkpoint."""
    lines = data.decode("ascii").split("\n")
    if len(lines) < 3 or lines[-1] != "":
        raise ValueError("truncated")
    if int(lines[0]) != LEADER_EPOCH_CHECKPOINT_VERSION:
        raise ValueError(f"unknown version {lines[0]!r}")
    count = int(lines[1])
    if count != len(lines) - 3:
        raise ValueError(f"{len(lines) - 3} entries where the header says {count}")
    epochs: list[EpochEntry] = []
    for line in lines[2:-1]:
        fields = line.split(" ")
        if len(fields) != 2:
            raise ValueError(f"bad entry {line!r}")
        epochs.append((int(fields[0]), int(fields[1])))
    if (problem := check_epochs(epochs)) is not None:
        raise ValueError(problem)
    return epochs


# --- the file and the cache --------------------------------------------------------------------


class LeaderEpochCheckpointFile:
    def __init__(self, storage: Storage, directory: str) -> None:
        self._storage = storage
        self._directory = directory
        self.path = join(directory, LEADER_EPOCH_CHECKPOINT_FILE)

    def read(self) -> list[EpochEntry] | None:
        """The entries; None if the file is missing or unreadable (logged)."""
        if not self._storage.exists(self.path):
            return None
        handle = self._storage.open(self.path)
        try:
            data = handle.read(0, handle.size())
        finally:
            handle.close()
        try:
            return decode_epochs(data)
        except (ValueError, UnicodeDecodeError) as error:
            logger.warning(
                "rebuilding unreadable leader epoch checkpoint path=%s error=%s content=%r",
                self.path,
                error,
                data[:200],
            )
            return None

    def write(self, epochs: Sequence[EpochEntry]) -> None:
        assert check_epochs(epochs) is None, epochs
        write_atomically(
            self._storage, self._directory, LEADER_EPOCH_CHECKPOINT_FILE, encode_epochs(epochs)
        )


class LeaderEpochCache:
    """The entries in memory; every change is written through to the checkpoint file."""

    def __init__(self, checkpoint: LeaderEpochCheckpointFile, epochs: list[EpochEntry]) -> None:
        assert check_epochs(epochs) is None, epochs
        self._checkpoint = checkpoint
        self._epochs = epochs

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1][0] if self._epochs else None

    def entries(self) -> list[EpochEntry]:
        return list(self._epochs)

    def check_bounds(self, log_start_offset: int, log_end_offset: int) -> None:
        """Every entry names an offset of the log: the first at or above the log start, the
        last below the log end (or at it, for an empty log's entry for its log start)."""
        if self._epochs:
            first, last = self._epochs[0][1], self._epochs[-1][1]
            assert log_start_offset <= first, (self._epochs, log_start_offset)
            assert last < log_end_offset or last == log_start_offset == log_end_offset, (
                self._epochs,
                log_start_offset,
                log_end_offset,
            )

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        return epoch_end_offset(self._epochs, requested_epoch, log_end_offset)

    def assign(self, batches: Iterable[EpochEntry]) -> None:
        """Appended batches, ``(partition_leader_epoch, base_offset)`` in offset order."""
        if derive_epochs(self._epochs, batches):
            self._changed()

    def truncate_from_end(self, end_offset: int) -> None:
        """The log now ends at ``end_offset``."""
        if self._epochs and self._epochs[-1][1] >= end_offset:
            truncate_epochs(self._epochs, end_offset)
            self._changed()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``."""
        if self._epochs and self._epochs[0][1] < start_offset:
            truncate_epochs_from_start(self._epochs, start_offset)
            self._changed()

    def drop_log_start_entry(self, start_offset: int) -> None:
        """No batch at or below the log start is left (retention deleted its segment): the
        entry for the log start, which names the epoch of such a batch, goes too."""
        if self._epochs and self._epochs[0][1] <= start_offset:
            truncate_epochs_from_start(self._epochs, start_offset)
            del self._epochs[0]
            self._changed()

    def reset(self, epochs: Sequence[EpochEntry]) -> None:
        """Replace every entry (a full truncation; a truncation that empties the log)."""
        if list(epochs) != self._epochs:
            self._epochs = list(epochs)
            self._changed()

    def _changed(self) -> None:
        assert check_epochs(self._epochs) is None, self._epochs
        self._checkpoint.write(self._epochs)
