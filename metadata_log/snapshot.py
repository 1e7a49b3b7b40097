"""Snapshot files of the metadata log (Kafka's ``<end offset>-<epoch>.checkpoint``).

A snapshot holds ``image.to_records()`` for the image at offset ``end_offset - 1``::

    00000000000000000042-0000000003.checkpoint
      control batch   SnapshotHeaderRecord (version 0, last_contained_log_timestamp)
      data batches    framed metadata records, at most MAX_RECORDS_PER_BATCH per batch
      control batch   SnapshotFooterRecord (version 0)

Batch offsets inside the file are dense from 0. A snapshot is written to ``.checkpoint.part``,
fsynced, renamed into place and the directory fsynced, so a crash leaves either no snapshot or a
complete one; a ``.part`` file found at startup is garbage and is removed. A snapshot that fails
any check (CRC, header, footer, record framing) raises :class:`CorruptSnapshotError` and the log
falls back to an older snapshot or to replaying the log.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.messages import SnapshotFooterRecord, SnapshotHeaderRecord
from kafka_protocol.record_batch import (
    ControlRecordType,
    RecordBatch,
    build_batch,
    control_record,
    control_record_type,
    iter_batches,
)
from metadata_log.delta import MetadataDelta
from metadata_log.durable_files import replace_durably
from metadata_log.exceptions import CorruptSnapshotError, InvalidMetadataRecordError
from metadata_log.image import ClusterImage
from metadata_log.records import MetadataRecord, build_metadata_batch, read_metadata_batch

SUFFIX: Final = ".checkpoint"
PART_SUFFIX: Final = ".checkpoint.part"
MAX_RECORDS_PER_BATCH: Final = 1024
MAX_SNAPSHOT_BYTES: Final = 1 << 30  # a bound on what we read into memory
_NAME = re.compile(r"(\d{20})-(\d{10})\.checkpoint")


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """Kafka's ``OffsetAndEpoch``: the snapshot covers offsets below ``end_offset``."""

    end_offset: int
    epoch: int

    @property
    def filename(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SUFFIX}"


def list_snapshots(directory: Path) -> list[SnapshotId]:
    """Complete snapshots in ``directory``, oldest first."""
    found = []
    for entry in os.listdir(directory):
        match = _NAME.fullmatch(entry)
        if match:
            found.append(SnapshotId(int(match.group(1)), int(match.group(2))))
    return sorted(found)


def encode_snapshot(image: ClusterImage, *, timestamp_ms: int) -> bytes:
    """The bytes of a snapshot of ``image``."""
    header = SnapshotHeaderRecord(version=0, last_contained_log_timestamp=timestamp_ms)
    parts = [_control_batch(ControlRecordType.SNAPSHOT_HEADER, header.encode(0), 0, timestamp_ms)]
    records = image.to_records()
    offset = 1
    for start in range(0, len(records), MAX_RECORDS_PER_BATCH):
        chunk = records[start : start + MAX_RECORDS_PER_BATCH]
        parts.append(
            build_metadata_batch(
                chunk, base_offset=offset, epoch=image.epoch, timestamp_ms=timestamp_ms
            )
        )
        offset += len(chunk)
    footer = SnapshotFooterRecord(version=0).encode(0)
    parts.append(_control_batch(ControlRecordType.SNAPSHOT_FOOTER, footer, offset, timestamp_ms))
    return b"".join(parts)


def _control_batch(kind: ControlRecordType, value: bytes, offset: int, timestamp_ms: int) -> bytes:
    return build_batch(
        [control_record(kind, value)], base_offset=offset, control=True, now_ms=timestamp_ms
    )


def write_snapshot(directory: Path, image: ClusterImage, *, timestamp_ms: int) -> SnapshotId:
    """Write a snapshot of ``image`` durably; return its id."""
    snapshot_id = SnapshotId(image.offset + 1, max(image.epoch, 0))
    final = directory / snapshot_id.filename
    part = directory / (final.name.removesuffix(SUFFIX) + PART_SUFFIX)
    replace_durably(final, encode_snapshot(image, timestamp_ms=timestamp_ms), temporary=part)
    return snapshot_id


def read_snapshot(directory: Path, snapshot_id: SnapshotId) -> ClusterImage:
    """The image a snapshot holds, at offset ``end_offset - 1`` and the snapshot's epoch."""
    path = directory / snapshot_id.filename
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SNAPSHOT_BYTES + 1)
    except OSError as exc:
        raise CorruptSnapshotError(f"{path}: {exc}") from None
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise CorruptSnapshotError(f"{path} is larger than {MAX_SNAPSHOT_BYTES} bytes")
    records = decode_snapshot(data, str(path))
    delta = MetadataDelta(ClusterImage.EMPTY).replay_all(records)
    return delta.apply(offset=snapshot_id.end_offset - 1, epoch=snapshot_id.epoch)


def decode_snapshot(data: bytes, name: str = "snapshot") -> list[MetadataRecord]:
    """The metadata records of a snapshot; :class:`CorruptSnapshotError` on any defect."""
    try:
        batches = [batch.validate() for batch in iter_batches(data)]
    except ProtocolError as exc:
        raise CorruptSnapshotError(f"{name}: {exc}") from None
    if len(batches) < 2:
        raise CorruptSnapshotError(f"{name}: no header and footer")
    _expect_control(batches[0], ControlRecordType.SNAPSHOT_HEADER, name)
    _expect_control(batches[-1], ControlRecordType.SNAPSHOT_FOOTER, name)
    records: list[MetadataRecord] = []
    for batch in batches[1:-1]:
        if batch.is_control:
            raise CorruptSnapshotError(f"{name}: control batch inside the snapshot")
        try:
            records.extend(read_metadata_batch(batch))
        except InvalidMetadataRecordError as exc:
            raise CorruptSnapshotError(f"{name}: {exc}") from None
    return records


def _expect_control(batch: RecordBatch, kind: ControlRecordType, name: str) -> None:
    try:
        ok = batch.is_control and [control_record_type(r) for r in batch.records()] == [kind]
    except ProtocolError:
        ok = False
    if not ok:
        raise CorruptSnapshotError(f"{name}: expected a {kind.name} control batch")
