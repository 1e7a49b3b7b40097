"""DeleteRecords on one controller and three brokers (replication factor 3) as real processes,
through the admin clients of confluent-kafka, kafka-python and aiokafka.

The answer comes once every in-sync replica moved its log start offset (the low watermark);
each broker's REST API then shows its own log start, the segments wholly below it are gone
from the leader at once (from followers at their next retention check), and consumers reading
from the beginning start at the new log start.  Bad requests answer Kafka's errors and change
nothing.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from pathlib import Path

import kafka.errors
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import OFFSET_END, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient

from integration import cluster_process
from integration.cluster_process import LocalCluster, ServerProcess, admin_client

pytestmark = pytest.mark.integration

wait_for = functools.partial(
    cluster_process.wait_for, poll_s=0.05, ignore=(AssertionError, OSError, KeyError)
)
RECORDS = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = Path(tmp_path_factory.mktemp("delete-records"))
    # followers delete the segments below their new start at the retention check
    cluster = LocalCluster.create(root, 1, 3, {"log.retention.check.interval.ms": "200"})
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.kill_all()


def create_topic(cluster: LocalCluster, name: str, partitions: int = 1, **configs: str) -> None:
    topic = NewTopic(
        name,
        num_partitions=partitions,
        replication_factor=3,
        config={"internal.segment.bytes": "1024", **configs},
    )
    client = admin_client(cluster)  # the handle must outlive its future
    client.create_topics([topic])[name].result(timeout=15)


def produce(cluster: LocalCluster, topic: str, partition: int, count: int = RECORDS) -> None:
    # one record per batch: a batch must fit in a 1 KiB segment
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "batch.size": 300})
    failed: list[KafkaError] = []
    for i in range(count):
        producer.produce(
            topic,
            b"v" * 100,
            key=str(i).encode(),
            partition=partition,
            on_delivery=lambda err, _: failed.append(err) if err else None,
        )
    assert producer.flush(15) == 0 and not failed, failed


def log_starts(cluster: LocalCluster, topic: str, partition: int) -> dict[int, int]:
    """Each broker's own log start offset of the partition (its REST API)."""
    out = {}
    for broker_id, broker in cluster.brokers.items():
        described = broker.get(f"/v1/topics/{topic}")
        p = next(p for p in described["partitions"] if p["partition"] == partition)
        out[broker_id] = p["log_start_offset"]
    return out


def segment_bases(broker: ServerProcess, topic: str, partition: int) -> list[int]:
    directory = broker.data_dir / "logs" / f"{topic}-{partition}"
    return sorted(int(f.stem) for f in directory.glob("*.log"))


def leader_of(cluster: LocalCluster, topic: str, partition: int) -> int:
    described = cluster.any_broker().get(f"/v1/topics/{topic}")
    leader = next(p for p in described["partitions"] if p["partition"] == partition)["leader"]
    return int(leader)


def first_offset_confluent(cluster: LocalCluster, topic: str, partition: int) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"g-{topic}-{partition}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition)])
        msg = consumer.poll(15)
        assert msg is not None and msg.error() is None, msg and msg.error()
        offset = msg.offset()
        assert offset is not None
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        assert low == offset, (low, offset)
        return offset
    finally:
        consumer.close()


def no_segment_wholly_below(bases: list[int], start: int) -> bool:
    return bases[0] <= start and (len(bases) == 1 or bases[1] > start)


def test_confluent_moves_every_replicas_log_start(cluster: LocalCluster) -> None:
    topic = "dr-confluent"
    create_topic(cluster, topic, partitions=2)
    produce(cluster, topic, 0)
    produce(cluster, topic, 1)
    leader = cluster.brokers[leader_of(cluster, topic, 0)]
    assert len(segment_bases(leader, topic, 0)) > 4

    client = admin_client(cluster)
    futures = client.delete_records(
        [TopicPartition(topic, 0, 40), TopicPartition(topic, 1, OFFSET_END)],
        request_timeout=15,
    )
    results = {tp.partition: f.result(timeout=15) for tp, f in futures.items()}
    assert results[0].low_watermark == 40
    assert results[1].low_watermark == RECORDS  # -1: up to the high watermark
    # answered once every in-sync replica moved its start: no waiting needed here
    assert log_starts(cluster, topic, 0) == dict.fromkeys(cluster.brokers, 40)
    assert log_starts(cluster, topic, 1) == dict.fromkeys(cluster.brokers, RECORDS)
    assert no_segment_wholly_below(segment_bases(leader, topic, 0), 40), "leader: at once"
    for broker in cluster.brokers.values():
        wait_for(
            f"broker {broker.node_id}'s segments below 40 deleted",
            lambda b=broker: no_segment_wholly_below(segment_bases(b, topic, 0), 40),
            10,
            cluster,
        )
    assert first_offset_confluent(cluster, topic, 0) == 40
    produce(cluster, topic, 1, 1)  # partition 1 was emptied: the next record is the first
    assert first_offset_confluent(cluster, topic, 1) == RECORDS


