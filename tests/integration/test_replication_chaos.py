"""Chaos: brokers are killed (-9) and paused (SIGSTOP) under an acks=all idempotent producer,
and no acknowledged record is lost, duplicated, reordered or invented.

One controller and three brokers as real processes; a topic of 3 partitions, replication
factor 3, ``min.insync.replicas=2``.  A confluent-kafka producer thread (``acks=all``,
``enable.idempotence``) writes unique values at a steady rate and records every send,
acknowledgement and failure in a JSONL history (``tests/history.py``).  Meanwhile each round
picks a partition's leader or one of its followers (alternately) and either kills it and
restarts it, or pauses it and resumes it, after longer than the broker session timeout (so
that it is fenced: its leaderships move and it leaves the ISRs); between rounds the cluster
heals (every broker unfenced, every ISR full again).  Then the producer
is flushed, a fresh consumer reads every partition from the beginning to its high watermark,
and ``check`` must find nothing wrong.  A failure prints the seed (``CHAOS_SEED=N`` replays the
same choice of victims) and the path of the history file.
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
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from history import Ack, Fail, HistoryWriter, Read, Send, check

from integration.cluster_process import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "chaos"
PARTITIONS = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
SESSION_TIMEOUT_MS = 3000
HEARTBEAT_MS = 500
EXTRA = {
    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "broker.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "replica.lag.time.max.ms": "5000",  # Kafka's default is 30 s: longer than this test's rounds
}
ROUNDS = 8  # leader kill, follower kill, leader pause, follower pause, twice
DOWN_S = SESSION_TIMEOUT_MS / 1000 + 1.5  # a victim is killed or stopped this long: fenced
STEADY_S = 1.5  # healthy production between rounds
RATE_PER_S = 200
BURST = 10
MIN_ACKED = 500
FIRST_ACK_TIMEOUT_S = 20.0
HEAL_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 60.0
READ_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Fault:
    round: int
    action: str  # kill | pause
    role: str  # leader | follower (of ``partition``)
    broker: int
    partition: int
    at_s: float
    healed_after_s: float  # the heal before this fault
    fenced: bool  # another broker saw the victim fenced while it was down

    def __str__(self) -> str:
        seen = "" if self.fenced else ", NEVER SEEN FENCED"
        return (
            f"round {self.round} at {self.at_s:.1f} s: {self.action} broker {self.broker}"
            f" ({self.role} of partition {self.partition}; healed in {self.healed_after_s:.1f} s"
            f" before{seen})"
        )


def wait_for(
    what: str, condition: Callable[[], Any], timeout_s: float, why: Callable[[], str]
) -> Any:
    """Poll ``condition`` until truthy; on timeout say what was awaited and ``why()``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if value := condition():
                return value
        except (AssertionError, OSError, KeyError, KafkaException):
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}\n{why()}")


# --- the producer ---------------------------------------------------------------------------


class ProducerThread(threading.Thread):
    """Sends ``RATE_PER_S`` unique values (partition ``i % PARTITIONS``) until ``finish``."""

    def __init__(self, bootstrap: str, history: HistoryWriter, run_id: str) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self.history = history
        self.run_id = run_id
        self.stopping = threading.Event()
        self.unflushed = -1
        self.fatal: str | None = None
        self.error: BaseException | None = None
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 45_000,
                "request.timeout.ms": 5000,
                "socket.timeout.ms": 5000,
                "retry.backoff.ms": 100,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
                "error_cb": self._on_error,
            }
        )

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal = str(err)

    def _on_delivery(self, i: int, err: KafkaError | None, msg: Message) -> None:
        now = time.monotonic()
        if err is None:
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None
            self.history.append(Ack(i, partition, offset, now))
        else:
            self.history.append(Fail(i, str(err), now))

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # re-raised by finish() in the test's thread
            self.error = exc
        finally:
            self.unflushed = self.producer.flush(FLUSH_TIMEOUT_S)

    def _produce(self) -> None:
        i = 0
        next_burst = time.monotonic()
        while not self.stopping.is_set() and self.fatal is None:
            for _ in range(BURST):
                self._send(i)
                i += 1
            self.producer.poll(0)
            next_burst += BURST / RATE_PER_S
            time.sleep(max(0.0, next_burst - time.monotonic()))

    def _send(self, i: int) -> None:
        value = f"{self.run_id}-{i:07d}"
        partition = i % PARTITIONS
        key = f"k{i % 12}"

        def delivered(err: KafkaError | None, msg: Message) -> None:
            self._on_delivery(i, err, msg)

        while True:
            try:
                self.producer.produce(TOPIC, value, key, partition, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: a partition has no leader yet
                if self.stopping.is_set():
                    return  # never sent: not in the history
                self.producer.poll(0.05)
        self.history.append(Send(i, "producer-0", value, key, partition, time.monotonic()))

    def finish(self) -> None:
        self.stopping.set()
        self.join(FLUSH_TIMEOUT_S + 30)
        assert not self.is_alive(), "the producer thread did not stop"
        if self.error is not None:
            raise self.error
        assert self.fatal is None, f"the idempotent producer hit a fatal error: {self.fatal}"
        assert self.unflushed == 0, f"{self.unflushed} records still queued after the flush"

    def acked(self) -> int:
        return sum(isinstance(e, Ack) for e in list(self.history.events))


# --- the cluster ----------------------------------------------------------------------------


def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 5000})


