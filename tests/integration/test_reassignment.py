"""Partition reassignment (KIP-455) on one controller and three brokers as real processes, driven
by kafka-python's ``KafkaAdminClient.alter_partition_reassignments`` /
``list_partition_reassignments`` (confluent-kafka 2.16.1 and aiokafka 0.14.0 have no such
call).

What is asserted is what an operator sees: the partition ends on the target brokers with the
records it had (read back with confluent-kafka from the new leader), the removed brokers delete
their copy, an ongoing move is listed and can be cancelled, and bad requests get Kafka's error
codes with nothing changed.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka.errors
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import NewTopic
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from integration import cluster_process
from integration.cluster_process import LocalCluster, ServerProcess, admin_client

pytestmark = pytest.mark.integration

wait_for = functools.partial(
    cluster_process.wait_for, poll_s=0.05, ignore=(AssertionError, OSError, KeyError)
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = Path(tmp_path_factory.mktemp("reassignment"))
    extra = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}
    cluster = LocalCluster.create(root, 1, 3, extra).start()  # brokers 2, 3, 4
    try:
        yield cluster
    finally:
        cluster.kill_all()


@pytest.fixture(scope="module")
def kp_admin(cluster: LocalCluster) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15000)
    try:
        yield client
    finally:
        client.close()


def create_topic(cluster: LocalCluster, name: str, assignment: list[list[int]]) -> None:
    client = admin_client(cluster)
    topic = NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment)
    client.create_topics([topic])[name].result(timeout=15)
    wait_for(
        "topic everywhere",
        lambda: all(len(partitions(b, name)) == len(assignment) for b in cluster.brokers.values()),
        15,
        cluster,
    )


def partitions(node: ServerProcess, topic: str) -> dict[int, dict[str, Any]]:
    return {p["partition"]: p for p in node.get(f"/v1/topics/{topic}")["partitions"]}


def produce(cluster: LocalCluster, topic: str, count: int, parts: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    failed: list[Any] = []
    for i in range(count):
        producer.produce(
            topic,
            value=f"{topic}-{i}".encode(),
            partition=i % parts,
            on_delivery=lambda err, _m: failed.append(err) if err else None,
        )
    assert producer.flush(30) == 0 and not failed, failed


def read_all(cluster: LocalCluster, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"r-{topic}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([CkTopicPartition(topic, partition, 0)])
    out: list[bytes] = []
    try:
        for _ in range(200):
            for m in consumer.consume(500, 0.2):
                assert m.error() is None, m.error()
                out.append(m.value())
            if len(out) >= count:
                break
    finally:
        consumer.close()
    return out


def has_log(node: ServerProcess, topic: str, partition: int) -> bool:
    return (node.data_dir / "logs" / f"{topic}-{partition}").exists()


def test_partitions_move_onto_the_target_brokers(
    cluster: LocalCluster, kp_admin: KafkaAdminClient
) -> None:
    create_topic(cluster, "moved", [[2, 3], [3, 4]])
    produce(cluster, "moved", 300, 2)
    result = kp_admin.alter_partition_reassignments(
        {TopicPartition("moved", 0): [4, 3], TopicPartition("moved", 1): [2, 4]}
    )
    assert result == {TopicPartition("moved", 0): None, TopicPartition("moved", 1): None}
    broker = cluster.brokers[2]

    def moved() -> bool:
        ps = partitions(broker, "moved")
        return (
            ps[0]["replicas"] == [4, 3]
            and sorted(ps[0]["isr"]) == [3, 4]
            and ps[1]["replicas"] == [2, 4]
            and sorted(ps[1]["isr"]) == [2, 4]
        )

    wait_for("reassignment complete", moved, 30, cluster)
    ps = partitions(broker, "moved")
    assert ps[0]["leader"] == 4  # broker 2 led partition 0 and was removed
    assert kp_admin.list_partition_reassignments() == {}
    # The removed replicas delete their copy; the added ones hold every record.
    wait_for("old copies deleted", lambda: not has_log(cluster.brokers[2], "moved", 0), 15, cluster)
    wait_for("old copies deleted", lambda: not has_log(cluster.brokers[3], "moved", 1), 15, cluster)
    for pid, new_broker in ((0, 4), (1, 2)):
        local = partitions(cluster.brokers[new_broker], "moved")[pid]
        assert local["log_end_offset"] == 150, local
        assert read_all(cluster, "moved", pid, 150) == [
            f"moved-{i}".encode() for i in range(pid, 300, 2)
        ]


def test_ongoing_move_is_listed_and_cancelled(
    cluster: LocalCluster, kp_admin: KafkaAdminClient
) -> None:
    """A target broker that is paused cannot catch up: the move stays listed until cancelled."""
    create_topic(cluster, "stuck", [[2, 3]])
    paused = cluster.brokers[4]
    paused.pause()
    try:
        tp = TopicPartition("stuck", 0)
        assert kp_admin.alter_partition_reassignments({tp: [2, 4]}) == {tp: None}
        listed = kp_admin.list_partition_reassignments()
        assert listed == {
            tp: {"replicas": [2, 4, 3], "adding_replicas": [4], "removing_replicas": [3]}
        }
        assert kp_admin.list_partition_reassignments({"stuck": [0], "nope": [0]}) == listed
        assert kp_admin.alter_partition_reassignments({tp: None}) == {tp: None}
        assert kp_admin.list_partition_reassignments() == {}
        p = partitions(cluster.brokers[2], "stuck")[0]
        assert p["replicas"] == [2, 3] and sorted(p["isr"]) == [2, 3]
        result = kp_admin.alter_partition_reassignments({tp: None})
        assert result == {tp: kafka.errors.NoReassignmentInProgressError}
    finally:
        paused.resume()


def test_bad_reassignments_change_nothing(
    cluster: LocalCluster, kp_admin: KafkaAdminClient
) -> None:
    create_topic(cluster, "kept", [[2, 3]])
    before = partitions(cluster.brokers[3], "kept")
    tp, missing = TopicPartition("kept", 0), TopicPartition("kept", 5)
    unknown = TopicPartition("no-such-topic", 0)
    result = kp_admin.alter_partition_reassignments({tp: [2, 99], missing: [2], unknown: [3]})
    assert result == {
        tp: kafka.errors.InvalidReplicationAssignmentError,
        missing: kafka.errors.UnknownTopicOrPartitionError,
        unknown: kafka.errors.UnknownTopicOrPartitionError,
    }
    result = kp_admin.alter_partition_reassignments({tp: [3, 3]})
    assert result == {tp: kafka.errors.InvalidReplicationAssignmentError}
    after = partitions(cluster.brokers[3], "kept")
    assert after[0]["replicas"] == before[0]["replicas"]
    assert after[0]["leader_epoch"] == before[0]["leader_epoch"]
    assert kp_admin.list_partition_reassignments() == {}
