"""Partition reassignment (KIP-455) on one controller and three brokers as real processes, driven
by kafka-python's ``KafkaAdminClient.alter_partition_reassignments`` /
``list_partition_reassignments`` (confluent-kafka 2.16.1 and aiokafka 0.14.0 have no such
call), by the REST routes ``/v1/topics/{name}/reassignments`` and by ``kraft reassign``.

What is asserted is what an operator sees: the partition ends on the target brokers with the
records it had (read back with confluent-kafka from the new leader), the removed brokers delete
their copy, an ongoing move is listed and can be cancelled, and bad requests get Kafka's error
codes (HTTP 4xx, exit status 1) with nothing changed.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka.errors
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from integration import cluster_process
from integration.cluster_process import LocalCluster, ServerProcess, admin_client, rest_call
from integration.test_rest import ApiSchemas, Reply

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
    """A move held back by a follower throttle of one byte a second stays in progress (broker
    4 gets its first fetch, then nothing for a while): listed until cancelled."""
    create_topic(cluster, "stuck", [[2, 3]])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20})
    for _ in range(3000):  # 3 MB: more than one replica fetch (replica.fetch.max.bytes)
        producer.produce("stuck", value=bytes(1000), partition=0)
    assert producer.flush(30) == 0
    set_configs(cluster, "broker", "4", {"follower.replication.throttled.rate": "1"})
    set_configs(cluster, "topic", "stuck", {"follower.replication.throttled.replicas": "0:4"})
    tp = TopicPartition("stuck", 0)
    assert kp_admin.alter_partition_reassignments({tp: [2, 4]}) == {tp: None}
    listed = kp_admin.list_partition_reassignments()
    assert listed == {tp: {"replicas": [2, 4, 3], "adding_replicas": [4], "removing_replicas": [3]}}
    assert kp_admin.list_partition_reassignments({"stuck": [0], "nope": [0]}) == listed
    assert kp_admin.alter_partition_reassignments({tp: None}) == {tp: None}
    assert kp_admin.list_partition_reassignments() == {}
    wait_for(
        "reverted",
        lambda: partitions(cluster.brokers[2], "stuck")[0]["replicas"] == [2, 3],
        15,
        cluster,
    )
    assert sorted(partitions(cluster.brokers[2], "stuck")[0]["isr"]) == [2, 3]
    result = kp_admin.alter_partition_reassignments({tp: None})
    assert result == {tp: kafka.errors.NoReassignmentInProgressError}
    set_configs(cluster, "broker", "4", {"follower.replication.throttled.rate": None})


def set_configs(cluster: LocalCluster, kind: str, name: str, values: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs with confluent-kafka: a value sets, None deletes."""
    ops = [
        ConfigEntry(
            k,
            v,
            incremental_operation=AlterConfigOpType.DELETE if v is None else AlterConfigOpType.SET,
        )
        for k, v in values.items()
    ]
    resource = ConfigResource(kind, name, incremental_configs=ops)
    client = admin_client(cluster)  # the handle must outlive its future
    [future] = client.incremental_alter_configs([resource]).values()
    future.result(timeout=15)


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


# --- REST -------------------------------------------------------------------------------------


