"""The partition side of transactions against a real broker process: transactional batches
and WriteTxnMarkers sent with our own codecs (no coordinator involved), then read back with
Fetch and ListOffsets at both isolation levels, and by confluent-kafka's and kafka-python's
read_committed consumers; the state survives a clean restart and a kill -9 (the
aborted-transaction index is rebuilt by recovery)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from integration.clients import confluent_consumer, create_topic
from integration.node_process import NodeProcess
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka_protocol.record_batch import SimpleRecord, build_batch, iter_batches
from kafka_protocol.types import ProducerId, TopicName

pytestmark = pytest.mark.integration

TOPIC = "txn-markers"
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
PID_A, PID_B, PID_C = 4000, 4001, 4002
RETRIABLE = (ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    # No coordinator knows these producers: the leader must not ask one (KIP-890 verification
    # is tested in test_produce_verification.py).
    proc = NodeProcess(
        Path(tmp_path_factory.mktemp("txn-markers")),
        overrides=("transaction.partition.verification.enable=false",),
    ).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


def produce(
    conn: RawConnection,
    values: list[bytes],
    *,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    transactional: bool = False,
    topic: str = TOPIC,
) -> ProduceResponse.PartitionProduceResponse:
    batch = build_batch(
        [SimpleRecord(value=v, key=None) for v in values],
        now_ms=int(time.time() * 1000),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=transactional,
    )
    request = ProduceRequest(
        transactional_id="txn-a" if transactional else None,
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
    assert isinstance(response, ProduceResponse)
    return response.responses[0].partition_responses[0]


def marker(
    conn: RawConnection,
    pid: int,
    epoch: int,
    commit: bool,
    coordinator_epoch: int = 0,
    partitions: tuple[tuple[str, int], ...] = ((TOPIC, 0),),
) -> list[ErrorCode]:
    request = WriteTxnMarkersRequest(
        markers=[
            WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=ProducerId(pid),
                producer_epoch=epoch,
                transaction_result=commit,
                coordinator_epoch=coordinator_epoch,
                topics=[
                    WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                        name=TopicName(t), partition_indexes=[i]
                    )
                    for t, i in partitions
                ],
            )
        ]
    )
    response = conn.request(request, 1)
    assert isinstance(response, WriteTxnMarkersResponse)
    (result,) = response.markers
    return [p.error_code for t in result.topics for p in t.partitions]


def fetch(conn: RawConnection, isolation: int, offset: int = 0) -> FetchResponse.PartitionData:
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=isolation,
        topics=[
            FetchRequest.FetchTopic(
                topic=TopicName(TOPIC),
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )
    response = conn.request(request, 11)
    assert isinstance(response, FetchResponse)
    data = response.responses[0].partitions[0]
    assert data.error_code == ErrorCode.NONE
    return data


def values_in(data: FetchResponse.PartitionData) -> list[bytes]:
    """Every data record's value, aborted ones included (what the broker sent)."""
    out = []
    for batch in iter_batches(bytes(data.records or b"")):
        if not batch.is_control:
            out += [bytes(r.value or b"") for r in batch.iter_records()]
    return out


def latest(conn: RawConnection, isolation: int) -> int:
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=TopicName(TOPIC),
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)
                ],
            )
        ],
    )
    response = conn.request(request, 5)
    assert isinstance(response, ListOffsetsResponse)
    answer = response.topics[0].partitions[0]
    if answer.error_code in RETRIABLE:  # a restarted leader catching up
        return -1
    assert answer.error_code == ErrorCode.NONE
    return int(answer.offset)


def read_committed_confluent(node: NodeProcess, end: int) -> list[bytes]:
    consumer = confluent_consumer(node, isolation_level="read_committed")
    out: list[bytes] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            for msg in consumer.consume(100, timeout=0.3):
                assert msg.error() is None, msg.error()
                out.append(msg.value())
            if consumer.position([TopicPartition(TOPIC, 0)])[0].offset >= end:
                break
    finally:
        consumer.close()
    return out


def read_committed_kafka_python(node: NodeProcess, count: int) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=node.bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    out: list[Any] = []
    try:
        consumer.assign([KpTopicPartition(TOPIC, 0)])
        consumer.seek(KpTopicPartition(TOPIC, 0), 0)
        for msg in consumer:
            out.append(msg.value)
            if len(out) >= count:
                break
    finally:
        consumer.close()
    return out


