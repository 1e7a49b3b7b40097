"""Compaction of a log holding transactions (cleaner.py, cleaned_transactions.py), as Kafka's
LogCleaner does it: data of aborted transactions goes, markers stay while their transaction
may have data left and go ``delete.retention.ms`` after that, the aborted-transaction index
keeps only the entries of the markers kept with data, and nothing at or above the last stable
offset is touched.

The log is a real ``PartitionLog`` on ``MemoryStorage`` with tiny segments; transactional
batches and COMMIT/ABORT markers are appended as a leader appends them (an ABORT marker with
its ``.txnindex`` entry: the transaction's first offset and the LSO after it).  A
read_committed reader is simulated as Kafka's consumers read: the log's aborted transactions
for the fetch (``PartitionLog.aborted_transactions``), a transactional batch of a producer
in one skipped until its ABORT marker.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import event, given, settings
from hypothesis import strategies as st
from log_helpers import DIR, T0, parse, read_all

from broker.log import LogConfig, PartitionLog
from broker.log.cleaner import CleanResult
from broker.log.record_filter import has_delete_horizon
from broker.log.txn_index import AbortedTxn
from broker.storage import MemoryStorage
from kafka_protocol.record_batch import (
    NO_PRODUCER_ID,
    ControlRecordType,
    RecordBatch,
    SimpleRecord,
    build_batch,
    control_record,
    control_record_type,
)

DR_MS = 60_000  # delete.retention.ms
CONFIG = LogConfig(
    segment_bytes=700,
    cleanup_policy=("compact",),
    delete_retention_ms=DR_MS,
    min_cleanable_dirty_ratio=0.0,
    file_delete_delay_ms=0,
    index_interval_bytes=100,
)


@dataclass
class Written:
    offset: int
    key: bytes
    value: bytes | None
    txn: tuple[int, int] | None  # (producer id, transaction number); None: not transactional


@dataclass
class TxnLog:
    """A compacted partition log with a leader's view of its transactions."""

    now: int = T0
    log: PartitionLog = field(init=False)
    storage: MemoryStorage = field(default_factory=MemoryStorage)
    written: list[Written] = field(default_factory=list)
    ongoing: dict[int, int] = field(default_factory=dict)  # pid -> first offset of its txn
    txn_number: dict[int, int] = field(default_factory=dict)
    outcome: dict[tuple[int, int], bool] = field(default_factory=dict)  # txn -> committed
    sequence: dict[int, int] = field(default_factory=dict)  # pid -> next sequence
    markers: int = 0
    horizons: dict[int, int] = field(default_factory=dict)  # marker offset -> delete horizon

    def __post_init__(self) -> None:
        self.log = PartitionLog.open(self.storage, DIR, CONFIG, self.now)

    def restart(self) -> None:
        self.log.close()
        self.log = PartitionLog.open(self.storage, DIR, CONFIG, self.now)

    @property
    def index(self) -> list[AbortedTxn]:
        return self.log.aborted_transactions(self.log.log_start_offset, self.end + 1)

    @property
    def end(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return min(self.ongoing.values(), default=self.end)

    def produce(self, pid: int | None, pairs: Sequence[tuple[bytes, bytes | None]]) -> int:
        records = [SimpleRecord(v, k, timestamp=self.now) for k, v in pairs]
        if pid is None:
            data = build_batch(records)
        else:
            seq = self.sequence.get(pid, 0)
            data = build_batch(
                records, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True
            )
            self.sequence[pid] = seq + len(records)
        base = self._append(data)
        txn = None
        if pid is not None:
            self.ongoing.setdefault(pid, base)
            txn = (pid, self.txn_number.get(pid, 0))
        self.written += [Written(base + i, k, v, txn) for i, (k, v) in enumerate(pairs)]
        return base

    def end_txn(self, pid: int, commit: bool) -> int:
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        marker = build_batch(
            [control_record(kind, b"\0\0\0\0\0\7")],
            producer_id=pid,
            producer_epoch=0,
            transactional=True,
            control=True,
            now_ms=self.now,
        )
        offset = self.end
        first = self.ongoing.pop(pid, offset)
        entries = [] if commit else [AbortedTxn(pid, first, offset, self.last_stable_offset)]
        assert self._append(marker, entries) == offset
        number = self.txn_number.get(pid, 0)
        self.outcome[(pid, number)] = commit
        self.txn_number[pid] = number + 1
        self.markers += 1
        return offset

    def _append(self, data: bytes, aborted: Sequence[AbortedTxn] = ()) -> int:
        appended = self.log.append(
            [memoryview(data)], leader_epoch=0, now_ms=self.now, aborted_txns=aborted
        )
        return appended.base_offset

    def clean(self, *, force: bool = True) -> CleanResult | None:
        """One pass, as the replica manager asks for it: below the LSO."""
        lso = self.last_stable_offset
        old_batches, old_index = self.batches(), self.index
        result = self.log.clean(self.now, lso, force=force)
        if result is None:
            return None
        assert result.end_offset <= lso, "cleaned above the LSO"
        # The swap writes the kept entries before it commits (log.py): an entry may go only
        # if the old segments hold no data of its transaction either.
        new_index = set(self.index)
        for e in old_index:
            if result.first_offset <= e.last_offset < result.end_offset and e not in new_index:
                assert not any(
                    b.producer_id == e.producer_id
                    and b.is_transactional
                    and not b.is_control
                    and e.first_offset <= b.base_offset <= e.last_offset
                    for b in old_batches
                ), f"{e} dropped while the old segments held its data"
        return result

    def batches(self) -> list[RecordBatch]:
        return parse(read_all(self.log))

    def read_committed(self) -> list[tuple[int, bytes | None, bytes | None]]:
        """(offset, key, value) as a read_committed consumer from the log start sees them:
        up to the LSO, skipping aborted transactions as the fetch's aborted list says."""
        lso = self.last_stable_offset
        pending = sorted(self.index, key=lambda e: e.first_offset)
        aborted_producers: set[int] = set()
        seen = []
        for batch in self.batches():
            if batch.base_offset >= lso:
                break
            while pending and pending[0].first_offset <= batch.last_offset:
                aborted_producers.add(pending.pop(0).producer_id)
            if batch.is_control:
                for record in batch.records():
                    if control_record_type(record) == ControlRecordType.ABORT:
                        aborted_producers.discard(batch.producer_id)
                continue
            if batch.is_transactional and batch.producer_id in aborted_producers:
                continue
            seen += [(r.offset, r.key, r.value) for r in batch.records()]
        return seen

    def expected_committed(self) -> dict[bytes, bytes]:
        """Key -> latest committed value below the LSO (a tombstone deletes)."""
        lso = self.last_stable_offset
        out: dict[bytes, bytes] = {}
        for w in self.written:
            if w.offset >= lso or (w.txn is not None and not self.outcome.get(w.txn, False)):
                continue
            if w.value is None:
                out.pop(w.key, None)
            else:
                out[w.key] = w.value
        return out

    def check(self) -> None:
        """Every invariant a pass must keep."""
        batches = self.batches()
        offsets = [b.base_offset for b in batches]
        assert offsets == sorted(set(offsets)), "batches out of order"
        for a, b in itertools.pairwise(batches):
            assert a.last_offset < b.base_offset
        by_offset = {w.offset: w for w in self.written}
        seen = self.read_committed()
        state: dict[bytes, bytes] = {}
        for offset, key, value in seen:
            w = by_offset[offset]
            assert (w.key, w.value) == (key, value), f"record at {offset} changed"
            assert w.txn is None or self.outcome.get(w.txn), f"aborted record at {offset} read"
            assert key is not None
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
        assert state == self.expected_committed()
        self._check_no_data_without_marker(batches)
        markers = {b.base_offset: b for b in batches if b.is_control and b.records_count}
        for offset, horizon in self.horizons.items():
            assert offset in markers or self.now >= horizon, f"marker {offset} went early"
        for offset, marker in markers.items():
            if has_delete_horizon(marker):
                self.horizons.setdefault(offset, marker.base_timestamp)
        self._check_index(batches)
        self._check_sequences(batches)

    def _check_index(self, batches: list[RecordBatch]) -> None:
        """Every index entry still has its ABORT marker; every ABORT marker with data of its
        transaction left has its entry."""
        index = self.index
        entries = {e.last_offset: e for e in index}
        assert len(entries) == len(index)
        data_since_marker: dict[int, int] = {}  # pid -> data batches since its last marker
        for batch in batches:
            pid = batch.producer_id
            if batch.is_control and batch.records_count:
                data = data_since_marker.pop(pid, 0)
                kind = control_record_type(batch.records()[0])
                if kind == ControlRecordType.ABORT and data:
                    assert batch.base_offset in entries, f"abort at {batch.base_offset} unindexed"
                entry = entries.pop(batch.base_offset, None)
                assert entry is None or (kind, entry.producer_id) == (ControlRecordType.ABORT, pid)
            elif batch.is_transactional and not batch.is_control:
                data_since_marker[pid] = data_since_marker.get(pid, 0) + 1
        assert not entries, f"index entries without their marker: {entries}"

    def _check_sequences(self, batches: list[RecordBatch]) -> None:
        """Producer state is rebuilt from the batch headers: a producer with any batch with
        sequences left must end at the sequence it last wrote (or its next batch would be out
        of order after a restart)."""
        last: dict[int, int] = {}
        for batch in batches:
            if batch.producer_id != NO_PRODUCER_ID and batch.base_sequence >= 0:
                last[batch.producer_id] = batch.last_sequence
        assert last == {pid: self.sequence[pid] - 1 for pid in last}

    def _check_no_data_without_marker(self, batches: list[RecordBatch]) -> None:
        """Producer state is rebuilt from the log: a decided transaction's data batch must
        still be followed by its producer's marker, or it would look open for ever."""
        open_data: dict[int, int] = {}  # pid -> first data batch after its last marker
        for batch in batches:
            if batch.is_control and batch.records_count:
                open_data.pop(batch.producer_id, None)
            elif batch.is_transactional and not batch.is_control:
                open_data.setdefault(batch.producer_id, batch.base_offset)
        assert open_data == self.ongoing, "transactional data without its marker"


def test_aborted_data_goes_and_does_not_supersede_a_committed_value() -> None:
    t = TxnLog()
    t.produce(None, [(b"a", b"a0"), (b"b", b"b0")])
    t.produce(7, [(b"a", b"a-aborted"), (b"c", b"c-aborted")])
    t.end_txn(7, commit=False)
    t.produce(8, [(b"b", b"b1")])
    t.end_txn(8, commit=True)
    while t.log.segments < 3:
        t.produce(None, [(b"filler", b"x" * 40)])
    result = t.clean()
    assert result is not None and result.aborted_records_removed == 2
    t.check()
    values = {k: v for _, k, v in t.read_committed()}
    assert values[b"a"] == b"a0" and values[b"b"] == b"b1" and b"c" not in values
    everything = [r.value for b in t.batches() if not b.is_control for r in b.records()]
    assert b"a-aborted" not in everything and b"c-aborted" not in everything


def test_an_abort_marker_outlives_its_data_by_one_pass_then_delete_retention() -> None:
    t = TxnLog()
    t.produce(7, [(b"a", b"aborted")])
    marker = t.end_txn(7, commit=False)
    while t.log.segments < 3:
        t.produce(None, [(b"filler", b"x" * 40)])

    def marker_batch() -> RecordBatch | None:
        return next((b for b in t.batches() if b.base_offset == marker), None)

    t.clean()  # the data goes; the marker stays with its index entry (data were read)
    kept = marker_batch()
    assert kept is not None and kept.records_count == 1 and not has_delete_horizon(kept)
    assert [e.last_offset for e in t.index] == [marker]
    t.check()
    t.now += 1_000
    t.clean()  # no data left: stamped with a delete horizon, and its index entry goes
    kept = marker_batch()
    assert kept is not None and has_delete_horizon(kept)
    assert kept.base_timestamp == t.now + DR_MS
    assert t.index == []
    t.check()
    t.now += DR_MS - 1
    t.clean()
    assert marker_batch() is not None, "removed before delete.retention.ms"
    t.now += 1
    result = t.clean()
    assert result is not None and result.markers_removed == 1
    gone = marker_batch()
    assert gone is None or gone.records_count == 0
    t.check()


def test_a_commit_marker_stays_while_its_data_do() -> None:
    t = TxnLog()
    t.produce(7, [(b"a", b"committed")])
    marker = t.end_txn(7, commit=True)
    while t.log.segments < 3:
        t.produce(None, [(b"filler", b"x" * 40)])
    for _ in range(3):
        t.now += 2 * DR_MS
        t.clean()
        kept = next(b for b in t.batches() if b.base_offset == marker)
        assert kept.records_count == 1 and not has_delete_horizon(kept)
        t.check()
    # Superseded by a later value: the data go, then the marker.
    t.produce(None, [(b"a", b"newer")])
    while t.log.segments < 6:
        t.produce(None, [(b"filler", b"y" * 40)])
    t.clean()
    t.now += 1
    t.clean()
    stamped = next(b for b in t.batches() if b.base_offset == marker)
    assert has_delete_horizon(stamped)
    t.now += DR_MS
    t.clean()
    assert all(b.base_offset != marker or b.records_count == 0 for b in t.batches())
    t.check()


def test_nothing_at_or_above_the_last_stable_offset_is_cleaned() -> None:
    t = TxnLog()
    t.produce(None, [(b"a", b"a0")])
    t.produce(7, [(b"a", b"open"), (b"b", b"open")])  # never ended here
    for i in range(40):
        t.produce(None, [(b"a", b"a%d" % (i + 1))])
    assert t.log.segments >= 3
    lso = t.last_stable_offset
    before = [bytes(b.buf) for b in t.batches() if b.base_offset >= lso]
    t.clean()
    after = [bytes(b.buf) for b in t.batches() if b.base_offset >= lso]
    assert before == after
    assert t.log.first_dirty_offset <= lso


def test_kept_transactional_batches_keep_their_producer_fields() -> None:
    t = TxnLog()
    t.produce(7, [(b"a", b"old"), (b"b", b"stays")])
    t.end_txn(7, commit=True)
    t.produce(None, [(b"a", b"new")])
    while t.log.segments < 3:
        t.produce(None, [(b"filler", b"x" * 40)])
    t.clean()
    rewritten = next(b for b in t.batches() if b.base_offset == 0)
    assert [r.key for r in rewritten.records()] == [b"b"]
    assert rewritten.is_transactional and not rewritten.is_control
    assert (rewritten.producer_id, rewritten.producer_epoch, rewritten.base_sequence) == (7, 0, 0)
    assert rewritten.last_offset == 1
    t.check()


# --- random logs ------------------------------------------------------------------------------

KEYS = [b"k0", b"k1", b"k2", b"k3"]
pairs = st.lists(
    st.tuples(st.sampled_from(KEYS), st.none() | st.binary(min_size=1, max_size=30)),
    min_size=1,
    max_size=4,
)
step = st.one_of(
    st.tuples(st.just("produce"), st.sampled_from([None, 1, 2, 3]), pairs),
    st.tuples(st.just("end"), st.sampled_from([1, 2, 3]), st.booleans()),
    st.tuples(st.just("clean"), st.integers(0, 2 * DR_MS), st.booleans()),
    st.tuples(st.just("restart"), st.none(), st.none()),
)


@settings(deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=100), finish=st.booleans())
def test_read_committed_sees_the_latest_committed_value_per_key(
    steps: list[tuple[str, int | None, object]], finish: bool
) -> None:
    """Random logs of transactional and plain batches, markers and tombstones, cleaned at
    random times: after every pass a read_committed reader sees exactly the latest committed
    value of each key and no aborted record; offsets stay in order; nothing at or above the
    LSO changes; no decided transaction's data lose their marker.  Finally, with every
    transaction ended and time past delete.retention.ms, markers whose transaction has no
    data left are gone from the cleaned range."""
    t = TxnLog()
    for kind, who, arg in steps:
        if kind == "produce":
            pid = None if who is None else 100 + who
            t.produce(pid, arg)  # type: ignore[arg-type]
        elif kind == "end":
            assert who is not None
            t.end_txn(100 + who, commit=bool(arg))
        elif kind == "restart":
            t.restart()
            t.check()
        else:
            t.now += int(who or 0)
            lso = t.last_stable_offset
            frozen = [bytes(b.buf) for b in t.batches() if b.base_offset >= lso]
            result = t.clean(force=bool(arg))
            _note(result)
            assert [bytes(b.buf) for b in t.batches() if b.base_offset >= lso] == frozen
            t.check()
    if not finish:
        return
    for pid in sorted(t.ongoing):
        t.end_txn(pid, commit=pid % 2 == 0)
    for _ in range(3):  # enough segments that the markers are below the active one
        t.produce(None, [(b"filler", b"z" * 300)])
    ends = []
    for _ in range(4):
        t.now += DR_MS + 1
        result = t.clean()
        _note(result)
        ends.append(result.end_offset if result else 0)
        t.check()
    _check_markers_gone(t, max(ends))


def _note(result: CleanResult | None) -> None:
    if result is not None:
        event(f"a pass removed aborted records: {result.aborted_records_removed > 0}")
        event(f"a pass removed markers: {result.markers_removed > 0}")


def _check_markers_gone(t: TxnLog, cleaned_end: int) -> None:
    """Below ``cleaned_end``, a marker with records is one whose transaction still has data
    (a data batch of its producer after its previous marker)."""
    last_data: dict[int, int] = {}
    previous_marker: dict[int, int] = {}
    for batch in t.batches():
        if batch.base_offset >= cleaned_end:
            break
        pid = batch.producer_id
        if pid == NO_PRODUCER_ID:
            continue
        if batch.is_control and batch.records_count:
            has_data = last_data.get(pid, -1) > previous_marker.get(pid, -1)
            assert has_data, f"marker at {batch.base_offset} outlived its transaction's data"
            previous_marker[pid] = batch.base_offset
        elif not batch.is_control:
            last_data[pid] = batch.base_offset
