"""The REST record routes and ``kraft produce`` / ``kraft consume`` on a cluster: any broker's API
serves every partition, reaching the ones led elsewhere over the Kafka protocol."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from integration.cluster_process import LocalCluster, ServerProcess, wait_for
from integration.cluster_process import rest_call as call

pytestmark = pytest.mark.integration

TOPIC = "spread"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(tmp_path_factory.mktemp("rest-cluster"), 1, 3).start()
    try:
        yield cluster
    finally:
        cluster.kill_all()


@pytest.fixture(scope="module")
def via(cluster: LocalCluster) -> ServerProcess:
    """The broker whose API every request goes to: it leads one of three partitions."""
    node = min(cluster.brokers.values(), key=lambda b: b.node_id)
    status, body = call(
        node, "POST", "/v1/topics", {"name": TOPIC, "partitions": 3, "replication_factor": 1}
    )
    assert status == 201, body

    def leaders() -> list[int] | None:
        parts = call(node, "GET", f"/v1/topics/{TOPIC}")[1]["partitions"]
        found = [p["leader"] for p in parts]
        return found if all(leader in cluster.brokers for leader in found) else None

    spread = wait_for("partition leaders", leaders, 30, cluster)
    assert sorted(spread) == sorted(cluster.brokers), f"one partition per broker: {spread}"
    return node


def remote_partition(via: ServerProcess) -> int:
    """A partition of TOPIC that ``via`` neither leads nor hosts (replication factor 1)."""
    parts = call(via, "GET", f"/v1/topics/{TOPIC}")[1]["partitions"]
    return int(next(p["partition"] for p in parts if p["leader"] != via.node_id))


def test_records_produced_through_one_broker_land_at_every_leader(
    cluster: LocalCluster, via: ServerProcess
) -> None:
    records = [{"partition": i % 3, "key": f"k{i}", "value": f"v{i}"} for i in range(30)]
    status, body = call(via, "POST", f"/v1/topics/{TOPIC}/records", {"records": records})
    assert status == 200, body
    assert [(o["partition"], o["offset"]) for o in body["offsets"]] == [
        (i % 3, i // 3) for i in range(30)
    ]
    # a Kafka consumer of the leaders sees them: they were written there, not here
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "rest-check"})
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
        got: dict[int, list[str]] = {0: [], 1: [], 2: []}
        while sum(map(len, got.values())) < 30:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None, msg and msg.error()
            got[msg.partition()].append(msg.value().decode())
    finally:
        consumer.close()
    assert got == {p: [f"v{i}" for i in range(p, 30, 3)] for p in range(3)}
    # and reads through the same broker give them back, with each partition's positions
    for p in range(3):
        status, read = call(via, "GET", f"/v1/topics/{TOPIC}/partitions/{p}/records")
        assert status == 200, read
        assert [r["value"] for r in read["records"]] == [f"v{i}" for i in range(p, 30, 3)]
        assert [r["key"] for r in read["records"]] == [f"k{i}" for i in range(p, 30, 3)]
        assert read["next_offset"] == read["high_watermark"] == 10
        assert read["log_start_offset"] == 0
        status, part = call(
            via, "GET", f"/v1/topics/{TOPIC}/partitions/{p}/records?offset=4&max_records=3"
        )
        assert [r["offset"] for r in part["records"]] == [4, 5, 6]
        assert part["next_offset"] == 7


def test_a_long_poll_at_a_remote_leader_wakes_on_its_records(
    cluster: LocalCluster, via: ServerProcess
) -> None:
    remote = remote_partition(via)
    path = f"/v1/topics/{TOPIC}/partitions/{remote}/records"
    end = call(via, "GET", path + "?offset=latest")[1]["next_offset"]
    answer: list[tuple[int, Any]] = []
    poll = threading.Thread(
        target=lambda: answer.append(call(via, "GET", path + f"?offset={end}&timeout_ms=20000"))
    )
    poll.start()
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    producer.produce(TOPIC, b"late", partition=remote)
    assert producer.flush(10) == 0
    poll.join(25)
    assert not poll.is_alive(), "the long poll was not woken"
    status, body = answer[0]
    assert status == 200, body
    assert [(r["offset"], r["value"]) for r in body["records"]] == [(end, "late")]


def test_bad_positions_at_a_remote_leader_are_kafka_errors(
    cluster: LocalCluster, via: ServerProcess
) -> None:
    remote = remote_partition(via)
    path = f"/v1/topics/{TOPIC}/partitions/{remote}/records"
    status, body = call(via, "GET", path + "?offset=1000000")
    assert (status, body["error"]) == (416, "OFFSET_OUT_OF_RANGE"), body
    status, body = call(via, "GET", path + "?offset=soon")
    assert status == 400, body
    status, body = call(via, "GET", f"/v1/topics/{TOPIC}/partitions/7/records")
    assert (status, body["error"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION"), body


def test_kraft_produce_and_consume_through_one_broker(
    cluster: LocalCluster, via: ServerProcess, tmp_path: Path
) -> None:
    topic = "cli-spread"
    env = {**os.environ, "KRAFT_ADMIN": via.admin}
    kraft = [sys.executable, "-m", "kraft.cli"]
    subprocess.run(
        [*kraft, "topics", "create", topic, "--partitions", "3", "--replication-factor", "1"],
        env=env,
        check=True,
        timeout=60,
    )
    lines = [f"line-{i}" for i in range(60)]
    produced = subprocess.run(
        [*kraft, "produce", topic],
        input="\n".join(lines) + "\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        [*kraft, "consume", topic, "--from-beginning", "--timeout-ms", "3000"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == sorted(lines)
    assert "Processed a total of 60 messages" in consumed.stderr