def test_markers_last_stable_offset_and_read_committed(node: NodeProcess) -> None:
    create_topic(node, TOPIC, 1)
    conn = RawConnection(node.bootstrap)
    # A: a transaction later aborted; B: one later committed; plain records between them.
    assert (
        produce(conn, [b"a1", b"a2"], pid=PID_A, epoch=0, seq=0, transactional=True).error_code
        == ErrorCode.NONE
    )
    assert produce(conn, [b"plain1"]).error_code == ErrorCode.NONE
    assert produce(conn, [b"b1"], pid=PID_B, epoch=0, seq=0, transactional=True).base_offset == 3
    assert produce(conn, [b"a3"], pid=PID_A, epoch=0, seq=2, transactional=True).base_offset == 4
    # A transactional batch without sequences (as the group coordinator writes them).
    assert produce(conn, [b"b2"], pid=PID_B, epoch=0, transactional=True).base_offset == 5

    # A's transaction is open at offset 0: nothing is stable yet.
    uncommitted = fetch(conn, READ_UNCOMMITTED)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (6, 0)
    assert values_in(uncommitted) == [b"a1", b"a2", b"plain1", b"b1", b"a3", b"b2"]
    committed = fetch(conn, READ_COMMITTED)
    assert (values_in(committed), committed.last_stable_offset) == ([], 0)
    assert (latest(conn, READ_UNCOMMITTED), latest(conn, READ_COMMITTED)) == (6, 0)

    # An idempotent write of A outside its transaction is refused while it is open.
    assert (
        produce(conn, [b"x"], pid=PID_A, epoch=0, seq=3).error_code == ErrorCode.INVALID_TXN_STATE
    )

    assert marker(conn, PID_A, 0, commit=False, coordinator_epoch=3) == [ErrorCode.NONE]
    # A is aborted (marker at 6): B's transaction, open since 3, bounds the LSO now.
    assert (fetch(conn, READ_COMMITTED).last_stable_offset, latest(conn, READ_COMMITTED)) == (3, 3)
    assert marker(conn, PID_B, 0, commit=True, coordinator_epoch=3) == [ErrorCode.NONE]
    committed = fetch(conn, READ_COMMITTED)
    assert (committed.high_watermark, committed.last_stable_offset) == (8, 8)
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(PID_A, 0)]
    assert latest(conn, READ_COMMITTED) == 8
    # read_uncommitted fetches get no aborted transactions; a read_committed fetch past them
    # gets none either
    assert not fetch(conn, READ_UNCOMMITTED).aborted_transactions
    assert not fetch(conn, READ_COMMITTED, offset=7).aborted_transactions

    want = [b"plain1", b"b1", b"b2"]
    assert read_committed_confluent(node, 8) == want
    assert read_committed_kafka_python(node, len(want)) == want


def test_fenced_markers_and_bad_partitions_are_refused(node: NodeProcess) -> None:
    conn = RawConnection(node.bootstrap)
    end = latest(conn, READ_UNCOMMITTED)
    assert (
        produce(conn, [b"c1"], pid=PID_C, epoch=2, seq=0, transactional=True).error_code
        == ErrorCode.NONE
    )
    assert marker(conn, PID_C, 1, commit=True) == [ErrorCode.INVALID_PRODUCER_EPOCH]
    assert marker(conn, PID_C, 2, commit=False, coordinator_epoch=7) == [ErrorCode.NONE]
    assert marker(conn, PID_C, 2, commit=False, coordinator_epoch=6) == [
        ErrorCode.TRANSACTION_COORDINATOR_FENCED
    ]
    # A marker of a newer epoch fences the producer's older one.
    assert marker(conn, PID_C, 3, commit=False, coordinator_epoch=7) == [ErrorCode.NONE]
    fenced = produce(conn, [b"c2"], pid=PID_C, epoch=2, seq=1, transactional=True)
    assert fenced.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert marker(conn, PID_C, 3, commit=True, partitions=(("no-such-topic", 0),)) == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    ]
    assert latest(conn, READ_UNCOMMITTED) == end + 3  # c1 and two markers; nothing refused
    committed = fetch(conn, READ_COMMITTED, offset=end)
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [
        (PID_C, end)
    ]

    request = DescribeProducersRequest(
        topics=[DescribeProducersRequest.TopicRequest(name=TopicName(TOPIC), partition_indexes=[0])]
    )
    response = conn.request(request, 0)
    assert isinstance(response, DescribeProducersResponse)
    (answer,) = response.topics[0].partitions
    producers = {p.producer_id: p for p in answer.active_producers}
    assert {PID_A, PID_B, PID_C} <= set(producers)
    assert (producers[PID_C].producer_epoch, producers[PID_C].coordinator_epoch) == (3, 7)
    assert all(p.current_txn_start_offset == -1 for p in producers.values())


