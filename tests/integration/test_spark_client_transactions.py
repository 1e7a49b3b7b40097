"""The Spark client's transactions against a real node, confluent-kafka (librdkafka) the
oracle: the transactional producer's commits and aborts as a read_committed consumer sees
them, offsets committed inside a transaction, a zombie producer fenced by a newer one with its
transactional id, and the client reading read_committed (the last stable offset, aborted
records skipped in the Arrow path), and the exactly-once sink's task: a replayed batch not
written twice, a zombie attempt fenced."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Consumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as CTP

from integration.clients import confluent_conf, create_topic
from integration.node_process import NodeProcess
from spark_source.arrow_records import to_arrow
from spark_source.client import LATEST, KafkaClient, ProduceError, TopicPartition
from spark_source.exactly_once import TaskIdentity
from spark_source.options import WriteOptions, parse_write_options
from spark_source.read_committed import READ_UNCOMMITTED
from spark_source.transactional_producer import TransactionalProducer, TransactionError
from spark_source.writer import write_once

pytestmark = pytest.mark.integration

QUICK = {"retry.backoff.ms": "20", "request.timeout.ms": "10000"}
PARTITIONS = 3
WAIT_S = 30.0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(Path(tmp_path_factory.mktemp("node"))).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture
def client(node: NodeProcess) -> Iterator[KafkaClient]:
    with KafkaClient(node.bootstrap, QUICK) as c:
        yield c


def read_values(node: NodeProcess, topic: str, isolation: str, want: int) -> Counter[bytes]:
    """The values of ``topic`` as confluent-kafka reads them, once ``want`` arrived (and a
    moment more, for any beyond them)."""
    consumer = Consumer(
        confluent_conf(
            node,
            group_id=f"check-{topic}",
            enable_auto_commit=False,
            isolation_level=isolation,
            fetch_wait_max_ms=100,
        )
    )
    consumer.assign([CTP(topic, p, 0) for p in range(PARTITIONS)])
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    quiet_until = None
    while time.monotonic() < deadline:
        msgs = consumer.consume(1000, 0.3)
        for msg in msgs:
            assert msg.error() is None, msg.error()
            got.append(msg.value())
        if len(got) >= want:
            quiet_until = quiet_until or time.monotonic() + 1.0
            if time.monotonic() > quiet_until:
                break
    consumer.close()
    return Counter(got)


def values(tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def send_all(producer: TransactionalProducer, topic: str, batch: list[bytes]) -> None:
    for i, value in enumerate(batch):
        producer.send(topic, value, key=f"k{i % 7}".encode())


def test_commits_and_aborts_as_a_read_committed_consumer_sees_them(
    node: NodeProcess, client: KafkaClient, topic_name: str
) -> None:
    create_topic(node, topic_name, PARTITIONS)
    producer = TransactionalProducer(client, f"{topic_name}-t", QUICK)
    producer.init_transactions()
    for end in (producer.commit_transaction, producer.abort_transaction):
        producer.begin_transaction()  # a transaction nothing joined ends without the broker
        end()
    for tag, n, commit in (("one", 100, True), ("two", 50, False), ("three", 20, True)):
        producer.begin_transaction()
        send_all(producer, topic_name, values(tag, n))
        if commit:
            producer.commit_transaction()
        else:
            producer.flush()  # written, then aborted
            producer.abort_transaction()
    committed = Counter(values("one", 100) + values("three", 20))
    assert read_values(node, topic_name, "read_committed", 120) == committed
    everything = read_values(node, topic_name, "read_uncommitted", 170)
    assert everything == committed + Counter(values("two", 50))


def test_offsets_committed_in_a_transaction_appear_when_it_commits(
    node: NodeProcess, client: KafkaClient, topic_name: str
) -> None:
    create_topic(node, topic_name, PARTITIONS)
    group = f"{topic_name}-g"
    tp = TopicPartition(topic_name, 1)
    producer = TransactionalProducer(client, f"{topic_name}-t", QUICK)
    producer.init_transactions()
    producer.begin_transaction()
    send_all(producer, topic_name, values("x", 10))
    producer.send_offsets_to_transaction({tp: (7, "aborted")}, group)
    producer.abort_transaction()
    assert client.committed_offsets(group, [tp], require_stable=True) == {}
    producer.begin_transaction()
    send_all(producer, topic_name, values("y", 10))
    producer.send_offsets_to_transaction({tp: (42, "meta")}, group)
    assert client.committed_offsets(group, [tp]) == {}  # pending until the marker
    producer.commit_transaction()
    assert client.committed_offsets(group, [tp], require_stable=True) == {tp: (42, "meta")}
    consumer = Consumer(confluent_conf(node, group_id=group, enable_auto_commit=False))
    (seen,) = consumer.committed([CTP(topic_name, 1)], timeout=WAIT_S)
    consumer.close()
    assert seen.offset == 42  # (its .metadata is not decoded reliably by confluent-kafka)


def test_a_newer_producer_with_the_same_id_fences_the_zombie(
    node: NodeProcess, client: KafkaClient, topic_name: str
) -> None:
    create_topic(node, topic_name, PARTITIONS)
    zombie = TransactionalProducer(client, f"{topic_name}-t", QUICK)
    zombie.init_transactions()
    zombie.begin_transaction()
    send_all(zombie, topic_name, values("zombie", 30))
    zombie.flush()
    with KafkaClient(node.bootstrap, QUICK) as other:
        successor = TransactionalProducer(other, f"{topic_name}-t", QUICK)
        successor.init_transactions()  # aborts the zombie's transaction
        assert successor.producer_id == zombie.producer_id
        assert successor.producer_epoch > zombie.producer_epoch
        with pytest.raises((TransactionError, ProduceError)) as failure:
            send_all(zombie, topic_name, values("late", 5))
            zombie.commit_transaction()
        assert failure.value.error.name in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")
        successor.begin_transaction()
        send_all(successor, topic_name, values("successor", 20))
        successor.commit_transaction()
    assert read_values(node, topic_name, "read_committed", 20) == Counter(values("successor", 20))


def test_the_client_reads_committed_records_up_to_the_last_stable_offset(
    node: NodeProcess, topic_name: str
) -> None:
    create_topic(node, topic_name, 1)
    writer = ConfluentProducer(confluent_conf(node, transactional_id=f"{topic_name}-w"))
    writer.init_transactions(WAIT_S)
    for tag, commit in (("a", True), ("b", False), ("c", True), ("open", None)):
        writer.begin_transaction()
        for value in values(tag, 40):
            writer.produce(topic_name, value, partition=0)
        writer.flush(WAIT_S)
        if commit is True:
            writer.commit_transaction(WAIT_S)
        elif commit is False:
            writer.abort_transaction(WAIT_S)
    tp = TopicPartition(topic_name, 0)
    config = {**QUICK, "isolation.level": "read_committed"}
    with KafkaClient(node.bootstrap, config) as committed_reader:
        stable = committed_reader.list_offsets({tp: LATEST})[tp]
        high = committed_reader.list_offsets({tp: LATEST}, isolation_level=READ_UNCOMMITTED)[tp]
        # a, its marker, b, its marker, c, its marker: then the open transaction
        assert (stable, high) == (123, 163)
        rows = [
            batch
            for chunk in committed_reader.read_chunks(tp, 0, stable)
            for batch in to_arrow(
                chunk.records, topic_name, 0, 0, stable, False, aborted=chunk.aborted_transactions
            )
        ]
    got = [v for b in rows for v in b.column("value").to_pylist()]
    assert got == values("a", 40) + values("c", 40)
    writer.abort_transaction(WAIT_S)


def sink_options(node: NodeProcess, topic: str, prefix: str) -> WriteOptions:
    return parse_write_options(
        {
            "kafka.bootstrap.servers": node.bootstrap,
            "topic": topic,
            "kafka.transactional.id.prefix": prefix,
            **{f"kafka.{k}": v for k, v in QUICK.items()},
        }
    )


def rows(tag: str, n: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(values(tag, n), pa.binary())], names=["value"])


def test_the_sink_task_writes_each_batch_once_and_fences_a_zombie_attempt(
    node: NodeProcess, topic_name: str
) -> None:
    """write_once, as a Spark task runs it: a replayed batch writes nothing, a later batch
    or another query writes, and an attempt fenced mid-write by a newer one fails without
    writing; the rows of each batch are in Kafka once (read_committed)."""
    create_topic(node, topic_name, PARTITIONS)
    options = sink_options(node, topic_name, f"{topic_name}-eos")
    query = "query-1"
    first = write_once(options, TaskIdentity(0, 0, query, 5), iter([rows("b5", 40)]))
    assert (first.records, first.already_written) == (40, False)
    replay = write_once(options, TaskIdentity(0, 1, query, 5), iter([rows("b5", 40)]))
    assert (replay.records, replay.already_written) == (0, True)
    assert write_once(options, TaskIdentity(0, 0, query, 6), iter([rows("b6", 30)])).records == 30
    other = write_once(options, TaskIdentity(0, 0, "query-2", 0), iter([rows("q2", 10)]))
    assert other.records == 10  # a new checkpoint's batch 0 is not batch 0 of query-1

    def zombie_input() -> Iterator[pa.RecordBatch]:
        yield rows("b7", 25)
        # attempt 0 is inside its transaction: attempt 1 of the same task runs to the end
        newer = write_once(
            options, TaskIdentity(0, 1, query, 7), iter([rows("b7", 25), rows("b7-more", 5)])
        )
        assert newer.records == 30
        yield rows("b7-more", 5)

    with pytest.raises((TransactionError, ProduceError)) as fenced:
        write_once(options, TaskIdentity(0, 0, query, 7), zombie_input())
    assert fenced.value.error.name in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")
    expected = values("b5", 40) + values("b6", 30) + values("q2", 10)
    expected += values("b7", 25) + values("b7-more", 5)
    assert read_values(node, topic_name, "read_committed", len(expected)) == Counter(expected)
