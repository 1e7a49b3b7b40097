"""Random controller commands for the metadata simulation (``metadata_sim``).

:func:`next_command` picks one command that makes sense for the committed image it will run
on, using only the seeded ``rng`` it is given, and returns it as a function of the image that
calls a pure ``Controller.handle_*`` method (as ``QuorumController.submit`` takes it). Many
commands are rejected by the controller (a full topic, a stale epoch): those produce no
records and the driver simply moves on, like the real one.
"""

from __future__ import annotations

import functools
import random
import uuid
from collections.abc import Callable
from typing import Any, Final

from kafka_protocol.messages import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka_protocol.types import BrokerId, TopicName
from kraft.controller.controller import Controller
from kraft.controller.result import ControllerResult
from metadata_log.image import ClusterImage, PartitionImage, TopicImage

Command = Callable[[ClusterImage], ControllerResult[Any]]

BROKER_IDS: Final = (1, 2, 3, 4)
RACKS: Final = ("rack-a", "rack-b", "rack-c")
TOPIC_NAMES: Final = tuple(f"topic-{i}" for i in range(6))
MAX_PARTITIONS: Final = 4
TOPIC_RESOURCE: Final = 2  # ConfigResource.Type.TOPIC
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations


def next_command(controller: Controller, image: ClusterImage, rng: random.Random) -> Command:
    """One command for the active controller to run on ``image`` (its committed image)."""
    if not image.metadata_version:
        return controller.bootstrap
    makers: list[tuple[int, Callable[[Controller, ClusterImage, random.Random], Command]]] = [
        (3, _register),
        (6, _heartbeat),
        (4, _create_topic),
        (2, _create_partitions),
        (1, _delete_topic),
        (2, _alter_configs),
        (1, _fence),
        (4, _alter_partition),
    ]
    weights = [w for w, _ in makers]
    (make,) = rng.choices([m for _, m in makers], weights)
    return make(controller, image, rng)


def command_kind(command: Command) -> str:
    """``handle`` (the forwarded requests) (``bootstrap`` for the first command)."""
    return str(getattr(command, "func", command).__name__)


def _register(controller: Controller, image: ClusterImage, rng: random.Random) -> Command:
    broker_id = rng.choice(BROKER_IDS)
    # Mostly the same incarnation (a retried registration); sometimes a restarted broker.
    incarnation = uuid.UUID(int=broker_id * 1000 + rng.choice((0, 0, 0, rng.randrange(1, 9))))
    request = BrokerRegistrationRequest(
        broker_id=BrokerId(broker_id),
        incarnation_id=incarnation,
        listeners=[
            BrokerRegistrationRequest.Listener(name="PLAINTEXT", host=f"b{broker_id}", port=9092)
        ],
        rack=RACKS[broker_id % len(RACKS)],
    )
    return functools.partial(controller.handle_register_broker, request)


def _heartbeat(controller: Controller, image: ClusterImage, rng: random.Random) -> Command:
    if not image.brokers:
        return _register(controller, image, rng)
    broker = image.brokers[rng.choice(sorted(image.brokers))]
    request = BrokerHeartbeatRequest(
        broker_id=BrokerId(broker.id),
        broker_epoch=broker.epoch,
        current_metadata_offset=image.offset - rng.choice((0, 0, 0, 5)),
        want_fence=rng.random() < 0.05,
        want_shut_down=rng.random() < 0.04,
    )
    return functools.partial(controller.handle_broker_heartbeat, request)


def _create_topic(controller: Controller, image: ClusterImage, rng: random.Random) -> Command:
    topic = CreateTopicsRequest.CreatableTopic(
        name=TopicName(rng.choice(TOPIC_NAMES)),
        num_partitions=rng.randint(1, MAX_PARTITIONS - 1),
        replication_factor=rng.randint(1, 3),
        configs=[],
        assignments=[],
    )
    request = CreateTopicsRequest(topics=[topic])
    return functools.partial(controller.handle, request)


def _some_topic(image: ClusterImage, rng: random.Random) -> TopicImage | None:
    names = sorted(image.topics.by_name)
    return image.topics.by_name[rng.choice(names)] if names else None


def _create_partitions(controller: Controller, image: ClusterImage, rng: random.Random) -> Command:
    topic = _some_topic(image, rng)
    if topic is None:
        return _create_topic(controller, image, rng)
    count = min(MAX_PARTITIONS, len(topic.partitions) + rng.randint(1, 2))
    request = CreatePartitionsRequest(
        topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(name=TopicName(topic.name), count=count)
        ]
    )
    return functools.partial(controller.handle, request)


def _delete_topic(controller: Controller, image: ClusterImage, rng: random.Random) -> Command:
    topic = _some_topic(image, rng)
    name = topic.name if topic is not None else rng.choice(TOPIC_NAMES)
    request = DeleteTopicsRequest(
        topics=[DeleteTopicsRequest.DeleteTopicState(name=TopicName(name))]
    )
    return functools.partial(controller.handle, request)


def _alter_configs(controller: Controller, image: ClusterImage, rng: random.Random) -> Command:
    topic = _some_topic(image, rng)
    name = topic.name if topic is not None else rng.choice(TOPIC_NAMES)
    key, value = rng.choice(
        (("retention.ms", str(rng.randrange(60_000, 10**8))), ("cleanup.policy", "compact"))
    )
    op = SET if rng.random() < 0.7 else DELETE
    config = IncrementalAlterConfigsRequest.AlterableConfig(
        name=key, config_operation=op, value=value if op == SET else None
    )
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=TOPIC_RESOURCE, resource_name=name, configs=[config]
    )
    request = IncrementalAlterConfigsRequest(resources=[resource])
    return functools.partial(controller.handle, request)


def _fence(controller: Controller, image: ClusterImage, rng: random.Random) -> Command:
    """Session expiry, as the active controller's maintenance loop decides it."""
    victims = [rng.choice(BROKER_IDS)]
    return functools.partial(controller.handle_fence_brokers, victims)


def _alter_partition(controller: Controller, image: ClusterImage, rng: random.Random) -> Command:
    """A partition leader shrinks its ISR, or expands it with a replica that caught up."""
    led = [
        (topic, pid, p)
        for name in sorted(image.topics.by_name)
        for topic in (image.topics.by_name[name],)
        for pid, p in sorted(topic.partitions.items())
        if p.has_leader
    ]
    if not led:
        return _heartbeat(controller, image, rng)
    topic, pid, partition = rng.choice(led)
    leader = image.brokers[partition.leader]
    request = AlterPartitionRequest(
        broker_id=BrokerId(leader.id),
        broker_epoch=leader.epoch,
        topics=[
            AlterPartitionRequest.TopicData(
                topic_id=topic.topic_id,
                partitions=[_new_isr(partition, pid, rng)],
            )
        ],
    )
    return functools.partial(controller.handle_alter_partition, request)


def _new_isr(
    partition: PartitionImage, pid: int, rng: random.Random
) -> AlterPartitionRequest.PartitionData:
    followers = [b for b in partition.isr if b != partition.leader]
    outside = [b for b in partition.replicas if b not in partition.isr]
    isr = list(partition.isr)
    if outside and (not followers or rng.random() < 0.5):
        isr.append(rng.choice(outside))
    elif followers:
        isr.remove(rng.choice(followers))
    return AlterPartitionRequest.PartitionData(
        partition_index=pid,
        leader_epoch=partition.leader_epoch,
        partition_epoch=partition.partition_epoch,
        new_isr=[BrokerId(b) for b in isr],
    )
