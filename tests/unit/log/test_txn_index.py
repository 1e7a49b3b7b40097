"""The aborted-transaction index (``.txnindex``): Kafka's 34-byte entries on disk, one file per
segment holding ABORT markers, cut by truncation, deleted with its segment, kept through a
cleaner swap, and rebuilt from the log by recovery after an unclean shutdown."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import struct
import uuid
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from log_helpers import T0, make_batch, open_log, views

from broker.log import LogConfig
from broker.log.txn_index import ENTRY_BYTES, AbortedTxn, TransactionIndex, marker_value
from broker.replica_manager import Partition, Registration, ReplicaManager
from broker.storage import FileStorage, MemoryStorage
from kafka_protocol.record_batch import (
    ControlRecordType,
    RecordBatch,
    SimpleRecord,
    build_batch,
    control_record,
)

INT64 = 2**63 - 1


@st.composite
def aborted_txns(draw: st.DrawFn) -> list[AbortedTxn]:
    """Entries as a segment holds them: markers in increasing offset order."""
    out = []
    last = draw(st.integers(0, 1000))
    for _ in range(draw(st.integers(0, 8))):
        last += draw(st.integers(1, 2**40))
        first = draw(st.integers(0, last))
        out.append(
            AbortedTxn(draw(st.integers(0, INT64)), first, last, draw(st.integers(0, INT64)))
        )
    return out


@given(aborted_txns())
def test_entries_round_trip_through_the_file_in_kafkas_layout(entries: list[AbortedTxn]) -> None:
    storage = MemoryStorage()
    storage.makedirs("/d")
    index = TransactionIndex(storage, "/d/00000000000000000000.txnindex")
    for txn in entries:
        index.append(txn)
    data = storage.open(index.path).read(0, 1 << 20) if entries else b""
    assert data == b"".join(struct.pack(">hqqqq", 0, *t) for t in entries)
    assert len(data) == ENTRY_BYTES * len(entries)
    assert TransactionIndex(storage, index.path).entries == entries


def test_a_torn_entry_is_cut_and_truncation_drops_later_markers() -> None:
    storage = MemoryStorage()
    storage.makedirs("/d")
    path = "/d/00000000000000000000.txnindex"
    index = TransactionIndex(storage, path)
    entries = [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10), AbortedTxn(1, 10, 12, 13)]
    for txn in entries:
        index.append(txn)
    storage.open(path).append([b"\x00\x00\x01"])  # a crash mid-write
    reopened = TransactionIndex(storage, path)
    assert reopened.entries == entries
    assert storage.open(path).size() == 3 * ENTRY_BYTES
    reopened.truncate_to(9)
    assert TransactionIndex(storage, path).entries == entries[:1]
    assert reopened.collect(5, 6) == ([entries[0]], True)  # its LSO 6 reaches the bound
    assert reopened.collect(6, 100) == ([], False)


def _marker_batch(pid: int, offset: int) -> bytes:
    return build_batch(
        [control_record(ControlRecordType.ABORT, marker_value(0))],
        base_offset=offset,
        producer_id=pid,
        producer_epoch=0,
        transactional=True,
        control=True,
    )


def test_each_segment_indexes_its_markers_and_goes_with_them() -> None:
    storage = MemoryStorage()
    log = open_log(storage, LogConfig(segment_bytes=300, retention_bytes=1))
    expected = []
    for i in range(6):  # data at 2i, its ABORT marker at 2i + 1
        log.append(views(make_batch()), leader_epoch=0, now_ms=T0)
        txn = AbortedTxn(i, 2 * i, 2 * i + 1, 2 * i + 2)
        log.append(views(_marker_batch(i, 0)), leader_epoch=0, now_ms=T0, aborted_txns=[txn])
        expected.append(txn)
    assert log.segments > 2
    assert log.aborted_transactions(0, 12) == expected
    names = storage.listdir(log.directory)
    assert sum(n.endswith(".txnindex") for n in names) == log.segments
    assert log.aborted_transactions(7, 9) == expected[3:5]
    log.truncate_to(9)  # drops the marker at 9 (and the data at 10, 11)
    assert log.aborted_transactions(0, 12) == expected[:4]
    deleted = log.apply_retention(T0)
    assert deleted
    remaining = [t for t in expected[:4] if t.last_offset >= log.log_start_offset]
    assert log.aborted_transactions(0, 12) == remaining
    txn_files = {n for n in storage.listdir(log.directory) if n.endswith(".txnindex")}
    assert txn_files == {f"{b:020d}.txnindex" for b in log.segment_base_offsets()}


# --- recovery, through the replica manager that owns producer state -------------------------

TOPIC_ID = uuid.uuid4()


def _open(rm: ReplicaManager) -> Partition:
    part = rm.open_partition(
        "t",
        0,
        TOPIC_ID,
        LogConfig(segment_bytes=1000),
        max_message_bytes=1 << 20,
        registration=Registration.sole_leader(1),
    )
    assert part is not None
    return part


def _write_transactions(rm: ReplicaManager, part: Partition) -> None:
    """Three transactions over several segments: 7 aborted, 8 committed, 9 aborted."""

    async def main() -> None:
        for pid in (7, 8, 9):
            for seq in range(3):
                data = build_batch(
                    [SimpleRecord(os.urandom(100))],
                    producer_id=pid,
                    producer_epoch=0,
                    base_sequence=seq,
                    transactional=True,
                )
                rm.append_nowait(part, RecordBatch(memoryview(data)), acks=1)
            await asyncio.sleep(0)
        for pid in (7, 8, 9):
            rm.append_marker(part, pid, 0, coordinator_epoch=1, commit=pid == 8)
        await asyncio.sleep(0)

    asyncio.run(main())


def test_recovery_rebuilds_the_index_of_the_segments_it_revalidates(tmp_path: Path) -> None:
    rm = ReplicaManager(FileStorage(), tmp_path, broker_id=1)
    part = _open(rm)
    _write_transactions(rm, part)
    before = part.log.aborted_transactions(0, part.log_end_offset)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in before] == [
        (7, 0, 9),
        (9, 6, 11),
    ]
    assert part.log.segments > 1
    assert max(part.log.segment_base_offsets()) <= 9, "the markers are in the active segment"
    directory = tmp_path / "t-0"
    for name in os.listdir(directory):  # lose every index; no clean shutdown
        if name.endswith(".txnindex"):
            os.remove(directory / name)
    part.log.flush()
    rebuilt = _open(ReplicaManager(FileStorage(), tmp_path, broker_id=1))
    assert rebuilt.log.aborted_transactions(0, rebuilt.log_end_offset) == before
    assert rebuilt.producers.ongoing_transactions() == []


def test_a_cut_log_tail_takes_its_markers_and_their_entries(tmp_path: Path) -> None:
    rm = ReplicaManager(FileStorage(), tmp_path, broker_id=1)
    part = _open(rm)
    _write_transactions(rm, part)
    part.log.flush()
    active = max(part.log.segment_base_offsets())
    segment = tmp_path / "t-0" / f"{active:020d}.log"
    size = segment.stat().st_size
    assert active <= 10, "the last two markers are in the active segment"
    with segment.open("r+b") as f:  # a crash tore the last marker (offset 11)
        f.truncate(size - 10)
    recovered = _open(ReplicaManager(FileStorage(), tmp_path, broker_id=1))
    assert recovered.log_end_offset == 11
    assert [
        (t.producer_id, t.first_offset, t.last_offset)
        for t in recovered.log.aborted_transactions(0, 11)
    ] == [(7, 0, 9)]
    assert recovered.producers.ongoing_transactions() == [(9, 0, 6)]


# --- the cleaner's segment swap -------------------------------------------------------------


def test_a_cleaner_swap_keeps_the_entries_of_the_segments_it_merges() -> None:
    storage = MemoryStorage()
    config = LogConfig(segment_bytes=300, cleanup_policy=("compact",), file_delete_delay_ms=0)
    log = open_log(storage, config)
    expected = []
    for i in range(8):  # a transactional record with its own key, then its ABORT marker
        data = build_batch(
            [SimpleRecord(value=b"v", key=b"k%d" % i, timestamp=T0)],
            producer_id=i,
            producer_epoch=0,
            transactional=True,
        )
        log.append([memoryview(data)], leader_epoch=0, now_ms=T0)
        txn = AbortedTxn(i, 2 * i, 2 * i + 1, 2 * i + 2)
        log.append(views(_marker_batch(i, 0)), leader_epoch=0, now_ms=T0, aborted_txns=[txn])
        expected.append(txn)
    segments_before = log.segments
    config = dataclasses.replace(config, segment_bytes=10_000)  # the cleaner may merge them
    log.update_config(config)
    result = log.clean(T0, log.log_end_offset, force=True)
    assert result is not None and log.segments < segments_before, "segments were merged"
    assert log.aborted_transactions(0, log.log_end_offset) == expected
    for base in log.segment_base_offsets():  # each entry in the segment holding its marker
        index = TransactionIndex(storage, f"{log.directory}/{base:020d}.txnindex")
        i = log.segment_base_offsets().index(base)
        bases = [*log.segment_base_offsets(), log.log_end_offset]
        assert all(bases[i] <= t.last_offset < bases[i + 1] for t in index.entries)
    log.close()
    assert open_log(storage, config).aborted_transactions(0, 16) == expected


def test_entries_beyond_their_segment_are_dropped_at_open() -> None:
    """A crash after the merged index was written but before the swap committed leaves the
    first old segment's index with its neighbours' entries: the open drops them."""
    storage = MemoryStorage()
    config = LogConfig(segment_bytes=300)
    log = open_log(storage, config)
    for i in range(6):
        log.append(views(make_batch()), leader_epoch=0, now_ms=T0)
        txn = AbortedTxn(i, 2 * i, 2 * i + 1, 2 * i + 2)
        log.append(views(_marker_batch(i, 0)), leader_epoch=0, now_ms=T0, aborted_txns=[txn])
    entries = log.aborted_transactions(0, 12)
    log.close()
    first = TransactionIndex(storage, f"{log.directory}/{0:020d}.txnindex")
    first.rewrite(entries)  # as the merge before a swap does
    assert open_log(storage, config).aborted_transactions(0, 100) == entries  # once each
