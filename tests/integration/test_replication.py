"""Partition replication end to end: real brokers, real clients we did not write.

Two clusters of real processes (one controller, three brokers each), shared by the tests of
this module on distinct topics:

* ``patient``: a long ``replica.lag.time.max.ms`` and broker session, so that a follower
  paused for a few seconds stays in the ISR (and registered): what consumers see and what
  acks=all waits for are then decided by the high watermark alone (visibility, acks=all
  timeouts, a follower ahead of its new leader);
* ``fast``: a lag time of one second and a session of four, so that ISRs shrink and dead
  brokers lose their leaderships within seconds (min.insync.replicas, failover under an
  idempotent producer, preferred and unclean elections, catch-up, epochs on the wire).

A test that pauses (SIGSTOP) or kills (-9) a broker does it through :class:`Faults`, which
resumes or restarts every victim on the way out and waits until the controller sees every
broker registered and unfenced again, so the next test starts from a healthy cluster.
Automatic leader rebalancing is off in both, so that only the tests move leaderships.

The oracles are confluent-kafka (librdkafka), kafka-python, aiokafka and kcat; where a test
needs exact epochs, sequence numbers or error codes it sends requests with the project's
codecs (``raw_client``).  Every wait is bounded and a failure prints the nodes' log tails.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    ElectionType,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kafka import KafkaProducer
from kafka.errors import NotEnoughReplicasError

from integration.clients import (
    Msg,
    assert_same_records,
    confluent_consumer,
    ends_of,
    expected,
    make_msgs,
    produce_aiokafka,
    produce_confluent,
    produce_kafka_python,
    read_aiokafka,
    read_confluent,
    read_kcat,
    watermarks,
)
from integration.cluster_process import LocalCluster, ServerProcess
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    FetchRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
)
from kafka_protocol.record_batch import SimpleRecord, build_batch, iter_batches
from kafka_protocol.types import TopicName

pytestmark = pytest.mark.integration

COMMON = {"broker.heartbeat.interval.ms": "500", "auto.leader.rebalance.enable": "false"}
PATIENT = {
    **COMMON,
    "broker.session.timeout.ms": "15000",
    "replica.lag.time.max.ms": "30000",
}
FAST = {
    **COMMON,
    "broker.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "1000",
    "log.retention.check.interval.ms": "500",
}
WAIT_S = 20.0  # any one awaited change of the cluster (an election, an ISR change, a restart)
HEAL_S = 30.0


# --- clusters ------------------------------------------------------------------------------------


def _start(root: Path, extra: dict[str, str]) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(root, 1, 3, extra)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill_all()


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from _start(Path(tmp_path_factory.mktemp("patient")), PATIENT)


@pytest.fixture(scope="module")
def fast(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from _start(Path(tmp_path_factory.mktemp("fast")), FAST)


@dataclass
class Target:
    """What the helpers of ``clients.py`` need of a node: a bootstrap list (often one broker,
    so that no client waits on a paused one) and logs to show when they fail."""

    bootstrap: str
    cluster: LocalCluster

    def log_tail(self, lines: int = 15) -> str:
        return self.cluster.logs()


def to(cluster: LocalCluster, *brokers: int) -> Target:
    chosen = brokers or tuple(b for b, n in cluster.brokers.items() if n.alive())
    return Target(",".join(cluster.brokers[b].address for b in chosen), cluster)


def wait_for(
    what: str, condition: Callable[[], Any], cluster: LocalCluster, timeout_s: float = WAIT_S
) -> Any:
    """Poll ``condition`` until truthy; on timeout say what was awaited, with the logs."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            if value := condition():
                return value
            last = value
        except (AssertionError, OSError, KeyError, StopIteration, KafkaException) as exc:
            last = exc
        time.sleep(0.1)
    raise AssertionError(
        f"timed out after {timeout_s:g} s waiting for {what} (last: {last!r})\n{cluster.logs()}"
    )


# --- topics and what each broker says of them ----------------------------------------------------


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000})


def create_topic(
    cluster: LocalCluster,
    name: str,
    *,
    partitions: int = 1,
    assignment: list[list[int]] | None = None,
    configs: dict[str, str] | None = None,
) -> None:
    """Replication factor 3 (every broker) unless ``assignment`` names the replicas."""
    if assignment is not None:
        topic = NewTopic(name, len(assignment), replica_assignment=assignment, config=configs or {})
    else:
        topic = NewTopic(name, partitions, len(cluster.brokers), config=configs or {})
    client = admin(cluster.bootstrap)  # the handle must outlive its future
    client.create_topics([topic], operation_timeout=15)[name].result(timeout=20)
    wanted = len(assignment) if assignment is not None else partitions
    wait_for(
        f"{name}: every partition led with a full ISR on every broker",
        lambda: all(full_and_led(b, name, wanted) for b in cluster.brokers.values()),
        cluster,
    )


def full_and_led(node: ServerProcess, topic: str, partitions: int) -> bool:
    view = partitions_of(node, topic)
    return len(view) == partitions and all(
        p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"]) for p in view.values()
    )


def set_topic_config(cluster: LocalCluster, topic: str, key: str, value: str) -> None:
    """IncrementalAlterConfigs SET, by confluent-kafka's AdminClient."""
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)],
    )
    client = admin(cluster.bootstrap)
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=15)


def partitions_of(node: ServerProcess, topic: str) -> dict[int, dict[str, Any]]:
    """partition -> this broker's REST view: the metadata image's leader, leader_epoch,
    replicas and isr, and this broker's own log_end_offset and high_watermark (None if it
    hosts no replica)."""
    return {p["partition"]: p for p in node.get(f"/v1/topics/{topic}")["partitions"]}


def partition(node: ServerProcess, topic: str, index: int = 0) -> dict[str, Any]:
    return partitions_of(node, topic)[index]


def view_where(
    node: ServerProcess, topic: str, wanted: Callable[[dict[str, Any]], bool], index: int = 0
) -> Callable[[], dict[str, Any] | None]:
    """A ``wait_for`` probe: the partition's view once ``wanted`` holds of it."""

    def probe() -> dict[str, Any] | None:
        view = partition(node, topic, index)
        return view if wanted(view) else None

    return probe


def roles(cluster: LocalCluster, topic: str, index: int = 0) -> tuple[int, list[int]]:
    """(leader, followers) as the leader itself sees them."""
    view = partition(cluster.any_broker(), topic, index)
    leader = view["leader"]
    return leader, [r for r in view["replicas"] if r != leader]


