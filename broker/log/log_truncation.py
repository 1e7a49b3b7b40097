"""``PartitionLog`` cut at either end: retention and DeleteRecords move the log start
offset and delete whole segments from the front; a follower's truncation (and a reset to an
empty log) cuts the end.

* Retention (retention.py) deletes whole segments from the front, never the active one, and
  moves ``log_start_offset`` (checkpointed at once, so it survives a restart).  A deleted
  segment's files are unlinked at once but stay open for ``file.delete.delay.ms``, so a
  ``sendfile`` already given its descriptor still reads valid bytes (``_bury``; a cleaner swap
  puts the replaced segments in the same graveyard).  With ``cleanup.policy=compact`` alone,
  segments go by the log start offset only.  ``delete_records_before`` moves the log start
  (DeleteRecords); the segments below it go at the next ``apply_retention``.
* ``truncate_to`` drops a divergent tail whole batches at a time; the leader epoch cache, the
  recovery point, the first dirty offset (compaction) and the aborted-transaction entries
  follow.  If the cut reaches below the log start, the log starts over, empty
  (``truncate_fully_and_start_at``).
* The leader epoch cache is truncated from the start when the log start moves, from the end
  when the log end does; with nothing visible left, it keeps the entry of the last batch below
  the log start, as a reload of the log would find (loader.py).

A mixin of ``PartitionLog`` (log.py): what it shares with the log is the ``_TruncatedLog``
protocol below, the methods' self type.
"""

from __future__ import annotations

import dataclasses
import logging
from bisect import bisect_right
from contextlib import AbstractContextManager
from typing import Protocol

from broker.log.checkpoint import OffsetCheckpoint
from broker.log.config import LogConfig
from broker.log.errors import OffsetOutOfRangeError
from broker.log.leader_epoch_cache import LeaderEpochCache
from broker.log.loader import drop_gone_log_start_epoch, epoch_entry_at
from broker.log.retention import segments_to_delete
from broker.log.segment import LogSegment
from broker.storage import Storage

logger = logging.getLogger("broker.log")


class _TruncatedLog(Protocol):
    """The part of ``PartitionLog`` that cutting either end reads and changes."""

    _storage: Storage
    directory: str
    _config: LogConfig
    _segments: list[LogSegment]
    _bases: list[int]  # the segments' base offsets
    _log_start_offset: int
    _log_start_checkpoint: OffsetCheckpoint
    _recovery_point: int
    _epochs: LeaderEpochCache
    _now_ms: int
    _unflushed: dict[int, LogSegment]
    _graveyard: list[tuple[int, LogSegment]]  # (close at ms, deleted segment)
    _dir_dirty: bool
    _aborted_txns: int

    @property
    def log_end_offset(self) -> int: ...

    @property
    def _active(self) -> LogSegment: ...

    def _io(self, action: str) -> AbstractContextManager[None]: ...

    def _check_invariants(self) -> None: ...

    def _checkpoint_recovery_point(self, now_ms: int) -> None: ...

    def _cap_first_dirty_offset(self) -> None: ...

    def _count_aborted_txns(self) -> int: ...

    def _delete_front(self, count: int, reason: str) -> None: ...

    def _advance_log_start_offset(self, offset: int) -> None: ...

    def _bury(self, segments: list[LogSegment]) -> None: ...

    def _close_graveyard(self, now_ms: int) -> None: ...

    def _truncate_epochs_from_end(self) -> None: ...

    def truncate_fully_and_start_at(self, offset: int) -> None: ...


