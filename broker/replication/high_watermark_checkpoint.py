"""Kafka's ``replication-offset-checkpoint``: every hosted partition's high watermark, one file
per log directory, so a restarted broker neither exposes records it cannot know are
committed nor hides every record until all followers have fetched.

Format (Kafka's)::

    0                       version
    <count>                 number of lines that follow
    <topic> <partition> <high watermark>
"""

from __future__ import annotations

import logging
from pathlib import Path

from broker.log.checkpoint import write_atomically
from broker.storage import Storage

log = logging.getLogger("broker.replica_manager")
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"


def read_high_watermarks(storage: Storage, log_dir: Path) -> dict[tuple[str, int], int]:
    """The checkpointed high watermarks.  Missing or unreadable: none is known (they restart
    from the log start and the leaders' fetches move them)."""
    path = str(log_dir / HIGH_WATERMARK_FILE)
    if not storage.exists(path):
        return {}
    handle = storage.open(path)
    try:
        text = handle.read(0, handle.size()).decode(errors="replace")
    finally:
        handle.close()
    lines = text.split("\n")
    try:
        if lines[0] != "0" or int(lines[1]) != len(lines) - 3 or lines[-1] != "":
            raise ValueError("bad header or count")
        found = {}
        for line in lines[2:-1]:
            topic, index, offset = line.split(" ")
            found[(topic, int(index))] = int(offset)
        return found
    except (ValueError, IndexError) as exc:
        log.warning("ignoring unreadable %s: %s", path, exc)
        return {}


def write_high_watermarks(
    storage: Storage, log_dir: Path, entries: list[tuple[str, int, int]]
) -> None:
    """Replace the checkpoint with ``(topic, partition, high watermark)`` entries.  Raises
    ``OSError``: the log directory failed (Kafka takes it offline)."""
    lines = "".join(f"{t} {i} {hw}\n" for t, i, hw in entries)
    data = f"0\n{len(entries)}\n{lines}".encode()
    storage.makedirs(str(log_dir))
    write_atomically(storage, str(log_dir), HIGH_WATERMARK_FILE, data)
