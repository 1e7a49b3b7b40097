"""The consumer-side requests both shells build, and the answers they read, in one place.

Partitions are named by :class:`~kafka_protocol.client.metadata.TopicPartition` and grouped
per topic in sorted order, as the wire wants them.  Every request is a consumer's: replica id
-1 and read_uncommitted (records up to the high watermark; no transactions here anyway).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final, Protocol, TypeVar

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    FetchRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from kafka_protocol.types import BrokerId, GroupId, TopicName, TopicPartition

CONSUMER_REPLICA_ID: Final = BrokerId(-1)
READ_UNCOMMITTED: Final = 0
NO_EPOCH: Final = -1  # current_leader_epoch: not checked (KIP-320)

V = TypeVar("V")
P = TypeVar("P")


class PartitionKey(Protocol):
    """Any topic-partition pair (the core's, or the metadata image's)."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


K = TypeVar("K", bound=PartitionKey)


def by_topic(values: Mapping[K, V], make: Callable[[K, V], P]) -> dict[str, list[P]]:
    """``make(tp, value)`` for each partition, grouped per topic, in partition order."""
    out: dict[str, list[P]] = {}
    for tp, value in sorted(values.items(), key=lambda item: (item[0].topic, item[0].partition)):
        out.setdefault(tp.topic, []).append(make(tp, value))
    return out


def list_offsets_request(
    timestamps: Mapping[K, int], epochs: Mapping[K, int] | None = None
) -> ListOffsetsRequest:
    """ListOffsets at a timestamp (or EARLIEST -2 / LATEST -1) per partition, with the leader
    epoch the caller knows (KIP-320) when given."""
    known = epochs or {}
    topics = by_topic(
        timestamps,
        lambda tp, ts: ListOffsetsRequest.ListOffsetsPartition(
            partition_index=tp.partition,
            current_leader_epoch=known.get(tp, NO_EPOCH),
            timestamp=ts,
        ),
    )
    return ListOffsetsRequest(
        replica_id=CONSUMER_REPLICA_ID,
        isolation_level=READ_UNCOMMITTED,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=TopicName(t), partitions=ps)
            for t, ps in topics.items()
        ],
    )


def list_offsets_answers(response: ListOffsetsResponse) -> dict[TopicPartition, int | ErrorCode]:
    """Each partition's offset, or its error."""
    out: dict[TopicPartition, int | ErrorCode] = {}
    for topic in response.topics:
        for p in topic.partitions:
            tp = TopicPartition(str(topic.name), p.partition_index)
            error = ErrorCode.from_code(p.error_code)
            out[tp] = p.offset if error is ErrorCode.NONE else error
    return out


def offset_commit_request(
    group_id: str,
    offsets: Mapping[K, int],
    *,
    generation_id: int = -1,
    member_id: str = "",
    metadata: str = "",
) -> OffsetCommitRequest:
    """OffsetCommit of ``offsets`` (the next offset to read); generation -1 and no member id
    is a standalone commit (an admin's, or a consumer outside the group protocol)."""
    topics = by_topic(
        offsets,
        lambda tp, offset: OffsetCommitRequest.OffsetCommitRequestPartition(
            partition_index=tp.partition, committed_offset=offset, committed_metadata=metadata
        ),
    )
    return OffsetCommitRequest(
        group_id=GroupId(group_id),
        generation_id_or_member_epoch=generation_id,
        member_id=member_id,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name=TopicName(t), partitions=ps)
            for t, ps in topics.items()
        ],
    )


def offset_commit_errors(response: OffsetCommitResponse) -> dict[TopicPartition, ErrorCode]:
    """Each partition's outcome (NONE: committed)."""
    return {
        TopicPartition(str(topic.name), p.partition_index): ErrorCode.from_code(p.error_code)
        for topic in response.topics
        for p in topic.partitions
    }


def fetch_request(
    positions: Mapping[K, tuple[int, int]],
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    partition_max_bytes: int,
) -> FetchRequest:
    """A sessionless Fetch (a full fetch outside any KIP-227 session) from each partition's
    (position, leader epoch)."""
    topics = by_topic(
        positions,
        lambda tp, at: FetchRequest.FetchPartition(
            partition=tp.partition,
            current_leader_epoch=at[1],
            fetch_offset=at[0],
            partition_max_bytes=partition_max_bytes,
        ),
    )
    return FetchRequest(
        replica_id=CONSUMER_REPLICA_ID,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=READ_UNCOMMITTED,
        topics=[
            FetchRequest.FetchTopic(topic=TopicName(t), partitions=ps) for t, ps in topics.items()
        ],
    )
