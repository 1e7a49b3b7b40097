"""Broker registration, heartbeats, fencing and controlled shutdown."""

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

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AllocateProducerIdsRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
)
from kafka_protocol.metadata import BrokerRegistrationChangeRecord, RegisterBrokerRecord
from kraft.controller import Controller
from metadata_log.image import ClusterImage

E = ErrorCode


@pytest.fixture
def controller() -> Controller:
    return make_controller()


def test_bootstrap_once(controller: Controller) -> None:
    result = controller.bootstrap(ClusterImage.EMPTY)
    image = apply(ClusterImage.EMPTY, result)
    assert image.metadata_version == 25
    assert controller.bootstrap(image).records == []


def test_registration_epoch_is_the_record_offset(controller: Controller) -> None:
    image = cluster(controller, {}, unfence=False)
    result = controller.handle_register_broker(registration(1, "r1"), image)
    (record,) = result.records
    assert isinstance(record, RegisterBrokerRecord)
    assert result.response.broker_epoch == record.broker_epoch == image.offset + 1
    image = apply(image, result)
    broker = image.brokers[1]
    assert (broker.fenced, broker.rack, broker.listeners[0].host, broker.epoch) == (
        True,
        "r1",
        "b1",
        image.offset,
    )


def test_unfence_only_when_caught_up(controller: Controller) -> None:
    image = cluster(controller, {1: None}, unfence=False)
    behind = controller.handle_broker_heartbeat(
        heartbeat(image, 1, current_metadata_offset=image.offset - 1), image
    )
    assert behind.records == [] and behind.response.is_fenced and not behind.response.is_caught_up
    wants_fence = controller.handle_broker_heartbeat(heartbeat(image, 1, want_fence=True), image)
    assert wants_fence.records == [] and wants_fence.response.is_fenced
    image, response = run(controller, image, "handle_broker_heartbeat", heartbeat(image, 1))
    assert (response.is_caught_up, response.is_fenced, response.should_shut_down) == (
        True,
        False,
        False,
    )
    assert not image.brokers[1].fenced


def test_heartbeat_errors(controller: Controller) -> None:
    image = cluster(controller, {1: None})
    unknown = controller.handle_broker_heartbeat(
        BrokerHeartbeatRequest(broker_id=7, broker_epoch=1), image
    )
    assert unknown.response.error_code == E.BROKER_ID_NOT_REGISTERED
    stale = controller.handle_broker_heartbeat(
        BrokerHeartbeatRequest(broker_id=1, broker_epoch=0), image
    )
    assert stale.response.error_code == E.STALE_BROKER_EPOCH and stale.records == []


def test_registration_errors() -> None:
    controller = make_controller(cluster_id="abc")
    image = cluster(controller, {}, unfence=False)
    wrong = registration(1)
    wrong.cluster_id = "xyz"
    assert (
        controller.handle_register_broker(wrong, image).response.error_code
        == E.INCONSISTENT_CLUSTER_ID
    )
    ok = registration(1)
    ok.cluster_id = "abc"
    image = apply(image, controller.handle_register_broker(ok, image))
    other = registration(1, incarnation=77)
    other.cluster_id = "abc"
    live = controller.handle_register_broker(other, image, lambda broker_id: True)
    assert live.response.error_code == E.DUPLICATE_BROKER_REGISTRATION and live.records == []
    expired = controller.handle_register_broker(other, image, lambda broker_id: False)
    assert expired.response.error_code == 0
    assert apply(image, expired).brokers[1].incarnation_id == uuid.UUID(int=77)
    old = registration(2)
    old.cluster_id = "abc"
    old.features = [
        BrokerRegistrationRequest.Feature(
            name="metadata.version", min_supported_version=1, max_supported_version=7
        )
    ]
    assert (
        controller.handle_register_broker(old, image).response.error_code == E.UNSUPPORTED_VERSION
    )


def test_fencing_moves_leadership_and_shrinks_isr(controller: Controller) -> None:
    image = cluster(controller, {1: None, 2: None, 3: None})
    image, _ = run(controller, image, "handle", create(new_topic("t", 6, 3)))
    before = image.topics.by_name["t"].partitions
    result = controller.handle_fence_brokers([1], image)
    assert result.response == [1]
    assert (
        isinstance(result.records[-1], BrokerRegistrationChangeRecord)
        and result.records[-1].fenced == 1
    )
    image = apply(image, result)
    for pid, p in image.topics.by_name["t"].partitions.items():
        old = before[pid]
        assert 1 not in p.isr and p.leader != 1 and p.leader in p.isr
        assert p.leader_epoch == old.leader_epoch + (old.leader == 1)
        assert p.partition_epoch == old.partition_epoch + 1
    assert controller.handle_fence_brokers([1, 9], image).records == []


