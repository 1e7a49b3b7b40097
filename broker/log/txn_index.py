"""``TransactionIndex``: one segment's ``.txnindex``, Kafka's aborted-transaction index.

A read_committed consumer must know which of the records it fetches belong to aborted
transactions; the broker tells it, per fetch, the ``(producer id, first offset)`` of every
aborted transaction that overlaps the fetched range (Kafka's ``collectAbortedTransactions``).
Each ABORT marker appended to a segment adds one entry to that segment's index, so the answer
is a walk of the indexes from the segment holding the fetch offset on; the entries of one
segment are in marker (``last_offset``) order.

On disk (big-endian, fixed-size entries, no header; created on the first entry)::

    <base>.txnindex   version int16 (0) | producer_id int64 | first_offset int64
                      | last_offset int64 | last_stable_offset int64          34 bytes

``first_offset``: the transaction's first batch; ``last_offset``: its ABORT marker;
``last_stable_offset``: the partition's LSO right after the marker (the first offset of the
earliest transaction still open then, or the marker's offset + 1).  A search may stop at the
first entry whose LSO reaches the upper bound: no transaction open before it can end later.

The entries live in memory (a segment has few); the file is appended at once and fsynced with
the segment.  Recovery of a segment (unclean shutdown) empties the index and the replica
manager's replay of the log refills it (``LogSegment.recover``, ``PartitionLog``).
"""

from __future__ import annotations

import itertools
import operator
import struct
from bisect import bisect_left
from typing import NamedTuple

from broker.log.errors import CorruptIndexError
from broker.storage import Storage, StorageHandle
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.record_batch import ControlRecordType, RecordBatch, control_record_type

TXN_INDEX_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = _ENTRY.size  # 34


MARKER_VALUE = struct.Struct(">hi")  # a marker's value: version int16 (0), coordinator epoch


def marker_value(coordinator_epoch: int) -> bytes:
    return MARKER_VALUE.pack(0, coordinator_epoch)


def read_marker(batch: RecordBatch) -> tuple[ControlRecordType, int] | None:
    """The type and coordinator epoch (-1 if absent) of a control batch's first record; None
    for an empty one (the cleaner keeps an empty batch where it removed a marker) or one of a
    type unknown here."""
    record = next(batch.iter_records(), None)
    if record is None:
        return None
    try:
        kind = control_record_type(record)
    except CorruptRecordError:  # a control type this broker does not know: not a marker
        return None
    value = record.value or b""
    epoch = MARKER_VALUE.unpack_from(value)[1] if len(value) >= MARKER_VALUE.size else -1
    return kind, epoch


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(TXN_INDEX_VERSION, *self)

    @classmethod
    def decode(cls, data: bytes, position: int = 0) -> AbortedTxn:
        version, *fields = _ENTRY.unpack_from(data, position)
        if version != TXN_INDEX_VERSION:
            raise CorruptIndexError(f"aborted transaction entry of version {version}")
        return cls(*fields)


_LAST_OFFSET = operator.itemgetter(2)


class TransactionIndex:
    """The aborted transactions whose markers are in one segment."""

    def __init__(self, storage: Storage, path: str) -> None:
        self._storage = storage
        self.path = path
        self._handle: StorageHandle | None = None
        self.entries: list[AbortedTxn] = []
        if storage.exists(path):
            self._load()

    def _load(self) -> None:
        handle = self._open()
        size = handle.size()
        data = handle.read(0, size)
        whole = size - size % ENTRY_BYTES
        try:
            self.entries = [AbortedTxn.decode(data, p) for p in range(0, whole, ENTRY_BYTES)]
        except CorruptIndexError:  # unreadable: the caller's recovery rebuilds it
            self.entries = []
            whole = 0
        if whole != size:  # a torn entry at the end (a crash mid-write)
            handle.truncate(whole)
            handle.flush()
        handle.close()  # reopened by the next write: most segments never change again
        self._handle = None

    def _open(self) -> StorageHandle:
        if self._handle is None:
            self._handle = self._storage.open(self.path)
        return self._handle

    def append(self, txn: AbortedTxn) -> None:
        if self.entries:
            previous = self.entries[-1].last_offset
            assert txn.last_offset > previous, f"{self.path}: marker {txn} after {previous}"
        assert txn.first_offset <= txn.last_offset, txn
        self._open().append([txn.encode()])
        self.entries.append(txn)

    def rewrite(self, entries: list[AbortedTxn]) -> None:
        """Replace every entry (the cleaner's swap; the caller flushes)."""
        if entries == self.entries:
            return
        handle = self._open()
        handle.truncate(0)
        if entries:
            handle.append([b"".join(e.encode() for e in entries)])
        self.entries = list(entries)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        keep = len(self.entries)
        while keep and self.entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(self.entries):
            return
        del self.entries[keep:]
        self._open().truncate(keep * ENTRY_BYTES)

    def reset(self) -> None:
        """Empty the index (before it is rebuilt from the log)."""
        self.entries = []
        if self._handle is not None or self._storage.exists(self.path):
            self._open().truncate(0)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """The entries overlapping ``[fetch_offset, upper_bound_offset)``, and whether the
        search is complete (an entry's LSO reached the upper bound: later segments hold no
        transaction that overlaps)."""
        found = []
        # entries with an earlier marker neither overlap nor end the search (their LSO is at
        # most their marker + 1, at most ``fetch_offset``): skip them by bisection
        start = bisect_left(self.entries, fetch_offset, key=_LAST_OFFSET)
        for txn in itertools.islice(self.entries, start, None):
            if txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
