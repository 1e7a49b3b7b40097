"""kafka-reassign-partitions.sh's JSON files, the generated plan and the throttle configs
(``kraft.reassign.plan``)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.controller.placement import UsableBroker
from kraft.reassign.plan import (
    Move,
    PlanError,
    generate,
    parse_plan,
    parse_topics_to_move,
    plan_json,
    throttles,
)


def test_plan_round_trips_in_kafkas_format() -> None:
    moves = [Move("b", 1, (3, 1)), Move("a", 0, (1, 2, 3))]
    data = plan_json(moves)
    assert data == {
        "version": 1,
        "partitions": [
            {"topic": "a", "partition": 0, "replicas": [1, 2, 3], "log_dirs": ["any"] * 3},
            {"topic": "b", "partition": 1, "replicas": [3, 1], "log_dirs": ["any", "any"]},
        ],
    }
    assert sorted(parse_plan(json.dumps(data)), key=lambda m: m.key) == sorted(
        moves, key=lambda m: m.key
    )
    # log_dirs may be left out, as the tool's users often do
    assert parse_plan('{"partitions": [{"topic": "a", "partition": 0, "replicas": [2]}]}') == [
        Move("a", 0, (2,))
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nope", "not JSON"),
        ("[]", "JSON object"),
        ('{"version": 2, "partitions": []}', "version"),
        ('{"partitions": []}', "non-empty"),
        ('{"partitions": [{"topic": "a", "partition": 0}]}', "replicas"),
        ('{"partitions": [{"topic": "a", "partition": -1, "replicas": [1]}]}', "partition"),
        ('{"partitions": [{"topic": "a", "partition": 0, "replicas": [1, 1]}]}', "twice"),
        ('{"partitions": [{"topic": "a", "partition": 0, "replicas": [true]}]}', "integer"),
        ('{"partitions": [{"topic": "a", "partition": 0, "replicas": [1], "x": 1}]}', "unknown"),
        (
            '{"partitions": [{"topic": "a", "partition": 0, "replicas": [1],'
            ' "log_dirs": ["/data"]}]}',
            "log_dirs",
        ),
        (
            '{"partitions": [{"topic": "a", "partition": 0, "replicas": [1]},'
            ' {"topic": "a", "partition": 0, "replicas": [2]}]}',
            "named twice",
        ),
    ],
)
def test_bad_plans_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(PlanError, match=says):
        parse_plan(text)


def test_topics_to_move() -> None:
    assert parse_topics_to_move('{"version": 1, "topics": [{"topic": "a"}, {"topic": "a"}]}') == [
        "a"
    ]
    with pytest.raises(PlanError):
        parse_topics_to_move('{"topics": [{"name": "a"}]}')


@given(
    partitions=st.integers(min_value=1, max_value=30),
    rf=st.integers(min_value=1, max_value=3),
    brokers=st.sets(st.integers(min_value=1, max_value=9), min_size=3, max_size=6),
    seed=st.integers(min_value=0, max_value=1000),
)
def test_generated_plans_spread_over_the_given_brokers(
    partitions: int, rf: int, brokers: set[int], seed: int
) -> None:
    current = {("t", p): [100 + i for i in range(rf)] for p in range(partitions)}
    usable = [UsableBroker(b, None, False) for b in sorted(brokers)]
    moves = generate(current, ["t"], usable, random.Random(seed))
    assert sorted(m.partition for m in moves) == list(range(partitions))
    assert all(len(m.replicas) == rf and set(m.replicas) <= brokers for m in moves)
    assert all(len(set(m.replicas)) == rf for m in moves)
    leaders = [m.replicas[0] for m in moves]
    counts = [leaders.count(b) for b in brokers]
    assert max(counts) - min(counts) <= 1 or partitions < len(brokers)
    assert moves == generate(current, ["t"], usable, random.Random(seed))  # reproducible
    # With racks, a partition's replicas sit on different racks where it can.
    racked = [UsableBroker(b, f"rack-{b % 2}", False) for b in sorted(brokers)]
    if len({b % 2 for b in brokers}) == 2 and rf <= 2:
        for m in generate(current, ["t"], racked, random.Random(seed)):
            assert len({b % 2 for b in m.replicas}) == rf


def test_generate_refuses_impossible_plans() -> None:
    usable = [UsableBroker(1, None, False)]
    with pytest.raises(PlanError, match="replication factor"):
        generate({("t", 0): [1, 2]}, ["t"], usable, random.Random(0))
    with pytest.raises(PlanError, match="does not exist"):
        generate({("t", 0): [1]}, ["u"], usable, random.Random(0))


def test_throttles_as_the_tool_sets_them() -> None:
    current = {("t", 0): [1, 2], ("t", 1): [2, 3], ("t", 2): [3, 1]}
    moves = [Move("t", 0, (4, 2)), Move("t", 1, (2, 3)), Move("t", 2, (3, 5))]
    wanted = throttles(current, moves, 1000)
    # partition 1 does not move; brokers of moving partitions, old and new, get both rates
    assert sorted(wanted.brokers) == [1, 2, 3, 4, 5]
    assert wanted.brokers[4] == {
        "leader.replication.throttled.rate": "1000",
        "follower.replication.throttled.rate": "1000",
    }
    assert wanted.topics == {
        "t": {
            "leader.replication.throttled.replicas": "0:1,0:2,2:3,2:1",
            "follower.replication.throttled.replicas": "0:4,2:5",
        }
    }
