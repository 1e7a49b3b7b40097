"""``OffsetCheckpoint``: one offset in a small file, replaced atomically.

Files in the partition directory (Kafka keeps these per log directory, for all partitions;
one small file per partition keeps a partition's state inside its own directory)::

    log-start-offset     "0\\n<offset>\\n"   written whenever the log start offset moves
    recovery-point       "0\\n<offset>\\n"   everything below it was flushed (checkpointed lazily)
    clean-shutdown       empty               written by close() after its flush; removed at open

The first line is a format version.  A write goes to ``<name>.tmp``, is flushed, renamed over
the old file and the directory is synced, so a crash leaves the old value or the new one.  A
missing or unreadable file reads as ``None`` (and an unreadable one is logged): the loader then
falls back to the safe default (recover everything; start at the first segment).
"""

from __future__ import annotations

import logging

from broker.storage import Storage, join

logger = logging.getLogger("broker.log")

CHECKPOINT_VERSION = 0
CHECKPOINT_MAX_BYTES = 64
TMP_SUFFIX = ".tmp"
LOG_START_OFFSET_FILE = "log-start-offset"
RECOVERY_POINT_FILE = "recovery-point"
CLEAN_SHUTDOWN_FILE = "clean-shutdown"


def write_atomically(storage: Storage, directory: str, name: str, data: bytes) -> None:
    path = join(directory, name)
    tmp = path + TMP_SUFFIX
    handle = storage.open(tmp)
    try:
        handle.truncate(0)
        handle.append([data])
        handle.flush()
    finally:
        handle.close()
    storage.rename(tmp, path)
    storage.sync_dir(directory)


class OffsetCheckpoint:
    def __init__(self, storage: Storage, directory: str, name: str) -> None:
        self._storage = storage
        self._directory = directory
        self.name = name
        self.path = join(directory, name)

    def read(self) -> int | None:
        if not self._storage.exists(self.path):
            return None
        handle = self._storage.open(self.path)
        try:
            data = handle.read(0, CHECKPOINT_MAX_BYTES)
        finally:
            handle.close()
        lines = data.split(b"\n")
        try:
            if len(lines) == 3 and int(lines[0]) == CHECKPOINT_VERSION and lines[2] == b"":
                offset = int(lines[1])
                if offset >= 0:
                    return offset
        except ValueError:
            pass
        logger.warning("ignoring unreadable checkpoint path=%s content=%r", self.path, data)
        return None

    def write(self, offset: int) -> None:
        assert offset >= 0
        data = f"{CHECKPOINT_VERSION}\n{offset}\n".encode()
        write_atomically(self._storage, self._directory, self.name, data)
