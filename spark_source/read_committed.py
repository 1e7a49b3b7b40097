"""read_committed, on the reading side: which fetched batches belong to aborted transactions.

Pure: batch headers and a Fetch answer's ``aborted_transactions`` in, keep-or-skip out.

Theory of operation (Kafka's consumer, ``CompletedFetch.nextFetchedRecord``)
----------------------------------------------------------------------------
A read_committed Fetch answer carries records up to the partition's last stable offset and
the transactions that were aborted in its range, each as (producer id, first offset of the
transaction).  A producer has at most one transaction open at a time, and a transaction's
batches lie between its first offset and its ABORT or COMMIT marker (a control batch of the
same producer), so walking the batches in offset order::

    before a batch with a producer id    every aborted transaction whose first offset is at or
                                         below the batch's last offset makes its producer
                                         "aborting"
    a control batch (a marker)           never rows; an ABORT marker ends its producer's
                                         aborting state
    a transactional data batch           skipped while its producer is aborting
    anything else                        kept (idempotent and plain batches, committed
                                         transactions)

Every decision is per batch: a batch of an aborted transaction is skipped whole, so the
filter costs a few dictionary lookups per batch, never work per record.  The answer covers
whole transactions whose abort marker lies at or after the fetch offset, so each Fetch answer
is filtered on its own (no state carries from one answer to the next).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Final, NamedTuple

from kafka_protocol.compression import Compression
from kafka_protocol.record_batch import (
    HEADER_BYTES,
    ControlRecordType,
    RecordBatch,
    control_record_type,
)

READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1
ISOLATION_LEVELS: Final = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}


class AbortedTransaction(NamedTuple):
    """One entry of a Fetch answer's ``aborted_transactions``."""

    producer_id: int
    first_offset: int


class AbortedBatchFilter:
    """Walks one Fetch answer's batches in order and says which hold rows a read_committed
    reader may see (see the module docstring)."""

    __slots__ = ("_aborting", "_pending")

    def __init__(self, aborted: Iterable[AbortedTransaction]) -> None:
        self._pending = [(t.first_offset, t.producer_id) for t in aborted]
        heapq.heapify(self._pending)
        self._aborting: set[int] = set()

    def keep(self, batch: RecordBatch, *, check_crc: bool = True) -> bool:
        """Whether ``batch`` (the next one in offset order) holds visible records.  Control
        batches are never kept; an ABORT marker's record is decoded (after its CRC check,
        unless ``check_crc`` is false) to learn its type."""
        if batch.producer_id >= 0:
            last = batch.base_offset + batch.last_offset_delta
            while self._pending and self._pending[0][0] <= last:
                self._aborting.add(heapq.heappop(self._pending)[1])
            if batch.is_control:
                if batch.producer_id in self._aborting and _is_abort_marker(batch, check_crc):
                    self._aborting.discard(batch.producer_id)
                return False
            return not (batch.is_transactional and batch.producer_id in self._aborting)
        return not batch.is_control


_CONTROL_KEY_LENGTH: Final = 8  # zigzag varint of 4: a control key is version, type (int16s)


def _is_abort_marker(batch: RecordBatch, check_crc: bool) -> bool:
    """Whether the control batch's (first) record is an ABORT marker.  Markers are small and
    never compressed: their key is read in place (length, attributes, timestamp and offset
    deltas skipped), anything unexpected through the record decoder, which raises for what
    is corrupt."""
    batch.validate(crc=check_crc)
    if batch.records_count < 1:
        return False  # an emptied control batch (compaction) is no marker
    buf = batch.buf
    try:
        if batch.compression is Compression.NONE:
            pos = _skip_varint(buf, HEADER_BYTES) + 1  # the record's length, its attributes
            pos = _skip_varint(buf, _skip_varint(buf, pos))  # timestamp and offset deltas
            if buf[pos] == _CONTROL_KEY_LENGTH:
                kind = int.from_bytes(buf[pos + 3 : pos + 5], "big", signed=True)
                return kind == ControlRecordType.ABORT
    except IndexError:
        pass
    for record in batch.iter_records():
        return control_record_type(record) is ControlRecordType.ABORT
    return False


def _skip_varint(buf: memoryview, pos: int) -> int:
    while buf[pos] & 0x80:
        pos += 1
    return pos + 1


def parse_isolation_level(text: str) -> int:
    """Kafka's consumer key ``isolation.level``: read_uncommitted or read_committed."""
    level = ISOLATION_LEVELS.get(text.strip().lower())
    if level is None:
        raise ValueError(f"isolation.level must be read_uncommitted or read_committed: {text!r}")
    return level


__all__ = [
    "ISOLATION_LEVELS",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "AbortedBatchFilter",
    "AbortedTransaction",
    "parse_isolation_level",
]
