"""The server-side assignors of consumer groups (``broker.group.consumer_assignors``), by their
properties over random groups: every partition of a subscribed topic goes to exactly one member
subscribed to it; ``uniform`` balances within one partition when every member subscribes to the
same topics and keeps every partition it can (a member leaving moves only its partitions);
``range`` gives each member contiguous ranges, the same numbers of co-partitioned topics."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st

from broker.group.consumer_assignors import ASSIGNORS, MemberSubscription, range_, uniform
from broker.group.consumer_member import Assignment, TopicId

TOPICS = [uuid.UUID(int=i + 1) for i in range(4)]

partition_counts = st.dictionaries(
    st.sampled_from(TOPICS), st.integers(min_value=0, max_value=12), min_size=1
)
member_ids = st.lists(
    st.text("abcdefgh", min_size=1, max_size=4), min_size=1, max_size=8, unique=True
)


def _check_complete(
    members: Mapping[str, MemberSubscription],
    counts: Mapping[TopicId, int],
    result: Mapping[str, Assignment],
) -> None:
    owners: dict[tuple[TopicId, int], str] = {}
    for member_id, assignment in result.items():
        for topic, ps in assignment.items():
            assert topic in members[member_id].topics
            for p in ps:
                assert (topic, p) not in owners
                assert 0 <= p < counts[topic]
                owners[(topic, p)] = member_id
    subscribed = {t for m in members.values() for t in m.topics}
    assert set(owners) == {(t, p) for t in subscribed if t in counts for p in range(counts[t])}


def _size(a: Assignment) -> int:
    return sum(len(ps) for ps in a.values())


@given(
    member_ids,
    partition_counts,
    st.data(),
)
def test_every_assignor_assigns_each_subscribed_partition_once(
    ids: list[str], counts: dict[TopicId, int], data: st.DataObject
) -> None:
    members = {
        m: MemberSubscription(
            frozenset(data.draw(st.sets(st.sampled_from(sorted(counts, key=str)), min_size=1))),
            {},
        )
        for m in ids
    }
    for assignor in ASSIGNORS.values():
        _check_complete(members, counts, assignor(members, counts))


@given(member_ids, partition_counts)
def test_uniform_balances_homogeneous_groups_and_moves_only_what_it_must(
    ids: list[str], counts: dict[TopicId, int]
) -> None:
    topics = frozenset(counts)
    members = {m: MemberSubscription(topics, {}) for m in ids}
    first = uniform(members, counts)
    sizes = [_size(a) for a in first.values()]
    assert max(sizes) - min(sizes) <= 1
    if len(ids) < 2:
        return
    _gone, *rest = ids
    after = uniform({m: MemberSubscription(topics, first[m]) for m in rest}, counts)
    _check_complete({m: MemberSubscription(topics, {}) for m in rest}, counts, after)
    sizes = [_size(a) for a in after.values()]
    assert max(sizes) - min(sizes) <= 1
    for m in rest:  # sticky: the others keep everything they had
        for topic, ps in first[m].items():
            assert ps <= after[m].get(topic, frozenset())


def test_uniform_joining_member_takes_a_fair_share_from_the_others() -> None:
    topic = TOPICS[0]
    counts = {topic: 12}
    members = {m: MemberSubscription(frozenset({topic}), {}) for m in ("a", "b", "c")}
    first = uniform(members, counts)
    grown = {m: MemberSubscription(frozenset({topic}), first[m]) for m in members}
    grown["d"] = MemberSubscription(frozenset({topic}), {})
    second = uniform(grown, counts)
    assert sorted(_size(a) for a in second.values()) == [3, 3, 3, 3]
    moved = sum(len(first[m][topic] - second[m].get(topic, frozenset())) for m in members)
    assert moved == 3  # only d's share moved


def test_range_gives_contiguous_co_partitioned_ranges() -> None:
    a, b = TOPICS[0], TOPICS[1]
    members = {m: MemberSubscription(frozenset({a, b}), {}) for m in ("m1", "m2", "m3")}
    result = range_(members, {a: 7, b: 7})
    assert result["m1"] == {a: frozenset({0, 1, 2}), b: frozenset({0, 1, 2})}
    assert result["m2"] == {a: frozenset({3, 4}), b: frozenset({3, 4})}
    assert result["m3"] == {a: frozenset({5, 6}), b: frozenset({5, 6})}