def metric_values(node: ServerProcess, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """``GET /metrics``: each sample of ``name`` by its sorted labels."""
    with urllib.request.urlopen(node.admin + "/metrics", timeout=5) as response:
        text = response.read().decode()
    out = {}
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, value = line.rsplit(" ", 1)
        labels: tuple[tuple[str, str], ...] = ()
        if "{" in head:
            body = head[head.index("{") + 1 : head.rindex("}")]
            pairs = (kv.split("=", 1) for kv in body.split(",") if kv)
            labels = tuple(sorted((k, v.strip('"')) for k, v in pairs))
        out[labels] = float(value)
    return out


def high_watermark_metrics(node: ServerProcess, topic: str) -> dict[int, int]:
    samples = metric_values(node, "kafka_high_watermark")
    return {
        int(labels["partition"]): int(value)
        for labels, value in ((dict(k), v) for k, v in samples.items())
        if labels.get("topic") == topic
    }


def log_bytes(node: ServerProcess, topic: str, index: int) -> bytes:
    """The partition's segment files on this broker's disk, concatenated in offset order."""
    directory = Path(node.properties["log.dirs"]) / f"{topic}-{index}"
    return b"".join(f.read_bytes() for f in sorted(directory.glob("*.log")))


def batches_from(node: ServerProcess, topic: str, index: int, start: int) -> list[bytes]:
    """This broker's batches of the partition from offset ``start`` on, each as stored."""
    data = log_bytes(node, topic, index)
    return [bytes(b.buf[: b.size_bytes]) for b in iter_batches(data) if b.base_offset >= start]


def log_text(node: ServerProcess) -> str:
    try:
        return node.log_path.read_text(errors="replace")
    except OSError:
        return ""


# --- faults --------------------------------------------------------------------------------------


@dataclass
class Faults:
    """Pauses and kills brokers, and undoes it all in :meth:`heal`."""

    cluster: LocalCluster
    paused: set[int] = field(default_factory=set)
    killed: set[int] = field(default_factory=set)

    def pause(self, broker: int) -> None:
        self.cluster.brokers[broker].pause()
        self.paused.add(broker)

    def resume(self, broker: int) -> None:
        self.cluster.brokers[broker].resume()
        self.paused.discard(broker)

    def kill(self, broker: int) -> None:
        self.cluster.brokers[broker].kill()
        self.killed.add(broker)

    def restart(self, broker: int) -> None:
        self.cluster.brokers[broker].launch().wait_ready()
        self.killed.discard(broker)

    def heal(self) -> None:
        for b in sorted(self.paused):
            self.resume(b)
        for b in sorted(self.killed):
            self.restart(b)
        wait_for("every broker registered and unfenced", self.all_unfenced, self.cluster, HEAL_S)

    def all_unfenced(self) -> bool:
        controller = next(iter(self.cluster.controllers.values()))
        brokers = controller.get("/v1/cluster")["brokers"]
        unfenced = {b["id"] for b in brokers if not b["fenced"]}
        return unfenced == set(self.cluster.brokers)


@contextlib.contextmanager
def faults(cluster: LocalCluster) -> Iterator[Faults]:
    f = Faults(cluster)
    try:
        yield f
    finally:
        f.heal()


# --- raw requests with exact epochs --------------------------------------------------------------


def _raw(node: ServerProcess, request: Any, version: int) -> Any:
    conn = RawConnection(node.address, timeout_s=20)
    try:
        return conn.request(request, version)
    finally:
        conn.close()


def raw_produce(
    node: ServerProcess, topic: str, values: list[bytes], acks: int, timeout_ms: int = 5000
) -> tuple[ErrorCode, int]:
    """One batch of ``values`` by Produce v9: (error, base offset)."""
    batch = build_batch([SimpleRecord(v) for v in values], now_ms=int(time.time() * 1000))
    return raw_produce_batch(node, topic, batch, acks, timeout_ms)


def raw_produce_batch(
    node: ServerProcess, topic: str, batch: bytes, acks: int, timeout_ms: int = 5000
) -> tuple[ErrorCode, int]:
    response = _raw(node, produce_request(topic, batch, acks, timeout_ms), 9)
    answer = response.responses[0].partition_responses[0]
    return ErrorCode.from_code(answer.error_code), int(answer.base_offset)


def produce_request(topic: str, batch: bytes, acks: int, timeout_ms: int) -> ProduceRequest:
    return ProduceRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TopicName(topic),
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)],
            )
        ],
    )


def raw_producer_id(node: ServerProcess) -> tuple[int, int]:
    """InitProducerId v4 for an idempotent producer: (producer id, producer epoch)."""
    answer = _raw(node, InitProducerIdRequest(transactional_id=None), 4)
    assert answer.error_code == ErrorCode.NONE, answer
    return int(answer.producer_id), int(answer.producer_epoch)


def raw_fetch(
    node: ServerProcess, topic: str, epoch: int, replica_id: int = -1, version: int = 12
) -> tuple[ErrorCode, int, int]:
    """Fetch (v12: followers serve consumers, KIP-392; v10: only the leader) from offset 0:
    (error, high watermark, bytes of records)."""
    request = FetchRequest(
        replica_id=replica_id,
        max_wait_ms=0,
        topics=[
            FetchRequest.FetchTopic(
                topic=TopicName(topic),
                partitions=[
                    FetchRequest.FetchPartition(
                        current_leader_epoch=epoch, fetch_offset=0, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )
    answer = _raw(node, request, version).responses[0].partitions[0]
    records = answer.records or b""
    return ErrorCode.from_code(answer.error_code), int(answer.high_watermark), len(records)


def raw_list_offsets(node: ServerProcess, topic: str, epoch: int) -> tuple[ErrorCode, int, int]:
    """ListOffsets v7, latest: (error, offset, leader epoch)."""
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=TopicName(topic),
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(
                        current_leader_epoch=epoch, timestamp=-1
                    )
                ],
            )
        ],
    )
    answer = _raw(node, request, 7).topics[0].partitions[0]
    return ErrorCode.from_code(answer.error_code), int(answer.offset), int(answer.leader_epoch)


def raw_epoch_end(
    node: ServerProcess, topic: str, current_epoch: int, epoch: int
) -> tuple[ErrorCode, int, int]:
    """OffsetForLeaderEpoch v4 as a consumer asks it: (error, leader epoch, end offset)."""
    request = OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
                topic=TopicName(topic),
                partitions=[
                    OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                        current_leader_epoch=current_epoch, leader_epoch=epoch
                    )
                ],
            )
        ],
    )
    answer = _raw(node, request, 4).topics[0].partitions[0]
    return ErrorCode.from_code(answer.error_code), int(answer.leader_epoch), int(answer.end_offset)


