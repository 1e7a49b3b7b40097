"""``PartitionLog``'s compaction (``cleanup.policy=compact``), in three steps.

``prepare_clean`` (on the event loop) picks the inactive segments below the last stable offset
(cleaning_plan.py: when a pass is due, which segments) and hands them, with the aborted
transactions of the range (aborted_txns.py), to a ``LogCleaning`` (cleaner.py); its ``build``
(any thread: it reads only inactive segments and writes only its own files) writes their cleaned
copies as ``.cleaned`` files; ``complete_clean`` (on the event loop) swaps them in
(segment_swap.py) and checkpoints where the next pass starts (``cleaner-offset-checkpoint``,
``first_dirty_offset``).  Before a swap, the first replaced segment's ``.txnindex`` gets the
cleaner's entries for the whole group (``_merge_txn_indexes``).  A pass whose segments changed
meanwhile (retention, truncation, close) is thrown away; one that met corrupt data stops
cleaning until the log is reopened; an I/O error takes the log offline.  A truncation caps
the first dirty offset at the new log end.

A mixin of ``PartitionLog`` (log.py): what it shares with the log is the ``_CompactedLog``
protocol below, the methods' self type; its own state is set up by ``_init_compaction``.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from typing import Protocol

from broker.log.checkpoint import OffsetCheckpoint
from broker.log.cleaner import (
    CLEANER_OFFSET_FILE,
    DEFAULT_MAX_MAP_ENTRIES,
    CleanResult,
    LogCleaning,
)
from broker.log.cleaning_plan import plan_cleaning
from broker.log.config import LogConfig
from broker.log.errors import KafkaStorageError
from broker.log.segment import LogSegment
from broker.log.txn_index import AbortedTxn
from broker.storage import Storage

logger = logging.getLogger("broker.log")


class _CompactedLog(Protocol):
    """The part of ``PartitionLog`` compaction reads and changes, and its own state."""

    _storage: Storage
    directory: str
    _config: LogConfig
    _segments: list[LogSegment]
    _bases: list[int]  # the segments' base offsets
    _log_start_offset: int
    _now_ms: int
    _unflushed: dict[int, LogSegment]
    _graveyard: list[tuple[int, LogSegment]]
    _closed: bool
    _offline: str | None
    _aborted_txns: int
    # compaction's own
    _cleaner_checkpoint: OffsetCheckpoint
    _first_dirty_offset: int
    _cleaning: LogCleaning | None
    _uncleanable: str | None
    _delete_horizon_ms: int | None

    @property
    def log_end_offset(self) -> int: ...

    def _io(self, action: str) -> AbstractContextManager[None]: ...

    def _go_offline(self, action: str, error: OSError) -> KafkaStorageError: ...

    def _check_invariants(self) -> None: ...

    def _count_aborted_txns(self) -> int: ...

    def aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]: ...

    def prepare_clean(
        self,
        now_ms: int,
        last_stable_offset: int,
        *,
        force: bool = False,
        max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
    ) -> LogCleaning | None: ...

    def complete_clean(self, cleaning: LogCleaning) -> CleanResult | None: ...

    def _still_has(self, cleaning: LogCleaning) -> bool: ...

    def _replace_segments(self, old: list[LogSegment], new: LogSegment) -> None: ...


class LogCompaction:
    """``PartitionLog``'s compaction steps (a mixin)."""

    _cleaner_checkpoint: OffsetCheckpoint
    _first_dirty_offset: int  # checkpointed: where the next pass's offset map starts
    _cleaning: LogCleaning | None
    _uncleanable: str | None
    _delete_horizon_ms: int | None

    def _init_compaction(
        self: _CompactedLog, storage: Storage, directory: str, first_dirty_offset: int
    ) -> None:
        self._cleaner_checkpoint = OffsetCheckpoint(storage, directory, CLEANER_OFFSET_FILE)
        self._first_dirty_offset = first_dirty_offset
        self._cleaning = None  # the pass under way
        self._uncleanable = None  # why cleaning stopped (corrupt data)
        # The earliest delete horizon among the tombstones the last pass kept (unknown after a
        # restart until the next pass, as in Kafka).
        self._delete_horizon_ms = None

    @property
    def first_dirty_offset(self: _CompactedLog) -> int:
        """Where the next cleaning's offset map starts (below it: one record per key)."""
        return max(self._first_dirty_offset, self._log_start_offset)

    def prepare_clean(
        self: _CompactedLog,
        now_ms: int,
        last_stable_offset: int,
        *,
        force: bool = False,
        max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
    ) -> LogCleaning | None:
        """Compaction, step 1 of 3, on the event loop: the pass due now (``force``: over
        whatever is cleanable, due or not), or None (not compacted, nothing due or cleanable,
        a pass already under way).
        Step 2: its ``build()``, in a worker thread if you like (it reads only inactive
        segments and writes only its own files).  Step 3: ``complete_clean`` here.  Before
        ``close`` or ``delete``, wait for a running ``build`` (``cancel()`` hurries it)."""
        end = self.log_end_offset
        assert last_stable_offset <= end, f"LSO {last_stable_offset} above the log end {end}"
        if self._cleaning is not None or self._uncleanable is not None:
            return None
        with self._io("plan cleaning"):
            plan = plan_cleaning(
                self._segments,
                self._config,
                log_start_offset=self._log_start_offset,
                first_dirty_offset=self._first_dirty_offset,
                last_stable_offset=last_stable_offset,
                now_ms=now_ms,
                delete_horizon_ms=self._delete_horizon_ms,
                force=force,
            )
        if plan is None:
            return None
        self._cleaning = LogCleaning(
            self._storage,
            self.directory,
            self._config,
            self._segments,
            plan,
            now_ms,
            max_map_entries,
            aborted_transactions=self.aborted_transactions(self._bases[0], plan.end_offset),
        )
        return self._cleaning

    def complete_clean(self: _CompactedLog, cleaning: LogCleaning) -> CleanResult | None:
        """Compaction, step 3, on the event loop: swap the cleaned segments in.  None (the work
        thrown away) if the build was cancelled, the log changed under it (retention,
        truncation, close), or it met corrupt data (logged; cleaning stops until the log is
        reopened); raises ``KafkaStorageError`` (offline) if the build or the swap failed on
        I/O."""
        assert cleaning is self._cleaning, "not this log's pass under way"
        self._cleaning = None
        error = cleaning.error
        if cleaning.cancelled or not self._still_has(cleaning):
            cleaning.discard()  # an error then is most likely a file closed under the build
            logger.info("log cleaning abandoned dir=%s error=%s", self.directory, error)
            return None
        if isinstance(error, OSError):
            raise self._go_offline("log cleaning", error) from error
        if error is not None:
            self._uncleanable = f"{type(error).__name__}: {error}"
            logger.error("log cleaning stopped dir=%s reason=%s", self.directory, error)
            return None
        assert cleaning.built
        with self._io("log cleaning swap"):
            for group in cleaning.groups:
                replaced = cleaning.old_segments[group.first : group.last]
                _merge_txn_indexes(replaced, group.aborted_txns)
                self._replace_segments(replaced, cleaning.swap_in(group))
            self._aborted_txns = self._count_aborted_txns()
            if cleaning.next_dirty_offset != self._first_dirty_offset:
                self._cleaner_checkpoint.write(cleaning.next_dirty_offset)
                self._first_dirty_offset = cleaning.next_dirty_offset
        self._delete_horizon_ms = cleaning.delete_horizon_ms
        self._check_invariants()
        result = cleaning.result(segments_after=len(cleaning.groups))
        logger.info(
            "cleaned log dir=%s offsets=%d..%d segments=%d->%d bytes=%d->%d records=%d->%d"
            " tombstones_removed=%d aborted_records_removed=%d markers_removed=%d"
            " next_dirty_offset=%d reason=%s",
            self.directory,
            result.first_offset,
            result.end_offset - 1,
            result.segments_before,
            result.segments_after,
            result.bytes_before,
            result.bytes_after,
            result.records_before,
            result.records_after,
            result.tombstones_removed,
            result.aborted_records_removed,
            result.markers_removed,
            result.next_dirty_offset,
            cleaning.plan.reason,
        )
        return result

    def clean(
        self: _CompactedLog, now_ms: int, last_stable_offset: int, *, force: bool = False
    ) -> CleanResult | None:
        """The three steps in a row, blocking (tests, tools; a broker runs ``build`` off the
        event loop)."""
        cleaning = self.prepare_clean(now_ms, last_stable_offset, force=force)
        if cleaning is None:
            return None
        cleaning.build()
        return self.complete_clean(cleaning)

    def _still_has(self: _CompactedLog, cleaning: LogCleaning) -> bool:
        """Whether the segments the pass read are still this log's, unchanged."""
        old = cleaning.sources
        return (
            not self._closed
            and self._offline is None
            and len(self._segments) > len(old)
            and all(
                s is o.segment and s.size_bytes == o.size_bytes
                for s, o in zip(self._segments, old, strict=False)
            )
        )

    def _replace_segments(self: _CompactedLog, old: list[LogSegment], new: LogSegment) -> None:
        """``new`` (swapped in, durable) takes the place of ``old``, whose files are gone; their
        handles close after ``file.delete.delay.ms`` (a sendfile may be reading them)."""
        i = self._segments.index(old[0])
        assert self._segments[i : i + len(old)] == old
        self._segments[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [new.base_offset]
        new.config = self._config  # as update_config does
        close_at = self._now_ms + self._config.file_delete_delay_ms
        for segment in old:
            self._unflushed.pop(segment.base_offset, None)
            self._graveyard.append((close_at, segment))

    def _cap_first_dirty_offset(self: _CompactedLog) -> None:
        """After a truncation: offsets appended again above the log end are dirty."""
        end = self.log_end_offset
        if self._first_dirty_offset > end:
            self._cleaner_checkpoint.write(end)
            self._first_dirty_offset = end


def _merge_txn_indexes(replaced: list[LogSegment], kept: list[AbortedTxn]) -> None:
    """Before a cleaner swap: the first replaced segment's ``.txnindex`` (whose name the new
    segment takes, and which the swap leaves in place) gets the cleaner's entries for the
    whole group (``CleanedGroup.aborted_txns``: the ABORT markers it keeps with data),
    fsynced, so the new segment indexes every aborted transaction it still holds data of, even
    after a crash (segment_swap.py).  Written before the swap commits, which is safe: the
    entries it leaves out are those of transactions with no data left in the old segments
    either, which no reader needs to skip."""
    first = replaced[0].txn_index
    if kept != first.entries:
        first.rewrite(kept)
        first.flush()
