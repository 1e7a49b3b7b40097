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

:class:`JournalCompaction` is that serializer and deserializer for one node.

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
import logging
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Final, Protocol

from broker.fatal import fatal
from kraft.quorum.state import LogState
from metadata_log.durable_files import fsync_path, write_fsynced

logger = logging.getLogger(__name__)

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
    write_fsynced(path, data, 0o600)


def fsync_file_and_directory(path: str) -> None:
    """Make a renamed-into-place file durable: its data and its directory entry."""
    fsync_path(path)
    fsync_path(os.path.dirname(path) or ".")


class ImageSnapshots(Protocol):
    """What journal compaction needs of the state built by the listeners (tick thread)."""

    def take_snapshot(self, end_offset: int) -> tuple[int, bytes]:
        """(epoch, bytes) of a snapshot of every batch below ``end_offset`` (all applied)."""

    def restore_snapshot(self, end_offset: int, epoch: int, data: bytes) -> None:
        """Replace the state with that snapshot; later batches follow from ``end_offset``."""


class LogStateHolder(Protocol):
    """The adapter's replicated counters (``raft._LogStateConsumer``)."""

    applied_entry_bytes: int

    def log_state(self) -> LogState: ...

    def set_log_state(self, state: LogState) -> None: ...


class JournalCompaction:
    """pysyncobj's ``serializer`` and ``deserializer`` for one node (its tick thread).

    pysyncobj calls :meth:`write` with a temporary path it renames to ``dump_path`` on
    return, and deletes the journal prefix on its next tick; :meth:`sync_renamed_dump`
    (called from a tick callback, which runs after pysyncobj's compaction step) fsyncs the
    directory in between. :meth:`read` runs at startup and when the leader installs its dump.
    """

    def __init__(self, snapshots: ImageSnapshots, dump_path: str) -> None:
        self.snapshots = snapshots
        self.dump_path = dump_path
        self.holder: LogStateHolder | None = None  # attached once the consumer exists
        self.entry_bytes_at_dump = 0
        self._renamed: str | None = None  # renamed by pysyncobj, directory not fsynced

    def applied_bytes_since_dump(self) -> int:
        assert self.holder is not None
        return self.holder.applied_entry_bytes - self.entry_bytes_at_dump

    def write(self, path: str, data: Any) -> None:
        """The state after the last applied entry (pysyncobj's serializer)."""
        assert self.holder is not None
        last, previous, _cluster = data
        state = self.holder.log_state()
        epoch, image = self.snapshots.take_snapshot(state.high_watermark)
        snapshot = JournalSnapshot(
            _journal_entry(previous), _journal_entry(last), state, epoch, image
        )
        write_journal_snapshot(path, encode_journal_snapshot(snapshot))
        self._renamed = self.dump_path
        self.entry_bytes_at_dump = self.holder.applied_entry_bytes
        logger.info(
            "raft journal compacted through entry %d: snapshot of metadata offsets below %d "
            "(%d bytes)",
            snapshot.last_entry[1],
            state.high_watermark,
            len(image),
        )

    def sync_renamed_dump(self) -> None:
        path, self._renamed = self._renamed, None
        if path is None:
            return
        try:
            fsync_file_and_directory(path)
        except OSError as exc:
            # pysyncobj trims the journal on its next tick: without the dump on disk, that
            # would leave this node's files unable to rebuild its state.
            fatal("quorum.journal-snapshot-durable", f"raft journal snapshot: {exc}", path=path)

    def read(self, path: str) -> tuple[JournalEntry, JournalEntry, set[Any]]:
        """Restore the counters and the image (pysyncobj's deserializer); an installed dump
        is fsynced first, before pysyncobj replaces the journal with it."""
        assert self.holder is not None
        try:
            fsync_file_and_directory(path)
            with open(path, "rb") as f:
                snapshot = decode_journal_snapshot(f.read())
        except (OSError, CorruptJournalSnapshotError) as exc:
            # The journal before it is gone: this node cannot rebuild its state from its files.
            fatal("quorum.journal-snapshot-readable", f"raft journal snapshot: {exc}", path=path)
        self.holder.set_log_state(snapshot.state)
        self.snapshots.restore_snapshot(
            snapshot.state.high_watermark, snapshot.image_epoch, snapshot.image
        )
        logger.info(
            "raft journal snapshot loaded: entry %d, metadata offsets below %d",
            snapshot.last_entry[1],
            snapshot.state.high_watermark,
        )
        return snapshot.last_entry, snapshot.previous_entry, set()


def _journal_entry(entry: Any) -> JournalEntry:
    command, index, term = entry
    return bytes(command), int(index), int(term)


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