def kraft_elect_leaders(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "kraft.cli", "elect-leaders"]
    return subprocess.run(
        [*command, "--bootstrap-server", cluster.bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
        check=False,
    )


def first_difference(got: list[Any], want: list[Any]) -> int | None:
    for i, (x, y) in enumerate(zip(got, want, strict=False)):
        if x != y:
            return i
    return None if len(got) == len(want) else min(len(got), len(want))


def leader_epochs_read(target: Target, topic: str, count: int) -> list[int | None]:
    """The leader epoch confluent-kafka reports for each of the first ``count`` records."""
    consumer = confluent_consumer(target)
    epochs: list[int | None] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + WAIT_S
        while len(epochs) < count and time.monotonic() < deadline:
            for msg in consumer.consume(100, timeout=0.5):
                assert msg.error() is None, f"consumer: {msg.error()}"
                epochs.append(msg.leader_epoch())
    finally:
        consumer.close()
    return epochs


# --- producers whose every outcome is kept -------------------------------------------------------


def deliver_one(bootstrap: str, topic: str, value: bytes, **conf: Any) -> KafkaError | None:
    """Produce one record with confluent-kafka; the delivery error (None: delivered)."""
    producer = Producer({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000, **conf})
    outcome: list[KafkaError | None] = []
    producer.produce(topic, value, partition=0, on_delivery=lambda e, _m: outcome.append(e))
    left = producer.flush(30)
    assert left == 0 and len(outcome) == 1, f"no delivery report for {value!r} within 30 s"
    return outcome[0]


def error_name(error: KafkaError | None) -> str:
    return "NONE" if error is None else f"{error.name()} ({error.code()}): {error.str()}"


class FailoverProducer(threading.Thread):
    """confluent-kafka, acks=all and idempotent, writing unique values round-robin over the
    partitions at a steady rate until :meth:`finish`; every delivery report is kept."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(name="failover-producer", daemon=True)
        self.topic, self.partitions = topic, partitions
        self.run_id = secrets.token_hex(4)
        self.sent: dict[int, list[str]] = {p: [] for p in range(partitions)}
        self.acked: dict[str, tuple[int, int]] = {}  # value -> (partition, offset)
        self.failed: dict[str, str] = {}
        self.fatal: str | None = None
        self.stopping = threading.Event()
        self.unflushed = -1
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 60_000,
                "request.timeout.ms": 5000,
                "socket.timeout.ms": 5000,
                "retry.backoff.ms": 100,
                "reconnect.backoff.max.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
                "error_cb": self._on_error,
            }
        )

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal = error_name(err)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        value = (msg.value() or b"").decode()
        if err is None:
            self.acked[value] = (msg.partition() or 0, msg.offset() or 0)
        else:
            self.failed[value] = error_name(err)

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set() and self.fatal is None:
            for _ in range(5):
                value = f"{self.run_id}-{i:06d}"
                p = i % self.partitions
                while True:
                    try:
                        self.producer.produce(
                            self.topic, value.encode(), partition=p, on_delivery=self._on_delivery
                        )
                        break
                    except BufferError:
                        self.producer.poll(0.05)
                self.sent[p].append(value)
                i += 1
            self.producer.poll(0)
            time.sleep(0.05)  # about 100 records a second
        self.unflushed = self.producer.flush(60)

    def finish(self) -> None:
        self.stopping.set()
        self.join(90)
        assert not self.is_alive(), "the producer thread did not stop"
        assert self.fatal is None, f"the idempotent producer hit a fatal error: {self.fatal}"
        assert self.unflushed == 0, f"{self.unflushed} records still queued after the flush"


class TailingConsumer(threading.Thread):
    """A confluent consumer assigned to every partition from offset 0, reading while the
    cluster fails over; it keeps (partition, offset, value) in arrival order."""

    def __init__(self, target: Target, topic: str, partitions: int) -> None:
        super().__init__(name="tailing-consumer", daemon=True)
        self.consumer = confluent_consumer(target, **{"topic.metadata.refresh.interval.ms": 1000})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.seen: list[tuple[int, int, str]] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def __enter__(self) -> TailingConsumer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self.join(10)

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                msg = self.consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error() is not None:
                    self.errors.append(error_name(msg.error()))
                    continue
                value = (msg.value() or b"").decode()
                self.seen.append((msg.partition() or 0, msg.offset() or 0, value))
        finally:
            self.consumer.close()


# --- steady replication --------------------------------------------------------------------------


def test_acks_all_records_are_on_every_replica_and_every_client_reads_them(
    patient: LocalCluster,
) -> None:
    """kafka-python writes with acks=all (plain and zstd batches): on acknowledgement every
    in-sync replica already holds the records; each broker ends up with the same high
    watermark (REST and ``/metrics``) and byte-identical segment files; aiokafka and kcat read
    exactly what was written from every partition; the metadata ISR is every broker."""
    topic = "replicated"
    create_topic(patient, topic, partitions=3, configs={"min.insync.replicas": "2"})
    target = to(patient)
    plain = make_msgs("plain", 150, 3, null_headers=False)
    packed = make_msgs("zstd", 150, 3, null_headers=False)
    acked = produce_kafka_python(target, topic, plain, acks="all")
    acked += produce_kafka_python(target, topic, packed, acks="all", compression_type="zstd")
    want = expected(plain + packed)
    assert acked == [(r.partition, r.offset) for r in want], "kafka-python's acknowledged offsets"
    ends = ends_of(want)
    assert ends == {0: 100, 1: 100, 2: 100}

    brokers = sorted(patient.brokers)
    for b in brokers:  # acks=all: every ISR member had appended them before the answer
        view = partitions_of(patient.brokers[b], topic)
        for p, end in ends.items():
            assert sorted(view[p]["isr"]) == brokers, f"p{p} ISR shrank: {view[p]}"
            assert view[p]["log_end_offset"] == end, (
                f"broker {b} holds {view[p]['log_end_offset']} records of p{p} after an acks=all"
                f" acknowledgement of {end}\n{patient.logs()}"
            )
    client_view = admin(patient.bootstrap).list_topics(topic, timeout=10).topics[topic]
    for p, meta in client_view.partitions.items():
        assert sorted(meta.isrs) == brokers == sorted(meta.replicas), f"p{p}: {meta}"

    wait_for(
        f"every broker's kafka_high_watermark to be {ends}",
        lambda: all(high_watermark_metrics(n, topic) == ends for n in patient.brokers.values()),
        patient,
    )
    for b in brokers:
        view = partitions_of(patient.brokers[b], topic)
        assert {p: view[p]["high_watermark"] for p in ends} == ends, f"broker {b}: {view}"
        under = metric_values(patient.brokers[b], "kafka_under_replicated_partitions")
        assert set(under.values()) == {0.0}, f"broker {b} under-replicated: {under}"
    for p in ends:
        leader = client_view.partitions[p].leader
        reference = log_bytes(patient.brokers[leader], topic, p)
        assert len(reference) > 0
        for b in brokers:
            assert log_bytes(patient.brokers[b], topic, p) == reference, (
                f"broker {b}'s log of p{p} differs from the leader {leader}'s"
            )

    assert_same_records(want, read_aiokafka(target, topic, ends), "aiokafka")
    assert_same_records(want, read_kcat(target, topic), "kcat -C -e")
    assert watermarks(target, topic, ends) == {p: (0, end) for p, end in ends.items()}

    # A partition added later is replicated like the first ones.
    client = admin(patient.bootstrap)
    client.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=20)
    wait_for(
        f"{topic}-3 led with a full ISR on every broker",
        lambda: all(full_and_led(n, topic, 4) for n in patient.brokers.values()),
        patient,
    )
    added = [Msg(3, f"k{i}".encode(), f"added-{i}".encode()) for i in range(20)]
    assert produce_aiokafka(target, topic, added, acks="all") == [(3, i) for i in range(20)]
    for b in brokers:
        assert partition(patient.brokers[b], topic, 3)["log_end_offset"] == 20, f"broker {b}"

    # Deleting the topic deletes every replica.
    client.delete_topics([topic])[topic].result(timeout=20)
    every = [
        Path(n.properties["log.dirs"]) / f"{topic}-{p}"
        for n in patient.brokers.values()
        for p in range(4)
    ]
    wait_for(
        "every replica's directory removed",
        lambda: not any(d.exists() for d in every),
        patient,
    )


# --- the high watermark bounds what consumers see ------------------------------------------------


def test_consumers_never_read_above_the_high_watermark(patient: LocalCluster) -> None:
    """Both followers stopped: acks=1 records are written on the leader only.  ListOffsets,
    a polling confluent consumer and kcat all stop at the high watermark while the leader's
    log end offset is past it; once the followers resume, the records become visible and the
    waiting consumer gets them."""
    topic = "hw-visibility"
    create_topic(patient, topic)
    leader_id, followers = roles(patient, topic)
    leader = patient.brokers[leader_id]
    target = to(patient, leader_id)  # a paused broker would never answer a client
    committed = [Msg(0, b"c", f"committed-{i}".encode()) for i in range(5)]
    reports = produce_confluent(target, topic, committed, acks="all")
    assert [(r.offset, r.error) for r in reports] == [(i, None) for i in range(5)]

    consumer = confluent_consumer(target)
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[tuple[int, bytes | None]] = []

    def poll_for(seconds: float, until: int | None = None) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and (until is None or len(seen) < until):
            for msg in consumer.consume(100, timeout=0.2):
                assert msg.error() is None, f"consumer: {msg.error()}"
                seen.append((msg.offset() or 0, msg.value()))

    try:
        poll_for(WAIT_S, until=5)
        assert [o for o, _ in seen] == [0, 1, 2, 3, 4]
        with faults(patient) as f:
            for b in followers:
                f.pause(b)
            uncommitted = [Msg(0, b"u", f"uncommitted-{i}".encode()) for i in range(7)]
            reports = produce_confluent(target, topic, uncommitted, acks=1)
            assert [(r.offset, r.error) for r in reports] == [(5 + i, None) for i in range(7)]
            view = partition(leader, topic)
            assert (view["log_end_offset"], view["high_watermark"]) == (12, 5), view
            assert sorted(view["isr"]) == sorted(patient.brokers), f"the ISR shrank: {view}"
            assert watermarks(target, topic, [0]) == {0: (0, 5)}, "ListOffsets latest"
            poll_for(2.0)
            assert [o for o, _ in seen] == [0, 1, 2, 3, 4], "a consumer read past the HW"
            kcat_offsets = [r.offset for r in read_kcat(target, topic)]
            assert kcat_offsets == [0, 1, 2, 3, 4], "kcat read past the high watermark"
            assert partition(leader, topic)["high_watermark"] == 5, "the HW moved while paused"
            for b in followers:
                f.resume(b)
            poll_for(WAIT_S, until=12)
        assert seen == [(i, m.value) for i, m in enumerate(committed + uncommitted)], seen
        assert watermarks(target, topic, [0]) == {0: (0, 12)}
    finally:
        consumer.close()


# --- min.insync.replicas -------------------------------------------------------------------------


def test_min_insync_replicas_guards_acks_all(fast: LocalCluster) -> None:
    """min.insync.replicas=3 of 3.  A killed follower falls out of the ISR after the lag time
    (before its session expires): an acks=all batch already waiting answers
    NOT_ENOUGH_REPLICAS_AFTER_APPEND (it is written and committed), new acks=all batches get
    NOT_ENOUGH_REPLICAS from confluent-kafka, kafka-python and the wire without being
    appended, acks=1 still works, lowering min.insync.replicas at runtime lets acks=all in
    and raising it shuts it out again; once the restarted follower is back in the ISR,
    acks=all works again.  (Killed rather than paused: kafka-python refreshes metadata from
    any known broker, and a paused one would hold it for a whole request timeout.)"""
    topic = "min-insync"
    create_topic(fast, topic, configs={"min.insync.replicas": "3"})
    leader_id, (lagging, _) = roles(fast, topic)
    leader = fast.brokers[leader_id]
    target = to(fast, leader_id)
    error = deliver_one(target.bootstrap, topic, b"full-isr", acks="all")
    assert error is None, f"acks=all with a full ISR: {error_name(error)}\n{fast.logs()}"

    with faults(fast) as f:
        f.kill(lagging)
        started = time.monotonic()
        error_code, _ = raw_produce(leader, topic, [b"waiting"], acks=-1, timeout_ms=15_000)
        waited = time.monotonic() - started
        assert error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, (
            f"an acks=all batch waiting while the ISR shrank below min.insync.replicas got"
            f" {error_code.name} after {waited:.1f} s\n{fast.logs()}"
        )
        view = wait_for(
            f"the ISR to drop broker {lagging}",
            view_where(leader, topic, lambda v: lagging not in v["isr"]),
            fast,
        )
        assert f"shrinking isr partition={topic}-0" in log_text(leader), (
            "the ISR shrank, but not by the leader's lag check\n" + leader.log_tail()
        )
        assert view["high_watermark"] == view["log_end_offset"] == 2, view  # committed anyway
        under = metric_values(leader, "kafka_under_replicated_partitions")
        assert under[()] >= 1, f"the leader's kafka_under_replicated_partitions: {under}"

        error = deliver_one(target.bootstrap, topic, b"refused", acks="all", retries=0)
        assert error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS, (
            f"confluent-kafka acks=all with ISR {view['isr']}: {error_name(error)}"
        )
        producer = KafkaProducer(
            bootstrap_servers=target.bootstrap,
            acks="all",
            retries=0,
            enable_idempotence=False,
            request_timeout_ms=10_000,
        )
        try:
            with pytest.raises(NotEnoughReplicasError):
                producer.send(topic, b"refused too", partition=0).get(timeout=15)
        finally:
            producer.close(5)
        error_code, _ = raw_produce(leader, topic, [b"refused as well"], acks=-1)
        assert error_code == ErrorCode.NOT_ENOUGH_REPLICAS, error_code.name
        assert partition(leader, topic)["log_end_offset"] == 2, "a refused batch was appended"

        error = deliver_one(target.bootstrap, topic, b"acks-1", acks=1)
        assert error is None, f"acks=1 with a short ISR: {error_name(error)}"

        # A topic config: the leader applies a change as soon as its metadata has it.  Refused
        # batches are not appended, so the one accepted lands at offset 3.
        set_topic_config(fast, topic, "min.insync.replicas", "2")
        wait_for(
            "acks=all accepted with min.insync.replicas=2",
            lambda: raw_produce(leader, topic, [b"min-2"], acks=-1) == (ErrorCode.NONE, 3),
            fast,
        )
        set_topic_config(fast, topic, "min.insync.replicas", "3")
        wait_for(  # until the change arrives, probes are accepted (and read back below)
            "acks=all refused again with min.insync.replicas=3",
            lambda: (
                raw_produce(leader, topic, [b"probe"], acks=-1)[0] == ErrorCode.NOT_ENOUGH_REPLICAS
            ),
            fast,
        )

        f.restart(lagging)
        wait_for(
            f"broker {lagging} back in the ISR",
            lambda: sorted(partition(leader, topic)["isr"]) == sorted(fast.brokers),
            fast,
        )
        assert f"expanding isr partition={topic}-0" in log_text(leader), leader.log_tail()
    error = deliver_one(target.bootstrap, topic, b"full-isr-again", acks="all")
    assert error is None, f"acks=all after the ISR expanded: {error_name(error)}"
    end = partition(leader, topic)["high_watermark"]
    values = [r.value for r in read_confluent(target, topic, {0: end}) if r.value != b"probe"]
    assert values == [b"full-isr", b"waiting", b"acks-1", b"min-2", b"full-isr-again"], values


# --- acks=all bounded by the request's timeout ---------------------------------------------------


def test_acks_all_times_out_while_a_follower_is_stopped(patient: LocalCluster) -> None:
    """A follower stopped but still in the ISR (long lag time): acks=all produces answer
    REQUEST_TIMED_OUT after the request's timeout, not sooner and not never (on the wire, and
    as confluent-kafka's delivery error); the batches stay written and commit once the
    follower resumes, and the leader serves acks=all at once again."""
    topic = "acks-all-timeout"
    create_topic(patient, topic)
    leader_id, (stopped, _) = roles(patient, topic)
    leader = patient.brokers[leader_id]
    target = to(patient, leader_id)
    with faults(patient) as f:
        f.pause(stopped)
        started = time.monotonic()
        error_code, _ = raw_produce(leader, topic, [b"slow-1"], acks=-1, timeout_ms=1000)
        waited = time.monotonic() - started
        assert error_code == ErrorCode.REQUEST_TIMED_OUT, error_code.name
        assert 0.9 <= waited < 5, f"answered after {waited:.2f} s for a 1000 ms timeout"
        error = deliver_one(
            target.bootstrap,
            topic,
            b"slow-2",
            acks="all",
            retries=0,
            **{"request.timeout.ms": 1500, "message.timeout.ms": 10_000},
        )
        assert error is not None and error.code() == KafkaError.REQUEST_TIMED_OUT, (
            f"confluent-kafka's delivery report: {error_name(error)}"
        )
        view = partition(leader, topic)
        assert (view["log_end_offset"], view["high_watermark"]) == (2, 0), view
        assert sorted(view["isr"]) == sorted(patient.brokers), f"the ISR shrank: {view}"
        f.resume(stopped)
    wait_for(
        "the timed-out batches to commit",
        lambda: partition(leader, topic)["high_watermark"] == 2,
        patient,
    )
    started = time.monotonic()
    assert produce_kafka_python(target, topic, [Msg(0, None, b"fast")], acks="all") == [(0, 2)]
    assert time.monotonic() - started < 5, "acks=all stayed slow after the follower resumed"
    values = [r.value for r in read_confluent(target, topic, {0: 3})]
    assert values == [b"slow-1", b"slow-2", b"fast"], values


# --- a follower ahead of the new leader (KIP-101) ------------------------------------------------


def test_a_follower_ahead_of_the_new_leader_truncates_to_it(patient: LocalCluster) -> None:
    """KIP-101.  Replicas [a, b, c], all in the ISR: b is stopped while a takes two acks=1
    records that c copies (uncommitted: b has not fetched them).  a shuts down; b, first in
    the replica order, leads in a new epoch with the shorter log.  c, ahead of its new leader,
    must cut its two records (OffsetForLeaderEpoch: epoch 0 ends where b's log ends) before
    fetching b's own record at the same offset; an acks=all produce to b completes only once
    it has.  The returning a truncates the same way: all three logs end up byte-identical."""
    topic = "ahead-of-leader"
    a, b, c = sorted(patient.brokers)
    create_topic(patient, topic, assignment=[[a, b, c]])
    old_leader, new_leader, ahead = (patient.brokers[x] for x in (a, b, c))
    assert raw_produce(old_leader, topic, [b"r0", b"r1", b"r2"], acks=-1) == (ErrorCode.NONE, 0)
    with faults(patient) as f:
        f.pause(b)
        time.sleep(1.0)  # let a answer b's parked fetch (empty) before the records below
        assert raw_produce(old_leader, topic, [b"a-3", b"a-4"], acks=1) == (ErrorCode.NONE, 3)
        wait_for(
            "c to copy a's records", lambda: partition(ahead, topic)["log_end_offset"] == 5, patient
        )
        view = partition(old_leader, topic)
        assert (view["high_watermark"], sorted(view["isr"])) == (3, [a, b, c]), view
        old_leader.stop()  # a controlled shutdown: the controller moves leadership at once
        f.killed.add(a)
        view = wait_for(
            "a new leader", view_where(ahead, topic, lambda v: v["leader"] != a), patient
        )
        assert view["leader"] == b, f"expected b (first ISR member in replica order): {view}"
        f.resume(b)
        wait_for(
            "b to take an acks=all record",
            lambda: raw_produce(new_leader, topic, [b"b-3"], acks=-1) == (ErrorCode.NONE, 3),
            patient,
        )
        assert partition(ahead, topic)["log_end_offset"] == 4, "c did not truncate to b's log"
        assert log_bytes(ahead, topic, 0) == log_bytes(new_leader, topic, 0)
        f.restart(a)
        wait_for(
            "every replica in the ISR",
            lambda: sorted(partition(ahead, topic)["isr"]) == [a, b, c],
            patient,
        )
    reference = log_bytes(new_leader, topic, 0)
    for x, node in patient.brokers.items():
        assert log_bytes(node, topic, 0) == reference, f"broker {x}'s log differs from b's"
    values = [r.value for r in read_kcat(to(patient), topic)]
    assert values == [b"r0", b"r1", b"r2", b"b-3"], values


# --- leader failover under an idempotent producer ------------------------------------------------


def test_leader_kill_restart_and_preferred_election_lose_nothing(fast: LocalCluster) -> None:
    """An idempotent acks=all producer and a tailing consumer run while partition 0's leader
    is killed (-9): another ISR member takes over, the producer goes on; the old leader
    restarts, rejoins the ISR, and ``kraft elect-leaders --election-type preferred`` gives it
    back its leadership.  Every record was acknowledged, once, at dense offsets in send order,
    and the consumer that read throughout saw exactly the final log."""
    topic = "failover"
    a, b, c = sorted(fast.brokers)
    create_topic(fast, topic, assignment=[[a, b, c], [b, c, a]])
    producer = FailoverProducer(fast.bootstrap, topic, 2)
    with TailingConsumer(to(fast), topic, 2) as consumer:
        producer.start()
        try:
            _fail_over_and_back(fast, topic, producer)
        finally:
            producer.finish()
        assert not producer.failed, f"failed deliveries: {list(producer.failed.items())[:5]}"
        ends = {p: len(values) for p, values in producer.sent.items()}
        final = read_confluent(to(fast), topic, ends)
        wait_for(
            "the tailing consumer to reach the end",
            lambda: len(consumer.seen) >= sum(ends.values()),
            fast,
        )
    for p, values in producer.sent.items():
        got = [(r.offset, (r.value or b"").decode()) for r in final if r.partition == p]
        want = list(enumerate(values))
        assert got == want, (
            f"p{p}: the log is not the sent values once each in order at dense offsets:"
            f" {len(got)} records for {len(values)} sent; first difference at index"
            f" {first_difference(got, want)}"
        )
        for i, value in enumerate(values):
            assert producer.acked[value] == (p, i), (value, producer.acked[value])
    read = sorted((r.partition, r.offset, (r.value or b"").decode()) for r in final)
    assert sorted(consumer.seen) == read, (
        f"the consumer reading throughout saw {len(consumer.seen)} records, the final log has"
        f" {len(read)}; first difference at {first_difference(sorted(consumer.seen), read)};"
        f" consumer errors: {consumer.errors[:5]}"
    )


def _fail_over_and_back(fast: LocalCluster, topic: str, producer: FailoverProducer) -> None:
    """Kill partition 0's leader a, restart it, and give it back its leadership."""
    a, b, c = sorted(fast.brokers)
    observer = fast.brokers[c]
    epoch = partition(observer, topic, 0)["leader_epoch"]
    wait_for("100 acknowledgements", lambda: len(producer.acked) >= 100, fast)
    with faults(fast) as f:
        f.kill(a)
        view = wait_for(
            f"a new leader of {topic}-0",
            view_where(observer, topic, lambda v: v["leader"] in (b, c)),
            fast,
        )
        assert view["leader_epoch"] > epoch and a not in view["isr"], view
        acked = len(producer.acked)
        wait_for(
            "the producer to go on with the new leader",
            lambda: len(producer.acked) >= acked + 100,
            fast,
        )
        f.restart(a)
        wait_for(
            f"broker {a} back in both ISRs",
            lambda: all(a in p["isr"] for p in partitions_of(observer, topic).values()),
            fast,
        )
    assert partition(observer, topic, 0)["leader"] != a, "leadership moved back by itself"
    election = kraft_elect_leaders(
        fast, "--election-type", "preferred", "--topic", topic, "--partition", "0"
    )
    assert (election.returncode, election.stdout) == (0, f"{topic}-0: leader elected\n"), (
        f"kraft elect-leaders: {election.returncode}\n{election.stdout}{election.stderr}"
    )
    view = wait_for(
        f"broker {a} leading {topic}-0 again",
        view_where(observer, topic, lambda v: v["leader"] == a),
        fast,
    )
    assert view["leader_epoch"] >= epoch + 2, view
    acked = len(producer.acked)
    wait_for("acknowledgements after the election", lambda: len(producer.acked) > acked, fast)


# --- idempotent producer state on every new leader -----------------------------------------------


def test_idempotent_retries_are_deduplicated_by_every_new_leader(fast: LocalCluster) -> None:
    """A batch acknowledged (acks=all) by one leader and retried with the same producer id,
    epoch and sequence to the next leader gets its original offsets and is not appended
    again, whether that leader learned the producer as a follower or, restarted, rebuilt it
    from its log; the next sequence is accepted and a gap is refused."""
    topic = "idempotent"
    a, b, c = sorted(fast.brokers)
    create_topic(fast, topic, assignment=[[a, b]])
    first_leader, second_leader = fast.brokers[a], fast.brokers[b]
    observer = fast.brokers[c]
    producer_id, producer_epoch = raw_producer_id(observer)

    def batch(sequence: int, count: int) -> bytes:
        return build_batch(
            [SimpleRecord(f"s{sequence + i}".encode()) for i in range(count)],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=sequence,
            now_ms=int(time.time() * 1000),
        )

    first, second, third = batch(0, 3), batch(3, 2), batch(5, 1)
    ok = ErrorCode.NONE
    assert raw_produce_batch(first_leader, topic, first, acks=-1) == (ok, 0)
    assert raw_produce_batch(first_leader, topic, second, acks=-1) == (ok, 3)
    assert raw_produce_batch(first_leader, topic, second, acks=-1) == (ok, 3), "same leader"
    with faults(fast) as f:
        first_leader.stop()  # a controlled shutdown: b leads at once
        f.killed.add(a)
        wait_for(
            "b to answer the retry of an acknowledged batch with its offset",
            lambda: raw_produce_batch(second_leader, topic, second, acks=1) == (ok, 3),
            fast,
        )
        assert raw_produce_batch(second_leader, topic, first, acks=1) == (ok, 0)
        assert partition(second_leader, topic)["log_end_offset"] == 5, "a retry was appended"
        assert raw_produce_batch(second_leader, topic, third, acks=1) == (ok, 5)
        gap = raw_produce_batch(second_leader, topic, batch(9, 1), acks=1)
        assert gap[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, gap
        f.restart(a)
        wait_for(
            "a back in the ISR",
            lambda: sorted(partition(observer, topic)["isr"]) == [a, b],
            fast,
        )
    client = admin(fast.bootstrap)
    outcome = client.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)])
    assert list(outcome.result(timeout=15).values()) == [None]
    wait_for(
        "the restarted a, leading again, to deduplicate the retry of the last batch",
        lambda: raw_produce_batch(first_leader, topic, third, acks=-1) == (ok, 5),
        fast,
    )
    assert raw_produce_batch(first_leader, topic, second, acks=-1) == (ok, 3)
    assert partition(first_leader, topic)["log_end_offset"] == 6, "a retry was appended"
    values = [r.value for r in read_kcat(to(fast), topic)]
    assert values == [f"s{i}".encode() for i in range(6)], values


