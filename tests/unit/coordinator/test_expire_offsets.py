"""The coordinator's expiry pass (Kafka's ``cleanupGroupMetadata``): which tombstones it writes
for one loaded ``__consumer_offsets`` partition, with the append replaced by a list."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from broker.coordinator.owned import OwnedPartition
from broker.coordinator.records import (
    OFFSETS_TOPIC,
    GroupRecord,
    OffsetRecord,
    decode,
    encode_group,
    encode_offset,
)
from broker.coordinator.runtime import CoordinatorConfig, GroupCoordinator
from broker.partition import AppendOutcome
from kafka_protocol.coordinator import GroupMetadataValue, OffsetCommitValue
from kafka_protocol.errors import ErrorCode
from kafka_protocol.record_batch import RecordBatch, set_base_offset

RETENTION_MS = 1_000
NOW_MS = 10_000


class Coordinator(GroupCoordinator):
    """Writes are kept in ``log`` (as committed at once) and their records in ``written``."""

    def __init__(self, now_ms: int) -> None:
        offsets_topic = SimpleNamespace(partitions={0: SimpleNamespace(leader=1)})
        image: Any = SimpleNamespace(topics={OFFSETS_TOPIC: offsets_topic})
        config = CoordinatorConfig(retention_ms=RETENTION_MS)
        no_io: Any = None  # writes are overridden below; the topic exists
        super().__init__(no_io, no_io, lambda: image, config, lambda: now_ms)
        part: Any = SimpleNamespace(index=0, name=f"{OFFSETS_TOPIC}-0")
        self.part = self.owned[0] = OwnedPartition(part, 0, loaded=True)
        self.written: list[object] = []
        self.log: list[RecordBatch] = []
        self.next_offset = 0

    def write(
        self, owned: OwnedPartition, batch: RecordBatch, verification_guard: object = None
    ) -> AppendOutcome:
        base = self.next_offset
        data = bytearray(batch.buf)
        set_base_offset(data, base)
        self.log.append(RecordBatch(memoryview(bytes(data))))
        self.next_offset += batch.last_offset_delta + 1
        if not batch.is_control:
            self.written.extend(decode(r.key or b"", r.value) for r in batch.iter_records())
        return AppendOutcome(ErrorCode.NONE, base)

    def commit(self, group: str, topic: str, at_ms: int) -> None:
        value = OffsetCommitValue(offset=1, metadata="", commit_timestamp=at_ms)
        self.part.replay(*encode_offset(group, topic, 0, value))

    def empty_group(self, group: str, since_ms: int) -> None:
        value = GroupMetadataValue(
            protocol_type="consumer", generation=2, current_state_timestamp=since_ms
        )
        self.part.replay(*encode_group(group, value))  # restored Empty on load


def test_expired_offsets_and_the_empty_groups_they_leave_are_tombstoned() -> None:
    c = Coordinator(NOW_MS)
    c.empty_group("left", since_ms=NOW_MS - RETENTION_MS)  # empty for the whole retention
    c.commit("left", "t", at_ms=NOW_MS - 100)  # recent, but the group is empty: counts from then
    c.empty_group("recent", since_ms=NOW_MS - 10)  # its offsets stay, and so does it
    c.commit("recent", "t", at_ms=0)
    c.empty_group("never-committed", since_ms=NOW_MS - 10)  # nothing to keep it
    c.commit("simple", "t", at_ms=0)  # no group record: a simple consumer's
    c.commit("simple", "u", at_ms=NOW_MS - 10)
    c.classic.on_loaded(c.part)

    removed = asyncio.run(c.expire_offsets())

    assert removed == 2
    assert sorted(map(repr, c.written)) == sorted(
        map(
            repr,
            [
                OffsetRecord("left", "t", 0, None),
                OffsetRecord("simple", "t", 0, None),
                GroupRecord("left", None),
                GroupRecord("never-committed", None),
            ],
        )
    )
    assert sorted(c.classic.groups) == ["recent"]
    assert sorted(c.part.groups) == ["recent"], "a new coordinator would load only it"
    assert c.fetch_offsets("simple", None) == {("u", 0): c.part.offsets.get("simple", ("u", 0))}


def test_a_commit_on_its_way_to_the_log_keeps_its_offset_and_its_group() -> None:
    c = Coordinator(NOW_MS)
    c.empty_group("g", since_ms=0)
    c.commit("g", "t", at_ms=0)
    c.classic.on_loaded(c.part)
    c.part.pending_commits[("g", ("t", 0))] += 1

    assert asyncio.run(c.expire_offsets()) == 0
    assert c.written == [] and "g" in c.classic.groups
