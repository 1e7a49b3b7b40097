"""DescribeCluster, DescribeTopicPartitions (KIP-966) and OffsetDelete through the clients'
admin APIs, on one controller and three brokers as real processes.

kafka-python's ``describe_cluster`` sends DescribeCluster v2 (fenced brokers included, the
cluster's authorized operations asked for) and ``describe_topic_partitions`` pages with a
cursor; confluent-kafka (librdkafka 2.16) and aiokafka describe the cluster and topics through
Metadata, so their answers are the reference the new APIs must agree with.  OffsetDelete is
driven by kafka-python's ``delete_group_offsets`` and read back with confluent-kafka (whose
Python admin has no call for it; librdkafka's own 0081-admin ``do_test_DeleteConsumerGroupOffsets``
runs in ``run_client_suites.py --tests broker``).  The last test kills a broker: DescribeCluster
then lists it fenced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import ACLOperation
from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError
from kafka.errors import KafkaError as KafkaPythonError

from integration.cluster_process import LocalCluster, admin_client, wait_for
from integration.raw_client import RawConnection
from kafka_protocol.messages import DescribeClusterRequest

pytestmark = pytest.mark.integration

TOPICS = {"pages-a": 5, "pages-b": 3}
GROUP = "offset-deleters"
EXTRA = {
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "max.request.partition.size.limit": "4",
}
WAIT_S = 30.0
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST = 3, 42
MISMATCHED_ENDPOINT_TYPE, UNSUPPORTED_ENDPOINT_TYPE = 114, 115


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = Path(tmp_path_factory.mktemp("cluster-description"))
    cluster = LocalCluster.create(root, 1, 3, EXTRA).start()
    try:
        client = admin_client(cluster)
        wait_for(
            "three brokers",
            lambda: len(client.list_topics(timeout=5).brokers) == 3,
            WAIT_S,
            cluster,
        )
        futures = client.create_topics([NewTopic(t, n, 3) for t, n in TOPICS.items()])
        for future in futures.values():
            future.result(timeout=WAIT_S)
        yield cluster
    finally:
        cluster.kill_all()


@pytest.fixture(scope="module")
def kp_admin(cluster: LocalCluster) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10_000)
    try:
        yield admin
    finally:
        admin.close()


def confluent_topics(admin: AdminClient) -> dict[str, list[dict[str, Any]]]:
    futures = admin.describe_topics(TopicCollection(list(TOPICS)))
    described = {name: f.result(timeout=WAIT_S) for name, f in futures.items()}
    return {
        name: [
            {
                "partition_index": p.id,
                "leader_id": p.leader.id if p.leader else -1,
                "replica_nodes": sorted(r.id for r in p.replicas),
                "isr_nodes": sorted(r.id for r in p.isr),
            }
            for p in d.partitions
        ]
        for name, d in described.items()
    }


def operations(bits: int) -> set[str]:
    """KIP-430's bit field as kafka-python names the operations."""
    assert bits >= 0, f"no authorized operations in the answer: {bits}"
    return {op.name for op in ACLOperation if bits & (1 << op.value)}


def comparable(partition: dict[str, Any]) -> dict[str, Any]:
    return {
        "partition_index": partition["partition_index"],
        "leader_id": partition["leader_id"],
        "replica_nodes": sorted(partition["replica_nodes"]),
        "isr_nodes": sorted(partition["isr_nodes"]),
    }


# --- DescribeCluster -----------------------------------------------------------------------------


def test_describe_cluster_lists_every_broker_as_metadata_does(
    cluster: LocalCluster, kp_admin: KafkaAdminClient
) -> None:
    described = kp_admin.describe_cluster()  # DescribeCluster v2
    brokers = {b["broker_id"]: b for b in described["brokers"]}
    assert set(brokers) == set(cluster.brokers)
    for broker_id, node in cluster.brokers.items():
        assert f"{brokers[broker_id]['host']}:{brokers[broker_id]['port']}" == node.address
        assert brokers[broker_id]["rack"] is not None
        assert brokers[broker_id]["is_fenced"] is False
    assert described["controller_id"] in brokers
    # no authorizer: every cluster operation (Kafka's AuthHelper without an authorizer)
    assert set(described["authorized_operations"]) >= {  # kafka-python names the bits
        "DESCRIBE",
        "ALTER",
        "CLUSTER_ACTION",
        "CREATE",
    }

    admin = admin_client(cluster)  # kept: a collected client cancels its futures
    reference = admin.describe_cluster().result(timeout=WAIT_S)  # through Metadata
    assert described["cluster_id"] == reference.cluster_id
    assert {n.id: n.rack for n in reference.nodes} == {i: b["rack"] for i, b in brokers.items()}

    async def aio() -> dict[str, Any]:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await admin.start()
        try:
            return await admin.describe_cluster()
        finally:
            await admin.close()

    via_aiokafka = asyncio.run(aio())
    assert via_aiokafka["cluster_id"] == described["cluster_id"]
    assert {b["node_id"] for b in via_aiokafka["brokers"]} == set(brokers)


