"""The Spark source and sink against real brokers: every committed record exactly once in the
sink, across restarts and a killed query, rate limits, every codec, lag visible through REST,
batch reads, and the sink's placement of keys."""

from __future__ import annotations

import json
import os
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
from confluent_kafka.admin import NewTopic

from integration.cluster_process import admin_client, http_json, running_cluster, wait_for
from integration.node_process import NodeProcess

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import SparkSession  # noqa: E402

from spark_source import KraftSource  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.spark]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
QUERY_TIMEOUT_S = 180
PROC = Path(__file__).with_name("spark_query_proc.py")
CLUSTER_PROC = Path(__file__).with_name("spark_cluster_proc.py")
REPO = Path(__file__).resolve().parents[2]


def child_env() -> dict[str, str]:
    """The environment of a child Python that must import this repository's packages."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


Row = tuple[int, int, bytes | None, bytes]  # partition, offset, key, value


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """One combined node; retention runs every 500 ms so a test can lose records quickly."""
    proc = NodeProcess(
        Path(tmp_path_factory.mktemp("node")), overrides=("log.retention.check.interval.ms=500",)
    ).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kraft-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.dataSource.register(KraftSource)
    yield session
    session.stop()


def create_topic(node: NodeProcess, name: str, partitions: int, **configs: str) -> None:
    body = {"name": name, "partitions": partitions, "replication_factor": 1, "configs": configs}
    http_json(node.admin + "/v1/topics", "POST", body)


def produce(
    bootstrap: str, topic: str, n: int, *, codec: str = "none", tag: str = "r", **config: Any
) -> list[Row]:
    """``n`` records with keys and headers, acknowledged (acks=all, idempotent); returns where
    each landed."""
    landed: list[Row] = []

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        landed.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "compression.type": codec,
            "linger.ms": 5,
            **config,
        }
    )
    for i in range(n):
        producer.produce(
            topic,
            value=f"{tag}-{i}-{codec}".encode() * 3,
            key=None if i % 7 == 0 else f"k{i % 13}".encode(),
            headers=[("h", str(i).encode())],
            on_delivery=on_delivery,
        )
        if i % 1000 == 999:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert len(landed) == n
    return landed


def stream(spark: SparkSession, bootstrap: str, topic: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("kraft")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("startingOffsets", "earliest")
    )
    if topic:
        reader = reader.option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run_available_now(df: Any, out: Path, checkpoint: Path) -> Any:
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "query did not finish"
    assert query.exception() is None, query.exception()
    return query


def sink_rows(spark: SparkSession, out: Path) -> list[Row]:
    return [
        (r.partition, r.offset, None if r.key is None else bytes(r.key), bytes(r.value))
        for r in spark.read.parquet(str(out))
        .select("partition", "offset", "key", "value")
        .collect()
    ]


def group_partitions(node: NodeProcess, group: str) -> dict[int, dict[str, Any]]:
    return {p["partition"]: p for p in http_json(f"{node.admin}/v1/groups/{group}")["partitions"]}


def test_available_now_exactly_once_across_restarts_with_lag_in_rest(
    spark: SparkSession, node: NodeProcess, topic_name: str, tmp_path: Path
) -> None:
    create_topic(node, topic_name, 3)
    sent = [r for codec in CODECS for r in produce(node.bootstrap, topic_name, 200, codec=codec)]
    group = f"g-{topic_name}"
    df = stream(spark, node.bootstrap, topic_name, **{"kafka.group.id": group})
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(df, out, checkpoint)
    assert Counter(sink_rows(spark, out)) == Counter(sent)

    # lag = high watermark - committed, through REST, once the query has committed
    offsets = group_partitions(node, group)
    assert {p: o["lag"] for p, o in offsets.items()} == {0: 0, 1: 0, 2: 0}
    high = {p: o["high_watermark"] for p, o in offsets.items()}
    assert sum(high.values()) == len(sent)

    more = produce(node.bootstrap, topic_name, 300, codec="lz4", tag="more")
    offsets = group_partitions(node, group)
    assert sum(o["lag"] for o in offsets.values()) == len(more)

    run_available_now(df, out, checkpoint)  # the same checkpoint: only the new records
    assert Counter(sink_rows(spark, out)) == Counter(sent + more)
    assert sum(o["lag"] for o in group_partitions(node, group).values()) == 0


def test_new_topics_and_partitions_are_read_from_their_start(
    spark: SparkSession, node: NodeProcess, topic_name: str, tmp_path: Path
) -> None:
    """subscribePattern: a topic created and partitions added between two runs of the same
    query are read from their first record; nothing is read twice."""
    first = f"{topic_name}-a"
    create_topic(node, first, 1)
    sent = produce(node.bootstrap, first, 200)
    df = stream(spark, node.bootstrap, "", subscribePattern=f"{topic_name}-.*")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(df, out, checkpoint)
    http_json(f"{node.admin}/v1/topics/{first}/partitions", "POST", {"count": 3})
    second = f"{topic_name}-b"
    create_topic(node, second, 2)
    more = produce(node.bootstrap, first, 300) + produce(node.bootstrap, second, 300)
    run_available_now(df, out, checkpoint)
    got = spark.read.parquet(str(out)).select("topic", "partition", "offset").collect()
    expected = [(first, p, o) for p, o, _, _ in sent] + [
        (t, p, o) for t, rows in ((first, more[:300]), (second, more[300:])) for p, o, _, _ in rows
    ]
    assert Counter(tuple(r) for r in got) == Counter(expected)
    assert {p for t, p, _ in expected if t == first} == {0, 1, 2}


def test_records_lost_to_retention_fail_the_read_or_are_skipped(
    spark: SparkSession, node: NodeProcess, topic_name: str
) -> None:
    create_topic(
        node, topic_name, 1, **{"internal.segment.bytes": "2048", "retention.bytes": "4096"}
    )
    sent = produce(node.bootstrap, topic_name, 300, **{"batch.num.messages": 4})
    deadline = time.monotonic() + 30
    while (
        start := http_json(f"{node.admin}/v1/topics/{topic_name}")["partitions"][0][
            "log_start_offset"
        ]
    ) == 0:
        assert time.monotonic() < deadline, "retention did not delete a segment"
        time.sleep(0.2)
    reader = (
        spark.read.format("kraft")
        .option("kafka.bootstrap.servers", node.bootstrap)
        .option("subscribe", topic_name)
        .option("startingOffsets", json.dumps({topic_name: {"0": 0}}))
    )
    with pytest.raises(Exception, match="failOnDataLoss=false"):
        reader.load().count()
    offsets = [r.offset for r in reader.option("failOnDataLoss", "false").load().collect()]
    assert offsets and offsets[0] >= start and offsets == list(range(offsets[0], len(sent)))


def test_max_offsets_per_trigger_bounds_every_batch(
    spark: SparkSession, node: NodeProcess, topic_name: str, tmp_path: Path
) -> None:
    create_topic(node, topic_name, 2)
    sent = produce(node.bootstrap, topic_name, 1000)
    df = stream(spark, node.bootstrap, topic_name, maxOffsetsPerTrigger="150")
    query = run_available_now(df, tmp_path / "out", tmp_path / "checkpoint")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == len(sent)
    assert max(sizes) <= 150 and len(sizes) >= 7, sizes
    assert Counter(sink_rows(spark, tmp_path / "out")) == Counter(sent)


def test_headers_timestamps_and_every_column(
    spark: SparkSession, node: NodeProcess, topic_name: str
) -> None:
    create_topic(node, topic_name, 1)
    producer = Producer({"bootstrap.servers": node.bootstrap})
    producer.produce(
        topic_name,
        value=b"v",
        key=b"k",
        headers=[("a", b"1"), ("b", None)],
        timestamp=1_700_000_000_123,
    )
    producer.produce(topic_name, value=None, key=None)
    producer.flush(10)
    rows = (
        spark.read.format("kraft")
        .option("kafka.bootstrap.servers", node.bootstrap)
        .option("subscribe", topic_name)
        .option("includeHeaders", "true")
        .load()
        .orderBy("offset")
        .collect()
    )
    first, second = rows
    assert (bytes(first.key), bytes(first.value), first.topic, first.partition, first.offset) == (
        b"k",
        b"v",
        topic_name,
        0,
        0,
    )
    assert int(first.timestamp.timestamp() * 1000) == 1_700_000_000_123
    assert first.timestampType == 0
    assert [(h.key, None if h.value is None else bytes(h.value)) for h in first.headers] == [
        ("a", b"1"),
        ("b", None),
    ]
    assert second.key is None and second.value is None and second.offset == 1


def test_batch_read_between_offsets_and_by_timestamp(
    spark: SparkSession, node: NodeProcess, topic_name: str
) -> None:
    create_topic(node, topic_name, 2)
    sent = produce(node.bootstrap, topic_name, 400)
    reader = (
        spark.read.format("kraft")
        .option("kafka.bootstrap.servers", node.bootstrap)
        .option("subscribe", topic_name)
    )
    whole = reader.load()
    assert whole.count() == len(sent)
    part = (
        reader.option("startingOffsets", json.dumps({topic_name: {"0": 10, "1": -2}}))
        .option("endingOffsets", json.dumps({topic_name: {"0": 20, "1": -1}}))
        .load()
    )
    got = Counter((r.partition, r.offset) for r in part.select("partition", "offset").collect())
    expected = Counter((p, o) for p, o, _, _ in sent if (p == 0 and 10 <= o < 20) or p == 1)
    assert got == expected
    future = reader.option("startingTimestamp", str(int(time.time() * 1000) + 3_600_000))
    with pytest.raises(Exception, match="no record at or after"):
        future.load().count()


def test_sink_writes_keys_where_kafka_would_and_at_least_once(
    spark: SparkSession, node: NodeProcess, topic_name: str
) -> None:
    create_topic(node, topic_name, 4)
    rows = [(f"key-{i % 50}", f"value-{i}") for i in range(2000)]
    df = spark.createDataFrame(rows, "key string, value string")
    (
        df.write.format("kraft")
        .mode("append")  # Spark allows Python sinks only append and overwrite
        .option("kafka.bootstrap.servers", node.bootstrap)
        .option("topic", topic_name)
        .option("kafka.compression.type", "zstd")
        .save()
    )
    consumer = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": f"check-{topic_name}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic_name, p, 0) for p in range(4)])
    got: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + 30
    while len(got) < len(rows) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.key(), msg.value()))
    consumer.close()
    assert Counter((k, v) for _, k, v in got) == Counter((k.encode(), v.encode()) for k, v in rows)
    # librdkafka's murmur2_random partitioner is Java's default: same key, same partition
    placement = Producer({"bootstrap.servers": node.bootstrap, "partitioner": "murmur2_random"})
    expected: dict[bytes, int] = {}
    for key in {k for _, k, _ in got}:
        placement.produce(
            topic_name,
            value=b"probe",
            key=key,
            on_delivery=lambda err, msg: expected.__setitem__(msg.key(), msg.partition()),
        )
    placement.flush(10)
    assert {k: p for p, k, _ in got} == expected


def test_killed_query_restarts_exactly_once(
    node: NodeProcess, topic_name: str, tmp_path: Path
) -> None:
    """A streaming query in its own process is killed with SIGKILL mid-stream and restarted on
    its checkpoint; its foreachBatch sink, keyed by batch id, holds every record once."""
    create_topic(node, topic_name, 3)
    sent = produce(node.bootstrap, topic_name, 3000)
    out = tmp_path / "batches"
    args = [sys.executable, str(PROC), node.bootstrap, topic_name, str(out), str(tmp_path / "ck")]
    log = (tmp_path / "query.log").open("a")
    env = child_env()
    first = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        while len(list(out.glob("batch-*.json"))) < 3:
            assert first.poll() is None, (tmp_path / "query.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the query wrote no batches"
            time.sleep(0.2)
    finally:
        first.kill()  # SIGKILL: no chance to finish the batch in flight
        first.wait()
    more = produce(node.bootstrap, topic_name, 1000, tag="after-kill")
    second = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        while True:
            seen = [tuple(r) for f in out.glob("batch-*.json") for r in json.loads(f.read_text())]
            if len(seen) >= len(sent) + len(more):
                break
            assert second.poll() is None, (tmp_path / "query.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"only {len(seen)} records after restart"
            time.sleep(0.5)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(60)
    expected = Counter((p, o, v.decode()) for p, o, _, v in sent + more)
    assert Counter((p, o, v) for p, o, v in seen) == expected


def test_query_continues_when_a_leader_broker_is_killed(
    spark: SparkSession, tmp_path: Path
) -> None:
    """RF 3, min.insync.replicas 2: kill -9 the broker leading partition 0 mid-query; every
    acknowledged record reaches the sink exactly once."""
    extra = {"default.replication.factor": "3", "min.insync.replicas": "2"}
    with running_cluster(tmp_path / "cluster", extra) as cluster:
        topic = "clicks"
        admin = admin_client(cluster)
        admin.create_topics([NewTopic(topic, 3, 3)])["clicks"].result(30)
        before = produce(cluster.bootstrap, topic, 1500, tag="before")
        batches: dict[int, list[Row]] = {}

        def keep(df: Any, batch_id: int) -> None:
            batches[batch_id] = [
                (r.partition, r.offset, None if r.key is None else bytes(r.key), bytes(r.value))
                for r in df.select("partition", "offset", "key", "value").collect()
            ]

        query = (
            stream(spark, cluster.bootstrap, topic, maxOffsetsPerTrigger="300")
            .writeStream.foreachBatch(keep)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            wait_for("the first batches", lambda: len(batches) >= 2, QUERY_TIMEOUT_S, cluster)
            leader = http_json(cluster.any_broker().admin + f"/v1/topics/{topic}")["partitions"][0][
                "leader"
            ]
            cluster.brokers[leader].kill()
            after = produce(cluster.bootstrap, topic, 1500, tag="after")
            expected = Counter(before + after)

            def all_seen() -> bool:
                assert query.exception() is None, query.exception()
                return sum(len(b) for b in list(batches.values())) >= len(expected)

            wait_for("every record in the sink", all_seen, QUERY_TIMEOUT_S, cluster, poll_s=0.5)
        finally:
            query.stop()
        assert Counter(r for b in batches.values() for r in b) == expected


def test_example_pipeline_runs_against_a_node(node: NodeProcess, tmp_path: Path) -> None:
    """README's example: events produced, windows counted by Spark into Parquet, progress."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "example_pipeline.py"
    args = [sys.executable, str(script), "--bootstrap", node.bootstrap, "--admin", node.admin]
    args += ["--topic", "example-clicks", "--out", str(tmp_path / "out"), "--seconds", "32"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    progress = [line for line in done.stdout.splitlines() if line.startswith("batch ")]
    assert len(progress) >= 5, done.stdout
    assert "page-windows written" in done.stdout, done.stdout
    assert any(Path(tmp_path / "out" / "windows").glob("*.parquet"))


def test_reads_on_a_spark_cluster(node: NodeProcess, topic_name: str, tmp_path: Path) -> None:
    """Executors in JVMs of their own (Spark standalone, two workers) read every record once."""
    create_topic(node, topic_name, 4)
    sent = produce(node.bootstrap, topic_name, 2000)
    args = [sys.executable, str(CLUSTER_PROC), node.bootstrap, topic_name, str(tmp_path)]
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, env=child_env()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    expected = Counter((p, o) for p, o, _, _ in sent)
    assert Counter(tuple(r) for r in result["batch"]) == expected
    assert Counter(tuple(r) for r in result["stream"]) == expected
    assert result["executors"] == 2
