"""The Producer against a scripted one-broker cluster: partitioning, batching, idempotent
sequences, retries that resend the same bytes, pipelining, and the errors that are final."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fake_kafka_broker import CLOSE, running
from fake_kafka_cluster import PRODUCER_ID, FakeCluster

from kafka_protocol.compression import Compression
from kafka_protocol.errors import ErrorCode
from kafka_protocol.partitioner import partition_for_key
from kafka_protocol.record_batch import RecordBatch
from spark_source.client import KafkaClient, KafkaClientError, ProduceError, TopicNotFound
from spark_source.producer import Producer

FAST = {"retry.backoff.ms": "5", "retry.backoff.max.ms": "20"}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster({"out": 6, "one": 1})
    with running(fake.broker):
        yield fake


@pytest.fixture
def client(cluster: FakeCluster) -> Iterator[KafkaClient]:
    with KafkaClient(cluster.broker.bootstrap, FAST) as c:
        yield c


def stored(cluster: FakeCluster, topic: str, partition: int) -> list[RecordBatch]:
    return [RecordBatch(memoryview(b)) for b in cluster.log(topic, partition).batches]


def values_in(cluster: FakeCluster, topic: str, partition: int) -> list[bytes | None]:
    return [r.value for b in stored(cluster, topic, partition) for r in b.records()]


def test_keys_go_where_murmur2_puts_them_and_records_read_back(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    producer = Producer(client)
    keys = [f"key-{i}".encode() for i in range(60)]
    for i, key in enumerate(keys):
        headers = [("h", f"{i}".encode()), ("none", None)]
        producer.send("out", f"v{i}".encode(), key=key, headers=headers, timestamp_ms=1000 + i)
    assert cluster.produced == []  # buffered until flushed
    producer.flush()
    for p in range(6):
        records = [r for b in stored(cluster, "out", p) for r in b.records()]
        assert all(partition_for_key(r.key or b"", 6) == p for r in records)
        for r in records:
            i = int((r.value or b"")[1:])
            assert (r.key, r.timestamp) == (keys[i], 1000 + i)
            assert r.headers == [("h", f"{i}".encode()), ("none", None)]
    assert sum(len(values_in(cluster, "out", p)) for p in range(6)) == 60


def test_batches_are_idempotent_with_consecutive_sequences(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    producer = Producer(client, {"batch.size": "300", "compression.type": "zstd"})
    for i in range(40):
        producer.send("one", b"x" * 20 + f"{i}".encode())
    producer.flush()
    batches = stored(cluster, "one", 0)
    assert len(batches) > 3
    assert all(b.producer_id == PRODUCER_ID and b.producer_epoch == 0 for b in batches)
    assert all(b.compression is Compression.ZSTD for b in batches)
    sequences = [(b.base_sequence, b.records_count) for b in batches]
    expected_start = 0
    for base, count in sequences:
        assert base == expected_start
        expected_start += count
    assert len(cluster.broker.requests_of(22)) == 1
    assert values_in(cluster, "one", 0) == [b"x" * 20 + f"{i}".encode() for i in range(40)]


def test_unkeyed_records_stick_to_a_partition_until_its_batch_is_full(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    producer = Producer(client, {"batch.size": "2000"})
    for i in range(200):
        producer.send("out", b"%03d" % i + b"." * 40)
    producer.flush()
    counts = sorted(b.records_count for p in range(6) for b in stored(cluster, "out", p))
    assert all(c >= 20 for c in counts[1:]), counts  # all full but the one flush closed
    assert sum(counts) == 200


def test_retries_resend_the_same_bytes_and_are_deduplicated(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    cluster.script(0, ErrorCode.NOT_LEADER_OR_FOLLOWER, CLOSE, ErrorCode.NOT_ENOUGH_REPLICAS)
    producer = Producer(client)
    producer.send("one", b"a")
    producer.send("one", b"b")
    producer.flush()
    sent = [data for topic, _, data in cluster.produced]
    assert len(sent) == 4 and len(set(sent)) == 1, "every retry is the same batch"
    assert values_in(cluster, "one", 0) == [b"a", b"b"], "the append whose answer was lost"
    producer.send("one", b"c")
    producer.flush()
    assert values_in(cluster, "one", 0) == [b"a", b"b", b"c"]
    assert [b.base_sequence for b in stored(cluster, "one", 0)] == [0, 2]


def test_a_partitions_batches_are_pipelined_in_order_without_backing_off(
    cluster: FakeCluster,
) -> None:
    slow_backoff = {"retry.backoff.ms": "5000", "retry.backoff.max.ms": "5000"}
    with KafkaClient(cluster.broker.bootstrap, slow_backoff) as client:
        producer = Producer(client, {"batch.size": "100"})
        for i in range(12):
            producer.send("one", b"y" * 60 + b"%02d" % i)
        started = time.monotonic()
        producer.flush()
        assert time.monotonic() - started < 4, "a round without failures must not back off"
    assert len(cluster.broker.requests_of(0)) == 12  # one batch per request, 5 in flight
    assert values_in(cluster, "one", 0) == [b"y" * 60 + b"%02d" % i for i in range(12)]
    bases = [b.base_sequence for b in stored(cluster, "one", 0)]
    assert bases == list(range(12))


@pytest.mark.parametrize(
    "error",
    [
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_PRODUCER_EPOCH,
    ],
)
def test_final_errors_raise_at_once(
    cluster: FakeCluster, client: KafkaClient, error: ErrorCode
) -> None:
    cluster.script(0, error)
    producer = Producer(client)
    producer.send("one", b"a")
    with pytest.raises(ProduceError, match=f"Produce for one-0: {error.name}") as e:
        producer.flush()
    assert e.value.error is error
    with pytest.raises(KafkaClientError, match="the producer failed: Produce for one-0"):
        producer.send("one", b"b")  # its sequences have a gap now


def test_local_refusals(cluster: FakeCluster, client: KafkaClient) -> None:
    producer = Producer(client, {"max.request.size": "1000"})
    with pytest.raises(ProduceError, match=r"larger than max\.request\.size") as e:
        producer.send("one", b"z" * 1000)
    assert e.value.error is ErrorCode.MESSAGE_TOO_LARGE
    with pytest.raises(TopicNotFound, match="'missing' does not exist"):
        producer.send("missing", b"a")
    with pytest.raises(TopicNotFound, match="partition 6 of topic 'out'"):
        producer.send("out", b"a", partition=6)
    assert cluster.broker.requests_of(0) == []
    producer.close()
    with pytest.raises(Exception, match="closed"):
        producer.send("one", b"a")


def test_acks_1_is_not_idempotent(cluster: FakeCluster, client: KafkaClient) -> None:
    producer = Producer(client, {"acks": "1"})
    producer.send("one", b"a", partition=0)
    producer.flush()
    (batch,) = stored(cluster, "one", 0)
    assert (batch.producer_id, batch.base_sequence) == (-1, -1)
    assert cluster.broker.requests_of(22) == []
    assert cluster.broker.requests_of(0)[0].acks == 1  # type: ignore[attr-defined]


def test_buffer_memory_forces_a_flush(cluster: FakeCluster, client: KafkaClient) -> None:
    producer = Producer(client, {"buffer.memory": "2000"})
    for _ in range(30):
        producer.send("one", b"w" * 100)
    assert len(values_in(cluster, "one", 0)) >= 15
    assert producer.buffered_bytes < 2000
