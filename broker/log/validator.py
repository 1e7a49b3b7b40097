"""Offset assignment for an append, without copying batch bodies (Kafka's ``LogValidator``
minus the validation, which the caller did: CRC and header checks on the request frame).

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

from crc32c import crc32c

from broker.log.file_records import SCAN_HEADER, BatchHeader
from broker.storage import Buffer
from kafka_protocol.record_batch import ATTR_TIMESTAMP_TYPE, CRC_START, LOG_OVERHEAD, MAGIC

PREFIX = struct.Struct(">qiib")  # base_offset, batch_length, partition_leader_epoch, magic
PREFIX_BYTES = PREFIX.size  # 17
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_AT = 21
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_AT = 35
_CRC = struct.Struct(">I")
_CRC_AT = 17


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
