"""The record walk (kafka_protocol/_record_walk.c) and what it guards: produce validation
(Kafka's LogValidator), follower appends and segment recovery.

Batches come from a hypothesis strategy, are corrupted field by field and sealed with a valid
CRC32C (tests/record_corruption.py), so only the walk can refuse them.  The compiled walk must
agree with a plain Python decoder on valid and corrupt input alike.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from record_corruption import (
    CORRUPTIONS,
    Batch,
    Rec,
    reference_walk,
    valid_batch,
    zigzag_varint,
)

from broker.handlers.produce import validate_batch
from broker.log import CorruptBatchError, LogConfig, PartitionLog
from broker.log.config import INT64_MAX
from broker.replica_manager import AppendOutcome, Partition, Registration, ReplicaManager
from broker.replication.fetcher import FetcherConfig, LeaderFetcher
from broker.storage import FaultyStorage, FileStorage, MemoryStorage
from kafka_protocol._record_walk import walk_records
from kafka_protocol.compression import Compression, compress, decompress_buffer
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import CompressionError
from kafka_protocol.messages import FetchResponse
from kafka_protocol.record_batch import HEADER_BYTES, NO_TIMESTAMP, RecordBatch
from kafka_protocol.record_walk import walk_batch

NOW_MS = 1_700_000_000_000
HOUR_MS = 3_600_000

blobs = st.binary(max_size=24)
records = st.lists(
    st.tuples(
        st.none() | blobs,  # key
        st.none() | st.binary(max_size=64),  # value
        st.lists(st.tuples(st.binary(max_size=8), st.none() | st.binary(max_size=8)), max_size=3),
        st.integers(-(2**40), 2**40),  # timestamp delta
    ),
    min_size=1,
    max_size=8,
)
batches = st.builds(valid_batch, records, st.integers(0, 2**42), st.sampled_from(list(Compression)))


def partition(config: LogConfig | None = None, *, log_append_time: bool = False) -> Partition:
    rm = ReplicaManager(MemoryStorage(), Path("/d"), clock_ms=lambda: NOW_MS)
    return rm.open_partition(
        "t",
        0,
        None,
        config or LogConfig(),
        max_message_bytes=1 << 20,
        log_append_time=log_append_time,
    )


# Timestamps of any age are fine here: these tests are about structure.
ANY_TIME = LogConfig(
    message_timestamp_before_max_ms=INT64_MAX, message_timestamp_after_max_ms=INT64_MAX
)


def section_of(b: Batch) -> bytes:
    return b.section()


# --- the walk against the reference decoder -------------------------------------------------


@given(batches)
def test_the_walk_agrees_with_the_reference_on_valid_batches(b: Batch) -> None:
    sealed = b.seal()
    walk = walk_batch(RecordBatch(memoryview(sealed)).validate())
    ref = reference_walk(section_of(b), len(b.records), len(b.records) - 1)
    assert ref.valid and walk.problem is None and walk.bad_index == -1
    assert (
        walk.min_timestamp_delta,
        walk.max_timestamp_delta,
        walk.min_timestamp_index,
        walk.max_timestamp_index,
        walk.first_null_key,
    ) == (
        ref.min_timestamp_delta,
        ref.max_timestamp_delta,
        ref.min_timestamp_index,
        ref.max_timestamp_index,
        ref.first_null_key,
    )


@given(batches, st.sampled_from(sorted(CORRUPTIONS)))
def test_the_walk_agrees_with_the_reference_on_each_corruption(b: Batch, name: str) -> None:
    corrupt, minimum, _, _ = CORRUPTIONS[name]
    assume(len(b.records) >= minimum and name != "gzip-flag-on-plain-data")
    bad = corrupt(b)
    count = len(bad.records) if bad.count is None else bad.count
    walk = walk_records(section_of(bad), count, count - 1)
    ref = reference_walk(section_of(bad), count, count - 1)
    assert walk.problem is not None and not ref.valid
    assert walk.bad_index == ref.bad_index


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(batches, st.data())
def test_the_walk_agrees_with_the_reference_on_damaged_bytes(b: Batch, data: st.DataObject) -> None:
    """Bytes overwritten, inserted or removed anywhere, and header counts that lie."""
    section = bytearray(section_of(b))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(section)))
        action = data.draw(st.sampled_from(["set", "insert", "delete"]))
        byte = data.draw(st.integers(0, 255))
        if action == "set" and at < len(section):
            section[at] = byte
        elif action == "insert":
            section.insert(at, byte)
        elif at < len(section):
            del section[at]
    count = data.draw(st.sampled_from([len(b.records), len(b.records) + 1, len(b.records) - 1]))
    last = data.draw(st.sampled_from([count - 1, count + 2, 2**31 - 1]))
    walk = walk_records(bytes(section), max(count, 0), last)
    ref = reference_walk(bytes(section), max(count, 0), last)
    assert (walk.problem is None) == ref.valid, walk.problem
    assert walk.bad_index == ref.bad_index
    if ref.valid:
        assert (walk.min_timestamp_delta, walk.max_timestamp_delta, walk.first_null_key) == (
            ref.min_timestamp_delta,
            ref.max_timestamp_delta,
            ref.first_null_key,
        )


@pytest.mark.parametrize(
    ("encoded", "valid"),
    [
        (zigzag_varint(2**31 - 1), True),  # the largest int32: 5 bytes, 4 bits in the last
        (zigzag_varint(-(2**31)), True),
        (zigzag_varint(2**31), False),  # needs 33 bits
        (b"\xff\xff\xff\xff\x1f", False),  # bits beyond 32 in the 5th byte
        (b"\x80\x80\x80\x80\x80\x00", False),  # 6 bytes
    ],
)
def test_varint_bounds_are_int32(encoded: bytes, valid: bool) -> None:
    """Kafka's ByteUtils.readVarint: at most 5 bytes and 32 bits; here as an offset delta of
    the only record, where only 0 is right (so a valid encoding names the delta, not the
    varint, as the problem)."""
    body = b"\x00\x00" + encoded + b"\x01\x01\x00"  # attributes, ts delta, offset delta, ...
    walk = walk_records(zigzag_varint(len(body)) + body, 1, 0)
    assert walk.problem is not None
    assert ("varint" in walk.problem) is not valid
    cut = b"\x00\x00\x80"  # the record ends inside its offset delta
    assert walk_records(zigzag_varint(3) + cut, 1, 0).problem == (
        "record 0: offset delta is cut short"
    )


def test_a_compacted_batch_may_have_gaps_in_its_offset_deltas() -> None:
    """What the log cleaner leaves: deltas rising, with gaps, up to last_offset_delta."""
    kept = Batch([Rec(b"k", b"v", offset_delta=d) for d in (1, 4, 9)], last_offset_delta=9)
    assert walk_records(kept.section(), 3, 9).problem is None
    assert walk_records(kept.section(), 3, 8).problem == (
        "record 2: offset delta 9 is outside [5, 8]"
    )
    backwards = Batch([Rec(b"k", b"v", offset_delta=d) for d in (4, 1)], last_offset_delta=9)
    assert walk_records(backwards.section(), 2, 9).bad_index == 1


# --- produce: the code, the record, the message ----------------------------------------------


@given(batches, st.sampled_from(sorted(CORRUPTIONS)))
def test_every_corruption_is_refused_with_its_code(b: Batch, name: str) -> None:
    corrupt, minimum, code, words = CORRUPTIONS[name]
    assume(len(b.records) >= minimum)
    refused = validate_batch(partition(ANY_TIME), memoryview(corrupt(b).seal()), NOW_MS)
    assert isinstance(refused, AppendOutcome), name
    assert refused.error is ErrorCode[code]
    assert words in str(refused.message)
    if refused.error is ErrorCode.INVALID_RECORD:
        ((index, message),) = refused.record_errors
        assert 0 <= index < len(b.records) + 1 and message == refused.message
    else:
        assert refused.record_errors == ()


@given(batches)
def test_valid_batches_are_accepted(b: Batch) -> None:
    batch = validate_batch(partition(ANY_TIME), memoryview(b.seal()), NOW_MS)
    assert isinstance(batch, RecordBatch), batch


@pytest.mark.parametrize("codec", [Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_a_codec_flag_on_data_of_another_codec_is_corrupt(codec: Compression) -> None:
    b = valid_batch([(b"k", b"v" * 100, [], 0)], codec=Compression.GZIP)
    sealed = Batch(b.records, codec=Compression.GZIP, codec_flag=int(codec)).seal()
    with pytest.raises(CompressionError):
        walk_batch(RecordBatch(memoryview(sealed)))
    refused = validate_batch(partition(ANY_TIME), memoryview(sealed), NOW_MS)
    assert isinstance(refused, AppendOutcome) and refused.error is ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_decompression_grows_its_buffer_up_to_the_bound(codec: Compression) -> None:
    """A batch that compresses 1000:1 decompresses (its buffer grows past the first guess),
    and one that would pass the bound is refused before it does."""
    data = b"\x00" * (8 << 20)
    packed = compress(codec, data)
    assert len(packed) * 100 < len(data)
    assert bytes(decompress_buffer(codec, packed)) == data
    with pytest.raises(CompressionError, match="more than 1048576 bytes"):
        decompress_buffer(codec, packed, max_bytes=1 << 20)
    exact = decompress_buffer(codec, compress(codec, data[: 1 << 20]), max_bytes=1 << 20)
    assert len(exact) == 1 << 20


def timed(*deltas: int, base: int = NOW_MS) -> bytes:
    return valid_batch([(b"k", b"v", [], d) for d in deltas], base).seal()


@pytest.mark.parametrize(
    ("batch", "config", "refused_index"),
    [
        (timed(0, HOUR_MS), LogConfig(), None),  # after.max.ms defaults to one hour
        (timed(0, HOUR_MS + 1, 5), LogConfig(), 1),
        (timed(0, -(10**12)), LogConfig(), None),  # before.max.ms defaults to unbounded
        (timed(0, -1000), LogConfig(message_timestamp_before_max_ms=999), 1),
        (timed(0, -999), LogConfig(message_timestamp_before_max_ms=999), None),
        (timed(0, 0, base=NO_TIMESTAMP), LogConfig(message_timestamp_before_max_ms=0), None),
        (timed(10**9, 1, base=NOW_MS), LogConfig(message_timestamp_after_max_ms=0), 0),
    ],
    ids=[
        "one-hour-ahead",
        "past-one-hour-ahead",
        "long-ago",
        "past-before-max",
        "at-before-max",
        "no-timestamp",
        "both-out-first-named",
    ],
)
def test_timestamps_within_kip_937_bounds(
    batch: bytes, config: LogConfig, refused_index: int | None
) -> None:
    outcome = validate_batch(partition(config), memoryview(batch), NOW_MS)
    if refused_index is None:
        assert isinstance(outcome, RecordBatch), outcome
        return
    assert isinstance(outcome, AppendOutcome) and outcome.error is ErrorCode.INVALID_TIMESTAMP
    assert outcome.record_errors[0][0] == refused_index
    assert "out of range" in str(outcome.message)
    # A topic that keeps log append time does not look at the producer's timestamps.
    assert isinstance(
        validate_batch(partition(config, log_append_time=True), memoryview(batch), NOW_MS),
        RecordBatch,
    )


def test_a_compacted_topic_names_every_record_without_a_key() -> None:
    """As Kafka, every keyless record is listed (librdkafka's 0011-produce_batch counts them:
    with a single record error it fails the whole batch with INVALID_RECORD)."""
    batch = valid_batch([(b"k", b"v", [], 0), (None, b"v", [], 0), (None, b"v", [], 0)]).seal()
    compacted = LogConfig(cleanup_policy=("compact",))
    outcome = validate_batch(partition(compacted), memoryview(batch), 0)
    assert isinstance(outcome, AppendOutcome) and outcome.error is ErrorCode.INVALID_RECORD
    assert outcome.record_errors == ((1, outcome.message), (2, outcome.message))
    assert isinstance(validate_batch(partition(), memoryview(batch), 0), RecordBatch)


@settings(max_examples=50, deadline=None)
@given(keyed=st.lists(st.booleans(), min_size=1, max_size=40))
def test_the_keyless_records_of_a_compacted_topic_are_exactly_those_listed(
    keyed: list[bool],
) -> None:
    batch = valid_batch([(b"k" if k else None, b"v", [], 0) for k in keyed]).seal()
    compacted = LogConfig(cleanup_policy=("compact",))
    outcome = validate_batch(partition(compacted), memoryview(batch), 0)
    if all(keyed):
        assert isinstance(outcome, RecordBatch)
        return
    assert isinstance(outcome, AppendOutcome)
    assert [i for i, _ in outcome.record_errors] == [i for i, k in enumerate(keyed) if not k]


# --- readers: a follower's fetch, a segment's tail ------------------------------------------

GOOD = [valid_batch([(b"k", b"v%d" % i, [], 0), (b"k", b"w", [], 1)], NOW_MS) for i in range(4)]


def log_bytes(log: PartitionLog) -> bytes:
    return log.read_bytes(log.read(log.log_start_offset, 1 << 20))


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_a_follower_refuses_a_fetched_run_with_a_corrupt_batch(name: str) -> None:
    corrupt, _, _, words = CORRUPTIONS[name]
    memory = MemoryStorage()
    log = PartitionLog.open(memory, "/f/t-0", LogConfig(), NOW_MS)
    log.append_as_follower(GOOD[0].seal(0))
    before = {p: bytes(d) for p, d in memory.files.items()}
    run = GOOD[1].seal(2) + corrupt(GOOD[2]).seal(4) + GOOD[3].seal(6)
    with pytest.raises(CorruptBatchError, match=words.replace("^", r"\^")) as raised:
        log.append_as_follower(run)
    assert f"batch at byte {len(GOOD[1].seal(2))}" in str(raised.value)
    assert {p: bytes(d) for p, d in memory.files.items()} == before  # nothing written
    assert log.log_end_offset == 2


@pytest.mark.parametrize("name", ["count-too-high", "length-2^40", "trailing-bytes"])
def test_recovery_cuts_the_tail_at_a_batch_the_walk_refuses(tmp_path: Path, name: str) -> None:
    """A batch with a valid CRC but broken records in the unflushed tail (written by a
    broker without validation, or damaged before its CRC was computed) ends the log."""
    corrupt = CORRUPTIONS[name][0]
    storage = FaultyStorage(FileStorage())
    log = PartitionLog.open(storage, str(tmp_path), LogConfig(), NOW_MS)
    for i, b in enumerate([GOOD[0], GOOD[1], corrupt(GOOD[2]), GOOD[3]]):
        log.append([memoryview(b.seal())], leader_epoch=0, now_ms=NOW_MS + i)
    storage.crash(lose_unflushed=False)
    reopened = PartitionLog.open(FileStorage(), str(tmp_path), LogConfig(), NOW_MS + 10)
    assert reopened.log_end_offset == 4
    (dropped,) = reopened.recovery_report.dropped
    assert dropped.first_offset == 4
    assert CORRUPTIONS[name][3] in dropped.reason
    assert len(log_bytes(reopened)) == len(GOOD[0].seal()) + len(GOOD[1].seal())
    reopened.close()


def test_the_walk_reads_any_buffer_and_checks_its_arguments() -> None:
    section = GOOD[0].section()
    for buffer in (section, bytearray(section), memoryview(section)):
        assert walk_records(buffer, 2, 1).problem is None
    with pytest.raises(ValueError):
        walk_records(section, -1, 0)
    with pytest.raises(TypeError):
        walk_records("text", 1, 0)  # type: ignore[arg-type]
    assert walk_records(b"", 0, -1).problem is None  # an empty (control) batch
    assert len(GOOD[0].seal()) > HEADER_BYTES


def test_a_follower_fetcher_reports_a_corrupt_batch_and_appends_none_of_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The fetcher's side: the run is refused whole, the error is logged with the partition,
    the leader and the offset, the metrics hook counts it, and the fetch backs off."""

    async def scenario() -> tuple[int, int, float]:
        rm = ReplicaManager(MemoryStorage(), Path("/f"), broker_id=2, clock_ms=lambda: NOW_MS)
        part = rm.open_partition(
            "t",
            0,
            None,
            LogConfig(),
            max_message_bytes=1 << 20,
            registration=Registration(1, 0, 0, (1, 2), (1, 2)),
        )
        counted: list[int] = []
        config = FetcherConfig(2, on_corrupt_batch=lambda: counted.append(1))
        fetcher = LeaderFetcher(1, rm, lambda _: None, config)
        try:
            fetcher.add(part, 0)
            fetching = fetcher.partitions[("t", 0)]
            fetching.needs_truncation = False
            run = GOOD[0].seal(0) + CORRUPTIONS["trailing-bytes"][0](GOOD[1]).seal(2)
            data = FetchResponse.PartitionData(partition_index=0, high_watermark=4, records=run)
            fetcher._apply_fetched(fetching, data)
            waits = fetching.backoff_until - asyncio.get_running_loop().time()
        finally:
            await fetcher.close()
        return part.log.log_end_offset, len(counted), waits

    with caplog.at_level(logging.ERROR, logger="broker.fetcher"):
        log_end_offset, counted, backoff_s = asyncio.run(scenario())
    assert (log_end_offset, counted) == (0, 1)
    assert backoff_s > 0
    (line,) = [r.getMessage() for r in caplog.records if "corrupt batch" in r.getMessage()]
    assert "partition=t-0 leader=1 offset=0" in line and "after the last record" in line