@pytest.mark.parametrize("how", ["clean", "kill"])
def test_transaction_state_survives_restarts(node: NodeProcess, how: str) -> None:
    conn = RawConnection(node.bootstrap)
    end = latest(conn, READ_UNCOMMITTED)
    pid_open, pid_aborted = (5000, 5001) if how == "clean" else (6000, 6001)
    # one transaction left open across the restart, one aborted before it
    assert (
        produce(conn, [b"open"], pid=pid_open, epoch=0, seq=0, transactional=True).error_code
        == ErrorCode.NONE
    )
    assert (
        produce(conn, [b"gone"], pid=pid_aborted, epoch=0, seq=0, transactional=True).error_code
        == ErrorCode.NONE
    )
    assert marker(conn, pid_aborted, 0, commit=False) == [ErrorCode.NONE]
    before = fetch(conn, READ_COMMITTED, offset=end)
    conn.close()
    if how == "clean":
        assert node.stop() == 0
    else:
        node.kill()
    node.start()
    conn = RawConnection(node.bootstrap)
    deadline = time.monotonic() + 15
    while latest(conn, READ_UNCOMMITTED) < end + 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    after = fetch(conn, READ_COMMITTED, offset=end)
    assert after.last_stable_offset == before.last_stable_offset == end  # still open
    assert marker(conn, pid_open, 0, commit=True) == [ErrorCode.NONE]
    committed = fetch(conn, READ_COMMITTED, offset=end)
    assert committed.last_stable_offset == end + 4
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [
        (pid_aborted, end + 1)
    ]


def _consume_all(node: NodeProcess, topic: str, isolation: str, want: int) -> list[bytes]:
    consumer = confluent_consumer(node, isolation_level=isolation)
    out: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 15
        while len(out) < want and time.monotonic() < deadline:
            out += [m.value() for m in consumer.consume(100, timeout=0.3) if m.error() is None]
        out += [m.value() for m in consumer.consume(100, timeout=0.5) if m.error() is None]
    finally:
        consumer.close()
    return out


def test_confluent_transactional_producer_and_read_committed(node: NodeProcess) -> None:
    topic = "txn-confluent"
    create_topic(node, topic, 1)
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "p1-tx"})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce(topic, b"c1")
    producer.commit_transaction(20)
    producer.begin_transaction()
    producer.produce(topic, b"a1")
    producer.flush(20)
    producer.abort_transaction(20)
    producer.begin_transaction()
    producer.produce(topic, b"open")
    producer.flush(20)  # written, not committed: the LSO stays at it
    conn = RawConnection(node.bootstrap)
    low, high = watermark_pair(conn, topic)
    assert low < high
    assert _consume_all(node, topic, "read_committed", 1) == [b"c1"]
    assert _consume_all(node, topic, "read_uncommitted", 3) == [b"c1", b"a1", b"open"]
    producer.commit_transaction(20)
    assert _consume_all(node, topic, "read_committed", 2) == [b"c1", b"open"]
    low, high = watermark_pair(conn, topic)
    assert low == high


def watermark_pair(conn: RawConnection, topic: str) -> tuple[int, int]:
    """(latest read_committed, latest read_uncommitted) by ListOffsets."""
    answers = []
    for isolation in (READ_COMMITTED, READ_UNCOMMITTED):
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=isolation,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=TopicName(topic),
                    partitions=[
                        ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)
                    ],
                )
            ],
        )
        response = conn.request(request, 5)
        answers.append(int(response.topics[0].partitions[0].offset))
    return answers[0], answers[1]


def test_a_parked_read_committed_fetch_wakes_when_the_marker_moves_the_lso(
    node: NodeProcess,
) -> None:
    waiting, writer = RawConnection(node.bootstrap, timeout_s=10), RawConnection(node.bootstrap)
    start = latest(writer, READ_UNCOMMITTED)
    assert produce(writer, [b"w1"], pid=7000, epoch=0, seq=0, transactional=True).error_code == 0
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=8000,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=READ_COMMITTED,
        topics=[
            FetchRequest.FetchTopic(
                topic=TopicName(TOPIC),
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0, fetch_offset=start, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )
    sent_at = time.monotonic()
    waiting.send(request, 11)
    time.sleep(0.5)  # parked: the LSO is at w1
    assert marker(writer, 7000, 0, commit=True) == [ErrorCode.NONE]
    _, response = waiting.recv(request.API_KEY, 11)
    waited = time.monotonic() - sent_at
    data = response.responses[0].partitions[0]
    assert values_in(data) == [b"w1"]
    assert waited < 5, f"answered after {waited:.1f} s: the marker did not wake the fetch"
