"""Committed offsets in ``__consumer_offsets`` across real clients and a coordinator failover.

One controller and three brokers; the offsets topic (5 partitions here) is created on the
first FindCoordinator with replication factor 3.  Offsets committed by one client are read
by the others, and survive a kill -9 of the group's coordinator: the new leader of its
``__consumer_offsets`` partition loads them from its replica.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata

from broker.coordinator.records import OFFSETS_TOPIC, partition_for
from integration.cluster_process import wait_for
from kraft.testing import ClusterSpec, KraftCluster

OFFSETS_PARTITIONS = 5

pytestmark = [
    pytest.mark.integration,
    pytest.mark.parametrize(
        "kraft_cluster",
        [
            ClusterSpec(
                brokers=3, overrides={"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)}
            )
        ],
        indirect=True,
        ids=["1c3b"],
    ),
]


@pytest.fixture(scope="module")
def cluster(kraft_cluster: KraftCluster) -> KraftCluster:
    """One controller and three brokers (a killed one is fenced within 3 s), with ``orders``."""
    kraft_cluster.create_topic("orders", partitions=2, replication_factor=3)
    return kraft_cluster


def _confluent(cluster: KraftCluster, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
        }
    )


def _committed(cluster: KraftCluster, group: str) -> list[int]:
    consumer = _confluent(cluster, group)
    try:
        found = consumer.committed([TopicPartition("orders", 0), TopicPartition("orders", 1)], 5)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def test_offsets_committed_by_one_client_are_read_by_another(cluster: KraftCluster) -> None:
    consumer = _confluent(cluster, "shared")
    commits = [TopicPartition("orders", 0, 42, "from librdkafka"), TopicPartition("orders", 1, 7)]
    result = consumer.commit(offsets=commits, asynchronous=False)
    assert [tp.error for tp in result] == [None, None]
    consumer.close()

    other = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id="shared")
    try:
        tp0 = KafkaTopicPartition("orders", 0)
        assert other.committed(tp0) == 42
        assert other.committed(KafkaTopicPartition("orders", 1)) == 7
        other.assign([tp0])
        other.commit({tp0: OffsetAndMetadata(50, "from kafka-python", -1)})
    finally:
        other.close()
    assert _committed(cluster, "shared") == [50, 7]
    assert _committed(cluster, "nobody") == [-1001, -1001], "no offset: librdkafka's INVALID"


def test_commits_of_an_unknown_topic_are_refused(cluster: KraftCluster) -> None:
    consumer = _confluent(cluster, "strays")
    try:
        with pytest.raises(KafkaException) as refused:
            consumer.commit(offsets=[TopicPartition("no-such-topic", 0, 1)], asynchronous=False)
        assert "UNKNOWN_TOPIC_OR_PART" in str(refused.value)
    finally:
        consumer.close()


def test_offsets_survive_a_kill_of_the_coordinator(cluster: KraftCluster) -> None:
    group = "survivor"
    consumer = _confluent(cluster, group)
    consumer.commit(
        offsets=[TopicPartition("orders", 0, 11), TopicPartition("orders", 1, 22)],
        asynchronous=False,
    )
    consumer.close()
    md = (
        AdminClient(cluster.client_config())
        .list_topics(OFFSETS_TOPIC, timeout=5)
        .topics[OFFSETS_TOPIC]
    )
    coordinator = md.partitions[partition_for(group, OFFSETS_PARTITIONS)].leader
    cluster.kill_broker(coordinator)
    started = time.monotonic()
    try:
        found = wait_for(
            "the committed offsets from the new coordinator",
            lambda: _committed(cluster, group) == [11, 22],
            30,
            cluster,
            ignore=(KafkaException, AssertionError, OSError),
        )
        assert found
        assert time.monotonic() - started < 15, "the new coordinator took too long"
    finally:
        cluster.restart_broker(coordinator)


def test_offset_delete_and_deleted_topics_remove_offsets(cluster: KraftCluster) -> None:
    client = AdminClient(cluster.client_config())
    client.create_topics([NewTopic("doomed", 1, 3)])["doomed"].result(timeout=10)
    consumer = _confluent(cluster, "tidy")
    commits = [
        TopicPartition("orders", 0, 3),
        TopicPartition("orders", 1, 4),
        TopicPartition("doomed", 0, 5),
    ]
    consumer.commit(offsets=commits, asynchronous=False)
    consumer.close()

    # OffsetDelete (kafka-python's admin) on an empty group: that offset goes, others stay
    kafka_admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        result = kafka_admin.delete_group_offsets("tidy", [KafkaTopicPartition("orders", 0)])
    finally:
        kafka_admin.close()
    assert [e.__name__ for e in result.values()] == ["NoError"], result
    assert _committed(cluster, "tidy") == [-1001, 4]

    # deleting a topic removes every group's offsets of it
    client.delete_topics(["doomed"])["doomed"].result(timeout=10)

    def doomed_offset_gone() -> bool:
        other = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id="tidy")
        try:
            return other.committed(KafkaTopicPartition("doomed", 0)) is None
        finally:
            other.close()

    wait_for("the deleted topic's offsets to go", doomed_offset_gone, 20, cluster)
    assert _committed(cluster, "tidy") == [-1001, 4], "other topics' offsets stay"
