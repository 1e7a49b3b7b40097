"""The partition log's read path: Fetch's slices of whole batches and ListOffsets' lookups by
timestamp, over the log's segments (``PartitionLog`` checks bounds and owns the I/O guard).

``read_slice`` finds the segment by bisecting base offsets, the batch holding the fetch
offset by the offset index and a short walk of batch headers, the end by the high watermark
(``limit``) and ``max_bytes`` the same way, and returns a :class:`FetchSlice`: a file region
of whole batches for ``sendfile``.  Nothing here parses records, except to find a record's
exact offset by timestamp.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import NamedTuple

from broker.log.segment import LOG_SUFFIX, LogSegment
from broker.storage import StorageHandle

# ListOffsets sentinels (Kafka's ListOffsetsRequest)
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4


class FetchSlice(NamedTuple):
    """Whole batches ``[position, position + size_bytes)`` of one segment file."""

    handle: StorageHandle
    file_path: str
    position: int
    size_bytes: int
    first_offset: int  # base offset of the first batch (the fetch offset when empty)
    segment_base_offset: int

    @property
    def fileno(self) -> int | None:
        """For ``sendfile``; None for in-memory storage (use ``PartitionLog.read_bytes``)."""
        return self.handle.fileno()


def read_slice(
    segments: Sequence[LogSegment],
    bases: Sequence[int],
    offset: int,
    max_bytes: int,
    limit: int,
    min_one_batch: bool,
) -> FetchSlice:
    """The slice from ``offset`` (within the log's bounds) up to ``limit``; empty at the end
    of the active segment when nothing below ``limit`` is at or after ``offset``."""
    if offset < limit:
        first = bisect_right(bases, offset) - 1
        for segment in segments[first:]:
            found = _slice(segment, offset, max_bytes, limit, min_one_batch)
            if found is not None:
                return found
    active = segments[-1]
    return FetchSlice(
        active.records.handle,
        active.path(LOG_SUFFIX),
        active.size_bytes,
        0,
        offset,
        active.base_offset,
    )


def _slice(
    segment: LogSegment, offset: int, max_bytes: int, limit: int, min_one: bool
) -> FetchSlice | None:
    """The slice from ``segment``; None if no batch of it holds ``offset`` or later."""
    found = segment.find_batch(offset)
    if found is None:
        return None
    start, header = found
    end = start
    if header.last_offset < limit:
        end = segment.position_of(limit) if limit < segment.next_offset else segment.size_bytes
        if end - start > max_bytes:
            end = segment.last_boundary_at_or_before(start + max_bytes, start)
            if end == start and min_one:
                end = start + header.size_bytes
    path = segment.path(LOG_SUFFIX)
    handle = segment.records.handle
    return FetchSlice(handle, path, start, end - start, header.base_offset, segment.base_offset)


def offset_for_timestamp(
    segments: Sequence[LogSegment], log_start_offset: int, timestamp_ms: int
) -> tuple[int, int] | None:
    """``(offset, timestamp)`` for ListOffsets: the first record (at or after the log start)
    whose timestamp is at least ``timestamp_ms``, exact to the record; or for
    ``MAX_TIMESTAMP`` the first record with the largest timestamp.  None when no record
    qualifies.  (``LATEST_TIMESTAMP`` and the earliest sentinels are the log's offsets.)"""
    if timestamp_ms == MAX_TIMESTAMP:
        return _offset_of_max_timestamp(segments, log_start_offset)
    if timestamp_ms < 0:
        raise ValueError(f"unknown ListOffsets timestamp {timestamp_ms}")
    for segment in segments:
        if segment.next_offset <= log_start_offset:
            continue
        if segment.max_timestamp >= timestamp_ms:
            found = segment.find_offset_by_timestamp(timestamp_ms, log_start_offset)
            if found is not None:
                return found
    return None


def _offset_of_max_timestamp(segments: Sequence[LogSegment], start: int) -> tuple[int, int] | None:
    """The first record (at or after the log start) with the largest timestamp."""
    best: tuple[int, int, LogSegment] | None = None  # (timestamp, batch offset, segment)
    for segment in segments:
        if segment.next_offset <= start:
            continue
        found = segment.max_timestamp_from(start)
        if found is not None and (best is None or found[0] > best[0]):
            best = (*found, segment)
    if best is None:
        return None
    _, batch_offset, segment = best
    batch = segment.find_batch(max(batch_offset, start))
    assert batch is not None, f"{segment}: batch of the max timestamp not found"
    records = [r for r in segment.read_batch(*batch).iter_records() if r.offset >= start]
    if not records:  # a batch emptied by compaction keeps its max timestamp
        return _offset_of_max_timestamp_by_records(segments, start)
    top = max(r.timestamp for r in records)
    return next((r.offset, r.timestamp) for r in records if r.timestamp == top)


def _offset_of_max_timestamp_by_records(
    segments: Sequence[LogSegment], start: int
) -> tuple[int, int] | None:
    """The same, record by record."""
    best: tuple[int, int] | None = None
    for segment in segments:
        found = segment.find_batch(start) if segment.next_offset > start else None
        for position, header in segment.records.iter_headers(found[0]) if found else ():
            for r in segment.read_batch(position, header).iter_records():
                if r.offset >= start and (best is None or r.timestamp > best[1]):
                    best = (r.offset, r.timestamp)
    return best
