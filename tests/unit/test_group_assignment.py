"""The consumer protocol (kraft/groups/assignment.py): subscription and assignment encodings, and
the range and roundrobin assignors, checked against Kafka's documented examples and against
kafka-python's own codecs and assignors as oracles (a member of either kind may lead a group
the CLI is in)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment as PyAssignment,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolSubscription as PySubscription,
)

from kafka_protocol.messages import ConsumerProtocolSubscription
from kraft.groups.assignment import (
    ASSIGNORS,
    Subscriber,
    assign,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
    roundrobin_assign,
)
from metadata_log.image import TopicPartition

TP = TopicPartition

topic_names = st.text("abcxyz-", min_size=1, max_size=4)
partitions = st.lists(st.builds(TP, topic_names, st.integers(0, 50)), max_size=12)


# --- encodings -----------------------------------------------------------------------------------


@given(st.lists(topic_names, max_size=5), partitions)
def test_subscriptions_round_trip(topics: list[str], owned: list[TopicPartition]) -> None:
    decoded = decode_subscription(encode_subscription(topics, owned))
    assert decoded is not None
    assert decoded.topics == tuple(sorted(set(topics)))
    assert decoded.owned == tuple(sorted(set(owned)))


@given(partitions)
def test_assignments_round_trip(assigned: list[TopicPartition]) -> None:
    assert decode_assignment(encode_assignment(assigned)) == tuple(sorted(set(assigned)))


@given(st.lists(topic_names, max_size=5), st.binary(max_size=8), st.sampled_from([0, 1, 2, 3]))
def test_kafka_python_subscriptions_are_read(topics: list[str], data: bytes, version: int) -> None:
    theirs = PySubscription(version, topics, data).encode()
    decoded = decode_subscription(theirs)
    assert decoded is not None and (decoded.topics, decoded.user_data) == (tuple(topics), data)


@given(partitions)
def test_kafka_python_reads_our_encodings(assigned: list[TopicPartition]) -> None:
    topics = sorted({tp.topic for tp in assigned})
    assert PySubscription.decode(encode_subscription(topics)).topics == topics
    theirs = PyAssignment.decode(encode_assignment(assigned))
    assert sorted((tp.topic, tp.partition) for tp in theirs.partitions()) == sorted(
        {(tp.topic, tp.partition) for tp in assigned}
    )


def test_a_newer_subscription_version_is_read_as_the_newest_known() -> None:
    v3 = ConsumerProtocolSubscription(topics=["t"], generation_id=4, rack_id="r1").encode(3)
    newer = (9).to_bytes(2, "big") + v3 + b"fields of version 9"
    decoded = decode_subscription(newer)
    assert decoded is not None and decoded.topics == ("t",)


@pytest.mark.parametrize("data", [b"", b"\x00", b"\xff\xff\x00\x00", b"\x00\x01\x00\x00\x00\x09"])
def test_what_is_not_a_subscription(data: bytes) -> None:
    assert decode_subscription(data) is None


# --- assignors: Kafka's examples -----------------------------------------------------------------


def members(**topics: str) -> list[Subscriber]:
    return [Subscriber(m, None, frozenset(ts.split(","))) for m, ts in topics.items()]


def flat(assignment: Mapping[str, Sequence[TopicPartition]]) -> dict[str, list[str]]:
    return {m: [f"{tp.topic}{tp.partition}" for tp in tps] for m, tps in assignment.items()}


def test_range_is_per_topic_with_the_first_members_taking_one_more() -> None:
    # RangeAssignor's javadoc: C0 and C1 on t0 and t1 of 3 partitions each.
    got = range_assign(members(C0="t0,t1", C1="t0,t1"), {"t0": 3, "t1": 3})
    assert flat(got) == {"C0": ["t00", "t01", "t10", "t11"], "C1": ["t02", "t12"]}


def test_roundrobin_deals_sorted_partitions_skipping_unsubscribed_members() -> None:
    # RoundRobinAssignor's javadoc: C0 on t0; C1 on t0, t1; C2 on t0, t1, t2.
    got = roundrobin_assign(
        members(C0="t0", C1="t0,t1", C2="t0,t1,t2"), {"t0": 1, "t1": 2, "t2": 3}
    )
    assert flat(got) == {"C0": ["t00"], "C1": ["t10"], "C2": ["t11", "t20", "t21", "t22"]}


def test_static_members_come_first_by_instance_id() -> None:
    group = [
        Subscriber("a-dynamic", None, frozenset({"t"})),
        Subscriber("z-static", "instance-1", frozenset({"t"})),
    ]
    assert flat(range_assign(group, {"t": 2})) == {"z-static": ["t0"], "a-dynamic": ["t1"]}


def test_unknown_topics_and_idle_members_get_nothing() -> None:
    got = range_assign(members(a="t,gone", b="t", c="t"), {"t": 2})
    assert flat(got) == {"a": ["t0"], "b": ["t1"], "c": []}
    encoded = assign("range", members(a="t,gone", b="t", c="t"), {"t": 2})
    assert decode_assignment(encoded["c"]) == ()


# --- assignors: properties, and kafka-python as the oracle ---------------------------------------

groups = st.dictionaries(
    st.text("mnop0123-", min_size=1, max_size=6),
    st.frozensets(st.sampled_from(["t", "u", "v"]), min_size=1),
    min_size=1,
    max_size=6,
)
counts = st.fixed_dictionaries({}, optional={t: st.integers(0, 9) for t in ("t", "u", "v")})


@given(groups, counts, st.sampled_from(sorted(ASSIGNORS)))
def test_every_partition_goes_to_exactly_one_subscriber(
    group: dict[str, frozenset[str]], sizes: dict[str, int], protocol: str
) -> None:
    subscribers = [Subscriber(m, None, ts) for m, ts in group.items()]
    got = ASSIGNORS[protocol](subscribers, sizes)
    assert set(got) == set(group)
    owned = [tp for tps in got.values() for tp in tps]
    wanted = {t for ts in group.values() for t in ts}
    expected = {TP(t, p) for t, n in sizes.items() if t in wanted for p in range(n)}
    assert sorted(owned) == sorted(expected)  # each once
    for m, tps in got.items():
        assert all(tp.topic in group[m] for tp in tps)
    if protocol == "range":  # per topic, shares differ by at most one
        for t in wanted & set(sizes):
            shares = [sum(tp.topic == t for tp in got[m]) for m in group if t in group[m]]
            assert max(shares) - min(shares) <= 1


def agree(theirs: Any, ours: Any, group: dict[str, frozenset[str]], sizes: dict[str, int]) -> None:
    """``ours`` assigns as kafka-python's assignor ``theirs`` does."""

    def partitions_for_topic(topic: str) -> set[int] | None:
        return set(range(sizes[topic])) if topic in sizes else None

    their_answer = theirs.assign(
        SimpleNamespace(partitions_for_topic=partitions_for_topic),
        [
            SimpleNamespace(
                member_id=m, group_instance_id=None, metadata=SimpleNamespace(topics=ts)
            )
            for m, ts in group.items()
        ],
    )
    ours_answer = ours([Subscriber(m, None, ts) for m, ts in group.items()], sizes)
    assert {m: sorted(tps) for m, tps in ours_answer.items()} == {
        m: sorted(TP(t, p) for t, ps in a.assigned_partitions for p in ps)
        for m, a in their_answer.items()
    }


@given(groups, counts)
def test_range_agrees_with_kafka_python(
    group: dict[str, frozenset[str]], sizes: dict[str, int]
) -> None:
    agree(RangePartitionAssignor, range_assign, group, sizes)


@given(groups.map(lambda g: dict.fromkeys(g, frozenset({"t", "u"}))), counts)
def test_roundrobin_agrees_with_kafka_python_on_equal_subscriptions(
    group: dict[str, frozenset[str]], sizes: dict[str, int]
) -> None:
    # kafka-python 3.0's roundrobin raises KeyError when subscriptions differ; Kafka's javadoc
    # example above covers that case.
    agree(RoundRobinPartitionAssignor, roundrobin_assign, group, sizes)