# --- a follower catching up megabytes ------------------------------------------------------------


def test_a_restarted_follower_catches_up_megabytes_and_rejoins_the_isr(fast: LocalCluster) -> None:
    """A follower killed while 8 MB arrive (acks=all goes on once the ISR has shrunk)
    restarts, fetches it all back over many fetches of at most 1 MiB, rejoins the ISR, and
    then holds the leader's log byte for byte; every broker reports the same high watermark."""
    topic = "catch-up"
    create_topic(fast, topic)
    leader_id, (behind, _) = roles(fast, topic)
    count, size = 4000, 2000
    with faults(fast) as f:
        f.kill(behind)
        msgs = [Msg(0, None, os.urandom(size)) for _ in range(count)]
        reports = produce_confluent(to(fast), topic, msgs, acks="all", linger_ms=20)
        errors = [r.error for r in reports if r.error is not None]
        assert not errors and reports[-1].offset == count - 1, errors[:3]
        leader = fast.brokers[leader_id]
        view = wait_for(
            f"the ISR without broker {behind}",
            view_where(leader, topic, lambda v: behind not in v["isr"]),
            fast,
        )
        assert view["high_watermark"] == count, view
        started = time.monotonic()
        f.restart(behind)
        wait_for(
            f"broker {behind} back in the ISR",
            lambda: behind in partition(leader, topic)["isr"],
            fast,
            timeout_s=30,
        )
        caught_up_s = time.monotonic() - started
    print(f"broker {behind} caught up {count * size >> 20} MiB in {caught_up_s:.1f} s")
    reference = log_bytes(leader, topic, 0)
    assert len(reference) > count * size
    for b, node in fast.brokers.items():
        assert log_bytes(node, topic, 0) == reference, f"broker {b}'s log differs"
    wait_for(
        f"every broker's kafka_high_watermark to be {count}",
        lambda: all(high_watermark_metrics(n, topic) == {0: count} for n in fast.brokers.values()),
        fast,
    )


