"""Offsets committed inside transactions (``send_offsets_to_transaction``, TxnOffsetCommit)
through the three real transactional producers against a real ``kraft dev`` node.

The group's offsets become visible when the transaction commits and never when it aborts;
while it is open OffsetFetch shows the previous offset, and with ``require_stable`` (v7,
KIP-447) answers UNSTABLE_OFFSET_COMMIT; a restarted node (the coordinator loads
``__consumer_offsets`` again, transactional batches and markers included) shows the same.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata as AioOffset
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.structs import OffsetAndMetadata as KpOffset

from integration.clients import TIMEOUT_S, confluent_conf
from integration.node_process import NodeProcess
from integration.raw_client import RawConnection
from integration.txn_requests import init_producer_id, wait_until
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    FindCoordinatorRequest,
    OffsetFetchRequest,
    TxnOffsetCommitRequest,
)

pytestmark = pytest.mark.integration
TOPIC = "txn-in"
_ids = itertools.count()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(Path(tmp_path_factory.mktemp("txn-offsets"))).start()
    admin = AdminClient(confluent_conf(proc))
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(timeout=TIMEOUT_S)
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


def fresh(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}"


def committed(node: NodeProcess, group: str) -> dict[int, int]:
    """The group's offsets of TOPIC as OffsetFetch without require_stable answers them."""
    found = _offset_fetch(node, group, require_stable=False)
    return {p: offset for p, (offset, _) in found.items() if offset >= 0}


def stable(node: NodeProcess, group: str, topic: str = TOPIC) -> dict[int, int]:
    """The group's offsets once no transaction holds any pending (EndTxn is answered when the
    coordinator decided; the markers reach the offsets partition right after), asked as a
    read_committed consumer asks: require_stable, retried while UNSTABLE_OFFSET_COMMIT."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        found = _offset_fetch(node, group, require_stable=True, topic=topic)
        if all(e != ErrorCode.UNSTABLE_OFFSET_COMMIT for _, e in found.values()):
            assert all(e == ErrorCode.NONE for _, e in found.values()), found
            return {p: offset for p, (offset, _) in found.items() if offset >= 0}
        assert time.monotonic() < deadline, f"still unstable: {found}"
        time.sleep(0.05)


def _offset_fetch(
    node: NodeProcess, group: str, require_stable: bool, topic: str = TOPIC
) -> dict[int, tuple[int, int]]:
    """partition -> (committed offset, error code), by a raw OffsetFetch v7."""
    conn = RawConnection(node.bootstrap)
    try:
        request = OffsetFetchRequest(
            group_id=group,
            topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])
            ],
            require_stable=require_stable,
        )
        response = conn.request(request, 7)
    finally:
        conn.close()
    assert response.error_code == ErrorCode.NONE, response
    return {
        p.partition_index: (p.committed_offset, p.error_code)
        for t in response.topics
        for p in t.partitions
    }


def _confluent_producer(node: NodeProcess, txn_id: str) -> Producer:
    producer = Producer(
        confluent_conf(node, transactional_id=txn_id, transaction_timeout_ms=30_000)
    )
    producer.init_transactions(TIMEOUT_S)
    return producer


def _group_metadata(node: NodeProcess, group: str) -> object:
    consumer = Consumer(confluent_conf(node, group_id=group, enable_auto_commit=False))
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


def test_confluent_offsets_visible_on_commit_only(node: NodeProcess) -> None:
    group = fresh("ctp")
    producer = _confluent_producer(node, fresh("tx-confluent"))
    metadata = _group_metadata(node, group)

    producer.begin_transaction()
    producer.send_offsets_to_transaction(
        [TopicPartition(TOPIC, 0, 5), TopicPartition(TOPIC, 1, 7)], metadata, TIMEOUT_S
    )
    # open transaction: the old (no) offset, and unstable for a reader that needs stability
    assert committed(node, group) == {}
    unstable = _offset_fetch(node, group, require_stable=True)
    assert {p: e for p, (_, e) in unstable.items()} == {
        0: ErrorCode.UNSTABLE_OFFSET_COMMIT,
        1: ErrorCode.UNSTABLE_OFFSET_COMMIT,
    }
    producer.commit_transaction(TIMEOUT_S)
    assert stable(node, group) == {0: 5, 1: 7}
    assert committed(node, group) == {0: 5, 1: 7}

    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 50)], metadata, TIMEOUT_S)
    producer.abort_transaction(TIMEOUT_S)
    assert stable(node, group) == {0: 5, 1: 7}, "an aborted transaction's offsets never show"

    # a read_committed consumer of the group starts where the transaction left it
    consumer = Consumer(
        confluent_conf(
            node, group_id=group, enable_auto_commit=False, isolation_level="read_committed"
        )
    )
    try:
        found = consumer.committed([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)], TIMEOUT_S)
        assert [tp.offset for tp in found] == [5, 7]
    finally:
        consumer.close()


def test_kafka_python_send_offsets_to_transaction(node: NodeProcess) -> None:
    group = fresh("kp")
    producer = KafkaProducer(
        bootstrap_servers=node.bootstrap, transactional_id=fresh("tx-kp"), request_timeout_ms=20_000
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            {KpTopicPartition(TOPIC, 1): KpOffset(11, "", -1)}, group
        )
        assert committed(node, group) == {}
        producer.commit_transaction()
        assert stable(node, group) == {1: 11}
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            {KpTopicPartition(TOPIC, 1): KpOffset(99, "", -1)}, group
        )
        producer.abort_transaction()
        assert stable(node, group) == {1: 11}
    finally:
        producer.close(timeout=5)


def test_aiokafka_send_offsets_to_transaction(node: NodeProcess) -> None:
    group = fresh("aio")

    async def scenario() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=node.bootstrap, transactional_id=fresh("tx-aio")
        )
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_offsets_to_transaction(
                    {AioTopicPartition(TOPIC, 0): AioOffset(21, "")}, group
                )
                assert committed(node, group) == {}
            assert stable(node, group) == {0: 21}
            await producer.begin_transaction()
            await producer.send_offsets_to_transaction(
                {AioTopicPartition(TOPIC, 0): AioOffset(77, "")}, group
            )
            await producer.abort_transaction()
            assert stable(node, group) == {0: 21}
        finally:
            await producer.stop()

    asyncio.run(scenario())


def test_pending_and_completed_offsets_survive_a_restart(tmp_path: Path) -> None:
    """The coordinator reloads ``__consumer_offsets``: committed transactions' offsets are
    there, aborted ones not, and an open transaction's are pending again until its abort."""
    node = NodeProcess(tmp_path / "node").start()
    admin = AdminClient(confluent_conf(node))
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(timeout=TIMEOUT_S)
    try:
        _restart_scenario(node)
    finally:
        node.kill()


