"""Transactions through Spark against a real node: the source read_committed (aborted records
skipped, batches ending at the last stable offset while a transaction is open, lag still
counted to the high watermark), and a read_committed -> exactly-once-sink query killed with
SIGKILL and restarted from its checkpoint, each output row in Kafka exactly once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from integration.node_process import NodeProcess
from integration.test_spark import QUERY_TIMEOUT_S, child_env, create_topic

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as f  # noqa: E402
from pyspark.sql.types import IntegerType  # noqa: E402

from spark_source import KraftSource  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.spark]

EOS_PROC = Path(__file__).with_name("spark_eos_query_proc.py")
PARTITIONS = 2


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(Path(tmp_path_factory.mktemp("node"))).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = (
        SparkSession.builder.master("local[2,2]")  # a failed task is tried once more
        .appName("kraft-spark-transactions")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.dataSource.register(KraftSource)
    yield session
    session.stop()


def transactional(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    )
    producer.init_transactions(30)
    return producer


def send(producer: Producer, topic: str, values: list[str]) -> None:
    """``values`` round-robin over the partitions, flushed (acknowledged)."""
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), key=f"k{i % 5}".encode(), partition=i % 2)
    assert producer.flush(30) == 0


def in_transaction(producer: Producer, topic: str, values: list[str], *, commit: bool) -> None:
    producer.begin_transaction()
    send(producer, topic, values)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def tag(name: str, n: int) -> list[str]:
    return [f"{name}-{i}" for i in range(n)]


def batch_values(spark: SparkSession, bootstrap: str, topic: str, **options: str) -> Counter[str]:
    reader = (
        spark.read.format("kraft")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return Counter(bytes(r.value).decode() for r in reader.load().select("value").collect())


def run_stream(spark: SparkSession, bootstrap: str, topic: str, checkpoint: Path) -> Any:
    """An availableNow run of a read_committed stream: (values it read, its last progress)."""
    seen: list[str] = []

    def keep(df: Any, batch_id: int) -> None:
        seen.extend(bytes(r.value).decode() for r in df.select("value").collect())

    query = (
        spark.readStream.format("kraft")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
        .writeStream.foreachBatch(keep)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "query did not finish"
    assert query.exception() is None, query.exception()
    progress = [p for p in query.recentProgress if p["sources"]]
    return Counter(seen), progress[-1]["sources"][0]


def offsets_sum(offsets: str) -> int:
    """The sum of a progress report's offsets (JSON text, as Spark stores them)."""
    return sum(int(o) for parts in json.loads(offsets).values() for o in parts.values())


def test_read_committed_skips_aborted_records_and_stops_at_the_lso(
    spark: SparkSession, node: NodeProcess, topic_name: str, tmp_path: Path
) -> None:
    create_topic(node, topic_name, PARTITIONS)
    writer = transactional(node.bootstrap, f"{topic_name}-w")
    plain = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True})
    in_transaction(writer, topic_name, tag("c1", 100), commit=True)
    in_transaction(writer, topic_name, tag("ab", 60), commit=False)
    send(plain, topic_name, tag("plain", 40))
    in_transaction(writer, topic_name, tag("c3", 80), commit=True)
    committed = Counter(tag("c1", 100) + tag("plain", 40) + tag("c3", 80))
    # a transaction left open, and records after it: beyond the last stable offset
    open_writer = transactional(node.bootstrap, f"{topic_name}-open")
    open_writer.begin_transaction()
    send(open_writer, topic_name, tag("open", 50))
    send(plain, topic_name, tag("after", 30))

    committed_view = batch_values(
        spark, node.bootstrap, topic_name, **{"kafka.isolation.level": "read_committed"}
    )
    assert committed_view == committed
    everything = batch_values(spark, node.bootstrap, topic_name)
    assert everything == committed + Counter(tag("ab", 60) + tag("open", 50) + tag("after", 30))

    checkpoint = tmp_path / "checkpoint"
    seen, source = run_stream(spark, node.bootstrap, topic_name, checkpoint)
    assert seen == committed
    # the batch ended at the last stable offsets, the lag is counted to the high watermarks
    assert offsets_sum(source["latestOffset"]) - offsets_sum(source["endOffset"]) == 80

    open_writer.commit_transaction(30)
    seen, source = run_stream(spark, node.bootstrap, topic_name, checkpoint)
    assert seen == Counter(tag("open", 50) + tag("after", 30))
    assert source["latestOffset"] == source["endOffset"]


