"""The metadata log's segment files: their names, the index of their batches, and the scan
that opening the log runs over them (Kafka's ``LogLoader``).

A segment is named by its base offset (``00000000000000000000.log``) and holds RecordBatch v2
metadata batches with dense offsets. :func:`scan_segments` checks every batch (size, CRC, dense
offsets, decodable records, epochs never going down) and indexes the good ones; at the first
batch that fails, it truncates that segment there and deletes every later one, which is what
kill -9 or power loss mid-append leaves behind: an unacknowledged torn tail. What it cut is in
the returned :class:`RecoveryReport`; the log reports it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final

from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.record_batch import HEADER_BYTES, LOG_OVERHEAD, RecordBatch
from metadata_log.durable_files import fsync_path
from metadata_log.exceptions import InvalidMetadataRecordError
from metadata_log.records import read_metadata_batch
from metadata_log.snapshot import SnapshotId

SEGMENT_SUFFIX: Final = ".log"
MAX_BATCH_BYTES: Final = 8 << 20  # one controller command never comes near this

_BATCH_LENGTH = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening the log had to repair (None fields: nothing was dropped)."""

    segment: Path | None = None
    position: int | None = None
    dropped_bytes: int = 0
    reason: str = ""
    snapshot: SnapshotId | None = None


@dataclass(slots=True)
class Segment:
    base_offset: int
    path: Path
    size: int = 0


@dataclass(frozen=True, slots=True)
class BatchEntry:
    base_offset: int
    last_offset: int
    segment: Segment
    position: int
    size: int


@dataclass(slots=True)
class ScanState:
    next_offset: int
    entries: list[BatchEntry] = field(default_factory=list)
    last_epoch: int = -1
    report: RecoveryReport = field(default_factory=RecoveryReport)


def segment_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}{SEGMENT_SUFFIX}"


def list_segments(directory: Path, snapshot_ids: list[SnapshotId]) -> list[Segment]:
    """The segments in ``directory`` by base offset; an empty one created where there are none
    (at the newest snapshot's end offset, or 0)."""
    found = sorted(
        int(name.removesuffix(SEGMENT_SUFFIX))
        for name in os.listdir(directory)
        if name.endswith(SEGMENT_SUFFIX) and name.removesuffix(SEGMENT_SUFFIX).isdigit()
    )
    if not found:
        base = snapshot_ids[-1].end_offset if snapshot_ids else 0
        os.close(open_for_append(segment_path(directory, base)))
        fsync_path(directory)
        found = [base]
    return [Segment(base, segment_path(directory, base)) for base in found]


def scan_segments(directory: Path, segments: list[Segment]) -> ScanState:
    """Index the good batches of ``segments``; at the first bad one, cut it and everything
    after it (``segments`` loses the deleted segments)."""
    state = ScanState(next_offset=segments[0].base_offset)
    for i, segment in enumerate(segments):
        if segment.base_offset != state.next_offset:
            reason = f"segment starts at {segment.base_offset}, expected {state.next_offset}"
            _drop_from(directory, segments, i, 0, reason, state)
            break
        if not _scan_segment(segment, state):
            _drop_from(directory, segments, i, segment.size, state.report.reason, state)
            break
    return state


def _scan_segment(segment: Segment, state: ScanState) -> bool:
    """Index the good batches of one segment, one batch in memory at a time; False at the
    first bad one."""
    position = 0
    with open(segment.path, "rb") as f:
        while data := f.read(LOG_OVERHEAD):
            checked = _next_batch(f, data, state.next_offset, state.last_epoch)
            if isinstance(checked, str):
                segment.size = position
                state.report = RecoveryReport(reason=checked)
                return False
            batch, count = checked
            entry = BatchEntry(
                batch.base_offset, batch.last_offset, segment, position, batch.size_bytes
            )
            state.entries.append(entry)
            state.next_offset += count
            state.last_epoch = batch.partition_leader_epoch
            position += batch.size_bytes
    segment.size = position
    return True


def _drop_from(
    directory: Path,
    segments: list[Segment],
    index: int,
    position: int,
    reason: str,
    state: ScanState,
) -> None:
    """Truncate segment ``index`` at ``position`` and delete every later segment."""
    segment = segments[index]
    dropped = os.path.getsize(segment.path) - position
    for later in segments[index + 1 :]:
        dropped += os.path.getsize(later.path)
        os.unlink(later.path)
    if position == 0 and index > 0:
        os.unlink(segment.path)
        del segments[index:]
    else:
        os.truncate(segment.path, position)
        fsync_path(segment.path)
        segment.size = position
        del segments[index + 1 :]
    fsync_path(directory)
    state.report = RecoveryReport(segment.path, position, dropped, reason)


def _read_rest(f: BinaryIO, head: bytes) -> bytes | str:
    """The whole batch whose first bytes (offset, length) are ``head``, or why it is torn."""
    if len(head) < LOG_OVERHEAD:
        return f"{len(head)} trailing bytes are not a batch header"
    (length,) = _BATCH_LENGTH.unpack_from(head, 8)
    if not HEADER_BYTES - LOG_OVERHEAD <= length <= MAX_BATCH_BYTES:
        return f"batch length {length} is out of range"
    rest = f.read(length)
    if len(rest) < length:
        return f"batch of {LOG_OVERHEAD + length} bytes is cut at {LOG_OVERHEAD + len(rest)}"
    return head + rest


def _next_batch(
    f: BinaryIO, head: bytes, expected_offset: int, last_epoch: int
) -> tuple[RecordBatch, int] | str:
    data = _read_rest(f, head)
    return (
        data
        if isinstance(data, str)
        else _check_batch(memoryview(data), expected_offset, last_epoch)
    )


def _check_batch(
    view: memoryview, expected_offset: int, last_epoch: int
) -> tuple[RecordBatch, int] | str:
    """The batch at the start of ``view`` and its record count, or why it is not acceptable."""
    try:
        batch = RecordBatch(view).validate()
        records = read_metadata_batch(batch)
    except (ProtocolError, InvalidMetadataRecordError) as exc:
        return str(exc)
    if batch.base_offset != expected_offset:
        return f"batch base offset {batch.base_offset}, expected {expected_offset}"
    if len(records) != batch.last_offset_delta + 1 or batch.is_control:
        return f"batch at {batch.base_offset} is not a dense metadata batch"
    if batch.partition_leader_epoch < last_epoch:
        return f"batch epoch {batch.partition_leader_epoch} is below {last_epoch}"
    return batch, len(records)


def open_for_append(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
