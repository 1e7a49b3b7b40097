"""Transaction administration on a cluster (one controller, three brokers): the REST API of
every node serves it, the controller's included, reaching the brokers over Kafka.

A confluent-kafka transaction left open is listed and described from the controller (with its
coordinator, the leader of its ``__transaction_state`` partition).  A hanging transaction on a
replicated partition (transactional batches of a made-up producer id, written to the leader
without the coordinator) is found by ``find-hanging --broker-id`` naming a follower, aborted from
another broker's API, and the partition's last stable offset then reaches its high watermark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from integration.cluster_process import LocalCluster
from integration.raw_client import RawConnection
from kafka_protocol.clock import wall_ms
from kafka_protocol.messages import ListOffsetsRequest, ProduceRequest
from kafka_protocol.record_batch import SimpleRecord, build_batch
from kafka_protocol.types import BrokerId, TopicName, TransactionalId

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPIC = "spread"
EXTRA = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.partition.verification.enable": "false",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}
MADE_UP_PRODUCER_ID = 777_000_002
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(Path(tmp_path_factory.mktemp("txn")), 1, 3, EXTRA).start()
    try:
        status, body = call(
            cluster.any_broker().admin,
            "POST",
            "/v1/topics",
            {"name": TOPIC, "partitions": 3, "replication_factor": 3},
        )
        assert status == 201, body
        yield cluster
    finally:
        cluster.kill_all()


def call(admin: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(admin + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=WAIT_S + 5) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def ok(admin: str, method: str, path: str, body: Any = None) -> Any:
    status, answer = call(admin, method, path, body)
    assert status == 200, (status, answer)
    return answer


def kraft(admin: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KRAFT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "kraft.cli", "transactions", *argv, "--admin", admin],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def wait_until(what: str, check: Any) -> Any:
    deadline = time.monotonic() + WAIT_S
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return found


def test_the_controller_lists_and_describes_an_open_transaction(cluster: LocalCluster) -> None:
    [controller] = cluster.controllers.values()
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "spread-app"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"v", partition=2)
    producer.flush(30)
    try:
        listed = ok(controller.admin, "GET", "/v1/transactions")
        [mine] = [t for t in listed if t["transactional_id"] == "spread-app"]
        assert mine["state"] == "Ongoing" and mine["coordinator"] in cluster.brokers
        described = ok(controller.admin, "GET", "/v1/transactions/spread-app")
        assert described["coordinator"]["id"] == mine["coordinator"]
        assert described["partitions"] == [{"topic": TOPIC, "partition": 2}]
        shown = kraft(controller.admin, "describe", "--transactional-id", "spread-app")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines()[1].split()[:2] == [str(mine["coordinator"]), "spread-app"]
    finally:
        producer.abort_transaction(30)


def produce_hanging(leader_address: str, partition: int) -> int:
    batch = build_batch(
        [SimpleRecord(f"hanging-{i}".encode()) for i in range(2)],
        now_ms=wall_ms() - 3_600_000,
        producer_id=MADE_UP_PRODUCER_ID,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    request = ProduceRequest(
        transactional_id=TransactionalId("never-told-the-coordinator"),
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TopicName(TOPIC),
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=partition, records=batch)
                ],
            )
        ],
    )
    conn = RawConnection(leader_address)
    try:
        answer = conn.request(request, 9).responses[0].partition_responses[0]
    finally:
        conn.close()
    assert answer.error_code == 0, answer
    return int(answer.base_offset)


def offsets(leader_address: str, partition: int, isolation_level: int) -> int:
    request = ListOffsetsRequest(
        replica_id=BrokerId(-1),
        isolation_level=isolation_level,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=TopicName(TOPIC),
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=-1)
                ],
            )
        ],
    )
    conn = RawConnection(leader_address)
    try:
        answer = conn.request(request, 7).topics[0].partitions[0]
    finally:
        conn.close()
    assert answer.error_code == 0, answer
    return int(answer.offset)


def test_a_hanging_transaction_found_from_a_follower_and_aborted_elsewhere(
    cluster: LocalCluster,
) -> None:
    broker = cluster.any_broker()
    [state] = [
        p
        for p in ok(broker.admin, "GET", f"/v1/topics/{TOPIC}")["partitions"]
        if p["partition"] == 1
    ]
    leader = cluster.brokers[state["leader"]]
    follower_id = next(b for b in state["replicas"] if b != state["leader"])
    start = produce_hanging(leader.address, 1)
    assert offsets(leader.address, 1, 1) == start  # read_committed stops at it

    found = kraft(cluster.controllers[1].admin, "find-hanging", "--broker-id", str(follower_id))
    assert found.returncode == 0, found.stderr
    rows = [line.split() for line in found.stdout.splitlines()[1:]]
    assert [r[:3] + r[5:6] for r in rows] == [[TOPIC, "1", str(MADE_UP_PRODUCER_ID), str(start)]]

    elsewhere = cluster.brokers[follower_id].admin
    body = {"topic": TOPIC, "partition": 1, "start_offset": start}
    done = ok(elsewhere, "POST", "/v1/transactions/abort", body)
    assert done["producer_id"] == MADE_UP_PRODUCER_ID
    high_watermark = wait_until(
        "the LSO to reach the high watermark",
        lambda: (hw := offsets(leader.address, 1, 0)) == offsets(leader.address, 1, 1) and hw,
    )
    assert high_watermark > start
    search = f"/v1/transactions/hanging?broker_id={follower_id}&max_transaction_timeout_ms=0"
    assert ok(broker.admin, "GET", search)["hanging"] == []
