"""Durable file writes, the three ways the metadata path needs them: a snapshot of the
metadata log, pysyncobj's term-and-vote file and its journal, and the Raft compaction dump.

A write is durable once its data is fsynced and, for a file created or renamed into place,
its directory entry too (the directory fsynced): a crash or power loss then finds either the
old file or the whole new one, never a torn mix.
"""

from __future__ import annotations

import os

StrPath = str | os.PathLike[str]


def fsync_path(path: StrPath) -> None:
    """fsync a file or a directory by name: a truncated segment, or the directory entries of a
    created, renamed or deleted file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_fsynced(path: StrPath, data: bytes, mode: int = 0o644) -> None:
    """Create (or truncate) ``path`` with ``data``, fsynced. Its directory entry is not."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(
    path: StrPath, data: bytes, *, temporary: StrPath | None = None, mode: int = 0o644
) -> None:
    """Replace ``path`` by a file holding ``data``, atomically and durably: written to
    ``temporary`` (``path`` + ``.tmp`` by default) and fsynced, renamed over ``path``, and the
    directory fsynced (the rename itself)."""
    temporary = temporary if temporary is not None else f"{os.fspath(path)}.tmp"
    write_fsynced(temporary, data, mode)
    os.replace(temporary, path)
    fsync_path(os.path.dirname(os.fspath(path)) or ".")
