"""Malformed batches with valid CRCs, sent by a raw client to a real broker: each is refused
with Kafka's code, ``record_errors`` and ``error_message`` (Produce v9), the connection stays
open, nothing of it is appended, and the good records around it are all there for
confluent-kafka, kafka-python, aiokafka and kcat (none of which loops, fails or stops early)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from record_corruption import CORRUPTIONS, Batch, Rec, reference_walk

from integration.clients import (
    CREATE_TIME,
    Msg,
    assert_delivered,
    assert_same_records,
    create_topic,
    expected,
    produce_confluent,
    read_aiokafka,
    read_confluent,
    read_kafka_python,
    read_kcat,
    wait_for_high_watermarks,
)
from integration.clients import Rec as ReadRecord
from integration.node_process import NodeProcess
from integration.raw_client import RawConnection
from kafka_protocol.compression import Compression
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ProduceRequest, ProduceResponse
from kafka_protocol.types import TopicName

pytestmark = pytest.mark.integration

HOUR_MS = 3_600_000
TOPIC = "validated"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(Path(tmp_path_factory.mktemp("validation"))).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


def produce(topic: str, records: bytes) -> ProduceRequest:
    return ProduceRequest(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TopicName(topic),
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)],
            )
        ],
    )


def send(conn: RawConnection, topic: str, batch: bytes) -> ProduceResponse.PartitionProduceResponse:
    response = conn.request(produce(topic, batch), 9)
    assert isinstance(response, ProduceResponse)
    return response.responses[0].partition_responses[0]


def good_batch(tag: str, now_ms: int, codec: Compression = Compression.NONE) -> Batch:
    """Two records whose text kcat's ``-f`` output parses unambiguously."""
    return Batch(
        [
            Rec(f"k-{tag}-{j}".encode(), f"v-{tag}-{j}".encode(), [(b"h", f"{j}".encode())], j, j)
            for j in range(2)
        ],
        base_timestamp=now_ms,
        codec=codec,
    )


def as_read(b: Batch, first_offset: int) -> list[ReadRecord]:
    return [
        ReadRecord(
            0,
            first_offset + j,
            r.key,
            r.value,
            tuple((k.decode(), v) for k, v in r.headers),
            b.base_timestamp + r.timestamp_delta,
            CREATE_TIME,
        )
        for j, r in enumerate(b.records)
    ]


# (name, codec of the batch the corruption is applied to)
CASES = [(name, Compression.NONE) for name in sorted(CORRUPTIONS)] + [
    ("count-too-high", Compression.LZ4),
    ("trailing-bytes", Compression.ZSTD),
    ("truncated-value", Compression.GZIP),
    ("length-2^40", Compression.SNAPPY),
    ("wrong-offset-delta", Compression.LZ4),
]


def test_malformed_batches_are_refused_and_the_partition_stays_readable(
    node: NodeProcess,
) -> None:
    create_topic(node, TOPIC, 1, {"message.timestamp.before.max.ms": str(HOUR_MS)})
    now_ms = int(time.time() * 1000)
    conn = RawConnection(node.bootstrap)
    want: list[ReadRecord] = []
    for i, (name, codec) in enumerate(CASES):
        good = good_batch(f"{i}", now_ms + i, codec)
        sent = send(conn, TOPIC, good.seal())
        assert (sent.error_code, sent.base_offset) == (ErrorCode.NONE, len(want)), name
        want += as_read(good, len(want))

        corrupt, _, code, words = CORRUPTIONS[name]
        bad = corrupt(good_batch(f"bad-{i}", now_ms, codec))
        refused = send(conn, TOPIC, bad.seal())  # the same connection: it stays open
        assert refused.error_code == ErrorCode[code], (name, codec, refused)
        assert words in str(refused.error_message), (name, refused.error_message)
        if refused.error_code == ErrorCode.INVALID_RECORD:
            count = len(bad.records) if bad.count is None else bad.count
            (record_error,) = refused.record_errors
            assert (
                record_error.batch_index
                == reference_walk(bad.section(), count, count - 1).bad_index
            )
            assert record_error.batch_index_error_message == refused.error_message
        else:
            assert refused.record_errors == []

    too_old = good_batch("old", now_ms - 2 * HOUR_MS)
    refused = send(conn, TOPIC, too_old.seal())
    assert refused.error_code == ErrorCode.INVALID_TIMESTAMP, refused
    assert [e.batch_index for e in refused.record_errors] == [0]
    assert "message.timestamp.before.max.ms=3600000" in str(refused.error_message)
    conn.close()

    # A real producer after all that: its records land right after the good ones.
    msgs = [Msg(0, f"k-after-{j}".encode(), f"v-after-{j}".encode(), (), now_ms) for j in range(3)]
    after = expected(msgs, {0: len(want)})
    assert_delivered(produce_confluent(node, TOPIC, msgs), after, node)
    want += after

    ends = {0: len(want)}
    wait_for_high_watermarks(node, TOPIC, ends)
    assert_same_records(want, read_confluent(node, TOPIC, ends), "confluent-kafka")
    assert_same_records(want, read_kafka_python(node, TOPIC, ends), "kafka-python")
    assert_same_records(want, read_aiokafka(node, TOPIC, ends), "aiokafka")
    assert_same_records(want, read_kcat(node, TOPIC), "kcat")


def test_a_compacted_topic_refuses_a_record_without_a_key(node: NodeProcess) -> None:
    create_topic(node, "validated-compact", 1, {"cleanup.policy": "compact"})
    now_ms = int(time.time() * 1000)
    keyless = good_batch("c", now_ms)
    keyless.records[1].key = None
    conn = RawConnection(node.bootstrap)
    refused = send(conn, "validated-compact", keyless.seal())
    assert refused.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in refused.record_errors] == [1]
    assert "without a key" in str(refused.error_message)
    keyed = good_batch("c", now_ms)
    assert send(conn, "validated-compact", keyed.seal()).error_code == ErrorCode.NONE
    conn.close()
    assert_same_records(
        as_read(keyed, 0), read_kcat(node, "validated-compact"), "kcat on the compacted topic"
    )


def test_librdkafka_tells_keyless_records_from_their_batch_mates(node: NodeProcess) -> None:
    """librdkafka's 0011-produce_batch: one batch of 10 records, 3 without a key, to a
    compacted topic.  The broker lists every keyless record in ``record_errors`` (as Kafka);
    librdkafka then fails exactly those with INVALID_RECORD and the rest with
    _INVALID_DIFFERENT_RECORD (with a single record error it fails all with INVALID_RECORD)."""
    create_topic(node, "validated-compact-batch", 1, {"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 1000})
    errors: dict[int, int] = {}

    def report(i: int) -> Callable[[KafkaError | None, object], None]:
        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            errors[i] = err.code() if err is not None else 0

        return on_delivery

    for i in range(10):
        key = None if i in (0, 4, 7) else f"k{i}".encode()
        producer.produce("validated-compact-batch", b"v", key, partition=0, on_delivery=report(i))
    assert producer.flush(15) == 0
    assert {i for i, code in errors.items() if code == KafkaError.INVALID_RECORD} == {0, 4, 7}
    assert {i for i, code in errors.items() if code == KafkaError._INVALID_DIFFERENT_RECORD} == (
        set(range(10)) - {0, 4, 7}
    )
