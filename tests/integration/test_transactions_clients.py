"""Transactions end to end with the real clients: confluent-kafka, kafka-python and aiokafka
each commit and abort, read what they wrote under read_committed and read_uncommitted, get
fenced as zombies and die inside a transaction that the coordinator then aborts; a
consume-transform-produce application (confluent-kafka) is killed with SIGKILL mid-stream and
restarted, and writes every output record exactly once.

One ``kraft dev`` node per module, its timed-out transactions looked for every
:data:`CLEANUP_MS` (Kafka's default is 10 s) so that a dead producer's transaction, with a
``transaction.timeout.ms`` of :data:`TXN_TIMEOUT_MS`, is aborted within seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as aio_errors
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka import errors as kp_errors

from integration.clients import create_topic
from integration.node_process import NodeProcess

pytestmark = pytest.mark.integration

TXN_TIMEOUT_MS = 3000
CLEANUP_MS = 500
TIMEOUT_S = 20.0
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
CLIENTS = ("confluent", "kafka-python", "aiokafka")
Record = tuple[int, int, str]  # (partition, offset, value)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(
        Path(tmp_path_factory.mktemp("txn-node")),
        overrides=(f"transaction.abort.timed.out.transaction.cleanup.interval.ms={CLEANUP_MS}",),
    ).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


# --- transactional producers, one interface ------------------------------------------------


class TxnProducer:
    """init_transactions on construction; begin / send / commit / abort / close."""

    def begin(self) -> None:
        raise NotImplementedError

    def send(self, topic: str, partition: int, value: str) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Every record sent so far is written (acknowledged)."""
        raise NotImplementedError

    def commit(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class ConfluentTxn(TxnProducer):
    def __init__(self, node: NodeProcess, txn_id: str) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": node.bootstrap,
                "transactional.id": txn_id,
                "transaction.timeout.ms": 30000,
                "socket.timeout.ms": 10000,
            }
        )
        self.producer.init_transactions(TIMEOUT_S)

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, topic: str, partition: int, value: str) -> None:
        self.producer.produce(topic, value.encode(), partition=partition)
        self.producer.poll(0)

    def flush(self) -> None:
        assert self.producer.flush(TIMEOUT_S) == 0

    def commit(self) -> None:
        self.producer.commit_transaction(TIMEOUT_S)

    def abort(self) -> None:
        self.producer.abort_transaction(TIMEOUT_S)

    def close(self) -> None:
        self.producer.flush(1)


class KafkaPythonTxn(TxnProducer):
    def __init__(self, node: NodeProcess, txn_id: str) -> None:
        self.producer = KafkaProducer(
            bootstrap_servers=node.bootstrap,
            transactional_id=txn_id,
            transaction_timeout_ms=30000,
            request_timeout_ms=10000,
            max_block_ms=int(TIMEOUT_S * 1000),
        )
        self.producer.init_transactions()
        self.futures: list[Any] = []

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, topic: str, partition: int, value: str) -> None:
        self.futures.append(self.producer.send(topic, value.encode(), partition=partition))

    def flush(self) -> None:
        for f in self.futures:
            f.get(TIMEOUT_S)

    def commit(self) -> None:
        self.producer.commit_transaction()
        self.flush()  # a record that failed fails the test here
        self.futures = []

    def abort(self) -> None:
        self.producer.abort_transaction()
        self.futures = []

    def close(self) -> None:
        self.producer.close(5)


class AiokafkaTxn(TxnProducer):
    """aiokafka on an event loop of its own, driven synchronously."""

    def __init__(self, node: NodeProcess, txn_id: str) -> None:
        self.loop = asyncio.new_event_loop()

        async def start() -> AIOKafkaProducer:
            producer = AIOKafkaProducer(
                bootstrap_servers=node.bootstrap,
                transactional_id=txn_id,
                transaction_timeout_ms=30000,
                request_timeout_ms=10000,
            )
            await producer.start()  # init_transactions
            return producer

        self.producer = self.run(start())
        self.futures: list[asyncio.Future[Any]] = []

    def run(self, coro: Any) -> Any:
        async def bounded() -> Any:
            async with asyncio.timeout(TIMEOUT_S):
                return await coro

        return self.loop.run_until_complete(bounded())

    def begin(self) -> None:
        self.run(self.producer.begin_transaction())

    def send(self, topic: str, partition: int, value: str) -> None:
        self.futures.append(
            self.run(self.producer.send(topic, value.encode(), partition=partition))
        )

    def flush(self) -> None:
        for f in self.futures:
            self.run(f)

    def commit(self) -> None:
        self.run(self.producer.commit_transaction())
        self.flush()
        self.futures = []

    def abort(self) -> None:
        self.run(self.producer.abort_transaction())
        self.futures = []

    def close(self) -> None:
        try:
            self.run(self.producer.stop())
        finally:
            for f in self.futures:  # a fenced zombie's: failed, and seen failing
                if f.done() and not f.cancelled():
                    f.exception()
            self.loop.close()


