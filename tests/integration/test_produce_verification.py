"""KIP-890 part 1 against a real node: the leader asks the transaction coordinator whether a
partition is in the producer's transaction before it appends the producer's first
transactional batch there.  Sent with our own protocol client (the project's codecs), since
the real clients never send a batch for a partition they did not add; what they do send is
covered by the transactional client tests.

A batch for a partition never added to the transaction is refused with INVALID_TXN_STATE and
nothing is appended (the high watermark, as confluent-kafka reads it, stays); once
AddPartitionsToTxn added the partition, the same batch is accepted, and after EndTxn a
read_committed consumer reads it.  With ``transaction.partition.verification.enable=false``
the broker appends without asking, as Kafka does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from integration.clients import TIMEOUT_S, confluent_conf, create_topic
from integration.cluster_process import LocalCluster
from integration.node_process import NodeProcess
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka_protocol.record_batch import SimpleRecord, build_batch
from kafka_protocol.types import ProducerId, TopicName, TransactionalId

pytestmark = pytest.mark.integration

TOPIC = "verified"
T = TypeVar("T")


def start(tmp: Path, *overrides: str) -> NodeProcess:
    return NodeProcess(tmp, overrides=overrides).start()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = start(Path(tmp_path_factory.mktemp("verify")))
    create_topic(proc, TOPIC, 2)
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


def until(attempt: Callable[[], T | None], what: str) -> T:
    """``attempt()`` until it answers (the coordinator's partition may still be loading)."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if (got := attempt()) is not None:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def find_coordinator(conn: RawConnection, transactional_id: str) -> int:
    """FindCoordinator (key type 1): the coordinator's node id."""

    def find() -> int | None:
        r = conn.request(FindCoordinatorRequest(key=transactional_id, key_type=1), 3)
        assert isinstance(r, FindCoordinatorResponse)
        return int(r.node_id) if r.error_code == ErrorCode.NONE else None

    return until(find, "the transaction coordinator")


def init_producer(conn: RawConnection, transactional_id: str) -> tuple[int, int]:
    """InitProducerId at the coordinator ``conn`` leads to: the producer id and epoch."""
    find_coordinator(conn, transactional_id)

    def init() -> tuple[int, int] | None:
        request = InitProducerIdRequest(
            transactional_id=TransactionalId(transactional_id), transaction_timeout_ms=60_000
        )
        r = conn.request(request, 4)
        assert isinstance(r, InitProducerIdResponse)
        if r.error_code != ErrorCode.NONE:
            return None
        return int(r.producer_id), r.producer_epoch

    return until(init, "InitProducerId")


def add_partition(conn: RawConnection, txn: str, pid: int, epoch: int, partition: int) -> int:
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TransactionalId(txn),
        v3_and_below_producer_id=ProducerId(pid),
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                name=TopicName(TOPIC), partitions=[partition]
            )
        ],
    )
    r = conn.request(request, 3)
    assert isinstance(r, AddPartitionsToTxnResponse)
    (topic,) = r.results_by_topic_v3_and_below
    return int(topic.results_by_partition[0].partition_error_code)


def produce(
    conn: RawConnection, txn: str | None, pid: int, epoch: int, partition: int, seq: int
) -> ProduceResponse.PartitionProduceResponse:
    batch = build_batch(
        [SimpleRecord(b"value-%d" % seq, b"key")],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )
    request = ProduceRequest(
        transactional_id=None if txn is None else TransactionalId(txn),
        acks=-1,
        timeout_ms=5_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TopicName(TOPIC),
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=partition, records=batch)
                ],
            )
        ],
    )
    r = conn.request(request, 9)
    assert isinstance(r, ProduceResponse)
    return r.responses[0].partition_responses[0]


def high_watermark(node: NodeProcess, partition: int) -> int:
    """The log end as a read_uncommitted consumer sees it (librdkafka's default,
    read_committed, would answer the LSO: an open transaction's batch would not show)."""
    conf = {"group.id": "hw", "isolation.level": "read_uncommitted"}
    consumer = Consumer(confluent_conf(node, **conf))
    try:
        _, high = consumer.get_watermark_offsets(
            TopicPartition(TOPIC, partition), timeout=TIMEOUT_S
        )
        return int(high)
    finally:
        consumer.close()


