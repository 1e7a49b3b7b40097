"""KIP-951: where a partition's leader is, told to a client that asked the wrong replica.

Fetch v16+ and Produce v10+ answer NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH with the
partition's current leader and epoch (from this broker's metadata image) and, once per
response, the address of each leader named (on the listener the request came in on), so the
client moves the partition to the new leader without a Metadata round trip.  A leader this
broker cannot name (none elected, no endpoint on that listener) is left out, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kafka_protocol.errors import ErrorCode
from metadata_log.image import ClusterImage

LEADER_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})


@dataclass(frozen=True, slots=True)
class LeaderEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None


class LeaderHints:
    """``endpoint_of(broker, session listener)``: a broker's address as a client on that
    listener reaches it (None: it has none there)."""

    def __init__(
        self,
        image: Callable[[], ClusterImage],
        endpoint_of: Callable[[int, str], tuple[str, int] | None],
    ) -> None:
        self.image = image
        self.endpoint_of = endpoint_of

    def current_leader(self, error: int, topic: str, partition: int) -> tuple[int, int] | None:
        """(leader id, leader epoch) of the partition for an answer with ``error``; None when
        the error says nothing of leadership or there is no leader."""
        if error not in LEADER_ERRORS:
            return None
        p = self.image().topics.partition(topic, partition)
        if p is None or p.leader < 0:
            return None
        return p.leader, p.leader_epoch

    def endpoints(self, broker_ids: Iterable[int], listener: str) -> list[LeaderEndpoint]:
        brokers = self.image().brokers
        out = []
        for b in sorted(set(broker_ids)):
            address = self.endpoint_of(b, listener)
            if address is not None:
                reg = brokers.get(b)
                out.append(LeaderEndpoint(b, address[0], address[1], reg.rack if reg else None))
        return out