def _restart_scenario(node: NodeProcess) -> None:
    done, aborted, open_group = fresh("r-done"), fresh("r-aborted"), fresh("r-open")
    producer = _confluent_producer(node, fresh("tx-restart"))
    for group, offset in ((done, 3), (aborted, 4)):
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(TOPIC, 0, offset)], _group_metadata(node, group), TIMEOUT_S
        )
        if group == done:
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)
    txn_id = fresh("tx-open")
    hanging = _confluent_producer(node, txn_id)
    hanging.begin_transaction()
    hanging.send_offsets_to_transaction(
        [TopicPartition(TOPIC, 1, 8)], _group_metadata(node, open_group), TIMEOUT_S
    )
    assert _offset_fetch(node, open_group, require_stable=True)[1][1] == (
        ErrorCode.UNSTABLE_OFFSET_COMMIT
    )
    node.kill()  # kill -9: the open transaction stays open in the logs
    node.start(port=node.port, admin_port=int(node.admin.rsplit(":", 1)[1]) if node.admin else 0)
    assert _offset_fetch(node, open_group, require_stable=True)[1][1] == (
        ErrorCode.UNSTABLE_OFFSET_COMMIT
    ), "pending again after the reload"

    assert stable(node, done) == {0: 3}
    assert stable(node, aborted) == {}
    assert committed(node, open_group) == {}
    # the same transactional id again: the coordinator aborts the open transaction (fencing)
    _confluent_producer(node, txn_id)
    assert stable(node, open_group) == {}


def _member_consumer(node: NodeProcess, group: str, topic: str) -> Consumer:
    consumer = Consumer(
        confluent_conf(
            node,
            group_id=group,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
        )
    )
    consumer.subscribe([topic])
    return consumer


def _poll_batch(consumer: Consumer, want: int, timeout_s: float = TIMEOUT_S) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg)
    return got


