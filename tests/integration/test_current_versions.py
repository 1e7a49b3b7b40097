"""Kafka 4.x's API versions and KIP-392 follower fetching, against 1 controller + 3 brokers
(racks rack-1, rack-2, rack-3; ``replica.selector.class`` = RackAwareReplicaSelector) with the
real clients.

- confluent-kafka negotiates the newest versions it knows (seen in librdkafka's own protocol
  log): Fetch v16 (topic ids), Metadata v13, OffsetCommit/OffsetFetch v9, Produce v10+.
- kafka-python's version probe identifies Kafka 4.0 and then speaks 4.0's versions: Fetch v17,
  ListOffsets v10 with EARLIEST_LOCAL / LATEST_TIERED, OffsetFetch of two groups at once.
- aiokafka produces, consumes in a group and lists the group's offsets.
- A consumer in rack-2 (confluent-kafka) or rack-3 (kafka-python) of a partition led by the
  rack-1 broker reads from its rack's follower: the leader's ``redirected`` and the follower's
  ``follower`` counts of ``kafka_consumer_fetch_partitions`` show it, and the records are the
  ones produced.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import urllib.request

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, OffsetSpec
from kafka import TopicPartition as KpTopicPartition

from kraft.testing import ClusterSpec, KraftCluster
from kraft.testing.nodes import NodeProcess

SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
TIMEOUT_S = 30.0
LEADER, RACK_2, RACK_3 = 2, 3, 4  # broker ids; brokers get racks rack-1.. in turn


# one controller and three brokers (racks rack-1, rack-2, rack-3), for this module
pytestmark = [
    pytest.mark.integration,
    pytest.mark.parametrize(
        "kraft_cluster",
        [ClusterSpec(brokers=3, overrides={"replica.selector.class": SELECTOR})],
        indirect=True,
        ids=["1c3b"],
    ),
]


@pytest.fixture
def cluster(kraft_cluster: KraftCluster) -> KraftCluster:
    assert [b.spec.rack for b in kraft_cluster.brokers] == ["rack-1", "rack-2", "rack-3"]
    return kraft_cluster


def _create(cluster: KraftCluster, name: str, assignment: list[list[int]]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment)
    admin.create_topics([topic], operation_timeout=TIMEOUT_S)[name].result(TIMEOUT_S)


def _produce(cluster: KraftCluster, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for v in values:
        producer.produce(topic, value=v, partition=0)
    assert producer.flush(TIMEOUT_S) == 0


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def versions(self) -> dict[str, int]:
        """The highest version librdkafka sent of each request."""
        sent: dict[str, int] = {}
        for name, v in re.findall(r"Sent (\w+)Request \(v(\d+)", "\n".join(self.lines)):
            sent[name] = max(sent.get(name, 0), int(v))
        return sent


def _librdkafka_log(name: str) -> tuple[logging.Logger, _Lines]:
    lines = _Lines()
    logger = logging.getLogger(f"librdkafka.{name}")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger, lines


def _consumed(cluster: KraftCluster, node: NodeProcess) -> dict[str, float]:
    """The broker's ``kafka_consumer_fetch_partitions`` counts by how it served them."""
    url = cluster.admin_url_of(node) + "/metrics"
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        text = response.read().decode()
    pattern = re.compile(r'^kafka_consumer_fetch_partitions_total\{served_as="(\w+)"\} (\S+)$')
    return {m[1]: float(m[2]) for line in text.splitlines() if (m := pattern.match(line))}


def test_confluent_kafka_speaks_the_newest_versions(cluster: KraftCluster) -> None:
    _create(cluster, "newest", [[2, 3, 4], [3, 4, 2]])
    logger, lines = _librdkafka_log("newest")
    conf = {"bootstrap.servers": cluster.bootstrap_servers, "debug": "protocol", "logger": logger}
    producer = Producer({**conf, "acks": "all"})
    sent = [(p, b"v%d-%d" % (p, i)) for i in range(20) for p in (0, 1)]
    for p, v in sent:
        producer.produce("newest", value=v, partition=p)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer(
        {**conf, "group.id": "newest", "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100}
    )
    try:
        consumer.subscribe(["newest"])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append((msg.partition(), msg.value()))
        consumer.commit(asynchronous=False)
        committed = consumer.committed(
            [TopicPartition("newest", 0), TopicPartition("newest", 1)], timeout=TIMEOUT_S
        )
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)
    assert [tp.offset for tp in committed] == [20, 20]
    versions = lines.versions()
    assert versions["Fetch"] >= 13, versions  # topic ids
    assert versions["Metadata"] == 13, versions
    assert versions["OffsetCommit"] == 9 and versions["OffsetFetch"] == 9, versions
    assert versions["Produce"] >= 10, versions