PRODUCERS: dict[str, Callable[[NodeProcess, str], TxnProducer]] = {
    "confluent": ConfluentTxn,
    "kafka-python": KafkaPythonTxn,
    "aiokafka": AiokafkaTxn,
}


def fenced(client: str, exc: BaseException) -> bool:
    """The client's way of saying "another producer with your transactional.id took over"."""
    if client == "confluent":
        codes = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
        return isinstance(exc, KafkaException) and exc.args[0].code() in codes
    if client == "kafka-python":
        return isinstance(exc, kp_errors.ProducerFencedError | kp_errors.InvalidProducerEpochError)
    return isinstance(exc, aio_errors.ProducerFenced | aio_errors.InvalidProducerEpoch)


# --- readers, one interface ----------------------------------------------------------------


def offsets(node: NodeProcess, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """partition -> (last stable offset, high watermark), by ListOffsets with each isolation
    level (librdkafka asks with its consumer's ``isolation.level``)."""
    marks: dict[str, dict[int, int]] = {}
    for isolation in (READ_COMMITTED, READ_UNCOMMITTED):
        consumer = Consumer(
            {"bootstrap.servers": node.bootstrap, "group.id": "marks", "isolation.level": isolation}
        )
        try:
            marks[isolation] = {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), TIMEOUT_S)[1]
                for p in range(partitions)
            }
        finally:
            consumer.close()
    return {p: (marks[READ_COMMITTED][p], marks[READ_UNCOMMITTED][p]) for p in range(partitions)}


def read_confluent(
    node: NodeProcess, topic: str, ends: dict[int, int], isolation: str
) -> list[Record]:
    consumer = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": "txn-reader",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
        }
    )
    out: list[Record] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        eof_at = dict.fromkeys(ends, -1)
        deadline = time.monotonic() + TIMEOUT_S
        while any(eof_at[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            p, o = msg.partition(), msg.offset()
            assert p is not None and o is not None
            if (err := msg.error()) is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                eof_at[p] = o
                continue
            out.append((p, o, (msg.value() or b"").decode()))
    finally:
        consumer.close()
    return out


def read_kafka_python(
    node: NodeProcess, topic: str, ends: dict[int, int], isolation: str
) -> list[Record]:
    consumer = KafkaConsumer(
        bootstrap_servers=node.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        fetch_max_wait_ms=100,
        request_timeout_ms=10000,
    )
    out: list[Record] = []
    try:
        tps = {p: KpTopicPartition(topic, p) for p in ends}
        consumer.assign(list(tps.values()))
        for tp in tps.values():
            consumer.seek(tp, 0)
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                out += [(r.partition, r.offset, (r.value or b"").decode()) for r in records]
            if all(consumer.position(tp) >= ends[p] for p, tp in tps.items()):
                break
    finally:
        consumer.close()
    return out


def read_aiokafka(
    node: NodeProcess, topic: str, ends: dict[int, int], isolation: str
) -> list[Record]:
    async def run() -> list[Record]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=node.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            isolation_level=isolation,
            fetch_max_wait_ms=100,
            request_timeout_ms=10000,
        )
        out: list[Record] = []
        async with asyncio.timeout(TIMEOUT_S + 10):
            await consumer.start()
            try:
                tps = {p: AioTopicPartition(topic, p) for p in ends}
                consumer.assign(list(tps.values()))
                for tp in tps.values():
                    consumer.seek(tp, 0)
                deadline = time.monotonic() + TIMEOUT_S
                while time.monotonic() < deadline:
                    for records in (await consumer.getmany(timeout_ms=200)).values():
                        out += [(r.partition, r.offset, (r.value or b"").decode()) for r in records]
                    if all([await consumer.position(tp) >= ends[p] for p, tp in tps.items()]):
                        break
            finally:
                await consumer.stop()
        return out

    return asyncio.run(run())


READERS: dict[str, Callable[[NodeProcess, str, dict[int, int], str], list[Record]]] = {
    "confluent": read_confluent,
    "kafka-python": read_kafka_python,
    "aiokafka": read_aiokafka,
}


def read_all(
    client: str, node: NodeProcess, topic: str, partitions: int, isolation: str
) -> list[Record]:
    """Every partition from offset 0 to its end: the LSO under read_committed, else the high
    watermark."""
    marks = offsets(node, topic, partitions)
    ends = {p: marks[p][0 if isolation == READ_COMMITTED else 1] for p in marks}
    return READERS[client](node, topic, ends, isolation)


def values(records: list[Record], partition: int | None = None) -> list[str]:
    return [v for p, _, v in records if partition is None or p == partition]


def wait_until(what: str, condition: Callable[[], Any], timeout_s: float, node: NodeProcess) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}\n{node.log_tail(30)}")


