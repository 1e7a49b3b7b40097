"""``LogLoader``: open a partition directory and bring it back to a consistent log.

Theory of operation.  Two checkpoints say how much can be trusted (checkpoint.py): the
``clean-shutdown`` marker (everything was flushed by ``close``) and the ``recovery-point``
(everything below that offset was flushed).  Trusted data is opened cheaply; the rest is
re-validated, Kafka's ``LogLoader.recoverLog``::

    0. finish a segment swap the log cleaner committed, remove one it did not (segment_swap.py)
    1. remove leftovers: ``*.tmp`` files, index files without a ``.log``
    2. segments below the one holding the recovery point: trusted (``load_trusted``) unless
       an index is missing or its last entry does not fit; then recovered with every CRC
    3. the segment holding the recovery point and all later ones: ``recover``: walk every
       batch, CRC-check those from the recovery point on, cut the segment at the first torn
       or corrupt batch and delete every later segment (their offsets would leave a hole);
       likewise delete from the first segment that does not start where the previous one
       ends (a crash emptied the previous one's unflushed tail); a recovered segment that
       is not the last gets the time-index entry for its largest timestamp, as at its roll
       (after a clean shutdown only the last segment is walked, from its last index entry)
    4. log start offset = max(checkpoint, first segment's base offset); if that is above the
       log end (data lost in a crash after DeleteRecords), start an empty log there
    5. fsync what was recovered, so the new recovery point is the log end
    6. the leader epoch cache (leader_epoch_cache.py): entries of its checkpoint below the
       first re-validated segment are kept (that data was flushed before the crash, and
       entries are checkpointed as they change), the rest re-derived from the headers step 3
       walked anyway; truncated from the start at the log start offset.  The entry for the
       log start itself is read from the batch headers when the checkpoint cannot vouch for
       it (no flushed batch between the log start and the first re-validated segment), and
       dropped when no batch at or below the log start is left (a crash right after retention
       deleted them; if the first batch left, after a compaction gap, has the same epoch, the
       entry moves to it).  A missing or unreadable checkpoint is rebuilt from every batch
       header
    7. the cleaner checkpoint (``cleaner-offset-checkpoint``, cleaner.py): above the log end
       (data lost in a crash after a truncation), it is lowered to the log end

Everything dropped is logged (logger ``broker.log``, WARNING, key=value plus ``extra``) and
returned in a ``RecoveryReport``.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

from broker.log.checkpoint import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    TMP_SUFFIX,
    OffsetCheckpoint,
)
from broker.log.cleaner import CLEANER_OFFSET_FILE
from broker.log.config import LogConfig
from broker.log.epochs import EpochEntry
from broker.log.errors import CorruptIndexError
from broker.log.leader_epoch_cache import (
    LeaderEpochCheckpointFile,
    derive_epochs,
    truncate_epochs_from_start,
)
from broker.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    UNBOUNDED_OFFSET,
    LogSegment,
    SegmentRecovery,
    parse_segment_file_name,
)
from broker.log.segment_swap import recover_swaps
from broker.storage import Storage, join
from kafka_protocol.exceptions import CorruptRecordError

logger = logging.getLogger("broker.log")


@dataclass(frozen=True, slots=True)
class DroppedRange:
    """Offsets recovery removed from one segment (``last_offset`` is a best-effort reading
    of the dropped headers; None when they were unreadable)."""

    segment_base_offset: int
    first_offset: int
    last_offset: int | None
    dropped_bytes: int
    reason: str
    segment_deleted: bool


@dataclass(slots=True)
class RecoveryReport:
    directory: str
    clean_shutdown: bool = False
    recovery_point: int = 0  # as checkpointed before the open
    log_start_offset: int = 0
    log_end_offset: int = 0
    segments_recovered: list[int] = field(default_factory=list)  # base offsets re-validated
    indexes_rebuilt: list[int] = field(default_factory=list)
    dropped: list[DroppedRange] = field(default_factory=list)

    @property
    def dropped_bytes(self) -> int:
        return sum(d.dropped_bytes for d in self.dropped)


@dataclass(slots=True)
class LoadedLog:
    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    report: RecoveryReport
    leader_epochs: list[EpochEntry]  # as checkpointed (leader-epoch-checkpoint)
    first_dirty_offset: int = 0  # the cleaner checkpoint, at most the log end


class LogLoader:
    def __init__(self, storage: Storage, directory: str, config: LogConfig, now_ms: int) -> None:
        self._storage = storage
        self._directory = directory
        self._config = config
        self._now_ms = now_ms
        self._report = RecoveryReport(directory)
        # Segments re-validated by ``recover``, by base offset: the epoch changes of their
        # valid batches (the leader epoch cache re-derives those).
        self._epoch_changes: dict[int, tuple[EpochEntry, ...]] = {}

    def load(self) -> LoadedLog:
        self._storage.makedirs(self._directory)
        recover_swaps(self._storage, self._directory)
        bases = self._scan_directory()
        clean = self._consume_clean_shutdown_marker()
        log_start = OffsetCheckpoint(self._storage, self._directory, LOG_START_OFFSET_FILE)
        recovery = OffsetCheckpoint(self._storage, self._directory, RECOVERY_POINT_FILE)
        checkpointed_start = log_start.read() or 0
        checkpointed_recovery = recovery.read() or 0
        report = self._report
        report.clean_shutdown, report.recovery_point = clean, checkpointed_recovery
        segments = self._load_segments(bases, clean, checkpointed_recovery)
        if not segments:
            segments = [self._create(checkpointed_start)]
        start = max(checkpointed_start, segments[0].base_offset)
        if start > segments[-1].next_offset:
            logger.warning(
                "log start offset above the log end dir=%s log_start_offset=%d log_end_offset=%d",
                self._directory,
                start,
                segments[-1].next_offset,
            )
            self._delete(segments, "below the log start offset")
            segments = [self._create(start)]
        segments[-1].set_rolling_base(self._now_ms)
        end = segments[-1].next_offset
        for segment in segments:
            if segment.base_offset in report.segments_recovered:
                segment.flush()
        if checkpointed_recovery != end:
            recovery.write(end)
        report.log_start_offset, report.log_end_offset = start, end
        epochs = self._load_leader_epochs(segments, start, end)
        return LoadedLog(segments, start, end, report, epochs, self._first_dirty_offset(end))

    def _first_dirty_offset(self, log_end_offset: int) -> int:
        """Step 7."""
        checkpoint = OffsetCheckpoint(self._storage, self._directory, CLEANER_OFFSET_FILE)
        first_dirty = checkpoint.read() or 0
        if first_dirty > log_end_offset:
            checkpoint.write(log_end_offset)
        return min(first_dirty, log_end_offset)

    def _scan_directory(self) -> list[int]:
        """Base offsets of the ``.log`` files, after removing temporary and orphan files."""
        names = self._storage.listdir(self._directory)
        logs = {p[0] for n in names if (p := parse_segment_file_name(n)) and p[1] == LOG_SUFFIX}
        for name in names:
            parsed = parse_segment_file_name(name)
            if name.endswith(TMP_SUFFIX) or (parsed is not None and parsed[0] not in logs):
                logger.info("removing leftover file dir=%s file=%s", self._directory, name)
                self._storage.remove(join(self._directory, name))
        return sorted(logs)

    def _consume_clean_shutdown_marker(self) -> bool:
        path = join(self._directory, CLEAN_SHUTDOWN_FILE)
        if not self._storage.exists(path):
            return False
        # Gone before the first append: a crash from now on must not look clean.
        self._storage.remove(path)
        self._storage.sync_dir(self._directory)
        return True

    def _load_segments(
        self, bases: list[int], clean: bool, recovery_point: int
    ) -> list[LogSegment]:
        """Open every segment; stop at the first one cut short, or at a gap (a later segment
        that does not start where the previous one now ends), deleting the rest."""
        segments: list[LogSegment] = []
        # The first segment that may hold unflushed data; everything before it was flushed.
        first_unflushed = (
            len(bases) - 1 if clean else max(bisect_right(bases, recovery_point) - 1, 0)
        )
        for i, base in enumerate(bases):
            if segments and segments[-1].next_offset != base:
                reason = f"gap after offset {segments[-1].next_offset - 1}"
                self._delete(self._segments(bases[i:]), reason)
                break
            flushed = i < first_unflushed or clean
            indexes_present = self._indexes_present(base)  # before opening creates them
            segment = LogSegment(self._storage, self._directory, base, self._config)
            segments.append(segment)
            next_base = bases[i + 1] if i + 1 < len(bases) else UNBOUNDED_OFFSET
            trusted = flushed and indexes_present
            if not self._open_segment(segment, next_base, flushed, trusted, recovery_point):
                self._delete(self._segments(bases[i + 1 :]), f"follows truncated segment {base}")
                break
        return segments

    def _segments(self, bases: list[int]) -> list[LogSegment]:
        return [LogSegment(self._storage, self._directory, b, self._config) for b in bases]

    def _open_segment(
        self,
        segment: LogSegment,
        next_base: int,
        flushed: bool,
        trusted: bool,
        recovery_point: int,
    ) -> bool:
        """Open one segment, trusted or recovered; False if recovery cut it short."""
        base = segment.base_offset
        if trusted and self._open_trusted(segment, next_base, next_base == UNBOUNDED_OFFSET):
            return True
        crc_from = recovery_point
        if flushed:  # flushed data whose indexes are missing or bad: re-validate all of it
            crc_from = base
            self._report.indexes_rebuilt.append(base)
        result = segment.recover(crc_from_offset=crc_from, max_next_offset=next_base)
        self._report.segments_recovered.append(base)
        self._epoch_changes[base] = result.epoch_changes
        if result.truncated_bytes:
            self._drop(result, deleted=False)
            return False
        if next_base != UNBOUNDED_OFFSET:
            # Not the last: index its largest timestamp as its roll did, or the next open,
            # trusting it, would take the last time-index entry for its largest timestamp.
            segment.on_become_inactive()
        return True

    def _indexes_present(self, base_offset: int) -> bool:
        names = (f"{base_offset:020d}{suffix}" for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX))
        return all(self._storage.exists(join(self._directory, name)) for name in names)

    def _open_trusted(self, segment: LogSegment, next_base: int, is_last: bool) -> bool:
        try:
            if is_last:
                segment.load_clean_tail()
            else:
                segment.load_trusted(next_base)
        except (CorruptIndexError, CorruptRecordError) as error:
            logger.warning(
                "recovering segment dir=%s segment=%d reason=%s",
                self._directory,
                segment.base_offset,
                error,
            )
            return False
        return True

    def _load_leader_epochs(
        self, segments: list[LogSegment], log_start: int, log_end: int
    ) -> list[EpochEntry]:
        """Step 6: the cache that matches the recovered log; checkpointed if it changed."""
        checkpoint = LeaderEpochCheckpointFile(self._storage, self._directory)
        stored = checkpoint.read()
        # The segments from ``rederive_from`` on were all walked by ``recover``.
        walked = 0
        while walked < len(segments) and segments[-1 - walked].base_offset in self._epoch_changes:
            walked += 1
        rederive_from = segments[-walked].base_offset if walked else log_end
        epochs: list[EpochEntry]
        if stored is None:
            epochs = []
            for segment in segments:
                derive_epochs(epochs, self._segment_epoch_changes(segment))
            truncate_epochs_from_start(epochs, log_start)
        else:
            trusted_below = min(rederive_from, log_end)
            if log_start < trusted_below:
                epochs = [e for e in stored if e[1] < trusted_below]
                truncate_epochs_from_start(epochs, log_start)
                drop_gone_log_start_epoch(segments, epochs, log_start)  # a crash after
                # retention deleted its batches
            else:
                head = epoch_entry_at(segments, log_start)
                epochs = [head] if head is not None else []
            for segment in segments[len(segments) - walked :]:
                derive_epochs(epochs, self._epoch_changes[segment.base_offset])
            truncate_epochs_from_start(epochs, log_start)  # a no-op unless epochs go backwards
        if stored is None and not epochs:
            return epochs  # a new (or epoch-less) log: a missing file already says "none"
        if epochs != stored:
            logger.info(
                "leader epoch cache recovered dir=%s checkpointed=%s recovered=%s",
                self._directory,
                stored,
                epochs,
            )
            checkpoint.write(epochs)
        return epochs

    def _segment_epoch_changes(self, segment: LogSegment) -> Sequence[EpochEntry]:
        found = self._epoch_changes.get(segment.base_offset)
        if found is not None:
            return found
        try:
            return segment.epoch_changes()
        except CorruptRecordError as error:  # a trusted segment: reads will fail there too
            logger.warning(
                "cannot read batch headers dir=%s segment=%d error=%s",
                self._directory,
                segment.base_offset,
                error,
            )
            return ()

    def _create(self, base_offset: int) -> LogSegment:
        return LogSegment.create(self._storage, self._directory, base_offset, self._config)

    def _delete(self, segments: list[LogSegment], reason: str) -> None:
        for segment in segments:
            last = segment.last_plausible_offset()
            size = segment.size_bytes
            dropped = SegmentRecovery(
                segment.base_offset, 0, size, segment.base_offset, last, reason
            )
            self._drop(dropped, deleted=True)
            segment.remove_files()
            segment.close()

    def _drop(self, result: SegmentRecovery, *, deleted: bool) -> None:
        dropped = DroppedRange(
            segment_base_offset=result.base_offset,
            first_offset=result.next_offset,
            last_offset=result.last_dropped_offset,
            dropped_bytes=result.truncated_bytes,
            reason=result.reason or "",
            segment_deleted=deleted,
        )
        self._report.dropped.append(dropped)
        last = "?" if dropped.last_offset is None else str(dropped.last_offset)
        logger.warning(
            "partition log dropped data dir=%s segment=%d offsets=%d..%s bytes=%d"
            " segment_deleted=%s reason=%s",
            self._directory,
            dropped.segment_base_offset,
            dropped.first_offset,
            last,
            dropped.dropped_bytes,
            deleted,
            dropped.reason,
            extra={"log_dir": self._directory, "dropped": dropped},
        )


def has_batch_at_or_below(segments: Sequence[LogSegment], offset: int) -> bool:
    """Whether the log still holds a batch whose base offset is at most ``offset``."""
    first = segments[0]
    return first.size_bytes > 0 and first.records.header_at(0).base_offset <= offset


def drop_gone_log_start_epoch(
    segments: Sequence[LogSegment], epochs: list[EpochEntry], log_start_offset: int
) -> None:
    """When no batch at or below the log start is left (retention deleted them), the entry for
    the log start goes; but if the first batch left (after a compaction gap) still carries its
    epoch, that epoch now starts there, as a rescan of the headers finds."""
    if not epochs or epochs[0][1] > log_start_offset:
        return
    if has_batch_at_or_below(segments, log_start_offset):
        return
    epoch, _ = epochs.pop(0)
    first = segments[0]
    if first.size_bytes:
        header = first.records.header_at(0)
        if header.partition_leader_epoch == epoch:
            epochs.insert(0, (epoch, header.base_offset))


def epoch_entry_at(segments: Sequence[LogSegment], offset: int) -> EpochEntry | None:
    """The leader epoch cache's entry for a log starting at ``offset``: the epoch of the last
    batch whose base offset is at most ``offset``, moved up to ``offset`` (None if there is no
    such batch or it carries no epoch: epochs never decrease along the log)."""
    bases = [s.base_offset for s in segments]
    for segment in reversed(segments[: bisect_right(bases, offset)]):
        header = segment.last_batch_at_or_before(offset)
        if header is not None:
            epoch = header.partition_leader_epoch
            return (epoch, offset) if epoch >= 0 else None
    return None
