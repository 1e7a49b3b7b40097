"""A broker reacts to metadata deltas for its own id: opens what it now hosts, reconfigures
what changed, drops what it no longer hosts, and leaves everything else alone."""

from __future__ import annotations

import uuid
from pathlib import Path

from broker.broker import Broker, BrokerConfig
from broker.replication.partition_state import PartitionState
from broker.storage import MemoryStorage
from kafka_protocol.metadata import (
    ConfigRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from kafka_protocol.types import BrokerId
from metadata_log.delta import MetadataDelta
from metadata_log.image import ClusterImage, ConfigResourceType
from metadata_log.records import MetadataRecord

ME = 2


class _NoController:
    pass


def _broker() -> Broker:
    config = BrokerConfig(ME, "127.0.0.1", 0, "127.0.0.1", 0, Path("/data"))
    return Broker(config, MemoryStorage(), _NoController(), ClusterImage.EMPTY, "c")  # type: ignore[arg-type]


def _publish(broker: Broker, records: list[MetadataRecord]) -> MetadataDelta:
    delta = MetadataDelta(broker.image).replay_all(records)
    broker.on_metadata(delta, delta.apply())
    return delta


def _topic(name: str, topic_id: uuid.UUID, replicas: list[list[int]]) -> list[MetadataRecord]:
    records: list[MetadataRecord] = [TopicRecord(name=name, topic_id=topic_id)]
    for index, rs in enumerate(replicas):
        ids = [BrokerId(r) for r in rs]
        records.append(
            PartitionRecord(
                partition_id=index,
                topic_id=topic_id,
                replicas=ids,
                isr=ids,
                leader=ids[0],
                leader_epoch=0,
                partition_epoch=0,
            )
        )
    return records


def test_hosted_partitions_follow_the_deltas() -> None:
    broker = _broker()
    mine, other = uuid.uuid4(), uuid.uuid4()
    _publish(
        broker, _topic("mine", mine, [[ME, 1], [1, 3], [3, ME]]) + _topic("other", other, [[1]])
    )
    assert set(broker.replicas.partitions) == {("mine", 0), ("mine", 2)}
    part = broker.replicas.partitions[("mine", 2)]
    assert part.leader_epoch == 0 and not part.is_leader and part.leader_id == 3

    change = PartitionChangeRecord(partition_id=2, topic_id=mine, leader=ME, isr=[BrokerId(ME)])
    _publish(broker, [change])
    assert broker.replicas.partitions[("mine", 2)] is part, "updated in place, not reopened"
    assert part.leader_epoch == 1 and part.is_leader
    assert isinstance(part.role, PartitionState) and part.role.isr == {ME}

    config = ConfigRecord(
        resource_type=ConfigResourceType.TOPIC,
        resource_name="mine",
        name="retention.ms",
        value="60000",
    )
    _publish(broker, [config])
    assert part.config.retention_ms == 60000
    assert broker.replicas.partitions[("mine", 0)].config.retention_ms == 60000

    leave = PartitionChangeRecord(
        partition_id=0, topic_id=mine, replicas=[BrokerId(1), BrokerId(3)], isr=[BrokerId(1)]
    )
    _publish(broker, [leave])
    assert set(broker.replicas.partitions) == {("mine", 2)}

    _publish(broker, [RemoveTopicRecord(topic_id=mine)])
    assert broker.replicas.partitions == {}


def test_a_delta_not_built_on_the_current_image_reconciles_everything() -> None:
    broker = _broker()
    gone = uuid.uuid4()
    _publish(broker, _topic("gone", gone, [[ME]]))
    assert set(broker.replicas.partitions) == {("gone", 0)}
    # A snapshot: a delta from the empty image to an image without that topic.
    kept = uuid.uuid4()
    delta = MetadataDelta(ClusterImage.EMPTY).replay_all(_topic("kept", kept, [[ME]]))
    broker.on_metadata(delta, delta.apply(offset=100))
    assert set(broker.replicas.partitions) == {("kept", 0)}


def test_init_producer_id_answers_a_retriable_error_when_the_controller_fails() -> None:
    import asyncio

    from broker.controller_channel import ControllerRequestError
    from broker.handlers.basics import InitProducerIdHandler
    from kafka_protocol.errors import ErrorCode
    from kafka_protocol.messages import InitProducerIdRequest

    class Unreachable:
        async def allocate_producer_ids(self, broker_id: int, count: int) -> tuple[int, int]:
            raise ControllerRequestError(ErrorCode.REQUEST_TIMED_OUT)

    from broker.transaction.producer_ids import ProducerIdAllocator

    allocator = ProducerIdAllocator(Unreachable(), ME)  # type: ignore[arg-type]
    handler = InitProducerIdHandler(allocator, None)  # type: ignore[arg-type]
    request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1)
    response = asyncio.run(handler.handle(None, request))  # type: ignore[arg-type]
    assert response.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
