"""Chaos under transactions: transactional producers commit and abort while the brokers that
coordinate their transactions and the leaders of the partitions they write are killed
(``kill -9``) and restarted; no committed record is lost or duplicated, no aborted record is
read under read_committed, no transaction is half visible and nothing is read that was never
written.

Three controllers and three brokers as real processes (``kraft server``); a topic of 3
partitions, replication factor 3, ``min.insync.replicas=2``; ``__transaction_state`` with
Kafka's defaults (replication factor 3, min ISR 2).  :data:`PRODUCERS` confluent-kafka
transactional producers (each its own ``transactional.id``) write transactions of
:data:`RECORDS_PER_TXN` unique values over every partition and commit or abort them at random,
recording every send, acknowledgement, failure and how each transaction ended (committed,
aborted, or unknown when the client could not tell) in a JSONL history
(``tests/history.py``).  A read_committed and a read_uncommitted consumer read all along.
Each round kills, alternately, the coordinator of a producer's transactional id (the leader of
its ``__transaction_state`` partition, found with FindCoordinator) and the leader of a
partition, keeps it down longer than the broker session timeout, restarts it and waits for the
cluster to heal.  Then the producers finish, every transaction settles (last stable offset ==
high watermark everywhere), a read_committed and a read_uncommitted final read cover every
partition, and the checker must find nothing.  A failure prints the seed
(``CHAOS_SEED=N`` replays the same choices) and the path of the history.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from history import (
    ABORTED,
    COMMITTED,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    UNKNOWN,
    Ack,
    Fail,
    HistoryWriter,
    Read,
    Send,
    TxnEnd,
    check,
)

from integration.cluster_process import LocalCluster
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import FindCoordinatorRequest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "txn-chaos"
TXN_STATE = "__transaction_state"
PARTITIONS = 3
PRODUCERS = 2
RECORDS_PER_TXN = 6
ABORT_RATIO = 0.3
SESSION_TIMEOUT_MS = 3000
EXTRA = {
    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "5000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
ROUNDS = 6  # coordinator, leader, three times
DOWN_S = SESSION_TIMEOUT_MS / 1000 + 1.5
STEADY_S = 2.0
TXN_TIMEOUT_MS = 20000
END_TIMEOUT_S = 60.0
MIN_COMMITTED = 40
HEAL_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 60.0
READ_TIMEOUT_S = 60.0


def wait_for(
    what: str, condition: Callable[[], Any], timeout_s: float, why: Callable[[], str]
) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if value := condition():
                return value
        except (AssertionError, OSError, KeyError, KafkaException):
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}\n{why()}")


# --- a transactional producer ---------------------------------------------------------------


class TxnProducerThread(threading.Thread):
    """Transactions of ``RECORDS_PER_TXN`` unique values, committed or aborted at random,
    until ``stopping``; a fatal error (fenced, say) ends its producer, the outcome of the
    transaction it was in is unknown, and a new producer with the same transactional.id
    carries on."""

    def __init__(
        self, index: int, bootstrap: str, history: HistoryWriter, run_id: str, seed: int
    ) -> None:
        super().__init__(name=f"txn-producer-{index}", daemon=True)
        self.label = f"producer-{index}"
        self.txn_id = f"chaos-{run_id}-{index}"
        self.bootstrap = bootstrap
        self.history = history
        self.run_id = run_id
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.next_id = index * 10_000_000
        self.outcomes: dict[str, int] = {COMMITTED: 0, ABORTED: 0, UNKNOWN: 0}
        self.renewals = 0
        self.producer = self._new_producer()

    def _new_producer(self) -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": self.txn_id,
                "transaction.timeout.ms": TXN_TIMEOUT_MS,
                "linger.ms": 5,
                "message.timeout.ms": 15_000,
                "request.timeout.ms": 5000,
                "socket.timeout.ms": 5000,
                "retry.backoff.ms": 100,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        deadline = time.monotonic() + END_TIMEOUT_S
        while True:
            try:
                producer.init_transactions(10)
                return producer
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.fatal() or time.monotonic() > deadline:
                    raise
                # retriable (coordinator moving): "retry call to resume"

    def run(self) -> None:
        try:
            n = 0
            while not self.stopping.is_set():
                self._transaction(f"{self.label}:{n}")
                n += 1
                time.sleep(0.02)
        except BaseException as exc:  # re-raised by finish() in the test's thread
            self.error = exc

    def _transaction(self, txn: str) -> None:
        self.producer.begin_transaction()
        for j in range(RECORDS_PER_TXN):
            if not self._send(txn, j % PARTITIONS):
                break  # the transaction already failed: ending it will say so
        commit = self.rng.random() >= ABORT_RATIO
        if not commit:  # written first, so that readers have aborted records to skip
            self.producer.flush(10)
        outcome = self._end(commit)
        self.outcomes[outcome] += 1
        self.history.append(TxnEnd(txn, outcome, time.monotonic()))

    def _send(self, txn: str, partition: int) -> bool:
        i = self.next_id
        self.next_id += 1
        value = f"{self.run_id}-{i:08d}"

        def delivered(err: KafkaError | None, msg: Message) -> None:
            now = time.monotonic()
            if err is None:
                p, o = msg.partition(), msg.offset()
                assert p is not None and o is not None
                self.history.append(Ack(i, p, o, now))
            else:
                self.history.append(Fail(i, str(err), now))

        while True:
            try:
                self.producer.produce(TOPIC, value, None, partition, on_delivery=delivered)
                break
            except BufferError:
                self.producer.poll(0.05)
            except KafkaException:  # refused in an abortable or fatal state: never sent
                return False
        send = Send(i, self.label, value, None, partition, time.monotonic(), txn=txn)
        self.history.append(send)
        self.producer.poll(0)
        return True

    def _end(self, commit: bool) -> str:
        """Commit (or abort) until the client says how it ended; an abortable error turns a
        commit into an abort (which, once it succeeds, proves no commit happened)."""
        deadline = time.monotonic() + END_TIMEOUT_S
        commit_asked = False
        while time.monotonic() < deadline:
            try:
                if commit:
                    commit_asked = True
                    self.producer.commit_transaction(10)
                    return COMMITTED
                self.producer.abort_transaction(10)
                return ABORTED
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.fatal():
                    break
                if error.txn_requires_abort():
                    commit = False
                elif not error.retriable():
                    break
        # the client cannot tell: a new producer fences this one and aborts what it left open
        # (unless its commit went through; never asked to commit, it cannot have)
        self.renewals += 1
        with contextlib.suppress(Exception):
            self.producer.flush(0)
        self.producer = self._new_producer()
        return UNKNOWN if commit_asked else ABORTED

    def finish(self) -> None:
        self.stopping.set()
        self.join(END_TIMEOUT_S * 2 + 30)
        assert not self.is_alive(), f"{self.name} did not stop"
        if self.error is not None:
            raise self.error


# --- readers ------------------------------------------------------------------------------


def reader_conf(bootstrap: str, isolation: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"txn-chaos-{secrets.token_hex(4)}",  # assign() only: never joined
        "isolation.level": isolation,
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 100,
        "socket.timeout.ms": 5000,
        "topic.metadata.refresh.interval.ms": 1000,
    }


class ReaderThread(threading.Thread):
    """Reads every partition from the beginning for as long as the test runs."""

    def __init__(self, bootstrap: str, history: HistoryWriter, isolation: str) -> None:
        super().__init__(name=f"live-{isolation}", daemon=True)
        self.history = history
        self.isolation = isolation
        self.reader = f"live-{isolation}"
        self.stopping = threading.Event()
        self.consumer = Consumer(reader_conf(bootstrap, isolation))
        self.count = 0

    def run(self) -> None:
        self.consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        try:
            while not self.stopping.is_set():
                msg = self.consumer.poll(0.2)
                if msg is None or msg.error() is not None:
                    continue
                p, o, v = msg.partition(), msg.offset(), msg.value()
                assert p is not None and o is not None and v is not None
                read = Read(p, o, v.decode(), self.reader, time.monotonic(), self.isolation)
                self.history.append(read)
                self.count += 1
        finally:
            self.consumer.close()


def marks(bootstrap: str) -> dict[int, tuple[int, int]]:
    """partition -> (last stable offset, high watermark)."""
    out: dict[str, dict[int, int]] = {}
    for isolation in (READ_COMMITTED, READ_UNCOMMITTED):
        consumer = Consumer(reader_conf(bootstrap, isolation))
        try:
            out[isolation] = {
                p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
                for p in range(PARTITIONS)
            }
        finally:
            consumer.close()
    return {p: (out[READ_COMMITTED][p], out[READ_UNCOMMITTED][p]) for p in range(PARTITIONS)}


def final_read(
    cluster: LocalCluster, history: HistoryWriter, isolation: str, ends: dict[int, int]
) -> None:
    """Every partition from 0 until an end-of-partition at or past ``ends``."""
    reader = "final" if isolation == READ_COMMITTED else "final-uncommitted"
    consumer = Consumer(reader_conf(cluster.bootstrap, isolation))
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        eof_at = dict.fromkeys(ends, -1)
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(eof_at[p] < ends[p] for p in ends):
            assert time.monotonic() < deadline, f"{reader}: EOF at {eof_at}, ends {ends}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            p, o = msg.partition(), msg.offset()
            assert p is not None and o is not None
            if (err := msg.error()) is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    eof_at[p] = o
                continue
            v = msg.value()
            assert v is not None
            history.append(Read(p, o, v.decode(), reader, time.monotonic(), isolation))
    finally:
        consumer.close()


# --- the cluster ----------------------------------------------------------------------------


def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 5000})


def create_topic(cluster: LocalCluster) -> None:
    client = admin(cluster)
    topic = NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})
    client.create_topics([topic], request_timeout=15)[TOPIC].result(timeout=20)


def partitions_of(cluster: LocalCluster, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    md = admin(cluster).list_topics(topic, timeout=5)
    return {p.id: (p.leader, p.replicas, p.isrs) for p in md.topics[topic].partitions.values()}


def healed(cluster: LocalCluster) -> bool:
    """Every broker up and unfenced; every partition of the topic and of
    ``__transaction_state`` led, with its whole replica set in sync."""
    if not all(b.alive() for b in cluster.brokers.values()):
        return False
    view = cluster.any_broker().get("/v1/cluster")
    if any(b["fenced"] for b in view["brokers"]) or len(view["brokers"]) < len(cluster.brokers):
        return False
    for topic in (TOPIC, TXN_STATE):
        state = partitions_of(cluster, topic)
        if not state or not all(
            leader >= 0 and sorted(isr) == sorted(replicas)
            for leader, replicas, isr in state.values()
        ):
            return False
    return True


def leader_of(cluster: LocalCluster, partition: int) -> int | None:
    leader = partitions_of(cluster, TOPIC)[partition][0]
    return leader if leader in cluster.brokers else None


def coordinator_of(cluster: LocalCluster, txn_id: str) -> int:
    conn = RawConnection(cluster.any_broker().address)
    try:
        response = conn.request(FindCoordinatorRequest(key=txn_id, key_type=1), 3)
    finally:
        conn.close()
    assert response.error_code == ErrorCode.NONE, response
    return int(response.node_id)


@dataclass(frozen=True)
class Fault:
    round: int
    role: str
    broker: int
    at_s: float

    def __str__(self) -> str:
        return (
            f"round {self.round} at {self.at_s:.1f} s: kill -9 broker {self.broker} ({self.role})"
        )


def inject(
    cluster: LocalCluster,
    producers: list[TxnProducerThread],
    started: float,
    why: Callable[[], str],
) -> list[Fault]:
    faults = []
    for r in range(ROUNDS):
        wait_for("the cluster to heal", lambda: healed(cluster), HEAL_TIMEOUT_S, why)
        time.sleep(STEADY_S)
        if r % 2 == 0:
            producer = producers[(r // 2) % len(producers)]
            role = f"coordinator of {producer.txn_id}"
            victim = wait_for(
                "a coordinator", lambda t=producer.txn_id: coordinator_of(cluster, t), 20, why
            )
        else:
            partition = (r // 2) % PARTITIONS
            role = f"leader of {TOPIC}-{partition}"
            victim = wait_for("a leader", lambda p=partition: leader_of(cluster, p), 20, why)
        fault = Fault(r, role, victim, time.monotonic() - started)
        print(fault, flush=True)
        cluster.brokers[victim].kill()
        time.sleep(DOWN_S)
        cluster.brokers[victim].launch().wait_ready()
        faults.append(fault)
    wait_for("the cluster to heal", lambda: healed(cluster), HEAL_TIMEOUT_S, why)
    return faults


# --- the test -------------------------------------------------------------------------------


def test_transactions_survive_killed_coordinators_and_leaders(tmp_path: Path) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or secrets.randbits(32))
    rng = random.Random(seed)
    history_path = tmp_path / "history.jsonl"
    context = f"CHAOS_SEED={seed}; history in {history_path}"
    print(context)
    history = HistoryWriter(history_path)
    cluster = LocalCluster.create(tmp_path / "cluster", 3, 3, EXTRA).start()
    producers: list[TxnProducerThread] = []
    readers: list[ReaderThread] = []
    faults: list[Fault] = []

    def why() -> str:
        return f"{context}\n{cluster.logs()}"

    started = time.monotonic()
    try:
        create_topic(cluster)
        wait_for("the topic to be ready", lambda: partitions_of(cluster, TOPIC), 30, why)
        run_id = f"{seed:08x}"
        producers = [
            TxnProducerThread(i, cluster.bootstrap, history, run_id, rng.randrange(1 << 30))
            for i in range(PRODUCERS)
        ]
        readers = [
            ReaderThread(cluster.bootstrap, history, isolation)
            for isolation in (READ_COMMITTED, READ_UNCOMMITTED)
        ]
        for thread in [*producers, *readers]:
            thread.start()
        faults = inject(cluster, producers, started, why)
        time.sleep(STEADY_S)
        for producer in producers:
            producer.finish()
        settled = wait_for(
            "every transaction to settle (LSO == high watermark)",
            lambda: (m := marks(cluster.bootstrap)) and all(a == b for a, b in m.values()) and m,
            SETTLE_TIMEOUT_S,
            why,
        )
        for reader in readers:
            reader.stopping.set()
            reader.join(10)
        ends = {p: high for p, (_, high) in settled.items()}
        final_read(cluster, history, READ_COMMITTED, ends)
        final_read(cluster, history, READ_UNCOMMITTED, ends)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{context}") from None
    finally:
        for thread in [*producers, *readers]:
            thread.stopping.set()
        history.close()
        cluster.kill_all()
    committed = check(history.events)
    uncommitted = check(history.events, final_reader="final-uncommitted")
    outcomes = {k: sum(p.outcomes[k] for p in producers) for k in (COMMITTED, ABORTED, UNKNOWN)}
    summary = "\n".join(
        [
            context,
            f"outcomes {outcomes}, producers renewed {sum(p.renewals for p in producers)} times,"
            f" live reads {[r.count for r in readers]}",
            "read_committed final read:",
            committed.describe(),
            "read_uncommitted final read:",
            uncommitted.describe(),
            "faults:",
            *map(str, faults),
        ]
    )
    print(summary)
    assert committed.ok, summary
    assert uncommitted.ok, summary
    assert len(faults) == ROUNDS, summary
    assert outcomes[COMMITTED] >= MIN_COMMITTED, summary
    assert outcomes[ABORTED] > 0, summary
    assert all(r.count > 0 for r in readers), summary
    aborted = {e.txn for e in history.events if isinstance(e, TxnEnd) and e.outcome == ABORTED}
    sent_in = {e.value: e.txn for e in history.events if isinstance(e, Send)}
    dirty = [
        e
        for e in history.events
        if isinstance(e, Read) and e.reader == "final-uncommitted" and sent_in[e.value] in aborted
    ]
    assert dirty, (
        f"no aborted record reached the log: nothing for read_committed to skip\n{summary}"
    )
