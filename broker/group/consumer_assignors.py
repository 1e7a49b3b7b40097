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

Cost: when every member subscribes to the same topics (the common case) ``uniform`` is
O(partitions + members log members); otherwise its balancing pass costs O(partitions x members)
per partition moved.
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
    subscriptions = {s.topics for s in members.values()}
    if len(subscriptions) == 1:
        return _uniform_homogeneous(members, partitions, next(iter(subscriptions)))
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


def _uniform_homogeneous(
    members: Mapping[str, MemberSubscription],
    partitions: Mapping[TopicId, int],
    topics: frozenset[TopicId],
) -> dict[str, Assignment]:
    """Every member subscribes to the same topics (Kafka's
    ``UniformHomogeneousAssignmentBuilder``): each gets ``total // members`` partitions, the
    first ``total % members`` of them (those that held the most) one more; each keeps what it
    held up to its quota, the rest go round to those below theirs.  O(partitions + members)."""
    every = [
        (t, p) for t in sorted(topics, key=str) if t in partitions for p in range(partitions[t])
    ]
    order = sorted(members, key=lambda m: (-_held(members[m], partitions), m))
    quota, extra = divmod(len(every), len(order))
    cap = {m: quota + (1 if i < extra else 0) for i, m in enumerate(order)}
    held: dict[str, set[tuple[TopicId, int]]] = {m: set() for m in order}
    taken: set[tuple[TopicId, int]] = set()
    for m in order:
        for topic, ps in sorted(members[m].previous.items(), key=lambda x: str(x[0])):
            for p in sorted(ps):
                tp = (topic, p)
                valid = topic in topics and p < partitions.get(topic, 0) and tp not in taken
                if valid and len(held[m]) < cap[m]:
                    held[m].add(tp)
                    taken.add(tp)
    free = iter(tp for tp in every if tp not in taken)
    for m in order:
        while len(held[m]) < cap[m]:
            held[m].add(next(free))
    return {m: _as_assignment(tps) for m, tps in held.items()}


def _held(sub: MemberSubscription, partitions: Mapping[TopicId, int]) -> int:
    """How many still valid partitions a member held."""
    return sum(
        sum(1 for p in ps if p < partitions.get(t, 0))
        for t, ps in sub.previous.items()
        if t in sub.topics
    )


def _balance(
    held: dict[str, set[tuple[TopicId, int]]],
    owner: dict[tuple[TopicId, int], str],
    eligible: Mapping[TopicId, list[str]],
) -> None:
    """Move one partition at a time from the most loaded member that has one to give to an
    eligible member with at least two fewer (the least loaded such); every move lowers the sum
    of squared loads, so this ends, and no partition moves that need not."""
    while True:
        move = None
        for member_id in sorted(held, key=lambda m: (-len(held[m]), m)):
            for tp in sorted(held[member_id], key=lambda x: (str(x[0]), -x[1])):
                target = min(eligible[tp[0]], key=lambda m: (len(held[m]), m))
                if len(held[member_id]) - len(held[target]) > 1:
                    move = (member_id, tp, target)
                    break
            if move is not None:
                break
        if move is None:
            return
        source, tp, target = move
        held[source].discard(tp)
        held[target].add(tp)
        owner[tp] = target


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
