"""Compaction against a reference model, over random operation sequences.

A compacted log on ``FaultyStorage(MemoryStorage())`` with tiny segments takes appends of keyed
records (tombstones, null keys, headers, compression, idempotent producers, rising leader
epochs), cleaning passes at random high watermarks, restarts, crashes, DeleteRecords,
retention and truncation.  The model is a list of records and the rules of a pass, restated:
with ``E`` the end of the last whole inactive segment below the high watermark and ``D`` the
first dirty offset, a record below ``E`` stays unless a later record below ``E`` and at or
above ``D`` has its key, or it is a tombstone first kept by a pass more than
``delete.retention.ms`` ago; everything else stays as it was.  After every step the visible
records equal the model's, offsets and timestamps included; reads from every offset and
timestamp lookups answer across the gaps; the leader epoch cache equals a re-derivation from
the batch headers; and idempotent producer state rebuilt from the headers ends, for every
producer with a batch left, at the sequence the producer last wrote (unless a truncation below
the cleaned range, which only an unclean leader election makes, uncovered an earlier one).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from log_helpers import DIR, T0, parse, read_all, reference_epochs, stored_batches
from test_log_cleaner import rebuild_producers

from broker.log import LogConfig, PartitionLog
from broker.storage import FaultyStorage, MemoryStorage
from kafka_protocol.compression import Compression
from kafka_protocol.record_batch import NO_PRODUCER_ID, Record, SimpleRecord, build_batch

DELETE_RETENTION_MS = 30_000

records_strategy = st.lists(
    st.tuples(
        st.sampled_from([b"a", b"b", b"c", b"d", b"e", None]),  # key
        st.none() | st.binary(max_size=40),  # value (None: a tombstone)
        st.integers(-5_000, 5_000),  # timestamp - now
        st.booleans(),  # with a header
    ),
    min_size=1,
    max_size=4,
)


@dataclass
class Sent:
    """One record as the producer sent it: what the log must return while it stays."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: list[tuple[str, bytes | None]]

    def matches(self, record: Record) -> bool:
        got = (record.offset, record.key, record.value, record.timestamp, record.headers)
        return got == (self.offset, self.key, self.value, self.timestamp, self.headers)


