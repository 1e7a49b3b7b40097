"""BrokerLifecycle against a fake controller: registration, heartbeats, unfencing once the
follower has caught up, re-registration, controlled shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fake_controller import FakeController, broker_record, eventually, running, topic_records

from broker.kafka_client import ControllerClient
from broker.lifecycle import BrokerLifecycle, BrokerLifecycleError
from broker.metadata_follower import MetadataFollower
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest

INCARNATION = uuid.UUID(int=42)


def lifecycle_of(
    client: ControllerClient,
    follower: MetadataFollower,
    heartbeat_interval_ms: int,
    rack: str | None = "r1",
    **options: Any,
) -> BrokerLifecycle:
    """Broker 1 of cluster-a with one PLAINTEXT listener; ``options`` go to BrokerLifecycle."""
    return BrokerLifecycle(
        client,
        follower,
        broker_id=1,
        cluster_id="cluster-a",
        incarnation_id=INCARNATION,
        listeners=[("PLAINTEXT", "127.0.0.1", 9092)],
        rack=rack,
        heartbeat_interval_ms=heartbeat_interval_ms,
        **options,
    )


@contextlib.asynccontextmanager
async def broker(
    fake: FakeController, heartbeat_interval_ms: int
) -> AsyncIterator[BrokerLifecycle]:
    """A follower and a lifecycle of broker 1, both running."""
    client = ControllerClient([fake.address], "broker-1")
    follower = MetadataFollower(client, 1, lambda d, i: None)
    lifecycle = lifecycle_of(client, follower, heartbeat_interval_ms)
    tasks = [asyncio.create_task(follower.run()), asyncio.create_task(lifecycle.run())]
    try:
        yield lifecycle
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        client.close()


def heartbeats(fake: FakeController) -> list[BrokerHeartbeatRequest]:
    out = []
    for _, request in fake.requests_of(63):
        assert isinstance(request, BrokerHeartbeatRequest)
        out.append(request)
    return out


def log_with_registration(fake: FakeController) -> int:
    """A few records, the last of them this broker's registration; its offset."""
    fake.append(topic_records("t", 2))
    return fake.append([broker_record(1, 101)])


def test_registration_carries_listeners_features_and_incarnation() -> None:
    async def scenario() -> None:
        fake = FakeController()
        async with running(fake):
            client = ControllerClient([fake.address], "broker-1")
            lifecycle = lifecycle_of(client, MetadataFollower(client, 1, lambda d, i: None), 100)
            assert await lifecycle.register() == 101 == lifecycle.broker_epoch
            assert lifecycle.registered and lifecycle.is_fenced and not lifecycle.ready
            ((header, request),) = fake.requests_of(62)
            assert isinstance(request, BrokerRegistrationRequest)
            assert header.request_api_version == 4
            assert (request.broker_id, request.cluster_id) == (1, "cluster-a")
            assert request.incarnation_id == INCARNATION and request.rack == "r1"
            (listener,) = request.listeners
            assert (listener.name, listener.host, listener.port) == ("PLAINTEXT", "127.0.0.1", 9092)
            assert listener.security_protocol == 0
            (feature,) = request.features
            assert (feature.name, feature.min_supported_version, feature.max_supported_version) == (
                "metadata.version",
                1,
                25,
            )
            assert request.log_dirs == []
            client.close()

    asyncio.run(scenario())


def test_unfenced_promptly_once_the_follower_has_caught_up() -> None:
    async def scenario() -> None:
        fake = FakeController(max_batches_per_fetch=10, fetch_gate=asyncio.Event())
        fake.unfence_offset = log_with_registration(fake)
        # A 10 s interval: unfencing within a second proves it did not wait for the interval.
        async with running(fake), broker(fake, heartbeat_interval_ms=10_000) as lifecycle:
            await eventually(lambda: len(heartbeats(fake)) >= 1)
            assert lifecycle.is_fenced and not lifecycle.ready
            assert heartbeats(fake)[0].current_metadata_offset == -1
            assert fake.fetch_gate is not None
            fake.fetch_gate.set()  # the follower may now catch up
            await eventually(lambda: lifecycle.ready, timeout_s=1.0)
            last = heartbeats(fake)[-1]
            assert last.current_metadata_offset == fake.unfence_offset
            assert last.broker_epoch == lifecycle.broker_epoch and not last.want_fence
            assert lifecycle.is_caught_up

    asyncio.run(scenario())


