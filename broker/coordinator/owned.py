"""A ``__consumer_offsets`` partition this broker leads, and what the classic groups need of
the coordinator that owns it.

The runtime (``runtime.py``) owns the partitions and their appends; the classic groups
(``classic_groups.py``) drive group state machines on top.  Both import this module, so
neither imports the other: the groups see the coordinator only through
:class:`OwnedPartitions`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from broker.coordinator.offsets import OffsetStore, TopicPartition
from broker.partition import Partition
from kafka_protocol.coordinator import GroupMetadataValue
from kafka_protocol.errors import ErrorCode


@dataclass(slots=True)
class OwnedPartition:
    """A ``__consumer_offsets`` partition this broker leads."""

    part: Partition
    leader_epoch: int
    offsets: OffsetStore = field(default_factory=OffsetStore)
    groups: dict[str, GroupMetadataValue] = field(default_factory=dict)  # as persisted
    # (group, partition) -> commits appended but not yet committed: they do not expire
    pending_commits: Counter[tuple[str, TopicPartition]] = field(default_factory=Counter)
    loaded: bool = False
    load_task: asyncio.Task[None] | None = None


class OwnedPartitions(Protocol):
    """The coordinator as the classic groups use it: where a group lives, and its appends."""

    def clock_ms(self) -> int: ...

    def owned_for(self, group_id: str) -> OwnedPartition | ErrorCode: ...

    async def append(
        self, owned: OwnedPartition, records: Sequence[tuple[bytes, bytes | None]]
    ) -> ErrorCode: ...
