"""``PartitionLog``: one partition's log on disk, Kafka's layout and semantics.

Directory ``<log.dir>/<topic>-<partition>/``::

    00000000000000000000.log  .index  .timeindex     segment with base offset 0
                              .txnindex              (only if it holds ABORT markers)
    00000000000000172806.log  .index  .timeindex     ... the last segment is the active one
    log-start-offset                                 checkpoint (checkpoint.py)
    recovery-point                                   checkpoint
    leader-epoch-checkpoint                          where each leader epoch starts
                                                     (leader_epoch_cache.py)
    clean-shutdown                                   only between close() and the next open()

Offsets, as Kafka names them::

    log_start_offset  <=  high watermark (the caller's)  <=  log_end_offset
    recovery_point:   everything below it is fsynced (last_flushed_offset = recovery_point - 1)

Theory of operation.

* ``append`` numbers the batches from ``log_end_offset`` (validator.py: a new 17-byte prefix per
  batch, bodies not copied), rolls to a new segment first if the active one is full or old, and
  writes the whole call with ONE storage append (one ``writev``).  Then the flush policy
  (``flush.messages``, ``flush.ms``) may fsync.  The caller must keep one call within a segment
  (``max_append_bytes``), as Kafka refuses an append larger than ``segment.bytes``.
* ``append_as_follower`` writes the leader's batches as fetched, offsets and epochs untouched,
  after checking every complete one (fetched_batches.py); a run that outgrows the active
  segment continues in new ones, one storage append per segment.  Flush policy as ``append``.
* The leader epoch cache (leader_epoch_cache.py) follows every change: appends add newer
  epochs (a leader append with an older epoch than the log's is refused), truncation drops
  epochs from the end, moving the log start truncates it from the start.  It answers
  OffsetForLeaderEpoch (``end_offset_for_epoch``).
* ``read`` (reader.py) finds the segment by bisecting base offsets, the batch holding the
  fetch offset by the offset index and a short walk of batch headers, the end by the high
  watermark (``max_offset``) and ``max_bytes`` the same way, and returns a ``FetchSlice``: a
  file region of whole batches for ``sendfile``.  Nothing on the append or read path parses
  records.
* Retention (retention.py) deletes whole segments from the front, never the active one, and moves
  ``log_start_offset`` (checkpointed at once, so it survives a restart); ``truncate_to`` cuts a
  follower's divergent tail (log_truncation.py, a mixin of this class).  A deleted segment's
  files are unlinked at once but stay open for ``file.delete.delay.ms``, so a ``sendfile``
  already given its descriptor still reads valid bytes.
* Compaction (``cleanup.policy=compact``; log_compaction.py, a mixin of this class):
  ``prepare_clean`` picks the inactive segments below the last stable offset,
  ``LogCleaning.build`` (cleaner.py, any thread) writes their cleaned copies,
  ``complete_clean`` swaps them in and checkpoints where the next pass starts.  Retention by
  time and size applies only with ``cleanup.policy`` including ``delete``.
* Aborted transactions (aborted_txns.py, a mixin of this class; txn_index.py per segment):
  each ABORT marker's entry goes to the ``.txnindex`` of the segment it lands in, given by
  the caller (its producer state knows where the transaction began);
  ``aborted_transactions`` answers read_committed fetches from them; truncation and retention
  cut them with their segments, a cleaner swap merges them into the new segment.
* Any ``OSError`` takes the log offline (``KafkaStorageError`` from then on); reopening it runs
  recovery (loader.py), which is also what ``open`` does after a crash.

The read path lives in reader.py.  The rest is one class because append, truncation,
retention and the compaction swap all change the same segment list, offsets and checkpoints,
under one ``_check_invariants``; its retention and truncation, its compaction steps and its
aborted-transaction queries are written in their own modules as mixins, each naming in a
protocol what of the log it uses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import NamedTuple

from broker.log.aborted_txns import AbortedTransactions
from broker.log.checkpoint import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    OffsetCheckpoint,
    write_atomically,
)
from broker.log.config import LogConfig
from broker.log.epochs import EpochEndOffset, EpochEntry
from broker.log.errors import (
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    StaleLeaderEpochError,
)
from broker.log.fetched_batches import AppendedBatch, check_fetched_batches
from broker.log.file_records import BatchHeader
from broker.log.leader_epoch_cache import LeaderEpochCache, LeaderEpochCheckpointFile
from broker.log.loader import (
    LoadedLog,
    LogLoader,
    RecoveryReport,
)
from broker.log.log_compaction import LogCompaction
from broker.log.log_truncation import LogTruncation
from broker.log.reader import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchSlice,
    offset_for_timestamp,
    read_slice,
)
from broker.log.segment import LogSegment
from broker.log.txn_index import AbortedTxn
from broker.log.validator import PreparedAppend, assign_offsets
from broker.storage import Buffer, Storage, join
from kafka_protocol.record_batch import NO_TIMESTAMP

logger = logging.getLogger("broker.log")


class AppendResult(NamedTuple):
    base_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the log stamped the batches (LogAppendTime)
    max_timestamp: int


class FollowerAppend(NamedTuple):
    """What ``append_as_follower`` wrote: ``batches`` in offset order (empty when the input
    held no complete batch: then ``first_offset`` is the log end offset and ``last_offset``
    one below it)."""

    first_offset: int
    last_offset: int
    log_end_offset: int
    size_bytes: int  # written; the rest of the input was a partial batch
    batches: list[AppendedBatch]


class _IoGuard:
    """The context manager of ``PartitionLog._io`` (a class: this is on every append)."""

    __slots__ = ("_action", "_log")

    def __init__(self, log: PartitionLog, action: str) -> None:
        self._log = log
        self._action = action

    def __enter__(self) -> None:
        pass

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: object
    ) -> None:
        if isinstance(error, OSError):
            raise self._log._go_offline(self._action, error) from error


class PartitionLog(LogTruncation, LogCompaction, AbortedTransactions):
    def __init__(
        self, storage: Storage, directory: str, config: LogConfig, loaded: LoadedLog, now_ms: int
    ) -> None:
        """Use ``PartitionLog.open``."""
        self._storage = storage
        self.directory = directory
        self._config = config
        self._segments = loaded.segments
        self._bases = [s.base_offset for s in self._segments]
        self._log_start_offset = loaded.log_start_offset
        self._recovery_point = loaded.recovery_point
        self._checkpointed_recovery_point = loaded.recovery_point
        self.recovery_report: RecoveryReport = loaded.report
        self._log_start_checkpoint = OffsetCheckpoint(storage, directory, LOG_START_OFFSET_FILE)
        self._recovery_checkpoint = OffsetCheckpoint(storage, directory, RECOVERY_POINT_FILE)
        self._epochs = LeaderEpochCache(
            LeaderEpochCheckpointFile(storage, directory), loaded.leader_epochs
        )
        self._now_ms = now_ms  # the latest time the caller told us
        self._last_flush_ms = now_ms
        self._last_checkpoint_ms = now_ms
        self._graveyard: list[tuple[int, LogSegment]] = []  # (close at ms, deleted segment)
        self._dir_dirty = False  # files created or removed since the last directory sync
        # Segments written since their last fsync, by base offset (an old segment too: its
        # indexes are written when it rolls, possibly after the flush that covered its data).
        self._unflushed: dict[int, LogSegment] = {}
        self._offline: str | None = None
        self._closed = False
        # Told once, when an I/O error takes this log offline (the replica manager takes the
        # whole log directory offline then).
        self.on_offline: Callable[[str], None] | None = None
        self._init_compaction(storage, directory, loaded.first_dirty_offset)
        self._drop_foreign_aborted_txns()
        self._aborted_txns = self._count_aborted_txns()
        self._check_invariants()

    @classmethod
    def open(cls, storage: Storage, directory: str, config: LogConfig, now_ms: int) -> PartitionLog:
        """Open (creating if needed) and recover the log in ``directory``."""
        try:
            loaded = LogLoader(storage, directory, config, now_ms).load()
        except OSError as error:
            raise KafkaStorageError(f"{directory}: cannot open the log: {error}") from error
        return cls(storage, directory, config, loaded, now_ms)

    # --- state --------------------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        """Everything below this offset has been flushed."""
        return self._recovery_point

    @property
    def last_flushed_offset(self) -> int:
        """The last offset flushed (``recovery_point - 1``; below the log start if none)."""
        return self._recovery_point - 1

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    @property
    def segments(self) -> int:
        return len(self._segments)

    @property
    def max_append_bytes(self) -> int:
        """The most one ``append`` call may carry (one call never spans segments)."""
        return self._config.segment_bytes

    @property
    def offline(self) -> bool:
        return self._offline is not None

    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    @property
    def latest_epoch(self) -> int | None:
        """The newest leader epoch in the log (None when no batch carries one)."""
        return self._epochs.latest_epoch

    def epoch_entries(self) -> list[EpochEntry]:
        """A copy of the leader epoch cache: ``(leader_epoch, start_offset)``, both increasing."""
        return self._epochs.entries()

    def end_offset_for_epoch(self, requested_epoch: int) -> EpochEndOffset:
        """OffsetForLeaderEpoch: the largest epoch at most ``requested_epoch`` and where it
        ends (the next epoch's start, or the log end offset)."""
        return self._epochs.end_offset_for(requested_epoch, self.log_end_offset)

    def update_config(self, config: LogConfig) -> None:
        """Apply changed topic configs (new index sizes apply to new segments)."""
        self._config = config
        for segment in self._segments:
            segment.config = config

    @property
    def _active(self) -> LogSegment:
        return self._segments[-1]

    def _io(self, action: str) -> _IoGuard:
        """``with self._io(action):`` turns an ``OSError`` into ``KafkaStorageError`` and takes
        the log offline."""
        if self._offline is not None:  # also after abandon(): offline before closed
            raise KafkaStorageError(f"{self.directory} is offline: {self._offline}")
        assert not self._closed, f"{self.directory}: {action} on a closed log"
        return _IoGuard(self, action)

    def _go_offline(self, action: str, error: OSError) -> KafkaStorageError:
        self._offline = f"{action} failed: {error}"
        logger.error("partition log offline dir=%s error=%s", self.directory, self._offline)
        if self.on_offline is not None:
            self.on_offline(self._offline)
        return KafkaStorageError(f"{self.directory}: {self._offline}")

    def abandon(self, reason: str) -> None:
        """Its log directory failed (Kafka's ``LogManager.handleLogDirFailure``): take the log
        offline and close its files without writing anything more (no flush, no checkpoint,
        no clean-shutdown marker: the next open recovers it)."""
        if self._offline is None:
            self._offline = reason
        if self._cleaning is not None:
            self._cleaning.cancel()
        if not self._closed:
            self._close_files()

    def _check_invariants(self) -> None:
        end = self.log_end_offset
        assert self._log_start_offset <= end, (self._log_start_offset, end)
        assert self._recovery_point <= end, (self._recovery_point, end)
        assert self._bases[0] <= self._log_start_offset, (self._bases, self._log_start_offset)
        self._epochs.check_bounds(self._log_start_offset, end)

    # --- append -------------------------------------------------------------------------------

    def append(
        self,
        batches: Sequence[memoryview],
        *,
        leader_epoch: int,
        now_ms: int,
        log_append_time: bool = False,
        aborted_txns: Sequence[AbortedTxn] = (),
    ) -> AppendResult:
        """Append validated batches (one RecordBatch per element) with one storage write;
        ``aborted_txns``: the entries for the ABORT markers among them (the caller's producer
        state knows their first offsets), indexed in the segment the markers land in."""
        assert leader_epoch >= -1
        latest_epoch = self._epochs.latest_epoch
        if latest_epoch is not None and leader_epoch < latest_epoch:
            raise StaleLeaderEpochError(leader_epoch, latest_epoch)
        with self._io("append"):
            self._now_ms = now_ms
            prepared = assign_offsets(
                batches,
                base_offset=self.log_end_offset,
                leader_epoch=leader_epoch,
                log_append_time_ms=now_ms if log_append_time else None,
            )
            if prepared.size_bytes > self._config.segment_bytes:
                raise RecordBatchTooLargeError(prepared.size_bytes, self._config.segment_bytes)
            segment = self._maybe_roll(prepared, now_ms)
            self._write(segment, prepared.buffers, prepared.batches, prepared.size_bytes, now_ms)
            for txn in aborted_txns:
                assert prepared.base_offset <= txn.last_offset <= prepared.last_offset, txn
                segment.txn_index.append(txn)
            self._aborted_txns += len(aborted_txns)
            if leader_epoch != latest_epoch:
                self._epochs.assign([(leader_epoch, prepared.base_offset)])
            self._maybe_flush(now_ms)
        self._check_invariants()
        return AppendResult(
            prepared.base_offset,
            prepared.last_offset,
            now_ms if log_append_time else NO_TIMESTAMP,
            prepared.max_timestamp,
        )

    def append_as_follower(
        self,
        records: Buffer,
        *,
        now_ms: int | None = None,
        on_batches: Callable[[list[AppendedBatch]], list[AbortedTxn]] | None = None,
    ) -> FollowerAppend:
        """Write the leader's batches as fetched (offsets and epochs already assigned), with
        one storage write per segment they fill.  A trailing partial batch is ignored.  Raises
        ``InvalidFollowerAppendError`` (nothing written) if a complete batch is corrupt, below
        the log end offset or out of order, or older in leader epoch than what precedes it.
        ``now_ms`` (default: the latest time the log was given) drives rolls and flushes.
        ``on_batches`` hears of the checked batches before they are written and answers the
        aborted-transaction entries of the ABORT markers among them (producer state)."""
        with self._io("append as follower"):
            if now_ms is not None:
                self._now_ms = now_ms
            now_ms = self._now_ms
            first_offset = self.log_end_offset
            fetched = check_fetched_batches(
                records, log_end_offset=first_offset, latest_epoch=self._epochs.latest_epoch
            )
            headers = fetched.headers
            aborted = on_batches(fetched.batches) if on_batches and fetched.batches else []
            start = 0
            while start < len(headers):
                segment, end = self._segment_for_run(headers, start, now_ms)
                group = headers[start:end]
                size = sum(h.size_bytes for h in group)
                self._write(segment, fetched.views[start:end], group, size, now_ms)
                while aborted and aborted[0].last_offset <= group[-1].last_offset:
                    segment.txn_index.append(aborted.pop(0))
                    self._aborted_txns += 1
                self._epochs.assign((h.partition_leader_epoch, h.base_offset) for h in group)
                start = end
            if headers:
                first_offset = headers[0].base_offset
                self._maybe_flush(now_ms)
        self._check_invariants()
        end_offset = self.log_end_offset
        last_offset = headers[-1].last_offset if headers else end_offset - 1
        return FollowerAppend(
            first_offset, last_offset, end_offset, fetched.size_bytes, fetched.batches
        )

    def _segment_for_run(
        self, headers: Sequence[BatchHeader], start: int, now_ms: int
    ) -> tuple[LogSegment, int]:
        """The segment to write ``headers[start:end]`` to (the active one, or a new one if
        not even the first batch fits there) and ``end``, as far as the batches fit."""
        segment = self._active
        end, reason = segment.run_end(headers, start, now_ms)
        if end == start:
            segment = self._roll(reason)
            end, _ = segment.run_end(headers, start, now_ms)
        assert end > start, (segment, headers[start])
        return segment, end

    def _write(
        self,
        segment: LogSegment,
        buffers: Sequence[Buffer],
        headers: Sequence[BatchHeader],
        size_bytes: int,
        now_ms: int,
    ) -> None:
        """One storage append to ``segment``; a failed one is cut back off (best effort)."""
        size_before = segment.size_bytes
        try:
            self._unflushed[segment.base_offset] = segment
            segment.append(buffers, headers, size_bytes, now_ms)
        except OSError:
            self._undo_partial_append(segment, size_before)
            raise

    def _undo_partial_append(self, segment: LogSegment, size_bytes: int) -> None:
        """Best effort: cut what a failed write left, so that an unacknowledged batch does not
        reappear if the log is reopened without a crash (recovery cuts a torn one anyway)."""
        try:
            segment.records.handle.truncate(size_bytes)
        except OSError as error:
            logger.error("cannot undo a failed append dir=%s error=%s", self.directory, error)

    def _maybe_roll(self, prepared: PreparedAppend, now_ms: int) -> LogSegment:
        active = self._active
        if active.size_bytes == 0:
            return active
        reason = active.roll_reason(
            size_bytes=prepared.size_bytes,
            batches=len(prepared.batches),
            last_offset=prepared.last_offset,
            now_ms=now_ms,
        )
        return self._roll(reason) if reason else active

    def _roll(self, reason: str) -> LogSegment:
        old = self._active
        old.on_become_inactive()
        self._unflushed[old.base_offset] = old
        new = LogSegment.create(self._storage, self.directory, old.next_offset, self._config)
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._dir_dirty = True
        logger.info(
            "rolled segment dir=%s old_segment=%d new_segment=%d reason=%s",
            self.directory,
            old.base_offset,
            new.base_offset,
            reason,
        )
        return new

    # --- flush --------------------------------------------------------------------------------

    def _maybe_flush(self, now_ms: int) -> None:
        unflushed = self.log_end_offset - self._recovery_point
        if (
            unflushed >= self._config.flush_interval_messages
            or now_ms - self._last_flush_ms >= self._config.flush_interval_ms
        ):
            self._flush(now_ms)

    def _flush(self, now_ms: int) -> None:
        for segment in self._unflushed.values():
            segment.flush()
        self._unflushed.clear()
        if self._dir_dirty:
            self._storage.sync_dir(self.directory)
            self._dir_dirty = False
        self._recovery_point = self.log_end_offset
        self._last_flush_ms = now_ms

    def flush(self) -> None:
        """Fsync everything appended so far."""
        with self._io("flush"):
            self._flush(self._now_ms)

    def flush_if_due(self, now_ms: int) -> bool:
        """For a periodic task: apply ``flush.ms`` and checkpoint the recovery point now and
        then.  Returns whether it flushed."""
        with self._io("flush"):
            self._now_ms = now_ms
            before = self._recovery_point
            self._maybe_flush(now_ms)
            interval = self._config.recovery_point_checkpoint_interval_ms
            if now_ms - self._last_checkpoint_ms >= interval:
                self._checkpoint_recovery_point(now_ms)
            return self._recovery_point != before

    def _checkpoint_recovery_point(self, now_ms: int) -> None:
        if self._recovery_point != self._checkpointed_recovery_point:
            self._recovery_checkpoint.write(self._recovery_point)
            self._checkpointed_recovery_point = self._recovery_point
        self._last_checkpoint_ms = now_ms

    # --- read ---------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FetchSlice:
        """Whole batches from the one holding ``offset``: at most ``max_bytes`` (but the first
        batch whole if ``min_one_batch``, KIP-74), none whose last offset reaches
        ``max_offset`` (the high watermark), never past the end of a segment (fetch again)."""
        end = self.log_end_offset
        if not self._log_start_offset <= offset <= end:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, end)
        limit = end if max_offset is None else max_offset
        assert limit <= end, f"high watermark {limit} above the log end {end}"
        assert max_bytes >= 0
        with self._io("read"):
            return read_slice(self._segments, self._bases, offset, max_bytes, limit, min_one_batch)

    def read_bytes(self, fetched: FetchSlice) -> bytes:
        """The bytes of a slice (for in-memory storage and tests; servers use ``sendfile``)."""
        with self._io("read"):
            data = fetched.handle.read(fetched.position, fetched.size_bytes)
        assert len(data) == fetched.size_bytes, "slice beyond the end of its file"
        return data

    # --- timestamps ---------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` for ListOffsets (reader.py's ``offset_for_timestamp``): the
        first record at or after ``timestamp_ms``, or a sentinel's answer; None when no record
        qualifies.  The caller caps offsets at the high watermark."""
        if timestamp_ms == LATEST_TIMESTAMP:
            return self.log_end_offset, NO_TIMESTAMP
        if timestamp_ms in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return self._log_start_offset, NO_TIMESTAMP
        with self._io("timestamp lookup"):
            return offset_for_timestamp(self._segments, self._log_start_offset, timestamp_ms)

    # --- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Flush, checkpoint, mark the shutdown clean, and close every file."""
        if self._closed:
            return
        if self._cleaning is not None:
            self._cleaning.cancel()
        try:
            if self._offline is None:
                with self._io("close"):
                    self._flush(self._now_ms)
                    self._checkpoint_recovery_point(self._now_ms)
                    write_atomically(self._storage, self.directory, CLEAN_SHUTDOWN_FILE, b"")
        finally:
            self._close_files()

    def _close_files(self) -> None:
        for segment in self._segments:
            segment.close()
        for _, segment in self._graveyard:
            segment.close()
        self._graveyard.clear()
        self._closed = True

    def delete(self) -> None:
        """Close without flushing and remove the directory with everything in it."""
        if self._cleaning is not None:
            self._cleaning.cancel()
        if not self._closed:
            self._close_files()
        try:
            for name in self._storage.listdir(self.directory):
                self._storage.remove(join(self.directory, name))
            self._storage.rmdir(self.directory)
        except OSError as error:
            raise KafkaStorageError(f"{self.directory}: cannot delete: {error}") from error
