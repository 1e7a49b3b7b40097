"""The server-side assignors of consumer groups (KIP-848), pure functions: ``uniform`` (Kafka's
``UniformAssignor``) and ``range`` (Kafka's ``RangeAssignor``).

An assignor gets every member's subscribed topics (by id) and its previous target assignment,
and the partition count of each subscribed topic; it returns each member's new target.  Both
are deterministic (ties broken by member id), so a replayed or restarted coordinator computes
the same target from the same input.

* ``uniform``: spreads all subscribed partitions so that no two members differ by more than
  one partition among those they could take, moving as few partitions as it can: each member
  first keeps what it had (still subscribed, still existing), free partitions go to the
  eligible member with the fewest, then partitions move from the most loaded member to an
  eligible one with at least two fewer until none can.
* ``range``: per topic, the subscribed members in member id order each take a contiguous
  range, the first ``partitions % members`` one more; topics with the same partition count
  are co-partitioned (a member gets the same partition numbers of each).

Cost: the uniform balancing pass is O(partitions x members) per move round, bounded by the
group size (``group.consumer.max.size``) and the partitions of the subscribed topics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.group.consumer_member import Assignment, TopicId, normalized

UNIFORM = "uniform"
RANGE = "range"
# group.consumer.assignors takes Kafka's class names or these short names
CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE,
    UNIFORM: UNIFORM,
    RANGE: RANGE,
}


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    topics: frozenset[TopicId]
    previous: Assignment


Assignor = Callable[
    [Mapping[str, MemberSubscription], Mapping[TopicId, int]], dict[str, Assignment]
]


def uniform(
    members: Mapping[str, MemberSubscription], partitions: Mapping[TopicId, int]
) -> dict[str, Assignment]:
    owner: dict[tuple[TopicId, int], str] = {}
    held: dict[str, set[tuple[TopicId, int]]] = {m: set() for m in members}
    for member_id in sorted(members):
        sub = members[member_id]
        for topic, ps in sub.previous.items():
            if topic not in sub.topics:
                continue
            for p in ps:
                if p < partitions.get(topic, 0) and (topic, p) not in owner:
                    owner[(topic, p)] = member_id
                    held[member_id].add((topic, p))
    eligible: dict[TopicId, list[str]] = {
        t: sorted(m for m, s in members.items() if t in s.topics) for t in partitions
    }
    for topic in sorted(partitions, key=lambda t: (len(eligible[t]), str(t))):
        for p in range(partitions[topic]):
            if (topic, p) in owner or not eligible[topic]:
                continue
            member_id = min(eligible[topic], key=lambda m: (len(held[m]), m))
            owner[(topic, p)] = member_id
            held[member_id].add((topic, p))
    _balance(held, owner, eligible)
    return {m: _as_assignment(tps) for m, tps in held.items()}


def _balance(
    held: dict[str, set[tuple[TopicId, int]]],
    owner: dict[tuple[TopicId, int], str],
    eligible: Mapping[TopicId, list[str]],
) -> None:
    """Move partitions from loaded members to eligible ones with at least two fewer; every
    move lowers the sum of squared loads, so this ends."""
    moved = True
    while moved:
        moved = False
        for member_id in sorted(held, key=lambda m: (-len(held[m]), m)):
            for tp in sorted(held[member_id], key=lambda x: (str(x[0]), -x[1])):
                target = min(eligible[tp[0]], key=lambda m: (len(held[m]), m))
                if len(held[member_id]) - len(held[target]) > 1:
                    held[member_id].discard(tp)
                    held[target].add(tp)
                    owner[tp] = target
                    moved = True
            if moved:
                break


def range_(
    members: Mapping[str, MemberSubscription], partitions: Mapping[TopicId, int]
) -> dict[str, Assignment]:
    result: dict[str, dict[TopicId, set[int]]] = {m: {} for m in members}
    for topic, count in partitions.items():
        subscribed = sorted(m for m, s in members.items() if topic in s.topics)
        if not subscribed:
            continue
        quota, extra = divmod(count, len(subscribed))
        start = 0
        for i, member_id in enumerate(subscribed):
            size = quota + (1 if i < extra else 0)
            result[member_id][topic] = set(range(start, start + size))
            start += size
    return {m: normalized(a) for m, a in result.items()}


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform, RANGE: range_}


def _as_assignment(tps: set[tuple[TopicId, int]]) -> Assignment:
    out: dict[TopicId, set[int]] = {}
    for topic, p in tps:
        out.setdefault(topic, set()).add(p)
    return normalized(out)
