"""Offsets of an open transaction across a kill -9 of the group's coordinator.

One controller and three brokers.  A confluent-kafka transactional producer sends a group's
offsets to its transaction, then the broker coordinating the group (the leader of the group's
``__consumer_offsets`` partition) is killed.  The new leader loads the partition with the
offsets pending (the transaction has no marker yet); the producer commits, the transaction
coordinator's COMMIT marker reaches the new leader, and the offsets become the group's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from broker.coordinator.records import OFFSETS_TOPIC, partition_for
from integration.cluster_process import LocalCluster, admin_client, wait_for
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import OffsetFetchRequest

pytestmark = pytest.mark.integration

OFFSETS_PARTITIONS = 5
EXTRA = {
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "transaction.state.log.num.partitions": "5",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = Path(tmp_path_factory.mktemp("txn-offsets-failover"))
    cluster = LocalCluster.create(root, 1, 3, EXTRA).start()
    try:
        client = admin_client(cluster)
        client.create_topics([NewTopic("orders", 2, 3)])["orders"].result(timeout=10)
        yield cluster
    finally:
        cluster.kill_all()


def _committed(cluster: LocalCluster, group: str) -> list[int]:
    """As a read_committed consumer reads them (require_stable: retried while pending)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        found = consumer.committed([TopicPartition("orders", 0), TopicPartition("orders", 1)], 5)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def _stable_errors(cluster: LocalCluster, group: str, dead: int) -> list[int] | None:
    """OffsetFetch v7 with require_stable from the group's coordinator once it is not
    ``dead``: each partition's error (None while there is no such coordinator)."""
    md = admin_client(cluster).list_topics(OFFSETS_TOPIC, timeout=5).topics[OFFSETS_TOPIC]
    leader = md.partitions[partition_for(group, OFFSETS_PARTITIONS)].leader
    if leader in (dead, -1):
        return None
    conn = RawConnection(cluster.brokers[leader].address)
    try:
        Topic = OffsetFetchRequest.OffsetFetchRequestTopic
        request = OffsetFetchRequest(
            group_id=group,
            topics=[Topic(name="orders", partition_indexes=[0, 1])],
            require_stable=True,
        )
        response = conn.request(request, 7)
    finally:
        conn.close()
    if response.error_code != ErrorCode.NONE:
        return None  # loading, or not the coordinator yet
    errors = [p.error_code for t in response.topics for p in t.partitions]
    return errors if all(e != ErrorCode.NONE for e in errors) else None


def test_pending_offsets_survive_a_kill_of_the_group_coordinator(cluster: LocalCluster) -> None:
    group = "txn-survivor"
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": "txn-survivor-tx",
            "transaction.timeout.ms": 60_000,
        }
    )
    producer.init_transactions(30)
    metadata = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": group}
    ).consumer_group_metadata()
    producer.begin_transaction()
    producer.produce("orders", value=b"x", partition=0)
    producer.send_offsets_to_transaction(
        [TopicPartition("orders", 0, 31), TopicPartition("orders", 1, 32)], metadata, 30
    )
    md = admin_client(cluster).list_topics(OFFSETS_TOPIC, timeout=5).topics[OFFSETS_TOPIC]
    victim = cluster.brokers[md.partitions[partition_for(group, OFFSETS_PARTITIONS)].leader]
    victim.kill()
    try:
        # the new coordinator loaded the offsets as pending: unstable, not yet the group's
        unstable = wait_for(
            "the new coordinator to hold the offsets pending",
            lambda: _stable_errors(cluster, group, victim.node_id),
            30,
            cluster,
            ignore=(KafkaException, AssertionError, OSError),
        )
        assert unstable == [ErrorCode.UNSTABLE_OFFSET_COMMIT] * 2
        producer.commit_transaction(60)
        wait_for(
            "the transaction's offsets from the new coordinator",
            lambda: _committed(cluster, group) == [31, 32],
            45,
            cluster,
            ignore=(KafkaException, AssertionError, OSError),
        )
    finally:
        victim.launch()
        victim.wait_ready()
