"""The fetch cursor: where a consumer of one partition reads next, and what a Fetch answer
does to it.

Theory of operation
-------------------
A :class:`FetchCursor` reads ``[start, end)`` of one partition (``end`` may be
:data:`UNBOUNDED`).  Its ``position`` is the next offset wanted; it only ever moves forward, past
whole batches of a Fetch answer (:func:`cover` reads batch headers only; :func:`records_from`
decodes the records, for a consumer that wants them).  What the shell does with an answer::

    answer                                   cursor                       shell
    records, whole batches from position     RECORDS: advances            hand them out
    records, only a truncated batch          GROW: larger partition       fetch again
                                             limit (or too large: raise)
    no records (or none in range)            NO_RECORDS                   long-poll again
    OFFSET_OUT_OF_RANGE, below log start     BELOW_LOG_START              data lost (retention)
    OFFSET_OUT_OF_RANGE, above the log end   REFRESH_AND_RETRY, then on   the leader may be
                                             the second in a row          stale; then data lost
                                             LOG_ENDS_BEFORE              (unclean election)

Other error codes are :mod:`~kafka_protocol.client.error_policy`'s.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

from kafka_protocol._codec import Buffer
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.record_batch import LOG_OVERHEAD, MAGIC, Record, iter_batches

UNBOUNDED: Final = 2**63 - 1  # no end: a consumer's cursor
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT: Final = 23
_MAGIC_AT: Final = 16
_MIN_BATCH_BYTES: Final = 61  # a RecordBatch v2 header
OUT_OF_RANGE_TRIES: Final = 2  # OFFSET_OUT_OF_RANGE above log start this often in a row: lost


@dataclass(frozen=True, slots=True)
class Cover:
    """What one fetch's records give: ``chunk`` (whole batches overlapping the range, or
    None), the position after it, and the size of a truncated first batch (0 if none)."""

    chunk: memoryview | None
    next_position: int
    truncated_bytes: int = 0


def cover(records: memoryview, position: int, end: int) -> Cover:
    """The whole batches of ``records`` that overlap ``[position, end)``.

    Batches wholly below ``position`` are skipped; the first batch starting at or after
    ``end`` stops the walk (if it is the first batch, the range has no records left, as after
    compaction: the position becomes ``end``).  A truncated tail is left out.  A batch header
    that cannot be one raises :class:`CorruptRecordError`.
    """
    first = last = -1
    next_position = position
    pos, size = 0, len(records)
    while size - pos >= LOG_OVERHEAD:
        base_offset, length = _OFFSET_AND_LENGTH.unpack_from(records, pos)
        batch_end = pos + LOG_OVERHEAD + length
        if length < _MIN_BATCH_BYTES - LOG_OVERHEAD:
            raise CorruptRecordError(f"batch at offset {base_offset} claims {length} bytes")
        if batch_end > size:
            if first < 0:
                return Cover(None, position, batch_end - pos)
            break
        if records[pos + _MAGIC_AT] != MAGIC:
            magic = records[pos + _MAGIC_AT]
            raise CorruptRecordError(f"batch at offset {base_offset} has magic {magic}")
        if base_offset >= end:
            if first < 0:
                next_position = end
            break
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(records, pos + _LAST_OFFSET_DELTA_AT)
        if base_offset + delta >= position:
            if first < 0:
                first = pos
            last = batch_end
            next_position = base_offset + delta + 1
        pos = batch_end
    if first < 0:
        return Cover(None, next_position)
    return Cover(records[first:last], next_position)


def records_from(data: Buffer | None, position: int) -> tuple[list[Record], int]:
    """The records at or after ``position`` in a Fetch answer's records (whole batches: the
    first may begin before it; a partial last batch waits for the next fetch), and the
    position after them (past control batches and compacted gaps too)."""
    out: list[Record] = []
    for batch in iter_batches(data or b"", allow_truncated_tail=True):
        if batch.next_offset <= position:
            continue
        if not batch.is_control:
            out += [r for r in batch.validate().iter_records() if r.offset >= position]
        position = batch.next_offset
    return out, position


class Step(enum.Enum):
    RECORDS = "records: the position advanced"
    GROW = "only a truncated batch: fetch again with a larger partition limit"
    NO_RECORDS = "no records in range at the position"


class OutOfRange(enum.Enum):
    BELOW_LOG_START = "deleted by retention (or DeleteRecords)"
    REFRESH_AND_RETRY = "the leader may be stale: refresh metadata and retry"
    LOG_ENDS_BEFORE = "the leader's log ends before this offset (an unclean leader election?)"


class BatchTooLarge(Exception):
    """A batch is larger than any fetch this client may make."""


class FetchCursor:
    """The position of one partition's reader (see the module docstring)."""

    __slots__ = ("_out_of_range", "end", "max_partition_bytes", "partition_max_bytes", "position")

    def __init__(
        self, start: int, end: int, partition_max_bytes: int, max_partition_bytes: int
    ) -> None:
        assert start >= 0 and partition_max_bytes > 0, (start, partition_max_bytes)
        self.position = start
        self.end = end
        self.partition_max_bytes = partition_max_bytes  # the next fetch's limit
        self.max_partition_bytes = max_partition_bytes  # what growing may reach
        self._out_of_range = 0

    @property
    def done(self) -> bool:
        return self.position >= self.end

    def on_records(self, records: memoryview | None) -> tuple[Step, memoryview | None]:
        """Take one partition's records from a Fetch answer at the position: the step, and
        the chunk of whole batches handed out (RECORDS only).  Raises
        :class:`BatchTooLarge` when a truncated batch cannot fit any fetch."""
        if records is None or not len(records):
            return Step.NO_RECORDS, None
        found = cover(records, self.position, self.end)
        if found.chunk is None and found.truncated_bytes:
            self._grow(found.truncated_bytes)
            return Step.GROW, None
        if found.next_position == self.position:  # nothing in range: as no records
            return Step.NO_RECORDS, None
        self._move_to(found.next_position)
        return Step.RECORDS, found.chunk

    def on_records_decoded(self, next_position: int) -> None:
        """A consumer decoded the records (:func:`records_from`) up to ``next_position``."""
        if next_position != self.position:
            self._move_to(next_position)

    def on_out_of_range(self, log_start_offset: int) -> OutOfRange:
        """OFFSET_OUT_OF_RANGE at the position, given the partition's log start offset."""
        if self.position < log_start_offset:
            return OutOfRange.BELOW_LOG_START
        self._out_of_range += 1
        if self._out_of_range >= OUT_OF_RANGE_TRIES:
            return OutOfRange.LOG_ENDS_BEFORE
        return OutOfRange.REFRESH_AND_RETRY

    def _move_to(self, next_position: int) -> None:
        assert next_position > self.position, (self.position, next_position)  # never back
        self.position = next_position
        self._out_of_range = 0

    def _grow(self, needed: int) -> None:
        if needed > self.max_partition_bytes:
            raise BatchTooLarge(
                f"the batch at offset {self.position} is {needed} bytes, above the fetch limit"
                f" of {self.max_partition_bytes} bytes (raise fetch.max.bytes)"
            )
        self.partition_max_bytes = min(
            self.max_partition_bytes, max(needed, 2 * self.partition_max_bytes)
        )
