"""Crashes at every step of a cleaning pass (segment_swap.py's protocol), and inside recovery.

A power cut (``FaultyStorage.crash``: unflushed bytes lost, directory operations kept) is
injected before the n-th directory operation (rename, remove, directory sync) of a pass, for
every n, and at every append and flush of the ``.cleaned`` files.  After reopening, each group
of old segments the pass rewrote holds either exactly its old batches or exactly its new ones
(new ones only in a prefix of the groups: they swap in order), nothing above the rewritten
range changed, no temporary file is left, the leader epoch cache is unchanged, and one more
pass gives the same records as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import errno
from bisect import bisect_right
from dataclasses import dataclass

import pytest
from log_helpers import DIR, T0, parse, read_all
from test_log_cleaner import append, records, segment_files

from broker.log import KafkaStorageError, LogConfig, PartitionLog
from broker.log.cleaner import CleanResult
from broker.storage import FaultyStorage, MemoryStorage
from kafka_protocol.compression import Compression
from kafka_protocol.record_batch import RecordBatch

CONFIG = LogConfig(
    segment_bytes=500,
    cleanup_policy=("compact",),
    file_delete_delay_ms=0,
    index_interval_bytes=150,
)


class StepFaults(FaultyStorage):
    """Crashes (a power cut) just before the ``crash_at``-th directory operation."""

    def __init__(self, inner: MemoryStorage) -> None:
        super().__init__(inner)
        self.operations = 0
        self.crash_at: int | None = None

    def _step(self, what: str, path: str) -> None:
        self.operations += 1
        if self.operations == self.crash_at:
            self.crash_at = None
            self.crash()
            raise OSError(errno.EIO, f"power cut before {what}", path)

    def rename(self, source: str, target: str) -> None:
        self._step("rename", source)
        super().rename(source, target)

    def remove(self, path: str) -> None:
        self._step("remove", path)
        super().remove(path)

    def sync_dir(self, path: str) -> None:
        self._step("sync_dir", path)
        super().sync_dir(path)


def clone(memory: MemoryStorage) -> MemoryStorage:
    copy = MemoryStorage()
    copy.files = {p: bytearray(d) for p, d in memory.files.items()}
    copy.dirs = set(memory.dirs)
    return copy


def write(log: PartitionLog, first: int, count: int) -> None:
    """Several epochs, compressed and plain batches, tombstones."""
    for i in range(first, first + count):
        key = b"k%d" % (i % 5)
        value = None if i % 11 == 10 else b"v%d" % i
        codec = Compression.GZIP if i % 3 == 0 else Compression.NONE
        append(log, [(key, value), (b"x%d" % (i % 2), b"x")], epoch=i // 20, compression=codec)


def batches_of(log: PartitionLog) -> list[bytes]:
    return [bytes(b.buf) for b in parse(read_all(log))]


@dataclass
class Scenario:
    """A log flushed but without a recovery-point checkpoint (a reopen re-validates every
    segment, cleaned ones too), and what an uninterrupted pass makes of it."""

    memory: MemoryStorage
    old: list[bytes]  # every batch before the pass
    new: list[bytes]  # and after it
    group_bases: list[int]  # the new segments' base offsets
    result: CleanResult
    epochs: list[tuple[int, int]]

    @classmethod
    def make(cls, cleaned_before: bool) -> Scenario:
        memory = MemoryStorage()
        log = PartitionLog.open(memory, DIR, CONFIG, T0)
        write(log, 0, 60)
        if cleaned_before:  # the pass under test then merges small segments
            log.clean(T0, log.log_end_offset)
            write(log, 60, 30)
        log.flush()
        old, epochs = batches_of(log), log.epoch_entries()
        log = PartitionLog.open(FaultyStorage(clone(memory)), DIR, CONFIG, T0)
        result = log.clean(T0, log.log_end_offset)
        assert result is not None and result.segments_after > 1
        assert cleaned_before == (result.segments_after < result.segments_before)
        bases = [b for b in log.segment_base_offsets() if b < result.end_offset]
        return cls(memory, old, batches_of(log), bases, result, epochs)

    def group_of(self, batch: bytes) -> int:
        """Which group of the pass holds the batch (one past the last: above the range)."""
        base = RecordBatch(memoryview(batch)).base_offset
        if base >= self.result.end_offset:
            return len(self.group_bases)
        return bisect_right(self.group_bases, base) - 1

    def check_old_or_new(self, log: PartitionLog, memory: MemoryStorage) -> None:
        got = batches_of(log)
        states = []
        for group in range(len(self.group_bases) + 1):
            mine, old, new = (
                [b for b in x if self.group_of(b) == group] for x in (got, self.old, self.new)
            )
            assert mine in (old, new), f"group {group} is neither old nor new"
            if old != new:
                states.append("new" if mine == new else "old")
        assert states == sorted(states, key="new".__ne__), f"new groups after old: {states}"
        assert log.epoch_entries() == self.epochs
        assert not [f for f in segment_files(memory) if f.endswith((".cleaned", ".swap"))]

    def reopen_and_check(self, memory: MemoryStorage, storage: FaultyStorage) -> None:
        log = PartitionLog.open(storage, DIR, CONFIG, T0)
        self.check_old_or_new(log, memory)
        assert log.clean(T0, log.log_end_offset, force=True) is not None
        assert records(log) == [r for b in self.new for r in RecordBatch(memoryview(b)).records()]
        log.close()

    def operations_of_a_pass(self) -> int:
        storage = StepFaults(clone(self.memory))
        log = PartitionLog.open(storage, DIR, CONFIG, T0)
        storage.operations = 0
        log.clean(T0, log.log_end_offset)
        return storage.operations


SCENARIOS = {"first pass": Scenario.make(False), "merging pass": Scenario.make(True)}
STEPS = [
    (name, step) for name, s in SCENARIOS.items() for step in range(1, s.operations_of_a_pass() + 1)
]


@pytest.mark.parametrize(("name", "step"), STEPS)
def test_a_power_cut_at_every_step_of_the_swap(name: str, step: int) -> None:
    scenario = SCENARIOS[name]
    memory = clone(scenario.memory)
    storage = StepFaults(memory)
    log = PartitionLog.open(storage, DIR, CONFIG, T0)
    storage.operations, storage.crash_at = 0, step
    with pytest.raises(KafkaStorageError):
        log.clean(T0, log.log_end_offset)
    assert log.offline
    scenario.reopen_and_check(memory, storage)


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("step", range(1, 12))
def test_a_power_cut_inside_recovery_of_a_committed_swap(name: str, step: int) -> None:
    """Cut power in the middle of a swap, then again in the middle of the recovery that
    finishes it: the second recovery converges as well."""
    scenario = SCENARIOS[name]
    memory = clone(scenario.memory)
    storage = StepFaults(memory)
    log = PartitionLog.open(storage, DIR, CONFIG, T0)
    storage.operations, storage.crash_at = 0, 5  # after the first commit point
    with pytest.raises(KafkaStorageError):
        log.clean(T0, log.log_end_offset)
    assert any(f.endswith(".log.swap") for f in segment_files(memory))
    storage.operations, storage.crash_at = 0, step
    with contextlib.suppress(KafkaStorageError):
        PartitionLog.open(storage, DIR, CONFIG, T0)
    scenario.reopen_and_check(memory, storage)


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("nth", range(1, 8))
@pytest.mark.parametrize("what", ["append", "flush"])
def test_a_crash_while_writing_the_cleaned_files(name: str, what: str, nth: int) -> None:
    scenario = SCENARIOS[name]
    memory = clone(scenario.memory)
    storage = StepFaults(memory)
    log = PartitionLog.open(storage, DIR, CONFIG, T0)
    if what == "append":
        storage.fail_append(nth, torn_bytes=7, path_suffix=".cleaned", then_crash=True)
    else:
        storage.fail_flush(nth, path_suffix=".cleaned")
    try:
        log.clean(T0, log.log_end_offset)
    except KafkaStorageError:
        assert log.offline
    storage.crash()
    scenario.reopen_and_check(memory, storage)


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_power_cut_after_the_pass(name: str) -> None:
    scenario = SCENARIOS[name]
    storage = FaultyStorage(clone(scenario.memory))
    log = PartitionLog.open(storage, DIR, CONFIG, T0)
    log.clean(T0, log.log_end_offset)
    storage.crash()
    log = PartitionLog.open(storage, DIR, CONFIG, T0)
    assert batches_of(log) == scenario.new
    assert log.first_dirty_offset == scenario.result.next_dirty_offset
