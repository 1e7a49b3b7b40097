"""The Spark source's blocking Kafka client and producer against real brokers over real sockets.

One combined node (retention checked every 500 ms) serves most tests; a cluster of one
controller and three brokers (sessions of four seconds, so a killed leader is replaced within
seconds) serves the failover tests, which ``kill -9`` a partition's leader in the middle of a
read and of a produce, and restart it on the way out.  confluent-kafka (librdkafka) is the
oracle: what it produced the client must find, and what the producer writes it must read,
with keys on the partitions its default partitioner (``murmur2_random``, Java's) picks.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

from integration.clients import (
    CODECS,
    Msg,
    Rec,
    confluent_conf,
    create_topic,
    produce_confluent,
    read_confluent,
)
from integration.cluster_process import LocalCluster, http_json
from integration.node_process import NodeProcess
from kafka_protocol.record_batch import RecordBatch, iter_batches
from spark_source.client import (
    EARLIEST,
    LATEST,
    NO_OFFSET,
    DataLossError,
    KafkaClient,
    ProduceError,
    TopicNotFound,
    TopicPartition,
)
from spark_source.producer import Producer

pytestmark = pytest.mark.integration

WAIT_S = 30.0
BASE_TS = 1_700_000_000_000
QUICK = {"retry.backoff.ms": "20", "request.timeout.ms": "10000"}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(
        Path(tmp_path_factory.mktemp("node")),
        overrides=("log.retention.check.interval.ms=500",),
    ).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture
def client(node: NodeProcess) -> Iterator[KafkaClient]:
    with KafkaClient(node.bootstrap, QUICK) as c:
        yield c


def wait_until(what: str, condition: Any, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def batches_of(chunks: Iterator[memoryview]) -> list[bytes]:
    """Every batch of the chunks, as bytes; each chunk must hold whole batches only."""
    out = []
    for chunk in chunks:
        total = 0
        for b in iter_batches(chunk):
            out.append(bytes(b.buf))
            total += b.size_bytes
        assert total == len(chunk), "a chunk ends with a partial batch"
    return out


def records_in(batches: list[bytes], start: int, end: int) -> list[tuple[int, bytes | None]]:
    return [
        (r.offset, r.value)
        for data in batches
        for r in RecordBatch(memoryview(data)).records()
        if start <= r.offset < end
    ]


def timed_msgs(count: int, partitions: int, tag: str = "") -> list[Msg]:
    """Keyed records with increasing timestamps (1 s apart per partition) and headers."""
    return [
        Msg(
            i % partitions,
            f"k{tag}{i}".encode(),
            f"v{tag}{i}-".encode() + b"x" * (i % 50),
            (("i", str(i).encode()), ("none", None)),
            BASE_TS + 1000 * i,
        )
        for i in range(count)
    ]


# --- offsets ------------------------------------------------------------------------------------


def test_list_offsets_agree_with_confluent(
    node: NodeProcess, client: KafkaClient, topic_name: str
) -> None:
    create_topic(node, topic_name, 2)
    msgs = timed_msgs(60, 2)
    produce_confluent(node, topic_name, msgs, linger_ms=5)
    tps = [TopicPartition(topic_name, p) for p in range(2)]
    assert client.list_offsets(dict.fromkeys(tps, EARLIEST)) == dict.fromkeys(tps, 0)
    assert client.list_offsets(dict.fromkeys(tps, LATEST)) == dict.fromkeys(tps, 30)
    consumer = Consumer(confluent_conf(node, group_id="oracle"))
    try:
        for stamp in (BASE_TS - 1, BASE_TS + 1000, BASE_TS + 20_500, BASE_TS + 59_000):
            got = client.list_offsets(dict.fromkeys(tps, stamp))
            oracle = consumer.offsets_for_times([CTP(topic_name, p, stamp) for p in range(2)], 10)
            assert [got[tp] for tp in tps] == [o.offset for o in oracle], stamp
        beyond = client.list_offsets(dict.fromkeys(tps, BASE_TS + 10**9))
        assert beyond == dict.fromkeys(tps, NO_OFFSET)
    finally:
        consumer.close()


def test_topics_partition_counts_and_unknown_partitions(
    node: NodeProcess, client: KafkaClient, topic_name: str
) -> None:
    create_topic(node, topic_name, 3)
    client.commit_offsets("counts", {TopicPartition(topic_name, 0): 1})  # __consumer_offsets
    names = client.topic_names()
    assert topic_name in names and not [n for n in names if n.startswith("__")]
    assert client.partition_counts([topic_name, "no-such-topic"]) == {topic_name: 3}
    with pytest.raises(TopicNotFound):
        client.list_offsets({TopicPartition(topic_name, 3): LATEST})


# --- reading ------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_read_returns_exactly_the_batches_covering_a_range(
    node: NodeProcess, client: KafkaClient, topic_name: str, codec: str
) -> None:
    create_topic(node, topic_name, 1)
    msgs = [Msg(0, None, f"{codec}-{i}".encode() * 3) for i in range(200)]
    produce_confluent(
        node, topic_name, msgs, linger_ms=20, batch_num_messages=7, compression_type=codec
    )
    tp = TopicPartition(topic_name, 0)
    log = batches_of(client.read(tp, 0, 200))
    heads = [RecordBatch(memoryview(b)) for b in log]
    # librdkafka sends a batch uncompressed when its compressed form would be larger
    codecs = [h.compression.name.lower() for h in heads]
    assert codecs.count(codec) > 20 and set(codecs) <= {codec, "none"}, codecs
    assert [(o, v) for o, v in records_in(log, 0, 200)] == [
        (i, m.value) for i, m in enumerate(msgs)
    ]
    for start, end in [(0, 1), (3, 4), (5, 150), (10, 17), (199, 200), (64, 200)]:
        want = [
            b
            for b, h in zip(log, heads, strict=True)
            if h.last_offset >= start and h.base_offset < end
        ]
        got = batches_of(client.read(tp, start, end))
        assert got == want, (start, end)
        assert records_in(got, start, end) == [(i, msgs[i].value) for i in range(start, end)]


def test_read_spans_segment_rolls(node: NodeProcess, client: KafkaClient, topic_name: str) -> None:
    create_topic(node, topic_name, 1, {"internal.segment.bytes": "4096"})
    msgs = [Msg(0, f"k{i}".encode(), b"s" * 300 + str(i).encode()) for i in range(300)]
    produce_confluent(node, topic_name, msgs, linger_ms=5, batch_num_messages=5)
    tp = TopicPartition(topic_name, 0)
    for start, end in [(0, 300), (11, 289), (140, 160)]:
        got = records_in(batches_of(client.read(tp, start, end)), start, end)
        assert got == [(i, msgs[i].value) for i in range(start, end)]
    small = {**QUICK, "max.partition.fetch.bytes": "5000"}  # about one segment a fetch
    with KafkaClient(node.bootstrap, small) as c:
        assert len(records_in(batches_of(c.read(tp, 0, 300)), 0, 300)) == 300


def test_an_end_above_the_high_watermark_waits_for_it(
    node: NodeProcess, client: KafkaClient, topic_name: str
) -> None:
    create_topic(node, topic_name, 1)
    produce_confluent(node, topic_name, [Msg(0, None, b"a%d" % i) for i in range(10)])
    tp = TopicPartition(topic_name, 0)
    later = threading.Timer(
        1.0, produce_confluent, (node, topic_name, [Msg(0, None, b"b%d" % i) for i in range(5)])
    )
    later.start()
    try:
        got = records_in(batches_of(client.read(tp, 5, 13)), 5, 13)
    finally:
        later.join()
    assert [v for _, v in got] == [b"a5", b"a6", b"a7", b"a8", b"a9", b"b0", b"b1", b"b2"]


def test_an_end_that_never_comes_is_data_loss(node: NodeProcess, topic_name: str) -> None:
    create_topic(node, topic_name, 1)
    produce_confluent(node, topic_name, [Msg(0, None, b"a%d" % i) for i in range(10)])
    tp = TopicPartition(topic_name, 0)
    with KafkaClient(node.bootstrap, {**QUICK, "default.api.timeout.ms": "1500"}) as c:
        seen: list[bytes] = []
        with pytest.raises(DataLossError, match="stayed below the end") as e:
            for chunk in c.read(tp, 0, 15):
                seen += batches_of(iter([chunk]))
    assert len(records_in(seen, 0, 15)) == 10, "what exists is read first"
    assert (e.value.requested, e.value.available_until, e.value.available_from) == (10, 10, 0)


def test_records_deleted_by_retention_are_data_loss(
    node: NodeProcess, client: KafkaClient, topic_name: str
) -> None:
    configs = {"internal.segment.bytes": "2048", "retention.bytes": "4096"}
    create_topic(node, topic_name, 1, configs)
    msgs = [Msg(0, None, b"r" * 200 + str(i).encode()) for i in range(200)]
    produce_confluent(node, topic_name, msgs, linger_ms=5, batch_num_messages=4)
    tp = TopicPartition(topic_name, 0)
    log_start = wait_until(
        "retention to move the log start", lambda: client.list_offsets({tp: EARLIEST})[tp]
    )
    with pytest.raises(DataLossError, match=r"offset 0 is no longer available.*retention") as e:
        list(client.read(tp, 0, 200))
    assert (e.value.tp, e.value.requested) == (tp, 0)
    assert e.value.available_from is not None and e.value.available_from >= log_start
    tail = records_in(batches_of(client.read(tp, 190, 200)), 190, 200)
    assert tail == [(i, msgs[i].value) for i in range(190, 200)]


def test_a_deleted_topic_is_data_loss(
    node: NodeProcess, client: KafkaClient, topic_name: str
) -> None:
    create_topic(node, topic_name, 1)
    produce_confluent(node, topic_name, [Msg(0, None, b"d")])
    tp = TopicPartition(topic_name, 0)
    assert client.list_offsets({tp: LATEST}) == {tp: 1}
    admin = AdminClient(confluent_conf(node))  # the handle must outlive its future
    admin.delete_topics([topic_name])[topic_name].result(15)
    wait_until("the deletion", lambda: topic_name not in client.topic_names())
    with pytest.raises(DataLossError, match="does not exist"):
        list(client.read(tp, 0, 1))


# --- group offsets ------------------------------------------------------------------------------


def test_committed_offsets_are_seen_by_confluent_and_the_rest_api(
    node: NodeProcess, client: KafkaClient, topic_name: str
) -> None:
    create_topic(node, topic_name, 3)
    tp0, tp1, tp2 = (TopicPartition(topic_name, p) for p in range(3))
    group = f"g-{topic_name}"
    client.commit_offsets(group, {tp0: 5, tp1: 9}, "spark batch 3")
    consumer = Consumer(confluent_conf(node, group_id=group, enable_auto_commit=False))
    try:
        seen = consumer.committed([CTP(topic_name, p) for p in range(3)], 10)
        assert [(c.offset, c.metadata) for c in seen[:2]] == [
            (5, "spark batch 3"),
            (9, "spark batch 3"),
        ]
        assert seen[2].offset < 0  # no commit
        consumer.commit(offsets=[CTP(topic_name, 2, 77, "from librdkafka")], asynchronous=False)
    finally:
        consumer.close()
    described = http_json(f"{node.admin}/v1/groups/{group}")
    committed = {p["partition"]: p["committed"] for p in described["partitions"]}
    assert committed == {0: 5, 1: 9, 2: 77}
    got = client.committed_offsets(group, [tp0, tp1, tp2])
    # confluent-kafka-python sends its metadata string with the C terminator.
    got[tp2] = (got[tp2][0], got[tp2][1].rstrip("\x00"))
    assert got == {
        tp0: (5, "spark batch 3"),
        tp1: (9, "spark batch 3"),
        tp2: (77, "from librdkafka"),
    }
    assert client.committed_offsets("never-committed", [tp0]) == {}


# --- producing ----------------------------------------------------------------------------------


def read_all(node: Any, topic: str, partitions: int) -> list[Rec]:
    with KafkaClient(node.bootstrap) as c:
        ends = c.list_offsets({TopicPartition(topic, p): LATEST for p in range(partitions)})
    return read_confluent(node, topic, {tp.partition: end for tp, end in ends.items()})


@pytest.mark.parametrize("codec", CODECS)
def test_produced_records_read_back_by_confluent_where_it_would_put_them(
    node: NodeProcess, client: KafkaClient, topic_name: str, codec: str
) -> None:
    create_topic(node, topic_name, 4)
    create_topic(node, topic_name + "-oracle", 4)
    msgs = timed_msgs(120, 4, codec)
    producer = Producer(client, {"compression.type": codec, "batch.size": "2000"})
    for m in msgs:
        producer.send(topic_name, m.value, key=m.key, headers=m.headers, timestamp_ms=m.timestamp)
    producer.flush()
    oracle_producer = ConfluentProducer(confluent_conf(node, partitioner="murmur2_random"))
    for m in msgs:
        oracle_producer.produce(topic_name + "-oracle", value=m.value, key=m.key)
    assert oracle_producer.flush(15) == 0
    theirs = {r.key: r.partition for r in read_all(node, topic_name + "-oracle", 4)}
    ours = read_all(node, topic_name, 4)
    assert {r.key: r.partition for r in ours} == theirs
    by_key = {m.key: m for m in msgs}
    for r in ours:
        m = by_key[r.key]
        assert (r.value, r.headers, r.timestamp, r.ts_type) == (
            m.value,
            m.headers,
            m.timestamp,
            "CREATE_TIME",
        )
    with KafkaClient(node.bootstrap) as c:
        for p in range(4):
            end = c.list_offsets({TopicPartition(topic_name, p): LATEST})[
                TopicPartition(topic_name, p)
            ]
            heads = [
                RecordBatch(memoryview(b))
                for b in batches_of(c.read(TopicPartition(topic_name, p), 0, end))
            ]
            assert all(h.producer_id >= 0 and h.compression.name.lower() == codec for h in heads)
            assert [h.base_sequence for h in heads] == [h.base_offset for h in heads], "sequences"


def test_unkeyed_records_and_final_errors(
    node: NodeProcess, client: KafkaClient, topic_name: str
) -> None:
    create_topic(node, topic_name, 3, {"max.message.bytes": "3000"})
    producer = Producer(client, {"batch.size": "1000"})
    for i in range(50):
        producer.send(topic_name, b"u%d" % i)
    producer.flush()
    assert sorted(r.value or b"" for r in read_all(node, topic_name, 3)) == sorted(
        b"u%d" % i for i in range(50)
    )
    big = Producer(client, {"batch.size": "100000"})
    for _ in range(10):
        big.send(topic_name, b"B" * 1000, partition=1)
    with pytest.raises(ProduceError, match="MESSAGE_TOO_LARGE"):
        big.flush()
    with pytest.raises(TopicNotFound):
        Producer(client).send(topic_name + "-missing", b"x")


# --- failover on a three-broker cluster ---------------------------------------------------------

FAILOVER = {
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "2000",
    "auto.leader.rebalance.enable": "false",
}


@dataclass
class Endpoint:
    """What ``integration.clients`` needs of a node."""

    bootstrap: str
    cluster: LocalCluster

    def log_tail(self, lines: int = 15) -> str:
        return self.cluster.logs()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster.create(Path(tmp_path_factory.mktemp("spark-failover")), 1, 3, FAILOVER)
    try:
        c.start()
        yield c
    finally:
        c.kill_all()


def create_replicated(cluster: LocalCluster, name: str) -> int:
    """One partition on all three brokers; returns its leader once the ISR is full."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, 1, 3)], operation_timeout=15)[name].result(20)

    def leader() -> int | None:
        view = cluster.any_broker().get(f"/v1/topics/{name}")["partitions"][0]
        return int(view["leader"]) if len(view["isr"]) == 3 and view["leader"] >= 0 else None

    return int(wait_until(f"{name} led with a full ISR", leader))


