"""The segments of one cleaning pass (cleaner.py): what the old ones hold, how they are grouped,
and how a new one is written.

* ``walk_headers`` (the cleaner's step 1) reads the 61-byte header of every batch of the old
  segments, in offset order, into a :class:`SourceBatch`: where it lies, its offsets, leader
  epoch and producer, whether it is a control batch (and then the type of its one record,
  cleaned_transactions.py) or carries sequences.  It checks what the rest of the pass relies
  on, and raises ``CorruptRecordError`` otherwise: offsets increase within and across
  segments, each batch lies inside its segment's offset range and file, and each segment
  holds a batch and ends where the next one starts.
* ``group_segments`` (step 3) cuts the old segments into groups of consecutive ones, each to
  be rewritten into one new segment named after its first: together at most
  ``segment.bytes`` (and ``MAX_GROUP_BYTES``), as many batches as the offset and time indexes
  can hold entries, and offsets within an int32 of the group's base (segment-relative
  offsets); a single segment is a group of its own whatever its size.
* :class:`SegmentWriter` appends the cleaned batches to the new (``.cleaned``) segment,
  ``WRITE_CHUNK_BYTES`` per storage append, then makes it inactive and fsyncs it.

Nothing here runs on the event loop necessarily: it reads only the captured handles of the
old segments and writes only the new segment (see cleaner.py, Threads).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from broker.log.cleaned_transactions import control_record_kind
from broker.log.config import INT32_MAX, LogConfig
from broker.log.file_records import BatchHeader, parse_header
from broker.log.record_filter import BATCH_HEADER
from broker.log.segment import LogSegment
from broker.log.txn_index import AbortedTxn
from broker.storage import Buffer, StorageHandle
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.record_batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC,
)

MAX_GROUP_BYTES = 1 << 30  # headroom under int32 positions: a rewrite may grow a batch a bit
WRITE_CHUNK_BYTES = 1 << 20  # cleaned batches per storage append


class SourceSegment(NamedTuple):
    """An old segment, as captured on the event loop."""

    segment: LogSegment
    base_offset: int
    end_offset: int
    size_bytes: int
    handle: StorageHandle


class SourceBatch(NamedTuple):
    """One batch of an old segment, as its header (and a marker's one record) describes it."""

    source: int  # index of its SourceSegment
    position: int
    size_bytes: int
    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    producer_id: int
    is_control: bool
    records_count: int
    is_transactional: bool
    marker: int | None  # a control batch's record type (ControlRecordType); None: no record
    sequenced: bool  # a producer's data batch (or what a pass left of one): base sequence >= 0


@dataclass(slots=True)
class CleanedGroup:
    """Old segments ``sources[first:last]`` and the new segment replacing them."""

    first: int
    last: int
    base_offset: int
    end_offset: int
    batches: range  # indexes into the header walk
    size_bytes: int = 0  # of the new segment
    batches_after: int = 0
    # The new segment's aborted-transaction index: the ABORT markers it keeps with data
    # (cleaned_transactions.py); the log writes it in place of the old segments' entries.
    aborted_txns: list[AbortedTxn] = field(default_factory=list)


def walk_headers(sources: Sequence[SourceSegment]) -> list[SourceBatch]:
    """Every batch of ``sources``, in offset order (step 1)."""
    batches: list[SourceBatch] = []
    next_offset = 0
    for i, source in enumerate(sources):
        position = 0
        while position < source.size_bytes:
            data = source.handle.read(position, HEADER_BYTES)
            if len(data) < HEADER_BYTES:
                raise CorruptRecordError(f"{source.segment}: header cut at {position}")
            fields = BATCH_HEADER.unpack(data)
            base, length, epoch, magic, _, attributes, delta = fields[:7]
            producer_id, base_sequence, count = fields[9], fields[11], fields[12]
            size = length + LOG_OVERHEAD
            last = base + delta
            if (
                magic != MAGIC
                or size < HEADER_BYTES
                or position + size > source.size_bytes
                or not max(next_offset, source.base_offset) <= base <= last < source.end_offset
            ):
                raise CorruptRecordError(f"{source.segment}: bad batch header at {position}")
            control = bool(attributes & ATTR_CONTROL)
            marker = None
            if control and count > 0:
                marker = control_record_kind(source.handle.read(position, size))
            transactional = bool(attributes & ATTR_TRANSACTIONAL)
            flags = (control, count, transactional, marker, base_sequence >= 0)
            batches.append(SourceBatch(i, position, size, base, last, epoch, producer_id, *flags))
            position += size
            next_offset = last + 1
        if not batches or batches[-1].source != i:
            raise CorruptRecordError(f"{source.segment}: an inactive segment with no batch")
        if next_offset != source.end_offset:  # segments end where the next one starts
            raise CorruptRecordError(f"{source.segment}: ends at {next_offset - 1}")
    return batches


def group_segments(
    sources: Sequence[SourceSegment], batches: Sequence[SourceBatch], config: LogConfig
) -> list[CleanedGroup]:
    """Consecutive old segments, together within ``segment.bytes`` and the index limits."""
    max_bytes = min(config.segment_bytes, MAX_GROUP_BYTES)
    max_batches = min(config.max_offset_index_entries, config.max_time_index_entries - 1)
    counts = [0] * len(sources)
    for batch in batches:
        counts[batch.source] += 1
    groups: list[CleanedGroup] = []
    first_batch = 0
    i = 0
    while i < len(sources):
        first = i
        size, grouped = sources[i].size_bytes, counts[i]
        i += 1
        while i < len(sources):
            source = sources[i]
            if (
                size + source.size_bytes > max_bytes
                or grouped + counts[i] > max_batches
                or source.end_offset - 1 - sources[first].base_offset > INT32_MAX
            ):
                break
            size += source.size_bytes
            grouped += counts[i]
            i += 1
        base, end = sources[first].base_offset, sources[i - 1].end_offset
        batch_range = range(first_batch, first_batch + grouped)
        groups.append(CleanedGroup(first, i, base, end, batch_range))
        first_batch += grouped
    assert first_batch == len(batches)
    return groups


class SegmentWriter:
    """Appends cleaned batches to a new segment, ``WRITE_CHUNK_BYTES`` per storage append."""

    def __init__(self, segment: LogSegment, now_ms: int) -> None:
        self._segment = segment
        self._now_ms = now_ms
        self._buffers: list[Buffer] = []
        self._headers: list[BatchHeader] = []
        self._size = 0
        self.batches = 0

    def add(self, data: Buffer) -> None:
        self._buffers.append(data)
        self._headers.append(parse_header(data))
        self._size += len(data)
        self.batches += 1
        if self._size >= WRITE_CHUNK_BYTES:
            self._write()

    def _write(self) -> None:
        if self._buffers:
            self._segment.append(self._buffers, self._headers, self._size, self._now_ms)
            self._buffers, self._headers, self._size = [], [], 0

    def finish(self) -> None:
        self._write()
        self._segment.on_become_inactive()
        self._segment.flush()
