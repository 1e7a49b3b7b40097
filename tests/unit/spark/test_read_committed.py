"""read_committed on the reading side: synthetic partition logs of interleaved transactions
(committed, aborted, still open), plain and idempotent batches and markers, fetched from any
offset up to the last stable offset with the aborted transactions a broker names; the filter
and ``to_arrow`` must show exactly the records of committed transactions and
non-transactional batches, in the fetched range, skipping batch by batch."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_protocol.compression import Compression
from kafka_protocol.record_batch import (
    ControlRecordType,
    SimpleRecord,
    build_batch,
    control_record,
    iter_batches,
)
from spark_source.arrow_records import to_arrow
from spark_source.read_committed import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    AbortedBatchFilter,
    AbortedTransaction,
    parse_isolation_level,
)

PLAIN = -1  # no producer id
IDEMPOTENT = 90  # a producer id that never writes transactionally
TXN_PRODUCERS = (1, 2)
MARKER_VALUE = b"\x00\x00\x00\x00\x00\x07"  # version 0, coordinator epoch 7


@dataclass
class Txn:
    producer_id: int
    first_offset: int
    outcome: str = "open"  # "open", "commit" or "abort"
    last_offset: int = -1  # the marker's offset


@dataclass
class Log:
    """A partition's batches and what a broker knows about its transactions."""

    batches: list[tuple[int, bytes]] = field(default_factory=list)  # (base offset, bytes)
    visible: list[int] = field(default_factory=list)  # offsets a read_committed reader sees
    txns: list[Txn] = field(default_factory=list)
    end: int = 0

    @property
    def last_stable_offset(self) -> int:
        return min((t.first_offset for t in self.txns if t.outcome == "open"), default=self.end)

    def aborted_for_fetch(self, fetch_offset: int, upper_bound: int) -> list[AbortedTransaction]:
        """Kafka's collectAbortedTransactions: aborted, last offset >= the fetch offset, first
        offset below the upper bound."""
        return [
            AbortedTransaction(t.producer_id, t.first_offset)
            for t in self.txns
            if t.outcome == "abort"
            and t.last_offset >= fetch_offset
            and t.first_offset < upper_bound
        ]

    def chunk(self, fetch_offset: int, upper: int) -> bytes:
        """The whole batches a fetch from ``fetch_offset`` returns below ``upper``."""
        out = b""
        for base, data in self.batches:
            batch = next(iter_batches(data))
            if batch.base_offset + batch.last_offset_delta >= fetch_offset and base < upper:
                out += data
        return out


Step = tuple[str, int, int]  # (what, producer, records)


@st.composite
def logs(draw: st.DrawFn) -> Log:
    steps: list[Step] = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["data", "data", "commit", "abort", "abort"]),
                st.sampled_from((*TXN_PRODUCERS, *TXN_PRODUCERS, PLAIN, IDEMPOTENT)),
                st.integers(1, 4),
            ),
            max_size=40,
        )
    )
    compression = draw(st.sampled_from([Compression.NONE, Compression.LZ4]))
    log = Log()
    open_txns: dict[int, Txn] = {}
    pending: dict[int, list[int]] = {}  # offsets of each open transaction's records
    for what, pid, n in steps:
        transactional = pid in TXN_PRODUCERS
        if what != "data" and not transactional:
            continue
        if what == "data":
            records = [SimpleRecord(value=b"v%d" % (log.end + i)) for i in range(n)]
            offsets = list(range(log.end, log.end + n))
            if transactional:
                txn = open_txns.get(pid)
                if txn is None:
                    txn = open_txns[pid] = Txn(pid, log.end)
                    log.txns.append(txn)
                pending.setdefault(pid, []).extend(offsets)
            else:
                log.visible.extend(offsets)
            data = build_batch(
                records,
                base_offset=log.end,
                compression=compression,
                producer_id=pid,
                producer_epoch=0 if pid >= 0 else -1,
                base_sequence=0 if pid >= 0 else -1,
                transactional=transactional,
            )
        else:  # a marker, also for a producer with no open transaction (a retried EndTxn)
            kind = ControlRecordType.COMMIT if what == "commit" else ControlRecordType.ABORT
            data = build_batch(
                [control_record(kind, MARKER_VALUE)],
                base_offset=log.end,
                producer_id=pid,
                producer_epoch=0,
                transactional=True,
                control=True,
            )
            txn = open_txns.pop(pid, None)
            if txn is not None:
                txn.outcome, txn.last_offset = what, log.end
                if what == "commit":
                    log.visible.extend(pending.pop(pid, []))
                pending.pop(pid, None)
            n = 1
        log.batches.append((log.end, data))
        log.end += n
    log.visible.sort()
    return log


