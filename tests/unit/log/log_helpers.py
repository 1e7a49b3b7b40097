"""Shared helpers for the partition-log tests: batches, a reference model, file surgery."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from broker.log import LogConfig, PartitionLog
from broker.storage import MemoryStorage, Storage
from kafka_protocol.record_batch import (
    RecordBatch,
    SimpleRecord,
    build_batch,
    iter_batches,
    set_base_offset,
    set_partition_leader_epoch,
)

DIR = "/data/topic-0"
T0 = 1_700_000_000_000


def make_batch(
    count: int = 1,
    *,
    value_bytes: int = 10,
    timestamps: Sequence[int] | None = None,
    base_timestamp: int = T0,
    fill: int = 0x61,
) -> bytes:
    """A producer's batch (base offset 0, epoch -1) of ``count`` records."""
    stamps = (
        list(timestamps) if timestamps is not None else [base_timestamp + i for i in range(count)]
    )
    records = [SimpleRecord(value=bytes([fill]) * value_bytes, timestamp=t) for t in stamps]
    return build_batch(records)


def views(*batches: bytes) -> list[memoryview]:
    """Read-only views, as the request frame gives them."""
    return [memoryview(b) for b in batches]


def patched(original: bytes, base_offset: int, leader_epoch: int) -> bytes:
    """What the log must store for ``original``: only the base offset and epoch differ."""
    buf = bytearray(original)
    set_base_offset(buf, base_offset)
    set_partition_leader_epoch(buf, leader_epoch)
    return bytes(buf)


def parse(data: bytes) -> list[RecordBatch]:
    return [b.validate() for b in iter_batches(data)]


def read_all(log: PartitionLog, offset: int | None = None) -> bytes:
    """Every byte from ``offset`` (default: the log start) to the log end, slice by slice."""
    out = bytearray()
    offset = log.log_start_offset if offset is None else offset
    while offset < log.log_end_offset:
        got = log.read(offset, 1 << 30)
        assert got.size_bytes > 0
        data = log.read_bytes(got)
        out += data
        offset = parse(data)[-1].last_offset + 1
    return bytes(out)


@dataclass
class ModelBatch:
    base_offset: int
    original: bytes
    leader_epoch: int
    timestamps: list[int]

    @property
    def stored(self) -> bytes:
        return patched(self.original, self.base_offset, self.leader_epoch)

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.timestamps) - 1

    @property
    def size_bytes(self) -> int:
        return len(self.original)


@dataclass
class Model:
    """The log as a plain list of batches."""

    batches: list[ModelBatch] = field(default_factory=list)
    log_start_offset: int = 0
    next_offset: int = 0

    def append(self, originals: Sequence[bytes], epoch: int, stamps: list[list[int]]) -> None:
        for original, ts in zip(originals, stamps, strict=True):
            self.batches.append(ModelBatch(self.next_offset, original, epoch, ts))
            self.next_offset += len(ts)

    def visible(self) -> list[ModelBatch]:
        return [b for b in self.batches if b.last_offset >= self.log_start_offset]

    def holding(self, offset: int) -> int:
        """Index of the batch holding ``offset``."""
        for i, batch in enumerate(self.batches):
            if batch.base_offset <= offset <= batch.last_offset:
                return i
        raise AssertionError(f"no batch holds {offset}")

    def first_at_or_after(self, timestamp: int) -> tuple[int, int] | None:
        for batch in self.visible():
            for i, ts in enumerate(batch.timestamps):
                offset = batch.base_offset + i
                if offset >= self.log_start_offset and ts >= timestamp:
                    return offset, ts
        return None


def open_log(storage: Storage, config: LogConfig | None = None, now_ms: int = T0) -> PartitionLog:
    return PartitionLog.open(storage, DIR, config or LogConfig(), now_ms)


def flip_byte(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0xFF]))


def cut_file(path: str, size: int) -> None:
    os.truncate(path, size)


# --- leader epochs: a reference independent of broker/log -------------------------------------


def stored_batches(memory: MemoryStorage, directory: str = DIR) -> list[RecordBatch]:
    """Every complete batch in the directory's ``.log`` files, in file order (what a reload
    of the log would scan; a torn tail is left out, as recovery cuts it)."""
    prefix = directory.rstrip("/") + "/"
    paths = sorted(p for p in memory.files if p.startswith(prefix) and p.endswith(".log"))
    return [
        b for p in paths for b in iter_batches(bytes(memory.files[p]), allow_truncated_tail=True)
    ]


def reference_epochs(
    batches: Sequence[RecordBatch], log_start_offset: int
) -> list[tuple[int, int]]:
    """Kafka's rules, restated: a batch whose epoch (>= 0) is newer than every earlier one opens
    an entry; entries at or below the log start collapse into the last of them, moved up to it."""
    derived: list[tuple[int, int]] = []
    for batch in batches:
        epoch = batch.partition_leader_epoch
        if epoch >= 0 and all(epoch > e for e, _ in derived):
            derived.append((epoch, batch.base_offset))
    below = [e for e, start in derived if start <= log_start_offset]
    above = [(e, start) for e, start in derived if start > log_start_offset]
    return ([(below[-1], log_start_offset)] if below else []) + above


def reference_end_offset(
    epochs: Sequence[tuple[int, int]], requested: int, log_end_offset: int
) -> tuple[int, int]:
    """OffsetForLeaderEpoch by brute force over the entries."""
    if not epochs:
        return (-1, -1)
    if requested < epochs[0][0]:
        return (requested, epochs[0][1])
    floor = max(e for e, _ in epochs if e <= requested)
    return (floor, min([s for e, s in epochs if e > requested], default=log_end_offset))
