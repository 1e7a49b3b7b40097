"""``LogSegment``: one ``.log`` file with its ``.index`` and ``.timeindex``.

Files, in the partition directory, named by the segment's base offset (the first offset it
may hold), 20 digits zero padded so that names sort as offsets do::

    00000000000000000000.log        batches back to back            (file_records.py)
    00000000000000000000.index      (relative offset, position)     (index.py)
    00000000000000000000.timeindex  (timestamp, relative offset)    (index.py)
    00000000000000000000.txnindex   aborted transactions, if any    (txn_index.py)
    00000000000000172806.log        the next segment starts at offset 172806
    ...

Theory of operation.  Only the last segment of a log (the active one) is appended to; the
log rolls a new one when this one would outgrow ``segment.bytes``, is older than
``segment.ms``, or its indexes are full.  A segment keeps in memory what appends and lookups
need: its size, ``next_offset`` (one past its last batch), its largest timestamp and the base
offset of the batch that first reached it (for retention and ``MAX_TIMESTAMP`` lookups), and
the bytes since its last offset-index entry.

A segment is opened in one of three ways, chosen by the loader:

* ``recover``: read every batch from position 0 (in large chunks), CRC-check those at or
  after the log's recovery point, stop at the first torn or invalid batch, truncate the file
  there, and rebuild both indexes.  The only path that changes data.
* ``load_trusted``: a flushed segment that is not the last one: ``next_offset`` is the next
  segment's base offset; only the last entry of each index is checked now; the indexes are
  loaded (every entry checked) on first use, and rebuilt from the log if that fails.
* ``load_clean_tail``: the last segment after a clean shutdown: load the indexes and walk the
  headers from the last offset-index entry to the end of the file.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from broker.log.config import INT32_MAX, LogConfig
from broker.log.epochs import EpochEntry
from broker.log.errors import CorruptIndexError
from broker.log.file_records import (
    HEADER_WALK_CHUNK_BYTES,
    SCAN_HEADER_BYTES,
    BatchHeader,
    ChunkedReader,
    FileRecords,
    header_problem,
    parse_header,
)
from broker.log.index import OffsetIndex, TimeIndex
from broker.log.txn_index import TransactionIndex
from broker.log.validator import records_problem
from broker.storage import Buffer, Storage, join
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.record_batch import NO_TIMESTAMP, RecordBatch

logger = logging.getLogger("broker.log")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)$")
UNBOUNDED_OFFSET = 2**63  # above every offset: "no limit" for recovery bounds


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """``(base offset, suffix)`` for a segment file name, else None."""
    match = _SEGMENT_FILE.match(name)
    return (int(match[1]), match[2]) if match else None


@dataclass(frozen=True, slots=True)
class SegmentRecovery:
    """What ``LogSegment.recover`` found: the valid prefix and what it cut off."""

    base_offset: int
    valid_bytes: int
    truncated_bytes: int
    next_offset: int  # one past the last valid batch: the first offset dropped, if any
    last_dropped_offset: int | None  # best effort, from the headers that still parse
    reason: str | None  # why the tail was cut (None: nothing was)
    # (partition leader epoch, base offset) of each valid batch whose epoch differs from the
    # previous batch's: what the leader epoch cache needs, gathered by the same walk
    epoch_changes: tuple[EpochEntry, ...] = ()


class LogSegment:
    def __init__(
        self,
        storage: Storage,
        directory: str,
        base_offset: int,
        config: LogConfig,
        *,
        file_suffix: str = "",
    ) -> None:
        self._storage = storage
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.file_suffix = file_suffix  # ".cleaned": a segment the cleaner is writing
        log = storage.open(self.path(LOG_SUFFIX))
        self.records = FileRecords(log, log.size())
        self.offset_index = OffsetIndex(
            storage.open(self.path(INDEX_SUFFIX)), base_offset, config.max_offset_index_entries
        )
        self.time_index = TimeIndex(
            storage.open(self.path(TIME_INDEX_SUFFIX)), base_offset, config.max_time_index_entries
        )
        self.txn_index = TransactionIndex(storage, self.path(TXN_INDEX_SUFFIX))
        # Emptied by ``recover``: the replica manager's replay of the log refills it.
        self.txn_index_rebuilding = False
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.rolling_base_ms: int | None = None  # when the first batch came (for segment.ms)
        self._bytes_since_last_index_entry = 0

    @classmethod
    def create(
        cls,
        storage: Storage,
        directory: str,
        base_offset: int,
        config: LogConfig,
        *,
        file_suffix: str = "",
    ) -> LogSegment:
        """A new, empty segment (any leftover files of that name are emptied)."""
        segment = cls(storage, directory, base_offset, config, file_suffix=file_suffix)
        segment.records.truncate_to(0)
        segment.offset_index.reset()
        segment.time_index.reset()
        segment.txn_index.reset()
        return segment

    def path(self, suffix: str) -> str:
        return join(self.directory, segment_file_name(self.base_offset, suffix) + self.file_suffix)

    @property
    def size_bytes(self) -> int:
        return self.records.size_bytes

    @property
    def largest_timestamp_ms(self) -> int:
        """For time retention: the largest record timestamp, else when the segment started
        (``NO_TIMESTAMP`` if neither is known: such a segment never expires by time)."""
        if self.max_timestamp != NO_TIMESTAMP:
            return self.max_timestamp
        return self.rolling_base_ms if self.rolling_base_ms is not None else NO_TIMESTAMP

    def __repr__(self) -> str:
        return f"LogSegment({self.base_offset}..{self.next_offset}, {self.size_bytes} bytes)"

    # --- appends ------------------------------------------------------------------------------

    def roll_reason(self, *, size_bytes: int, batches: int, last_offset: int, now_ms: int) -> str:
        """Why an append of this shape must go to a new segment ('' if it fits here).  The
        callers never roll an empty segment: it takes one append (or one batch) of any size."""
        config, size = self.config, self.records.size_bytes
        if size + size_bytes > config.segment_bytes:
            return f"segment.bytes {config.segment_bytes} reached"
        if self.rolling_base_ms is not None and now_ms - self.rolling_base_ms > config.roll_ms:
            return f"segment.ms {config.roll_ms} elapsed"
        offsets, times = self.offset_index, self.time_index
        if (
            offsets.entries + batches > offsets.max_entries
            or times.entries + batches + 1 > times.max_entries  # + 1: the entry at roll
        ):
            return f"segment.index.bytes {config.segment_index_bytes} reached"
        if last_offset - self.base_offset > INT32_MAX:
            return "relative offsets would overflow int32"
        return ""

    def run_end(self, headers: Sequence[BatchHeader], start: int, now_ms: int) -> tuple[int, str]:
        """For a follower's run of batches: how far from ``start`` they fit here, and why no
        further (the roll rules, batch by batch).  An empty segment takes any one batch, even
        one larger than ``segment.bytes``: the leader has it, a follower must not get stuck."""
        size = 0
        for i in range(start, len(headers)):
            size += headers[i].size_bytes
            if i == start and self.size_bytes == 0:
                continue
            reason = self.roll_reason(
                size_bytes=size,
                batches=i - start + 1,
                last_offset=headers[i].last_offset,
                now_ms=now_ms,
            )
            if reason:
                return i, reason
        return len(headers), ""

    def append(
        self,
        buffers: Sequence[Buffer],
        batches: Sequence[BatchHeader],
        size_bytes: int,
        now_ms: int,
    ) -> None:
        """Write ``buffers`` (the batches, offsets assigned) with one storage append."""
        assert batches and batches[0].base_offset >= self.next_offset, (batches[0], self)
        position = self.size_bytes
        assert position + size_bytes <= INT32_MAX, "positions are int32 in the offset index"
        self.records.append(buffers, size_bytes)
        for header in batches:
            self._index_batch(header, position)
            position += header.size_bytes
        assert position == self.size_bytes
        if self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms
        self.next_offset = batches[-1].next_offset

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.base_offset
        if self._bytes_since_last_index_entry > self.config.index_interval_bytes:
            self.offset_index.append(header.base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += header.size_bytes

    def on_become_inactive(self) -> None:
        """At roll: index the largest timestamp (so a reopen finds it) and write the indexes."""
        if self.max_timestamp != NO_TIMESTAMP:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.write_pending()
        self.time_index.write_pending()

    # --- lookups ------------------------------------------------------------------------------

    def ensure_indexes(self) -> None:
        """Load indexes that were trusted at open; rebuild them from the log if they are bad."""
        if self.offset_index.loaded and self.time_index.loaded:
            return
        try:
            self.offset_index.load(next_offset=self.next_offset, log_size_bytes=self.size_bytes)
            self.time_index.load(next_offset=self.next_offset, log_size_bytes=self.size_bytes)
        except CorruptIndexError as error:
            logger.warning("rebuilding indexes of %s: %s", self.path(LOG_SUFFIX), error)
            self.rebuild_indexes()

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is at least ``offset``
        (the batch holding it, in a log without gaps)."""
        self.ensure_indexes()
        _, start = self.offset_index.lookup(offset)
        return self.records.search_for_offset(offset, start)

    def position_of(self, offset: int) -> int:
        """Where the batch holding ``offset`` starts (the end of the segment if none does)."""
        found = self.find_batch(offset)
        return found[0] if found else self.size_bytes

    def last_boundary_at_or_before(self, limit: int, start: int) -> int:
        """The last batch boundary in ``[start, limit]``; ``start`` is one."""
        if limit >= self.size_bytes:
            return self.size_bytes
        self.ensure_indexes()
        from_position = max(start, self.offset_index.lookup_position(limit))
        return self.records.last_boundary_at_or_before(limit, from_position)

    def find_offset_by_timestamp(self, target_ms: int, min_offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``min_offset`` whose
        timestamp is at least ``target_ms``: the time index and batch headers find the first
        batch whose max timestamp qualifies; that batch is CRC-checked and decoded (the next
        one too, if the records that qualify in it are all below ``min_offset``)."""
        self.ensure_indexes()
        entry = self.time_index.lookup(target_ms)
        start_offset = max(entry[1] if entry else self.base_offset, min_offset)
        _, start = self.offset_index.lookup(start_offset)
        for position, header in self.records.iter_headers(start):
            if header.max_timestamp < target_ms or header.last_offset < min_offset:
                continue
            for record in self.read_batch(position, header).iter_records():
                if record.offset >= min_offset and record.timestamp >= target_ms:
                    return record.offset, record.timestamp
        return None

    def max_timestamp_from(self, offset: int) -> tuple[int, int] | None:
        """``(largest timestamp, base offset of its first batch)`` over the records at or after
        ``offset``; None if there are none.  Below the base offset this is the segment's own
        figure; otherwise a walk of the headers (decoding the one batch holding ``offset``)."""
        if offset <= self.base_offset:
            return (self.max_timestamp, self.offset_of_max_timestamp) if self.size_bytes else None
        found = self.find_batch(offset)
        if found is None:
            return None
        position, header = found
        best: tuple[int, int] | None = None
        if header.base_offset < offset:  # only part of this batch counts
            stamps = [
                r.timestamp for r in self.read_batch(*found).iter_records() if r.offset >= offset
            ]
            best = (max(stamps), header.base_offset) if stamps else None
            position += header.size_bytes
        for _, later in self.records.iter_headers(position):
            if best is None or later.max_timestamp > best[0]:
                best = later.max_timestamp, later.base_offset
        return best

    def last_batch_at_or_before(self, offset: int) -> BatchHeader | None:
        """The header of the last batch whose base offset is at most ``offset``."""
        self.ensure_indexes()
        _, start = self.offset_index.lookup(offset)
        found = None
        for _, header in self.records.iter_headers(start):
            if header.base_offset > offset:
                break
            found = header
        return found

    def read_batch(self, position: int, header: BatchHeader) -> RecordBatch:
        """One whole batch, CRC-checked."""
        data = self.records.read(position, header.size_bytes)
        return RecordBatch(memoryview(data)).validate()

    # --- opening ------------------------------------------------------------------------------

    def load_trusted(self, next_offset: int) -> None:
        """Open a flushed, non-last segment; raise ``CorruptIndexError`` if an index's last
        entry does not fit (the loader then recovers the segment)."""
        size = self.size_bytes
        self.next_offset = next_offset
        self.offset_index.check_last_entry(next_offset=next_offset, log_size_bytes=size)
        last = self.time_index.check_last_entry(next_offset=next_offset, log_size_bytes=size)
        if last is None and size:
            # A rolled segment always indexes its largest timestamp (on_become_inactive);
            # only a segment without any timestamps is rebuilt here every time.
            raise CorruptIndexError(f"{self.time_index.path}: empty for a non-empty segment")
        if last is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last

    def load_clean_tail(self) -> None:
        """Open the last segment after a clean shutdown; raise ``CorruptIndexError`` or
        ``CorruptRecordError`` if anything is off (the loader then recovers it)."""
        limit = self.base_offset + INT32_MAX + 1
        self.offset_index.load(next_offset=limit, log_size_bytes=self.size_bytes)
        self.time_index.load(next_offset=limit, log_size_bytes=self.size_bytes)
        for _, header in self.records.iter_headers(self.offset_index.last_position()):
            self.next_offset = header.next_offset
        indexed = (self.offset_index.last_offset(), self.time_index.last_offset())
        if any(offset is not None and offset >= self.next_offset for offset in indexed):
            raise CorruptIndexError(f"{self.path(INDEX_SUFFIX)}: entries beyond the log end")
        self._rescan_tail()

    def set_rolling_base(self, now_ms: int) -> None:
        """After a restart the append time of the first batch is unknown: use its timestamp,
        as Kafka does (or now, if it has none)."""
        if self.size_bytes == 0:
            self.rolling_base_ms = None
            return
        first = self.records.header_at(0).max_timestamp
        self.rolling_base_ms = first if first != NO_TIMESTAMP else now_ms

    def _rescan_tail(self) -> None:
        """Recompute the largest timestamp and the bytes since the last index entry from the
        indexes and the headers after the last time-index entry (after a load or truncation)."""
        last = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = last or (NO_TIMESTAMP, -1)
        start = self.offset_index.lookup(last[1])[1] if last else 0
        for _, header in self.records.iter_headers(start):
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.base_offset
        self._bytes_since_last_index_entry = self.size_bytes - self.offset_index.last_position()

    def recover(self, *, crc_from_offset: int, max_next_offset: int) -> SegmentRecovery:
        """Validate every batch from the start, CRC-checking those whose last offset is at or
        after ``crc_from_offset``; truncate at the first bad one; rebuild both indexes."""
        size = self.size_bytes
        reader = ChunkedReader(self.records.handle, size)
        valid_bytes, problem, epoch_changes = self._reindex(
            reader, crc_from_offset, max_next_offset
        )
        last_dropped = _last_plausible_offset(reader, valid_bytes, size) if problem else None
        if valid_bytes < size:
            self.records.truncate_to(valid_bytes)
        self.txn_index.reset()
        self.txn_index_rebuilding = True
        self.offset_index.write_pending()
        self.time_index.write_pending()
        return SegmentRecovery(
            self.base_offset,
            valid_bytes,
            size - valid_bytes,
            self.next_offset,
            last_dropped,
            problem,
            tuple(epoch_changes),
        )

    def rebuild_indexes(self) -> None:
        """Rebuild the indexes of a segment already validated: a bad batch now is an error
        (the data is not touched: this segment is in the middle of the log)."""
        reader = ChunkedReader(self.records.handle, self.size_bytes)
        next_offset = self.next_offset
        valid_bytes, problem, _ = self._reindex(reader, UNBOUNDED_OFFSET, next_offset)
        self.next_offset = next_offset  # the next segment's base: the walk may end below it
        if problem or valid_bytes != self.size_bytes:
            raise CorruptRecordError(f"{self.path(LOG_SUFFIX)} at {valid_bytes}: {problem}")
        self.on_become_inactive()  # with the entry for its largest timestamp, as at a roll

    def _reindex(
        self, reader: ChunkedReader, crc_from_offset: int, max_next_offset: int
    ) -> tuple[int, str | None, list[EpochEntry]]:
        """Walk the batches from the start, rebuilding the indexes, up to the first bad one;
        return its position (the valid bytes), what is wrong with it, and the epoch changes
        of the valid batches."""
        self._reset_indexes()
        position, next_offset, problem = 0, self.base_offset, None
        epoch_changes: list[EpochEntry] = []
        while position < self.size_bytes:
            header, problem = self._check_batch(
                reader, position, next_offset, crc_from_offset, max_next_offset
            )
            if header is None or problem:
                break
            self._index_batch(header, position)
            _note_epoch_change(epoch_changes, header)
            position += header.size_bytes
            next_offset = header.next_offset
        self.next_offset = next_offset
        return position, problem, epoch_changes

    def epoch_changes(self) -> list[EpochEntry]:
        """``(partition leader epoch, base offset)`` of every batch whose epoch differs from the
        previous batch's, by a walk of the headers (to rebuild a lost leader epoch cache)."""
        changes: list[EpochEntry] = []
        for _, header in self.records.iter_headers(0):
            _note_epoch_change(changes, header)
        return changes

    def last_plausible_offset(self) -> int | None:
        """The last offset its headers name, without trusting them (to report a deletion)."""
        reader = ChunkedReader(self.records.handle, self.size_bytes, HEADER_WALK_CHUNK_BYTES)
        return _last_plausible_offset(reader, 0, self.size_bytes)

    def _reset_indexes(self) -> None:
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, -1
        self._bytes_since_last_index_entry = 0

    def _check_batch(
        self,
        reader: ChunkedReader,
        position: int,
        expected_offset: int,
        crc_from_offset: int,
        max_next_offset: int,
    ) -> tuple[BatchHeader | None, str | None]:
        """The batch header at ``position`` and what is wrong with it, if anything."""
        remaining = self.size_bytes - position
        data = reader.read(position, SCAN_HEADER_BYTES)
        if len(data) < SCAN_HEADER_BYTES:
            return None, f"torn batch header ({remaining} bytes at the end)"
        header = parse_header(data)
        problem = header_problem(header)
        if problem is None and header.size_bytes > remaining:
            problem = f"torn batch ({remaining} of its {header.size_bytes} bytes)"
        elif problem is None and header.base_offset < expected_offset:
            problem = f"offset {header.base_offset} after {expected_offset - 1}"
        elif problem is None and header.next_offset > max_next_offset:
            problem = f"offset {header.last_offset} overlaps the next segment"
        elif problem is None and header.last_offset - self.base_offset > INT32_MAX:
            problem = f"offset {header.last_offset} overflows the segment"
        if problem is None and header.last_offset >= crc_from_offset:
            try:
                batch = RecordBatch(reader.read(position, header.size_bytes)).validate()
                problem = records_problem(batch)  # the record walk, as on produce
            except CorruptRecordError as error:
                problem = str(error)
        return header, problem

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is at least ``offset`` (a batch holding it goes
        whole); return the bytes removed.  The segment then ends after its last batch left,
        which is below ``offset`` even when ``offset`` falls in a gap (a follower must fetch
        the offsets of the gap again: its new leader may have records there)."""
        found = self.find_batch(offset)
        if found is None:
            return 0
        position, header = found
        removed = self.size_bytes - position
        self.records.truncate_to(position)
        self.offset_index.truncate_to(header.base_offset)
        self.time_index.truncate_to(header.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        self.next_offset = self.base_offset
        for _, kept in self.records.iter_headers(self.offset_index.last_position()):
            self.next_offset = kept.next_offset
        self._rescan_tail()
        if position == 0:
            self.rolling_base_ms = None
        return removed

    # --- lifecycle ----------------------------------------------------------------------------

    def flush(self) -> None:
        self.records.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        self.records.close()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def remove_files(self) -> None:
        """Unlink the files; open handles stay valid until ``close`` (a sendfile may be on)."""
        for suffix in SEGMENT_SUFFIXES:
            path = self.path(suffix)
            if self._storage.exists(path):
                self._storage.remove(path)


def _last_plausible_offset(reader: ChunkedReader, position: int, size: int) -> int | None:
    """The last offset named by the chain of sane-looking headers from ``position`` (for the
    report of what recovery dropped; nothing here is trusted)."""
    last = None
    while position + SCAN_HEADER_BYTES <= size:
        header = parse_header(reader.read(position, SCAN_HEADER_BYTES))
        if header_problem(header) or (last is not None and header.base_offset <= last):
            break
        last = header.last_offset
        position += header.size_bytes
    return last


def _note_epoch_change(changes: list[EpochEntry], header: BatchHeader) -> None:
    """Append ``(partition leader epoch, base offset)`` of the next batch in offset order if its
    epoch differs from the previous batch's."""
    if not changes or header.partition_leader_epoch != changes[-1][0]:
        changes.append((header.partition_leader_epoch, header.base_offset))