def filtered_offsets(log: Log, fetch_offset: int, extra: bool) -> tuple[list[int], int]:
    """Offsets the filter keeps in a fetch from ``fetch_offset`` (the whole batches a broker
    returns up to the last stable offset), and the chunk's upper bound."""
    upper = log.last_stable_offset
    aborted = log.aborted_for_fetch(fetch_offset, upper)
    if extra:  # a broker may name more (its upper bound is a segment's): they change nothing
        aborted = log.aborted_for_fetch(fetch_offset, 2**62)
    keep = AbortedBatchFilter(reversed(aborted))
    kept = []
    for batch in iter_batches(log.chunk(fetch_offset, upper)):
        if keep.keep(batch):
            kept += [o for o in range(batch.base_offset, batch.next_offset) if o >= fetch_offset]
    return kept, upper


# cheap examples: more of them than the profile's, to meet the rarer interleavings
MANY = settings(max_examples=200)


@MANY
@given(log=logs(), where=st.floats(0, 1), extra=st.booleans())
def test_the_filter_keeps_exactly_the_committed_records(
    log: Log, where: float, extra: bool
) -> None:
    fetch_offset = int(where * log.end)
    kept, upper = filtered_offsets(log, fetch_offset, extra)
    assert kept == [o for o in log.visible if fetch_offset <= o < upper]


@MANY
@given(log=logs(), where=st.floats(0, 1), to=st.floats(0, 1))
def test_to_arrow_skips_aborted_batches_in_the_range(log: Log, where: float, to: float) -> None:
    upper = log.last_stable_offset
    start = int(where * upper)
    end = start + int(to * (upper - start))
    chunk = log.chunk(start, upper)
    aborted = log.aborted_for_fetch(start, upper)
    rows = [b for b in to_arrow(chunk, "t", 0, start, end, False, aborted=aborted)]
    got = [o for b in rows for o in b.column("offset").to_pylist()]
    assert got == [o for o in log.visible if start <= o < end]
    values = [v for b in rows for v in b.column("value").to_pylist()]
    assert values == [b"v%d" % o for o in got]


@given(log=logs())
def test_read_uncommitted_shows_every_data_record(log: Log) -> None:
    rows = list(to_arrow(log.chunk(0, log.end), "t", 0, 0, log.end, False))
    got = [o for b in rows for o in b.column("offset").to_pylist()]
    data = [
        o
        for _, d in log.batches
        for b in iter_batches(d)
        if not b.is_control
        for o in range(b.base_offset, b.next_offset)
    ]
    assert got == data


def test_an_abort_marker_ends_the_skipping_and_a_commit_does_not() -> None:
    def data(offset: int, pid: int) -> bytes:
        return build_batch(
            [SimpleRecord(value=b"x")],
            base_offset=offset,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=offset,
            transactional=True,
        )

    def marker(offset: int, pid: int, kind: ControlRecordType) -> bytes:
        return build_batch(
            [control_record(kind, MARKER_VALUE)],
            base_offset=offset,
            producer_id=pid,
            producer_epoch=0,
            transactional=True,
            control=True,
        )

    chunk = (
        data(0, 1)
        + marker(1, 1, ControlRecordType.COMMIT)  # a commit marker does not end aborting
        + data(2, 1)
        + marker(3, 1, ControlRecordType.ABORT)
        + data(4, 1)  # a new, committed transaction of the same producer
        + marker(5, 1, ControlRecordType.COMMIT)
    )
    keep = AbortedBatchFilter([AbortedTransaction(1, 0)])
    assert [keep.keep(b) for b in iter_batches(chunk)] == [False] * 4 + [True, False]


@pytest.mark.parametrize(
    ("text", "level"),
    [("read_committed", READ_COMMITTED), (" READ_UNCOMMITTED ", READ_UNCOMMITTED)],
)
def test_isolation_level_names(text: str, level: int) -> None:
    assert parse_isolation_level(text) == level


def test_an_unknown_isolation_level_is_refused() -> None:
    with pytest.raises(ValueError, match="read_uncommitted or read_committed"):
        parse_isolation_level("serializable")


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
def test_abort_markers_are_recognised_read_in_place_or_decoded(compression: Compression) -> None:
    """Markers are read in place when uncompressed, through the record decoder otherwise."""
    data = build_batch(
        [SimpleRecord(value=b"x")],
        base_offset=0,
        producer_id=4,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    for offset, kind in ((1, ControlRecordType.COMMIT), (2, ControlRecordType.ABORT)):
        data += build_batch(
            [control_record(kind, MARKER_VALUE)],
            base_offset=offset,
            compression=compression,
            producer_id=4,
            producer_epoch=0,
            transactional=True,
            control=True,
        )
    data += build_batch(
        [SimpleRecord(value=b"y")],
        base_offset=3,
        producer_id=4,
        producer_epoch=0,
        base_sequence=1,
        transactional=True,
    )
    keep = AbortedBatchFilter([AbortedTransaction(4, 0)])
    assert [keep.keep(b) for b in iter_batches(data)] == [False, False, False, True]
