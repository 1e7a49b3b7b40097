"""The sparse indexes of one segment: ``OffsetIndex`` and ``TimeIndex``.

On disk (big-endian, fixed-size entries, no header; the file length is a whole number of
entries; offsets are relative to the segment's base offset)::

    <base>.index       relative_offset int32 | position int32            8 bytes per entry
    <base>.timeindex   timestamp int64       | relative_offset int32     12 bytes per entry

Theory of operation.  The segment adds an offset entry ``(batch base offset, batch position)``
once at least ``index.interval.bytes`` of log have gone by since the last one, and a time entry
``(largest timestamp so far, base offset of the batch that set it)`` at the same moments when
that timestamp has grown, plus once when the segment is rolled or closed.  So both keys and
values strictly increase in each file, and a lookup is a binary search for the last entry not
above the target, followed by a short forward scan of batch headers in the ``.log``.

The entries live in memory (two ``array`` columns, binary-searched in C by ``bisect``); the
file is a write-behind copy: ``write_pending`` appends the entries it lacks (at roll, flush and
close), ``flush`` also fsyncs.  An index is only trusted after a flush, which the log's
recovery point records; everything after it is rebuilt from the log at open.  A segment that
was trusted at open loads its index lazily, on first lookup, after checking every entry
(``load`` raises ``CorruptIndexError`` and the segment rebuilds the index from its log).

Memory: 12 bytes per offset entry and 12 per time entry, i.e. about 0.6% of the log bytes of
the segments that have been read since open (at the default 4 KiB interval).
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from itertools import pairwise
from typing import ClassVar

from broker.log.config import INT32_MAX
from broker.log.errors import CorruptIndexError
from broker.storage import StorageHandle


def _strictly_increasing(column: array[int]) -> bool:
    return all(a < b for a, b in pairwise(column))


class _SparseIndex:
    """Entries ``(key, value)`` with both columns strictly increasing."""

    ENTRY: ClassVar[struct.Struct]
    KEY_TYPECODE: ClassVar[str]

    def __init__(self, handle: StorageHandle, base_offset: int, max_entries: int) -> None:
        self._handle = handle
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._keys: array[int] = array(self.KEY_TYPECODE)
        self._values: array[int] = array("i")
        self.loaded = False  # until load() or reset(): old segments load lazily
        self._written = 0  # entries already in the file

    @property
    def path(self) -> str:
        return self._handle.path

    @property
    def entries(self) -> int:
        assert self.loaded, f"{self.path} used before it was loaded or rebuilt"
        return len(self._keys)

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _columns(self) -> tuple[array[int], array[int]]:
        assert self.loaded, f"{self.path} used before it was loaded or rebuilt"
        return self._keys, self._values

    def reset(self) -> None:
        """Forget every entry, in memory and on disk (before a rebuild)."""
        self._keys, self._values = array(self.KEY_TYPECODE), array("i")
        self._handle.truncate(0)
        self._written = 0
        self.loaded = True

    def _file_size(self) -> int:
        size = self._handle.size()
        if size % self.ENTRY.size:
            raise CorruptIndexError(f"{self.path}: {size} bytes is not a whole number of entries")
        return size

    def _read_file(self) -> tuple[array[int], array[int]]:
        size = self._file_size()
        data = self._handle.read(0, size)
        if len(data) != size:
            raise CorruptIndexError(f"{self.path}: read {len(data)} of {size} bytes")
        keys, values = array(self.KEY_TYPECODE), array("i")
        for key, value in self.ENTRY.iter_unpack(data):
            keys.append(key)
            values.append(value)
        return keys, values

    def _load_checked(
        self, keys: array[int], values: array[int], offsets: array[int], next_offset: int
    ) -> None:
        """Either index, read from its file: its relative ``offsets`` column (the keys or the
        values) lies below the segment's next offset, and both columns strictly increase."""
        limit = next_offset - self.base_offset
        if offsets and not (offsets[0] >= 0 and offsets[-1] < limit):
            raise CorruptIndexError(f"{self.path}: offsets outside [{self.base_offset}, {limit})")
        if not (_strictly_increasing(keys) and _strictly_increasing(values)):
            raise CorruptIndexError(f"{self.path}: entries are not in increasing order")
        self._keys, self._values, self._written = keys, values, len(keys)
        self.loaded = True

    def last_entry_on_disk(self) -> tuple[int, int] | None:
        """The file's last entry, read without loading the rest (the cheap check at open)."""
        size = self._file_size()
        if size == 0:
            return None
        key, value = self.ENTRY.unpack(self._handle.read(size - self.ENTRY.size, self.ENTRY.size))
        return int(key), int(value)

    def _append(self, key: int, value: int) -> None:
        keys, values = self._columns()
        assert not keys or (key > keys[-1] and value > values[-1]), (
            f"{self.path}: entry ({key}, {value}) after ({keys[-1]}, {values[-1]})"
        )
        keys.append(key)
        values.append(value)

    def _truncate_entries(self, count: int) -> None:
        keys, values = self._columns()
        del keys[count:]
        del values[count:]
        if self._written > count:
            self._handle.truncate(count * self.ENTRY.size)
            self._written = count

    def write_pending(self) -> None:
        """Append the entries the file lacks (no fsync)."""
        keys, values = self._columns()
        if self._written == len(keys):
            return
        pack, start = self.ENTRY.pack, self._written
        data = b"".join(pack(k, v) for k, v in zip(keys[start:], values[start:], strict=True))
        self._handle.append([data])
        self._written = len(keys)

    def flush(self) -> None:
        if self.loaded:
            self.write_pending()
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