def test_kafka_python_identifies_kafka_4_and_uses_its_versions(cluster: KraftCluster) -> None:
    _create(cluster, "kp-versions", [[3, 4, 2]])
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    try:
        for i in range(10):
            producer.send("kp-versions", b"kp-%d" % i, partition=0)
        producer.flush(TIMEOUT_S)
        assert producer.config["api_version"] == (4, 0)
    finally:
        producer.close()
    groups = ["kp-a", "kp-b"]
    for group, upto in zip(groups, (4, 10), strict=True):
        consumer = KafkaConsumer(
            "kp-versions",
            bootstrap_servers=cluster.bootstrap_servers,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
        )
        try:
            values: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(values) < 10 and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    values.extend(r.value for r in records)
            assert values == [b"kp-%d" % i for i in range(10)]
            assert consumer.config["api_version"] == (4, 0)
            tp = KpTopicPartition("kp-versions", 0)
            consumer.commit({tp: _offset_and_metadata(upto)})
        finally:
            consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        # both groups in one OffsetFetch (v8+ batches groups of one coordinator)
        offsets = admin.list_group_offsets({g: None for g in groups})
        tp = KpTopicPartition("kp-versions", 0)
        assert {g: offsets[g][tp].offset for g in groups} == {"kp-a": 4, "kp-b": 10}
        specs = {
            OffsetSpec.EARLIEST: 0,
            OffsetSpec.LATEST: 10,
            OffsetSpec.EARLIEST_LOCAL: 0,  # ListOffsets v8+
            OffsetSpec.LATEST_TIERED: -1,  # ListOffsets v9+: nothing is tiered
        }
        for spec, want in specs.items():
            answer = admin.list_partition_offsets({tp: spec})
            assert answer[tp].offset == want, spec
    finally:
        admin.close()


def _offset_and_metadata(offset: int) -> object:
    from kafka.structs import OffsetAndMetadata

    return OffsetAndMetadata(offset, "", -1)


def test_aiokafka_produces_consumes_and_lists_group_offsets(cluster: KraftCluster) -> None:
    _create(cluster, "aio-versions", [[4, 2, 3]])

    async def main() -> tuple[list[bytes], int]:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait("aio-versions", b"aio-%d" % i, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "aio-versions",
            bootstrap_servers=cluster.bootstrap_servers,
            group_id="aio-g",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        values: list[bytes] = []
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while len(values) < 10 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    values.extend(r.value for r in records if r.value is not None)
            await consumer.commit()
        finally:
            await consumer.stop()
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        await admin.start()
        try:
            offsets = await admin.list_consumer_group_offsets("aio-g")
        finally:
            await admin.close()
        return values, offsets[next(iter(offsets))].offset

    values, committed = asyncio.run(asyncio.wait_for(main(), TIMEOUT_S * 2))
    assert values == [b"aio-%d" % i for i in range(10)]
    assert committed == 10


def test_a_consumer_reads_from_the_follower_in_its_rack(cluster: KraftCluster) -> None:
    """Leader in rack-1; confluent-kafka with client.rack=rack-2 reads broker 3, kafka-python
    with client_rack=rack-3 reads broker 4; the records are the ones produced."""
    _create(cluster, "racks", [[LEADER, RACK_2, RACK_3]])
    values = [b"r-%d" % i for i in range(50)]
    _produce(cluster, "racks", values)
    before = {b.node_id: _consumed(cluster, b) for b in cluster.brokers}

    logger, lines = _librdkafka_log("racks")
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "rack-2-reader",
            "client.rack": "rack-2",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "debug": "fetch",
            "logger": logger,
        }
    )
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition("racks", 0, 0)])
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == values
    after = {b.node_id: _consumed(cluster, b) for b in cluster.brokers}

    def delta(broker: int, how: str) -> float:
        return after[broker].get(how, 0.0) - before[broker].get(how, 0.0)

    assert delta(LEADER, "redirected") >= 1, after  # the leader named the rack-2 follower
    assert delta(RACK_2, "follower") >= 1, after  # which served the records
    assert delta(RACK_3, "follower") == 0, after
    assert any("preferred replica" in line for line in lines.lines), "librdkafka migrated"

    kp = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        group_id=None,
        client_rack="rack-3",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    )
    try:
        tp = KpTopicPartition("racks", 0)
        kp.assign([tp])
        kp.seek(tp, 0)
        kp_values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(kp_values) < len(values) and time.monotonic() < deadline:
            for records in kp.poll(timeout_ms=500).values():
                kp_values.extend(r.value for r in records)
    finally:
        kp.close()
    assert kp_values == values
    assert _consumed(cluster, cluster.broker(RACK_3)).get("follower", 0.0) >= 1
