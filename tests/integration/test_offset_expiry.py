"""Committed offsets expire, end to end: Kafka's offset retention with KIP-211's rule, on real
processes (one controller, three brokers) and real clients.

Kafka expires an offset (``OffsetExpirationCondition``) once ``now`` reaches its explicit
expire timestamp, else ``offsets.retention.minutes`` after its base time: when its group became
Empty, or its commit for a simple consumer (no group membership).  Either way only while the
group lets it: never while the group rebalances, and for a Stable consumer group only the
offsets of topics no member subscribes to.  An Empty group left without offsets is deleted.
Expiry writes tombstones to ``__consumer_offsets``, so a new coordinator loads the absence.

A minute (the least ``offsets.retention.minutes``) would make this slow, so the offsets under
test carry Kafka's explicit expiry: OffsetCommit v2-v4's ``retention_time_ms`` (expire at
commit time + retention).  No client library exposes that field (librdkafka, kafka-python and
the Java client send -1), so those commits go through ``raw_client``; the group membership,
the consuming and every check of what is committed use confluent-kafka, and the listings come
from the REST API (``/v1/groups``, what ``kraft groups list`` shows).  The check interval is
Kafka's ``offsets.retention.check.interval.ms``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import NewTopic

from broker.coordinator.records import OFFSETS_TOPIC, GroupRecord, OffsetRecord, decode
from integration.cluster_process import LocalCluster, admin_client, wait_for
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    FindCoordinatorRequest,
    OffsetCommitRequest,
    OffsetCommitResponse,
)

pytestmark = pytest.mark.integration

CHECK_INTERVAL_MS = 200
EXTRA = {
    "offsets.topic.num.partitions": "1",  # every group on one coordinator: the one to kill
    "offsets.retention.check.interval.ms": str(CHECK_INTERVAL_MS),
    "group.initial.rebalance.delay.ms": "0",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}
TOPIC = "events"
RECORDS_PER_PARTITION = 10
NO_OFFSET = -1001  # what librdkafka reports for OffsetFetch's -1
# A member joins in about a second; this leaves it ample time to join before the expiry.
MEMBER_GROUP_RETENTION_MS = 10_000
SIMPLE_RETENTION_MS = 1_000
EXPIRY_TIMEOUT_S = 20.0
RETRIABLE = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(Path(tmp_path_factory.mktemp("expiry")), 1, 3, EXTRA)
    try:
        cluster.start()
        admin = admin_client(cluster)  # kept: a destroyed client fails its futures
        admin.create_topics([NewTopic(TOPIC, 2, 3)])[TOPIC].result(timeout=10)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(RECORDS_PER_PARTITION):
            for p in (0, 1):
                producer.produce(TOPIC, f"{p}-{i}".encode(), partition=p)
        assert producer.flush(10) == 0
        yield cluster
    finally:
        cluster.kill_all()


# --- clients --------------------------------------------------------------------------------------


def committed(cluster: LocalCluster, group: str) -> list[int]:
    """OffsetFetch by librdkafka (a consumer that does not join): one offset per partition."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)], 5)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def commit_with_retention(
    cluster: LocalCluster, group: str, offsets: list[int], retention_ms: int
) -> float:
    """OffsetCommit v2 as a simple consumer (generation -1, no member id) with an explicit
    ``retention_time_ms``, to the group's coordinator; the wall-clock time just before the
    commit that succeeded (the coordinator's expire timestamp is no earlier than this plus
    the retention, and no later than the return plus the retention)."""
    sent_at_s = 0.0

    def commit() -> bool:
        nonlocal sent_at_s
        with_any = RawConnection(cluster.any_broker().address)
        try:
            found = with_any.request(FindCoordinatorRequest(key=group, key_type=0), 1)
        finally:
            with_any.close()
        if found.error_code != ErrorCode.NONE:
            return False  # the offsets topic is being created
        coordinator = RawConnection(f"{found.host}:{found.port}")
        sent_at_s = time.time()
        try:
            response: OffsetCommitResponse = coordinator.request(
                OffsetCommitRequest(
                    group_id=group,
                    generation_id_or_member_epoch=-1,
                    member_id="",
                    retention_time_ms=retention_ms,
                    topics=[
                        OffsetCommitRequest.OffsetCommitRequestTopic(
                            name=TOPIC,
                            partitions=[
                                OffsetCommitRequest.OffsetCommitRequestPartition(
                                    partition_index=p, committed_offset=o
                                )
                                for p, o in enumerate(offsets)
                            ],
                        )
                    ],
                ),
                2,
            )
        finally:
            coordinator.close()
        errors = {ErrorCode(p.error_code) for t in response.topics for p in t.partitions}
        if errors - RETRIABLE - {ErrorCode.NONE}:
            raise RuntimeError(f"OffsetCommit for {group} failed: {errors}")
        return errors == {ErrorCode.NONE}

    wait_for(f"a commit for {group}", commit, 30, cluster)
    return sent_at_s


def listed_groups(cluster: LocalCluster) -> set[str]:
    return {g["group_id"] for g in cluster.any_broker().get("/v1/groups")}


