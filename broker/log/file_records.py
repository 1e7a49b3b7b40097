"""``FileRecords``: one segment's ``.log`` file, seen as a chain of batch headers.

Layout: batches back to back, each byte-for-byte as the producer sent it except the base offset
and partition leader epoch this broker assigned (``kafka_protocol/record_batch.py`` draws a
batch)::

    position 0              batch: base_offset int64 | batch_length int32 | epoch | magic | ...
    12 + batch_length       next batch
    ...
    size_bytes              end of the segment: the next append lands here

Lookups walk the chain by reading the first ``SCAN_HEADER_BYTES`` (43) bytes of each batch they
step over (base offset through max timestamp) with one positional read each, never the
records, and start from an index entry so a walk covers at most about ``index.interval.bytes``.
Recovery instead reads the file in large chunks (``ChunkedReader``) since it must CRC-check.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from broker.storage import Buffer, StorageHandle
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.record_batch import HEADER_BYTES, LOG_OVERHEAD, MAGIC

SCAN_HEADER = struct.Struct(">qiibIhiqq")  # base_offset .. max_timestamp
SCAN_HEADER_BYTES = SCAN_HEADER.size  # 43
RECOVERY_CHUNK_BYTES = 1 << 20
HEADER_WALK_CHUNK_BYTES = 4096  # for walks that only want headers


class BatchHeader(NamedTuple):
    base_offset: int
    size_bytes: int
    partition_leader_epoch: int
    magic: int
    last_offset: int
    max_timestamp: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def parse_header(data: Buffer, position: int = 0) -> BatchHeader:
    """Parse the scan header at ``position`` (the caller checks it for plausibility)."""
    base, length, epoch, magic, _, _, delta, _, max_ts = SCAN_HEADER.unpack_from(data, position)
    return BatchHeader(base, LOG_OVERHEAD + length, epoch, magic, base + delta, max_ts)


def header_problem(header: BatchHeader) -> str | None:
    """Why this header cannot start a batch, or None (lengths, magic, offset order)."""
    if header.magic != MAGIC:
        return f"bad magic {header.magic}"
    if header.size_bytes < HEADER_BYTES:
        return f"bad batch length {header.size_bytes - LOG_OVERHEAD}"
    if header.last_offset < header.base_offset:
        return f"last offset {header.last_offset} below base offset {header.base_offset}"
    return None


class FileRecords:
    """The ``.log`` file of a segment and its size."""

    def __init__(self, handle: StorageHandle, size_bytes: int) -> None:
        self.handle = handle
        self.size_bytes = size_bytes

    @property
    def path(self) -> str:
        return self.handle.path

    def append(self, buffers: Sequence[Buffer], size_bytes: int) -> None:
        """One storage append of the whole call (one writev on real files)."""
        self.handle.append(buffers)
        self.size_bytes += size_bytes

    def read(self, position: int, size: int) -> bytes:
        return self.handle.read(position, size)

    def header_at(self, position: int) -> BatchHeader:
        """The header of the batch at ``position`` (which must be a batch boundary)."""
        data = self.handle.read(position, SCAN_HEADER_BYTES)
        if len(data) < SCAN_HEADER_BYTES:
            raise CorruptRecordError(f"{self.path}: batch header at {position} is cut short")
        header = parse_header(data)
        problem = header_problem(header)
        if problem or position + header.size_bytes > self.size_bytes:
            why = problem or "batch runs past the end of the segment"
            raise CorruptRecordError(f"{self.path}: batch at {position}: {why}")
        return header

    def iter_headers(self, start: int) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of every batch from ``start`` (a batch boundary) on."""
        position = start
        while position < self.size_bytes:
            header = self.header_at(position)
            yield position, header
            position += header.size_bytes

    def search_for_offset(self, target: int, start: int) -> tuple[int, BatchHeader] | None:
        """The first batch at or after ``start`` whose last offset is at least ``target``."""
        return next((f for f in self.iter_headers(start) if f[1].last_offset >= target), None)

    def last_boundary_at_or_before(self, limit: int, start: int) -> int:
        """The last batch boundary in ``[start, limit]`` (``start`` is a boundary)."""
        for position, header in self.iter_headers(start):
            if position + header.size_bytes > limit:
                return position
        return self.size_bytes

    def truncate_to(self, size_bytes: int) -> None:
        assert 0 <= size_bytes <= self.size_bytes
        self.handle.truncate(size_bytes)
        self.size_bytes = size_bytes

    def flush(self) -> None:
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


class ChunkedReader:
    """Sequential reads of a file in large chunks (recovery reads everything once)."""

    def __init__(
        self, handle: StorageHandle, size_bytes: int, chunk_bytes: int = RECOVERY_CHUNK_BYTES
    ) -> None:
        self._handle = handle
        self._size = size_bytes
        self._chunk_bytes = chunk_bytes
        self._start = 0
        self._chunk = b""

    def read(self, position: int, size: int) -> memoryview:
        """``size`` bytes at ``position``, fewer at the end of the file."""
        end = min(position + size, self._size)
        if not (self._start <= position and end <= self._start + len(self._chunk)):
            wanted = max(end - position, self._chunk_bytes)
            self._chunk = self._handle.read(position, min(wanted, self._size - position))
            self._start = position
        offset = position - self._start
        return memoryview(self._chunk)[offset : offset + end - position]
