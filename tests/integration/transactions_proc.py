"""Transactional client applications run as child processes, so that a test can kill them with
SIGKILL in the middle of a transaction (``test_transactions_clients.py``).

    python -m integration.transactions_proc hang CLIENT BOOTSTRAP TOPIC TXN_ID TIMEOUT_MS COUNT

opens a transaction with CLIENT (confluent, kafka-python or aiokafka), writes COUNT records
``hang-<i>`` to partition 0, makes sure they reached the broker, prints ``SENT`` and then waits
forever without ending the transaction (the test kills it).

    python -m integration.transactions_proc transform BOOTSTRAP IN OUT GROUP TXN_ID BATCH

is a consume-transform-produce application with confluent-kafka: a group member of GROUP
reading IN (read_committed) writes ``out-<value>`` for each input record to OUT (same
partition, same key) and commits its input offsets in the same transaction
(``send_offsets_to_transaction``), BATCH input records a transaction, its outputs written
(flushed; it prints ``OPEN``) 0.1 s before the commit; it prints ``COMMITTED <n>`` after each
commit (n: input records committed by this process so far) and runs until killed.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

TIMEOUT_S = 30


def hang_confluent(bootstrap: str, topic: str, txn_id: str, timeout_ms: int, count: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": timeout_ms,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, f"hang-{i}".encode(), partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    announce_and_wait()


def hang_kafka_python(bootstrap: str, topic: str, txn_id: str, timeout_ms: int, count: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=txn_id, transaction_timeout_ms=timeout_ms
    )
    producer.init_transactions()
    producer.begin_transaction()
    futures = [producer.send(topic, f"hang-{i}".encode(), partition=0) for i in range(count)]
    for f in futures:
        f.get(TIMEOUT_S)
    announce_and_wait()


def hang_aiokafka(bootstrap: str, topic: str, txn_id: str, timeout_ms: int, count: int) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=txn_id,
            transaction_timeout_ms=timeout_ms,
        )
        await producer.start()
        await producer.begin_transaction()
        futures = [
            await producer.send(topic, f"hang-{i}".encode(), partition=0) for i in range(count)
        ]
        for f in futures:
            await f
        print("SENT", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(run())


def announce_and_wait() -> None:
    print("SENT", flush=True)
    time.sleep(3600)


def transform(bootstrap: str, source: str, sink: str, group: str, txn_id: str, batch: int) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "fetch.wait.max.ms": 100,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 10000,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    consumer.subscribe([source])
    committed = 0
    while True:
        msgs = [m for m in consumer.consume(batch, timeout=0.5) if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            value = m.value() or b""
            producer.produce(sink, b"out-" + value, key=m.key(), partition=m.partition())
        producer.flush(TIMEOUT_S)  # the outputs are written, the transaction still open ...
        print("OPEN", flush=True)
        time.sleep(0.1)  # ... long enough for a kill to land here
        positions = consumer.position(consumer.assignment())
        try:
            producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), TIMEOUT_S
            )
            producer.commit_transaction(TIMEOUT_S)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(TIMEOUT_S)
                rewind(consumer)
                continue
            raise
        committed += len(msgs)
        print(f"COMMITTED {committed}", flush=True)


def rewind(consumer: Consumer) -> None:
    """After an abort, read again from the last committed offsets."""
    assignment = consumer.assignment()
    for tp in consumer.committed(assignment, TIMEOUT_S):
        offset = tp.offset if tp.offset >= 0 else 0
        consumer.seek(TopicPartition(tp.topic, tp.partition, offset))


HANG = {"confluent": hang_confluent, "kafka-python": hang_kafka_python, "aiokafka": hang_aiokafka}


def main(argv: list[str]) -> None:
    mode, *args = argv
    if mode == "hang":
        client, bootstrap, topic, txn_id, timeout_ms, count = args
        HANG[client](bootstrap, topic, txn_id, int(timeout_ms), int(count))
    elif mode == "transform":
        bootstrap, source, sink, group, txn_id, batch = args
        transform(bootstrap, source, sink, group, txn_id, int(batch))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    extra: Any = sys.argv[1:]
    main(extra)