def test_describe_cluster_refuses_a_controllers_request_on_a_broker(cluster: LocalCluster) -> None:
    """KIP-919: a broker describes brokers only (as Kafka's ``AuthHelper``)."""
    conn = RawConnection(cluster.any_broker().address)
    try:
        for endpoint_type, error in ((2, MISMATCHED_ENDPOINT_TYPE), (7, UNSUPPORTED_ENDPOINT_TYPE)):
            answer = conn.request(DescribeClusterRequest(endpoint_type=endpoint_type), 1)
            assert (answer.error_code, answer.brokers) == (error, []), answer
        answer = conn.request(DescribeClusterRequest(), 0)  # v0: brokers, implicitly
        assert answer.error_code == 0 and len(answer.brokers) == 3
    finally:
        conn.close()


# --- DescribeTopicPartitions ---------------------------------------------------------------------


def test_describe_topic_partitions_pages_agree_with_metadata(
    cluster: LocalCluster, kp_admin: KafkaAdminClient
) -> None:
    reference = confluent_topics(admin_client(cluster))
    pages: list[dict[str, Any]] = []
    cursor = None
    while True:
        # the client asks for 3 a page: the broker's limit (4) does not cut it further
        page = kp_admin.describe_topic_partitions(
            list(TOPICS), response_partition_limit=3, cursor=cursor
        )
        pages.append(page)
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert len(pages) < 10
    shapes = [[(t["name"], len(t["partitions"])) for t in p["topics"]] for p in pages]
    assert shapes == [[("pages-a", 3)], [("pages-a", 2), ("pages-b", 1)], [("pages-b", 2)]]
    assert [p["next_cursor"] for p in pages[:-1]] == [
        {"topic_name": "pages-a", "partition_index": 3},
        {"topic_name": "pages-b", "partition_index": 1},
    ]
    described: dict[str, list[dict[str, Any]]] = {}
    for page in pages:
        for topic in page["topics"]:
            assert topic["error_code"] == 0 and topic["is_internal"] is False
            ops = operations(topic["topic_authorized_operations"])
            assert ops >= {"READ", "WRITE", "DESCRIBE", "DELETE"}
            assert "CLUSTER_ACTION" not in ops
            for partition in topic["partitions"]:
                assert partition["error_code"] == 0 and partition["leader_epoch"] >= 0
                assert partition["offline_replicas"] == []
            described.setdefault(topic["name"], []).extend(topic["partitions"])
    assert {t: [comparable(p) for p in ps] for t, ps in described.items()} == reference

    # a larger limit than the broker's max.request.partition.size.limit: the broker's (4)
    page = kp_admin.describe_topic_partitions(list(TOPICS), response_partition_limit=100)
    assert [len(t["partitions"]) for t in page["topics"]] == [4]
    assert page["next_cursor"] == {"topic_name": "pages-a", "partition_index": 4}


def test_describe_topic_partitions_errors_and_listing(kp_admin: KafkaAdminClient) -> None:
    page = kp_admin.describe_topic_partitions(["pages-b", "no-such-topic"])
    errors = {t["name"]: t["error_code"] for t in page["topics"]}
    assert errors == {"no-such-topic": UNKNOWN_TOPIC_OR_PARTITION, "pages-b": 0}

    # a cursor naming a topic not asked for: INVALID_REQUEST for every topic, nothing described
    bad = {"topic_name": "pages-a", "partition_index": 0}
    page = kp_admin.describe_topic_partitions(["pages-b"], cursor=bad)
    assert [(t["name"], t["error_code"], t["partitions"]) for t in page["topics"]] == [
        ("pages-b", INVALID_REQUEST, [])
    ]
    negative = {"topic_name": "pages-b", "partition_index": -1}
    page = kp_admin.describe_topic_partitions(["pages-b"], cursor=negative)
    assert [t["error_code"] for t in page["topics"]] == [INVALID_REQUEST]

    # no topics named: every topic from the cursor on, unknown ones never listed
    listed: list[tuple[str, int]] = []
    cursor = {"topic_name": "pages-a", "partition_index": 3}
    while cursor is not None:
        page = kp_admin.describe_topic_partitions([], cursor=cursor)
        listed += [
            (t["name"], p["partition_index"]) for t in page["topics"] for p in t["partitions"]
        ]
        cursor = page["next_cursor"]
    assert listed[:5] == [
        ("pages-a", 3),
        ("pages-a", 4),
        ("pages-b", 0),
        ("pages-b", 1),
        ("pages-b", 2),
    ]
    assert listed == sorted(set(listed)), "in (topic, partition) order, each once"


