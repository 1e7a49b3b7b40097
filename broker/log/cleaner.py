"""``LogCleaning``: compaction of one partition log (Kafka's ``LogCleaner``, one pass).

A log with ``cleanup.policy=compact`` keeps, per key, at least the record with the highest
offset; the cleaner removes older records of a key, and tombstones (null values) once they
have been readable for ``delete.retention.ms``.  Offsets never change: cleaning leaves gaps.

Which segments a pass cleans, and when one is due: cleaning_plan.py.  The header walk, the
grouping of segments and the writer of a new one: cleaned_segments.py.

A pass (``build``, off the event loop if the caller likes; then ``PartitionLog.complete_clean``
on it):

1. walk the batch headers of every segment from the first through ``E``: which batch opens a
   leader epoch, which is each producer's last, where each group ends (step 3); with the
   aborted-transaction index entries of the range, which batches hold data of an aborted
   transaction and which markers may go (cleaned_transactions.py: it reads the one record of
   each control batch);
2. the offset map, key -> highest offset, over the dirty batches but those of aborted
   transactions, up to ``max_map_entries`` keys (it stops at a batch boundary: the next pass
   goes on from there);
3. rewrite the segments from the first, in groups of consecutive segments (together at most
   ``segment.bytes``, their batches within the index limits), each into one new segment named
   after the group's first, written as ``.cleaned`` files and fsynced.  A record below the map's
   end is dropped if the map holds a higher offset for its key, or if it is a tombstone in a
   batch whose delete horizon has passed; every other record is kept (null keys too, and
   everything at or above the map's end: not judged yet).  A batch of an aborted transaction
   keeps no record, wherever it is.  A marker (control batch) is copied as it is while its
   transaction may have data left; once it has none, it gets a delete horizon as a tombstone
   does, and goes after it.  A batch keeping every record and needing no new delete horizon
   is copied byte for byte; otherwise record_filter.py rewrites it (producer id, epoch,
   sequence and the transactional bit stay).  A batch keeping no record goes, except that
   its header stays as an empty batch when it
     - ends its group: the new segment must end where the old ones did (the loader takes a
       segment that ends before the next one starts for a crash that lost its tail);
     - opens a leader epoch (the first batch of an epoch newer than all before it): the leader
       epoch cache, derived from batch headers (leader_epoch_cache.py), then stays what a
       rescan gives, without being touched;
     - is its producer's last batch with sequences in the range (a data batch, or what a
       pass left of one; markers carry none) while an earlier batch of that producer
       stays: producer state is rebuilt from batch headers at open (replica_manager.py), and
       must not fall back to that earlier batch's sequence.  (If no batch of the producer
       stays, it is forgotten, which the producer state tolerates; Kafka instead keeps the
       last batch of every producer that has not expired.  A truncation below the cleaned
       range, which only an unclean leader election makes, can still uncover an earlier
       batch of a producer whose later ones are gone.)
4. swap each new segment in for its group (segment_swap.py; crash-safe, one group at a time),
   then checkpoint the map's end as the next first dirty offset.  The new segment's
   aborted-transaction index holds the entries of the ABORT markers kept with data
   (``CleanedGroup.aborted_txns``); the entries of the others go: no data of theirs is left.

Delete horizon (record_filter.py, KIP-534): the pass that first keeps a tombstone stamps its
batch with now + ``delete.retention.ms``; a later pass after that time removes it.  The pass
that stamps it is one in which the tombstone was judged the latest of its key, so every older
record of the key is gone by then: removing the tombstone later cannot bring one back.  A
marker is stamped by the pass that first finds no data of its transaction before it.

The range ends at or below the last stable offset (the caller's, cleaning_plan.py): every
transaction with data in it is decided, and an aborted one has its index entry.

Threads.  ``prepare`` (``PartitionLog.prepare_clean``) runs on the event loop and captures
the file handles and sizes of the segments to clean; ``build`` then reads only those files,
which nothing else writes (they are inactive; a retention, truncation or close meanwhile makes
``complete_clean`` throw the work away), and writes only its own ``.cleaned`` files: it may
run in a worker thread while appends go on.  ``complete_clean`` (the swap: renames, a few
fsyncs of the directory, opening the new segments) must run on the event loop thread, as must
every other ``PartitionLog`` method.  The build is CPU-bound Python: in a thread it shares
the GIL with the event loop (which still gets the interpreter every switch interval, 5 ms).

Cost: the dirty section is read twice, the clean one once, every segment from the first to
``E`` is written once; records are decoded in the map pass, and again only in batches that
keep some but not all of them (the map pass counts, per batch, the records that stay).  The
map holds one entry per dirty key.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from broker.log.cleaned_segments import (
    CleanedGroup,
    SegmentWriter,
    SourceBatch,
    SourceSegment,
    group_segments,
    walk_headers,
)
from broker.log.cleaned_transactions import TransactionVerdicts, judge_transactions
from broker.log.cleaning_plan import CleaningPlan
from broker.log.config import LogConfig
from broker.log.errors import CorruptIndexError
from broker.log.file_records import ChunkedReader
from broker.log.record_filter import (
    ScannedRecord,
    empty_batch,
    has_delete_horizon,
    rebuild_batch,
    scan_records,
)
from broker.log.segment import LogSegment
from broker.log.segment_swap import CLEANED_SUFFIX, commit_swap, finish_swap, remove_cleaned_files
from broker.log.txn_index import AbortedTxn
from broker.storage import Buffer, Storage
from kafka_protocol.exceptions import CorruptRecordError, ProtocolError
from kafka_protocol.record_batch import NO_PRODUCER_ID, RecordBatch

logger = logging.getLogger("broker.log")

CLEANER_OFFSET_FILE = "cleaner-offset-checkpoint"
DEFAULT_MAX_MAP_ENTRIES = 1_000_000  # keys in the offset map (a few hundred bytes each)


@dataclass(frozen=True, slots=True)
class CleanResult:
    first_offset: int  # the rewritten range [first_offset, end_offset)
    end_offset: int
    first_dirty_offset: int  # as the pass began
    next_dirty_offset: int  # the map's end: checkpointed for the next pass
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    batches_before: int
    batches_after: int
    records_before: int
    records_after: int
    tombstones_removed: int
    aborted_records_removed: int = 0
    markers_removed: int = 0

    @property
    def bytes_removed(self) -> int:
        return self.bytes_before - self.bytes_after


@dataclass(slots=True)
class _Counts:
    records_before: int = 0
    records_after: int = 0
    tombstones_removed: int = 0
    aborted_records_removed: int = 0
    markers_removed: int = 0


class LogCleaning:
    """One pass over one log.  ``build`` (any thread), then ``PartitionLog.complete_clean``
    (the event loop), or ``discard``."""

    def __init__(
        self,
        storage: Storage,
        directory: str,
        config: LogConfig,
        segments: Sequence[LogSegment],
        plan: CleaningPlan,
        now_ms: int,
        max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
        aborted_transactions: Sequence[AbortedTxn] = (),
    ) -> None:
        """Use ``PartitionLog.prepare_clean`` (it captures the segments on the event loop).
        ``aborted_transactions``: the aborted-transaction index entries overlapping the
        range (``PartitionLog.aborted_transactions``)."""
        assert max_map_entries >= 1
        self.storage = storage
        self.directory = directory
        self.config = config
        self.plan = plan
        self.now_ms = now_ms
        self.max_map_entries = max_map_entries
        self.aborted_transactions = aborted_transactions
        cleaned = segments[: plan.segments]
        ends = [s.base_offset for s in segments[1 : plan.segments + 1]]
        self.sources = [
            SourceSegment(s, s.base_offset, end, s.size_bytes, s.records.handle)
            for s, end in zip(cleaned, ends, strict=True)
        ]
        self.groups: list[CleanedGroup] = []
        self.next_dirty_offset = plan.first_dirty_offset
        # The earliest delete horizon of a batch left with a tombstone (None: no such batch).
        self.delete_horizon_ms: int | None = None
        self.built = False
        self.cancelled = False
        self.error: OSError | ProtocolError | None = None
        self._batches: list[SourceBatch] = []
        self._counts = _Counts()
        self._epoch_openers: set[int] = set()  # indexes of batches opening a leader epoch
        # producer id -> index of its last batch with sequences (markers have none)
        self._last_of_producer: dict[int, int] = {}
        self._kept_producers: set[int] = set()  # producers with a batch kept so far
        self._latest: dict[bytes, int] = {}  # the offset map (step 2)
        self._txn = TransactionVerdicts()
        self._live: list[int] = []  # per batch: records that stay (-1: not mapped)
        self._live_tombstones: list[int] = []  # per batch: tombstones among them

    @property
    def old_segments(self) -> list[LogSegment]:
        return [s.segment for s in self.sources]

    def cancel(self) -> None:
        """Ask a running ``build`` to stop soon (from any thread); the work is then discarded."""
        self.cancelled = True

    # --- build: any thread --------------------------------------------------------------------

    def build(self) -> None:
        """Steps 1-3: write the new segments as ``.cleaned`` files.  Touches nothing the log's
        other methods use.  An I/O error or corrupt data ends it in ``error`` (for
        ``complete_clean``) and removes the files written so far."""
        assert not self.built and self.error is None, "a pass builds once"
        try:
            self._batches = walk_headers(self.sources)
            self._txn = judge_transactions(self._batches, self.aborted_transactions)
            self._find_pinned()
            self.groups = group_segments(self.sources, self._batches, self.config)
            self.next_dirty_offset = self._build_offset_map()
            for group in self.groups:
                if self.cancelled:
                    return
                self._write_group(group)
        except (OSError, ProtocolError) as error:  # complete_clean reports it
            self.error = error
            self.discard()
            return
        except BaseException:
            self.discard()
            raise
        self.built = not self.cancelled

    def discard(self) -> None:
        """Remove the ``.cleaned`` files (best effort; the loader removes leftovers)."""
        for group in self.groups:
            remove_cleaned_files(self.storage, self.directory, group.base_offset)

    def _read(self, reader: ChunkedReader, batch: SourceBatch) -> tuple[RecordBatch, bytes | None]:
        """The batch, CRC-checked, and its records decompressed (None for a control batch)."""
        view = reader.read(batch.position, batch.size_bytes)
        if len(view) != batch.size_bytes:
            raise CorruptRecordError(f"batch at offset {batch.base_offset} is cut short")
        record_batch = RecordBatch(view).validate()
        return record_batch, None if batch.is_control else record_batch.records_section()

    def _build_offset_map(self) -> int:
        """Step 2: key -> offset of its latest record (``~offset`` for a tombstone) over the
        dirty batches, in ``self._latest``; and how many records of each mapped batch stay.
        Returns where the map ends."""
        first_dirty = self.plan.first_dirty_offset
        latest = self._latest
        nulls: dict[int, int] = {}  # mapped batch -> records with a null key (they stay)
        end = first_dirty
        reader, reader_source = None, -1
        aborted = self._txn.aborted_data
        for i, batch in enumerate(self._batches):
            if batch.last_offset < first_dirty:
                continue
            if self.cancelled:
                return end
            if i in aborted:  # goes whole, and must not supersede a committed record
                end = batch.last_offset + 1
                continue
            if latest and len(latest) + batch.records_count > self.max_map_entries:
                logger.info(
                    "log cleaner offset map full dir=%s keys=%d end=%d",
                    self.directory,
                    len(latest),
                    end,
                )
                break
            if not batch.is_control:
                if reader is None or batch.source != reader_source:
                    source = self.sources[batch.source]
                    reader = ChunkedReader(source.handle, source.size_bytes)
                    reader_source = batch.source
                record_batch, section = self._read(reader, batch)
                assert section is not None
                null = 0
                for record in scan_records(record_batch, section):
                    if record.key is None:
                        null += 1
                    else:
                        latest[record.key] = ~record.offset if record.tombstone else record.offset
                nulls[i] = null
            end = batch.last_offset + 1
        else:
            end = max(first_dirty, self.plan.end_offset)
        self._count_live(nulls)
        return end

    def _count_live(self, nulls: dict[int, int]) -> None:
        """Per mapped batch: its records that stay (null keys, and the latest of each key) and
        how many of those are tombstones, so that a batch that keeps all or none of its
        records is copied or dropped without decoding it again."""
        self._live = [-1] * len(self._batches)  # -1: not mapped
        self._live_tombstones = [0] * len(self._batches)
        for i, null in nulls.items():
            self._live[i] = null
        bases = [b.base_offset for b in self._batches]
        for value in self._latest.values():
            i = bisect_right(bases, value if value >= 0 else ~value) - 1
            self._live[i] += 1
            if value < 0:
                self._live_tombstones[i] += 1

    # --- step 3 -------------------------------------------------------------------------------

    def _find_pinned(self) -> None:
        """The batches that open a leader epoch (as leader_epoch_cache.py derives them) and the
        last batch of each producer that carries its sequences: a data batch, not a marker
        (Kafka keeps a producer's last data batch, ``lastRecordsOfActiveProducers``)."""
        latest_epoch = -1
        for i, batch in enumerate(self._batches):
            if batch.partition_leader_epoch > latest_epoch:
                self._epoch_openers.add(i)
                latest_epoch = batch.partition_leader_epoch
            if batch.producer_id != NO_PRODUCER_ID and batch.sequenced:
                self._last_of_producer[batch.producer_id] = i

    def _write_group(self, group: CleanedGroup) -> None:
        segment = LogSegment.create(
            self.storage, self.directory, group.base_offset, self.config, file_suffix=CLEANED_SUFFIX
        )
        try:
            writer = SegmentWriter(segment, self.now_ms)
            reader: ChunkedReader | None = None
            for i in group.batches:
                if self.cancelled:
                    return
                batch = self._batches[i]
                source = self.sources[batch.source]
                if reader is None or batch.position == 0:
                    reader = ChunkedReader(source.handle, source.size_bytes)
                data = self._clean_batch(reader, i, self._pinned(i, group))
                if data is not None:
                    writer.add(data)
                    if batch.producer_id != NO_PRODUCER_ID:
                        self._kept_producers.add(batch.producer_id)
                if (entry := self._txn.kept_entries.get(i)) is not None:
                    assert data is not None, "a marker kept for its data is written"
                    group.aborted_txns.append(entry)
            writer.finish()
            assert segment.next_offset == group.end_offset, (segment, group)
            group.size_bytes, group.batches_after = segment.size_bytes, writer.batches
        finally:
            segment.close()

    def _pinned(self, i: int, group: CleanedGroup) -> bool:
        """Whether batch ``i`` stays, as an empty batch if it keeps no record (see above)."""
        producer_id = self._batches[i].producer_id
        return (
            i == group.batches[-1]
            or i in self._epoch_openers
            or (
                producer_id in self._kept_producers and self._last_of_producer.get(producer_id) == i
            )
        )

    def _clean_batch(self, reader: ChunkedReader, i: int, pinned: bool) -> Buffer | None:
        """What stays of batch ``i``: its bytes as they are, rewritten, or None."""
        batch, counts = self._batches[i], self._counts
        view = reader.read(batch.position, batch.size_bytes)
        if len(view) != batch.size_bytes:
            raise CorruptRecordError(f"batch at offset {batch.base_offset} is cut short")
        record_batch = RecordBatch(view)
        if batch.is_control:
            return self._clean_marker(record_batch.validate(), i, pinned)
        counts.records_before += batch.records_count
        if i in self._txn.aborted_data:
            counts.aborted_records_removed += batch.records_count
            return empty_batch(record_batch.validate()) if pinned else None
        judged = batch.last_offset < self.next_dirty_offset
        live = self._live[i]
        if not judged or (live == batch.records_count and not self._live_tombstones[i]):
            counts.records_after += batch.records_count  # every record stays as it is
            return record_batch.validate().buf
        if live == 0:  # every record superseded (checked by the map pass)
            return empty_batch(record_batch) if pinned else None
        section = record_batch.validate().records_section()
        kept = self._kept(record_batch, scan_records(record_batch, section))
        counts.records_after += len(kept)
        if not kept:
            return empty_batch(record_batch) if pinned else None
        # Null keys stay forever, so only a keyed tombstone waits for its delete horizon.
        if any(record.tombstone and record.key is not None for record in kept):
            horizon = None
            if not has_delete_horizon(record_batch):
                horizon = self.now_ms + self.config.delete_retention_ms
            self._note_delete_horizon(
                horizon if horizon is not None else record_batch.base_timestamp
            )
            if horizon is not None:
                return rebuild_batch(record_batch, section, kept, delete_horizon_ms=horizon)
        if len(kept) == batch.records_count:
            return record_batch.buf
        return rebuild_batch(record_batch, section, kept)

    def _clean_marker(self, batch: RecordBatch, i: int, pinned: bool) -> Buffer | None:
        """What stays of control batch ``i``: as it is while its transaction may have data
        left; once discardable, stamped with a delete horizon, and removed after it
        (cleaned_transactions.py)."""
        if i not in self._txn.discardable_markers:
            return batch.buf
        if batch.records_count == 0:  # emptied by an earlier pass
            return batch.buf if pinned else None
        if not has_delete_horizon(batch):
            horizon = self.now_ms + self.config.delete_retention_ms
            self._note_delete_horizon(horizon)
            section = batch.records_section()
            return rebuild_batch(
                batch, section, scan_records(batch, section), delete_horizon_ms=horizon
            )
        if self.now_ms < batch.base_timestamp:
            self._note_delete_horizon(batch.base_timestamp)
            return batch.buf
        self._counts.markers_removed += 1
        return empty_batch(batch) if pinned else None

    def _note_delete_horizon(self, horizon_ms: int) -> None:
        if self.delete_horizon_ms is None or horizon_ms < self.delete_horizon_ms:
            self.delete_horizon_ms = horizon_ms

    def _kept(self, batch: RecordBatch, records: list[ScannedRecord]) -> list[ScannedRecord]:
        """The records of a judged batch that stay."""
        latest = self._latest
        horizon_passed = has_delete_horizon(batch) and self.now_ms >= batch.base_timestamp
        kept = []
        for record in records:
            key = record.key
            if key is not None:
                found = latest.get(key)
                # The map holds the key's highest offset: anything else is older.
                if found is not None and found != record.offset and found != ~record.offset:
                    continue
                if record.tombstone and horizon_passed:
                    self._counts.tombstones_removed += 1
                    continue
            kept.append(record)
        return kept

    # --- the swap: the event loop -------------------------------------------------------------

    def swap_in(self, group: CleanedGroup) -> LogSegment:
        """Step 4 for one group (segment_swap.py); the new segment, opened."""
        replaced = [s.base_offset for s in self.sources[group.first : group.last]]
        commit_swap(self.storage, self.directory, group.base_offset)
        finish_swap(self.storage, self.directory, group.base_offset, replaced)
        segment = LogSegment(self.storage, self.directory, group.base_offset, self.config)
        try:
            segment.load_trusted(group.end_offset)
        except CorruptIndexError:  # no timestamp in the whole segment: nothing to index
            segment.rebuild_indexes()
        return segment

    def result(self, segments_after: int) -> CleanResult:
        counts = self._counts
        return CleanResult(
            first_offset=self.sources[0].base_offset,
            end_offset=self.plan.end_offset,
            first_dirty_offset=self.plan.first_dirty_offset,
            next_dirty_offset=self.next_dirty_offset,
            segments_before=len(self.sources),
            segments_after=segments_after,
            bytes_before=sum(s.size_bytes for s in self.sources),
            bytes_after=sum(g.size_bytes for g in self.groups),
            batches_before=len(self._batches),
            batches_after=sum(g.batches_after for g in self.groups),
            records_before=counts.records_before,
            records_after=counts.records_after,
            tombstones_removed=counts.tombstones_removed,
            aborted_records_removed=counts.aborted_records_removed,
            markers_removed=counts.markers_removed,
        )
