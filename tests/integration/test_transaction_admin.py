"""Transaction administration end to end (KIP-664): one ``kraft dev`` node, a real
confluent-kafka transactional producer, the REST API and ``kraft transactions``.

A transaction left open by librdkafka shows up in list, describe and describe-producers, and is
not hanging (its coordinator knows it has the partition).  A hanging transaction is made as
KIP-664 describes one: transactional batches appended for a producer id no coordinator ever
issued (our own protocol client, with ``transaction.partition.verification.enable=false`` so
the leader does not ask the coordinator, KIP-890).  It holds the last stable offset back, so a
read_committed consumer stops at it; find-hanging reports it, ``abort --start-offset`` writes
the ABORT marker, and the consumer then reads past it, without the aborted records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from integration.node_process import NodeProcess
from integration.raw_client import RawConnection
from kafka_protocol.clock import wall_ms
from kafka_protocol.messages import ListOffsetsRequest, ProduceRequest
from kafka_protocol.record_batch import SimpleRecord, build_batch
from kafka_protocol.types import BrokerId, TopicName, TransactionalId

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
OVERRIDES = (
    "transaction.state.log.num.partitions=3",
    "offsets.topic.num.partitions=3",
    # the hanging transaction is written without the coordinator: no KIP-890 verification
    "transaction.partition.verification.enable=false",
)
MADE_UP_PRODUCER_ID = 777_000_001
READ_COMMITTED = 1
LATEST = -1
WAIT_S = 30.0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(Path(tmp_path_factory.mktemp("txn-admin")), overrides=OVERRIDES).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


# --- REST and the CLI ---------------------------------------------------------------------------


def http(node: NodeProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(node.admin + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def ok(node: NodeProcess, method: str, path: str, body: Any = None) -> Any:
    status, answer = http(node, method, path, body)
    assert status in (200, 201), (status, answer)
    return answer


def kraft(node: NodeProcess, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    env.pop("KRAFT_ADMIN", None)
    return subprocess.run(
        [sys.executable, "-m", "kraft.cli", "transactions", *argv, "--admin", node.admin],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def table(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines() if line.strip()]


def create_topic(node: NodeProcess, name: str, partitions: int = 1) -> None:
    ok(node, "POST", "/v1/topics", {"name": name, "partitions": partitions})


def wait_until(what: str, check: Any) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# --- a transaction left open by librdkafka -------------------------------------------------------


def test_an_open_transaction_in_list_describe_and_describe_producers(node: NodeProcess) -> None:
    create_topic(node, "orders", 2)
    producer = Producer(
        {
            "bootstrap.servers": node.bootstrap,
            "transactional.id": "admin-open",
            "transaction.timeout.ms": 60_000,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("orders", value=f"v{i}".encode(), partition=1)
    producer.flush(30)
    try:
        listed = ok(node, "GET", "/v1/transactions?state=Ongoing")
        [mine] = [t for t in listed if t["transactional_id"] == "admin-open"]
        producer_id = mine["producer_id"]
        assert mine["state"] == "Ongoing"
        rows = table(kraft(node, "list").stdout)
        assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        assert ["admin-open", str(mine["coordinator"]), str(producer_id), "Ongoing"] in rows

        described = ok(node, "GET", "/v1/transactions/admin-open")
        assert (described["state"], described["producer_id"]) == ("Ongoing", producer_id)
        assert described["partitions"] == [{"topic": "orders", "partition": 1}]
        assert described["transaction_timeout_ms"] == 60_000
        assert described["transaction_start_time_ms"] is not None
        shown = kraft(node, "describe", "--transactional-id", "admin-open")
        assert shown.returncode == 0, shown.stderr
        [header, row] = table(shown.stdout)
        assert header[:2] == ["CoordinatorId", "TransactionalId"]
        assert (row[1], row[2], row[4]) == ("admin-open", str(producer_id), "Ongoing")
        assert row[-1] == "orders-1"

        direct = kraft(
            node,
            "describe",
            "--transactional-id",
            "admin-open",
            "--bootstrap-server",
            node.bootstrap,
        )
        assert direct.returncode == 0, direct.stderr  # over Kafka, as kafka-transactions.sh
        assert table(direct.stdout)[1][:5] == row[:5]

        producers = ok(node, "GET", "/v1/topics/orders/partitions/1/producers")["producers"]
        [state] = [p for p in producers if p["producer_id"] == producer_id]
        assert state["current_transaction_start_offset"] == 0
        out = kraft(node, "describe-producers", "--topic", "orders", "--partition", "1")
        assert out.returncode == 0, out.stderr
        assert [str(producer_id), str(state["producer_epoch"])] == table(out.stdout)[1][:2]
        assert table(out.stdout)[1][-1] == "0"

        # known to its coordinator with this partition: not hanging, however old
        found = ok(
            node, "GET", "/v1/transactions/hanging?topic=orders&max_transaction_timeout_ms=0"
        )
        assert found["partitions_searched"] == 2 and found["hanging"] == []
    finally:
        producer.abort_transaction(30)
    completed = wait_until(
        "the abort to complete",
        lambda: ok(node, "GET", "/v1/transactions/admin-open")["state"] == "CompleteAbort",
    )
    assert completed
    producers = ok(node, "GET", "/v1/topics/orders/partitions/1/producers")["producers"]
    assert [p["current_transaction_start_offset"] for p in producers] == [None]


def test_bad_requests_get_errors_and_the_node_stays_up(node: NodeProcess) -> None:
    status, missing = http(node, "GET", "/v1/transactions/nobody-has-this")
    assert (status, missing["error"]) == (404, "TRANSACTIONAL_ID_NOT_FOUND")
    status, bad = http(node, "POST", "/v1/transactions/abort", {"topic": "orders", "partition": 0})
    assert status == 400 and "start_offset" in bad["message"]
    status, bad = http(node, "GET", "/v1/transactions?state=Sleeping")
    assert status == 400
    status, bad = http(node, "GET", "/v1/transactions/hanging")
    assert status == 400
    status, gone = http(node, "GET", "/v1/topics/no-such/partitions/0/producers")
    assert (status, gone["error"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    failed = kraft(node, "describe", "--transactional-id", "nobody-has-this")
    assert failed.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in failed.stderr
    assert ok(node, "GET", "/v1/health")


# --- a hanging transaction -----------------------------------------------------------------------


def produce(node: NodeProcess, topic: str, batch: bytes, transactional_id: str | None) -> int:
    request = ProduceRequest(
        transactional_id=None if transactional_id is None else TransactionalId(transactional_id),
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TopicName(topic),
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)],
            )
        ],
    )
    conn = RawConnection(node.bootstrap)
    try:
        answer = conn.request(request, 9).responses[0].partition_responses[0]
    finally:
        conn.close()
    assert answer.error_code == 0, answer
    return int(answer.base_offset)


def last_stable_offset(node: NodeProcess, topic: str) -> int:
    request = ListOffsetsRequest(
        replica_id=BrokerId(-1),
        isolation_level=READ_COMMITTED,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=TopicName(topic),
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=LATEST)
                ],
            )
        ],
    )
    conn = RawConnection(node.bootstrap)
    try:
        answer = conn.request(request, 7).topics[0].partitions[0]
    finally:
        conn.close()
    assert answer.error_code == 0, answer
    return int(answer.offset)


def read_committed(node: NodeProcess, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": f"reader-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
    finally:
        consumer.close()
    return values


def test_a_hanging_transaction_is_found_and_aborted(node: NodeProcess) -> None:
    topic = "stuck"
    create_topic(node, topic)
    before = build_batch([SimpleRecord(b"before", b"k")], now_ms=wall_ms())
    assert produce(node, topic, before, None) == 0
    an_hour_ago = wall_ms() - 3_600_000
    hanging = build_batch(
        [SimpleRecord(f"hanging-{i}".encode(), b"k") for i in range(3)],
        now_ms=an_hour_ago,
        producer_id=MADE_UP_PRODUCER_ID,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    start = produce(node, topic, hanging, "never-told-the-coordinator")
    assert start == 1
    after = build_batch([SimpleRecord(b"after", b"k")], now_ms=wall_ms())
    assert produce(node, topic, after, None) == 4
    assert last_stable_offset(node, topic) == start  # read_committed readers stop here

    found = ok(node, "GET", f"/v1/transactions/hanging?topic={topic}")  # 15 minutes
    [row] = found["hanging"]
    assert (row["partition"], row["producer_id"], row["start_offset"]) == (
        0,
        MADE_UP_PRODUCER_ID,
        start,
    )
    assert row["duration_ms"] >= 3_600_000 and row["coordinator_epoch"] is None
    by_broker = kraft(node, "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "30")
    assert by_broker.returncode == 0, by_broker.stderr
    rows = table(by_broker.stdout)
    assert rows[0][:3] == ["Topic", "Partition", "ProducerId"]
    assert [topic, "0", str(MADE_UP_PRODUCER_ID), "0", "-1", str(start)] in [r[:6] for r in rows]
    direct = kraft(node, "find-hanging", "--topic", topic, "--bootstrap-server", node.bootstrap)
    assert direct.returncode == 0, direct.stderr
    assert [r[:6] for r in table(direct.stdout)[1:]] == [
        [topic, "0", str(MADE_UP_PRODUCER_ID), "0", "-1", str(start)]
    ]
    none_yet = kraft(node, "find-hanging", "--topic", topic, "--max-transaction-timeout", "120")
    assert len(table(none_yet.stdout)) == 1  # an hour old is not older than two hours

    wrong = kraft(node, "abort", "--topic", topic, "--partition", "0", "--start-offset", "2")
    assert wrong.returncode == 1 and "no open transaction starts at offset 2" in wrong.stderr
    aborted = kraft(
        node, "abort", "--topic", topic, "--partition", "0", "--start-offset", str(start)
    )
    assert aborted.returncode == 0, aborted.stderr
    assert f"producer {MADE_UP_PRODUCER_ID}" in aborted.stdout
    again = kraft(node, "find-hanging", "--topic", topic, "--bootstrap-server", node.bootstrap)
    assert again.returncode == 0, again.stderr
    assert len(table(again.stdout)) == 1  # the header only: nothing hangs now

    assert wait_until(
        "the LSO to pass the aborted transaction", lambda: last_stable_offset(node, topic) > 4
    )
    assert (
        ok(node, "GET", f"/v1/transactions/hanging?topic={topic}&max_transaction_timeout_ms=0")[
            "hanging"
        ]
        == []
    )
    producers = ok(node, "GET", f"/v1/topics/{topic}/partitions/0/producers")["producers"]
    [made_up] = [p for p in producers if p["producer_id"] == MADE_UP_PRODUCER_ID]
    assert made_up["current_transaction_start_offset"] is None
    assert read_committed(node, topic, 2) == [b"before", b"after"]  # past it, without it