@contextlib.contextmanager
def restarting(cluster: LocalCluster, broker: int) -> Iterator[None]:
    """Restart ``broker`` (killed inside the block) and wait until every broker is unfenced."""
    try:
        yield
    finally:
        node = cluster.brokers[broker]
        if not node.alive():
            node.launch().wait_ready()

        def all_unfenced() -> bool:
            controller = next(iter(cluster.controllers.values()))
            brokers = controller.get("/v1/cluster")["brokers"]
            return {b["id"] for b in brokers if not b["fenced"]} == set(cluster.brokers)

        wait_until("every broker registered and unfenced", all_unfenced)


def test_a_read_survives_a_leader_kill_with_identical_data(cluster: LocalCluster) -> None:
    topic = "failover-read"
    leader = create_replicated(cluster, topic)
    endpoint = Endpoint(cluster.bootstrap, cluster)
    count = 6000
    msgs = [Msg(0, None, b"%06d" % i + b"." * 500) for i in range(count)]
    produce_confluent(endpoint, topic, msgs, acks="all", linger_ms=10, batch_num_messages=50)  # type: ignore[arg-type]
    tp = TopicPartition(topic, 0)
    with KafkaClient(cluster.bootstrap) as c:
        assert c.list_offsets({tp: LATEST}) == {tp: count}
        reference = batches_of(c.read(tp, 0, count))
    got: list[bytes] = []
    small = {"max.partition.fetch.bytes": "65536", "retry.backoff.ms": "50"}
    with restarting(cluster, leader), KafkaClient(cluster.bootstrap, small) as c:
        for i, chunk in enumerate(c.read(tp, 0, count)):
            got += batches_of(iter([chunk]))
            if i == 3:
                cluster.brokers[leader].kill()  # kill -9
        new_leader = cluster.any_broker().get(f"/v1/topics/{topic}")["partitions"][0]["leader"]
    assert new_leader != leader
    assert got == reference, "the batches read across the failover differ"


def test_an_idempotent_producer_survives_a_leader_kill_without_duplicates(
    cluster: LocalCluster,
) -> None:
    topic = "failover-produce"
    leader = create_replicated(cluster, topic)
    count = 30_000
    with (
        restarting(cluster, leader),
        KafkaClient(cluster.bootstrap, {"retry.backoff.ms": "50"}) as c,
    ):
        producer = Producer(c, {"batch.size": "16384"})
        killer = threading.Timer(0.02, cluster.brokers[leader].kill)  # kill -9
        try:
            for i in range(count):
                producer.send(topic, b"%06d" % i + b"-" * 200)
                if i % 2000 == 1999:
                    if i == 9999:
                        killer.start()  # while the next flush has requests in flight
                    producer.flush()
            producer.flush()
        finally:
            killer.join()
        assert not cluster.brokers[leader].alive()
        producer.close()
        assert c.list_offsets({TopicPartition(topic, 0): LATEST}) == {
            TopicPartition(topic, 0): count
        }
    endpoint = Endpoint(cluster.bootstrap, cluster)
    values = [r.value for r in read_confluent(endpoint, topic, {0: count})]  # type: ignore[arg-type]
    assert values == [b"%06d" % i + b"-" * 200 for i in range(count)]
