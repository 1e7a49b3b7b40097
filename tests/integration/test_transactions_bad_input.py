"""Transactional requests that break the protocol's rules, sent with our own codecs: each is
answered with the error code Kafka answers (``TransactionCoordinator.scala``, KafkaApis'
down-conversion of PRODUCER_FENCED to INVALID_PRODUCER_EPOCH for requests older than
KIP-588's versions), nothing of a refused produce is appended, and the node keeps serving.

One ``kraft dev`` node; its transaction coordinator is itself (FindCoordinator key type 1).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from integration.clients import create_topic
from integration.node_process import NodeProcess
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    MetadataRequest,
    ProduceRequest,
)
from kafka_protocol.record_batch import SimpleRecord, build_batch
from kafka_protocol.types import GroupId, ProducerId, TopicName, TransactionalId

pytestmark = pytest.mark.integration

TIMEOUT_S = 20.0
RETRIABLE = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS,
}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(Path(tmp_path_factory.mktemp("txn-bad-input"))).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture
def conn(node: NodeProcess) -> Iterator[RawConnection]:
    c = RawConnection(node.bootstrap, timeout_s=TIMEOUT_S)
    yield c
    c.close()


def retried(conn: RawConnection, request: Any, version: int, error: Any) -> Any:
    """``request`` again while ``error(response)`` is retriable (the coordinator loading its
    partition, markers still being written)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        response = conn.request(request, version)
        if error(response) not in RETRIABLE or time.monotonic() > deadline:
            return response
        time.sleep(0.1)


def init_producer(conn: RawConnection, txn_id: str, timeout_ms: int = 60000) -> tuple[int, int]:
    find = FindCoordinatorRequest(key=txn_id, key_type=1)
    found = retried(conn, find, 3, lambda r: r.error_code)
    assert found.error_code == ErrorCode.NONE, found
    request = InitProducerIdRequest(
        transactional_id=TransactionalId(txn_id), transaction_timeout_ms=timeout_ms
    )
    response = retried(conn, request, 3, lambda r: r.error_code)
    assert response.error_code == ErrorCode.NONE, response
    return int(response.producer_id), int(response.producer_epoch)


def add_partitions(
    conn: RawConnection, txn_id: str, pid: int, epoch: int, topic: str, version: int = 3
) -> ErrorCode:
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TransactionalId(txn_id),
        v3_and_below_producer_id=ProducerId(pid),
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=TopicName(topic), partitions=[0])
        ],
    )

    def error(r: Any) -> int:
        return int(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)

    return ErrorCode(error(retried(conn, request, version, error)))


def end_txn(
    conn: RawConnection, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3
) -> ErrorCode:
    request = EndTxnRequest(
        transactional_id=TransactionalId(txn_id),
        producer_id=ProducerId(pid),
        producer_epoch=epoch,
        committed=commit,
    )
    return ErrorCode(conn.request(request, version).error_code)


def add_offsets(conn: RawConnection, txn_id: str, pid: int, epoch: int, version: int) -> ErrorCode:
    request = AddOffsetsToTxnRequest(
        transactional_id=TransactionalId(txn_id),
        producer_id=ProducerId(pid),
        producer_epoch=epoch,
        group_id=GroupId("bad-input-group"),
    )
    return ErrorCode(conn.request(request, version).error_code)


def produce(
    conn: RawConnection, txn_id: str, pid: int, epoch: int, topic: str, sequence: int = 0
) -> ErrorCode:
    batch = build_batch(
        [SimpleRecord(key=None, value=b"txn-record")],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        transactional=True,
    )
    request = ProduceRequest(
        transactional_id=TransactionalId(txn_id),
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TopicName(topic),
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)],
            )
        ],
    )
    response = conn.request(request, 9)
    return ErrorCode(response.responses[0].partition_responses[0].error_code)


