"""What the consumer group operations answer, and the plain functions (no I/O) that compute it:
lag, the per-partition rows of a describe, and the plans of an offset reset.

Lag is Kafka's: the high watermark (the consumer-visible log end) minus the committed offset,
and unknown (``None``, the tool's ``-``) without a committed offset or a high watermark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from metadata_log.image import TopicPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "Coordinator",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "PartitionOffsets",
    "PlannedOffset",
    "ResetResult",
    "ResetTarget",
    "ToEarliest",
    "ToLatest",
    "ToOffset",
    "ToOffsets",
    "ToTimestamp",
    "lag_of",
    "offsets_needed",
    "partition_offsets",
    "plan_reset",
]

LATEST: Final = -1  # ListOffsets timestamps: the high watermark
EARLIEST: Final = -2  # the log start offset


@dataclass(frozen=True, slots=True)
class Coordinator:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    state: str
    protocol_type: str
    coordinator: int  # the broker that listed it
    group_type: str = "classic"  # or "consumer" (KIP-848)


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    # The member's partitions; None when the assignment is not a consumer's (another protocol
    # type, or bytes that do not decode).  Empty until the group is Stable (Kafka).
    assignment: tuple[TopicPartition, ...] | None
    # KIP-848 consumer groups only: the member's epoch and the partitions it moves towards
    member_epoch: int | None = None
    target_assignment: tuple[TopicPartition, ...] | None = None


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    topic: str
    partition: int
    committed: int | None  # None: no committed offset
    high_watermark: int | None  # None: the partition's leader did not answer
    lag: int | None
    member_id: str | None  # the member it is assigned to


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the assignor (consumers) or the protocol; "" unless Stable
    coordinator: Coordinator
    members: tuple[MemberDescription, ...]
    partitions: tuple[PartitionOffsets, ...]
    group_type: str = "classic"  # or "consumer" (KIP-848: the epochs below are its)
    group_epoch: int | None = None
    assignment_epoch: int | None = None

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions if p.lag is not None)


# --- reset targets and plans ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToEarliest:
    """Each partition's log start offset."""


@dataclass(frozen=True, slots=True)
class ToLatest:
    """Each partition's high watermark."""


@dataclass(frozen=True, slots=True)
class ToTimestamp:
    """The first offset whose timestamp is at or after ``timestamp_ms``; the high watermark
    where there is none (Kafka's tool)."""

    timestamp_ms: int

    def __post_init__(self) -> None:
        assert self.timestamp_ms >= 0, self.timestamp_ms


@dataclass(frozen=True, slots=True)
class ToOffset:
    """The same offset for every partition, kept within [log start, high watermark]."""

    offset: int

    def __post_init__(self) -> None:
        assert self.offset >= 0, self.offset


@dataclass(frozen=True, slots=True)
class ToOffsets:
    """An offset per partition (these partitions only), each kept within the log's range."""

    offsets: Mapping[TopicPartition, int]


ResetTarget = ToEarliest | ToLatest | ToTimestamp | ToOffset | ToOffsets


@dataclass(frozen=True, slots=True)
class PlannedOffset:
    topic: str
    partition: int
    previous: int | None  # the committed offset before (None: none)
    offset: int  # the new one


@dataclass(frozen=True, slots=True)
class ResetResult:
    group_id: str
    executed: bool  # False: a dry run, nothing was committed
    partitions: tuple[PlannedOffset, ...]


# --- pure functions ---------------------------------------------------------------------------


def lag_of(committed: int | None, high_watermark: int | None) -> int | None:
    """Kafka's ``getLag``: unknown without a committed offset or a high watermark."""
    if committed is None or committed < 0 or high_watermark is None:
        return None
    return high_watermark - committed


def partition_offsets(
    members: Iterable[MemberDescription],
    committed: Mapping[TopicPartition, int],
    high_watermarks: Mapping[TopicPartition, int | None],
) -> list[PartitionOffsets]:
    """One row per partition that is assigned to a member or has a committed offset (Kafka's
    ``describe --offsets``), sorted by topic and partition."""
    owner = {tp: m.member_id for m in members for tp in m.assignment or ()}
    rows = []
    for tp in sorted(set(owner) | set(committed)):
        offset = committed.get(tp)
        hw = high_watermarks.get(tp)
        rows.append(
            PartitionOffsets(tp.topic, tp.partition, offset, hw, lag_of(offset, hw), owner.get(tp))
        )
    return rows


def offsets_needed(target: ResetTarget) -> tuple[int, ...]:
    """The ListOffsets timestamps a reset to ``target`` needs to know (EARLIEST, LATEST, or
    the target's own timestamp)."""
    if isinstance(target, ToEarliest):
        return (EARLIEST,)
    if isinstance(target, ToLatest):
        return (LATEST,)
    if isinstance(target, ToTimestamp):
        return (target.timestamp_ms, LATEST)
    return (EARLIEST, LATEST)


def plan_reset(
    partitions: Sequence[TopicPartition],
    target: ResetTarget,
    committed: Mapping[TopicPartition, int],
    listed: Mapping[int, Mapping[TopicPartition, int]],
) -> list[PlannedOffset]:
    """The new offset of each partition; ``listed`` holds, for each timestamp of
    :func:`offsets_needed`, every partition's ListOffsets answer."""
    planned = []
    for tp in sorted(partitions):
        if isinstance(target, ToEarliest):
            offset = listed[EARLIEST][tp]
        elif isinstance(target, ToLatest):
            offset = listed[LATEST][tp]
        elif isinstance(target, ToTimestamp):
            found = listed[target.timestamp_ms][tp]
            offset = found if found >= 0 else listed[LATEST][tp]
        else:
            wanted = target.offset if isinstance(target, ToOffset) else target.offsets[tp]
            # Kafka's checkOffsetsRange: below the log start or above the end is moved in.
            offset = max(listed[EARLIEST][tp], min(wanted, listed[LATEST][tp]))
        assert offset >= 0, (tp, target, offset)
        planned.append(PlannedOffset(tp.topic, tp.partition, committed.get(tp), offset))
    return planned