class OffsetIndex(_SparseIndex):
    """Relative offset -> byte position of a batch in the segment's ``.log``."""

    ENTRY = struct.Struct(">ii")
    KEY_TYPECODE = "i"

    def load(self, *, next_offset: int, log_size_bytes: int) -> None:
        """Read and check every entry; raise ``CorruptIndexError`` on any inconsistency."""
        keys, positions = self._read_file()
        if positions and not (positions[0] >= 0 and positions[-1] < log_size_bytes):
            raise CorruptIndexError(f"{self.path}: positions beyond the log's {log_size_bytes}")
        self._load_checked(keys, positions, keys, next_offset)

    def check_last_entry(self, *, next_offset: int, log_size_bytes: int) -> None:
        last = self.last_entry_on_disk()
        if last is not None and not (
            0 <= last[0] < next_offset - self.base_offset and 0 <= last[1] < log_size_bytes
        ):
            raise CorruptIndexError(f"{self.path}: last entry {last} is beyond the log")

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        assert 0 <= relative <= INT32_MAX and 0 <= position <= INT32_MAX
        assert not self.is_full, f"{self.path} is full"
        self._append(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry at or below ``offset``; the segment start
        when there is none."""
        keys, positions = self._columns()
        i = bisect_right(keys, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + keys[i], positions[i]

    def last_offset(self) -> int | None:
        """The offset of the last entry, if any."""
        keys, _ = self._columns()
        return self.base_offset + keys[-1] if keys else None

    def last_position(self) -> int:
        """The position of the last indexed batch (0 when there is none)."""
        _, positions = self._columns()
        return positions[-1] if positions else 0

    def lookup_position(self, position: int) -> int:
        """The last indexed batch position at or below ``position`` (0 when there is none)."""
        _, positions = self._columns()
        i = bisect_right(positions, position) - 1
        return positions[i] if i >= 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Drop the entries for offsets at or above ``offset``."""
        keys, _ = self._columns()
        self._truncate_entries(bisect_left(keys, offset - self.base_offset))


class TimeIndex(_SparseIndex):
    """Largest timestamp so far -> relative offset of the batch that first reached it."""

    ENTRY = struct.Struct(">qi")
    KEY_TYPECODE = "q"

    def load(self, *, next_offset: int, log_size_bytes: int) -> None:
        del log_size_bytes  # entries hold no positions
        timestamps, offsets = self._read_file()
        self._load_checked(timestamps, offsets, offsets, next_offset)

    def check_last_entry(self, *, next_offset: int, log_size_bytes: int) -> tuple[int, int] | None:
        """The last entry as ``(timestamp, absolute offset)``, after checking it."""
        del log_size_bytes
        last = self.last_entry_on_disk()
        if last is None:
            return None
        if not 0 <= last[1] < next_offset - self.base_offset:
            raise CorruptIndexError(f"{self.path}: last entry {last} is beyond the log")
        return last[0], self.base_offset + last[1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add ``(timestamp, offset)`` if it raises the largest timestamp indexed so far."""
        timestamps, _ = self._columns()
        if timestamps and timestamp <= timestamps[-1]:
            return
        relative = offset - self.base_offset
        assert 0 <= relative <= INT32_MAX
        assert not self.is_full, f"{self.path} is full"
        self._append(timestamp, relative)

    def last_offset(self) -> int | None:
        """The offset of the last entry, if any."""
        _, offsets = self._columns()
        return self.base_offset + offsets[-1] if offsets else None

    def last_entry(self) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the last entry."""
        timestamps, offsets = self._columns()
        return (timestamps[-1], self.base_offset + offsets[-1]) if timestamps else None

    def lookup(self, timestamp: int) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the last entry at or below ``timestamp``."""
        timestamps, offsets = self._columns()
        i = bisect_right(timestamps, timestamp) - 1
        if i < 0:
            return None
        return timestamps[i], self.base_offset + offsets[i]

    def truncate_to(self, offset: int) -> None:
        _, offsets = self._columns()
        self._truncate_entries(bisect_left(offsets, offset - self.base_offset))