def create_topic(cluster: LocalCluster) -> None:
    client = admin(cluster)  # the handle must outlive its futures
    topic = NewTopic(
        TOPIC,
        PARTITIONS,
        REPLICATION_FACTOR,
        config={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)},
    )
    client.create_topics([topic], request_timeout=15)[TOPIC].result(timeout=20)


def partition_state(cluster: LocalCluster) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) as a client sees it."""
    md = admin(cluster).list_topics(TOPIC, timeout=5)
    return {p.id: (p.leader, p.replicas, p.isrs) for p in md.topics[TOPIC].partitions.values()}


def fenced_brokers(cluster: LocalCluster, ask: int | None = None) -> set[int]:
    """Fenced (or unregistered) brokers, as broker ``ask`` (default: any live one) sees them;
    a paused broker's REST API does not answer, so ask another one while it is stopped."""
    broker = cluster.brokers[ask] if ask is not None else cluster.any_broker()
    view = broker.get("/v1/cluster")
    known = {b["id"] for b in view["brokers"]}
    return {b["id"] for b in view["brokers"] if b["fenced"]} | (set(cluster.brokers) - known)


def healed(cluster: LocalCluster) -> bool:
    if not all(b.alive() for b in cluster.brokers.values()) or fenced_brokers(cluster):
        return False
    state = partition_state(cluster)
    return len(state) == PARTITIONS and all(
        leader >= 0 and len(replicas) == REPLICATION_FACTOR and sorted(isr) == sorted(replicas)
        for leader, replicas, isr in state.values()
    )


def describe(cluster: LocalCluster) -> str:
    parts = []
    for what, probe in (("fenced", fenced_brokers), ("partitions", partition_state)):
        try:
            parts.append(f"{what}: {probe(cluster)}")
        except Exception as exc:
            parts.append(f"{what}: unknown ({exc!r})")
    return "\n".join([*parts, cluster.logs()])


def wait_healed(cluster: LocalCluster) -> float:
    """Every broker up and unfenced, every partition led with its whole replica set in ISR."""
    start = time.monotonic()
    wait_for(
        "the cluster to heal (brokers unfenced, every ISR full)",
        lambda: healed(cluster),
        HEAL_TIMEOUT_S,
        lambda: describe(cluster),
    )
    return time.monotonic() - start


# --- faults ---------------------------------------------------------------------------------


def pick_victim(cluster: LocalCluster, partition: int, role: str, rng: random.Random) -> int:
    leader, replicas, _ = partition_state(cluster)[partition]
    if role == "leader":
        return leader
    followers = [b for b in replicas if b != leader]
    # with replication factor 1 (a local smoke run) there are none: any other broker will do
    return rng.choice(followers or sorted(b for b in cluster.brokers if b != leader))


def watch_fenced(cluster: LocalCluster, victim_id: int, seconds: float) -> bool:
    """Wait ``seconds``; whether another broker saw the victim fenced meanwhile."""
    witness = next(b for b in cluster.brokers if b != victim_id)
    fenced = False
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        with contextlib.suppress(AssertionError, OSError, KeyError):
            fenced = fenced or victim_id in fenced_brokers(cluster, witness)
        time.sleep(0.2)
    return fenced