class LogTruncation:
    """``PartitionLog``'s retention, DeleteRecords and truncation (a mixin)."""

    def apply_retention(self: _TruncatedLog, now_ms: int) -> list[int]:
        """Delete old segments by ``retention.ms``, ``retention.bytes`` and the log start
        offset, never the active one; return their base offsets."""
        with self._io("retention"):
            self._now_ms = now_ms
            self._close_graveyard(now_ms)
            config = self._config
            if not config.delete:  # compact only: segments go by the log start offset alone
                config = dataclasses.replace(config, retention_ms=-1, retention_bytes=-1)
            count = segments_to_delete(self._segments, config, self._log_start_offset, now_ms)
            deleted = [s.base_offset for s in self._segments[:count]]
            if count:
                self._delete_front(count, "retention")
        self._check_invariants()
        return deleted

    def _delete_front(self: _TruncatedLog, count: int, reason: str) -> None:
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        self._recovery_point = max(self._recovery_point, self._bases[0])
        self._advance_log_start_offset(self._bases[0])
        self._bury(doomed)
        self._aborted_txns = self._count_aborted_txns()
        epochs = self._epochs.entries()
        drop_gone_log_start_epoch(self._segments, epochs, self._log_start_offset)
        self._epochs.reset(epochs)
        logger.info(
            "deleted segments dir=%s segments=%s reason=%s log_start_offset=%d",
            self.directory,
            [s.base_offset for s in doomed],
            reason,
            self._log_start_offset,
        )

    def _advance_log_start_offset(self: _TruncatedLog, offset: int) -> None:
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self._log_start_checkpoint.write(offset)  # first: the loader re-applies it
            self._epochs.truncate_from_start(offset)

    def _bury(self: _TruncatedLog, segments: list[LogSegment]) -> None:
        """Unlink now; close after ``file.delete.delay.ms`` (an in-flight sendfile may hold
        the descriptor)."""
        close_at = self._now_ms + self._config.file_delete_delay_ms
        for segment in segments:
            segment.remove_files()
            self._unflushed.pop(segment.base_offset, None)
            self._graveyard.append((close_at, segment))
        self._dir_dirty = True

    def _close_graveyard(self: _TruncatedLog, now_ms: int) -> None:
        keep = []
        for close_at, segment in self._graveyard:
            if close_at <= now_ms:
                segment.close()
            else:
                keep.append((close_at, segment))
        self._graveyard = keep

    def delete_records_before(self: _TruncatedLog, offset: int) -> int:
        """Move the log start offset up to ``offset`` (DeleteRecords; the caller checks it is
        not above the high watermark); segments below it go at the next ``apply_retention``.
        Returns the log start offset."""
        end = self.log_end_offset
        if not 0 <= offset <= end:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, end)
        with self._io("delete records"):
            self._advance_log_start_offset(offset)
        self._check_invariants()
        return self._log_start_offset

    def truncate_to(self: _TruncatedLog, offset: int) -> None:
        """Drop every offset at or above ``offset`` (a follower diverging from its leader).  A
        batch holding ``offset`` goes whole, so the log end may end up below ``offset``."""
        if offset >= self.log_end_offset:
            return
        if offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        with self._io("truncate"):
            keep = max(bisect_right(self._bases, offset - 1), 1)  # segments below offset
            if keep < len(self._segments):
                doomed = self._segments[keep:]
                del self._segments[keep:]
                del self._bases[keep:]
                self._bury(doomed)
            removed = self._active.truncate_to(offset)
            self._unflushed[self._active.base_offset] = self._active
            if self.log_end_offset < self._log_start_offset:
                # The batch holding the log start offset went too: nothing visible is left.
                self._log_start_offset = self.log_end_offset
                self._log_start_checkpoint.write(self._log_start_offset)
            self._recovery_point = min(self._recovery_point, self.log_end_offset)
            self._checkpoint_recovery_point(self._now_ms)
            self._truncate_epochs_from_end()
            self._cap_first_dirty_offset()
            self._aborted_txns = self._count_aborted_txns()
        logger.info(
            "truncated dir=%s offset=%d log_end_offset=%d bytes_removed_from_active=%d",
            self.directory,
            offset,
            self.log_end_offset,
            removed,
        )
        self._check_invariants()

    def _truncate_epochs_from_end(self: _TruncatedLog) -> None:
        end = self.log_end_offset
        if end > self._log_start_offset:
            self._epochs.truncate_from_end(end)
        else:
            # Nothing visible is left; the entry for the log start is the epoch of the last
            # batch below it, as a reload of this log would find (loader.py).
            head = epoch_entry_at(self._segments, self._log_start_offset)
            self._epochs.reset([head] if head is not None else [])

    def truncate_fully_and_start_at(self: _TruncatedLog, offset: int) -> None:
        """Delete everything and restart the log, empty, at ``offset``."""
        assert offset >= 0
        with self._io("truncate"):
            self._bury(self._segments)  # unlinked first: the new segment may reuse a name
            fresh = LogSegment.create(self._storage, self.directory, offset, self._config)
            self._segments, self._bases = [fresh], [offset]
            self._log_start_offset = offset
            self._log_start_checkpoint.write(offset)
            self._recovery_point = offset
            self._checkpoint_recovery_point(self._now_ms)
            self._epochs.reset([])
            self._cap_first_dirty_offset()
            self._aborted_txns = 0
        self._check_invariants()
