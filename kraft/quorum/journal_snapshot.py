"""The file that replaces a compacted Raft journal's prefix (pysyncobj's ``fullDumpFile``).

pysyncobj compacts its journal by serializing the state machine at the last applied entry,
then deleting the entries before it. Its default serializer pickles the ``SyncObjConsumer``
objects, which hold only our log counters (``kraft.quorum.state.LogState``): the
controller's metadata image lives outside them, so the adapter left compaction off and the
journal grew without bound. The adapter now gives pysyncobj its own serializer
(``kraft.quorum.raft``), which writes this file: the counters *and* a snapshot of the
metadata image (``metadata_log.snapshot`` format, the one brokers fetch), both taken at the
same applied entry, in pysyncobj's tick thread.

Layout (big-endian)::

    magic "KRSNAP01" | header length u32 | header (JSON) | image length u64 | image | crc32 u32

The header holds the two pysyncobj entries the journal keeps after the snapshot (command
bytes, index, term), the :class:`LogState`, and the image's end offset and epoch. The CRC
covers everything before it. :func:`decode_journal_snapshot` is total: any defect raises
:class:`CorruptJournalSnapshotError`, never another exception. The file is written
temporary-then-rename by pysyncobj; :func:`write_journal_snapshot` fsyncs it, and the
adapter fsyncs the directory before pysyncobj deletes the journal prefix.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Final

from kraft.quorum.state import LogState

MAGIC: Final = b"KRSNAP01"
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
MAX_HEADER_BYTES: Final = 64 << 20  # pending fragments of one batch (<= 8 MiB) in base64
MAX_IMAGE_BYTES: Final = 1 << 30  # as metadata_log.snapshot.MAX_SNAPSHOT_BYTES

JournalEntry = tuple[bytes, int, int]  # pysyncobj's (command, index, term)


class CorruptJournalSnapshotError(Exception):
    """The journal snapshot file is not one this module wrote, or is damaged."""


@dataclass(frozen=True, slots=True)
class JournalSnapshot:
    previous_entry: JournalEntry  # the last two applied entries, kept in the journal
    last_entry: JournalEntry
    state: LogState  # the log counters after ``last_entry``
    image_epoch: int  # the metadata image after ``last_entry``: offsets below
    image: bytes  # ``state.high_watermark``; b"" when there is no image (empty log)


def encode_journal_snapshot(snapshot: JournalSnapshot) -> bytes:
    state = snapshot.state
    header = {
        "previous_entry": _entry_json(snapshot.previous_entry),
        "last_entry": _entry_json(snapshot.last_entry),
        "claimed_epoch": state.claimed_epoch,
        "high_watermark": state.high_watermark,
        "rejected_count": state.rejected_count,
        "pending": [_b64(p) for p in state.pending],
        "pending_key": None if state.pending_key is None else list(state.pending_key),
        "image_epoch": snapshot.image_epoch,
    }
    encoded = json.dumps(header, separators=(",", ":")).encode()
    body = b"".join(
        (MAGIC, _U32.pack(len(encoded)), encoded, _U64.pack(len(snapshot.image)), snapshot.image)
    )
    return body + _U32.pack(zlib.crc32(body))


def decode_journal_snapshot(data: bytes) -> JournalSnapshot:
    if len(data) < len(MAGIC) + _U32.size + _U64.size + _U32.size:
        raise CorruptJournalSnapshotError("shorter than its frame")
    if data[: len(MAGIC)] != MAGIC:
        raise CorruptJournalSnapshotError("not a journal snapshot (magic)")
    body, (crc,) = data[: -_U32.size], _U32.unpack_from(data, len(data) - _U32.size)
    if zlib.crc32(body) != crc:
        raise CorruptJournalSnapshotError("CRC mismatch")
    (header_size,) = _U32.unpack_from(body, len(MAGIC))
    start = len(MAGIC) + _U32.size
    if header_size > MAX_HEADER_BYTES or start + header_size + _U64.size > len(body):
        raise CorruptJournalSnapshotError("header length out of range")
    header_bytes = body[start : start + header_size]
    (image_size,) = _U64.unpack_from(body, start + header_size)
    image_start = start + header_size + _U64.size
    if image_size > MAX_IMAGE_BYTES or image_start + image_size != len(body):
        raise CorruptJournalSnapshotError("image length does not match the file")
    try:
        header = json.loads(header_bytes)
        key = header["pending_key"]
        state = LogState(
            _int(header["claimed_epoch"]),
            _int(header["high_watermark"]),
            _int(header["rejected_count"]),
            tuple(_unb64(p) for p in header["pending"]),
            None if key is None else (_int(key[0]), _int(key[1]), _int(key[2])),
        )
        snapshot = JournalSnapshot(
            _entry(header["previous_entry"]),
            _entry(header["last_entry"]),
            state,
            _int(header["image_epoch"]),
            bytes(body[image_start:]),
        )
    except (ValueError, KeyError, TypeError, IndexError, binascii.Error) as exc:
        raise CorruptJournalSnapshotError(f"bad header: {exc!r}") from None
    if snapshot.previous_entry[1] + 1 != snapshot.last_entry[1]:
        raise CorruptJournalSnapshotError("the two kept entries are not consecutive")
    return snapshot


def write_journal_snapshot(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` and fsync it (pysyncobj renames it into place)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file_and_directory(path: str) -> None:
    """Make a renamed-into-place file durable: its data and its directory entry."""
    for target in (path, os.path.dirname(path) or "."):
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _entry_json(entry: JournalEntry) -> list[Any]:
    return [_b64(bytes(entry[0])), int(entry[1]), int(entry[2])]


def _entry(value: Any) -> JournalEntry:
    command, index, term = value
    return (_unb64(command), _int(index), _int(term))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError("expected base64 text")
    return base64.b64decode(value, validate=True)


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value
