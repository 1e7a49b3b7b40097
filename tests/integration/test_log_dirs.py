"""Several log directories per broker (JBOD) on one controller and three brokers, each with
two entries in ``log.dirs``, through kafka-python's ``KafkaAdminClient`` (confluent-kafka and
aiokafka have no log-directory calls): DescribeLogDirs (placement over both directories, sizes,
volume bytes), AlterReplicaLogDirs moving a replica while a producer writes to it (nothing
acknowledged lost, the files move), LOG_DIR_NOT_FOUND with nothing changed; every directory id
registered (``GET /v1/cluster``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka.errors
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient

from integration.cluster_process import (
    LocalCluster,
    ServerProcess,
    admin_client,
    rest_call,
    wait_for,
)

pytestmark = pytest.mark.integration

TOPIC = "jbod"
PARTITIONS = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = Path(tmp_path_factory.mktemp("log-dirs"))
    cluster = LocalCluster.create(root, 1, 3, {})
    for broker in cluster.brokers.values():
        broker.properties["log.dirs"] = f"{broker.data_dir}/logs-a,{broker.data_dir}/logs-b"
    cluster.start()
    try:
        client = admin_client(cluster)
        topic = NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)
        client.create_topics([topic])[TOPIC].result(timeout=15)
        yield cluster
    finally:
        cluster.kill_all()


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15_000)
    yield client
    client.close()


def log_dirs(admin: KafkaAdminClient, broker_id: int) -> dict[str, dict[str, Any]]:
    """The broker's directories by path: their error code and ``{(topic, partition,
    is_future): size}``."""
    (answer,) = admin.describe_log_dirs(brokers=[broker_id])
    out = {}
    for result in answer["log_dirs"]:
        parts = {
            (t["name"], p["partition_index"], p["is_future_key"]): p["partition_size"]
            for t in result["topics"]
            for p in t["partitions"]
        }
        out[result["log_dir"]] = {"error_code": result["error_code"], "partitions": parts, **result}
    return out


def where(admin: KafkaAdminClient, broker_id: int, partition: int) -> str:
    found = [
        path
        for path, d in log_dirs(admin, broker_id).items()
        if (TOPIC, partition, False) in d["partitions"]
    ]
    assert len(found) == 1, found
    return found[0]


def test_partitions_spread_over_both_directories(
    cluster: LocalCluster, admin: KafkaAdminClient
) -> None:
    registered = {b["id"]: b for b in cluster.any_broker().get("/v1/cluster")["brokers"]}
    for broker_id, broker in cluster.brokers.items():
        dirs = log_dirs(admin, broker_id)
        assert set(dirs) == {f"{broker.data_dir}/logs-a", f"{broker.data_dir}/logs-b"}
        counts = []
        for d in dirs.values():
            assert d["error_code"] == 0
            assert d["total_bytes"] > 0 and 0 <= d["usable_bytes"] <= d["total_bytes"]
            counts.append(sum(1 for t, _, _ in d["partitions"] if t == TOPIC))
        assert sorted(counts) == [PARTITIONS // 2, PARTITIONS // 2]
        assert len(registered[broker_id]["log_dirs"]) == 2
        assert registered[broker_id]["offline_log_dirs"] == []


def test_unknown_directory_is_refused_and_nothing_moves(
    cluster: LocalCluster, admin: KafkaAdminClient
) -> None:
    broker_id = min(cluster.brokers)
    before = where(admin, broker_id, 0)
    result = admin.alter_replica_log_dirs({TopicPartitionReplica(TOPIC, 0, broker_id): "/nowhere"})
    assert list(result.values()) == [kafka.errors.LogDirNotFoundError]
    assert where(admin, broker_id, 0) == before


def test_a_replica_moves_while_a_producer_writes(
    cluster: LocalCluster, admin: KafkaAdminClient
) -> None:
    leader = int(cluster.any_broker().get(f"/v1/topics/{TOPIC}")["partitions"][1]["leader"])
    broker: ServerProcess = cluster.brokers[leader]
    source = where(admin, leader, 1)
    dest = next(p for p in log_dirs(admin, leader) if p != source)
    acked: list[int] = []
    errors: list[KafkaError] = []
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        i = 0
        while not stop.is_set() or i < 2000:
            producer.produce(
                TOPIC,
                str(i).encode(),
                partition=1,
                on_delivery=lambda err, msg: (
                    errors.append(err) if err else acked.append(int(msg.value()))
                ),
            )
            producer.poll(0)
            i += 1
        producer.flush(15)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        wait_for("records acknowledged", lambda: len(acked) > 200, 15, cluster)
        result = admin.alter_replica_log_dirs({TopicPartitionReplica(TOPIC, 1, leader): dest})
        assert list(result.values()) == [kafka.errors.NoError]
        wait_for(
            "the replica in its new directory", lambda: where(admin, leader, 1) == dest, 20, cluster
        )
    finally:
        stop.set()
        writer.join(30)
    assert not errors, errors[:3]
    assert (Path(dest) / f"{TOPIC}-1").is_dir()
    assert not (Path(source) / f"{TOPIC}-1").exists()
    assert not [p.name for p in Path(dest).iterdir() if p.name.startswith(f"{TOPIC}-1.")]
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "jbod-check",
            "auto.offset.reset": "earliest",
        }
    )
    read: list[int] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 1, 0)])
        while len(read) < len(acked):
            msg = consumer.poll(10)
            assert msg is not None, f"read {len(read)} of {len(acked)}"
            assert msg.error() is None, msg.error()
            value = msg.value()
            assert value is not None
            read.append(int(value))
    finally:
        consumer.close()
    assert set(acked) <= set(read), "an acknowledged record is missing"
    assert broker.alive()


def test_rest_shows_a_brokers_log_dirs_from_any_node(cluster: LocalCluster) -> None:
    """The broker answers for itself; another broker and the controller ask it."""
    broker_id = min(cluster.brokers)
    expected = {
        f"{cluster.brokers[broker_id].data_dir}/logs-a",
        f"{cluster.brokers[broker_id].data_dir}/logs-b",
    }
    answers = []
    for node in (cluster.brokers[broker_id], cluster.brokers[max(cluster.brokers)]):
        status, body = rest_call(node, "GET", f"/v1/brokers/{broker_id}/log-dirs")
        assert status == 200, body
        answers.append(body)
    controller = next(iter(cluster.controllers.values()))
    status, body = rest_call(controller, "GET", f"/v1/brokers/{broker_id}/log-dirs")
    assert status == 200, body
    answers.append(body)
    for body in answers:
        assert body["broker"] == broker_id
        assert {d["path"] for d in body["log_dirs"]} == expected
        assert all(d["error"] == "NONE" and d["total_bytes"] > 0 for d in body["log_dirs"])
        placed = {
            p["partition"] for d in body["log_dirs"] for p in d["partitions"] if p["topic"] == TOPIC
        }
        assert placed == set(range(PARTITIONS))
    assert rest_call(controller, "GET", "/v1/brokers/99/log-dirs")[0] == 404
    assert rest_call(controller, "GET", "/v1/brokers/x/log-dirs")[0] == 400


def test_a_failed_directory_takes_only_its_partitions_away(
    cluster: LocalCluster, admin: KafkaAdminClient
) -> None:
    """Last in this module: it breaks one directory of a broker.  The directory disappears
    (renamed away, as a disk unmounted under a running broker): its next file creation fails,
    the directory goes offline, and the controller moves the leaderships of the partitions in
    it (their directories were assigned by AssignReplicasToDirs), not of the others."""
    topic = "jbod-fail"
    victim = max(cluster.brokers)
    others = sorted(b for b in cluster.brokers if b != victim)
    client = admin_client(cluster)
    new = NewTopic(
        topic,
        num_partitions=PARTITIONS,
        replica_assignment=[[victim, *others]] * PARTITIONS,
        config={"internal.segment.bytes": "1024"},
    )
    client.create_topics([new])[topic].result(timeout=15)
    observer = cluster.brokers[others[0]]

    def partitions() -> list[dict[str, Any]]:
        described: list[dict[str, Any]] = observer.get(f"/v1/topics/{topic}")["partitions"]
        return described

    wait_for(
        "every replica's directory assigned",
        lambda: all(p["log_dirs"][0] is not None for p in partitions()),
        15,
        cluster,
    )
    (answer,) = admin.describe_log_dirs(brokers=[victim])
    placed = {
        r["log_dir"]: {
            p["partition_index"] for t in r["topics"] if t["name"] == topic for p in t["partitions"]
        }
        for r in answer["log_dirs"]
    }
    failing, surviving = sorted(placed, key=lambda d: min(placed[d] or {99}))
    assert placed[failing] and placed[surviving], placed
    Path(failing).rename(failing + ".gone")

    # one record per batch: a batch must fit in a 1 KiB segment
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "batch.size": 300})
    failed: list[KafkaError] = []
    for i in range(400):
        producer.produce(
            topic,
            b"x" * 100,
            partition=i % PARTITIONS,
            on_delivery=lambda err, _: failed.append(err) if err else None,
        )
        producer.poll(0)
    assert producer.flush(30) == 0 and not failed, failed[:3]

    def settled() -> bool:
        by_index = {p["partition"]: p for p in partitions()}
        return all(by_index[i]["leader"] != victim for i in placed[failing]) and all(
            by_index[i]["leader"] == victim for i in placed[surviving]
        )

    wait_for("leaderships moved off the failed directory only", settled, 20, cluster)
    for p in partitions():
        if p["partition"] in placed[failing]:
            assert victim not in p["isr"]
    registered = {b["id"]: b for b in observer.get("/v1/cluster")["brokers"]}[victim]
    assert len(registered["log_dirs"]) == 1 and len(registered["offline_log_dirs"]) == 1
    (answer,) = admin.describe_log_dirs(brokers=[victim])
    errors = {r["log_dir"]: r["error_code"] for r in answer["log_dirs"]}
    assert errors == {failing: 56, surviving: 0}  # KAFKA_STORAGE_ERROR
    assert cluster.brokers[victim].alive()
