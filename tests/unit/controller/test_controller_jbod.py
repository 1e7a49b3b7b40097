"""Several log directories per broker in the controller's rules (KIP-858): AssignReplicasToDirs
records where each replica lives, and a heartbeat naming one directory offline takes away only
the leaderships and ISR memberships of the replicas assigned to it."""

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
from kafka_protocol.messages import AssignReplicasToDirsRequest
from kraft.controller import Controller
from metadata_log.delta import replay_records
from metadata_log.image import DIRECTORY_UNASSIGNED, ClusterImage

R = AssignReplicasToDirsRequest


def dirs_of(broker_id: int) -> tuple[uuid.UUID, uuid.UUID]:
    return uuid.UUID(int=(broker_id << 64) | 0xA), uuid.UUID(int=(broker_id << 64) | 0xB)


@pytest.fixture
def controller() -> Controller:
    return make_controller()


def jbod_cluster(controller: Controller) -> ClusterImage:
    """Brokers 1-3, two log directories each; topic t: 4 partitions on [1, 2, 3], led by 1."""
    image = cluster(controller, {}, unfence=False)
    for b in (1, 2, 3):
        request = registration(b)
        request.log_dirs = list(dirs_of(b))
        image, response = run(controller, image, "handle_register_broker", request)
        assert response.error_code == 0
    for b in (1, 2, 3):
        image, _ = run(controller, image, "handle_broker_heartbeat", heartbeat(image, b))
    topic = new_topic("t", -1, -1, assignments={i: [1, 2, 3] for i in range(4)})
    image, _ = run(controller, image, "handle", create(topic))
    return image


def assign(
    image: ClusterImage, broker_id: int, placement: dict[uuid.UUID, list[int]], epoch: int = -1
) -> R:
    topic_id = image.topics.by_name["t"].topic_id
    return R(
        broker_id=broker_id,
        broker_epoch=image.brokers[broker_id].epoch if epoch < 0 else epoch,
        directories=[
            R.DirectoryData(
                id=d,
                topics=[
                    R.TopicData(
                        topic_id=topic_id,
                        partitions=[R.PartitionData(partition_index=p) for p in ps],
                    )
                ],
            )
            for d, ps in placement.items()
        ],
    )


def errors(response: object) -> dict[int, int]:
    return {
        p.partition_index: p.error_code
        for d in response.directories  # type: ignore[attr-defined]
        for t in d.topics
        for p in t.partitions
    }


def test_assignments_are_recorded_per_replica_and_survive_a_snapshot(
    controller: Controller,
) -> None:
    image = jbod_cluster(controller)
    a, b = dirs_of(1)
    partitions = image.topics.by_name["t"].partitions
    assert partitions[0].directory_of(1) == DIRECTORY_UNASSIGNED
    image, response = run(controller, image, "handle", assign(image, 1, {a: [0, 1], b: [2, 3, 9]}))
    assert response.error_code == 0
    assert errors(response) == {0: 0, 1: 0, 2: 0, 3: 0, 9: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    partitions = image.topics.by_name["t"].partitions
    assert [partitions[i].directory_of(1) for i in range(4)] == [a, a, b, b]
    assert partitions[0].directory_of(2) == DIRECTORY_UNASSIGNED
    # the same again changes nothing; the image rebuilt from its records is the same
    assert controller.handle(assign(image, 1, {a: [0, 1]}), image).records == []
    assert replay_records(ClusterImage.EMPTY, image.to_records()).topics == image.topics
    # a stale broker epoch, an unknown broker
    stale = controller.handle(assign(image, 1, {a: [2]}, epoch=999), image)
    assert stale.records == [] and stale.response.error_code == ErrorCode.STALE_BROKER_EPOCH


def test_a_failed_directory_moves_only_its_replicas(controller: Controller) -> None:
    image = jbod_cluster(controller)
    a, b = dirs_of(1)
    image = apply(image, controller.handle(assign(image, 1, {a: [0, 1], b: [2, 3]}), image))
    assert {p.leader for p in image.topics.by_name["t"].partitions.values()} == {1}
    result = controller.handle_broker_heartbeat(heartbeat(image, 1, offline_log_dirs=[a]), image)
    assert not result.response.is_fenced
    image = apply(image, result)
    partitions = image.topics.by_name["t"].partitions
    for i in (0, 1):  # in the failed directory: led elsewhere, out of the ISR
        assert partitions[i].leader in (2, 3) and 1 not in partitions[i].isr
    for i in (2, 3):  # in the other directory: untouched
        assert partitions[i].leader == 1 and 1 in partitions[i].isr
    broker = image.brokers[1]
    assert broker.directories == (b,) and broker.offline_directories == (a,)
    assert broker.is_active
    # the other directory fails too: now everything goes
    image = apply(
        image,
        controller.handle_broker_heartbeat(heartbeat(image, 1, offline_log_dirs=[a, b]), image),
    )
    assert all(
        p.leader != 1 and 1 not in p.isr for p in image.topics.by_name["t"].partitions.values()
    )
