"""The partition log against a model (a list of batches), over random operation sequences.

Appends, reads, flushes, clean restarts, crashes, retention, DeleteRecords and truncation run
on ``FaultyStorage(MemoryStorage())`` with tiny segments so that rolls happen all the time.
After every step: offsets dense and monotonic, the log's bytes equal the appended bytes with
only the base offset and epoch patched, and after a crash exactly the flushed prefix remains.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import pairwise

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from log_helpers import DIR, T0, Model, ModelBatch, make_batch, parse, read_all

from broker.log import LogConfig, PartitionLog
from broker.storage import FaultyStorage, MemoryStorage

batch_specs = st.lists(
    st.tuples(
        st.lists(st.integers(0, 10_000), min_size=1, max_size=4),  # record timestamps - T0
        st.integers(0, 300),  # value bytes
    ),
    min_size=1,
    max_size=4,
)


class PartitionLogMachine(RuleBasedStateMachine):
    @initialize(
        segment_bytes=st.integers(200, 2000),
        interval=st.sampled_from([0, 1, 300, 4096]),
        flush_messages=st.sampled_from([1, 7, 2**63 - 1]),
        retention_bytes=st.sampled_from([-1, 1000, 3000]),
        flush_ms=st.sampled_from([0, 30_000, 2**63 - 1]),
    )
    def open(
        self,
        segment_bytes: int,
        interval: int,
        flush_messages: int,
        retention_bytes: int,
        flush_ms: int,
    ) -> None:
        self.config = LogConfig(
            segment_bytes=segment_bytes,
            index_interval_bytes=interval,
            flush_interval_messages=flush_messages,
            retention_ms=60_000,
            flush_interval_ms=flush_ms,
            retention_bytes=retention_bytes,
            file_delete_delay_ms=0,
        )
        self.storage = FaultyStorage(MemoryStorage())
        self.now_ms = T0
        self.log = PartitionLog.open(self.storage, DIR, self.config, self.now_ms)
        self.model = Model()

    def reopen(self) -> None:
        self.log = PartitionLog.open(self.storage, DIR, self.config, self.now_ms)

    @rule(specs=batch_specs, epoch_step=st.integers(0, 2), advance_ms=st.integers(0, 20_000))
    def append(self, specs: list[tuple[list[int], int]], epoch_step: int, advance_ms: int) -> None:
        epoch = (self.log.latest_epoch or 0) + epoch_step  # a leader's epochs never go back
        self.now_ms += advance_ms
        stamps = [[self.now_ms + t for t in ts] for ts, _ in specs]
        originals = [
            make_batch(len(ts), value_bytes=size, timestamps=s, fill=len(self.model.batches) % 256)
            for (ts, size), s in zip(specs, stamps, strict=True)
        ]
        if sum(map(len, originals)) > self.log.max_append_bytes:
            return
        appends_before = sum(self.storage.append_calls[p] for p in self._log_files())
        result = self.log.append(
            [memoryview(b) for b in originals], leader_epoch=epoch, now_ms=self.now_ms
        )
        assert sum(self.storage.append_calls[p] for p in self._log_files()) == appends_before + 1
        assert result.base_offset == self.model.next_offset
        self.model.append(originals, epoch, stamps)
        assert result.last_offset == self.model.next_offset - 1

    def _log_files(self) -> list[str]:
        return [p for p in self.storage.append_calls if p.endswith(".log")]

    @rule(data=st.data(), min_one=st.booleans())
    def read(self, data: st.DataObject, min_one: bool) -> None:
        start, end = self.model.log_start_offset, self.model.next_offset
        offset = data.draw(st.integers(start, end), label="offset")
        max_offset = data.draw(st.none() | st.integers(start, end), label="max_offset")
        max_bytes = data.draw(st.integers(0, 1500), label="max_bytes")
        got = self.log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one)
        expected = self._expected_read(offset, max_bytes, max_offset, min_one)
        assert self.log.read_bytes(got) == b"".join(b.stored for b in expected)
        if expected:
            assert got.first_offset == expected[0].base_offset <= offset

    def _expected_read(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool
    ) -> list[ModelBatch]:
        limit = self.model.next_offset if max_offset is None else max_offset
        if offset >= limit:
            return []
        bases = self.log.segment_base_offsets()
        first = self.model.holding(offset)
        segment = bisect_right(bases, self.model.batches[first].base_offset)
        out: list[ModelBatch] = []
        size = 0
        for batch in self.model.batches[first:]:
            if batch.last_offset >= limit or bisect_right(bases, batch.base_offset) != segment:
                break
            if size + batch.size_bytes > max_bytes and not (min_one and not out):
                break
            out.append(batch)
            size += batch.size_bytes
        return out

    @rule()
    def flush(self) -> None:
        self.log.flush()
        assert self.log.recovery_point == self.model.next_offset

    @rule(advance_ms=st.integers(0, 100_000))
    def periodic_flush(self, advance_ms: int) -> None:
        """The broker's flusher task: ``flush.ms`` and the recovery-point checkpoint."""
        self.now_ms += advance_ms
        self.log.flush_if_due(self.now_ms)

    @rule()
    def restart(self) -> None:
        self.log.close()
        self.reopen()
        assert self.log.recovery_report.clean_shutdown
        assert not self.log.recovery_report.dropped

    @rule(lose_unflushed=st.booleans())
    def crash(self, lose_unflushed: bool) -> None:
        flushed = self.log.recovery_point
        self.storage.crash(lose_unflushed=lose_unflushed)
        self.reopen()
        if lose_unflushed:
            self.model.batches = [b for b in self.model.batches if b.last_offset < flushed]
            self.model.next_offset = flushed
        if self.model.log_start_offset > self.model.next_offset:  # DeleteRecords outlived data
            self.model.batches = []
            self.model.next_offset = self.model.log_start_offset

    @rule(advance_ms=st.integers(0, 100_000))
    def retention(self, advance_ms: int) -> None:
        self.now_ms += advance_ms
        before = self.log.log_start_offset
        deleted = self.log.apply_retention(self.now_ms)
        assert deleted == sorted(deleted)
        assert self.log.log_start_offset >= before
        assert all(base < self.log.log_start_offset for base in deleted)
        self.model.log_start_offset = self.log.log_start_offset

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.model.next_offset))
        new_start = self.log.delete_records_before(offset)
        assert new_start == max(offset, self.model.log_start_offset)
        self.model.log_start_offset = new_start

    @precondition(lambda self: self.model.next_offset > self.model.log_start_offset)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.model.log_start_offset, self.model.next_offset))
        self.log.truncate_to(offset)
        kept = [b for b in self.model.batches if b.last_offset < offset]
        if len(kept) < len(self.model.batches):
            self.model.next_offset = self.model.batches[len(kept)].base_offset
        self.model.batches = kept
        self.model.log_start_offset = min(self.model.log_start_offset, self.model.next_offset)

    @rule(age_ms=st.integers(-5, 200_000))
    def timestamp_lookup(self, age_ms: int) -> None:
        expected = self.model.first_at_or_after(self.now_ms - age_ms)
        assert self.log.offset_for_timestamp(self.now_ms - age_ms) == expected

    @invariant()
    def matches_the_model(self) -> None:
        log, model = self.log, self.model
        assert (log.log_start_offset, log.log_end_offset) == (
            model.log_start_offset,
            model.next_offset,
        )
        assert log.recovery_point <= log.log_end_offset
        data = read_all(log)
        assert data == b"".join(b.stored for b in model.visible())
        batches = parse(data)
        for earlier, later in pairwise(batches):
            assert later.base_offset == earlier.last_offset + 1  # dense, monotonic

    def teardown(self) -> None:
        if hasattr(self, "log"):
            self.log.close()


TestPartitionLog = PartitionLogMachine.TestCase