def test_stale_broker_epoch_registers_again() -> None:
    async def scenario() -> None:
        fake = FakeController(max_batches_per_fetch=10)
        fake.unfence_offset = log_with_registration(fake)
        async with running(fake), broker(fake, heartbeat_interval_ms=20) as lifecycle:
            await eventually(lambda: lifecycle.ready)
            first_epoch = lifecycle.broker_epoch
            fake.stale_heartbeats = 1  # the controller forgot us (session expired)
            await eventually(lambda: len(fake.requests_of(62)) == 2)
            await eventually(lambda: lifecycle.ready)
            assert lifecycle.broker_epoch == first_epoch + 1
            assert heartbeats(fake)[-1].broker_epoch == lifecycle.broker_epoch

    asyncio.run(scenario())


def test_duplicate_registration_is_retried_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        fake = FakeController(duplicate_registrations=3)
        async with running(fake):
            client = ControllerClient([fake.address], "broker-1")
            lifecycle = lifecycle_of(client, MetadataFollower(client, 1, lambda d, i: None), 100)
            await lifecycle.register()
            assert len(fake.requests_of(62)) == 4
            client.close()

    caplog.set_level(logging.WARNING, logger="broker.lifecycle")
    asyncio.run(scenario())
    warnings = [r for r in caplog.records if r.name == "broker.lifecycle"]
    assert len(warnings) == 1 and "previous incarnation" in warnings[0].getMessage()


def test_a_refused_registration_raises() -> None:
    async def scenario() -> None:
        fake = FakeController(registration_error=ErrorCode.INCONSISTENT_CLUSTER_ID)
        async with running(fake):
            client = ControllerClient([fake.address], "broker-1")
            lifecycle = lifecycle_of(client, MetadataFollower(client, 1, lambda d, i: None), 100)
            with pytest.raises(BrokerLifecycleError, match="INCONSISTENT_CLUSTER_ID"):
                await lifecycle.register()
            client.close()

    asyncio.run(scenario())


def test_controlled_shutdown_heartbeats_until_the_controller_agrees() -> None:
    async def scenario() -> None:
        fake = FakeController(max_batches_per_fetch=10)
        fake.unfence_offset = log_with_registration(fake)
        async with running(fake), broker(fake, heartbeat_interval_ms=50) as lifecycle:
            await eventually(lambda: lifecycle.ready)
            async with asyncio.timeout(1.0):
                await lifecycle.controlled_shutdown()
            assert lifecycle.should_shut_down
            assert heartbeats(fake)[-1].want_shut_down

    asyncio.run(scenario())


