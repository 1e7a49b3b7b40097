"""Reassignment plans as ``kafka-reassign-partitions.sh`` writes and reads them, the plan it
generates, and the throttle configs it sets (pure: values in, values out; used by ``kraft
reassign`` and the REST API).

Formats (Kafka's, version 1)::

    topics to move   {"version": 1, "topics": [{"topic": "orders"}]}
    a plan           {"version": 1, "partitions": [
                         {"topic": "orders", "partition": 0, "replicas": [4, 2],
                          "log_dirs": ["any", "any"]}]}

``log_dirs`` is optional on input; only ``"any"`` is accepted (moving a replica between the
directories of one broker is AlterReplicaLogDirs, not part of a reassignment here).

Throttles, as the tool's ``--throttle`` sets them: ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` on every broker that holds or will hold a moving
partition, and per topic ``leader.replication.throttled.replicas`` = each moving partition's
current replicas (any of them may lead), ``follower.replication.throttled.replicas`` = its new
replicas. ``--verify`` (once every move is done) and ``--cancel`` clear them again.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kraft.controller.placement import InvalidReplicationFactorError, UsableBroker, place_replicas

PLAN_VERSION: Final = 1
MAX_PLAN_PARTITIONS: Final = 100_000
LEADER_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_RATE: Final = "follower.replication.throttled.rate"
LEADER_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS: Final = "follower.replication.throttled.replicas"
BROKER_THROTTLE_KEYS: Final = (LEADER_RATE, FOLLOWER_RATE)
TOPIC_THROTTLE_KEYS: Final = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

Assignment = Mapping[tuple[str, int], Sequence[int]]  # (topic, partition) -> replicas


class PlanError(ValueError):
    """A plan or topic list that cannot be used; the message says where."""


@dataclass(frozen=True, slots=True)
class Move:
    topic: str
    partition: int
    replicas: tuple[int, ...]

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


# --- formats --------------------------------------------------------------------------------


def plan_json(moves: Iterable[Move]) -> dict[str, Any]:
    return {
        "version": PLAN_VERSION,
        "partitions": [
            {
                "topic": m.topic,
                "partition": m.partition,
                "replicas": list(m.replicas),
                "log_dirs": ["any"] * len(m.replicas),
            }
            for m in sorted(moves, key=lambda m: m.key)
        ],
    }


def assignment_json(assignment: Assignment) -> dict[str, Any]:
    """The current replicas in the plan format (what ``--execute`` prints for a rollback)."""
    return plan_json(Move(t, p, tuple(r)) for (t, p), r in assignment.items())


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"the {what} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PlanError(f"the {what} must be a JSON object")
    version = data.get("version", PLAN_VERSION)
    if version != PLAN_VERSION:
        raise PlanError(f"the {what} has version {version!r}; only {PLAN_VERSION} is known")
    return data


def _int(value: object, where: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PlanError(f"{where} must be an integer >= {minimum}, got {json.dumps(value)}")
    return value


def parse_plan(text: str) -> list[Move]:
    """A reassignment plan; each partition at most once, replicas distinct."""
    data = _load(text, "plan")
    entries = data.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise PlanError('the plan needs a non-empty "partitions" array')
    if len(entries) > MAX_PLAN_PARTITIONS:
        raise PlanError(f"the plan names more than {MAX_PLAN_PARTITIONS} partitions")
    moves: dict[tuple[str, int], Move] = {}
    for i, entry in enumerate(entries):
        where = f"partitions[{i}]"
        if not isinstance(entry, dict):
            raise PlanError(f"{where} must be an object")
        unknown = set(entry) - {"topic", "partition", "replicas", "log_dirs"}
        if unknown:
            raise PlanError(f"{where} has unknown field {sorted(unknown)[0]!r}")
        topic = entry.get("topic")
        if not isinstance(topic, str) or not topic:
            raise PlanError(f"{where}.topic must be a topic name")
        partition = _int(entry.get("partition"), f"{where}.partition")
        replicas = entry.get("replicas")
        if not isinstance(replicas, list) or not replicas:
            raise PlanError(f"{where}.replicas must be a non-empty array of broker ids")
        ids = tuple(_int(b, f"{where}.replicas") for b in replicas)
        if len(set(ids)) != len(ids):
            raise PlanError(f"{where}.replicas names a broker twice: {list(ids)}")
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None and (
            not isinstance(log_dirs, list)
            or len(log_dirs) != len(ids)
            or any(d != "any" for d in log_dirs)
        ):
            raise PlanError(f'{where}.log_dirs must be "any" for each replica')
        if (topic, partition) in moves:
            raise PlanError(f"{where}: {topic}-{partition} is named twice")
        moves[(topic, partition)] = Move(topic, partition, ids)
    return list(moves.values())


def parse_topics_to_move(text: str) -> list[str]:
    data = _load(text, "topics-to-move file")
    topics = data.get("topics")
    if not isinstance(topics, list) or not topics:
        raise PlanError('the topics-to-move file needs a non-empty "topics" array')
    out = []
    for i, entry in enumerate(topics):
        name = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise PlanError(f"topics[{i}].topic must be a topic name")
        out.append(name)
    return list(dict.fromkeys(out))


# --- generating a plan ----------------------------------------------------------------------


def generate(
    current: Assignment,
    topics: Sequence[str],
    brokers: Sequence[UsableBroker],
    rng: random.Random,
) -> list[Move]:
    """Spread every partition of ``topics`` over ``brokers`` (rack-aware, as a topic created
    on them would be), keeping each topic's replication factor."""
    moves = []
    for topic in topics:
        partitions = sorted(p for t, p in current if t == topic)
        if not partitions:
            raise PlanError(f"topic {topic!r} does not exist")
        rf = len(current[(topic, partitions[0])])
        try:
            placed = place_replicas(list(brokers), len(partitions), rf, rng)
        except InvalidReplicationFactorError as exc:
            raise PlanError(f"topic {topic!r}: {exc}") from None
        moves += [Move(topic, p, tuple(r)) for p, r in zip(partitions, placed, strict=True)]
    return moves


# --- throttles ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Throttles:
    """Config values to set: per broker id, and per topic."""

    brokers: dict[int, dict[str, str]]
    topics: dict[str, dict[str, str]]


def throttles(current: Assignment, moves: Iterable[Move], rate_bytes_per_s: int) -> Throttles:
    """What ``--throttle rate`` sets for ``moves`` (partitions whose replicas do not change
    are left alone)."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    involved: set[int] = set()
    for move in sorted(moves, key=lambda m: m.key):
        now = tuple(current.get(move.key, ()))
        if now == move.replicas:
            continue
        involved.update(now, move.replicas)
        leaders.setdefault(move.topic, []).extend(f"{move.partition}:{b}" for b in now)
        added = [b for b in move.replicas if b not in now]
        followers.setdefault(move.topic, []).extend(f"{move.partition}:{b}" for b in added)
    rate = str(rate_bytes_per_s)
    return Throttles(
        brokers={b: {LEADER_RATE: rate, FOLLOWER_RATE: rate} for b in sorted(involved)},
        topics={
            t: {LEADER_REPLICAS: ",".join(leaders[t]), FOLLOWER_REPLICAS: ",".join(followers[t])}
            for t in sorted(leaders)
        },
    )
