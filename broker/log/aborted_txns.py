"""``PartitionLog``'s aborted transactions, over all its segments (Kafka's
``collectAbortedTransactions`` and the ``.txnindex`` rebuild after recovery).

Each ABORT marker's entry (txn_index.py: producer id, first offset, last offset = the marker,
last stable offset) goes to the ``.txnindex`` of the segment the marker lands in, given by the
caller (its producer state knows where the transaction began): ``PartitionLog.append`` and
``append_as_follower`` index them.  A read_committed fetch asks for the entries overlapping
what it returns (``aborted_transactions_for``); the cleaner for those of the range it cleans.
Truncation and retention cut the entries with their segments (the log recounts them), a
cleaner swap merges them into the new segment (log_compaction.py).  Recovery (loader.py)
empties the index of every segment it rescans; the owner of producer state then replays the
log and gives back each ABORT's entry (``restore_aborted_txn``), and ``end_txn_index_rebuild``
closes the rebuild.  ``_aborted_txns`` counts the entries, so that a log without any (the
common case) answers read_committed fetches without touching an index.

A mixin of ``PartitionLog`` (log.py): what it shares with the log is the ``_SegmentedLog``
protocol below, the methods' self type.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_right
from contextlib import AbstractContextManager
from typing import Protocol

from broker.log.reader import FetchSlice
from broker.log.segment import LogSegment
from broker.log.txn_index import AbortedTxn
from kafka_protocol.exceptions import CorruptRecordError


class _SegmentedLog(Protocol):
    """The part of ``PartitionLog`` the aborted-transaction queries read and write."""

    _segments: list[LogSegment]
    _bases: list[int]  # the segments' base offsets
    _unflushed: dict[int, LogSegment]
    _aborted_txns: int  # index entries in all segments

    @property
    def log_end_offset(self) -> int: ...

    def _io(self, action: str) -> AbstractContextManager[None]: ...

    def aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]: ...


class AbortedTransactions:
    """``PartitionLog``'s aborted-transaction queries and index rebuild (a mixin)."""

    def aborted_transactions(
        self: _SegmentedLog, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """Kafka's ``collectAbortedTransactions``: the aborted transactions with a marker at or
        after ``start_offset`` and a first offset below ``upper_bound_offset``, from the
        segment holding ``start_offset`` on (a marker is never below its data)."""
        if not self._aborted_txns:
            return []
        found: list[AbortedTxn] = []
        first = max(bisect_right(self._bases, start_offset) - 1, 0)
        for segment in self._segments[first:]:
            entries, complete = segment.txn_index.collect(start_offset, upper_bound_offset)
            found += entries
            if complete:
                break
        return found

    def aborted_transactions_for(
        self: _SegmentedLog, fetch_offset: int, fetched: FetchSlice
    ) -> list[AbortedTxn]:
        """For a read_committed fetch of ``fetched`` from ``fetch_offset``: the aborted
        transactions up to the first offset after the slice (Kafka's
        ``fetchUpperBoundOffset``: one header read, only if the log has any)."""
        if not self._aborted_txns:
            return []
        i = bisect_right(self._bases, fetched.segment_base_offset) - 1
        segment = self._segments[i]
        end = fetched.position + fetched.size_bytes
        with self._io("read"):
            upper = self.log_end_offset
            if end < segment.size_bytes:
                with contextlib.suppress(CorruptRecordError):  # then up to the log end
                    upper = segment.records.header_at(end).base_offset
            elif i + 1 < len(self._segments):
                upper = self._bases[i + 1]
            return self.aborted_transactions(fetch_offset, upper)

    @property
    def rebuilding_txn_indexes(self: _SegmentedLog) -> bool:
        """Whether recovery emptied some segment's aborted-transaction index: the owner of
        producer state replays the log and calls ``restore_aborted_txn`` for each ABORT."""
        return any(s.txn_index_rebuilding for s in self._segments)

    def restore_aborted_txn(self: _SegmentedLog, txn: AbortedTxn) -> None:
        """During the replay after recovery: index ``txn`` if its marker's segment was
        recovered (the others kept their index)."""
        i = bisect_right(self._bases, txn.last_offset) - 1
        if i >= 0 and self._segments[i].txn_index_rebuilding:
            with self._io("restore aborted transaction"):
                self._segments[i].txn_index.append(txn)
                self._unflushed[self._bases[i]] = self._segments[i]
            self._aborted_txns += 1

    def end_txn_index_rebuild(self: _SegmentedLog) -> None:
        for segment in self._segments:
            segment.txn_index_rebuilding = False

    def _count_aborted_txns(self: _SegmentedLog) -> int:
        return sum(len(s.txn_index.entries) for s in self._segments)

    def _drop_foreign_aborted_txns(self: _SegmentedLog) -> None:
        """Entries whose marker is beyond their segment (a crash during a cleaner swap left the
        merged index of the new segment beside the old ones) are dropped at open."""
        for segment, next_base in zip(self._segments, self._bases[1:], strict=False):
            entries = segment.txn_index.entries
            if entries and entries[-1].last_offset >= next_base:
                with self._io("open transaction index"):
                    segment.txn_index.truncate_to(next_base)