def test_controlled_shutdown_ends_at_once_when_no_controller_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every controller refusing the connection (none runs): nothing could move leadership,
    so the shutdown goes on at once instead of waiting for the caller's bound (10 s in a
    node), as it does while a controller that answers has not agreed yet."""

    async def scenario() -> None:
        first, second = FakeController(max_batches_per_fetch=10), FakeController()
        first.unfence_offset = log_with_registration(first)
        await second.start()
        gone = second.address
        await second.close()  # its port now refuses connections
        async with running(first):
            client = ControllerClient([first.address, gone], "broker-1")
            follower = MetadataFollower(client, 1, lambda d, i: None)
            lifecycle = lifecycle_of(client, follower, heartbeat_interval_ms=50)
            tasks = [asyncio.create_task(follower.run()), asyncio.create_task(lifecycle.run())]
            await eventually(lambda: lifecycle.ready)
        # both controllers are gone now
        try:
            async with asyncio.timeout(2.0):
                await lifecycle.controlled_shutdown()
            assert not lifecycle.should_shut_down
            assert client.none_listening()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            client.close()

    caplog.set_level(logging.WARNING, logger="broker.lifecycle")
    asyncio.run(scenario())
    assert any("without a controlled shutdown" in r.getMessage() for r in caplog.records)


def test_controlled_shutdown_waits_while_a_controller_listens() -> None:
    """A controller that accepts connections but does not answer may yet move leadership:
    the shutdown keeps asking (until the caller's bound)."""

    async def scenario() -> None:
        fake = FakeController(max_batches_per_fetch=10)
        fake.unfence_offset = log_with_registration(fake)
        async with running(fake), broker(fake, heartbeat_interval_ms=50) as lifecycle:
            await eventually(lambda: lifecycle.ready)
            fake.hold = {63}  # heartbeats unanswered from now on
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(1.0):
                    await lifecycle.controlled_shutdown()

    asyncio.run(scenario())


def test_a_controller_that_leaves_heartbeats_unanswered_is_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        hung = FakeController(hold={63}, max_batches_per_fetch=10)
        other = FakeController(max_batches_per_fetch=10)
        for fake in (hung, other):
            fake.unfence_offset = log_with_registration(fake)
        async with running(hung, other):
            client = ControllerClient([hung.address, other.address], "broker-1")
            follower = MetadataFollower(client, 1, lambda d, i: None)
            lifecycle = lifecycle_of(
                client, follower, heartbeat_interval_ms=20, rack=None, request_deadline_ms=100
            )
            tasks = [asyncio.create_task(follower.run()), asyncio.create_task(lifecycle.run())]
            # Registered with the hung one, unknown to the other: registers there and unfences.
            await eventually(lambda: lifecycle.ready)
            assert len(hung.requests_of(62)) == 1 and len(other.requests_of(62)) == 1
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            client.close()

    caplog.set_level(logging.WARNING, logger="broker.lifecycle")
    asyncio.run(scenario())
    assert any("no controller answered a heartbeat" in r.getMessage() for r in caplog.records)


class _LogDirs:
    """One log directory, failing on cue."""

    def __init__(self) -> None:
        self.directory_id = uuid.UUID(int=7)
        self.failed = False

    def online_log_dirs(self) -> list[uuid.UUID]:
        return [] if self.failed else [self.directory_id]

    def offline_log_dirs(self) -> list[uuid.UUID]:
        return [self.directory_id] if self.failed else []


def test_registration_carries_the_online_log_directories() -> None:
    async def scenario() -> None:
        fake = FakeController()
        async with running(fake):
            client = ControllerClient([fake.address], "broker-1")
            lifecycle = lifecycle_of(client, MetadataFollower(client, 1, lambda d, i: None), 100)
            lifecycle.log_dirs = _LogDirs()
            await lifecycle.register()
            (_, request), *_ = fake.requests_of(62)
            assert isinstance(request, BrokerRegistrationRequest)
            assert request.log_dirs == [uuid.UUID(int=7)]
            client.close()


class FrozenClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_the_session_lapses_before_a_session_timeout_after_the_last_answered_heartbeat() -> None:
    """The lease: 1 s session timeout, less the 5% margin, from the sending of the last
    answered heartbeat."""

    async def scenario() -> None:
        fake = FakeController()
        clock = FrozenClock()
        async with running(fake):
            client = ControllerClient([fake.address], "broker-1")
            follower = MetadataFollower(client, 1, lambda d, i: None)
            lifecycle = lifecycle_of(
                client,
                follower,
                heartbeat_interval_ms=10,
                rack=None,
                request_deadline_ms=100,
                session_timeout_ms=1000,
                monotonic_clock_s=clock,
            )
            assert not lifecycle.session_lapsed(), "no heartbeat answered yet: nothing to lapse"
            tasks = [asyncio.create_task(follower.run()), asyncio.create_task(lifecycle.run())]
            try:
                # two heartbeats: the first was answered before the second went out at 100.0
                await eventually(lambda: len(heartbeats(fake)) >= 2)
                fake.hold.add(63)  # from now on no heartbeat is answered
                held = len(heartbeats(fake))
                await eventually(lambda: len(heartbeats(fake)) > held)
                clock.now_s = 100.949
                assert not lifecycle.session_lapsed()
                clock.now_s = 100.95  # 0.95 s after the last answered heartbeat was sent
                assert lifecycle.session_lapsed()
                fake.hold.discard(63)  # the next heartbeat (sent at 100.95) is answered
                await eventually(lambda: not lifecycle.session_lapsed())
                clock.now_s = 101.899
                assert not lifecycle.session_lapsed()
                clock.now_s = 101.9
                assert lifecycle.session_lapsed()
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                client.close()

    asyncio.run(scenario())


def test_a_failed_log_directory_is_reported_at_once() -> None:
    async def scenario() -> None:
        fake = FakeController(max_batches_per_fetch=10)
        fake.unfence_offset = log_with_registration(fake)
        log_dirs = _LogDirs()
        # A 10 s interval: a report within a second proves heartbeat_now did not wait for it.
        async with running(fake), broker(fake, heartbeat_interval_ms=10_000) as lifecycle:
            lifecycle.log_dirs = log_dirs
            await eventually(lambda: lifecycle.ready)
            sent = len(heartbeats(fake))
            assert all(h.offline_log_dirs == [] for h in heartbeats(fake))
            log_dirs.failed = True
            lifecycle.heartbeat_now()
            await eventually(lambda: len(heartbeats(fake)) > sent, timeout_s=1.0)
            assert heartbeats(fake)[-1].offline_log_dirs == [log_dirs.directory_id]


def test_without_a_session_timeout_the_session_never_lapses() -> None:
    async def scenario() -> None:
        fake = FakeController()
        async with running(fake), broker(fake, heartbeat_interval_ms=10) as lifecycle:
            await eventually(lambda: len(heartbeats(fake)) >= 2)
            fake.hold.add(63)
            await asyncio.sleep(0.05)
            assert not lifecycle.session_lapsed()

    asyncio.run(scenario())
