"""A ``__consumer_offsets`` partition this broker leads, and what the classic groups need of
the coordinator that owns it.

The runtime (``runtime.py``) owns the partitions and their appends; the classic groups
(``classic_groups.py``) drive group state machines on top.  Both import this module, so
neither imports the other: the groups see the coordinator only through
:class:`OwnedPartitions`.

Replaying the partition's log (on load, and each append once committed) goes through
:meth:`OwnedPartition.replay_batch`: a plain batch's records are applied, a transactional
batch's offset records are held pending under its producer id, and a control batch (a COMMIT or
ABORT marker) completes that producer's transaction (:mod:`broker.coordinator.offsets`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from broker.coordinator.offsets import NO_PRODUCER_ID, OffsetStore, TopicPartition
from broker.coordinator.records import ConsumerGroupRecord, GroupRecord, OffsetRecord, decode
from broker.group.consumer_records import StoredConsumerGroups
from broker.partition import Partition
from kafka_protocol.coordinator import GroupMetadataValue
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.record_batch import ControlRecordType, RecordBatch, control_record_type

log = logging.getLogger("broker.coordinator")


@dataclass(slots=True)
class OwnedPartition:
    """A ``__consumer_offsets`` partition this broker leads."""

    part: Partition
    leader_epoch: int
    offsets: OffsetStore = field(default_factory=OffsetStore)
    groups: dict[str, GroupMetadataValue] = field(default_factory=dict)  # as persisted
    consumer_groups: StoredConsumerGroups = field(default_factory=StoredConsumerGroups)
    # (group, partition) -> commits appended but not yet committed: they do not expire
    pending_commits: Counter[tuple[str, TopicPartition]] = field(default_factory=Counter)
    loaded: bool = False
    tasks: set[asyncio.Task[None]] = field(default_factory=set)  # its load
    # markers reported while loading (written after the load's end offset): applied once loaded
    markers_while_loading: list[tuple[int, bool]] = field(default_factory=list)

    def replay(
        self,
        key: bytes | None,
        value: bytes | None,
        record_offset: int = -1,
        producer_id: int = NO_PRODUCER_ID,
    ) -> int:
        """Apply one data record (1: it was one of ours, 0: skipped)."""
        if key is None:
            return 0
        try:
            record = decode(key, value)
            if isinstance(record, ConsumerGroupRecord):
                self.consumer_groups.apply(record.key_version, record.key, record.value)
        except (ValueError, ProtocolError) as exc:
            log.warning("skipping an undecodable record of %s: %s", self.part.name, exc)
            return 0
        if isinstance(record, OffsetRecord):
            self.offsets.apply(record, record_offset, producer_id)
        elif isinstance(record, GroupRecord):
            # group records are never written transactionally (Kafka's neither)
            if record.value is None:
                self.groups.pop(record.group, None)
            else:
                self.groups[record.group] = record.value
        return 1

    def replay_batch(self, batch: RecordBatch) -> int:
        """Apply one batch read from the log; the count of records applied."""
        if batch.is_control:
            for record in batch.iter_records():
                kind = control_record_type(record)
                if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                    self.offsets.complete(batch.producer_id, kind is ControlRecordType.COMMIT)
            return 0
        producer_id = batch.producer_id if batch.is_transactional else NO_PRODUCER_ID
        return sum(self.replay(r.key, r.value, r.offset, producer_id) for r in batch.iter_records())


class OwnedPartitions(Protocol):
    """The coordinator as the classic groups use it: where a group lives, and its appends."""

    def clock_ms(self) -> int: ...

    def owned_for(self, group_id: str) -> OwnedPartition | ErrorCode: ...

    async def append(
        self, owned: OwnedPartition, records: Sequence[tuple[bytes, bytes | None]]
    ) -> ErrorCode: ...
