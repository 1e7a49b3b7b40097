"""Acceptance: every partition of a topic moves onto a new broker under a replication throttle
while a producer (acks=all, idempotent) and a consumer keep running.

One controller and three brokers; the topic starts on brokers 2 and 3 and each partition is
reassigned (kafka-python) to a replica set that includes broker 4, which starts empty, as when
a broker is added to a cluster. The throttle is set as ``kafka-reassign-partitions.sh
--throttle`` sets it, through confluent-kafka's IncrementalAlterConfigs: the leader rate on the
current replicas' brokers, the follower rate on broker 4, and the topic's throttled-replica
lists. Asserted: no acknowledged record lost (``history.check`` on a final read), the consumer
saw no error, and broker 4 received the partitions at the throttled rate within 20 %.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from history import Ack, Fail, HistoryWriter, Read, Send, check
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient

from integration.cluster_process import (
    LocalCluster,
    ServerProcess,
    admin_client,
    rest_call,
    wait_for,
)

pytestmark = pytest.mark.integration

TOPIC = "moving"
PARTITIONS = 3
START = [[2, 3], [3, 2], [2, 3]]
TARGET = [[4, 3], [4, 2], [3, 4]]  # every partition gains broker 4 and loses one replica
RATE_BYTES_PER_S = 1_000_000
PRELOAD_BYTES = 8_000_000
VALUE_BYTES = 1000
# Small fetches, so that one response is a small share of a second's quota (the measured rate
# is the bound plus at most one response over the move).
FETCH_MAX_BYTES = 131_072


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = Path(tmp_path_factory.mktemp("throttled"))
    extra = {
        "broker.session.timeout.ms": "3000",
        "broker.heartbeat.interval.ms": "500",
        "replica.fetch.max.bytes": str(FETCH_MAX_BYTES),
        "replica.fetch.response.max.bytes": str(2 * FETCH_MAX_BYTES),
    }
    cluster = LocalCluster.create(root, 1, 3, extra).start()
    try:
        yield cluster
    finally:
        cluster.kill_all()


def set_configs(cluster: LocalCluster, kind: str, name: str, values: dict[str, str]) -> None:
    admin = admin_client(cluster)
    ops = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in values.items()
    ]
    [future] = admin.incremental_alter_configs(
        [ConfigResource(kind, name, incremental_configs=ops)]
    ).values()
    future.result(timeout=15)


def partitions(node: ServerProcess) -> dict[int, dict[str, Any]]:
    return {p["partition"]: p for p in node.get(f"/v1/topics/{TOPIC}")["partitions"]}


def bytes_on_disk(node: ServerProcess) -> int:
    logs = node.data_dir / "logs"
    return sum(
        f.stat().st_size
        for p in range(PARTITIONS)
        if (logs / f"{TOPIC}-{p}").exists()
        for f in (logs / f"{TOPIC}-{p}").glob("*.log")
    )


class ProducerThread(threading.Thread):
    """acks=all, idempotent, about 200 records a second, every send and answer recorded."""

    def __init__(self, bootstrap: str, history: HistoryWriter) -> None:
        super().__init__(name="producer", daemon=True)
        self.history = history
        self.stopping = threading.Event()
        self.run_id = secrets.token_hex(3)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 60_000,
            }
        )

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            for _ in range(10):
                self._send(i)
                i += 1
            self.producer.poll(0)
            time.sleep(0.05)
        self.producer.flush(60)

    def _send(self, i: int) -> None:
        value = f"{self.run_id}-{i:07d}"

        def delivered(err: KafkaError | None, msg: Message) -> None:
            now = time.monotonic()
            if err is None:
                self.history.append(Ack(i, msg.partition() or 0, msg.offset() or 0, now))
            else:
                self.history.append(Fail(i, str(err), now))

        self.producer.produce(TOPIC, value, partition=i % PARTITIONS, on_delivery=delivered)
        self.history.append(Send(i, "producer", value, None, i % PARTITIONS, time.monotonic()))


class ConsumerThread(threading.Thread):
    """A group member reading all along; any error but end-of-partition is kept."""

    def __init__(self, bootstrap: str, history: HistoryWriter) -> None:
        super().__init__(name="consumer", daemon=True)
        self.history = history
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.count = 0
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"live-{secrets.token_hex(3)}",
                "auto.offset.reset": "earliest",
                "error_cb": lambda err: self.errors.append(str(err)),
            }
        )

    def run(self) -> None:
        self.consumer.subscribe([TOPIC])
        try:
            while not self.stopping.is_set():
                for msg in self.consumer.consume(500, 0.2):
                    if (err := msg.error()) is not None:
                        self.errors.append(str(err))
                        continue
                    value = msg.value()
                    if value is not None and not value.startswith(b"pre"):
                        self.history.append(
                            Read(msg.partition() or 0, msg.offset() or 0, value.decode(), "live")
                        )
                    self.count += 1
        finally:
            self.consumer.close()


def preload(cluster: LocalCluster) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20})
    count = PRELOAD_BYTES // VALUE_BYTES
    for i in range(count):
        while True:
            try:
                producer.produce(
                    TOPIC, b"pre" + secrets.token_bytes(VALUE_BYTES - 3), partition=i % 3
                )
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def final_read(cluster: LocalCluster, history: HistoryWriter) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"final-{secrets.token_hex(3)}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        eof = dict.fromkeys(ends, -1)
        deadline = time.monotonic() + 60
        while any(eof[p] < ends[p] for p in ends):
            assert time.monotonic() < deadline, (ends, eof)
            for msg in consumer.consume(1000, 0.5):
                partition, offset = msg.partition() or 0, msg.offset() or 0
                if (err := msg.error()) is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    eof[partition] = offset
                    continue
                value = msg.value()
                if value is not None and not value.startswith(b"pre"):
                    history.append(Read(partition, offset, value.decode()))
    finally:
        consumer.close()


def test_moving_every_partition_under_a_throttle(cluster: LocalCluster, tmp_path: Path) -> None:
    admin = admin_client(cluster)
    topic = NewTopic(
        TOPIC,
        num_partitions=PARTITIONS,
        replica_assignment=START,
        config={"min.insync.replicas": "2"},
    )
    admin.create_topics([topic])[TOPIC].result(timeout=15)
    preload(cluster)
    rate = str(RATE_BYTES_PER_S)
    for broker in (2, 3):
        set_configs(cluster, "broker", str(broker), {"leader.replication.throttled.rate": rate})
    set_configs(cluster, "broker", "4", {"follower.replication.throttled.rate": rate})

    # As kafka-configs.sh --describe --entity-type brokers --entity-name 4 shows it (broker 4
    # answers from its image, which follows the controller's).
    def described() -> Any:
        [future] = admin.describe_configs([ConfigResource("broker", "4")]).values()
        entry = future.result(timeout=15)["follower.replication.throttled.rate"]
        return entry if entry.value == rate else None

    entry = wait_for("broker 4 describes the rate", described, 15, cluster)
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    leaders = ",".join(f"{p}:{b}" for p, replicas in enumerate(START) for b in replicas)
    followers = ",".join(f"{p}:4" for p in range(PARTITIONS))
    set_configs(
        cluster,
        "topic",
        TOPIC,
        {
            "leader.replication.throttled.replicas": leaders,
            "follower.replication.throttled.replicas": followers,
        },
    )

    history = HistoryWriter(tmp_path / "history.jsonl")
    producer = ProducerThread(cluster.bootstrap, history)
    consumer = ConsumerThread(cluster.bootstrap, history)
    producer.start()
    consumer.start()
    new_broker, observer = cluster.brokers[4], cluster.brokers[2]
    try:
        wait_for("production under way", lambda: consumer.count > 50, 30, cluster)
        kp_admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            wanted = {KpTopicPartition(TOPIC, p): t for p, t in enumerate(TARGET)}
            started = time.monotonic()
            assert kp_admin.alter_partition_reassignments(wanted) == dict.fromkeys(wanted)
            assert kp_admin.list_partition_reassignments()  # throttled: still going

            def done() -> bool:
                ps = partitions(observer)
                return all(
                    ps[p]["replicas"] == t and sorted(ps[p]["isr"]) == sorted(t)
                    for p, t in enumerate(TARGET)
                )

            wait_for("every partition moved", done, 60, cluster, poll_s=0.1)
            took_s = time.monotonic() - started
            assert kp_admin.list_partition_reassignments() == {}
        finally:
            kp_admin.close()
        # The follower's own measure of its throttled traffic (/metrics) is within the bound.
        metrics = rest_call(new_broker, "GET", "/metrics")[1]
        prefix = 'kafka_replication_throttled_bytes_per_second{side="follower"} '
        measured = next(
            float(x[len(prefix) :]) for x in metrics.splitlines() if x.startswith(prefix)
        )
        assert 0 < measured <= 1.2 * RATE_BYTES_PER_S, measured
        moved = bytes_on_disk(new_broker)
        achieved = moved / took_s
        print(f"moved {moved} bytes in {took_s:.2f} s: {achieved:.0f} B/s, bound {rate} B/s")
        assert moved >= PRELOAD_BYTES
        assert 0.8 * RATE_BYTES_PER_S <= achieved <= 1.2 * RATE_BYTES_PER_S
        time.sleep(1.0)  # production and consumption carry on after the move
    finally:
        producer.stopping.set()
        producer.join(90)
        consumer.stopping.set()
        consumer.join(30)
    assert not consumer.errors, consumer.errors
    final_read(cluster, history)
    history.close()
    report = check(history.events)
    assert report.ok, report.describe()
    acked = sum(isinstance(e, Ack) for e in history.events)
    assert acked > 500
