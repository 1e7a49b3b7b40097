"""The core's backoff, error table, metadata cache and fetch cursor, as pure values."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_protocol.client.backoff import KAFKA_JITTER, Backoff, backoff_delay
from kafka_protocol.client.cursor import (
    UNBOUNDED,
    BatchTooLarge,
    FetchCursor,
    OutOfRange,
    Step,
    records_from,
)
from kafka_protocol.client.error_policy import (
    STALE_COORDINATOR_ERRORS,
    STALE_LEADER_ERRORS,
    Action,
    action_for,
    is_retriable,
)
from kafka_protocol.client.metadata import MetadataCache, parse_address
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import MetadataResponse
from kafka_protocol.record_batch import SimpleRecord, build_batch
from kafka_protocol.types import TopicPartition

# --- backoff --------------------------------------------------------------------------------


@given(
    initial=st.floats(min_value=0, max_value=10),
    maximum=st.floats(min_value=0, max_value=100),
    jitter=st.floats(min_value=0, max_value=0.5),
    seed=st.integers(),
    n=st.integers(min_value=1, max_value=80),
)
def test_backoff_stays_within_its_bounds(
    initial: float, maximum: float, jitter: float, seed: int, n: int
) -> None:
    backoff = Backoff(initial, maximum, jitter=jitter, rng=random.Random(seed))
    cap = min(initial, maximum) if maximum < initial else maximum
    delays = [backoff.next_delay() for _ in range(n)]
    for i, delay in enumerate(delays):
        base = backoff_delay(i, initial, maximum)
        assert base <= cap
        assert base * (1 - jitter) - 1e-9 <= delay <= base * (1 + jitter) + 1e-9
    bases = [backoff_delay(i, initial, maximum) for i in range(n)]
    assert bases == sorted(bases)  # never shrinks before jitter


def test_backoff_doubles_to_its_maximum_and_resets() -> None:
    backoff = Backoff(0.1, 1.0, jitter=0.0)
    assert [backoff.next_delay() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.reset()
    assert backoff.next_delay() == 0.1
    # KIP-580: retry.backoff.max.ms below retry.backoff.ms is a constant backoff of the max
    assert [backoff_delay(i, 0.5, 0.2) for i in range(3)] == [0.2, 0.2, 0.2]
    assert KAFKA_JITTER == 0.2


# --- the error table --------------------------------------------------------------------------


@pytest.mark.parametrize("error", list(ErrorCode))
def test_every_error_has_one_action_and_retriable_matches_kafka(error: ErrorCode) -> None:
    action = action_for(error)
    if error is ErrorCode.NONE:
        assert action is Action.DONE
    elif error in STALE_LEADER_ERRORS:
        assert action is Action.REFRESH_METADATA
    elif error in STALE_COORDINATOR_ERRORS:
        assert action is Action.FIND_COORDINATOR
    # the table never calls retriable what Kafka's Errors.java does not
    assert is_retriable(error) == error.retriable


# --- the metadata cache -----------------------------------------------------------------------


def metadata(leader: int, error: ErrorCode = ErrorCode.NONE) -> MetadataResponse:
    R = MetadataResponse
    return R(
        brokers=[R.MetadataResponseBroker(node_id=1, host="h1", port=9092)],
        topics=[
            R.MetadataResponseTopic(
                name="t",
                error_code=error,
                partitions=[
                    R.MetadataResponsePartition(partition_index=0, leader_id=leader, leader_epoch=7)
                ]
                if error is ErrorCode.NONE
                else [],
            )
        ],
    )


def test_the_cache_knows_leaders_until_invalidated_or_the_topic_is_gone() -> None:
    cache = MetadataCache()
    tp = TopicPartition("t", 0)
    assert cache.needs_refresh(tp)
    cache.update(metadata(leader=1))
    assert not cache.needs_refresh(tp)
    assert cache.leader(tp) == (("h1", 9092), 7)
    assert cache.partition_counts == {"t": 1}
    cache.invalidate(tp)
    assert cache.needs_refresh(tp) and cache.leader(tp) is None
    cache.update(metadata(leader=2))  # a leader whose broker is unknown
    assert cache.needs_refresh(tp)
    cache.update(metadata(leader=1, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    assert cache.partition_counts == {} and cache.leaders == {}


def test_candidates_put_open_connections_first_and_bootstrap_last() -> None:
    cache = MetadataCache()
    cache.update(metadata(leader=1))
    order = cache.candidates([("open", 1)], [("boot", 2), ("h1", 9092)], random.Random(0))
    assert order == [("open", 1), ("h1", 9092), ("boot", 2)]
    assert parse_address("[::1]:9092") == ("::1", 9092)
    with pytest.raises(ValueError, match="host:port"):
        parse_address("nohost")


# --- the fetch cursor -------------------------------------------------------------------------


def batch(base: int, count: int) -> bytes:
    records = [SimpleRecord(f"v{base + i}".encode()) for i in range(count)]
    return build_batch(records, base_offset=base)


@given(
    spans=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=8),
    start=st.integers(min_value=0, max_value=30),
    fetch_from=st.lists(st.integers(min_value=0, max_value=40), max_size=10),
)
def test_the_cursor_never_goes_backwards(
    spans: list[int], start: int, fetch_from: list[int]
) -> None:
    bases = [sum(spans[:i]) for i in range(len(spans))]
    log = [batch(b, n) for b, n in zip(bases, spans, strict=True)]
    cursor = FetchCursor(start, UNBOUNDED, 1 << 20, 1 << 22)
    for first in fetch_from:  # answers that start at any batch, even long before the position
        before = cursor.position
        fetched = b"".join(b for b, base in zip(log, bases, strict=True) if base >= first)
        step, chunk = cursor.on_records(memoryview(fetched))
        assert cursor.position >= before
        assert (step is Step.RECORDS) == (cursor.position > before)
        assert (chunk is not None) == (step is Step.RECORDS)


def test_a_truncated_first_batch_grows_the_limit_until_it_cannot() -> None:
    whole = batch(0, 50)
    cursor = FetchCursor(0, 100, 16, 1 << 20)
    assert cursor.on_records(memoryview(whole[:30])) == (Step.GROW, None)
    assert cursor.partition_max_bytes == len(whole)
    assert cursor.position == 0
    with pytest.raises(BatchTooLarge, match=r"fetch\.max\.bytes"):
        FetchCursor(0, 100, 16, 64).on_records(memoryview(whole[:30]))


def test_out_of_range_below_the_log_start_is_lost_above_it_is_retried_once() -> None:
    cursor = FetchCursor(5, UNBOUNDED, 1024, 1024)
    assert cursor.on_out_of_range(10) is OutOfRange.BELOW_LOG_START
    assert cursor.on_out_of_range(0) is OutOfRange.REFRESH_AND_RETRY
    assert cursor.on_out_of_range(0) is OutOfRange.LOG_ENDS_BEFORE
    fresh = FetchCursor(0, UNBOUNDED, 1024, 1024)
    assert fresh.on_out_of_range(0) is OutOfRange.REFRESH_AND_RETRY
    fresh.on_records(memoryview(batch(0, 3)))  # progress: the count starts again
    assert fresh.on_out_of_range(0) is OutOfRange.REFRESH_AND_RETRY


def test_records_from_skips_what_is_below_the_position() -> None:
    data = batch(0, 3) + batch(3, 3)
    records, position = records_from(data, 4)
    assert [r.offset for r in records] == [4, 5] and position == 6
    cursor = FetchCursor(4, UNBOUNDED, 1024, 1024)
    cursor.on_records_decoded(position)
    assert cursor.position == 6
