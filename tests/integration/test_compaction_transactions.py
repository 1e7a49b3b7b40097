"""Compaction of a transactional topic on a real node, with confluent-kafka's transactional
producer: the broker's cleaner (every ``log.cleaner.backoff.ms``) removes the records of the
aborted transaction and the superseded committed values, a read_uncommitted reader then no
longer finds the aborted records, a read_committed reader reads the latest committed value
of every key, and the producer, whose state the cleaning must keep, goes on with new
transactions.  Segments roll by time (``segment.ms``) so that the transactions end up in
inactive segments, the only ones the cleaner touches."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition

from integration.clients import TIMEOUT_S, confluent_conf, confluent_consumer, create_topic
from integration.node_process import NodeProcess

pytestmark = pytest.mark.integration

TOPIC = "compacted-txn"
SEGMENT_MS = 200


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(
        Path(tmp_path_factory.mktemp("compaction-txn")), overrides=("log.cleaner.backoff.ms=200",)
    ).start()
    configs = {
        "cleanup.policy": "compact",
        "segment.ms": str(SEGMENT_MS),
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "1000",
    }
    create_topic(proc, TOPIC, 1, configs)
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


def read_all(node: NodeProcess, isolation: str) -> list[tuple[bytes, bytes]]:
    """(key, value) of every record from offset 0 to the end the isolation level allows."""
    consumer = confluent_consumer(node, isolation_level=isolation)
    tp = TopicPartition(TOPIC, 0, 0)
    try:
        _, end = consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S)
        consumer.assign([tp])
        out: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.2):
                assert msg.error() is None, msg.error()
                out.append((msg.key(), msg.value()))
            if consumer.position([tp])[0].offset >= end:
                return out
        raise AssertionError(f"did not read up to {end} ({isolation})")
    finally:
        consumer.close()


def transaction(producer: Producer, pairs: dict[bytes, bytes], commit: bool) -> None:
    producer.begin_transaction()
    for key, value in pairs.items():
        producer.produce(TOPIC, value, key)
    producer.flush(TIMEOUT_S)
    if commit:
        producer.commit_transaction(TIMEOUT_S)
    else:
        producer.abort_transaction(TIMEOUT_S)
    time.sleep(SEGMENT_MS * 1.5 / 1000)  # the next append rolls a new segment


def test_the_cleaner_removes_aborted_and_superseded_records(node: NodeProcess) -> None:
    producer = Producer(confluent_conf(node, transactional_id="p2-compaction"))
    producer.init_transactions(TIMEOUT_S)
    keys = [b"k0", b"k1", b"k2", b"k3"]
    transaction(producer, {k: b"first-" + k for k in keys}, commit=True)
    transaction(producer, {k: b"aborted-" + k for k in keys}, commit=False)
    transaction(producer, {k: b"second-" + k for k in keys[:2]}, commit=True)
    for i in range(3):  # later segments, so that the transactions are all in inactive ones
        transaction(producer, {b"filler": b"%d" % i}, commit=True)

    expected = {
        b"k0": b"second-k0",
        b"k1": b"second-k1",
        b"k2": b"first-k2",
        b"k3": b"first-k3",
        b"filler": b"2",
    }
    deadline = time.monotonic() + 3 * TIMEOUT_S
    while True:
        everything = read_all(node, "read_uncommitted")
        values = [v for _, v in everything]
        cleaned = not any(v.startswith(b"aborted-") for v in values) and b"first-k0" not in values
        if cleaned:
            break
        assert time.monotonic() < deadline, f"never cleaned: {values}"
        time.sleep(0.5)
    committed = read_all(node, "read_committed")
    assert dict(committed) == expected
    # The producer's state survived: it goes on, and its new transaction is read.
    transaction(producer, {b"k2": b"third-k2"}, commit=True)
    assert dict(read_all(node, "read_committed"))[b"k2"] == b"third-k2"
