"""Builders and invariant checks shared by the controller tests."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from typing import Any, TypeVar

from kafka_protocol.messages import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from kraft.controller import Controller, ControllerConfig, ControllerResult
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage

R = TypeVar("R")


def make_controller(seed: int = 0, **config: Any) -> Controller:
    return Controller(ControllerConfig(**config), rng=random.Random(seed))


def apply(image: ClusterImage, result: ControllerResult[Any]) -> ClusterImage:
    """The image after the command's records (one batch)."""
    return replay_records(image, result.records) if result.records else image


def run(
    controller: Controller, image: ClusterImage, handler: str, request: Any
) -> tuple[ClusterImage, Any]:
    result = getattr(controller, handler)(request, image)
    return apply(image, result), result.response


def registration(
    broker_id: int, rack: str | None = None, incarnation: int | None = None
) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id,
        incarnation_id=uuid.UUID(int=incarnation if incarnation is not None else broker_id + 1000),
        listeners=[
            BrokerRegistrationRequest.Listener(name="PLAINTEXT", host=f"b{broker_id}", port=9092)
        ],
        rack=rack,
    )


def heartbeat(image: ClusterImage, broker_id: int, **fields: Any) -> BrokerHeartbeatRequest:
    fields.setdefault("current_metadata_offset", image.offset)
    return BrokerHeartbeatRequest(
        broker_id=broker_id, broker_epoch=image.brokers[broker_id].epoch, **fields
    )


def cluster(
    controller: Controller, racks: Mapping[int, str | None], *, unfence: bool = True
) -> ClusterImage:
    """A bootstrapped cluster with these brokers registered (and unfenced)."""
    image = apply(ClusterImage.EMPTY, controller.bootstrap(ClusterImage.EMPTY))
    for broker_id, rack in racks.items():
        image, response = run(
            controller, image, "handle_register_broker", registration(broker_id, rack)
        )
        assert response.error_code == 0
    if unfence:
        for broker_id in racks:
            image, response = run(
                controller, image, "handle_broker_heartbeat", heartbeat(image, broker_id)
            )
            assert response.error_code == 0 and not response.is_fenced
    return image


def new_topic(
    name: str,
    partitions: int = 1,
    rf: int = 1,
    configs: Mapping[str, str | None] | None = None,
    assignments: Mapping[int, list[int]] | None = None,
) -> CreateTopicsRequest.CreatableTopic:
    return CreateTopicsRequest.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=rf,
        configs=[
            CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
            for k, v in (configs or {}).items()
        ],
        assignments=[
            CreateTopicsRequest.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
            for i, b in (assignments or {}).items()
        ],
    )


def create(
    *topics: CreateTopicsRequest.CreatableTopic, validate_only: bool = False
) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=list(topics), validate_only=validate_only)


def add_partitions(
    name: str, count: int, assignments: list[list[int]] | None = None
) -> CreatePartitionsRequest:
    return CreatePartitionsRequest(
        topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(
                name=name,
                count=count,
                assignments=None
                if assignments is None
                else [
                    CreatePartitionsRequest.CreatePartitionsAssignment(broker_ids=b)
                    for b in assignments
                ],
            )
        ]
    )


def alter(
    resource_type: int, name: str, *ops: tuple[str, int, str | None], validate_only: bool = False
) -> IncrementalAlterConfigsRequest:
    return IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=name,
                configs=[
                    IncrementalAlterConfigsRequest.AlterableConfig(
                        name=k, config_operation=op, value=v
                    )
                    for k, op, v in ops
                ],
            )
        ],
        validate_only=validate_only,
    )


def check_invariants(
    image: ClusterImage, epochs: dict[tuple[uuid.UUID, int], tuple[int, int]]
) -> None:
    """Partition invariants, and leader/partition epochs that never decrease (``epochs`` is
    updated in place across calls)."""
    assert len(image.topics.by_id) == len(image.topics.by_name)
    for name, topic in image.topics.by_name.items():
        assert image.topics.by_id[topic.topic_id] is topic and topic.name == name
        assert sorted(topic.partitions) == list(range(len(topic.partitions)))
        for pid, p in topic.partitions.items():
            assert p.replicas and len(set(p.replicas)) == len(p.replicas)
            assert p.isr and set(p.isr) <= set(p.replicas), (name, pid, p)
            assert p.leader == -1 or p.leader in p.isr, (name, pid, p)
            assert all(r in image.brokers for r in p.replicas)
            key = (topic.topic_id, pid)
            old = epochs.get(key, (-1, -1))
            assert p.leader_epoch >= old[0] and p.partition_epoch >= old[1]
            epochs[key] = (p.leader_epoch, p.partition_epoch)
