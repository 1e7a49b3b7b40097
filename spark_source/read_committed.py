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

from kafka_protocol.record_batch import ControlRecordType, RecordBatch, control_record_type

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


def _is_abort_marker(batch: RecordBatch, check_crc: bool) -> bool:
    for record in batch.validate(crc=check_crc).iter_records():
        return control_record_type(record) is ControlRecordType.ABORT
    return False


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
