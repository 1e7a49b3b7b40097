"""Followers build a partition's transaction state from what they replicate: on a cluster of
real processes (one controller, three brokers), a transaction left open and one aborted on the
leader are seen the same way by the follower that takes over after the leader is killed (-9):
its last stable offset holds at the open transaction, DescribeProducers names it, the marker
that ends it is accepted there, and read_committed readers (our Fetch, confluent-kafka) then
skip the aborted records through the new leader's aborted-transaction index."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from integration.cluster_process import LocalCluster, ServerProcess
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    DescribeProducersRequest,
    FetchRequest,
    ProduceRequest,
    WriteTxnMarkersRequest,
)
from kafka_protocol.record_batch import SimpleRecord, build_batch, iter_batches
from kafka_protocol.types import ProducerId, TopicName

pytestmark = pytest.mark.integration

TOPIC = "txn-failover"
CONFIG = {
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "1000",
    "auto.leader.rebalance.enable": "false",
    # No coordinator knows these producers: leaders must not ask one (KIP-890 verification
    # is tested in test_produce_verification.py).
    "transaction.partition.verification.enable": "false",
}
OPEN_PID, ABORTED_PID = 9100, 9200
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(Path(tmp_path_factory.mktemp("txn-failover")), 1, 3, CONFIG)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill_all()


def _request(node: ServerProcess, request: Any, version: int) -> Any:
    conn = RawConnection(node.address, timeout_s=20)
    try:
        return conn.request(request, version)
    finally:
        conn.close()


def _produce(node: ServerProcess, values: list[bytes], pid: int = -1, seq: int = -1) -> ErrorCode:
    batch = build_batch(
        [SimpleRecord(v) for v in values],
        now_ms=int(time.time() * 1000),
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        transactional=pid >= 0,
    )
    request = ProduceRequest(
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TopicName(TOPIC),
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)],
            )
        ],
    )
    answer = _request(node, request, 9).responses[0].partition_responses[0]
    return ErrorCode.from_code(answer.error_code)


def _marker(node: ServerProcess, pid: int, commit: bool) -> ErrorCode:
    request = WriteTxnMarkersRequest(
        markers=[
            WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=ProducerId(pid),
                producer_epoch=0,
                transaction_result=commit,
                coordinator_epoch=0,
                topics=[
                    WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                        name=TopicName(TOPIC), partition_indexes=[0]
                    )
                ],
            )
        ]
    )
    answer = _request(node, request, 1).markers[0].topics[0].partitions[0]
    return ErrorCode.from_code(answer.error_code)


def _fetch_committed(node: ServerProcess) -> Any:
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=1,
        topics=[
            FetchRequest.FetchTopic(
                topic=TopicName(TOPIC),
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )
    return _request(node, request, 11).responses[0].partitions[0]


def _leader(cluster: LocalCluster) -> int:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 10000})
    return int(admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].leader)


def _wait(what: str, condition: Any, cluster: LocalCluster) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            if value := condition():
                return value
        except (AssertionError, OSError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}\n{cluster.logs()}")


def test_a_new_leader_knows_the_open_and_aborted_transactions(cluster: LocalCluster) -> None:
    a, b, c = sorted(cluster.brokers)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 10000})
    admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[a, b, c]])])[TOPIC].result(20)
    leader = cluster.brokers[a]
    _wait("the topic's leader", lambda: _leader(cluster) == a, cluster)
    _wait("an acks=all write", lambda: _produce(leader, [b"o1"], OPEN_PID, 0) == 0, cluster)
    assert _produce(leader, [b"x1", b"x2"], ABORTED_PID, 0) == ErrorCode.NONE  # 1-2
    assert _marker(leader, ABORTED_PID, commit=False) == ErrorCode.NONE  # 3
    assert _produce(leader, [b"plain"]) == ErrorCode.NONE  # 4
    assert _fetch_committed(leader).last_stable_offset == 0
    time.sleep(1.0)  # the followers' next fetches tell them the high watermark

    cluster.brokers[a].kill()
    new = _wait("a new leader", lambda: (lead := _leader(cluster)) in (b, c) and lead, cluster)
    successor = cluster.brokers[new]
    answer = _wait(
        "read_committed Fetch at the new leader",
        lambda: (f := _fetch_committed(successor)).error_code == 0 and f.high_watermark == 5 and f,
        cluster,
    )
    assert answer.last_stable_offset == 0, "the open transaction holds the LSO"
    assert not list(iter_batches(bytes(answer.records or b"")))
    describe = DescribeProducersRequest(
        topics=[DescribeProducersRequest.TopicRequest(name=TopicName(TOPIC), partition_indexes=[0])]
    )
    producers = _request(successor, describe, 0).topics[0].partitions[0].active_producers
    assert {(p.producer_id, p.current_txn_start_offset) for p in producers} == {
        (OPEN_PID, 0),
        (ABORTED_PID, -1),
    }

    assert _marker(successor, OPEN_PID, commit=True) == ErrorCode.NONE  # 5
    answer = _fetch_committed(successor)
    assert (answer.high_watermark, answer.last_stable_offset) == (6, 6)
    assert [(t.producer_id, t.first_offset) for t in answer.aborted_transactions] == [
        (ABORTED_PID, 1)
    ]
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "assign-only",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len(values) < 2:
            values += [m.value() for m in consumer.consume(10, timeout=0.5) if not m.error()]
    finally:
        consumer.close()
    assert values == [b"o1", b"plain"]
