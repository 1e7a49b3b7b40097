"""Offline log directories (KIP-112 / KIP-858) in the controller's rules: a heartbeat naming a
registered directory offline records it, moves the broker's leaderships to in-sync replicas
elsewhere and removes it from the ISRs; Metadata's view of the image follows."""

from __future__ import annotations

import uuid

import pytest
from controller_helpers import (
    apply,
    cluster,
    create,
    heartbeat,
    make_controller,
    new_topic,
    registration,
    run,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.handlers.metadata import partition_error
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import UnregisterBrokerRequest
from kafka_protocol.metadata import BrokerRegistrationChangeRecord, UnregisterBrokerRecord
from kafka_protocol.types import BrokerId
from kraft.controller import Controller
from metadata_log.delta import replay_records
from metadata_log.image import DIRECTORY_LOST, ClusterImage


def dir_of(broker_id: int) -> uuid.UUID:
    return uuid.UUID(int=(broker_id << 64) | 0xD1)


def registered_with_dirs(controller: Controller, brokers: list[int]) -> ClusterImage:
    """A cluster whose brokers registered one log directory each, unfenced."""
    image = cluster(controller, {}, unfence=False)
    for b in brokers:
        request = registration(b)
        request.log_dirs = [dir_of(b)]
        image, response = run(controller, image, "handle_register_broker", request)
        assert response.error_code == 0
    for b in brokers:
        image, response = run(controller, image, "handle_broker_heartbeat", heartbeat(image, b))
        assert not response.is_fenced
    return image


def offline(image: ClusterImage, broker_id: int) -> object:
    return heartbeat(image, broker_id, offline_log_dirs=[dir_of(broker_id)])


@pytest.fixture
def controller() -> Controller:
    return make_controller()


def test_registration_records_the_directories(controller: Controller) -> None:
    image = registered_with_dirs(controller, [1, 2])
    assert image.brokers[1].directories == (dir_of(1),)
    assert image.brokers[1].offline_directories == ()
    assert image.brokers[1].is_active


def test_offline_dir_moves_leaderships_and_shrinks_isrs(controller: Controller) -> None:
    image = registered_with_dirs(controller, [1, 2, 3])
    image, _ = run(controller, image, "handle", create(new_topic("t", 6, 3)))
    before = dict(image.topics.by_name["t"].partitions)
    assert any(p.leader == 1 for p in before.values())
    result = controller.handle_broker_heartbeat(offline(image, 1), image)
    change = result.records[0]
    assert isinstance(change, BrokerRegistrationChangeRecord)
    assert change.log_dirs == [DIRECTORY_LOST] and change.fenced == 0
    assert not result.response.is_fenced  # the broker stays up, unfenced
    image = apply(image, result)
    broker = image.brokers[1]
    assert (broker.directories, broker.offline_directories) == ((), (dir_of(1),))
    assert not broker.is_active and not broker.fenced
    for pid, p in image.topics.by_name["t"].partitions.items():
        assert 1 not in p.isr and p.leader in p.isr and p.leader != 1
        assert p.leader_epoch == before[pid].leader_epoch + (before[pid].leader == 1)
        assert image.is_replica_offline(1) and partition_error(image, p) is ErrorCode.NONE
    # reported again: nothing more to do
    assert controller.handle_broker_heartbeat(offline(image, 1), image).records == []


def test_sole_replica_on_an_offline_dir_loses_its_leader(controller: Controller) -> None:
    image = registered_with_dirs(controller, [1, 2])
    image, _ = run(
        controller, image, "handle", create(new_topic("t", -1, -1, assignments={0: [1]}))
    )
    p = image.topics.by_name["t"].partitions[0]
    assert partition_error(image, p) is ErrorCode.NONE
    image, _ = run(controller, image, "handle_broker_heartbeat", offline(image, 1))
    p = image.topics.by_name["t"].partitions[0]
    assert (p.leader, p.isr) == (-1, (1,))  # the last ISR member stays, as when fenced
    assert partition_error(image, p) is ErrorCode.KAFKA_STORAGE_ERROR
    # other heartbeats (a broker joining) do not elect the broker whose directory is offline
    image, _ = run(controller, image, "handle_broker_heartbeat", heartbeat(image, 2))
    assert image.topics.by_name["t"].partitions[0].leader == -1


def test_leader_on_an_offline_dir_is_a_storage_error_until_it_moves(
    controller: Controller,
) -> None:
    image = registered_with_dirs(controller, [1, 2])
    image, _ = run(
        controller, image, "handle", create(new_topic("t", -1, -1, assignments={0: [1, 2]}))
    )
    # only the directory change replayed (the window before the leadership moves)
    changed = image.brokers[1].with_online_directories(())
    window = replay_records(image, [changed.directories_change()])
    p = window.topics.by_name["t"].partitions[0]
    assert p.leader == 1 and partition_error(window, p) is ErrorCode.KAFKA_STORAGE_ERROR


def test_new_topics_do_not_put_an_offline_broker_in_the_isr(controller: Controller) -> None:
    image = registered_with_dirs(controller, [1, 2])
    image, _ = run(controller, image, "handle_broker_heartbeat", offline(image, 1))
    image, _ = run(controller, image, "handle", create(new_topic("u", 1, 2)))
    p = image.topics.by_name["u"].partitions[0]
    assert p.isr == (2,) and p.leader == 2


def test_reregistration_brings_the_directory_back(controller: Controller) -> None:
    image = registered_with_dirs(controller, [1, 2])
    image, _ = run(
        controller, image, "handle", create(new_topic("t", -1, -1, assignments={0: [1]}))
    )
    image, _ = run(controller, image, "handle_broker_heartbeat", offline(image, 1))
    request = registration(1, incarnation=77)
    request.log_dirs = [dir_of(1)]
    result = controller.handle_register_broker(request, image, lambda _b: False)
    image = apply(image, result)
    assert image.brokers[1].directories == (dir_of(1),)
    assert image.brokers[1].offline_directories == ()
    image, response = run(controller, image, "handle_broker_heartbeat", heartbeat(image, 1))
    assert not response.is_fenced
    assert image.topics.by_name["t"].partitions[0].leader == 1


def test_unknown_offline_dirs_change_nothing(controller: Controller) -> None:
    image = registered_with_dirs(controller, [1])
    request = heartbeat(image, 1, offline_log_dirs=[uuid.uuid4()])
    assert controller.handle_broker_heartbeat(request, image).records == []


@settings(max_examples=50, deadline=None)
@given(
    online=st.lists(st.sampled_from([dir_of(i) for i in range(4)]), unique=True),
    offline=st.lists(st.sampled_from([dir_of(i) for i in range(4)]), unique=True),
)
def test_snapshot_records_rebuild_the_directories(
    online: list[uuid.UUID], offline: list[uuid.UUID]
) -> None:
    controller = make_controller()
    image = cluster(controller, {}, unfence=False)
    request = registration(1)
    request.log_dirs = list(dict.fromkeys([*online, *offline]))
    image, _ = run(controller, image, "handle_register_broker", request)
    gone = [d for d in offline if d not in online]
    if gone:
        changed = image.brokers[1].with_online_directories(
            tuple(d for d in image.brokers[1].directories if d not in gone)
        )
        image = replay_records(image, [changed.directories_change()])
    rebuilt = replay_records(ClusterImage.EMPTY, image.to_records())
    assert rebuilt.brokers[1] == image.brokers[1]


# --- UnregisterBroker -------------------------------------------------------------------------


def test_unregister_refuses_unknown_and_live_brokers(controller: Controller) -> None:
    image = registered_with_dirs(controller, [1, 2])
    unknown = controller.handle(UnregisterBrokerRequest(broker_id=BrokerId(9)), image)
    assert unknown.records == []
    assert unknown.response.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    live = controller.handle(UnregisterBrokerRequest(broker_id=BrokerId(1)), image)
    assert live.records == [] and live.response.error_code == ErrorCode.INVALID_REQUEST
    assert "alive" in (live.response.error_message or "")


def test_unregister_a_fenced_broker(controller: Controller) -> None:
    image = registered_with_dirs(controller, [1, 2, 3])
    image, _ = run(controller, image, "handle", create(new_topic("t", 3, 2)))
    image = apply(image, controller.handle_fence_brokers([1], image))
    result = controller.handle(UnregisterBrokerRequest(broker_id=BrokerId(1)), image)
    assert result.response.error_code == ErrorCode.NONE
    assert isinstance(result.records[-1], UnregisterBrokerRecord)
    image = apply(image, result)
    assert 1 not in image.brokers
    assert image.is_replica_offline(1)  # Metadata lists its replicas as offline
    for p in image.topics.by_name["t"].partitions.values():
        assert p.leader != 1 and 1 not in p.isr  # each had another replica
    # it can register again (a new incarnation) and is a broker like any other
    image, response = run(
        controller, image, "handle_register_broker", registration(1, incarnation=5)
    )
    assert response.error_code == 0 and 1 in image.brokers