def test_rest_moves_lists_and_cancels(cluster: LocalCluster) -> None:
    """POST starts moves (with a throttle set first), GET lists them, DELETE cancels; bad input
    is a 4xx with a message and changes nothing. Responses match the OpenAPI document."""
    create_topic(cluster, "rest-moved", [[2, 3], [3, 4]])
    node = cluster.brokers[3]
    path = "/v1/topics/rest-moved/reassignments"
    schemas = ApiSchemas(node.get("/v1/openapi.json"))
    template = "/v1/topics/{name}/reassignments"

    def call(method: str, url: str, body: Any = None) -> tuple[int, Any]:
        status, answer = rest_call(node, method, url, body)
        schemas.check(method, template, Reply(status, {}, json.dumps(answer)))
        return status, answer

    status, body = call("POST", path, {"partitions": [{"partition": 0, "replicas": [2, 99]}]})
    assert status == 400 and body["error"] == "INVALID_REPLICA_ASSIGNMENT", body
    assert "99" in body["message"]
    status, body = call("POST", path, {"partitions": [{"partition": 7, "replicas": [2]}]})
    assert status == 404 and body["error"] == "UNKNOWN_TOPIC_OR_PARTITION", body
    status, body = call("POST", path, {"partitions": [{"partition": 0, "replicas": [2, 2]}]})
    assert status == 400 and body["error"] == "INVALID_REPLICA_ASSIGNMENT", body
    status, body = call("POST", path, {"moves": []})
    assert status == 400 and body["error"] == "INVALID_REQUEST", body
    status, body = call("POST", "/v1/topics/nope/reassignments", {"partitions": []})
    assert status == 404, body
    assert partitions(node, "rest-moved")[0]["replicas"] == [2, 3]  # nothing changed

    status, body = call(
        "POST",
        path,
        {
            "partitions": [
                {"partition": 0, "replicas": [4, 3]},
                {"partition": 1, "replicas": [4, 2]},
            ],
            "throttle_bytes_per_s": 50_000_000,
        },
    )
    assert status == 202, body
    assert body["topic"] == "rest-moved"
    configs = node.get("/v1/topics/rest-moved")["configs"]
    assert configs["leader.replication.throttled.replicas"] == "0:2,0:3,1:3,1:4"
    assert configs["follower.replication.throttled.replicas"] == "0:4,1:2"

    def moved() -> bool:
        ps = partitions(node, "rest-moved")
        return ps[0]["replicas"] == [4, 3] and ps[1]["replicas"] == [4, 2]

    wait_for("REST moves done", moved, 30, cluster)
    status, body = call("GET", path)
    assert status == 200 and body == {"topic": "rest-moved", "reassignments": []}
    status, body = call("DELETE", path + "?partition=0")
    assert status == 400 and body["error"] == "NO_REASSIGNMENT_IN_PROGRESS", body
    # Cancelling what is not moving cancels nothing, and clears the topic's throttle lists.
    status, body = call("DELETE", path)
    assert status == 200 and body == {"topic": "rest-moved", "cancelled": []}
    wait_for(
        "throttle lists cleared",
        lambda: (
            "leader.replication.throttled.replicas"
            not in node.get("/v1/topics/rest-moved")["configs"]
        ),
        15,
        cluster,
    )

    paused = cluster.brokers[2]
    paused.pause()
    try:
        status, body = call("POST", path, {"partitions": [{"partition": 0, "replicas": [4, 3, 2]}]})
        assert status == 202, body
        assert body["reassignments"] == [
            {"partition": 0, "replicas": [4, 3, 2], "adding_replicas": [2], "removing_replicas": []}
        ]
        status, body = call("GET", path)
        assert status == 200 and [r["partition"] for r in body["reassignments"]] == [0]
        status, body = call("DELETE", path)
        assert status == 200 and body == {"topic": "rest-moved", "cancelled": [0]}
        assert partitions(node, "rest-moved")[0]["replicas"] == [4, 3]
    finally:
        paused.resume()


# --- CLI --------------------------------------------------------------------------------------


