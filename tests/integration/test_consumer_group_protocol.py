"""KIP-848 consumer groups end to end: confluent-kafka 2.16 consumers with
``group.protocol=consumer`` against one controller and three brokers (real processes).

The group's heartbeat interval is 500 ms (``group.consumer.heartbeat.interval.ms``, its minimum
lowered) so that a rebalance takes a heartbeat or two, not seconds.  What is proved:

* two consumers share a topic: on a join and on a leave each partition goes to one member at a
  time (never two), the assignment ends balanced, and every record is consumed;
* commits carry the member epoch: librdkafka's commits succeed, a restarted consumer resumes
  exactly where the last one committed, and a commit with a stale epoch or an unknown member
  gets STALE_MEMBER_EPOCH / UNKNOWN_MEMBER_ID;
* the admin clients see the new group type: confluent's describe (ConsumerGroupDescribe: type
  CONSUMER, the uniform assignor, each member's current and target assignment) and list,
  kafka-python's and aiokafka's ListGroups (group_type "consumer"); an empty group is deleted;
* a classic JoinGroup to a consumer group gets INCONSISTENT_GROUP_PROTOCOL, a classic
  Heartbeat GROUP_ID_NOT_FOUND, and a ConsumerGroupHeartbeat to a live classic group
  GROUP_ID_NOT_FOUND;
* ``kill -9`` of the coordinator: the new coordinator loads the group from its KIP-848 records
  in ``__consumer_offsets``: the same member keeps its id, epoch and partitions and consumes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, Producer
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]
from kafka.admin import KafkaAdminClient

from integration.cluster_process import LocalCluster, admin_client
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
)

pytestmark = pytest.mark.integration

TOPIC = "kip848"
PARTITIONS = 6
EXTRA = {
    "offsets.topic.num.partitions": "3",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "1000",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(Path(tmp_path_factory.mktemp("kip848")), 1, 3, EXTRA).start()
    try:
        client = admin_client(cluster)
        client.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(timeout=10)
        yield cluster
    finally:
        cluster.kill_all()


def produce(cluster: LocalCluster, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(TOPIC, value.encode(), partition=i % PARTITIONS)
    assert producer.flush(10) == 0


def consumer(cluster: LocalCluster, group: str, **extra: str) -> Consumer:
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": "false",
            **extra,
        }
    )
    c.subscribe([TOPIC])
    return c


def owned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


class Reader:
    """Polls consumers in turn, keeping what each consumed and checking, after every poll,
    that no partition is assigned to two of them."""

    def __init__(self, *consumers: Consumer) -> None:
        self.consumers = list(consumers)
        self.values: list[str] = []

    def until(self, what: str, condition: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for c in self.consumers:
                message = c.poll(0.05)
                if message is not None:
                    assert message.error() is None, message.error()
                    self.values.append(message.value().decode())
            seen: set[int] = set()
            for c in self.consumers:
                mine = owned(c)
                assert not mine & seen, f"partitions {mine & seen} assigned twice"
                seen |= mine
            if condition():
                return
        raise AssertionError(f"timed out waiting for {what}")


def test_two_consumers_share_a_topic_and_rebalance_on_join_and_leave(
    cluster: LocalCluster,
) -> None:
    first = [f"first-{i}" for i in range(60)]
    produce(cluster, first)
    c1 = consumer(cluster, "sharing")
    reader = Reader(c1)
    reader.until("c1 to read everything", lambda: set(first) <= set(reader.values))
    assert owned(c1) == set(range(PARTITIONS))
    c2 = consumer(cluster, "sharing")
    reader.consumers.append(c2)
    reader.until("a balanced split", lambda: len(owned(c1)) == len(owned(c2)) == 3)
    second = [f"second-{i}" for i in range(60)]
    produce(cluster, second)
    reader.until("both to read the rest", lambda: set(second) <= set(reader.values))
    c2.close()
    reader.consumers.remove(c2)
    reader.until("c1 to own every partition again", lambda: owned(c1) == set(range(PARTITIONS)))
    c1.close()


def test_commits_carry_member_epochs_and_a_restart_resumes_there(cluster: LocalCluster) -> None:
    group = "committing"
    c1 = consumer(cluster, group)
    reader = Reader(c1)
    reader.until("an assignment", lambda: owned(c1) == set(range(PARTITIONS)))
    produce(cluster, [f"before-{i}" for i in range(12)])
    reader.until("the records", lambda: sum(v.startswith("before-") for v in reader.values) == 12)
    committed = c1.commit(asynchronous=False)
    assert committed is not None and all(tp.error is None for tp in committed)
    check_commit_errors(cluster, group)
    c1.close()
    produce(cluster, [f"after-{i}" for i in range(12)])
    c2 = consumer(cluster, group)
    again = Reader(c2)
    again.until("the new records", lambda: sum(v.startswith("after-") for v in again.values) == 12)
    assert not any(v.startswith("before-") for v in again.values), "re-read committed records"
    c2.close()


def check_commit_errors(cluster: LocalCluster, group: str) -> None:
    """OffsetCommit for a member of the group: a wrong epoch or an unknown member is refused."""
    admin = admin_client(cluster)  # kept: a collected client leaves its futures unanswered
    described = admin.describe_consumer_groups([group])[group].result(10)
    member = described.members[0]
    coordinator = described.coordinator
    conn = RawConnection(f"{coordinator.host}:{coordinator.port}")
    try:
        for member_id, epoch, error in (
            (member.member_id, 9999, ErrorCode.STALE_MEMBER_EPOCH),
            ("nobody", 1, ErrorCode.UNKNOWN_MEMBER_ID),
        ):
            req = OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=epoch,
                member_id=member_id,
                topics=[
                    OffsetCommitRequest.OffsetCommitRequestTopic(
                        name=TOPIC,
                        partitions=[
                            OffsetCommitRequest.OffsetCommitRequestPartition(
                                partition_index=0, committed_offset=1
                            )
                        ],
                    )
                ],
            )
            response = conn.request(req, 8)
            assert response.topics[0].partitions[0].error_code == error
    finally:
        conn.close()


def test_admin_clients_show_the_group_type_and_assignments(cluster: LocalCluster) -> None:
    group = "described"
    c1 = consumer(cluster, group)
    c2 = consumer(cluster, group)
    reader = Reader(c1, c2)
    reader.until("a balanced split", lambda: len(owned(c1)) == len(owned(c2)) == 3)
    admin = admin_client(cluster)
    d = admin.describe_consumer_groups([group])[group].result(10)
    assert d.type is ConsumerGroupType.CONSUMER
    assert d.state is ConsumerGroupState.STABLE
    assert d.partition_assignor == "uniform"
    assignments = sorted(
        sorted(tp.partition for tp in m.assignment.topic_partitions) for m in d.members
    )
    targets = sorted(
        sorted(tp.partition for tp in m.target_assignment.topic_partitions) for m in d.members
    )
    assert assignments == targets
    assert sorted(p for a in assignments for p in a) == list(range(PARTITIONS))
    listed = {g.group_id: g for g in admin.list_consumer_groups().result(10).valid}
    assert listed[group].type is ConsumerGroupType.CONSUMER
    kafka_python = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        groups = {g["group_id"]: g for g in kafka_python.list_groups()}
        assert groups[group]["group_type"] == "consumer"
        assert groups[group]["protocol_type"] == "consumer"
    finally:
        kafka_python.close()
    assert (group, "consumer") in asyncio.run(aiokafka_list(cluster))
    c1.close()
    c2.close()
    deleted = admin.delete_consumer_groups([group])[group]
    deleted.result(10)
    listed = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    assert group not in listed


async def aiokafka_list(cluster: LocalCluster) -> list[tuple[str, str]]:
    client = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    await client.start()
    try:
        return [(g[0], g[1]) for g in await client.list_consumer_groups()]
    finally:
        await client.close()


def test_classic_requests_and_consumer_heartbeats_do_not_mix(cluster: LocalCluster) -> None:
    group = "one-kind"
    c1 = consumer(cluster, group)
    Reader(c1).until("an assignment", lambda: bool(owned(c1)))
    admin = admin_client(cluster)
    coordinator = admin.describe_consumer_groups([group])[group].result(10)
    address = f"{coordinator.coordinator.host}:{coordinator.coordinator.port}"
    conn = RawConnection(address)
    try:
        join = JoinGroupRequest(
            group_id=group,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="",
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
        )
        assert conn.request(join, 5).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        beat = HeartbeatRequest(group_id=group, generation_id=1, member_id="m")
        assert conn.request(beat, 4).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    finally:
        conn.close()
    c1.close()
    classic = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "classic-one",
            "session.timeout.ms": 6000,
        }
    )
    classic.subscribe([TOPIC])
    Reader(classic).until("a classic assignment", lambda: bool(owned(classic)))
    address = cluster.any_broker().address
    heartbeat = ConsumerGroupHeartbeatRequest(
        group_id="classic-one",
        member_id="kip848-member",
        member_epoch=0,
        rebalance_timeout_ms=10_000,
        subscribed_topic_names=[TOPIC],
        topic_partitions=[],
    )
    answered = None
    for broker in cluster.brokers.values():  # the coordinator answers; the others NOT_COORDINATOR
        conn = RawConnection(broker.address)
        try:
            response = conn.request(heartbeat, 1)
        finally:
            conn.close()
        if response.error_code != ErrorCode.NOT_COORDINATOR:
            answered = response
    assert answered is not None and answered.error_code == ErrorCode.GROUP_ID_NOT_FOUND, address
    classic.close()


def raw_describe(cluster: LocalCluster, group: str) -> ConsumerGroupDescribeResponse.DescribedGroup:
    """The group as its coordinator's ConsumerGroupDescribe answers (the others say
    NOT_COORDINATOR)."""
    for broker in cluster.brokers.values():
        if not broker.alive():
            continue
        conn = RawConnection(broker.address)
        try:
            response = conn.request(ConsumerGroupDescribeRequest(group_ids=[group]), 0)
        finally:
            conn.close()
        described = response.groups[0]
        if described.error_code == ErrorCode.NONE:
            return described
    raise AssertionError(f"no broker describes {group}")


def test_the_group_survives_a_coordinator_failover(cluster: LocalCluster) -> None:
    """Last in the module: it kills a broker (restarted at the end).  The group epoch is first
    raised by a member that joins and leaves: a group rebuilt from nothing would restart at 1."""
    group = "failover"
    c1 = consumer(cluster, group)
    reader = Reader(c1)
    reader.until("an assignment", lambda: owned(c1) == set(range(PARTITIONS)))
    c2 = consumer(cluster, group)
    reader.consumers.append(c2)
    reader.until("a balanced split", lambda: len(owned(c1)) == len(owned(c2)) == 3)
    c2.close()
    reader.consumers.remove(c2)
    reader.until("c1 to own every partition", lambda: owned(c1) == set(range(PARTITIONS)))
    before = raw_describe(cluster, group)
    assert before.group_epoch >= 3
    admin = admin_client(cluster)
    coordinator = admin.describe_consumer_groups([group])[group].result(10).coordinator.id
    victim = cluster.brokers[coordinator]
    victim.kill()
    try:

        def moved() -> bool:
            try:
                d = admin.describe_consumer_groups([group])[group].result(5)
            except Exception:
                return False
            return d.coordinator.id != victim.node_id and bool(d.members)

        reader.until("the group on a new coordinator", moved)
        after = raw_describe(cluster, group)
        assert after.group_epoch >= before.group_epoch
        assert [m.member_id for m in after.members] == [m.member_id for m in before.members]
        assert after.members[0].member_epoch >= before.members[0].member_epoch
        produce(cluster, [f"failover-{i}" for i in range(12)])
        reader.until(
            "records after the failover",
            lambda: sum(v.startswith("failover-") for v in reader.values) == 12,
        )
        assert owned(c1) == set(range(PARTITIONS))
    finally:
        c1.close()
        victim.launch().wait_ready()