# --- OffsetDelete --------------------------------------------------------------------------------


def test_offset_delete_through_both_admin_clients(
    cluster: LocalCluster, kp_admin: KafkaAdminClient
) -> None:
    admin = admin_client(cluster)
    committed = [TopicPartition("pages-b", p, 10 + p) for p in range(3)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP, committed)])[
        GROUP
    ].result(timeout=WAIT_S)

    def offsets() -> dict[int, int]:
        request = [
            ConsumerGroupTopicPartitions(GROUP, [TopicPartition("pages-b", p) for p in range(3)])
        ]
        result = admin.list_consumer_group_offsets(request)[GROUP].result(timeout=WAIT_S)
        return {tp.partition: tp.offset for tp in result.topic_partitions}

    assert offsets() == {0: 10, 1: 11, 2: 12}

    result = kp_admin.delete_group_offsets(GROUP, [KpTopicPartition("pages-b", p) for p in (0, 1)])
    assert result == {KpTopicPartition("pages-b", p): NoError for p in (0, 1)}
    assert offsets() == {0: -1001, 1: -1001, 2: 12}  # confluent-kafka reads them gone

    # an unknown group: GROUP_ID_NOT_FOUND, nothing changed
    with pytest.raises(GroupIdNotFoundError):
        kp_admin.delete_group_offsets("no-such-group", [KpTopicPartition("pages-b", 2)])
    assert offsets()[2] == 12

    # a member subscribed to the topic: GROUP_SUBSCRIBED_TO_TOPIC, the offset kept
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": GROUP, "session.timeout.ms": 6000}
    )
    try:
        consumer.subscribe(["pages-b"])
        wait_for(
            "an assignment", lambda: consumer.poll(0.2) or consumer.assignment(), WAIT_S, cluster
        )
        result = kp_admin.delete_group_offsets(GROUP, [KpTopicPartition("pages-b", 2)])
        assert result == {KpTopicPartition("pages-b", 2): GroupSubscribedToTopicError}
    finally:
        consumer.close()
    assert offsets()[2] == 12


# --- DescribeQuorum through a broker ------------------------------------------------------------


def test_describe_metadata_quorum_through_a_broker(
    cluster: LocalCluster, kp_admin: KafkaAdminClient
) -> None:
    """kafka-python's describe_metadata_quorum asks a broker, which forwards it to the active
    controller, as Kafka's brokers do."""
    quorum = kp_admin.describe_metadata_quorum()
    (topic,) = quorum["topics"]
    assert topic["topic_name"] == "__cluster_metadata"
    (partition,) = topic["partitions"]
    assert partition["error"] is None
    assert partition["leader_id"] == cluster.active_controller()
    assert partition["leader_epoch"] >= 1 and partition["high_watermark"] > 0
    assert [v["replica_id"] for v in partition["current_voters"]] == list(cluster.controllers)


# --- a fenced broker (last: it kills a broker) ---------------------------------------------------


def test_describe_cluster_lists_a_fenced_broker_only_when_asked(
    cluster: LocalCluster, kp_admin: KafkaAdminClient
) -> None:
    victim = max(cluster.brokers)
    cluster.brokers[victim].kill()

    def fenced() -> bool:
        brokers = {b["broker_id"]: b for b in kp_admin.describe_cluster()["brokers"]}
        return brokers.get(victim, {}).get("is_fenced") is True

    errors = (AssertionError, OSError, KafkaPythonError)  # while the client learns it is gone
    wait_for(f"broker {victim} listed as fenced", fenced, WAIT_S, cluster, ignore=errors)
    # librdkafka's describe_cluster (Metadata) lists the unfenced brokers only
    admin = admin_client(cluster)
    nodes = admin.describe_cluster().result(timeout=WAIT_S).nodes
    assert victim not in {n.id for n in nodes}