def kraft_reassign(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "kraft.cli", "reassign", "--bootstrap-server"]
    command += [cluster.bootstrap, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_cli_generates_executes_verifies(cluster: LocalCluster, tmp_path: Path) -> None:
    """The operator's procedure: generate a plan spreading a topic over brokers 3 and 4,
    execute it with a throttle, verify until done (which clears the throttles)."""
    create_topic(cluster, "cli-moved", [[2], [2], [2], [2]])
    produce(cluster, "cli-moved", 40, 4)
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "cli-moved"}]}))
    generated = kraft_reassign(
        cluster,
        "--generate",
        "--topics-to-move-json-file",
        str(topics),
        "--broker-list",
        "3,4",
        "--seed",
        "1",
        "--json",
    )
    assert generated.returncode == 0, generated.stderr
    out = json.loads(generated.stdout)
    assert [p["replicas"] for p in out["current"]["partitions"]] == [[2]] * 4
    proposed = out["proposed"]["partitions"]
    assert sorted(p["replicas"][0] for p in proposed) == [3, 3, 4, 4]  # spread evenly
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(out["proposed"]))

    executed = kraft_reassign(cluster, "--execute", "--plan", str(plan), "--throttle", "50000000")
    assert executed.returncode == 0, executed.stderr
    assert "Successfully started partition reassignments for cli-moved-0" in executed.stdout
    assert "Save this to use as the --reassignment-json-file" in executed.stdout
    wait_for(
        "throttle set",
        lambda: cluster.brokers[3].get("/v1/topics/cli-moved")["configs"][
            "follower.replication.throttled.replicas"
        ],
        15,
        cluster,
    )

    def verified() -> str | None:
        result = kraft_reassign(cluster, "--verify", "--reassignment-json-file", str(plan))
        assert result.returncode == 0, result.stderr
        return result.stdout if "still in progress" not in result.stdout else None

    text = wait_for("verify says completed", verified, 30, cluster, poll_s=0.3)
    assert text.count("is completed.") == 4
    assert "Clearing topic-level throttles on topic cli-moved" in text
    wait_for(
        "throttle cleared",
        lambda: "throttled" not in str(cluster.brokers[3].get("/v1/topics/cli-moved")["configs"]),
        15,
        cluster,
    )
    listed = kraft_reassign(cluster, "--list")
    assert listed.returncode == 0 and "No partition reassignments found." in listed.stdout
    wait_for(
        "broker 4 sees the plan done",
        lambda: all(
            partitions(cluster.brokers[4], "cli-moved")[p["partition"]]["replicas"] == p["replicas"]
            for p in proposed
        ),
        15,
        cluster,
    )

    # A plan naming an unknown broker is refused, and nothing moves.
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": "cli-moved", "partition": 0, "replicas": [77]}]}
        )
    )
    refused = kraft_reassign(cluster, "--execute", "--plan", str(bad))
    assert refused.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in refused.stderr
    garbled = tmp_path / "garbled.json"
    garbled.write_text('{"version": 1, "partitions": [{"topic": "cli-moved"}]}')
    result = kraft_reassign(cluster, "--execute", "--plan", str(garbled))
    assert result.returncode == 1 and "INVALID_PLAN" in result.stderr
    cancelled = kraft_reassign(cluster, "--cancel", "--plan", str(plan), "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["cancelled"] == []


def test_cli_lists_refuses_a_second_plan_and_cancels(cluster: LocalCluster, tmp_path: Path) -> None:
    """A move onto a paused broker stays in progress: --list shows it, a second --execute is
    refused without --additional, --cancel reverts it."""
    create_topic(cluster, "cli-stuck", [[2], [3]])
    paused_id, reachable = 4, cluster.brokers[2]
    plan = tmp_path / "stuck.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": "cli-stuck", "partition": 0, "replicas": [4]}]}
        )
    )
    other = tmp_path / "other.json"
    other.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": "cli-stuck", "partition": 1, "replicas": [2]}]}
        )
    )

    def reassign(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "kraft.cli", "reassign"]
        command += ["--bootstrap-server", reachable.address, *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    cluster.brokers[paused_id].pause()
    try:
        assert reassign("--execute", "--plan", str(plan)).returncode == 0
        listed = reassign("--list")
        assert "cli-stuck-0: replicas: 4,2. adding: 4. removing: 2." in listed.stdout
        refused = reassign("--execute", "--plan", str(other))
        assert refused.returncode == 1 and "REASSIGNMENT_IN_PROGRESS" in refused.stderr
        assert partitions(reachable, "cli-stuck")[1]["replicas"] == [3]  # not started
        verified = reassign("--verify", "--plan", str(plan))
        assert "Reassignment of partition cli-stuck-0 is still in progress." in verified.stdout
        cancelled = reassign("--cancel", "--plan", str(plan))
        assert cancelled.returncode == 0, cancelled.stderr
        assert "Successfully cancelled partition reassignments for: cli-stuck-0" in cancelled.stdout
        wait_for(
            "reverted",
            lambda: partitions(reachable, "cli-stuck")[0]["replicas"] == [2],
            15,
            cluster,
        )
        failed = reassign("--verify", "--plan", str(plan))
        assert failed.returncode == 1 and "REASSIGNMENT_FAILED" in failed.stderr
        assert "but replica set is [2] rather than [4]" in failed.stdout
    finally:
        cluster.brokers[paused_id].resume()
