"""record_filter.py: scanning, filtering and rebuilding one batch, against kafka_protocol's own
record decoder, for random records, every codec, LogAppendTime, and delete horizons."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.log.record_filter import (
    empty_batch,
    has_delete_horizon,
    rebuild_batch,
    record_timestamp,
    scan_records,
)
from kafka_protocol.compression import Compression
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch

T0 = 1_700_000_000_000

records = st.lists(
    st.builds(
        SimpleRecord,
        value=st.none() | st.binary(max_size=300),
        key=st.none() | st.binary(max_size=200),
        headers=st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5))),
        timestamp=st.integers(T0 - 10**7, T0 + 10**7),
    ),
    min_size=1,
    max_size=30,
)


def batch_of(
    recs: list[SimpleRecord], codec: Compression, *, log_append_time: bool = False
) -> RecordBatch:
    data = build_batch(
        recs,
        base_offset=1000,
        compression=codec,
        producer_id=7,
        producer_epoch=3,
        base_sequence=40,
        partition_leader_epoch=5,
        log_append_time=log_append_time,
    )
    return RecordBatch(memoryview(data)).validate()


@given(recs=records, codec=st.sampled_from(list(Compression)), data=st.data())
def test_scan_filter_and_rebuild_agree_with_the_decoder(
    recs: list[SimpleRecord], codec: Compression, data: st.DataObject
) -> None:
    batch = batch_of(recs, codec)
    section = batch.records_section()
    scanned = scan_records(batch, section)
    decoded = batch.records()
    assert [(s.offset, s.key, s.tombstone, record_timestamp(batch, s)) for s in scanned] == [
        (r.offset, r.key, r.value is None, r.timestamp) for r in decoded
    ]
    keep = data.draw(st.lists(st.booleans(), min_size=len(recs), max_size=len(recs)))
    if not any(keep):
        keep[data.draw(st.integers(0, len(recs) - 1))] = True
    kept = [s for s, k in zip(scanned, keep, strict=True) if k]
    horizon = data.draw(st.none() | st.integers(T0, T0 + 10**9), label="delete horizon")
    rebuilt = RecordBatch(
        memoryview(rebuild_batch(batch, section, kept, delete_horizon_ms=horizon))
    ).validate()
    assert rebuilt.records() == [r for r, k in zip(decoded, keep, strict=True) if k]
    same = ("base_offset", "last_offset_delta", "partition_leader_epoch", "producer_id")
    assert all(getattr(rebuilt, f) == getattr(batch, f) for f in same)
    assert (rebuilt.producer_epoch, rebuilt.base_sequence) == (3, 40)
    assert rebuilt.compression is codec and rebuilt.records_count == len(kept)
    assert rebuilt.max_timestamp == max(r.timestamp for r in rebuilt.records())
    assert has_delete_horizon(rebuilt) == (horizon is not None)
    if horizon is not None:
        assert rebuilt.base_timestamp == horizon


def test_log_append_time_batches_keep_their_timestamp() -> None:
    recs = [SimpleRecord(b"v", b"k%d" % i, timestamp=T0 + i) for i in range(5)]
    batch = batch_of(recs, Compression.NONE, log_append_time=True)
    section = batch.records_section()
    kept = scan_records(batch, section)[1:3]
    rebuilt = RecordBatch(memoryview(rebuild_batch(batch, section, kept))).validate()
    assert rebuilt.is_log_append_time and rebuilt.max_timestamp == batch.max_timestamp
    assert [r.timestamp for r in rebuilt.records()] == [batch.max_timestamp] * 2


def test_an_empty_batch_keeps_the_header_that_matters() -> None:
    recs = [SimpleRecord(b"v", b"k", timestamp=T0 + i) for i in range(4)]
    batch = batch_of(recs, Compression.ZSTD)
    empty = RecordBatch(memoryview(empty_batch(batch))).validate()
    assert empty.records() == [] and empty.is_control and not empty.is_transactional
    assert (empty.base_offset, empty.last_offset, empty.partition_leader_epoch) == (1000, 1003, 5)
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (7, 3, 40)
    assert empty.last_sequence == batch.last_sequence
    assert empty.max_timestamp == batch.max_timestamp
    assert empty.compression is Compression.NONE


@pytest.mark.parametrize("cut", [1, 2, 5, 11])
def test_a_mangled_records_section_is_refused(cut: int) -> None:
    recs = [SimpleRecord(b"value" * 30, b"key" * 50, timestamp=T0 + i) for i in range(3)]
    batch = batch_of(recs, Compression.NONE)
    section = batch.records_section()
    with pytest.raises(CorruptRecordError):
        scan_records(batch, section[:-cut])
    with pytest.raises(CorruptRecordError):
        scan_records(batch, section + b"\x00" * cut)
