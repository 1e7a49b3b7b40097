"""Versioned entry header for the replicated metadata log (pure, no I/O).

Every Raft entry we replicate is one ``bytes`` value with this layout (big-endian)::

    0        1        2            6            10           14         16         18
    +--------+--------+------------+------------+------------+----------+----------+---------+
    | format | kind   | controller | crc32 of   | record     | fragment | fragment | payload |
    | u8 = 2 | u8     | epoch i32  | payload    | count u32  | index    | count    | (opaque)|
    |        |        | >= 0       | u32        | >= 1       | u16      | u16 >= 1 |         |
    +--------+--------+------------+------------+------------+----------+----------+---------+

``kind`` is ``RECORDS`` (0) or ``EPOCH_CLAIM`` (1). The payload is never interpreted here:
the controller encodes Kafka metadata records into it and replays them from it; ``record
count`` is how many metadata offsets the whole batch takes (offsets are per record, as in
Kafka). A batch larger than one entry is split into ``fragment count`` consecutive entries
(pysyncobj mishandles entries of 64 KiB or more); apply reassembles them and appends the
batch atomically when the last one commits (``kraft.quorum.state``). A claim carries no
payload, count 1 and a single fragment.

Decoding never raises: it returns either an :class:`Entry` or a :class:`Malformed` with a
stable reason string, so that every node rejects the same bad bytes in the same way.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass
from typing import Final

FORMAT_VERSION: Final = 2
HEADER = struct.Struct(">BBiIIHH")
HEADER_SIZE_BYTES: Final = HEADER.size
# pysyncobj splits entries >= appendEntriesBatchSizeBytes (64 KiB) into chunks and that
# path is buggy (pysyncobj.md hazard 7). Its pickles use protocol 2, where every byte of
# 0x80 or more takes two bytes, so an entry may double in size: 30 KiB stays below 64 KiB.
MAX_ENTRY_SIZE_BYTES: Final = 30 * 1024
MAX_PAYLOAD_SIZE_BYTES: Final = MAX_ENTRY_SIZE_BYTES - HEADER_SIZE_BYTES  # per fragment
MAX_FRAGMENTS: Final = 2**16 - 1
MAX_BATCH_SIZE_BYTES: Final = 8 << 20  # one controller command's records, all fragments
MAX_RECORD_COUNT: Final = 2**32 - 1
MAX_EPOCH: Final = 2**31 - 1


class EntryKind(enum.IntEnum):
    RECORDS = 0
    EPOCH_CLAIM = 1


@dataclass(frozen=True, slots=True)
class Entry:
    kind: EntryKind
    epoch: int
    payload: bytes
    count: int = 1
    fragment: int = 0
    fragments: int = 1

    @property
    def is_last_fragment(self) -> bool:
        return self.fragment == self.fragments - 1


@dataclass(frozen=True, slots=True)
class Malformed:
    reason: str


def encode_entry(
    kind: EntryKind,
    epoch: int,
    payload: bytes = b"",
    *,
    count: int = 1,
    fragment: int = 0,
    fragments: int = 1,
) -> bytes:
    """Encode one entry; the caller's arguments are checked (programmer errors assert)."""
    assert 0 <= epoch <= MAX_EPOCH, epoch
    assert len(payload) <= MAX_PAYLOAD_SIZE_BYTES, len(payload)
    assert 1 <= count <= MAX_RECORD_COUNT, count
    assert 0 <= fragment < fragments <= MAX_FRAGMENTS, (fragment, fragments)
    if kind is EntryKind.EPOCH_CLAIM:
        assert payload == b"" and count == 1 and fragments == 1, "a claim is one empty entry"
    header = HEADER.pack(
        FORMAT_VERSION, kind, epoch, zlib.crc32(payload), count, fragment, fragments
    )
    return header + payload


def encode_batch(epoch: int, payload: bytes, count: int) -> list[bytes]:
    """The entries of one RECORDS batch: one, or consecutive fragments of a large one."""
    assert 0 < len(payload) <= MAX_BATCH_SIZE_BYTES, len(payload)
    size = MAX_PAYLOAD_SIZE_BYTES
    pieces = [payload[i : i + size] for i in range(0, len(payload), size)]
    return [
        encode_entry(
            EntryKind.RECORDS, epoch, piece, count=count, fragment=i, fragments=len(pieces)
        )
        for i, piece in enumerate(pieces)
    ]


def decode_entry(data: object) -> Entry | Malformed:
    """Decode one entry; total: returns :class:`Malformed` for anything that is not valid."""
    if not isinstance(data, bytes):
        return Malformed("not-bytes")
    if len(data) < HEADER_SIZE_BYTES:
        return Malformed("short-header")
    if len(data) > MAX_ENTRY_SIZE_BYTES:
        return Malformed("too-large")
    version, kind, epoch, crc, count, fragment, fragments = HEADER.unpack_from(data)
    if version != FORMAT_VERSION:
        return Malformed("unknown-format-version")
    if kind not in (EntryKind.RECORDS, EntryKind.EPOCH_CLAIM):
        return Malformed("unknown-kind")
    if epoch < 0:
        return Malformed("negative-epoch")
    payload = data[HEADER_SIZE_BYTES:]
    if zlib.crc32(payload) != crc:
        return Malformed("crc-mismatch")
    if count < 1:
        return Malformed("zero-record-count")
    if not fragment < fragments:
        return Malformed("bad-fragment-index")
    if kind == EntryKind.EPOCH_CLAIM and (payload or count != 1 or fragments != 1):
        return Malformed("claim-with-payload")
    return Entry(EntryKind(kind), epoch, payload, count, fragment, fragments)