# --- a follower behind the leader's log start ----------------------------------------------------


def test_a_follower_behind_the_leaders_log_start_restarts_its_log(fast: LocalCluster) -> None:
    """While a follower is dead, the leader's retention deletes what it would need next.  On
    its return its fetch is OFFSET_OUT_OF_RANGE below the leader's log start: it restarts its
    log empty at that offset, catches up and rejoins the ISR, and from there on holds the
    leader's batches byte for byte."""
    topic = "behind-log-start"
    mib = str(1 << 20)  # the smallest segment.bytes
    create_topic(fast, topic, configs={"segment.bytes": mib, "retention.bytes": mib})
    leader_id, (behind, _) = roles(fast, topic)
    leader, returning = fast.brokers[leader_id], fast.brokers[behind]
    count = 4000
    with faults(fast) as f:
        f.kill(behind)
        msgs = [Msg(0, None, os.urandom(1000)) for _ in range(count)]
        reports = produce_confluent(to(fast), topic, msgs, acks="all", linger_ms=5)
        errors = [r.error for r in reports if r.error is not None]
        assert not errors and reports[-1].offset == count - 1, errors[:3]
        start = wait_for(
            "the leader's retention to move its log start",
            lambda: partition(leader, topic)["log_start_offset"],
            fast,
        )
        f.restart(behind)
        wait_for(
            f"broker {behind} back in the ISR",
            lambda: behind in partition(leader, topic)["isr"],
            fast,
        )
    restarted = f"log end 0 is below leader {leader_id}'s log start"
    assert restarted in log_text(returning), returning.log_tail()
    mine, theirs = partition(returning, topic), partition(leader, topic)
    assert mine["log_start_offset"] >= start, (mine, start)
    assert (mine["log_end_offset"], theirs["log_end_offset"]) == (count, count), (mine, theirs)
    common = max(mine["log_start_offset"], theirs["log_start_offset"])
    assert batches_from(returning, topic, 0, common) == batches_from(leader, topic, 0, common)
    first = read_confluent(to(fast), topic, {0: count}, start={0: theirs["log_start_offset"]})
    assert [r.offset for r in first] == list(range(theirs["log_start_offset"], count))