def test_confluent_bad_requests_change_nothing(cluster: LocalCluster) -> None:
    topic = "dr-errors"
    create_topic(cluster, topic)
    produce(cluster, topic, 0, 10)
    compacted = "dr-compacted"
    create_topic(cluster, compacted, **{"cleanup.policy": "compact"})
    produce(cluster, compacted, 0, 10)
    client = admin_client(cluster)

    def error_of(tp: TopicPartition) -> int:
        future = client.delete_records([tp], request_timeout=15)[tp]
        exc = future.exception(timeout=15)
        assert exc is not None, f"{tp} succeeded"
        code = exc.args[0].code()
        assert isinstance(code, int)
        return code

    assert error_of(TopicPartition(topic, 0, 11)) == KafkaError.OFFSET_OUT_OF_RANGE
    assert error_of(TopicPartition(compacted, 0, 5)) == KafkaError.POLICY_VIOLATION
    # (librdkafka looks leaders up first, so an unknown partition never reaches a broker:
    # the broker's answer to one is shown with kafka-python below)
    assert log_starts(cluster, topic, 0) == dict.fromkeys(cluster.brokers, 0)
    assert log_starts(cluster, compacted, 0) == dict.fromkeys(cluster.brokers, 0)
    assert first_offset_confluent(cluster, topic, 0) == 0


def test_kafka_python_deletes_and_a_follower_refuses(cluster: LocalCluster) -> None:
    topic = "dr-kafka-python"
    create_topic(cluster, topic)
    produce(cluster, topic, 0)
    tp = KpTopicPartition(topic, 0)
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15_000)
    try:
        leader = leader_of(cluster, topic, 0)
        follower = next(b for b in cluster.brokers if b != leader)
        with pytest.raises(kafka.errors.NotLeaderForPartitionError):
            client.delete_records({tp: 10}, partition_leader_id=follower)
        with pytest.raises(kafka.errors.OffsetOutOfRangeError):
            client.delete_records({tp: RECORDS + 1})
        for unknown in (KpTopicPartition(topic, 9), KpTopicPartition("dr-no-such-topic", 0)):
            with pytest.raises(kafka.errors.UnknownTopicOrPartitionError):
                client.delete_records({unknown: 1}, partition_leader_id=leader)
        with pytest.raises(kafka.errors.InvalidTopicError):  # internal topics are refused
            client.delete_records(
                {KpTopicPartition("__consumer_offsets", 0): 0}, partition_leader_id=leader
            )
        assert log_starts(cluster, topic, 0) == dict.fromkeys(cluster.brokers, 0)
        result = client.delete_records({tp: 25})
        assert result[tp]["low_watermark"] == 25 and result[tp]["error_code"] == 0
    finally:
        client.close()
    assert log_starts(cluster, topic, 0) == dict.fromkeys(cluster.brokers, 25)
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=15_000,
    )
    try:
        consumer.assign([tp])
        first = next(iter(consumer))
        assert first.offset == 25
        assert consumer.beginning_offsets([tp]) == {tp: 25}
    finally:
        consumer.close()


def test_aiokafka_deletes(cluster: LocalCluster) -> None:
    topic = "dr-aiokafka"
    create_topic(cluster, topic)
    produce(cluster, topic, 0)
    tp = AioTopicPartition(topic, 0)

    async def main() -> tuple[dict[AioTopicPartition, int], int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await admin.start()
        try:
            deleted = await admin.delete_records({tp: RecordsToDelete(33)}, timeout_ms=15_000)
        finally:
            await admin.close()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            first = await asyncio.wait_for(consumer.getone(), 15)
        finally:
            await consumer.stop()
        return deleted, first.offset

    deleted, first = asyncio.run(main())
    assert deleted == {tp: 33}
    assert first == 33
    assert log_starts(cluster, topic, 0) == dict.fromkeys(cluster.brokers, 33)