# --- commit and abort ----------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_committed_records_are_read_and_aborted_ones_only_read_uncommitted(
    node: NodeProcess, topic_name: str, client: str
) -> None:
    create_topic(node, topic_name, 2)
    producer = PRODUCERS[client](node, f"txn-{topic_name}")
    try:
        written = {}
        for txn, end in (("a", "commit"), ("b", "abort"), ("c", "commit")):
            producer.begin()
            written[txn] = [f"{txn}{i}" for i in range(6)]
            for i, value in enumerate(written[txn]):
                producer.send(topic_name, i % 2, value)
            if end == "commit":
                producer.commit()
            else:
                producer.flush()  # written, then aborted (unsent records are just dropped)
                producer.abort()
    finally:
        producer.close()
    # per partition: 3 records of a, its COMMIT marker, 3 of b, ABORT, 3 of c, COMMIT
    assert offsets(node, topic_name, 2) == {0: (12, 12), 1: (12, 12)}
    committed = read_all(client, node, topic_name, 2, READ_COMMITTED)
    everything = read_all(client, node, topic_name, 2, READ_UNCOMMITTED)
    for p in (0, 1):
        want = [v for txn in "ac" for v in written[txn][p::2]]
        assert values(committed, p) == want, f"{client} read_committed, partition {p}"
        assert [o for q, o, _ in committed if q == p] == [0, 1, 2, 8, 9, 10]
        want_all = [v for txn in "abc" for v in written[txn][p::2]]
        assert values(everything, p) == want_all, f"{client} read_uncommitted, partition {p}"
        assert [o for q, o, _ in everything if q == p] == [0, 1, 2, 4, 5, 6, 8, 9, 10]


# --- a zombie ------------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_a_zombie_producer_is_fenced_by_its_successor(
    node: NodeProcess, topic_name: str, client: str
) -> None:
    create_topic(node, topic_name, 1)
    txn_id = f"zombie-{topic_name}"
    zombie = PRODUCERS[client](node, txn_id)
    successor: TxnProducer | None = None
    try:
        zombie.begin()
        zombie.send(topic_name, 0, "zombie-0")
        zombie.flush()
        successor = PRODUCERS[client](node, txn_id)  # bumps the epoch, aborts the zombie's
        successor.begin()
        successor.send(topic_name, 0, "successor-0")
        successor.commit()
        with pytest.raises(Exception) as caught:  # which one: fenced() below
            zombie.send(topic_name, 0, "zombie-1")
            zombie.commit()
        assert fenced(client, caught.value), f"{client}: {caught.value!r} is not a fencing error"
    finally:
        with contextlib.suppress(Exception):
            zombie.close()
        if successor is not None:
            successor.close()
    assert values(read_all(client, node, topic_name, 1, READ_COMMITTED)) == ["successor-0"]
    # the zombie's first record was written and aborted; its second was refused
    dirty = values(read_all(client, node, topic_name, 1, READ_UNCOMMITTED))
    assert dirty == ["zombie-0", "successor-0"]


# --- a producer dies inside its transaction -------------------------------------------------