def marks(node: NodeProcess, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark) of partition 0."""
    out = []
    for isolation in ("read_committed", "read_uncommitted"):
        c = Consumer(
            {"bootstrap.servers": node.bootstrap, "group.id": "marks", "isolation.level": isolation}
        )
        try:
            out.append(c.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT_S)[1])
        finally:
            c.close()
    return out[0], out[1]


def assert_still_serving(node: NodeProcess) -> None:
    conn = RawConnection(node.bootstrap)
    assert conn.request(MetadataRequest(topics=None), 12).brokers
    conn.close()
    assert node.alive()


def test_wrong_epochs_and_unknown_producer_ids_are_refused(
    node: NodeProcess, conn: RawConnection, topic_name: str
) -> None:
    create_topic(node, topic_name, 1)
    txn = f"bad-{topic_name}"
    pid, epoch = init_producer(conn, txn)
    # KIP-588: PRODUCER_FENCED from v2 on; older clients get INVALID_PRODUCER_EPOCH
    assert add_partitions(conn, txn, pid, epoch + 1, topic_name) == ErrorCode.PRODUCER_FENCED
    assert (
        add_partitions(conn, txn, pid, epoch + 1, topic_name, version=1)
        == ErrorCode.INVALID_PRODUCER_EPOCH
    )
    assert (
        add_partitions(conn, txn, pid + 1000, epoch, topic_name)
        == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )
    assert (
        add_partitions(conn, f"never-{topic_name}", pid, epoch, topic_name)
        == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )
    assert add_offsets(conn, txn, pid, epoch + 1, 3) == ErrorCode.PRODUCER_FENCED
    assert add_offsets(conn, txn, pid, epoch + 1, 1) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert end_txn(conn, txn, pid, epoch + 1, True) == ErrorCode.PRODUCER_FENCED
    assert end_txn(conn, txn, pid, epoch + 1, True, version=1) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert end_txn(conn, txn, pid + 1000, epoch, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert marks(node, topic_name) == (0, 0), "nothing was appended"
    assert_still_serving(node)


def test_end_txn_out_of_order_is_invalid_txn_state(
    node: NodeProcess, conn: RawConnection, topic_name: str
) -> None:
    create_topic(node, topic_name, 1)
    txn = f"order-{topic_name}"
    pid, epoch = init_producer(conn, txn)
    # no transaction yet (Empty): nothing to commit or abort
    assert end_txn(conn, txn, pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
    assert end_txn(conn, txn, pid, epoch, False) == ErrorCode.INVALID_TXN_STATE
    assert add_partitions(conn, txn, pid, epoch, topic_name) == ErrorCode.NONE
    assert produce(conn, txn, pid, epoch, topic_name) == ErrorCode.NONE
    deadline = time.monotonic() + TIMEOUT_S
    while (aborted := end_txn(conn, txn, pid, epoch, False)) in RETRIABLE:
        assert time.monotonic() < deadline
    assert aborted == ErrorCode.NONE
    # aborted: committing it now is out of order; aborting it again is a retry, answered NONE
    # once complete (CONCURRENT_TRANSACTIONS while its markers are being written)
    assert end_txn(conn, txn, pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
    while (again := end_txn(conn, txn, pid, epoch, False)) in RETRIABLE:
        assert time.monotonic() < deadline
    assert again == ErrorCode.NONE
    # the record and its ABORT marker; nothing for read_committed readers
    assert marks(node, topic_name) == (2, 2)
    consumer = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": "bad-input-reader",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        while True:
            msg = consumer.poll(TIMEOUT_S)
            assert msg is not None, "no end of partition reached"
            assert msg.error() is not None, f"an aborted record was read: {msg.value()!r}"
            break
    finally:
        consumer.close()
    assert_still_serving(node)


def test_a_transactional_produce_to_a_partition_not_added_appends_nothing(
    node: NodeProcess, conn: RawConnection, topic_name: str
) -> None:
    create_topic(node, topic_name, 1)
    txn = f"notadded-{topic_name}"
    pid, epoch = init_producer(conn, txn)
    # KIP-890: the leader asks the coordinator, which has no such partition in a transaction
    # (Kafka 3.6-3.7 answer INVALID_TXN_STATE; later versions TRANSACTION_ABORTABLE)
    refused = {ErrorCode.INVALID_TXN_STATE, ErrorCode.TRANSACTION_ABORTABLE}
    assert produce(conn, txn, pid, epoch, topic_name) in refused
    # a producer id the coordinator never gave out, under a known transactional id
    unknown = {ErrorCode.INVALID_PRODUCER_ID_MAPPING, *refused}
    assert produce(conn, txn, pid + 1000, 0, topic_name) in unknown
    assert marks(node, topic_name) == (0, 0), "nothing was appended"
    # once added, the same batch is accepted
    assert add_partitions(conn, txn, pid, epoch, topic_name) == ErrorCode.NONE
    assert produce(conn, txn, pid, epoch, topic_name) == ErrorCode.NONE
    assert marks(node, topic_name) == (0, 1)
    assert_still_serving(node)


def test_a_transaction_timeout_above_the_maximum_is_refused(
    node: NodeProcess, conn: RawConnection
) -> None:
    find = FindCoordinatorRequest(key="too-long", key_type=1)
    assert retried(conn, find, 3, lambda r: r.error_code).error_code == ErrorCode.NONE
    request = InitProducerIdRequest(
        transactional_id=TransactionalId("too-long"),
        transaction_timeout_ms=900_001,  # transaction.max.timeout.ms is 900000
    )
    response = retried(conn, request, 3, lambda r: r.error_code)
    assert response.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert_still_serving(node)