def test_consume_transform_produce_commits_its_input_offsets_with_its_output(
    node: NodeProcess,
) -> None:
    """A group member (KIP-447: its member id and generation go with the offsets) reads 10
    records, writes their transforms and its input offsets in one transaction: committed,
    both show; then the next 10 in a transaction that aborts: neither shows, and a restarted
    member of the group starts again after the first 10."""
    source, sink, group = fresh("ctp-in"), fresh("ctp-out"), fresh("ctp-group")
    admin = AdminClient(confluent_conf(node))
    for future in admin.create_topics([NewTopic(source, 1, 1), NewTopic(sink, 1, 1)]).values():
        future.result(timeout=TIMEOUT_S)
    feeder = Producer(confluent_conf(node))
    for i in range(20):
        feeder.produce(source, value=f"in-{i}".encode())
    assert feeder.flush(TIMEOUT_S) == 0

    producer = _confluent_producer(node, fresh("tx-ctp"))
    consumer = _member_consumer(node, group, source)
    try:
        for outcome in ("commit", "abort"):
            batch = _poll_batch(consumer, 10)
            assert len(batch) == 10
            producer.begin_transaction()
            for msg in batch:
                producer.produce(sink, value=msg.value().replace(b"in-", b"out-"))
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), TIMEOUT_S
            )
            if outcome == "commit":
                producer.commit_transaction(TIMEOUT_S)
                assert stable(node, group, source) == {0: 10}
            else:
                producer.abort_transaction(TIMEOUT_S)
                assert stable(node, group, source) == {0: 10}
    finally:
        consumer.close()

    restarted = _member_consumer(node, group, source)
    try:
        again = _poll_batch(restarted, 10)
        assert [m.value() for m in again] == [f"in-{i}".encode() for i in range(10, 20)]
    finally:
        restarted.close()
    reader = _member_consumer(node, fresh("reader"), sink)
    try:
        out = _poll_batch(reader, 10)
        assert [m.value() for m in out] == [f"out-{i}".encode() for i in range(10)]
        assert _poll_batch(reader, 1, timeout_s=2.0) == [], (
            "the aborted transaction's output is not read"
        )
    finally:
        reader.close()


def _txn_commit(
    node: NodeProcess, tid: str, group: str, pid: int, epoch: int, version: int = 3
) -> int:
    Q = TxnOffsetCommitRequest
    conn = RawConnection(node.bootstrap)
    try:
        response = conn.request(
            Q(
                transactional_id=tid,
                group_id=group,
                producer_id=pid,
                producer_epoch=epoch,
                topics=[
                    Q.TxnOffsetCommitRequestTopic(
                        name=TOPIC,
                        partitions=[
                            Q.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=9)
                        ],
                    )
                ],
            ),
            version,
        )
    finally:
        conn.close()
    [topic] = response.topics
    [partition] = topic.partitions
    return partition.error_code  # type: ignore[no-any-return]


def _txn_commit_answer(node: NodeProcess, tid: str, group: str, pid: int, epoch: int) -> int:
    """The TxnOffsetCommit's answer once the group's coordinator is up (retried as clients do
    while it is not, or still loads its partition)."""
    retriable = {
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.NOT_COORDINATOR,
    }
    answers: list[int] = []

    def attempt() -> bool:
        answers.append(_txn_commit(node, tid, group, pid, epoch))
        return answers[-1] not in retriable

    wait_until("a TxnOffsetCommit answer", attempt)
    return answers[-1]


def test_txn_offset_commit_outside_the_transaction_is_refused_and_appends_nothing(
    node: NodeProcess,
) -> None:
    """Without AddOffsetsToTxn, with a wrong epoch, or an unknown producer id: the
    coordinator's verification refuses (KIP-890) with Kafka's codes and nothing is pending."""
    tid, group = fresh("tx-raw"), fresh("raw")
    raw = RawConnection(node.bootstrap)
    try:
        init = init_producer_id(raw, tid)
        pid, epoch = init.producer_id, init.producer_epoch
        wait_until(  # as a client: FindCoordinator (it creates __consumer_offsets) first
            "the group's coordinator",
            lambda: (
                raw.request(FindCoordinatorRequest(key=group, key_type=0), 3).error_code
                == ErrorCode.NONE
            ),
        )
        assert _txn_commit_answer(node, tid, group, pid, epoch) == ErrorCode.INVALID_TXN_STATE
        stale = epoch - 1
        assert _txn_commit_answer(node, tid, group, pid, stale) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert _txn_commit_answer(node, tid, group, pid + 1000, epoch) == (
            ErrorCode.INVALID_PRODUCER_ID_MAPPING
        )
        assert _txn_commit_answer(node, fresh("tx-unknown"), group, pid, epoch) == (
            ErrorCode.INVALID_PRODUCER_ID_MAPPING
        )
    finally:
        raw.close()
    assert _offset_fetch(node, group, require_stable=True) == {
        0: (-1, ErrorCode.NONE),
        1: (-1, ErrorCode.NONE),
    }, "nothing pending, nothing committed"
