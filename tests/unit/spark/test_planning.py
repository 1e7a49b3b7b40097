"""Micro-batch planning: offsets JSON, Spark's rate-limit proration and range splitting."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

from spark_source.planning import (
    backlog,
    decode_offsets,
    encode_offsets,
    lost_partitions,
    plan_ranges,
    rate_limit,
)

tps = st.tuples(st.sampled_from(["a", "b", "events", "z"]), st.integers(0, 12))
offsets = st.dictionaries(tps, st.integers(0, 10**9), max_size=20)


@given(offsets)
def test_offsets_json_round_trips_and_is_one_text_per_value(value: dict) -> None:
    encoded = encode_offsets(value)
    assert decode_offsets(json.loads(json.dumps(encoded))) == value
    # Spark compares offsets as JSON text: insertion order must not matter
    shuffled = dict(reversed(list(value.items())))
    assert json.dumps(encode_offsets(shuffled)) == json.dumps(encoded)


def test_partitions_are_ordered_by_number_not_text() -> None:
    text = json.dumps(encode_offsets({("t", 10): 1, ("t", 2): 3, ("a", 0): 5}))
    assert text == '{"a": {"0": 5}, "t": {"2": 3, "10": 1}}'


@st.composite
def start_and_latest(draw: st.DrawFn) -> tuple[dict, dict]:
    latest = draw(st.dictionaries(tps, st.integers(0, 10**6), min_size=1, max_size=12))
    start = {tp: draw(st.integers(0, end)) for tp, end in latest.items() if draw(st.booleans())}
    return start, latest


@given(start_and_latest(), st.integers(1, 10**6))
def test_rate_limit_never_passes_latest_and_admits_about_the_limit(
    pair: tuple[dict, dict], limit: int
) -> None:
    start, latest = pair
    limited = rate_limit(start, latest, limit)
    assert set(limited) == set(latest)
    for tp, end in limited.items():
        assert start.get(tp, 0) <= end <= latest[tp]
    admitted = backlog(start, limited)
    # floors lose under one record per partition; ceilings of tiny shares add under one each
    assert admitted <= limit + len(latest)
    assert admitted >= min(limit, backlog(start, latest)) - len(latest)
    # every partition with a backlog moves when the limit allows at least one record each
    if limit >= len(latest):
        assert all(limited[tp] > start.get(tp, 0) for tp in latest if latest[tp] > start.get(tp, 0))


def test_rate_limit_prorates_by_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 0}
    assert rate_limit(start, {("t", 0): 300, ("t", 1): 100}, 100) == {("t", 0): 75, ("t", 1): 25}


@given(start_and_latest(), st.none() | st.integers(1, 40), st.none() | st.integers(1, 5000))
def test_ranges_cover_exactly_the_batch(
    pair: tuple[dict, dict], min_partitions: int | None, most: int | None
) -> None:
    start, end = pair
    start = {tp: start.get(tp, 0) for tp in end}
    ranges, losses = plan_ranges(
        start, end, min_partitions=min_partitions, max_records_per_partition=most
    )
    assert losses == []
    covered: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for r in ranges:
        assert r.size > 0
        if most is not None and min_partitions is None:
            assert r.size <= most
        covered.setdefault((r.topic, r.partition), []).append((r.start, r.end))
    for tp, end_offset in end.items():
        pieces = sorted(covered.get(tp, []))
        if end_offset == start[tp]:
            assert pieces == []
            continue
        assert pieces[0][0] == start[tp] and pieces[-1][1] == end_offset
        assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
    if min_partitions is not None and backlog(start, end) >= min_partitions:
        assert len(ranges) >= min(min_partitions, backlog(start, end)) * 0.5


def test_min_partitions_splits_in_proportion_to_size() -> None:
    start = {("t", 0): 0, ("t", 1): 0}
    ranges, _ = plan_ranges(start, {("t", 0): 900, ("t", 1): 100}, min_partitions=10)
    assert [(r.partition, r.size) for r in ranges] == [(0, 100)] * 9 + [(1, 100)]


def test_a_log_that_went_backwards_is_reported_not_read() -> None:
    ranges, losses = plan_ranges({("t", 0): 50, ("t", 1): 0}, {("t", 0): 40, ("t", 1): 5})
    assert [(r.partition, r.start, r.end) for r in ranges] == [(1, 0, 5)]
    assert len(losses) == 1 and "t-0" in losses[0] and "40" in losses[0]


def test_deleted_partitions_are_named() -> None:
    losses = lost_partitions({("gone", 0): 7, ("t", 0): 1}, [("t", 0)])
    assert len(losses) == 1 and "gone-0" in losses[0] and "7" in losses[0]
