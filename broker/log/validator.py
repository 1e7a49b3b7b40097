"""Kafka's ``LogValidator``: the record checks of a producer's batch, and offset assignment
for an append without copying batch bodies.

``validate_records`` runs after the header and CRC checks (``RecordBatch.validate``) and
before anything is appended.  It walks the records in one compiled pass
(``kafka_protocol/record_walk.py``; no Python loop per record) and refuses, as Kafka does:

- records that do not decompress: CORRUPT_MESSAGE (the bytes are damaged);
- records laid out wrongly (lengths, varints, count, offset deltas, headers, trailing bytes):
  INVALID_RECORD (Kafka's ``InvalidRecordException`` from ``DefaultRecord.readFrom``);
- a timestamp outside ``[now - message.timestamp.before.max.ms, now +
  message.timestamp.after.max.ms]`` when the topic keeps CreateTime (KIP-937):
  INVALID_TIMESTAMP;
- a record without a key in a compacted topic: INVALID_RECORD.

``records_problem`` is the structure check alone, for batches already in a log: a follower's
fetched batches (``fetched_batches.py``) and a segment's tail in recovery (``segment.py``).

Each refusal names the first bad record (Produce v8+ ``record_errors``, KIP-467).  Kafka lists
every bad record; the walk stops at the first, which is enough for a producer to see why,
except for keyless records in a compacted topic, which are all listed (librdkafka tells the
bad records from the others only when several are listed).

Each batch becomes two buffers for the segment's single ``writev``: a new 17-byte prefix and
the untouched rest of the batch, sliced from the (read-only) request frame::

    prefix (new, 17 bytes)                          | body (request frame, not copied)
    base_offset int64 | batch_length int32 |        | crc uint32 | attributes | ... | records
    partition_leader_epoch int32 | magic int8       |

The prefix fields precede the CRC's range, so the CRC stays valid.  With log append time
(``message.timestamp.type=LogAppendTime``) the broker also rewrites ``max_timestamp`` and the
timestamp-type attribute bit, which the CRC covers: such a batch is copied and its CRC
recomputed (rare; Kafka does the same).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c

from broker.log.config import LogConfig
from broker.log.file_records import SCAN_HEADER, BatchHeader
from broker.storage import Buffer
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import CompressionError
from kafka_protocol.record_batch import (
    ATTR_TIMESTAMP_TYPE,
    CRC_START,
    LOG_OVERHEAD,
    MAGIC,
    NO_TIMESTAMP,
    RecordBatch,
)
from kafka_protocol.record_walk import walk_batch

PREFIX = struct.Struct(">qiib")  # base_offset, batch_length, partition_leader_epoch, magic
PREFIX_BYTES = PREFIX.size  # 17
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_AT = 21
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_AT = 35
_CRC = struct.Struct(">I")
_CRC_AT = 17


class RecordsRefusal(NamedTuple):
    """Why a batch is refused: the error, a message, the index of the first bad record in
    the batch (-1: the batch as a whole), and of every bad record when the check found them
    all (records without a key in a compacted topic)."""

    error: ErrorCode
    message: str
    record_index: int
    record_indexes: tuple[int, ...] = ()

    @property
    def bad_records(self) -> tuple[int, ...]:
        """The indexes of Produce's ``record_errors`` (KIP-467)."""
        if self.record_indexes:
            return self.record_indexes
        return () if self.record_index < 0 else (self.record_index,)


def validate_records(
    batch: RecordBatch, config: LogConfig, *, log_append_time: bool, now_ms: int
) -> RecordsRefusal | None:
    """Walk ``batch``'s records (header and CRC already checked): None if it may be
    appended, else why not."""
    try:
        walk = walk_batch(batch)
    except CompressionError as error:
        return RecordsRefusal(ErrorCode.CORRUPT_MESSAGE, str(error), -1)
    if walk.problem is not None:
        return RecordsRefusal(ErrorCode.INVALID_RECORD, walk.problem, walk.bad_index)
    if not log_append_time and batch.records_count:
        # The earliest and the latest timestamp decide; if both are out, name the first.
        refusals = [
            refusal
            for delta, index in (
                (walk.min_timestamp_delta, walk.min_timestamp_index),
                (walk.max_timestamp_delta, walk.max_timestamp_index),
            )
            if (refusal := _timestamp_refusal(batch, delta, index, config, now_ms)) is not None
        ]
        if refusals:
            return min(refusals, key=lambda r: r.record_index)
    if walk.first_null_key >= 0 and config.compact:
        # every keyless record, as Kafka lists them: librdkafka fails those with
        # INVALID_RECORD and the others with _INVALID_DIFFERENT_RECORD only when there are
        # several (a refusal path: one Python pass over records the walk found well formed)
        keyless = tuple(i for i, r in enumerate(batch.iter_records()) if r.key is None)
        return RecordsRefusal(
            ErrorCode.INVALID_RECORD,
            f"record {walk.first_null_key}: a compacted topic does not accept records"
            " without a key",
            walk.first_null_key,
            keyless,
        )
    return None


