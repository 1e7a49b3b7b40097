"""Record-level filtering of one RecordBatch for the log cleaner (Kafka's
``MemoryRecords.filterTo``), pure: bytes in, bytes out.

A record inside a batch's (decompressed) records section, as ``kafka_protocol/record_batch.py``
draws it::

    length varint | attributes int8 | timestamp_delta varlong | offset_delta varint |
    key_length varint | key | value_length varint | value | header_count varint | headers

``scan_records`` walks the section once and parses only what the cleaner decides on (offset,
key, whether the value is null, the timestamp), remembering where each record's bytes are.  A
kept record is then copied byte for byte: its offset delta stays right because a rewritten
batch keeps its base offset, and its timestamp delta because it keeps its base timestamp; only
setting a delete horizon (below) rewrites the timestamp deltas.

A rewritten batch keeps every header field but the record count, the CRC, the length and
(CreateTime) the max timestamp, recomputed from the records kept.  In particular it keeps its
``last_offset_delta`` (so the batch still ends where it ended: the segment's end, the
producer's last sequence and the log end stay right), producer id, epoch and base sequence,
and partition leader epoch.  It is recompressed with its own codec at the default level.

Delete horizon (KIP-534): the first time the cleaner keeps a tombstone (a record whose value
is null), it stamps its batch with ``delete horizon = now + delete.retention.ms``: attribute
bit 6 set, the horizon stored in ``base_timestamp`` and every record's timestamp delta rebased
on it (so each record keeps its timestamp).  A later cleaning removes the batch's tombstones
once ``now >= horizon``.

The same stamp goes on a COMMIT or ABORT marker once its transaction has no data left
(cleaned_transactions.py); a later cleaning removes the marker after its horizon.

``empty_batch`` is what is left of a batch the cleaner must keep although it keeps none of its
records (cleaner.py says when): the header alone, with ``records_count = 0``, keeping the
producer id, epoch, base sequence and last offset delta.  Kafka writes such a batch as a plain
data batch; ``RecordBatch.validate`` (kafka_protocol) accepts an empty batch only when it is a
control batch, so this one carries the control bit, and not the transactional bit: a control
batch without records is no marker, and it must not look like a transaction's data either (a
rebuilt producer state would take it for an open transaction).  Consumers skip it either way.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from crc32c import crc32c

from kafka_protocol.compression import Compression, compress
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.record_batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    CRC_START,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC,
    RecordBatch,
)
from kafka_protocol.varint import encode_varint, read_raw_varlong, read_varlong

# base_offset, batch_length, partition_leader_epoch, magic, crc, attributes, last_offset_delta,
# base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, records_count
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")
_CRC_AT = 17


class ScannedRecord(NamedTuple):
    offset: int
    timestamp_delta: int
    key: bytes | None
    tombstone: bool  # the value is null
    start: int  # the record's bytes in the records section: [start, end)
    end: int


def has_delete_horizon(batch: RecordBatch) -> bool:
    return bool(batch.attributes & ATTR_DELETE_HORIZON)


def record_timestamp(batch: RecordBatch, record: ScannedRecord) -> int:
    if batch.is_log_append_time:
        return batch.max_timestamp
    return batch.base_timestamp + record.timestamp_delta


def scan_records(batch: RecordBatch, section: bytes) -> list[ScannedRecord]:
    """The records of ``batch`` (``section``: its records, decompressed), in order.

    Hot (every record of a pass goes through it, some twice), so varints of one or two bytes,
    the common case, are decoded inline, and the value is not decoded at all: it is null
    exactly when its length varint is the single byte 0x01 (zigzag -1; a length >= 0 has an
    even first byte)."""
    out: list[ScannedRecord] = []
    add = out.append
    pos, size, base = 0, len(section), batch.base_offset
    try:
        for _ in range(batch.records_count):
            raw, p = section[pos], pos + 1
            if raw >= 0x80:
                raw, p = (raw & 0x7F) | (section[p] << 7), p + 1
                if raw >= 0x4000:
                    raw, p = read_raw_varlong(section, pos)
            length, end = raw >> 1, p + (raw >> 1)
            if raw & 1 or length < 1 or end > size:
                raise CorruptRecordError(f"record of {length} bytes overruns the batch")
            raw, p = section[p + 1], p + 2  # + 1: the attributes byte
            if raw >= 0x80:
                raw, p = (raw & 0x7F) | (section[p] << 7), p + 1
                if raw >= 0x4000:
                    raw, p = read_raw_varlong(section, p - 2)
            ts_delta = (raw >> 1) ^ -(raw & 1)
            raw, p = section[p], p + 1
            if raw >= 0x80:
                raw, p = (raw & 0x7F) | (section[p] << 7), p + 1
                if raw >= 0x4000:
                    raw, p = read_raw_varlong(section, p - 2)
            offset_delta = (raw >> 1) ^ -(raw & 1)
            raw, p = section[p], p + 1
            if raw >= 0x80:
                raw, p = (raw & 0x7F) | (section[p] << 7), p + 1
                if raw >= 0x4000:
                    raw, p = read_raw_varlong(section, p - 2)
            key = None
            if not raw & 1:  # a key (zigzag: -1 is null)
                key, p = section[p : p + (raw >> 1)], p + (raw >> 1)
            if p >= end:
                raise CorruptRecordError(f"record at offset delta {offset_delta} overruns itself")
            add(ScannedRecord(base + offset_delta, ts_delta, key, section[p] == 1, pos, end))
            pos = end
    except IndexError:
        raise CorruptRecordError("a record runs past the batch") from None
    if pos != size:
        raise CorruptRecordError(f"{size - pos} bytes after the last record")
    return out


def _rebased(section: bytes, record: ScannedRecord, shift_ms: int) -> bytes:
    """The record's bytes with its timestamp delta lowered by ``shift_ms``."""
    _, body = read_varlong(section, record.start)
    ts_delta, rest = read_varlong(section, body + 1)
    new_body = (
        section[body : body + 1] + encode_varint(ts_delta - shift_ms) + section[rest : record.end]
    )
    return encode_varint(len(new_body)) + new_body


