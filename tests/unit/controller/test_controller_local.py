"""LocalController: commands through the durable metadata log, sync and async, restart,
session expiry, and cancellation during the fsync."""

from __future__ import annotations

import asyncio
import random
import threading
from pathlib import Path

import pytest
from controller_helpers import create, heartbeat, new_topic, registration

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import CreateTopicsResponse
from kraft.controller import ControllerApiError, ControllerConfig
from kraft.quorum.local_controller import LocalController
from metadata_log import log as log_module
from metadata_log.delta import MetadataDelta
from metadata_log.exceptions import MetadataLogFailedError
from metadata_log.image import ClusterImage
from metadata_log.log import LocalMetadataLog


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


def open_controller(directory: Path, clock: FakeClock | None = None) -> LocalController:
    log = LocalMetadataLog.open(directory)
    return LocalController(
        log,
        config=ControllerConfig(num_partitions=3, broker_session_timeout_ms=9000),
        clock=clock or FakeClock(),
        rng=random.Random(4),
    )


async def start_broker(controller: LocalController, broker_id: int = 1) -> None:
    registered = await controller.register_broker(registration(broker_id))
    assert registered.error_code == 0
    beat = await controller.broker_heartbeat(heartbeat(controller.image, broker_id))
    assert not beat.is_fenced


def test_bootstrap_then_restart(tmp_path: Path) -> None:
    controller = open_controller(tmp_path)
    assert controller.image.metadata_version == 25 and controller.log.next_offset == 1
    asyncio.run(start_broker(controller))
    response = asyncio.run(controller.forward(create(new_topic("t", -1, -1))))
    assert response.topics[0].error_code == 0
    image = controller.image
    controller.log.close()
    reopened = open_controller(tmp_path)
    assert reopened.image.topics == image.topics and reopened.image.offset == image.offset
    assert reopened.log.next_offset == image.offset + 1, "bootstrap is written once"


def test_sync_submit(tmp_path: Path) -> None:
    controller = open_controller(tmp_path)
    controller.submit(
        lambda image: controller.controller.handle_register_broker(registration(1), image)
    )
    controller.submit(
        lambda image: controller.controller.handle_broker_heartbeat(heartbeat(image, 1), image)
    )
    response: CreateTopicsResponse = controller.submit(
        lambda image: controller.controller.handle(create(new_topic("t")), image)
    )
    assert response.topics[0].error_code == 0
    assert "t" in controller.image.topics.by_name
    assert [o for o, _ in controller.log.read(0)][-1] == controller.image.offset


def test_validate_only_writes_nothing(tmp_path: Path) -> None:
    controller = open_controller(tmp_path)
    asyncio.run(start_broker(controller))
    end = controller.log.next_offset
    response = asyncio.run(controller.forward(create(new_topic("t"), validate_only=True)))
    assert response.topics[0].error_code == 0 and controller.log.next_offset == end


def test_listeners_see_each_command(tmp_path: Path) -> None:
    controller = open_controller(tmp_path)
    seen: list[tuple[MetadataDelta, ClusterImage]] = []
    loop_thread: list[int] = []

    def listener(delta: MetadataDelta, image: ClusterImage) -> None:
        seen.append((delta, image))
        loop_thread.append(threading.get_ident())

    controller.log.subscribe(listener)

    async def main() -> None:
        await start_broker(controller)
        await controller.forward(create(new_topic("t", 2)))
        assert set(loop_thread) == {threading.get_ident()}, "listeners run on the event loop"

    asyncio.run(main())
    changes = seen[-1][0].local_changes(1)
    assert {tp.topic for tp in changes.leaders} == {"t"} and len(changes.leaders) == 2


def test_sessions_expire(tmp_path: Path) -> None:
    clock = FakeClock()
    controller = open_controller(tmp_path, clock)

    async def main() -> None:
        await start_broker(controller, 1)
        await start_broker(controller, 2)
        await controller.forward(create(new_topic("t", 2, 2)))
        clock.now_ms = 5_000
        await controller.broker_heartbeat(heartbeat(controller.image, 2))
        assert await controller.fence_expired_brokers() == []
        clock.now_ms = 9_500
        assert await controller.fence_expired_brokers() == [1]
        assert controller.image.brokers[1].fenced and not controller.image.brokers[2].fenced
        for p in controller.image.topics.by_name["t"].partitions.values():
            assert p.leader == 2 and p.isr == (2,)
        # A new incarnation may register while the old session is live only after it expired.
        clock.now_ms = 10_000
        assert controller.has_valid_session(2)
        duplicate = await controller.register_broker(registration(2, incarnation=99))
        assert duplicate.error_code != 0
        again = await controller.register_broker(registration(1, incarnation=42))
        assert again.error_code == 0

    asyncio.run(main())


def test_every_registered_broker_gets_a_session_at_startup(tmp_path: Path) -> None:
    clock = FakeClock()
    controller = open_controller(tmp_path, clock)
    asyncio.run(start_broker(controller))
    controller.log.close()
    clock.now_ms = 100_000
    restarted = open_controller(tmp_path, clock)
    assert asyncio.run(restarted.fence_expired_brokers()) == []
    clock.now_ms = 110_000
    assert asyncio.run(restarted.fence_expired_brokers()) == [1]


def test_cancelled_caller_still_completes_the_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    controller = open_controller(tmp_path)
    asyncio.run(start_broker(controller))
    release = threading.Event()
    real_sync = log_module._fdatasync

    def slow_sync(fd: int) -> None:
        release.wait(5)
        real_sync(fd)

    monkeypatch.setattr(log_module, "_fdatasync", slow_sync)

    async def main() -> None:
        task = asyncio.create_task(controller.forward(create(new_topic("t"))))
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.sleep(0.05)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert "t" in controller.image.topics.by_name, "durable and published despite the cancel"
        monkeypatch.setattr(log_module, "_fdatasync", real_sync)
        response = await controller.forward(create(new_topic("u")))
        assert response.topics[0].error_code == 0

    asyncio.run(main())


def test_a_failed_write_publishes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    controller = open_controller(tmp_path)
    asyncio.run(start_broker(controller))
    image = controller.image

    def broken(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(log_module, "_fdatasync", broken)
    with pytest.raises(MetadataLogFailedError):
        asyncio.run(controller.forward(create(new_topic("t"))))
    assert controller.image is image


def test_config_from_properties() -> None:
    config = ControllerConfig.from_properties(
        {"num.partitions": "4", "delete.topic.enable": "false", "log.retention.hours": "1"},
        cluster_id="c1",
    )
    assert (config.num_partitions, config.default_replication_factor) == (4, 1)
    assert (config.delete_topic_enable, config.broker_session_timeout_ms) == (False, 9000)
    assert config.static_broker_config["log.retention.hours"] == "1"
    with pytest.raises(ValueError, match=r"num\.partitions"):
        ControllerConfig.from_properties({"num.partitions": "0"})


def test_allocate_producer_ids_survives_restart(tmp_path: Path) -> None:
    controller = open_controller(tmp_path)
    asyncio.run(start_broker(controller))
    assert asyncio.run(controller.allocate_producer_ids(1)) == (0, 1000)
    assert asyncio.run(controller.allocate_producer_ids(1, 5)) == (1000, 5)
    with pytest.raises(ControllerApiError) as refused:
        asyncio.run(controller.allocate_producer_ids(7))
    assert refused.value.error_code == ErrorCode.STALE_BROKER_EPOCH
    controller.log.close()
    restarted = open_controller(tmp_path)
    asyncio.run(start_broker(restarted))
    assert asyncio.run(restarted.allocate_producer_ids(1)) == (1005, 1000)