def inject(cluster: LocalCluster, rng: random.Random, started: float) -> list[Fault]:
    """``ROUNDS`` faults, each after the cluster healed from the last one; a victim is down
    (or stopped) for longer than the session timeout, so that it is fenced and leaves the ISRs
    (and, a leader, its leaderships) before it comes back."""
    faults = []
    for r in range(ROUNDS):
        healed_after = wait_healed(cluster)
        time.sleep(STEADY_S)
        role = ("leader", "follower")[r % 2]
        action = ("kill", "pause")[(r // 2) % 2]
        partition = r % PARTITIONS
        victim_id = pick_victim(cluster, partition, role, rng)
        victim = cluster.brokers[victim_id]
        at = time.monotonic() - started
        print(f"round {r} at {at:.1f} s: {action} broker {victim_id} ({role} of p{partition})")
        if action == "kill":
            victim.kill()
            fenced = watch_fenced(cluster, victim_id, DOWN_S)
            victim.launch().wait_ready()
        else:
            victim.pause()
            try:
                fenced = watch_fenced(cluster, victim_id, DOWN_S)
            finally:
                victim.resume()
        faults.append(Fault(r, action, role, victim_id, partition, at, healed_after, fenced))
    return faults


# --- the final read -------------------------------------------------------------------------


def read_everything(cluster: LocalCluster, history: HistoryWriter) -> None:
    """A fresh consumer reads every partition from offset 0 up to its high watermark (an EOF
    at or past it), recording each record as a ``read`` event."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"chaos-final-{secrets.token_hex(4)}",  # assign() only: never joined
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
            "socket.timeout.ms": 5000,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        eof_at = dict.fromkeys(ends, -1)

        def done() -> bool:
            return all(eof_at[p] >= ends[p] for p in ends)

        deadline = time.monotonic() + READ_TIMEOUT_S
        while not done():
            assert time.monotonic() < deadline, (
                f"the final read did not reach the high watermarks {ends} within"
                f" {READ_TIMEOUT_S:g} s (EOF seen at {eof_at})\n{describe(cluster)}"
            )
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None
            if (err := msg.error()) is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    eof_at[partition] = offset
                continue
            value = msg.value()
            assert value is not None
            history.append(Read(partition, offset, value.decode(), time=time.monotonic()))
    finally:
        consumer.close()


# --- the test -------------------------------------------------------------------------------


def test_no_acknowledged_record_is_lost_across_kills_and_pauses(tmp_path: Path) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or secrets.randbits(32))
    rng = random.Random(seed)
    history_path = tmp_path / "history.jsonl"
    context = f"CHAOS_SEED={seed}; history in {history_path}"
    print(context)
    history = HistoryWriter(history_path)
    cluster = LocalCluster.create(tmp_path / "cluster", 1, 3, EXTRA).start()
    producer: ProducerThread | None = None
    started = time.monotonic()
    try:
        create_topic(cluster)
        wait_healed(cluster)
        producer = ProducerThread(cluster.bootstrap, history, f"{seed:08x}")
        producer.start()
        wait_for(
            "the first acknowledgement",
            producer.acked,
            FIRST_ACK_TIMEOUT_S,
            lambda: describe(cluster),
        )
        faults = inject(cluster, rng, started)
        wait_healed(cluster)
        time.sleep(STEADY_S)
        producer.finish()
        read_everything(cluster, history)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{context}") from None
    finally:
        if producer is not None and producer.is_alive():
            producer.stopping.set()
        history.close()
        cluster.kill_all()
    report = check(history.events)
    summary = "\n".join([context, report.describe(), "faults:", *map(str, faults)])
    print(summary)
    assert report.ok, summary
    assert report.summary.acked >= MIN_ACKED, summary
    assert len(faults) == ROUNDS, summary
    assert {(f.action, f.role) for f in faults} == {
        (a, r) for a in ("kill", "pause") for r in ("leader", "follower")
    }, summary
    unfenced = [str(f) for f in faults if not f.fenced]
    assert not unfenced, f"victims never seen fenced: {unfenced}\n{summary}"
