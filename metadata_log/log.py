"""The single-node metadata log on disk: ``<metadata.log.dir>/__cluster_metadata-0/``.

Theory of operation
-------------------
The directory holds segments named by their base offset (``00000000000000000000.log``), each a
sequence of RecordBatch v2 metadata batches, and snapshots (``snapshot.py``). Offsets are dense
from 0 and one ``append`` writes exactly one batch: the records of one controller command
become visible together or not at all.

Appending is three steps, so that an asyncio owner can run only the disk I/O in a thread:

``prepare_append(records)``  pure: replay into a delta, build the next image and the batch
``write(pending)``           blocking: write the batch and ``fdatasync`` before returning
``publish(pending)``         swap in the new image and call every listener with (delta, image)

``append(records)`` does all three. One append is in flight at a time (the controller driver
serializes them); ``read`` may run concurrently from another thread and sees only durable
batches.

Opening the log recovers it (:mod:`metadata_log.segments`, Kafka's ``LogLoader``): every
batch is checked (size, CRC, dense offsets, decodable records); at the first batch that fails,
the segment is truncated there, any later segment is deleted, the loss is logged, and the log
continues from the last good batch. This is what kill -9 or power loss mid-append leaves
behind: an unacknowledged torn tail. The image is then rebuilt from the newest readable
snapshot plus the batches after it. Each opening starts a new epoch (the last epoch seen + 1),
written into ``partition_leader_epoch`` of every batch, as a single-node KRaft quorum elects
itself at startup.

A failed write or fsync leaves the log failed (:class:`MetadataLogFailedError` on every later
append): after a failed fsync the page cache no longer tells what reached the disk.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kafka_protocol.clock import wall_ms
from kafka_protocol.record_batch import RecordBatch
from metadata_log import snapshot as snapshots
from metadata_log.delta import MetadataDelta
from metadata_log.durable_files import fsync_path
from metadata_log.exceptions import (
    CorruptSnapshotError,
    MetadataLogError,
    MetadataLogFailedError,
    OffsetOutOfRangeError,
)
from metadata_log.image import ClusterImage
from metadata_log.records import MetadataRecord, build_metadata_batch, read_metadata_batch
from metadata_log.segments import (
    MAX_BATCH_BYTES,
    BatchEntry,
    RecoveryReport,
    Segment,
    list_segments,
    open_for_append,
    scan_segments,
    segment_path,
)
from metadata_log.snapshot import SnapshotId

logger = logging.getLogger(__name__)

PARTITION_DIR: Final = "__cluster_metadata-0"
DEFAULT_SEGMENT_BYTES: Final = 1 << 30  # Kafka's metadata.log.segment.bytes
DEFAULT_MAX_READ_RECORDS: Final = 10_000


MetadataListener = Callable[[MetadataDelta, ClusterImage], None]


@dataclass(frozen=True, slots=True)
class MetadataBatch:
    """One appended batch: the records of one controller command."""

    base_offset: int
    epoch: int
    append_time_ms: int
    records: tuple[MetadataRecord, ...]

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1


@dataclass(frozen=True, slots=True)
class PendingAppend:
    """A prepared, not yet durable append (see the module docstring)."""

    base_offset: int
    data: bytes
    delta: MetadataDelta
    image: ClusterImage


class LocalMetadataLog:
    """The metadata log of a single-node quorum, durable on local disk."""

    def __init__(
        self,
        directory: Path,
        *,
        clock_ms: Callable[[], int] = wall_ms,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> None:
        """Use :meth:`open`."""
        self.directory = directory
        self._clock_ms = clock_ms
        self._segment_bytes = segment_bytes
        self._segments: list[Segment] = []
        self._entries: list[BatchEntry] = []
        self._entry_offsets: list[int] = []  # last offsets of _entries, for bisect
        self._next_offset = 0
        self._epoch = 0
        self._image = ClusterImage.EMPTY
        self._listeners: list[MetadataListener] = []
        self._fd: int | None = None
        self._failed: BaseException | None = None
        self._append_lock = threading.Lock()  # one writer
        self._state_lock = threading.Lock()  # index and image, shared with readers
        self.recovery = RecoveryReport()

    # --- opening and recovery -----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        metadata_log_dir: str | os.PathLike[str],
        *,
        clock_ms: Callable[[], int] = wall_ms,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> LocalMetadataLog:
        """Open (creating if needed) and recover the log, and replay it into :attr:`image`."""
        directory = Path(metadata_log_dir) / PARTITION_DIR
        _make_dirs(directory)
        log = cls(directory, clock_ms=clock_ms, segment_bytes=segment_bytes)
        log._load()
        return log

    def _load(self) -> None:
        for entry in os.listdir(self.directory):
            if entry.endswith(snapshots.PART_SUFFIX):
                os.unlink(self.directory / entry)  # an interrupted snapshot write
        snapshot_ids = snapshots.list_snapshots(self.directory)
        self._segments = list_segments(self.directory, snapshot_ids)
        scan = scan_segments(self.directory, self._segments)
        if (cut := scan.report).segment is not None:
            logger.warning(
                "metadata log %s: dropped %d bytes from offset %d on (%s at byte %d): %s",
                self.directory, cut.dropped_bytes, scan.next_offset, cut.segment.name,
                cut.position, cut.reason,
            )  # fmt: skip
        self._entries = scan.entries
        self._entry_offsets = [e.last_offset for e in scan.entries]
        self._next_offset = scan.next_offset
        image, snapshot_id = self._load_image(snapshot_ids)
        self._image = image
        self._epoch = max(scan.last_epoch, image.epoch, 0) + 1
        self.recovery = RecoveryReport(
            scan.report.segment, scan.report.position, scan.report.dropped_bytes,
            scan.report.reason, snapshot_id,
        )  # fmt: skip
        self._fd = open_for_append(self._segments[-1].path)

    def _load_image(self, snapshot_ids: list[SnapshotId]) -> tuple[ClusterImage, SnapshotId | None]:
        """The newest readable snapshot that the log continues, plus the batches after it."""
        start = self._segments[0].base_offset
        for snapshot_id in reversed(snapshot_ids):
            if snapshot_id.end_offset < start:
                break
            try:
                image = snapshots.read_snapshot(self.directory, snapshot_id)
            except CorruptSnapshotError as exc:
                logger.warning("skipping metadata snapshot %s: %s", snapshot_id.filename, exc)
                continue
            if snapshot_id.end_offset > self._next_offset:
                self._restart_at(snapshot_id.end_offset)
            return self._replay_from(image), snapshot_id
        if start > 0:
            raise MetadataLogError(
                f"{self.directory}: no readable snapshot covers the offsets below {start}"
            )
        return self._replay_from(ClusterImage.EMPTY), None

    def _restart_at(self, offset: int) -> None:
        """Drop every segment and continue at ``offset`` (Kafka's truncateToLatestSnapshot):
        recovery cut the log below a snapshot, which still holds the lost records."""
        logger.warning(
            "metadata log %s ends at %d, below its snapshot: restarting the log at %d",
            self.directory, self._next_offset, offset,
        )  # fmt: skip
        for segment in self._segments:
            os.unlink(segment.path)
        segment = Segment(offset, segment_path(self.directory, offset))
        os.close(open_for_append(segment.path))
        fsync_path(self.directory)
        self._segments = [segment]
        self._entries, self._entry_offsets = [], []
        self._next_offset = offset

    def _replay_from(self, image: ClusterImage) -> ClusterImage:
        batches = self._read_entries(self._entries_from(image.offset + 1, None))
        if not batches:
            return image
        delta = MetadataDelta(image)
        for batch in batches:
            delta.replay_all(list(batch.records))
        return delta.apply(offset=batches[-1].last_offset, epoch=batches[-1].epoch)

    # --- state --------------------------------------------------------------------------------

    @property
    def image(self) -> ClusterImage:
        """The image after the last published append."""
        return self._image

    @property
    def next_offset(self) -> int:
        """The offset the next appended record gets (Kafka's log end offset)."""
        return self._next_offset

    @property
    def log_start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def epoch(self) -> int:
        """The epoch written into this session's batches."""
        return self._epoch

    def subscribe(self, listener: MetadataListener) -> Callable[[], None]:
        """Call ``listener(delta, image)`` after every publish; returns an unsubscribe function.

        Listeners run synchronously in the publishing thread. An exception in a listener is
        logged and does not undo the append (it is already durable).
        """
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    # --- appending ----------------------------------------------------------------------------

    def append(self, records: Sequence[MetadataRecord]) -> ClusterImage:
        """Append ``records`` as one durable batch and publish the new image."""
        pending = self.prepare_append(records)
        self.write(pending)
        return self.publish(pending)

    def prepare_append(self, records: Sequence[MetadataRecord]) -> PendingAppend:
        assert records, "an append needs at least one record"
        image = self._image
        assert image.offset + 1 == self._next_offset, "an append is already in flight"
        self._check_usable()
        delta = MetadataDelta(image).replay_all(list(records))
        last = self._next_offset + len(records) - 1
        data = build_metadata_batch(
            records, base_offset=self._next_offset, epoch=self._epoch, timestamp_ms=self._clock_ms()
        )
        if len(data) > MAX_BATCH_BYTES:
            raise ValueError(f"a metadata batch of {len(data)} bytes exceeds {MAX_BATCH_BYTES}")
        return PendingAppend(
            self._next_offset, data, delta, delta.apply(offset=last, epoch=self._epoch)
        )

    def write(self, pending: PendingAppend) -> None:
        """Make ``pending`` durable (blocking: write + fdatasync). Safe to call from a thread."""
        with self._append_lock:
            self._check_usable()
            assert pending.base_offset == self._next_offset, "appends must be written in order"
            if self._segments[-1].size >= self._segment_bytes:
                self._roll()
            segment = self._segments[-1]
            assert self._fd is not None
            try:
                _write_all(self._fd, pending.data)
                _fdatasync(self._fd)
            except OSError as exc:
                self._fail(exc, self._fd, segment)
                raise MetadataLogFailedError(f"append to {segment.path} failed: {exc}") from exc
            entry = BatchEntry(
                pending.base_offset, pending.image.offset, segment, segment.size, len(pending.data)
            )
            with self._state_lock:
                self._entries.append(entry)
                self._entry_offsets.append(entry.last_offset)
                segment.size += len(pending.data)
                self._next_offset = pending.image.offset + 1

    def publish(self, pending: PendingAppend) -> ClusterImage:
        """Swap in the image of a written append and notify the listeners."""
        assert pending.image.offset == self._next_offset - 1, "publish only what was written"
        with self._state_lock:
            self._image = pending.image
        for listener in list(self._listeners):
            try:
                listener(pending.delta, pending.image)
            except Exception:
                logger.exception("metadata listener %r failed", listener)
        return pending.image

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise MetadataLogFailedError(f"{self.directory} failed earlier: {self._failed}")
        if self._fd is None:
            raise MetadataLogError(f"{self.directory} is closed")

    def _fail(self, exc: OSError, fd: int, segment: Segment) -> None:
        self._failed = exc
        # Best effort: do not leave a torn batch behind (recovery would drop it anyway).
        with contextlib.suppress(OSError):
            os.ftruncate(fd, segment.size)
        logger.error("metadata log %s failed: %s", self.directory, exc)

    def _roll(self) -> None:
        """Start a new segment at the log end offset."""
        assert self._fd is not None
        if self._segments[-1].size == 0:
            return
        os.close(self._fd)
        self._fd = None
        segment = Segment(self._next_offset, segment_path(self.directory, self._next_offset))
        self._fd = open_for_append(segment.path)
        fsync_path(self.directory)
        with self._state_lock:
            self._segments.append(segment)

    # --- reading ------------------------------------------------------------------------------

    def read(
        self, from_offset: int, max_records: int = DEFAULT_MAX_READ_RECORDS
    ) -> list[tuple[int, MetadataRecord]]:
        """Durable records at offsets >= ``from_offset``, whole batches, about ``max_records``."""
        out: list[tuple[int, MetadataRecord]] = []
        for batch in self.read_batches(from_offset, max_records):
            for i, record in enumerate(batch.records):
                if batch.base_offset + i >= from_offset:
                    out.append((batch.base_offset + i, record))
        return out

    def read_batches(
        self, from_offset: int, max_records: int = DEFAULT_MAX_READ_RECORDS
    ) -> list[MetadataBatch]:
        """The batches holding offsets >= ``from_offset``: at least one if any, then whole
        batches while fewer than ``max_records`` records were returned."""
        with self._state_lock:
            if from_offset < self.log_start_offset:
                raise OffsetOutOfRangeError(from_offset, self.log_start_offset)
            entries = self._entries_from(from_offset, max_records)
        return self._read_entries(entries)

    def _entries_from(self, from_offset: int, max_records: int | None) -> list[BatchEntry]:
        first = bisect.bisect_left(self._entry_offsets, from_offset)
        selected: list[BatchEntry] = []
        count = 0
        for entry in self._entries[first:]:
            if max_records is not None and selected and count >= max_records:
                break
            selected.append(entry)
            count += entry.last_offset - max(entry.base_offset, from_offset) + 1
        return selected

    def _read_entries(self, entries: list[BatchEntry]) -> list[MetadataBatch]:
        out: list[MetadataBatch] = []
        for segment, group in itertools.groupby(entries, key=lambda e: e.segment):
            try:
                with open(segment.path, "rb") as f:
                    for entry in group:
                        f.seek(entry.position)
                        out.append(_decode_batch(f.read(entry.size)))
            except FileNotFoundError:  # deleted under us by delete_before_snapshot
                raise OffsetOutOfRangeError(segment.base_offset, self.log_start_offset) from None
        return out

    # --- snapshots ----------------------------------------------------------------------------

    def latest_snapshot(self) -> SnapshotId | None:
        found = snapshots.list_snapshots(self.directory)
        return found[-1] if found else None

    def create_snapshot(self) -> SnapshotId:
        """Write a snapshot of the current image and start a new segment after it."""
        with self._append_lock:
            self._check_usable()
            image = self._image
            assert image.offset + 1 == self._next_offset, "an append is in flight"
            snapshot_id = snapshots.write_snapshot(
                self.directory, image, timestamp_ms=self._clock_ms()
            )
            self._roll()
        return snapshot_id

    def read_snapshot(self, snapshot_id: SnapshotId) -> ClusterImage:
        return snapshots.read_snapshot(self.directory, snapshot_id)

    def delete_before_snapshot(self, snapshot_id: SnapshotId) -> int:
        """Delete the segments and older snapshots that ``snapshot_id`` makes redundant.

        A segment goes only when every offset in it is below the snapshot's end offset; the
        active segment always stays. Returns the new log start offset.
        """
        if not (self.directory / snapshot_id.filename).exists():
            raise MetadataLogError(f"no snapshot {snapshot_id.filename} in {self.directory}")
        with self._append_lock, self._state_lock:
            while (
                len(self._segments) > 1 and self._segments[1].base_offset <= snapshot_id.end_offset
            ):
                gone = self._segments.pop(0)
                keep = bisect.bisect_right(self._entry_offsets, self._segments[0].base_offset - 1)
                del self._entries[:keep], self._entry_offsets[:keep]
                os.unlink(gone.path)
            for old in snapshots.list_snapshots(self.directory):
                if old < snapshot_id:
                    os.unlink(self.directory / old.filename)
            fsync_path(self.directory)
            return self.log_start_offset

    # --- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        with self._append_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> LocalMetadataLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# --- helpers ----------------------------------------------------------------------------------


def _decode_batch(data: bytes) -> MetadataBatch:
    # Written and checked by us: a failure here means the disk changed under us.
    batch = RecordBatch(memoryview(data)).validate()
    records = tuple(read_metadata_batch(batch))
    return MetadataBatch(
        batch.base_offset, batch.partition_leader_epoch, batch.max_timestamp, records
    )


def _make_dirs(directory: Path) -> None:
    missing = []
    path = directory
    while not path.exists():
        missing.append(path)
        path = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    for created in reversed(missing):
        fsync_path(created.parent)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fdatasync(fd: int) -> None:
    sync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync
    sync(fd)