def rebuild_batch(
    batch: RecordBatch,
    section: bytes,
    kept: Sequence[ScannedRecord],
    *,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """``batch`` with only the ``kept`` records (at least one, in order); with
    ``delete_horizon_ms``, stamped with that delete horizon (the batch must have none yet)."""
    assert kept, "an emptied batch is dropped or written by empty_batch"
    attributes, base_timestamp = batch.attributes, batch.base_timestamp
    if delete_horizon_ms is None:
        body = b"".join(section[r.start : r.end] for r in kept)
    else:
        assert not has_delete_horizon(batch), "a batch gets its delete horizon once"
        shift = delete_horizon_ms - base_timestamp
        body = b"".join(_rebased(section, r, shift) for r in kept)
        attributes |= ATTR_DELETE_HORIZON
        base_timestamp = delete_horizon_ms
    if batch.is_log_append_time:
        max_timestamp = batch.max_timestamp
    else:
        max_timestamp = batch.base_timestamp + max(r.timestamp_delta for r in kept)
    codec = Compression(attributes & ATTR_COMPRESSION_MASK)
    if codec is not Compression.NONE:
        body = compress(codec, body)
    return _batch(batch, attributes, base_timestamp, max_timestamp, len(kept), body)


def empty_batch(batch: RecordBatch) -> bytes:
    """The header of ``batch`` without records (see the module docstring)."""
    attributes = (batch.attributes & ATTR_TIMESTAMP_TYPE) | ATTR_CONTROL
    return _batch(batch, attributes, batch.max_timestamp, batch.max_timestamp, 0, b"")


def _batch(
    batch: RecordBatch,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    records_count: int,
    body: bytes,
) -> bytes:
    header = bytearray(
        BATCH_HEADER.pack(
            batch.base_offset,
            HEADER_BYTES - LOG_OVERHEAD + len(body),
            batch.partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            batch.last_offset_delta,
            base_timestamp,
            max_timestamp,
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            records_count,
        )
    )
    _CRC.pack_into(header, _CRC_AT, crc32c(body, crc32c(memoryview(header)[CRC_START:])))
    return bytes(header + body)
