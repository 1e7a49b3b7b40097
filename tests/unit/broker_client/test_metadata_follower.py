"""MetadataFollower against a fake controller: catching up over several fetches, loading a
snapshot, refusing a corrupt batch, holding back uncommitted records."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import pytest
from fake_controller import (
    FakeController,
    broker_record,
    config_record,
    eventually,
    running,
    topic_records,
)

from broker.kafka_client import ControllerClient
from broker.metadata_follower import MetadataFollower
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import FetchRequest
from metadata_log.delta import MetadataDelta, replay_records
from metadata_log.image import ClusterImage
from metadata_log.records import MetadataRecord

Updates = list[tuple[MetadataDelta, ClusterImage]]


@contextlib.asynccontextmanager
async def following(
    *fakes: FakeController,
) -> AsyncIterator[tuple[MetadataFollower, Updates]]:
    """A follower of ``fakes`` running in a task; yields it and the updates it published."""
    updates: Updates = []
    client = ControllerClient([fake.address for fake in fakes], "broker-1")
    follower = MetadataFollower(client, 1, lambda d, i: updates.append((d, i)))
    task = asyncio.create_task(follower.run())
    try:
        yield follower, updates
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        client.close()


def fetch_offsets(fake: FakeController) -> list[int]:
    out = []
    for _, request in fake.requests_of(1):
        assert isinstance(request, FetchRequest)
        assert request.replica_id == -1 and request.max_wait_ms == 500
        out.append(request.topics[0].partitions[0].fetch_offset)
    return out


def metadata_batches() -> list[list[MetadataRecord]]:
    return [
        [broker_record(1, 10), broker_record(2, 11)],
        topic_records("orders", partitions=3),
        [config_record("orders", "retention.ms", "1000")],
        topic_records("payments", partitions=1, leader=2),
    ]


def test_follower_catches_up_over_several_fetches_and_matches_a_local_replay() -> None:
    async def scenario() -> None:
        fake = FakeController(max_batches_per_fetch=1)
        for i, records in enumerate(metadata_batches()):
            fake.append(records, epoch=i + 1)
        async with running(fake), following(fake) as (follower, updates):
            await eventually(lambda: follower.caught_up)
            every = [r for batch in metadata_batches() for r in batch]
            expected = replay_records(ClusterImage.EMPTY, every, offset=len(every) - 1, epoch=4)
            assert follower.image == expected
            assert follower.next_offset == len(every) == follower.high_watermark
            assert len(updates) == 4  # one delta per fetch response
            assert [i.offset for _, i in updates] == [1, 5, 6, 8]
            assert updates[1][0].image is updates[0][1]  # each delta starts on the last image
            assert fetch_offsets(fake)[:4] == [0, 2, 6, 7]
            assert await follower.wait_for_offset(8) is follower.image

    asyncio.run(scenario())


def test_new_records_reach_a_caught_up_follower() -> None:
    async def scenario() -> None:
        fake = FakeController(max_batches_per_fetch=10)
        fake.append([broker_record(1, 10)])
        async with running(fake), following(fake) as (follower, updates):
            await eventually(lambda: follower.caught_up)
            assert len(updates) == 1
            fake.append(topic_records("late"))  # answers the follower's long poll
            image = await asyncio.wait_for(follower.wait_for_offset(2), 1.0)
            assert "late" in image.topics.by_name
            assert follower.caught_up

    asyncio.run(scenario())


def test_follower_loads_the_snapshot_the_controller_names() -> None:
    async def scenario() -> None:
        fake = FakeController(max_batches_per_fetch=10, snapshot_chunk_bytes=100)
        in_snapshot = [broker_record(1, 10), *topic_records("old", 4)]
        fake.set_snapshot(in_snapshot, end_offset=20, epoch=3)  # offsets 0-19, compacted
        after = topic_records("new", 2)
        fake.append(after, epoch=3)
        async with running(fake), following(fake) as (follower, updates):
            await eventually(lambda: follower.caught_up)
            snapshot_delta, snapshot_image = updates[0]
            assert snapshot_delta.image is ClusterImage.EMPTY
            assert (snapshot_image.offset, snapshot_image.epoch) == (19, 3)
            assert snapshot_image == replay_records(
                ClusterImage.EMPTY, in_snapshot, offset=19, epoch=3
            )
            assert follower.image == replay_records(snapshot_image, after, offset=22, epoch=3)
            chunks = fake.requests_of(59)
            assert len(chunks) > 1  # the snapshot came in several chunks
            assert fetch_offsets(fake)[:2] == [0, 20]

    asyncio.run(scenario())


def test_a_corrupt_batch_is_not_applied_and_is_fetched_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        fake = FakeController(max_batches_per_fetch=10, corrupt_fetches=1)
        fake.append([broker_record(1, 10)])
        fake.append(topic_records("t", 2))
        async with running(fake), following(fake) as (follower, updates):
            await eventually(lambda: follower.caught_up)
            assert len(updates) == 1  # only the good copy was applied
            assert updates[0][1].offset == 3
            assert fetch_offsets(fake)[:2] == [0, 0]

    asyncio.run(scenario())
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and "CRC" in errors[0].getMessage()


def test_records_above_the_high_watermark_wait() -> None:
    async def scenario() -> None:
        fake = FakeController(max_batches_per_fetch=10)
        fake.append([broker_record(1, 10)])
        fake.append(topic_records("uncommitted"))
        fake.committed_offset = 1  # only offset 0 is committed
        async with running(fake), following(fake) as (follower, _):
            await eventually(lambda: follower.caught_up)
            assert follower.image.offset == 0 and follower.high_watermark == 1
            assert "uncommitted" not in follower.image.topics.by_name
            fake.committed_offset = None
            fake.append([config_record("uncommitted", "k", "v")])
            await asyncio.wait_for(follower.wait_for_offset(3), 1.0)

    asyncio.run(scenario())


def test_fetch_failures_are_retried_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        fake = FakeController(max_batches_per_fetch=10)
        fake.append([broker_record(1, 10)])
        async with running(fake):
            address = fake.address
        # Nothing listens there now: the follower keeps failing, quietly after the first time.
        client = ControllerClient([address], "broker-1")
        follower = MetadataFollower(client, 1, lambda d, i: None, request_deadline_ms=100)
        task = asyncio.create_task(follower.run())
        await asyncio.sleep(0.4)
        assert not task.done() and not follower.caught_up
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        client.close()

    caplog.set_level(logging.WARNING, logger="broker.metadata_follower")
    asyncio.run(scenario())
    warnings = [r for r in caplog.records if r.name == "broker.metadata_follower"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING


def test_an_error_answer_sends_the_follower_to_another_controller() -> None:
    async def scenario() -> None:
        refusing = FakeController(fetch_error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
        serving = FakeController(max_batches_per_fetch=10)
        serving.append([broker_record(1, 10)])
        async with running(refusing, serving), following(refusing, serving) as (follower, _):
            await eventually(lambda: follower.caught_up)
            assert len(refusing.requests_of(1)) == 1
            assert follower.image.offset == 0

    asyncio.run(scenario())