def test_last_isr_member_stays_and_leads_again_after_unfencing(controller: Controller) -> None:
    image = cluster(controller, {1: None})
    image, _ = run(controller, image, "handle", create(new_topic("t", 2, 1)))
    image = apply(image, controller.handle_fence_brokers([1], image))
    for p in image.topics.by_name["t"].partitions.values():
        assert (p.leader, p.isr, p.leader_epoch) == (-1, (1,), 1)
    image, response = run(controller, image, "handle_broker_heartbeat", heartbeat(image, 1))
    assert not response.is_fenced
    for p in image.topics.by_name["t"].partitions.values():
        assert (p.leader, p.isr, p.leader_epoch) == (1, (1,), 2)


def test_want_fence_from_an_active_broker(controller: Controller) -> None:
    image = cluster(controller, {1: None, 2: None})
    image, response = run(
        controller, image, "handle_broker_heartbeat", heartbeat(image, 2, want_fence=True)
    )
    assert response.is_fenced and image.brokers[2].fenced


def test_controlled_shutdown(controller: Controller) -> None:
    image = cluster(controller, {1: None, 2: None})
    image, _ = run(controller, image, "handle", create(new_topic("t", 4, 2)))
    leader = image.topics.by_name["t"].partitions[0].leader
    image, response = run(
        controller, image, "handle_broker_heartbeat", heartbeat(image, leader, want_shut_down=True)
    )
    assert (response.is_fenced, response.should_shut_down) == (False, False)
    assert image.brokers[leader].in_controlled_shutdown
    for p in image.topics.by_name["t"].partitions.values():
        assert p.leader != leader and leader not in p.isr
    image, response = run(
        controller, image, "handle_broker_heartbeat", heartbeat(image, leader, want_shut_down=True)
    )
    assert (response.is_fenced, response.should_shut_down) == (True, True)
    assert image.brokers[leader].fenced


def test_shutdown_without_leaderships_is_immediate(controller: Controller) -> None:
    image = cluster(controller, {1: None})
    image, response = run(
        controller, image, "handle_broker_heartbeat", heartbeat(image, 1, want_shut_down=True)
    )
    assert (response.is_fenced, response.should_shut_down) == (True, True)
    fenced_again = controller.handle_broker_heartbeat(
        heartbeat(image, 1, want_shut_down=True), image
    )
    assert fenced_again.records == [] and fenced_again.response.should_shut_down


def test_reregistration_clears_controlled_shutdown(controller: Controller) -> None:
    image = cluster(controller, {1: None, 2: None})
    image, _ = run(controller, image, "handle", create(new_topic("t", 2, 2)))
    leader = image.topics.by_name["t"].partitions[0].leader
    image, _ = run(
        controller, image, "handle_broker_heartbeat", heartbeat(image, leader, want_shut_down=True)
    )
    image, response = run(
        controller, image, "handle_register_broker", registration(leader, incarnation=5)
    )
    broker = image.brokers[leader]
    assert (broker.fenced, broker.in_controlled_shutdown, broker.epoch) == (
        True,
        False,
        response.broker_epoch,
    )


def test_allocate_producer_ids(controller: Controller) -> None:
    image = cluster(controller, {1: None})
    request = AllocateProducerIdsRequest(broker_id=1, broker_epoch=image.brokers[1].epoch)
    image, first = run(controller, image, "handle_allocate_producer_ids", request)
    image, second = run(controller, image, "handle_allocate_producer_ids", request)
    assert (first.producer_id_start, first.producer_id_len) == (0, 1000)
    assert (second.producer_id_start, second.producer_id_len) == (1000, 1000)
    assert image.next_producer_id == 2000
    small = controller.handle_allocate_producer_ids(request, image, block_size=10)
    assert (small.response.producer_id_start, small.response.producer_id_len) == (2000, 10)
    stale = AllocateProducerIdsRequest(broker_id=1, broker_epoch=0)
    refused = controller.handle_allocate_producer_ids(stale, image)
    assert refused.response.error_code == E.STALE_BROKER_EPOCH and refused.records == []
    unknown = AllocateProducerIdsRequest(broker_id=9, broker_epoch=0)
    assert (
        controller.handle_allocate_producer_ids(unknown, image).response.error_code
        == E.STALE_BROKER_EPOCH
    )
