"""Log compaction (cleaner.py, record_filter.py, segment_swap.py), one rule per test.

The helpers at the top are shared with ``test_log_cleaner_model.py`` (the property test) and
``test_log_cleaner_crash.py`` (crashes at every step of the swap).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from log_helpers import (
    DIR,
    T0,
    flip_byte,
    open_log,
    parse,
    read_all,
    reference_epochs,
    stored_batches,
)

from broker.log import (
    EARLIEST_TIMESTAMP,
    MAX_TIMESTAMP,
    KafkaStorageError,
    LogConfig,
    PartitionLog,
)
from broker.log.cleaner import CLEANER_OFFSET_FILE
from broker.log.record_filter import has_delete_horizon
from broker.producer_state import BatchMetadata, ProducerStateManager
from broker.storage import FaultyStorage, FileStorage, MemoryStorage, Storage
from kafka_protocol.compression import Compression
from kafka_protocol.record_batch import (
    NO_PRODUCER_ID,
    ControlRecordType,
    Record,
    RecordBatch,
    SimpleRecord,
    build_batch,
    control_record,
    iter_batches,
)

DAY_MS = 86_400_000
COMPACT = LogConfig(
    segment_bytes=600,
    cleanup_policy=("compact",),
    file_delete_delay_ms=0,
    index_interval_bytes=100,
)

Pair = tuple[bytes | None, bytes | None]  # (key, value); a None value is a tombstone


def keyed_batch(
    pairs: Sequence[Pair],
    *,
    timestamp: int = T0,
    compression: Compression = Compression.NONE,
    headers: Sequence[tuple[str, bytes | None]] = (),
    producer: tuple[int, int, int] = (NO_PRODUCER_ID, -1, -1),  # id, epoch, base sequence
) -> bytes:
    records = [
        SimpleRecord(value=v, key=k, headers=headers, timestamp=timestamp + i)
        for i, (k, v) in enumerate(pairs)
    ]
    pid, epoch, seq = producer
    return build_batch(
        records, compression=compression, producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )


def append(
    log: PartitionLog, pairs: Sequence[Pair], *, epoch: int = 0, now: int = T0, **kwargs: object
) -> int:
    """Append one batch; its base offset."""
    batch = keyed_batch(pairs, **kwargs)  # type: ignore[arg-type]
    return log.append([memoryview(batch)], leader_epoch=epoch, now_ms=now).base_offset


def fill(log: PartitionLog, keys: int, rounds: int, *, now: int = T0) -> None:
    """``rounds`` values for each of ``keys`` keys, one record per batch."""
    for r in range(rounds):
        for k in range(keys):
            append(log, [(b"k%d" % k, b"v%d.%d" % (k, r))], timestamp=now, now=now)


def batches(log: PartitionLog) -> list[RecordBatch]:
    return parse(read_all(log))


def records(log: PartitionLog) -> list[Record]:
    return [r for b in batches(log) for r in b.records()]


def latest(recs: Sequence[Record]) -> dict[bytes | None, Record]:
    out: dict[bytes | None, Record] = {}
    for r in recs:
        out[r.key] = r
    return out


def segment_files(storage: MemoryStorage, directory: str = DIR) -> list[str]:
    prefix = directory + "/"
    return sorted(p[len(prefix) :] for p in storage.files if p.startswith(prefix))


def rebuild_producers(log: PartitionLog) -> ProducerStateManager:
    """What ``ReplicaManager._rebuild_producer_state`` does at open: replay batch headers."""
    producers = ProducerStateManager()
    for b in batches(log):
        if b.producer_id != NO_PRODUCER_ID and b.base_sequence >= 0:
            meta = BatchMetadata(
                b.base_sequence, b.last_sequence, b.base_offset, b.last_offset, b.max_timestamp
            )
            producers.record(b.producer_id, b.producer_epoch, meta, seen_ms=b.max_timestamp)
    return producers


# --- which records stay --------------------------------------------------------------------------


def test_the_latest_value_of_each_key_wins() -> None:
    storage = MemoryStorage()
    log = open_log(storage, COMPACT)
    fill(log, keys=5, rounds=6)
    before = records(log)
    end = log.log_end_offset
    result = log.clean(T0, end)
    assert result is not None
    active = log.segment_base_offsets()[-1]
    assert result.end_offset == active and result.next_dirty_offset == active
    expected = [r for r in before if r.offset >= active or latest(before[:active])[r.key] is r]
    assert records(log) == expected  # offsets, timestamps, keys, values as they were
    assert result.records_before == active and result.records_after == 5
    assert result.bytes_after < result.bytes_before and log.log_end_offset == end
    assert log.clean(T0, end) is None  # nothing dirty any more
    log.close()
    assert records(open_log(storage, COMPACT)) == expected


def test_headers_timestamps_and_offsets_are_preserved() -> None:
    log = open_log(MemoryStorage(), COMPACT)
    headers = [("trace", b"abc"), ("empty", None), ("utf8-é", b"")]
    for i in range(12):
        pairs = [(b"a", b"old"), (b"k%d" % i, b"x" * i), (b"b", b"old")]
        append(log, pairs, timestamp=T0 + 1000 * (i % 4), headers=headers)
    before = records(log)
    log.clean(T0, log.log_end_offset)
    after = records(log)
    assert after and set(map(repr, after)) <= set(map(repr, before))
    assert all(r.headers == headers for r in after)
    assert [r.offset for r in after] == sorted({r.offset for r in after})


def test_null_keys_are_kept() -> None:
    log = open_log(MemoryStorage(), COMPACT)
    for i in range(20):
        append(log, [(None, b"n%d" % i), (b"k", b"v%d" % i)])
    active = log.segment_base_offsets()[-1]
    log.clean(T0, log.log_end_offset)
    kept = [r for r in records(log) if r.offset < active]
    assert [r.value for r in kept if r.key is None] == [b"n%d" % i for i in range(active // 2)]
    assert [r.key for r in kept if r.key is not None] == [b"k"]


@pytest.mark.parametrize("codec", list(Compression))
def test_compressed_batches_are_filtered_and_recompressed(codec: Compression) -> None:
    log = open_log(MemoryStorage(), dataclasses.replace(COMPACT, segment_bytes=1500))
    for i in range(12):
        pairs = [(b"k%d" % (j % 3), b"value %d %d" % (i, j) * 5) for j in range(6)]
        append(log, pairs, compression=codec, timestamp=T0 + i * 10)
    before = records(log)
    active = log.segment_base_offsets()[-1]
    log.clean(T0, log.log_end_offset)
    cleaned = [b for b in batches(log) if b.last_offset < active and b.records_count]
    assert cleaned and all(b.compression is codec for b in cleaned)
    rewritten = [b for b in cleaned if b.records_count == 3]  # keys 0, 1, 2 of the last batch
    assert rewritten and all(b.last_offset_delta == 5 for b in rewritten)
    expected = [r for r in before if r.offset >= active or latest(before[:active])[r.key] is r]
    assert records(log) == expected


def test_the_active_segment_and_records_above_the_high_watermark_are_untouched() -> None:
    storage = MemoryStorage()
    log = open_log(storage, COMPACT)
    fill(log, keys=3, rounds=10)
    bases = log.segment_base_offsets()
    high_watermark = bases[3] + 2  # inside the fourth segment
    tail_before = read_all(log, bases[3])
    result = log.clean(T0, high_watermark)
    assert result is not None and result.end_offset == bases[3]
    assert read_all(log, bases[3]) == tail_before  # byte for byte
    assert log.segment_base_offsets()[-len(bases) + 3 :] == bases[3:]
    assert log.prepare_clean(T0, 0, force=True) is None  # nothing below a high watermark of 0


def test_min_compaction_lag_keeps_recent_segments_dirty() -> None:
    config = dataclasses.replace(COMPACT, min_compaction_lag_ms=100_000)
    log = open_log(MemoryStorage(), config)
    for i in range(30):
        append(log, [(b"k", b"v%d" % i)], timestamp=T0 + i * 10_000, now=T0 + i * 10_000)
    bases = log.segment_base_offsets()
    now = T0 + 29 * 10_000
    result = log.clean(now, log.log_end_offset)
    assert result is not None
    # The first segment whose newest record is younger than 100 s is not cleaned, nor any
    # after it.
    newest_cleaned = T0 + (result.end_offset - 1) * 10_000
    assert now - newest_cleaned >= 100_000 and result.end_offset in bases[:-1]
    assert now - (T0 + (bases[bases.index(result.end_offset) + 1] - 1) * 10_000) < 100_000


def test_when_a_log_is_due() -> None:
    log = open_log(MemoryStorage(), COMPACT)  # min.cleanable.dirty.ratio 0.5
    fill(log, keys=3, rounds=10)
    assert log.clean(T0, log.log_end_offset) is not None  # the first pass: all dirty
    seen = set()
    for i in range(60):
        append(log, [(b"k%d" % (i % 3), b"more")])
        forced = log.prepare_clean(T0, log.log_end_offset, force=True)
        ratio = None if forced is None else forced.plan.dirty_ratio
        if forced is not None:
            forced.cancel()
            assert log.complete_clean(forced) is None  # thrown away
        due = log.prepare_clean(T0, log.log_end_offset)
        assert (due is not None) == (ratio is not None and ratio >= 0.5), (i, ratio)
        seen.add(due is not None)
        if due is not None:
            due.build()
            assert log.complete_clean(due) is not None
    assert seen == {False, True}


def test_max_compaction_lag_makes_a_log_due() -> None:
    config = dataclasses.replace(
        COMPACT, min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=DAY_MS
    )
    log = open_log(MemoryStorage(), config)
    fill(log, keys=3, rounds=10)
    log.clean(T0, log.log_end_offset, force=True)
    fill(log, keys=3, rounds=4)
    assert log.prepare_clean(T0 + DAY_MS, log.log_end_offset) is None
    cleaning = log.prepare_clean(T0 + DAY_MS + 1, log.log_end_offset)
    assert cleaning is not None and "max.compaction.lag.ms" in cleaning.plan.reason
    cleaning.build()
    assert log.complete_clean(cleaning) is not None


def test_a_log_without_compaction_is_never_cleaned() -> None:
    log = open_log(MemoryStorage(), dataclasses.replace(COMPACT, cleanup_policy=("delete",)))
    fill(log, keys=3, rounds=10)
    assert log.clean(T0, log.log_end_offset, force=True) is None


def test_max_compaction_lag_rolls_the_active_segment() -> None:
    config = dataclasses.replace(COMPACT, segment_bytes=1 << 20, max_compaction_lag_ms=60_000)
    log = open_log(MemoryStorage(), config)
    append(log, [(b"k", b"1")], now=T0)
    append(log, [(b"k", b"2")], now=T0 + 60_001)
    assert log.segments == 2


# --- tombstones ----------------------------------------------------------------------------------


def test_tombstones_stay_for_delete_retention_ms_after_their_first_cleaning() -> None:
    config = dataclasses.replace(COMPACT, delete_retention_ms=DAY_MS)
    storage = MemoryStorage()
    log = open_log(storage, config)
    for i in range(8):
        append(log, [(b"gone", b"v%d" % i), (b"stays", b"s%d" % i)])
    tombstone = append(log, [(b"gone", None)])
    fill(log, keys=2, rounds=8)  # pushes the tombstone out of the active segment
    t1 = T0 + 1000
    log.clean(t1, log.log_end_offset)
    kept = {r.offset: r for r in records(log)}
    assert kept[tombstone].value is None  # kept, and no older value of "gone" is left
    assert [r for r in kept.values() if r.key == b"gone"] == [kept[tombstone]]
    (stamped,) = [b for b in batches(log) if b.base_offset == tombstone]
    assert has_delete_horizon(stamped) and stamped.base_timestamp == t1 + DAY_MS
    assert stamped.records()[0].timestamp == T0  # the record keeps its own timestamp
    log.clean(t1 + DAY_MS - 1, log.log_end_offset, force=True)
    assert tombstone in {r.offset for r in records(log)}
    assert log.prepare_clean(t1 + DAY_MS - 1, log.log_end_offset) is None  # nothing dirty
    due = log.prepare_clean(t1 + DAY_MS, log.log_end_offset)  # but a horizon has passed
    assert due is not None and "delete horizon" in due.plan.reason
    due.cancel()
    assert log.complete_clean(due) is None
    log.close()
    log = open_log(storage, config)  # the horizon is in the batch: it survives a restart
    result = log.clean(t1 + DAY_MS, log.log_end_offset, force=True)
    assert result is not None and result.tombstones_removed == 1
    assert all(r.key != b"gone" for r in records(log))


def test_a_superseded_tombstone_goes_at_once() -> None:
    log = open_log(MemoryStorage(), COMPACT)
    append(log, [(b"k", b"1"), (b"k", None), (b"k", b"2")])
    fill(log, keys=2, rounds=10)
    log.clean(T0, log.log_end_offset)
    assert [(r.key, r.value) for r in records(log) if r.key == b"k"] == [(b"k", b"2")]


# --- reads across the gaps -----------------------------------------------------------------------


def test_reads_and_timestamp_lookups_across_gaps() -> None:
    storage = MemoryStorage()
    log = open_log(storage, COMPACT)
    for i in range(40):
        append(log, [(b"k%d" % (i % 4), b"v%d" % i)], timestamp=T0 + (i * 7919) % 100)
    log.clean(T0, log.log_end_offset)
    log.close()
    for log in (open_log(storage, COMPACT),):
        kept = batches(log)
        recs = records(log)
        for offset in range(log.log_end_offset):
            got = log.read(offset, 1 << 20)
            first = next(b for b in kept if b.last_offset >= offset)
            assert got.first_offset == first.base_offset
        for target in range(-1, 101):
            expected = next(
                ((r.offset, r.timestamp) for r in recs if r.timestamp >= T0 + target), None
            )
            assert log.offset_for_timestamp(T0 + target) == expected
        top = max(r.timestamp for r in recs)
        first_top = next(r for r in recs if r.timestamp == top)
        assert log.offset_for_timestamp(MAX_TIMESTAMP) == (first_top.offset, top)
        assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (0, -1)


def test_max_timestamp_lookup_when_an_emptied_batch_holds_the_largest() -> None:
    log = open_log(MemoryStorage(), COMPACT)
    append(log, [(b"a", b"1")], timestamp=T0 + 500)  # the largest timestamp, superseded below
    fill(log, keys=2, rounds=6)
    append(log, [(b"a", b"2")], timestamp=T0 + 100)
    fill(log, keys=2, rounds=6)
    log.clean(T0, log.log_end_offset)
    assert 0 not in {r.offset for r in records(log)}
    assert any(b.base_offset == 0 and b.records_count == 0 for b in batches(log))  # opens epoch 0
    recs = records(log)
    top = max(r.timestamp for r in recs)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (
        next(r.offset for r in recs if r.timestamp == top),
        top,
    )


# --- what must stay for the rest of the broker ---------------------------------------------------


def test_the_leader_epoch_cache_still_matches_the_headers() -> None:
    storage = MemoryStorage()
    log = open_log(storage, COMPACT)
    for epoch in range(4):
        for i in range(6):
            append(log, [(b"k%d" % (i % 2), b"e%d.%d" % (epoch, i))], epoch=epoch * 2)
    before = log.epoch_entries()
    answers = [log.end_offset_for_epoch(e) for e in range(9)]
    log.clean(T0, log.log_end_offset)
    assert log.epoch_entries() == before == reference_epochs(stored_batches(storage), 0)
    assert [log.end_offset_for_epoch(e) for e in range(9)] == answers
    log.close()
    storage.remove(f"{DIR}/leader-epoch-checkpoint")  # rebuilt from every header
    assert open_log(storage, COMPACT).epoch_entries() == before


def test_idempotent_producer_state_is_rebuilt_the_same() -> None:
    log = open_log(MemoryStorage(), COMPACT)
    seqs = {7: 0, 8: 0, 9: 0}

    def produce(pid: int, pairs: list[Pair]) -> None:
        append(log, pairs, producer=(pid, 0, seqs[pid]))
        seqs[pid] += len(pairs)

    produce(7, [(b"p7", b"kept")])  # producer 7: an early batch stays ...
    produce(8, [(b"x", b"superseded")])  # producer 8: every batch goes
    for i in range(6):
        produce(9, [(b"x", b"%d" % i)])  # producer 9: batches superseded by each other
    produce(7, [(b"x", b"superseded"), (b"y", b"superseded")])  # ... and its last one empties
    for i in range(10):
        append(log, [(b"x", b"%d" % i), (b"y", b"%d" % i)])
    before = rebuild_producers(log)
    assert log.clean(T0, log.log_end_offset) is not None
    after = rebuild_producers(log)
    assert after.producers[7].last_seq == before.producers[7].last_seq == 2
    assert 8 not in after.producers  # forgotten: any sequence is accepted again
    assert after.producers[9].last_seq == before.producers[9].last_seq
    (last_of_7,) = [b for b in batches(log) if b.producer_id == 7 and b.base_sequence == 1]
    assert last_of_7.records_count == 0 and last_of_7.last_offset_delta == 1
    assert after.check(7, 0, 3, 3).error == 0  # the next batch is in order


def test_control_batches_are_kept_as_they_are() -> None:
    log = open_log(MemoryStorage(), COMPACT)
    control = build_batch(
        [control_record(ControlRecordType.LEADER_CHANGE, b"x")],
        control=True,
        base_offset=0,
        partition_leader_epoch=0,
    )
    log.append_as_follower(control)
    stored = read_all(log)
    for i in range(1, 30):
        follower = bytearray(keyed_batch([(b"k", b"%d" % i)]))
        follower[:8] = i.to_bytes(8, "big")
        follower[12:16] = (0).to_bytes(4, "big")
        log.append_as_follower(bytes(follower))
    log.clean(T0, log.log_end_offset)
    assert read_all(log).startswith(stored)


# --- groups, the offset map, and the swap ------------------------------------------------------


def test_small_segments_are_grouped_and_indexed() -> None:
    config = dataclasses.replace(COMPACT, segment_bytes=300, index_interval_bytes=0)
    storage = MemoryStorage()
    log = open_log(storage, config)
    fill(log, keys=2, rounds=30)
    log.clean(T0, log.log_end_offset)  # each segment keeps at most two records: small now
    fill(log, keys=2, rounds=1)
    bases = log.segment_base_offsets()
    result = log.clean(T0, log.log_end_offset, force=True)
    assert result is not None and result.segments_after < result.segments_before
    assert len(log.segment_base_offsets()) < len(bases)
    assert not [f for f in segment_files(storage) if f.endswith((".cleaned", ".swap"))]
    log.close()
    log = open_log(storage, config)
    kept = batches(log)
    for b in kept:
        assert log.read(b.base_offset, 1).first_offset == b.base_offset


def test_a_full_offset_map_cleans_in_several_passes() -> None:
    storage = MemoryStorage()
    log = open_log(storage, COMPACT)
    fill(log, keys=12, rounds=3)
    reference = open_log(MemoryStorage(), COMPACT)
    fill(reference, keys=12, rounds=3)
    reference.clean(T0, reference.log_end_offset)
    hw = log.log_end_offset
    ends = [0]
    while ends[-1] < log.segment_base_offsets()[-1]:
        cleaning = log.prepare_clean(T0, hw, force=True, max_map_entries=5)
        assert cleaning is not None
        cleaning.build()
        result = log.complete_clean(cleaning)
        assert result is not None and result.next_dirty_offset > ends[-1]
        ends.append(result.next_dirty_offset)
    assert len(ends) > 3
    assert records(log) == records(reference)
    log.close()
    assert open_log(storage, COMPACT).first_dirty_offset == ends[-1]


def test_build_in_a_thread_while_appending() -> None:
    log = open_log(MemoryStorage(), COMPACT)
    fill(log, keys=4, rounds=20)
    cleaning = log.prepare_clean(T0, log.log_end_offset)
    assert cleaning is not None and log.prepare_clean(T0, log.log_end_offset) is None
    worker = threading.Thread(target=cleaning.build)
    worker.start()
    fill(log, keys=4, rounds=10)  # appends and rolls go on meanwhile
    worker.join()
    before = records(log)
    result = log.complete_clean(cleaning)
    assert result is not None
    cut = result.end_offset
    assert [r for r in records(log) if r.offset >= cut] == [r for r in before if r.offset >= cut]


def test_a_pass_is_abandoned_if_retention_deleted_its_segments() -> None:
    storage = MemoryStorage()
    log = open_log(storage, COMPACT)
    fill(log, keys=4, rounds=20)
    cleaning = log.prepare_clean(T0, log.log_end_offset)
    assert cleaning is not None
    cleaning.build()
    assert any(f.endswith(".cleaned") for f in segment_files(storage))
    log.delete_records_before(log.segment_base_offsets()[1])
    log.apply_retention(T0)
    before = read_all(log)
    assert log.complete_clean(cleaning) is None
    assert read_all(log) == before
    assert not any(f.endswith(".cleaned") for f in segment_files(storage))
    assert log.clean(T0, log.log_end_offset) is not None  # and the next pass goes ahead


def test_an_io_error_while_building_takes_the_log_offline() -> None:
    storage = FaultyStorage(MemoryStorage())
    log = open_log(storage, COMPACT)
    fill(log, keys=4, rounds=20)
    storage.fail_flush(path_suffix=".log.cleaned")
    with pytest.raises(KafkaStorageError):
        log.clean(T0, log.log_end_offset)
    assert log.offline
    assert not any(f.endswith(".cleaned") for f in segment_files(storage.inner))  # type: ignore[arg-type]


def test_corrupt_data_stops_cleaning_until_reopened(tmp_path: Path) -> None:
    log = PartitionLog.open(FileStorage(), str(tmp_path), COMPACT, T0)
    fill(log, keys=4, rounds=20)
    before = read_all(log)
    flip_byte(str(tmp_path / f"{log.segment_base_offsets()[1]:020d}.log"), 70)
    assert log.clean(T0, log.log_end_offset) is None
    assert log.prepare_clean(T0, log.log_end_offset, force=True) is None
    assert not list(tmp_path.glob("*.cleaned"))
    assert log.size_bytes == len(before)


def test_config_from_topic_configs() -> None:
    config = LogConfig.from_topic_configs(
        {
            "cleanup.policy": "compact, delete",
            "delete.retention.ms": "1000",
            "min.compaction.lag.ms": "5",
            "max.compaction.lag.ms": "600000",
            "min.cleanable.dirty.ratio": "0.25",
        }
    )
    assert config.compact and config.delete and config.cleanup_policy == ("compact", "delete")
    assert (config.delete_retention_ms, config.min_compaction_lag_ms) == (1000, 5)
    assert (config.max_compaction_lag_ms, config.min_cleanable_dirty_ratio) == (600_000, 0.25)
    assert not LogConfig.from_topic_configs({"cleanup.policy": ""}).delete
    with pytest.raises(ValueError, match=r"cleanup\.policy"):
        LogConfig.from_topic_configs({"cleanup.policy": "shred"})
    with pytest.raises(ValueError, match=r"min\.cleanable\.dirty\.ratio"):
        LogConfig.from_topic_configs({"min.cleanable.dirty.ratio": "2"})
    with pytest.raises(ValueError, match=r"max\.compaction\.lag\.ms"):
        LogConfig.from_topic_configs({"max.compaction.lag.ms": "0"})


def test_retention_by_time_and_size_needs_the_delete_policy() -> None:
    for policy, deleted in ((("compact",), False), (("compact", "delete"), True)):
        config = dataclasses.replace(COMPACT, cleanup_policy=policy, retention_ms=DAY_MS)
        log = open_log(MemoryStorage(), config)
        fill(log, keys=3, rounds=10)
        assert bool(log.apply_retention(T0 + 2 * DAY_MS)) is deleted


def test_truncation_below_the_cleaned_range_makes_it_dirty_again() -> None:
    storage: Storage = FaultyStorage(MemoryStorage())
    log = open_log(storage, COMPACT)
    fill(log, keys=3, rounds=10)
    result = log.clean(T0, log.log_end_offset)
    assert result is not None and log.first_dirty_offset == result.next_dirty_offset
    log.truncate_to(3)
    assert log.first_dirty_offset == log.log_end_offset <= 3
    checkpoint = storage.open(f"{DIR}/{CLEANER_OFFSET_FILE}")
    assert checkpoint.read(0, 64) == b"0\n%d\n" % log.log_end_offset
    fill(log, keys=3, rounds=10)
    log.clean(T0, log.log_end_offset)
    assert len({r.key for r in records(log)}) == 3


def test_empty_batches_pass_a_followers_checks() -> None:
    leader = open_log(MemoryStorage(), COMPACT)
    fill(leader, keys=3, rounds=10)
    leader.clean(T0, leader.log_end_offset)
    data = read_all(leader)
    assert any(b.records_count == 0 for b in iter_batches(data))
    follower = PartitionLog.open(MemoryStorage(), "/f/topic-0", COMPACT, T0)
    follower.append_as_follower(data)
    assert read_all(follower) == data and follower.log_end_offset == leader.log_end_offset


def test_files_closed_under_a_build_only_abandon_the_pass(tmp_path: Path) -> None:
    log = PartitionLog.open(FileStorage(), str(tmp_path / "a"), COMPACT, T0)
    fill(log, keys=4, rounds=20)
    cleaning = log.prepare_clean(T0, log.log_end_offset)
    assert cleaning is not None
    log.delete_records_before(log.segment_base_offsets()[2])
    log.apply_retention(T0)  # unlinks the first two segments ...
    log.apply_retention(T0)  # ... and closes them (file.delete.delay.ms = 0)
    cleaning.build()
    assert isinstance(cleaning.error, OSError)
    assert log.complete_clean(cleaning) is None and not log.offline
    assert not list((tmp_path / "a").glob("*.cleaned"))
    log = PartitionLog.open(FileStorage(), str(tmp_path / "b"), COMPACT, T0)
    fill(log, keys=4, rounds=20)
    cleaning = log.prepare_clean(T0, log.log_end_offset)
    assert cleaning is not None
    log.close()
    cleaning.build()  # a close should wait for the build; if not, the build fails
    assert log.complete_clean(cleaning) is None
    assert not list((tmp_path / "b").glob("*.cleaned"))


def test_a_recovered_inactive_segment_keeps_its_largest_timestamp() -> None:
    """A segment re-validated at open (a cleaned one after a crash, or any unflushed one) gets
    the time-index entry for its largest timestamp, as at its roll: the next open trusts it
    and reads its largest timestamp from there."""
    config = dataclasses.replace(COMPACT, segment_bytes=300, index_interval_bytes=100)
    storage = FaultyStorage(MemoryStorage())
    log = open_log(storage, config)
    for i in range(6):  # 4 batches a segment; index entries at the third
        append(log, [(b"k", b"v")], timestamp=T0 + (400 if i == 3 else i))
    assert log.segment_base_offsets() == [0, 4]
    storage.crash(lose_unflushed=False)  # the recovery point checkpoint is still 0
    log = open_log(storage, config)
    assert log.recovery_report.segments_recovered == log.segment_base_offsets()
    storage.crash(lose_unflushed=False)
    log = open_log(storage, config)  # the first segments are trusted now
    assert log.offset_for_timestamp(T0 + 400) == (3, T0 + 400)


def test_retention_leaving_the_log_start_in_a_gap_keeps_the_epoch_cache_derivable() -> None:
    storage = MemoryStorage()
    log = open_log(storage, COMPACT)
    for i in range(36):
        append(log, [(b"k%d" % (i % 3), b"v%d" % i)], epoch=i // 12)
    log.clean(T0, log.log_end_offset)
    kept = batches(log)
    # A segment starting with a gap whose first batch has the epoch of the batch before it:
    # the leader epoch cache's entry for a log start there must move to that first batch.
    start = next(
        s
        for s in log.segment_base_offsets()[1:]
        for before, first in itertools.pairwise(kept)
        if before.last_offset < s < first.base_offset
        and before.partition_leader_epoch == first.partition_leader_epoch
    )
    firsts = {start: next(b for b in kept if b.base_offset >= start)}
    log.delete_records_before(start)
    assert log.apply_retention(T0)  # the log now starts in a gap
    assert firsts[start].base_offset > log.log_start_offset == start
    expected = reference_epochs(stored_batches(storage), start)
    assert log.epoch_entries() == expected
    log.close()
    assert open_log(storage, COMPACT).epoch_entries() == expected
    storage.remove(f"{DIR}/leader-epoch-checkpoint")
    assert open_log(storage, COMPACT).epoch_entries() == expected
