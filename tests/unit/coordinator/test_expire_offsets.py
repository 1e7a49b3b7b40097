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
        image: Any = SimpleNamespace(topics={OFFSETS_TOPIC: offsets_topic}, configs={})
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


def test_an_empty_consumer_group_goes_with_its_last_offset() -> None:
    """KIP-848 groups: an empty one is deleted (its group-level records tombstoned) once its
    offsets expired, as Kafka's ``cleanupGroupMetadata``; one with members stays."""
    import uuid

    from broker.coordinator.records import ConsumerGroupRecord
    from broker.group.consumer import ConsumerGroup, ConsumerGroupConfig
    from kafka_protocol.messages import ConsumerGroupHeartbeatRequest as Heartbeat

    c = Coordinator(NOW_MS)
    topic = (uuid.UUID(int=7), 2)
    for group_id, leaves in (("gone", True), ("busy", False)):
        group = ConsumerGroup(group_id, ConsumerGroupConfig())
        join = Heartbeat(
            group_id=group_id,
            member_id="m",
            member_epoch=0,
            rebalance_timeout_ms=1_000,
            subscribed_topic_names=["t"],
            topic_partitions=[],
        )
        _, records = group.heartbeat(join, "c", "/h", 0, lambda _: topic, "")
        if leaves:
            leave = Heartbeat(group_id=group_id, member_id="m", member_epoch=-1)
            records += group.heartbeat(leave, "c", "/h", 0, lambda _: topic, "")[1]
        for key, value in records:
            c.part.replay(key, value)
        c.commit(group_id, "other-topic", at_ms=0)

    async def load_and_expire() -> int:
        c.consumer.on_loaded(c.part)  # its members' session timers need the loop
        try:
            return await c.expire_offsets()
        finally:
            c.consumer.on_unloaded(c.part)

    removed = asyncio.run(load_and_expire())

    assert removed == 2  # both groups' offsets of a topic nobody subscribes to
    tombstoned = {
        (r.key_version, bytes(r.key))
        for r in c.written
        if isinstance(r, ConsumerGroupRecord) and r.value is None
    }
    assert {version for version, _ in tombstoned} == {3, 4, 6}
    assert all(b"gone" in key for _, key in tombstoned)
    assert "gone" not in c.part.consumer_groups.groups
    assert "busy" in c.part.consumer_groups.groups