# --- a deposed leader -----------------------------------------------------------------------------


def test_a_deposed_leader_never_acknowledges_acks_all(fast: LocalCluster) -> None:
    """Split brain.  The leader is stopped past its session: another replica is elected and
    takes writes.  An acks=all produce sent to the old leader while it is stopped waits in its
    socket; when it resumes it may take the batch before it learns it was deposed, but it must
    never acknowledge it: the followers fetch from the new leader, and the controller refuses
    a shrink of the ISR proposed in the old epoch.  It answers NOT_LEADER_OR_FOLLOWER (or
    REQUEST_TIMED_OUT), and the batch is in no replica's log once it follows again."""
    topic = "deposed-leader"
    a, b, c = sorted(fast.brokers)
    create_topic(fast, topic, assignment=[[a, b, c]])
    old_leader, observer = fast.brokers[a], fast.brokers[c]
    assert raw_produce(old_leader, topic, [b"before"], acks=-1) == (ErrorCode.NONE, 0)
    with faults(fast) as f:
        conn = RawConnection(old_leader.address, timeout_s=30)
        try:
            f.pause(a)
            view = wait_for(
                "another leader",
                view_where(observer, topic, lambda v: v["leader"] not in (-1, a)),
                fast,
            )
            new_leader = fast.brokers[view["leader"]]
            assert raw_produce(new_leader, topic, [b"after"], acks=-1) == (ErrorCode.NONE, 1)
            batch = build_batch([SimpleRecord(b"zombie")], now_ms=int(time.time() * 1000))
            conn.send(produce_request(topic, batch, acks=-1, timeout_ms=10_000), 9)
            f.resume(a)
            _, response = conn.recv(0, 9)
        finally:
            conn.close()
        answer = response.responses[0].partition_responses[0]
        error = ErrorCode.from_code(answer.error_code)
        assert error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT), (
            f"the deposed leader answered acks=all with {error.name} at offset"
            f" {answer.base_offset}\n{fast.logs()}"
        )
        wait_for(
            f"broker {a} back in the ISR",
            lambda: sorted(partition(observer, topic)["isr"]) == [a, b, c],
            fast,
        )
    values = [r.value for r in read_kcat(to(fast), topic)]
    assert values == [b"before", b"after"], values
    reference = log_bytes(new_leader, topic, 0)
    for x, node in fast.brokers.items():
        assert log_bytes(node, topic, 0) == reference, f"broker {x}'s log differs"