class CleanerMachine(RuleBasedStateMachine):
    @initialize(
        segment_bytes=st.integers(250, 1200),
        interval=st.sampled_from([0, 200, 4096]),
        flush_messages=st.sampled_from([1, 3, 2**63 - 1]),
        ratio=st.sampled_from([0.0, 0.5, 0.9]),
    )
    def open(self, segment_bytes: int, interval: int, flush_messages: int, ratio: float) -> None:
        self.config = LogConfig(
            segment_bytes=segment_bytes,
            index_interval_bytes=interval,
            flush_interval_messages=flush_messages,
            cleanup_policy=("compact",),
            delete_retention_ms=DELETE_RETENTION_MS,
            min_cleanable_dirty_ratio=ratio,
            file_delete_delay_ms=0,
        )
        self.memory = MemoryStorage()
        self.storage = FaultyStorage(self.memory)
        self.now_ms = T0
        self.log = PartitionLog.open(self.storage, DIR, self.config, self.now_ms)
        self.sent: list[Sent] = []  # every record still in the log, in offset order
        self.horizons: dict[int, int] = {}  # tombstone offset -> its delete horizon
        self.first_dirty = 0
        self.durable_end = 0  # below it, everything survives a power cut
        self.next_offset = 0
        self.log_start = 0
        self.sequences: dict[int, list[tuple[int, int]]] = {}  # pid -> [(last offset, last seq)]
        # Producers whose state a truncation into a cleaned range may have set back (below)
        self.set_back: set[int] = set()

    def reopen(self) -> None:
        self.log = PartitionLog.open(self.storage, DIR, self.config, self.now_ms)

    # --- operations -------------------------------------------------------------------------

    @rule(
        specs=st.lists(records_strategy, min_size=1, max_size=8),
        epoch_step=st.sampled_from([0, 0, 0, 1]),
        producer=st.sampled_from([None, 1, 2]),
        codec=st.sampled_from([Compression.NONE, Compression.NONE, Compression.ZSTD]),
        advance_ms=st.integers(0, 10_000),
    )
    def append(
        self,
        specs: list[list[tuple[bytes | None, bytes | None, int, bool]]],
        epoch_step: int,
        producer: int | None,
        codec: Compression,
        advance_ms: int,
    ) -> None:
        """A few appends of one batch each (one producer, one epoch)."""
        self.now_ms += advance_ms
        for spec in specs:
            self._append_one(spec, epoch_step, producer, codec)
            epoch_step = 0

    def _append_one(
        self,
        spec: list[tuple[bytes | None, bytes | None, int, bool]],
        epoch_step: int,
        producer: int | None,
        codec: Compression,
    ) -> None:
        sent = [
            Sent(0, key, value, self.now_ms + dt, [("h", b"%d" % dt)] if header else [])
            for key, value, dt, header in spec
        ]
        pid, seq = NO_PRODUCER_ID, -1
        if producer is not None:
            pid, history = producer, self.sequences.setdefault(producer, [])
            seq = history[-1][1] + 1 if history else 0
        batch = build_batch(
            [SimpleRecord(s.value, s.key, s.headers, s.timestamp) for s in sent],
            compression=codec,
            producer_id=pid,
            producer_epoch=0 if producer is not None else -1,
            base_sequence=seq,
        )
        if len(batch) > self.log.max_append_bytes:
            return
        epoch = (self.log.latest_epoch or 0) + epoch_step
        result = self.log.append([memoryview(batch)], leader_epoch=epoch, now_ms=self.now_ms)
        assert result.base_offset == self.next_offset
        for i, s in enumerate(sent):
            s.offset = result.base_offset + i
        self.sent += sent
        self.next_offset = result.last_offset + 1
        if producer is not None:
            self.sequences[producer].append((result.last_offset, seq + len(sent) - 1))
            self.set_back.discard(producer)

    @rule(data=st.data(), advance_ms=st.integers(0, 20_000), force=st.booleans())
    def clean(self, data: st.DataObject, advance_ms: int, force: bool) -> None:
        self.now_ms += advance_ms
        anywhere = st.integers(self.log_start, self.next_offset)
        hw = data.draw(st.just(self.next_offset) | anywhere, label="high watermark")
        bases = self.log.segment_base_offsets()
        end = max((b for b in bases[1:] if b <= hw), default=None)
        result = self.log.clean(self.now_ms, hw, force=force)
        if end is None:
            assert result is None
        if force and end is not None:
            assert result is not None
        if result is None:
            return
        first_dirty = max(self.first_dirty, self.log_start)
        assert (result.first_dirty_offset, result.end_offset) == (first_dirty, end)
        assert result.next_dirty_offset == max(first_dirty, end)
        self._clean_model(first_dirty, end)
        self.first_dirty = max(first_dirty, end)
        self.durable_end = max(self.durable_end, end)

    def _clean_model(self, first_dirty: int, end: int) -> None:
        latest = {s.key: s.offset for s in self.sent if first_dirty <= s.offset < end}
        kept = []
        for s in self.sent:
            if s.offset < end and s.key is not None:
                if latest.get(s.key, -1) > s.offset:
                    continue
                if s.value is None:
                    horizon = self.horizons.setdefault(s.offset, self.now_ms + DELETE_RETENTION_MS)
                    if self.now_ms >= horizon:
                        continue
            kept.append(s)
        self.sent = kept

    @rule()
    def restart(self) -> None:
        self.log.close()
        self.reopen()
        assert self.log.recovery_report.clean_shutdown and not self.log.recovery_report.dropped

    @rule(lose_unflushed=st.booleans())
    def crash(self, lose_unflushed: bool) -> None:
        survives = max(self.log.recovery_point, self.durable_end)
        self.storage.crash(lose_unflushed=lose_unflushed)
        self.reopen()
        if lose_unflushed:
            assert self.log.log_end_offset >= min(survives, self.next_offset)
            self._lost_from(self.log.log_end_offset)
            if self.log.size_bytes == 0:  # DeleteRecords outlived the data: an empty log
                self.sent, self.log_start = [], self.log.log_start_offset
        assert self.log.log_end_offset == self.next_offset

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.log_start, self.next_offset), label="new start")
        self.log_start = self.log.delete_records_before(offset)
        assert self.log_start == offset

    @rule()
    def retention(self) -> None:
        self.log.apply_retention(self.now_ms)
        first = self.log.segment_base_offsets()[0]
        self.sent = [s for s in self.sent if s.offset >= first]

    @precondition(lambda self: self.next_offset > self.log_start)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.log_start, self.next_offset), label="truncate to")
        self.log.truncate_to(offset)
        if self.log.log_end_offset < self.durable_end:
            # Truncating below what was cleaned (below the high watermark: only an unclean
            # leader election does that) may uncover a producer's earlier batch whose later
            # ones the cleaner removed: its rebuilt state then ends at that batch.
            self.set_back.update(self.sequences)
        self._lost_from(self.log.log_end_offset)

    def _lost_from(self, end: int) -> None:
        """Everything at or above ``end`` is gone."""
        self.sent = [s for s in self.sent if s.offset < end]
        self.horizons = {o: h for o, h in self.horizons.items() if o < end}
        self.next_offset = end
        self.log_start = min(self.log_start, end)
        self.first_dirty = min(self.first_dirty, end)
        self.durable_end = min(self.durable_end, end)
        for history in self.sequences.values():
            history[:] = [h for h in history if h[0] < end]

    # --- checks -----------------------------------------------------------------------------

    @rule(data=st.data())
    def read_from_anywhere(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.log_start, self.next_offset), label="fetch offset")
        got = [r for b in parse(read_all(self.log, offset)) for r in b.records()]
        expected = [s for s in self.sent if s.offset >= offset]
        got = [r for r in got if r.offset >= offset]
        assert len(got) == len(expected) and all(map(Sent.matches, expected, got))

    @rule(age_ms=st.integers(-6_000, 60_000))
    def timestamp_lookup(self, age_ms: int) -> None:
        target = self.now_ms - age_ms
        found = next(
            ((s.offset, s.timestamp) for s in self.visible() if s.timestamp >= target), None
        )
        assert self.log.offset_for_timestamp(target) == found

    def visible(self) -> list[Sent]:
        return [s for s in self.sent if s.offset >= self.log_start]

    @invariant()
    def matches_the_model(self) -> None:
        log = self.log
        assert (log.log_start_offset, log.log_end_offset) == (self.log_start, self.next_offset)
        assert log.first_dirty_offset == max(self.first_dirty, self.log_start)
        batches = parse(read_all(log))
        got = [r for b in batches for r in b.records() if r.offset >= self.log_start]
        expected = self.visible()
        assert len(got) == len(expected) and all(map(Sent.matches, expected, got))
        assert [b.base_offset for b in batches] == sorted({b.base_offset for b in batches})
        assert log.epoch_entries() == reference_epochs(
            stored_batches(self.memory), log.log_start_offset
        )
        producers = rebuild_producers(log)
        for pid, entry in producers.producers.items():
            if pid not in self.set_back:
                assert entry.last_seq == self.sequences[pid][-1][1]

    def teardown(self) -> None:
        if hasattr(self, "log"):
            self.log.close()


TestCleanerModel = CleanerMachine.TestCase