def test_a_batch_write_with_a_failed_task_attempt_writes_each_row_once(
    spark: SparkSession, node: NodeProcess, topic_name: str
) -> None:
    """df.write with a transactional id prefix: the first attempt of one task fails after
    writing part of its rows (its row 1500 names a partition that does not exist), and its
    transaction is aborted; the retry writes them all once.  A second write of the same rows
    is a new write: it writes them again."""
    create_topic(node, topic_name, 3)
    ids = spark.range(0, 3000, 1, 3)
    values = f.concat(f.lit("v-"), f.col("id").cast("string")).alias("value")

    def partition_of(i: int) -> int:  # local: pickled by value for Spark's workers
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is not None and context.attemptNumber() == 0 and i == 1500:
            return 99  # the producer refuses it: this attempt fails mid-write
        return i % 3

    def write(df: Any) -> None:
        (
            df.write.format("kraft")
            .mode("append")
            .option("kafka.bootstrap.servers", node.bootstrap)
            .option("topic", topic_name)
            .option("kafka.transactional.id.prefix", f"{topic_name}-eos")
            .option("kafka.buffer.memory", "2048")  # flush every few rows: attempt 0 writes
            .save()
        )

    partition = f.udf(partition_of, IntegerType())(f.col("id")).alias("partition")
    write(ids.select(values, partition))
    once = Counter(tag("v", 3000))
    committed = TopicReader(node.bootstrap, topic_name, 3, "read_committed")
    uncommitted = TopicReader(node.bootstrap, topic_name, 3, "read_uncommitted")
    try:
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        while committed.poll() < 3000 or uncommitted.poll() <= 3000:
            assert time.monotonic() < deadline, (len(committed.values), len(uncommitted.values))
        time.sleep(1)
        committed.poll()
        uncommitted.poll()
        assert Counter(committed.values) == once
        aborted = Counter(uncommitted.values) - once  # what the failed attempt wrote
        assert set(aborted) <= set(tag("v", 1500)[1000:]), aborted
        assert sum(aborted.values()) >= 100, aborted
        write(ids.select(values))
        while committed.poll() < 6000:
            assert time.monotonic() < deadline, len(committed.values)
        time.sleep(1)
        committed.poll()
        assert Counter(committed.values) == once + once
    finally:
        committed.close()
        uncommitted.close()


class TopicReader:
    """Every record of a topic, read_committed (or not), as it arrives."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, isolation: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"check-{topic}-{isolation}",
                "enable.auto.commit": False,
                "isolation.level": isolation,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.values: list[str] = []

    def poll(self) -> int:
        for msg in self.consumer.consume(1000, 0.5):
            assert msg.error() is None, msg.error()
            self.values.append(msg.value().decode())
        return len(self.values)

    def close(self) -> None:
        self.consumer.close()


def input_transactions(producer: Producer, topic: str, name: str, count: int) -> list[str]:
    """``count`` committed transactions of 100 records, an aborted one of 30 after every
    third; returns the committed values."""
    committed: list[str] = []
    for t in range(count):
        values = tag(f"{name}{t}", 100)
        in_transaction(producer, topic, values, commit=True)
        committed += values
        if t % 3 == 2:
            in_transaction(producer, topic, tag(f"{name}{t}-aborted", 30), commit=False)
    return committed


def expected_outputs(consumer_view: list[tuple[int, int, str]], topic: str) -> Counter[str]:
    return Counter(f"out:{topic}:{p}:{o}:{v}" for p, o, v in consumer_view)


def committed_input(bootstrap: str, topic: str, want: int) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of the topic's committed records, read by confluent-kafka."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"input-{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + 60
    while len(got) < want and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset(), msg.value().decode()))
    consumer.close()
    assert len(got) == want
    return got


def test_exactly_once_sink_survives_sigkill_and_restart(
    node: NodeProcess, topic_name: str, tmp_path: Path
) -> None:
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(node, source, PARTITIONS)
    create_topic(node, sink, 3)
    producer = transactional(node.bootstrap, f"{topic_name}-input")
    sent = input_transactions(producer, source, "a", 12)
    args = [sys.executable, str(EOS_PROC), node.bootstrap, source, sink, str(tmp_path / "ck")]
    args.append(f"{topic_name}-eos")
    log_path = tmp_path / "query.log"
    log = log_path.open("a")
    output = TopicReader(node.bootstrap, sink, 3, "read_committed")

    def run_until(rows: int, *, kill: bool) -> None:
        query = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=child_env())
        try:
            deadline = time.monotonic() + QUERY_TIMEOUT_S
            while output.poll() < rows:
                assert query.poll() is None, log_path.read_text()[-4000:]
                assert time.monotonic() < deadline, f"only {len(output.values)} rows out"
        finally:
            if kill:
                query.kill()  # SIGKILL: mid-batch, transactions open
            else:
                query.send_signal(signal.SIGTERM)
            query.wait(60)

    try:
        run_until(500, kill=True)
        sent += input_transactions(producer, source, "b", 6)
        run_until(len(output.values) + 300, kill=True)
        sent += input_transactions(producer, source, "c", 3)
        run_until(len(sent), kill=False)
        time.sleep(2)  # anything written twice would show by now
        output.poll()
    finally:
        output.close()
    expected = expected_outputs(committed_input(node.bootstrap, source, len(sent)), source)
    got = Counter(output.values)
    assert sum(got.values()) == sum(expected.values())
    assert got == expected, [v for v, n in got.items() if n > 1][:10]
