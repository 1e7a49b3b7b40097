"""Which replica a consumer should fetch from (KIP-392), as the leader decides it.

A consumer's Fetch v11+ carries its ``rack_id`` (the client's ``client.rack``).  When the
broker has ``replica.selector.class`` set, the leader of a partition asks the selector for a
replica; if it names a follower, the leader answers that partition with no records and
``preferred_read_replica`` = the follower, and the consumer fetches from it from then on
(followers serve consumers up to their high watermark, see ``broker/handlers/fetch.py``).

Candidates are the followers in the ISR whose log (as the leader last saw it: their fetches
say where it starts and ends) holds the fetch offset, plus the leader itself, as Kafka's
``ReplicaManager.findPreferredReadReplica``.  The one selector Kafka ships,
``RackAwareReplicaSelector``, picks the leader when the client has no rack, when no replica
is in the client's rack, or when the leader is in it; otherwise the most caught-up replica of
the rack (highest log end offset, then the least time since it was last caught up).

Pure: values in, a broker id (or None: keep fetching from the leader) out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

RACK_AWARE_SELECTOR: Final = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
SELECTORS: Final = frozenset({RACK_AWARE_SELECTOR})  # what replica.selector.class accepts


@dataclass(frozen=True, slots=True)
class ReplicaView:
    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int


def rack_aware(client_rack: str, leader: ReplicaView, replicas: Iterable[ReplicaView]) -> int:
    """``RackAwareReplicaSelector.select``: the broker id to read from."""
    if not client_rack:
        return leader.broker_id
    same_rack = [r for r in replicas if r.rack == client_rack]
    if not same_rack or any(r.broker_id == leader.broker_id for r in same_rack):
        return leader.broker_id
    best = max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_caught_up_ms))
    return best.broker_id


@dataclass(frozen=True, slots=True)
class FollowerView:
    """What the leader knows of one follower."""

    broker_id: int
    in_sync: bool
    log_end_offset: int
    last_caught_up_time_ms: int
    log_start_offset: int = -1  # -1: not told yet (Kafka's UNKNOWN_OFFSET)


def preferred_read_replica(
    client_rack: str,
    fetch_offset: int,
    leader_id: int,
    leader_log_end_offset: int,
    followers: Iterable[FollowerView],
    rack_of: Callable[[int], str | None],
    now_ms: int,
) -> int | None:
    """The follower a consumer in ``client_rack`` should read from, or None for the leader."""
    leader = ReplicaView(leader_id, rack_of(leader_id), leader_log_end_offset, 0)
    candidates = [leader]
    for f in followers:
        if f.in_sync and f.log_start_offset <= fetch_offset <= f.log_end_offset:
            since = now_ms - f.last_caught_up_time_ms
            candidates.append(
                ReplicaView(f.broker_id, rack_of(f.broker_id), f.log_end_offset, since)
            )
    chosen = rack_aware(client_rack, leader, candidates)
    return None if chosen == leader_id else chosen