# --- the latest offset across a failover (KIP-207) -----------------------------------------------


def test_latest_offset_never_goes_back_across_a_failover(fast: LocalCluster) -> None:
    """KIP-207: a client told by the old leader that the latest offset is 5 must not be told
    a smaller one by the next leader.  Followers learn the high watermark one fetch late, so
    a new leader starts with a stale one and may only advance it once every ISR member has
    fetched from it; until then Kafka answers ListOffsets latest with the retriable
    OFFSET_NOT_AVAILABLE (``Partition.fetchOffsetForTimestamp``: the high watermark is below
    the start offset of the leader's epoch), never with the stale high watermark.

    Made deterministic: the leader is killed right after acknowledging (its followers' next
    fetches were parked, so they never heard of the high watermark 5), and the third
    replica is paused before the second one takes over, so it stays in the ISR without
    fetching for about a second (until the new leader's lag check drops it)."""
    topic = "latest-offset"
    a, b, c = sorted(fast.brokers)
    create_topic(fast, topic, assignment=[[a, b, c]])
    old_leader, new_leader = fast.brokers[a], fast.brokers[b]
    answers: list[tuple[str, int, int, float]] = []  # each change: error, offset, epoch, when
    with faults(fast) as f:
        assert raw_produce(old_leader, topic, [b"x"] * 5, acks=-1) == (ErrorCode.NONE, 0)
        assert raw_list_offsets(old_leader, topic, -1)[:2] == (ErrorCode.NONE, 5)
        f.kill(a)
        time.sleep(2.0)  # a is fenced after the 4 s session timeout; c is still registered then
        f.pause(c)
        paused = time.monotonic()
        deadline = paused + WAIT_S
        while time.monotonic() < deadline:
            error, offset, epoch = raw_list_offsets(new_leader, topic, -1)
            if not answers or answers[-1][:2] != (error.name, offset):
                answers.append((error.name, offset, epoch, round(time.monotonic() - paused, 2)))
            if (error, offset) == (ErrorCode.NONE, 5):
                break
            time.sleep(0.01)
    went_back = [x for x in answers if x[0] == "NONE" and x[1] < 5]
    assert answers[-1][:2] == ("NONE", 5), f"ListOffsets latest on the new leader: {answers}"
    assert not went_back, (
        f"after the old leader answered 5, the new leader (broker {b}) answered ListOffsets"
        f" latest with a smaller offset instead of OFFSET_NOT_AVAILABLE; answers in order"
        f" (error, offset, leader epoch, seconds after c was paused): {answers}"
    )


# --- unclean leader election ---------------------------------------------------------------------


def test_unclean_election_only_where_enabled(fast: LocalCluster) -> None:
    """Replicas [a, b]: b is stopped and drops out of the ISR while a takes acks=1 writes
    (committed once the ISR is [a], and read by a consumer); then a is killed.  With
    ``unclean.leader.election.enable=true`` b leads as soon as it is back (losing a's
    unreplicated records) and takes writes, and the consumer, past b's log end, is sent back
    to where b's log diverges (OffsetForLeaderEpoch) and reads b's record; without the config
    the partition stays leaderless (leader -1, LEADER_NOT_AVAILABLE, produces time out) until
    a returns with every record.  The returning a truncates its divergent tail and then holds
    b's log byte for byte."""
    a, b, c = sorted(fast.brokers)
    unclean, clean = "unclean", "clean"
    create_topic(
        fast, unclean, assignment=[[a, b]], configs={"unclean.leader.election.enable": "true"}
    )
    create_topic(fast, clean, assignment=[[a, b]])
    observer = fast.brokers[c]
    on_a = to(fast, a)
    for topic in (unclean, clean):
        error_code, _ = raw_produce(fast.brokers[a], topic, [b"r0", b"r1", b"r2"], acks=-1)
        assert error_code == ErrorCode.NONE, error_code.name
    with contextlib.ExitStack() as stack:
        f = stack.enter_context(faults(fast))
        f.pause(b)
        # b's last fetch may be parked at a (up to replica.fetch.wait.max.ms, 500 ms): let a
        # answer it empty, or b would take the first record below from its socket on resume.
        time.sleep(1.0)
        for topic in (unclean, clean):  # behind b's back: offsets 3 and 4, on a only
            for value in (b"a-only-3", b"a-only-4"):
                assert deliver_one(on_a.bootstrap, topic, value, acks=1) is None
        wait_for(
            "both ISRs to be [a]",
            lambda: all(partition(observer, t)["isr"] == [a] for t in (unclean, clean)),
            fast,
        )
        reader = TailingConsumer(to(fast, a, c), unclean, 1)
        stack.enter_context(reader)
        wait_for("the reader to read a's 5 records", lambda: len(reader.seen) >= 5, fast)
        f.kill(a)
        wait_for(
            "both partitions leaderless",
            lambda: all(partition(observer, t)["leader"] == -1 for t in (unclean, clean)),
            fast,
        )
        f.resume(b)
        view = wait_for(
            f"an unclean election of broker {b}",
            view_where(observer, unclean, lambda v: v["leader"] == b),
            fast,
        )
        assert view["isr"] == [b], view
        on_b = to(fast, b, c)
        wait_for(
            f"{unclean} writable on b",
            lambda: deliver_one(on_b.bootstrap, unclean, b"b-new") is None,
            fast,
        )
        wait_for(
            "the reader to get b's record",
            lambda: any(v == "b-new" for _, _, v in reader.seen),
            fast,
        )
        time.sleep(1.0)  # the controller had every chance to elect b for the clean topic too
        view = partition(observer, clean)
        assert (view["leader"], view["isr"]) == (-1, [a]), f"{clean}: {view}"
        meta = admin(on_b.bootstrap).list_topics(clean, timeout=10).topics[clean].partitions[0]
        assert meta.leader == -1, meta
        assert meta.error is not None and meta.error.code() == KafkaError.LEADER_NOT_AVAILABLE
        error = deliver_one(on_b.bootstrap, clean, b"nowhere", **{"message.timeout.ms": 2000})
        assert error is not None and error.code() == KafkaError._MSG_TIMED_OUT, error_name(error)
        error_code, _ = raw_produce(fast.brokers[b], clean, [b"to-a-follower"], acks=1)
        assert error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, error_code.name
        f.restart(a)
        view = wait_for(
            f"broker {a} leading {clean} again",
            view_where(observer, clean, lambda v: v["leader"] == a),
            fast,
        )
    for topic in (unclean, clean):
        wait_for(
            f"{topic}: both replicas in the ISR",
            lambda t=topic: sorted(partition(observer, t)["isr"]) == [a, b],
            fast,
        )
    everyone = to(fast)
    values = [r.value for r in read_kcat(everyone, unclean)]
    # b's log when elected: what it had fetched from a, a prefix of a's (b's last fetch
    # response may still have been in its socket when it was stopped); then b's own record.
    on_a_before = [b"r0", b"r1", b"r2", b"a-only-3", b"a-only-4"]
    kept = values[:-1]
    assert values[-1:] == [b"b-new"] and len(kept) >= 3 and kept == on_a_before[: len(kept)], (
        f"{unclean} after the unclean election: {values}"
    )
    # KIP-320: the reader had read a's records 3 and 4; OffsetForLeaderEpoch on b told it where
    # epoch 0 ends there, so it went back to that offset and read b's record (nothing skipped).
    read_from_a = [(0, i, v.decode()) for i, v in enumerate(on_a_before)]
    assert reader.seen == [*read_from_a, (0, len(kept), "b-new")], (
        f"what a consumer read across the unclean election: {reader.seen} {reader.errors}"
    )
    values = [r.value for r in read_kcat(everyone, clean)]
    assert values == [b"r0", b"r1", b"r2", b"a-only-3", b"a-only-4"], f"{clean} lost records"
    for topic in (unclean, clean):
        wait_for(
            f"{topic}: a's and b's logs identical",
            lambda t=topic: log_bytes(fast.brokers[a], t, 0) == log_bytes(fast.brokers[b], t, 0),
            fast,
        )


