"""What compaction does with transactions (Kafka's ``CleanedTransactionMetadata``), pure.

The cleaner (cleaner.py) walks the batch headers of the range it cleans, in offset order, and
asks here, per batch, given the aborted transactions of the range (the ``.txnindex`` entries,
txn_index.py, whose markers are in or after the range):

* a **data batch of an aborted transaction** (transactional, and its producer has an aborted
  transaction whose first offset is at or below the batch) is removed whole, whatever its
  keys: a read_committed reader never sees it, and it must not stand in the offset map for
  its keys (it would supersede a committed record);
* a **COMMIT or ABORT marker** may go only once no batch of its transaction is left: it is
  *discardable* when this pass read no batch of the transaction before it (a pass that reads
  some keeps it; the batches themselves may go in this very pass, and the next pass then
  finds the marker discardable).  A discardable marker is kept until its delete horizon
  (``delete.retention.ms`` after the pass that first found it discardable, stamped on the
  batch as for tombstones, KIP-534), so that a reader that fetched the transaction's data
  before the cleaning still sees its end;
* the **index entries that stay** are those of the ABORT markers kept with data before them
  (Kafka's ``cleanedIndex``); an entry whose marker is discardable goes with this pass, since
  no data of its transaction is left for a reader to skip.  Keeping an entry past its marker
  would be wrong, not merely wasteful: a read_committed consumer that meets a later batch of
  the producer would take it as aborted until it saw an ABORT marker that no longer exists.

A control batch without records (a marker the cleaner emptied, or a data batch it had to keep
as a header) belongs to no transaction: it is always discardable and is never "data".

The range ends at or below the last stable offset (cleaning_plan.py), so every transaction
with a batch in it has its marker written, and an aborted one has its index entry.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from broker.log.txn_index import AbortedTxn
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.record_batch import ControlRecordType, RecordBatch

CONTROL_KEY = struct.Struct(">hh")  # a control record's key: version, type


class TxnBatch(Protocol):
    """What the judgement needs of one batch."""

    @property
    def last_offset(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...
    @property
    def marker(self) -> int | None:
        """A control batch's record type (ControlRecordType); None if it has no record."""


@dataclass(slots=True)
class TransactionVerdicts:
    """Per batch index: data of an aborted transaction, or a discardable marker; and per kept
    ABORT marker (batch index), its index entry."""

    aborted_data: set[int] = field(default_factory=set)
    discardable_markers: set[int] = field(default_factory=set)
    kept_entries: dict[int, AbortedTxn] = field(default_factory=dict)


@dataclass(slots=True)
class _Ongoing:
    entry: AbortedTxn
    data_seen: bool = False


def judge_transactions(
    batches: Sequence[TxnBatch], aborted: Sequence[AbortedTxn]
) -> TransactionVerdicts:
    """The verdicts for ``batches`` (in offset order), given the index entries ``aborted``
    that overlap them."""
    pending = [(e.first_offset, e.last_offset, i) for i, e in enumerate(aborted)]
    heapq.heapify(pending)
    ongoing_aborted: dict[int, _Ongoing] = {}  # producer id -> its aborted transaction
    ongoing_committed: set[int] = set()  # producers with data read, marker not yet
    verdicts = TransactionVerdicts()
    for i, batch in enumerate(batches):
        while pending and pending[0][0] <= batch.last_offset:
            entry = aborted[heapq.heappop(pending)[2]]
            ongoing_aborted.setdefault(entry.producer_id, _Ongoing(entry))
        pid = batch.producer_id
        if batch.is_control:
            if batch.marker == ControlRecordType.ABORT:
                txn = ongoing_aborted.pop(pid, None)
                if txn is not None and txn.data_seen:
                    verdicts.kept_entries[i] = txn.entry
                else:
                    verdicts.discardable_markers.add(i)
            elif batch.marker == ControlRecordType.COMMIT:
                if pid in ongoing_committed:
                    ongoing_committed.discard(pid)
                else:
                    verdicts.discardable_markers.add(i)
            elif batch.marker is None:  # emptied: already cleaned
                verdicts.discardable_markers.add(i)
        elif batch.is_transactional:
            txn = ongoing_aborted.get(pid)
            if txn is not None:
                txn.data_seen = True
                verdicts.aborted_data.add(i)
            else:
                ongoing_committed.add(pid)
    return verdicts


def control_record_kind(data: bytes) -> int:
    """The record type (``ControlRecordType``, or a type this broker does not know) in the key
    of the first record of the control batch ``data``."""
    record = next(RecordBatch(memoryview(data)).validate().iter_records(), None)
    if record is None:
        raise CorruptRecordError("a control batch misses its record")
    if record.key is None or len(record.key) < CONTROL_KEY.size:
        raise CorruptRecordError("a control record without its type")
    return int(CONTROL_KEY.unpack_from(record.key)[1])