class Child:
    """A child process whose stdout lines are read by a thread, so that waiting for one can
    time out; its stderr goes to a file shown when it fails."""

    def __init__(self, *args: str) -> None:
        self.stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed by kill()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "integration.transactions_proc", *args],
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            cwd=Path(__file__).parent.parent,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for_line(self, prefix: str, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                self.proc.wait(5)
                raise AssertionError(f"the child exited {self.proc.returncode}:{self.errors()}")
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no {prefix!r} line from the child in {timeout_s} s:{self.errors()}")

    def errors(self) -> str:
        self.stderr.seek(0)
        return "\n" + self.stderr.read()[-3000:]

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.stderr.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_a_dead_producers_transaction_is_aborted_after_its_timeout(
    node: NodeProcess, topic_name: str, client: str
) -> None:
    create_topic(node, topic_name, 1)
    producer = PRODUCERS[client](node, f"alive-{topic_name}")
    child = Child(
        "hang", client, node.bootstrap, topic_name, f"dead-{topic_name}", str(TXN_TIMEOUT_MS), "5"
    )
    try:
        child.wait_for_line("SENT")
        sent = time.monotonic()  # the transaction began a little earlier
    finally:
        child.kill()
    try:
        producer.begin()
        for i in range(3):
            producer.send(topic_name, 0, f"alive-{i}")
        producer.commit()
    finally:
        producer.close()
    # the dead transaction holds the last stable offset at its first record (while the
    # killed producer's disconnect alone aborts nothing) ...
    asked = time.monotonic()
    lso, high = offsets(node, topic_name, 1)[0]
    assert high == 9, "5 open records, 3 committed, their COMMIT marker"
    if asked - sent < TXN_TIMEOUT_MS / 1000 - 0.5:
        assert lso == 0, f"aborted {asked - sent:.1f} s after it was sent, before its timeout"
    # ... until the coordinator aborts it
    wait_until(
        "the dead producer's transaction to be aborted (LSO == high watermark)",
        lambda: (lambda m: m[0] == m[1])(offsets(node, topic_name, 1)[0]),
        TXN_TIMEOUT_MS / 1000 + CLEANUP_MS / 1000 + 10,
        node,
    )
    assert values(read_all(client, node, topic_name, 1, READ_COMMITTED)) == [
        f"alive-{i}" for i in range(3)
    ]
    dirty = values(read_all(client, node, topic_name, 1, READ_UNCOMMITTED))
    assert dirty == [*(f"hang-{i}" for i in range(5)), *(f"alive-{i}" for i in range(3))]


# --- consume, transform, produce; killed and restarted --------------------------------------

CTP_INPUTS = 600
CTP_BATCH = 20


def produce_inputs(node: NodeProcess, topic: str) -> list[str]:
    producer = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True})
    sent = [f"in-{i:05d}" for i in range(CTP_INPUTS)]
    for i, v in enumerate(sent):
        producer.produce(topic, v.encode(), key=str(i).encode(), partition=i % 2)
    assert producer.flush(TIMEOUT_S) == 0
    return sent


def group_committed(node: NodeProcess, topic: str, group: str) -> int:
    """The group's committed input offsets, summed (-1 while a transaction's are pending)."""
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in (0, 1)], 5)
        return sum(max(tp.offset, 0) for tp in tps)
    except KafkaException:  # UNSTABLE_OFFSET_COMMIT past the timeout, say
        return -1
    finally:
        consumer.close()


def test_a_consume_transform_produce_app_killed_mid_stream_writes_each_output_once(
    node: NodeProcess, topic_name: str
) -> None:
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    group, txn_id = f"{topic_name}-app", f"{topic_name}-app-txn"
    create_topic(node, source, 2)
    create_topic(node, sink, 2)
    inputs = produce_inputs(node, source)
    args = ("transform", node.bootstrap, source, sink, group, txn_id, str(CTP_BATCH))
    kills = 0
    for kill_after in (CTP_INPUTS // 4, CTP_INPUTS // 3):  # committed by that incarnation
        app = Child(*args)
        try:
            while True:
                line = app.wait_for_line("COMMITTED")
                if int(line.split()[1]) >= kill_after:
                    break
            app.wait_for_line("OPEN")  # the next transaction: its outputs written, not committed
        finally:
            app.kill()
        kills += 1
    app = Child(*args)
    try:
        wait_until(
            "the restarted application to commit every input offset",
            lambda: group_committed(node, source, group) == CTP_INPUTS,
            60,
            node,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nthe application's stderr:{app.errors()}") from None
    finally:
        app.kill()
    assert kills == 2
    out = read_all("confluent", node, sink, 2, READ_COMMITTED)
    got = values(out)
    duplicates = sorted({v for v in got if got.count(v) > 1})
    assert not duplicates, f"written more than once: {duplicates[:10]} ({len(duplicates)})"
    assert sorted(got) == sorted(f"out-{v}" for v in inputs)
    for p in (0, 1):  # and in input order per partition
        assert values(out, p) == [f"out-{v}" for v in inputs[p::2]]
    # the killed transactions' outputs were written, then aborted and written again
    dirty = values(read_all("confluent", node, sink, 2, READ_UNCOMMITTED))
    assert len(dirty) > len(got), "the killed transactions' outputs are not in the log"