def read_committed(node: NodeProcess, partition: int) -> list[bytes]:
    conf: dict[str, Any] = {
        "group.id": "verify-reader",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
    }
    consumer = Consumer(confluent_conf(node, **conf))
    try:
        consumer.assign([TopicPartition(TOPIC, partition, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and not values:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
        return values
    finally:
        consumer.close()


def test_a_partition_not_in_the_transaction_is_refused_until_it_is_added(
    node: NodeProcess,
) -> None:
    conn = RawConnection(node.bootstrap)
    try:
        pid, epoch = init_producer(conn, "p2-verify")
        refused = produce(conn, "p2-verify", pid, epoch, partition=0, seq=0)
        assert refused.error_code == ErrorCode.INVALID_TXN_STATE, refused
        assert refused.error_message
        assert high_watermark(node, 0) == 0, "a refused batch was appended"
        # Without the transactional id the leader cannot ask: refused as well.
        anonymous = produce(conn, None, pid, epoch, partition=0, seq=0)
        assert anonymous.error_code == ErrorCode.INVALID_TXN_STATE
        assert high_watermark(node, 0) == 0

        assert add_partition(conn, "p2-verify", pid, epoch, 0) == ErrorCode.NONE
        accepted = produce(conn, "p2-verify", pid, epoch, partition=0, seq=0)
        assert (accepted.error_code, accepted.base_offset) == (ErrorCode.NONE, 0)
        # The other partition is still not in the transaction.
        other = produce(conn, "p2-verify", pid, epoch, partition=1, seq=0)
        assert other.error_code == ErrorCode.INVALID_TXN_STATE
        assert high_watermark(node, 1) == 0

        end = EndTxnRequest(
            transactional_id=TransactionalId("p2-verify"),
            producer_id=ProducerId(pid),
            producer_epoch=epoch,
            committed=True,
        )
        ended = conn.request(end, 3)
        assert isinstance(ended, EndTxnResponse) and ended.error_code == ErrorCode.NONE
        assert read_committed(node, 0) == [b"value-0"]
    finally:
        conn.close()


def test_a_fenced_epoch_is_refused_as_invalid_producer_epoch(node: NodeProcess) -> None:
    conn = RawConnection(node.bootstrap)
    try:
        pid, old_epoch = init_producer(conn, "p2-fenced")
        new_pid, new_epoch = init_producer(conn, "p2-fenced")  # fences the first
        assert (new_pid, new_epoch) != (pid, old_epoch)
        before = high_watermark(node, 1)
        refused = produce(conn, "p2-fenced", pid, old_epoch, partition=1, seq=0)
        assert refused.error_code in (
            ErrorCode.INVALID_PRODUCER_EPOCH,
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ), refused
        assert high_watermark(node, 1) == before
    finally:
        conn.close()


def test_without_verification_the_broker_appends_unasked(tmp_path: Path) -> None:
    proc = start(tmp_path, "transaction.partition.verification.enable=false")
    try:
        create_topic(proc, TOPIC, 1)
        conn = RawConnection(proc.bootstrap)
        try:
            pid, epoch = init_producer(conn, "p2-unverified")
            got = produce(conn, "p2-unverified", pid, epoch, partition=0, seq=0)
            assert got.error_code == ErrorCode.NONE
            assert high_watermark(proc, 0) == 1
        finally:
            conn.close()
    finally:
        assert proc.stop() == 0, proc.log_tail()


# --- a coordinator on another broker: the leader asks it with AddPartitionsToTxn v4 -------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(Path(tmp_path_factory.mktemp("verify-remote")), 1, 3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill_all()


def test_a_leader_asks_a_coordinator_on_another_broker(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 10_000})
    ids = sorted(cluster.brokers)
    topic = NewTopic(TOPIC, len(ids), replica_assignment=[[i] for i in ids])
    admin.create_topics([topic])[TOPIC].result(TIMEOUT_S)
    any_broker = RawConnection(cluster.any_broker().address, timeout_s=20)
    try:
        coordinator = find_coordinator(any_broker, "p2-remote")
    finally:
        any_broker.close()
    partition = next(p for p, broker in enumerate(ids) if broker != coordinator)
    at_coordinator = RawConnection(cluster.brokers[coordinator].address, timeout_s=20)
    at_leader = RawConnection(cluster.brokers[ids[partition]].address, timeout_s=20)
    try:
        pid, epoch = init_producer(at_coordinator, "p2-remote")
        refused = until(
            lambda: (
                r
                if (r := produce(at_leader, "p2-remote", pid, epoch, partition, seq=0)).error_code
                != ErrorCode.NOT_ENOUGH_REPLICAS  # the leader may not know the coordinator yet
                else None
            ),
            "the remote coordinator's answer",
        )
        assert refused.error_code == ErrorCode.INVALID_TXN_STATE, refused
        assert add_partition(at_coordinator, "p2-remote", pid, epoch, partition) == ErrorCode.NONE
        accepted = produce(at_leader, "p2-remote", pid, epoch, partition, seq=0)
        assert (accepted.error_code, accepted.base_offset) == (ErrorCode.NONE, 0), accepted
    finally:
        at_coordinator.close()
        at_leader.close()
