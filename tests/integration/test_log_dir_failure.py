"""Disk full on one broker of three (KIP-112 / KIP-858), with real processes and a real full
file system: one controller and three brokers; broker 4's log directory is a small tmpfs.

A confluent-kafka producer (acks=all, idempotent) writes unique values to a topic of three
partitions (replication factor 3, min.insync.replicas 2) and records every send, ack and
failure (``tests/history.py``).  Then the tmpfs fills up (a ballast file takes what is
left, as another program's data would): broker 4's next write fails with ENOSPC, its log
directory goes offline, its heartbeat says so, and the controller moves its leaderships to
in-sync replicas elsewhere.  Checked: ``/v1/cluster`` and ``kraft cluster status`` show the
offline directory; Metadata (confluent-kafka's ``list_topics`` and the raw client) reports
broker 4 in ``offline_replicas`` and KAFKA_STORAGE_ERROR for a partition whose only replica is
there; the producer goes on being acknowledged; nothing acknowledged is lost.  Then the
ballast goes, broker 4 restarts, registers its directory online, catches up, and leads its
own partition again.

The tmpfs is mounted by the test (we run as root); a machine where it cannot be mounted fails
the test with the reason: it is not skipped.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from history import Ack, Fail, HistoryWriter, Read, Send, check

from integration.cluster_process import LocalCluster, wait_for
from integration.node_process import NodeProcess
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import MetadataRequest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "durable"
SOLO = "solo"  # one partition, its only replica on the broker whose disk fills
PARTITIONS = 3
VICTIM = 4
TMPFS_SIZE = "24m"
EXTRA = {
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "5000",
    "log.segment.bytes": str(1 << 20),
    "offsets.topic.num.partitions": "3",
}
RATE_PER_S = 200
TIMEOUT_S = 40.0


def mount_tmpfs(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.fail(
            f"this test needs a small tmpfs for broker {VICTIM}'s log directory and cannot "
            f"mount one at {path} (it must run as root, with mount(8) and tmpfs available): "
            f"{done.stderr.strip() or done.returncode}"
        )


def unmount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(tmp_path, 1, 3, EXTRA)
    small = tmp_path / "small-disk"
    mount_tmpfs(small)
    try:
        cluster.brokers[VICTIM].properties["log.dirs"] = str(small / "logs")
        cluster.start()
        yield cluster
    finally:
        cluster.kill_all()
        unmount(small)


def fill(disk: Path) -> Path:
    """Write a ballast file until the file system is full (ENOSPC)."""
    ballast = disk / "ballast"
    chunk = b"\0" * (1 << 20)
    with ballast.open("wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(chunk)
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
    with pytest.raises(OSError) as full:
        (disk / "probe").write_bytes(b"\0" * 8192)
    assert full.value.errno == errno.ENOSPC
    return ballast


class ProducerThread(threading.Thread):
    def __init__(self, bootstrap: str, history: HistoryWriter) -> None:
        super().__init__(name="disk-full-producer", daemon=True)
        self.history = history
        self.run_id = secrets.token_hex(4)
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
                "retry.backoff.ms": 100,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            for _ in range(10):
                self._send(i)
                i += 1
            self.producer.poll(0)
            time.sleep(10 / RATE_PER_S)
        self.unflushed = self.producer.flush(60)

    def _send(self, i: int) -> None:
        value = f"{self.run_id}-{i:07d}-" + "x" * 500
        partition = i % PARTITIONS

        def delivered(err: KafkaError | None, msg: Message) -> None:
            now = time.monotonic()
            if err is None:
                self.history.append(Ack(i, msg.partition() or 0, msg.offset() or 0, now))
            else:
                self.history.append(Fail(i, str(err), now))

        try:
            self.producer.produce(TOPIC, value, None, partition, on_delivery=delivered)
        except BufferError:
            return  # never sent: not in the history
        self.history.append(Send(i, "producer-0", value, None, partition, time.monotonic()))

    def acked(self) -> int:
        return sum(isinstance(e, Ack) for e in list(self.history.events))


def victim_view(cluster: LocalCluster) -> dict[str, Any]:
    witness = cluster.brokers[VICTIM - 1]
    view = witness.get("/v1/cluster")
    return next(b for b in view["brokers"] if b["id"] == VICTIM)


def raw_metadata(cluster: LocalCluster) -> dict[str, list[Any]]:
    conn = RawConnection(cluster.brokers[VICTIM - 1].address)
    try:
        response = conn.request(MetadataRequest(topics=None), 9)
    finally:
        conn.close()
    return {t.name: sorted(t.partitions, key=lambda p: p.partition_index) for t in response.topics}


def cli_status(cluster: LocalCluster) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "kraft.cli", "cluster", "status"],
        env={**os.environ, "KRAFT_ADMIN": cluster.brokers[VICTIM - 1].admin},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def read_everything(cluster: LocalCluster, history: HistoryWriter, group: str) -> None:
    """Read every partition to its end, then commit the ends for ``group`` (the first commit
    creates ``__consumer_offsets`` while broker 4's directory is offline)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition() or 0)
                continue
            value = msg.value()
            assert value is not None
            history.append(Read(msg.partition() or 0, msg.offset() or 0, value.decode()))
        assert len(at_end) == PARTITIONS, f"read to the end of {at_end} only"
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def committed(cluster: LocalCluster, group: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        wanted = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        return [tp.offset for tp in consumer.committed(wanted, timeout=10)]
    finally:
        consumer.close()


def read_ends(history: HistoryWriter) -> list[TopicPartition]:
    """Each partition's end as the final read saw it (its last offset + 1)."""
    last: dict[int, int] = {}
    for e in history.events:
        if isinstance(e, Read):
            last[e.partition] = max(last.get(e.partition, -1), e.offset)
    return [TopicPartition(TOPIC, p, last.get(p, -1) + 1) for p in range(PARTITIONS)]


def test_disk_full_moves_leaderships_and_loses_nothing(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topics = [
        NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"}),
        NewTopic(SOLO, num_partitions=1, replica_assignment=[[VICTIM]]),
    ]
    for future in admin.create_topics(topics, request_timeout=15).values():
        future.result(timeout=20)
    victim_before = victim_view(cluster)
    assert victim_before["log_dirs"] and victim_before["offline_log_dirs"] == []
    led = wait_for(
        "every partition led",
        lambda: (
            all(p.leader >= 0 for p in admin.list_topics(TOPIC).topics[TOPIC].partitions.values())
            and {p.leader for p in admin.list_topics(TOPIC).topics[TOPIC].partitions.values()}
        ),
        TIMEOUT_S,
        cluster,
    )
    assert VICTIM in led, f"broker {VICTIM} leads none of {TOPIC}'s partitions: {led}"
    history = HistoryWriter(tmp_path / "history.jsonl")
    producer = ProducerThread(cluster.bootstrap, history)
    producer.start()
    try:
        wait_for("first acks", lambda: producer.acked() >= 200, TIMEOUT_S, cluster)

        ballast = fill(tmp_path / "small-disk")
        full_at = time.monotonic()
        offline = wait_for(
            "broker 4 to report its log directory offline",
            lambda: victim_view(cluster)["offline_log_dirs"],
            TIMEOUT_S,
            cluster,
        )
        assert offline == victim_before["log_dirs"]
        assert not victim_view(cluster)["fenced"]  # still up, still answering

        def moved() -> bool:
            parts = admin.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions.values()
            return all(p.leader not in (-1, VICTIM) and VICTIM not in p.isrs for p in parts)

        wait_for("leaderships and ISRs to leave broker 4", moved, TIMEOUT_S, cluster)
        moved_after_s = time.monotonic() - full_at
        solo = admin.list_topics(SOLO, timeout=5).topics[SOLO].partitions[0]
        assert solo.error is not None and solo.error.code() == KafkaError.KAFKA_STORAGE_ERROR
        metadata = raw_metadata(cluster)
        assert all(VICTIM in p.offline_replicas for p in metadata[TOPIC])
        assert all(p.error_code == ErrorCode.NONE for p in metadata[TOPIC])
        assert metadata[SOLO][0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert offline[0] in cli_status(cluster)

        acked_at_failure = producer.acked()
        wait_for(
            "acks to go on from the other replicas",
            lambda: producer.acked() >= acked_at_failure + 300,
            TIMEOUT_S,
            cluster,
        )
    finally:
        producer.stopping.set()
        producer.join(90)
    assert producer.unflushed == 0, f"{producer.unflushed} records unflushed"
    group = f"final-{secrets.token_hex(4)}"
    read_everything(cluster, history, group)
    history.close()
    report = check(history.events)
    assert report.ok, f"{report.describe()}\nhistory: {history.path}"
    assert report.summary.acked >= acked_at_failure + 300

    # the disk has room again: a restart brings broker 4 and its directory back
    ballast.unlink()
    victim = cluster.brokers[VICTIM]
    victim.stop()
    victim.launch().wait_ready()
    wait_for(
        "broker 4 registered with its directory online",
        lambda: (
            (v := victim_view(cluster))["offline_log_dirs"] == []
            and v["log_dirs"] == victim_before["log_dirs"]
            and not v["fenced"]
        ),
        TIMEOUT_S,
        cluster,
    )

    def caught_up() -> bool:
        parts = admin.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions.values()
        solo = admin.list_topics(SOLO, timeout=5).topics[SOLO].partitions[0]
        return all(VICTIM in p.isrs for p in parts) and solo.leader == VICTIM and solo.error is None

    wait_for("broker 4 to catch up and lead its own partition", caught_up, TIMEOUT_S, cluster)
    metadata = raw_metadata(cluster)
    assert all(p.offline_replicas == [] for p in metadata[TOPIC] + metadata[SOLO])
    # the group's offsets, committed while the directory was offline, are all there
    ends = sorted(p.offset for p in read_ends(history))
    assert sorted(committed(cluster, group)) == ends
    logs = tmp_path / "small-disk" / "logs"
    assert not [n for n in os.listdir(logs) if n.endswith("-stray")]  # nothing set aside
    print(f"disk full on broker {VICTIM}: {report.summary}; moved {moved_after_s:.2f} s after")


def test_a_combined_node_reports_its_full_disk_to_its_own_controller(tmp_path: Path) -> None:
    """``kraft dev`` (broker and controller in one process, no periodic heartbeats): a full
    disk still reaches the controller, at once, so /v1/cluster shows the offline directory
    and Metadata reports KAFKA_STORAGE_ERROR for the partition it held."""
    small = tmp_path / "small-disk"
    mount_tmpfs(small)
    node = NodeProcess(
        tmp_path / "node",
        overrides=(
            f"log.dirs={small / 'logs'}",
            "log.segment.bytes=1048576",
            "log.index.size.max.bytes=65536",  # not 10 MiB of index files per segment
        ),
    )
    try:
        node.start()
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        admin.create_topics([NewTopic(SOLO, 1, 1)])[SOLO].result(timeout=10)
        # no retries: librdkafka would retry the (retriable) storage error until its timeout
        producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "retries": 0})
        delivered: list[KafkaError | None] = []
        producer.produce(SOLO, b"before", on_delivery=lambda e, _m: delivered.append(e))
        assert producer.flush(10) == 0 and delivered == [None], delivered

        def cluster_view() -> dict[str, Any]:
            with urllib.request.urlopen(node.admin + "/v1/cluster", timeout=5) as response:
                brokers = json.load(response)["brokers"]
            return next(b for b in brokers if b["id"] == 1)

        before = cluster_view()
        assert len(before["log_dirs"]) == 1 and before["offline_log_dirs"] == [], before
        fill(small)
        errors: list[KafkaError] = []
        deadline = time.monotonic() + TIMEOUT_S
        while not errors and time.monotonic() < deadline:
            producer.produce(
                SOLO, b"x" * 100_000, on_delivery=lambda e, _m: errors.append(e) if e else None
            )
            producer.flush(10)
        assert errors and errors[0].code() == KafkaError.KAFKA_STORAGE_ERROR, errors[:1]

        view = wait_for_value(
            "the controller to hear of the offline directory",
            lambda: cluster_view() if cluster_view()["offline_log_dirs"] else None,
        )
        assert view["offline_log_dirs"] == before["log_dirs"], view
        conn = RawConnection(node.bootstrap)
        try:
            response = conn.request(MetadataRequest(topics=None), 9)
        finally:
            conn.close()
        (solo,) = [t for t in response.topics if t.name == SOLO]
        assert solo.partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert solo.partitions[0].offline_replicas == [1]
    finally:
        node.stop()
        unmount(small)


def wait_for_value(what: str, probe: Callable[[], Any], timeout_s: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