def offsets_log(cluster: LocalCluster) -> list[object]:
    """Every record of ``__consumer_offsets`` (one partition here), decoded, read by
    librdkafka from the partition's leader."""
    reader = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "log-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    records: list[object] = []
    try:
        reader.assign([TopicPartition(OFFSETS_TOPIC, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = reader.poll(1.0)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                return records
            key = msg.key()
            assert key is not None
            records.append(decode(key, msg.value()))
        raise AssertionError(f"{OFFSETS_TOPIC} not read to its end in 20 s")
    finally:
        reader.close()


def tombstones_of(log: list[object], group: str) -> set[tuple[str, int]]:
    return {
        (r.topic, r.partition)
        for r in log
        if isinstance(r, OffsetRecord) and r.group == group and r.value is None
    }


# --- the tests ------------------------------------------------------------------------------------


def test_a_groups_offsets_stay_while_it_has_members_and_expire_once_it_is_empty(
    cluster: LocalCluster,
) -> None:
    """KIP-211: offsets whose expiry has passed stay while a Stable member subscribes to their
    topic; when the member leaves, the Empty group's offsets expire and the group goes."""
    group = "kept-while-consumed"
    retention_s = MEMBER_GROUP_RETENTION_MS / 1000
    expires_after_s = commit_with_retention(cluster, group, [3, 4], MEMBER_GROUP_RETENTION_MS)
    expires_after_s += retention_s
    expires_before_s = time.time() + retention_s

    member = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,  # the offsets under test stay the ones committed above
            "auto.offset.reset": "earliest",
        }
    )
    try:
        member.subscribe([TOPIC])
        first: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while len(first) < 2 and time.monotonic() < deadline:
            msg = member.poll(0.5)
            if msg is not None and msg.error() is None:
                first.setdefault(msg.partition(), msg.offset())
        assert first == {0: 3, 1: 4}, f"the member did not start at the committed offsets: {first}"
        assert time.time() < expires_after_s, "the member joined too late to prove anything"

        # past the expire timestamp by several checks: the offsets stay, the member subscribes
        time.sleep(max(0.0, expires_before_s + 5 * CHECK_INTERVAL_MS / 1000 - time.time()))
        assert committed(cluster, group) == [3, 4], "expired while the group had a member"
        described = cluster.any_broker().get(f"/v1/groups/{group}")
        assert described["state"] == "Stable"
        assert {p["partition"]: p["committed"] for p in described["partitions"]} == {0: 3, 1: 4}
    finally:
        member.close()  # LeaveGroup: the group is Empty

    wait_for(
        f"{group}'s offsets to expire once it is empty",
        lambda: committed(cluster, group) == [NO_OFFSET, NO_OFFSET],
        EXPIRY_TIMEOUT_S,
        cluster,
    )
    wait_for(
        f"{group}, empty and without offsets, to be deleted",
        lambda: group not in listed_groups(cluster),
        EXPIRY_TIMEOUT_S,
        cluster,
    )
    log = offsets_log(cluster)
    assert tombstones_of(log, group) == {(TOPIC, 0), (TOPIC, 1)}
    assert GroupRecord(group, None) in log, "the empty group was not deleted"


def test_expired_offsets_stay_expired_after_the_coordinator_is_killed(
    cluster: LocalCluster,
) -> None:
    """A simple consumer's offsets expire; the tombstones are in the replicated log, so the
    new coordinator after a kill -9 loads them gone, next to another group's offsets it kept."""
    lapsed, steady = "lapsed", "steady"
    keeper = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": steady, "enable.auto.commit": False}
    )
    try:  # a simple consumer's commit without retention_time_ms: a week's retention
        keeper.commit(offsets=[TopicPartition(TOPIC, 0, 5), TopicPartition(TOPIC, 1, 6)])
    finally:
        keeper.close()
    commit_with_retention(cluster, lapsed, [1, 2], SIMPLE_RETENTION_MS)
    wait_for(
        f"{lapsed}'s offsets to expire",
        lambda: committed(cluster, lapsed) == [NO_OFFSET, NO_OFFSET],
        EXPIRY_TIMEOUT_S,
        cluster,
    )
    assert committed(cluster, steady) == [5, 6]

    topics = admin_client(cluster).list_topics(OFFSETS_TOPIC, timeout=10).topics
    victim = cluster.brokers[topics[OFFSETS_TOPIC].partitions[0].leader]
    victim.kill()
    try:
        # the new coordinator answers once it has loaded the partition from its replica; until
        # the controller fences the dead broker (broker.session.timeout.ms) and elects a new
        # leader, librdkafka's query may time out: that counts as "not yet"
        wait_for(
            f"{steady}'s offsets from the new coordinator",
            lambda: committed(cluster, steady) == [5, 6],
            30,
            cluster,
            ignore=(AssertionError, OSError, KafkaException),
        )
        # (not proof on its own: had the old coordinator only forgotten them, the new one
        # would expire them again at its first check; the log read below is the proof)
        assert committed(cluster, lapsed) == [NO_OFFSET, NO_OFFSET], "resurrected"
        listed = wait_for("the groups", lambda: listed_groups(cluster) or None, 30, cluster)
        assert steady in listed and lapsed not in listed, listed

        # the new leader's replica holds the tombstones (and compaction will drop the offsets)
        assert tombstones_of(offsets_log(cluster), lapsed) == {(TOPIC, 0), (TOPIC, 1)}
    finally:
        victim.launch()
        victim.wait_ready()
