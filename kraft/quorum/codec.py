"""Versioned entry header for the replicated metadata log (pure, no I/O).

Every Raft entry we replicate is one ``bytes`` value with this layout (big-endian)::

    0        1        2                 6                 10
    +--------+--------+-----------------+-----------------+------------------------+
    | format | kind   | controller      | crc32 of        | payload (opaque)       |
    | u8 = 1 | u8     | epoch  i32 >= 0 | payload  u32    | RECORDS: a batch of    |
    |        |        |                 |                 | encoded metadata       |
    |        |        |                 |                 | records; CLAIM: empty  |
    +--------+--------+-----------------+-----------------+------------------------+

``kind`` is ``RECORDS`` (0) or ``EPOCH_CLAIM`` (1). The payload is never interpreted here:
the controller encodes Kafka metadata records into it and replays them from it.

Decoding never raises: it returns either an :class:`Entry` or a :class:`Malformed` with a
stable reason string, so that every node rejects the same bad bytes in the same way.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass
from typing import Final

FORMAT_VERSION: Final = 1
HEADER = struct.Struct(">BBiI")
HEADER_SIZE_BYTES: Final = HEADER.size
# pysyncobj splits entries >= appendEntriesBatchSizeBytes (64 KiB) into chunks and that
# path is buggy (pysyncobj.md hazard 7); stay well below it, pickle overhead included.
MAX_ENTRY_SIZE_BYTES: Final = 60 * 1024
MAX_PAYLOAD_SIZE_BYTES: Final = MAX_ENTRY_SIZE_BYTES - HEADER_SIZE_BYTES
MAX_EPOCH: Final = 2**31 - 1


class EntryKind(enum.IntEnum):
    RECORDS = 0
    EPOCH_CLAIM = 1


@dataclass(frozen=True, slots=True)
class Entry:
    kind: EntryKind
    epoch: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Malformed:
    reason: str


def encode_entry(kind: EntryKind, epoch: int, payload: bytes = b"") -> bytes:
    """Encode one entry; the caller's arguments are checked (programmer errors assert)."""
    assert 0 <= epoch <= MAX_EPOCH, epoch
    assert len(payload) <= MAX_PAYLOAD_SIZE_BYTES, len(payload)
    assert kind is EntryKind.RECORDS or payload == b"", "an epoch claim carries no payload"
    header = HEADER.pack(FORMAT_VERSION, kind, epoch, zlib.crc32(payload))
    return header + payload


def decode_entry(data: object) -> Entry | Malformed:
    """Decode one entry; total: returns :class:`Malformed` for anything that is not valid."""
    if not isinstance(data, bytes):
        return Malformed("not-bytes")
    if len(data) < HEADER_SIZE_BYTES:
        return Malformed("short-header")
    if len(data) > MAX_ENTRY_SIZE_BYTES:
        return Malformed("too-large")
    version, kind, epoch, crc = HEADER.unpack_from(data)
    if version != FORMAT_VERSION:
        return Malformed("unknown-format-version")
    if kind not in (EntryKind.RECORDS, EntryKind.EPOCH_CLAIM):
        return Malformed("unknown-kind")
    if epoch < 0:
        return Malformed("negative-epoch")
    payload = data[HEADER_SIZE_BYTES:]
    if zlib.crc32(payload) != crc:
        return Malformed("crc-mismatch")
    if kind == EntryKind.EPOCH_CLAIM and payload:
        return Malformed("claim-with-payload")
    return Entry(EntryKind(kind), epoch, payload)