# --- acks=0 to a follower ----------------------------------------------------------------------


def test_acks0_produce_to_a_follower_closes_the_connection(fast: LocalCluster) -> None:
    """An acks=0 producer gets no answers, so Kafka tells it that it wrote to a broker that is
    not the leader by closing its connection (``KafkaApis.handleProduceRequest``: an acks=0
    request whose response would carry an error closes the connection, "so that the producer
    client will know that some error has happened and will refresh its metadata").  Without
    it, an acks=0 producer keeps sending a partition's records into the void after a leader
    change, until its next periodic metadata refresh.  An acks=0 produce the leader accepts
    keeps the connection open."""
    topic = "acks-zero"
    a, b, _ = sorted(fast.brokers)
    create_topic(fast, topic, assignment=[[a, b]])
    batch = build_batch([SimpleRecord(b"acks=0")], now_ms=int(time.time() * 1000))
    to_leader = RawConnection(fast.brokers[a].address, timeout_s=2)
    try:
        to_leader.send(produce_request(topic, batch, acks=0, timeout_ms=1000), 9)
        answer = to_leader.request(
            ListOffsetsRequest(
                replica_id=-1,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name=TopicName(topic),
                        partitions=[ListOffsetsRequest.ListOffsetsPartition(timestamp=-1)],
                    )
                ],
            ),
            7,
        )
        assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE, answer
    finally:
        to_leader.close()
    wait_for(
        "the acks=0 record committed",
        lambda: raw_list_offsets(fast.brokers[a], topic, -1)[:2] == (ErrorCode.NONE, 1),
        fast,
    )
    to_follower = RawConnection(fast.brokers[b].address, timeout_s=5)
    try:
        to_follower.send(produce_request(topic, batch, acks=0, timeout_ms=1000), 9)
        assert to_follower.is_closed_by_peer(), (
            f"broker {b}, a follower of {topic}-0, dropped an acks=0 batch (NOT_LEADER_OR_FOLLOWER)"
            " and kept the connection open: the producer is never told to refresh its metadata"
        )
    finally:
        to_follower.close()


# --- epochs and leadership on the wire -----------------------------------------------------------


def test_epoch_fencing_and_offset_for_leader_epoch_on_the_wire(fast: LocalCluster) -> None:
    """Fetch, ListOffsets and OffsetForLeaderEpoch with a stale current_leader_epoch get
    FENCED_LEADER_EPOCH, with a future one UNKNOWN_LEADER_EPOCH; Produce, Fetch, ListOffsets
    and OffsetForLeaderEpoch sent to a follower get NOT_LEADER_OR_FOLLOWER; after leader
    changes, OffsetForLeaderEpoch says each epoch ends where the next began, on the leader of
    every epoch."""
    topic = "epochs"
    a, b, c = sorted(fast.brokers)
    create_topic(fast, topic, assignment=[[a, b]])
    observer = fast.brokers[c]
    e0 = partition(observer, topic)["leader_epoch"]
    leader, follower = fast.brokers[a], fast.brokers[b]
    assert raw_produce(leader, topic, [b"e0-0", b"e0-1", b"e0-2", b"e0-3"], acks=-1) == (
        ErrorCode.NONE,
        0,
    )

    assert raw_fetch(leader, topic, e0)[:2] == (ErrorCode.NONE, 4)
    assert raw_fetch(leader, topic, e0 + 1)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert raw_list_offsets(leader, topic, e0) == (ErrorCode.NONE, 4, e0)
    assert raw_list_offsets(leader, topic, e0 + 1)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert raw_epoch_end(leader, topic, e0, e0) == (ErrorCode.NONE, e0, 4)
    assert raw_epoch_end(leader, topic, e0 + 1, e0)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH

    not_leader = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert raw_produce(follower, topic, [b"to-a-follower"], acks=1)[0] == not_leader
    assert raw_produce(follower, topic, [b"to-a-follower"], acks=-1)[0] == not_leader
    assert raw_fetch(follower, topic, e0, version=10)[0] == not_leader
    assert raw_fetch(follower, topic, -1, version=10)[0] == not_leader
    # Fetch v11+ consumers may read a follower, up to its high watermark (KIP-392)
    wait_for(
        "the follower serving a v12 consumer",
        lambda: raw_fetch(follower, topic, e0)[:2] == (ErrorCode.NONE, 4),
        fast,
    )
    assert raw_list_offsets(follower, topic, -1)[0] == not_leader
    assert raw_epoch_end(follower, topic, -1, e0)[0] == not_leader

    with faults(fast) as f:
        leader.stop()  # a controlled shutdown: b leads at once, in a new epoch
        f.killed.add(a)
        view = wait_for(
            "b leading",
            view_where(observer, topic, lambda v: v["leader"] == b),
            fast,
        )
        e1 = view["leader_epoch"]
        assert e1 > e0, view
        assert raw_produce(follower, topic, [b"e1-4", b"e1-5", b"e1-6"], acks=1) == (
            ErrorCode.NONE,
            4,
        )
        assert raw_fetch(follower, topic, e0)[0] == ErrorCode.FENCED_LEADER_EPOCH
        assert raw_list_offsets(follower, topic, e0)[0] == ErrorCode.FENCED_LEADER_EPOCH
        assert raw_epoch_end(follower, topic, e0, e0)[0] == ErrorCode.FENCED_LEADER_EPOCH
        assert raw_epoch_end(follower, topic, e1, e0) == (ErrorCode.NONE, e0, 4)
        assert raw_epoch_end(follower, topic, e1, e1) == (ErrorCode.NONE, e1, 7)
        f.restart(a)
        wait_for(
            "a back in the ISR",
            lambda: sorted(partition(observer, topic)["isr"]) == [a, b],
            fast,
        )
    client = admin(fast.bootstrap)
    result = client.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)])
    outcome = result.result(timeout=15)
    assert list(outcome.values()) == [None], outcome
    view = wait_for("a leading", view_where(observer, topic, lambda v: v["leader"] == a), fast)
    e2 = view["leader_epoch"]
    assert e2 > e1, view
    wait_for(
        "a serving as leader",
        lambda: raw_list_offsets(leader, topic, e2) == (ErrorCode.NONE, 7, e2),
        fast,
    )
    assert raw_produce(leader, topic, [b"e2-7"], acks=-1) == (ErrorCode.NONE, 7)
    assert raw_epoch_end(leader, topic, e2, e0) == (ErrorCode.NONE, e0, 4)
    assert raw_epoch_end(leader, topic, e2, e1) == (ErrorCode.NONE, e1, 7)
    assert raw_epoch_end(leader, topic, e2, e2) == (ErrorCode.NONE, e2, 8)
    assert raw_fetch(leader, topic, e1)[0] == ErrorCode.FENCED_LEADER_EPOCH
    wait_for(
        "b a follower again",
        lambda: raw_fetch(follower, topic, e2, version=10)[0] == not_leader,
        fast,
    )
    values = [r.value for r in read_kcat(to(fast), topic)]
    assert values == [b"e0-0", b"e0-1", b"e0-2", b"e0-3", b"e1-4", b"e1-5", b"e1-6", b"e2-7"]
    # Each batch keeps the epoch of the leader that wrote it, as a consumer sees it (KIP-320).
    assert leader_epochs_read(to(fast), topic, 8) == [e0] * 4 + [e1] * 3 + [e2]
