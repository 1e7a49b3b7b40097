"""Replacing segments by cleaned ones, crash-safe: Kafka's ``.cleaned`` / ``.swap`` protocol.

The cleaner (cleaner.py) writes each new segment under temporary names; the log then swaps it
in for the old segments it replaces, one new segment (a "group" of old ones) at a time.  The
new segment takes the base offset of the first old one, ``X``, and ends where the last old one
ended, so the segments stay contiguous::

    old:  X.log  Y.log  Z.log  | W.log ...        (X, Y, Z: one group; W is not rewritten)
    new:  X.log ...............| W.log ...

    step                                         directory afterwards; a crash here leaves
    1. write + fsync X.{log,index,timeindex}     X.*.cleaned beside the old segments:
       .cleaned (cleaner.py, maybe in a thread)    recovery deletes them (old segments)
    2. rename X.index.cleaned, X.timeindex       X.*index.swap: recovery deletes them, as any
       .cleaned to .swap                           .swap without a X.log.swap (old segments)
    3. rename X.log.cleaned to X.log.swap,       THE COMMIT POINT: recovery finishes the swap
       sync the directory                          (new segment)
    4. remove Y.*, Z.*, sync the directory       recovery finishes the swap (new segment)
    5. rename X.index.swap, X.timeindex.swap     X.log.swap beside X.log (old) and X.*index
       over X.index, X.timeindex, then             (old or new): recovery finishes the swap,
       X.log.swap over X.log, sync the directory   new indexes rebuilt if in doubt (new segment)

``recover_swaps`` (run by the loader before it reads the directory) finishes a swap whose
``X.log.swap`` exists: it reads where that segment ends (a walk of its batch headers), removes
every segment file with a base offset in ``[X, end)`` (the old segments, and X's indexes,
which may be old or new), syncs the directory, and renames the ``.swap`` files to their
segment names, the ``.log`` last.  Everything else temporary (``.cleaned``, ``.deleted``, a
``.swap`` without its ``.log.swap``) is removed.  So after a crash anywhere, a group holds its
old segments or its new one, never both and never neither; running recovery again after a
crash inside recovery converges the same way.

The aborted-transaction index (``X.txnindex``, txn_index.py) is not renamed: before step 2 the
log rewrites ``X.txnindex`` with the entries of every old segment of the group and fsyncs it,
and recovery keeps that file; if the swap did not commit, the loader drops the entries beyond
the old ``X``'s range.

Every rename is of a fully written, fsynced file (step 1), so ``FaultyStorage``'s model (file
contents lost unless flushed, directory operations durable at once) covers every crash here.
"""

from __future__ import annotations

import logging
import re

from broker.log.file_records import FileRecords
from broker.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_segment_file_name,
    segment_file_name,
)
from broker.storage import Storage, join
from kafka_protocol.exceptions import CorruptRecordError

logger = logging.getLogger("broker.log")

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"  # Kafka's; never written here, removed if found
_TEMPORARY_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex)(\.cleaned|\.swap|\.deleted)$")
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX)


def _path(directory: str, base_offset: int, suffix: str, state: str = "") -> str:
    return join(directory, segment_file_name(base_offset, suffix) + state)


def commit_swap(storage: Storage, directory: str, base_offset: int) -> None:
    """Steps 2 and 3: the new segment ``base_offset`` (written as ``.cleaned``) is committed."""
    for suffix in (*_INDEX_SUFFIXES, LOG_SUFFIX):  # the .log last: it marks the commit
        storage.rename(
            _path(directory, base_offset, suffix, CLEANED_SUFFIX),
            _path(directory, base_offset, suffix, SWAP_SUFFIX),
        )
    storage.sync_dir(directory)


def finish_swap(storage: Storage, directory: str, base_offset: int, replaced: list[int]) -> None:
    """Steps 4 and 5: remove the old segments ``replaced`` (base offsets; the first is
    ``base_offset`` itself, whose files the renames replace) and give the new one its names."""
    assert replaced and replaced[0] == base_offset, (base_offset, replaced)
    for old in replaced[1:]:
        for suffix in SEGMENT_SUFFIXES:
            path = _path(directory, old, suffix)
            if storage.exists(path):
                storage.remove(path)
    storage.sync_dir(directory)
    _rename_swap_files(storage, directory, base_offset)


def _rename_swap_files(storage: Storage, directory: str, base_offset: int) -> None:
    for suffix in (*_INDEX_SUFFIXES, LOG_SUFFIX):  # the .log last: while it is a .swap,
        swap = _path(directory, base_offset, suffix, SWAP_SUFFIX)  # recovery redoes this
        if storage.exists(swap):
            storage.rename(swap, _path(directory, base_offset, suffix))
    storage.sync_dir(directory)


def remove_cleaned_files(storage: Storage, directory: str, base_offset: int) -> None:
    """Throw away a new segment that was written but not committed (best effort)."""
    for suffix in SEGMENT_SUFFIXES:
        path = _path(directory, base_offset, suffix, CLEANED_SUFFIX)
        try:
            if storage.exists(path):
                storage.remove(path)
        except OSError as error:  # the loader removes it at the next open
            logger.warning("cannot remove %s: %s", path, error)


def recover_swaps(storage: Storage, directory: str) -> list[str]:
    """Finish committed swaps and remove every other temporary file; return what was done (for
    the log).  Runs before the loader reads the segments."""
    done: list[str] = []
    names = storage.listdir(directory)
    swapped: list[int] = []
    for name in names:
        match = _TEMPORARY_FILE.match(name)
        if match is None:
            continue
        if match[3] == SWAP_SUFFIX and match[2] == LOG_SUFFIX:
            swapped.append(int(match[1]))
        elif match[3] != SWAP_SUFFIX:
            storage.remove(join(directory, name))
            done.append(f"removed {name}")
    for base in sorted(swapped):
        end = _swap_end(storage, _path(directory, base, LOG_SUFFIX, SWAP_SUFFIX), base)
        if end == base:  # no readable batch (never written so): keep the old segments
            continue  # the .swap files go below
        for name in storage.listdir(directory):
            parsed = parse_segment_file_name(name)
            if (
                parsed is not None
                and base <= parsed[0] < end
                and parsed != (base, TXN_INDEX_SUFFIX)
            ):
                storage.remove(join(directory, name))
                done.append(f"removed {name} (replaced by the swap of {base})")
        storage.sync_dir(directory)
        _rename_swap_files(storage, directory, base)
        done.append(f"finished the swap of segment {base} (offsets {base}..{end - 1})")
    for name in storage.listdir(directory):
        if name.endswith(SWAP_SUFFIX):  # an index whose .log never got to .swap
            storage.remove(join(directory, name))
            done.append(f"removed {name}")
    if done:
        storage.sync_dir(directory)
        for action in done:
            logger.warning("log cleaner swap recovery dir=%s action=%s", directory, action)
    return done


def _swap_end(storage: Storage, path: str, base_offset: int) -> int:
    """One past the last batch of a committed new segment (it was fsynced before its rename,
    so its headers are whole; a bad one ends the walk, and recovery re-checks the rest)."""
    handle = storage.open(path)
    end = base_offset
    try:
        records = FileRecords(handle, handle.size())
        for _, header in records.iter_headers(0):
            end = header.next_offset
    except CorruptRecordError as error:
        logger.error("unreadable swap segment path=%s error=%s", path, error)
    finally:
        handle.close()
    return end