def records_problem(batch: RecordBatch) -> str | None:
    """What is wrong with the records of a stored batch (header and CRC already checked),
    or None: the record walk, as on produce, which a reader would otherwise trip over."""
    try:
        walk = walk_batch(batch)
    except CompressionError as error:
        return str(error)
    return walk.problem


def _timestamp_refusal(
    batch: RecordBatch, delta: int, index: int, config: LogConfig, now_ms: int
) -> RecordsRefusal | None:
    """Kafka's ``validateTimestamp`` for one record (the earliest or the latest).  A record
    without a timestamp (-1) is exempt, as in Kafka; the walk returns only the extremes, so
    when the earliest is -1 a record just above it that is too old goes unseen (producers
    do not mix the two in one batch)."""
    timestamp = batch.base_timestamp + delta
    low = now_ms - config.message_timestamp_before_max_ms
    high = now_ms + config.message_timestamp_after_max_ms
    if timestamp == NO_TIMESTAMP or low <= timestamp <= high:
        return None
    return RecordsRefusal(
        ErrorCode.INVALID_TIMESTAMP,
        f"record {index}: timestamp {timestamp} is out of range: it must be within"
        f" [{low}, {high}] (message.timestamp.before.max.ms="
        f"{config.message_timestamp_before_max_ms}, message.timestamp.after.max.ms="
        f"{config.message_timestamp_after_max_ms})",
        index,
    )


@dataclass(slots=True)
class PreparedAppend:
    buffers: list[Buffer]  # what one storage append writes
    batches: list[BatchHeader]  # the headers as written
    size_bytes: int

    @property
    def base_offset(self) -> int:
        return self.batches[0].base_offset

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset

    @property
    def max_timestamp(self) -> int:
        return max(b.max_timestamp for b in self.batches)


def assign_offsets(
    batches: Sequence[memoryview],
    *,
    base_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None,
) -> PreparedAppend:
    """Number the batches from ``base_offset`` and stamp ``leader_epoch``."""
    assert batches, "an append needs at least one batch"
    buffers: list[Buffer] = []
    headers: list[BatchHeader] = []
    offset = base_offset
    size = 0
    for view in batches:
        _, length, _, magic, _, _, delta, _, max_timestamp = SCAN_HEADER.unpack_from(view)
        size_bytes = LOG_OVERHEAD + length
        assert magic == MAGIC and len(view) == size_bytes, (
            f"not one validated batch: magic {magic}, {len(view)} bytes for {size_bytes}"
        )
        if log_append_time_ms is None:
            buffers += (PREFIX.pack(offset, length, leader_epoch, MAGIC), view[PREFIX_BYTES:])
        else:
            max_timestamp = log_append_time_ms
            buffers.append(_stamp_log_append_time(view, offset, leader_epoch, max_timestamp))
        last = offset + delta
        headers.append(BatchHeader(offset, size_bytes, leader_epoch, MAGIC, last, max_timestamp))
        offset = last + 1
        size += size_bytes
    return PreparedAppend(buffers, headers, size)


def _stamp_log_append_time(
    view: memoryview, base_offset: int, leader_epoch: int, now_ms: int
) -> bytearray:
    """A copy of the batch with log append time set and its CRC recomputed."""
    buf = bytearray(view)
    PREFIX.pack_into(buf, 0, base_offset, len(buf) - LOG_OVERHEAD, leader_epoch, MAGIC)
    (attributes,) = _ATTRIBUTES.unpack_from(buf, _ATTRIBUTES_AT)
    _ATTRIBUTES.pack_into(buf, _ATTRIBUTES_AT, attributes | ATTR_TIMESTAMP_TYPE)
    _MAX_TIMESTAMP.pack_into(buf, _MAX_TIMESTAMP_AT, now_ms)
    _CRC.pack_into(buf, _CRC_AT, crc32c(memoryview(buf)[CRC_START:]))
    return buf
