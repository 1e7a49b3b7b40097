"""KIP-848 consumer groups end to end: confluent-kafka 2.16 consumers with
``group.protocol=consumer`` against one controller and three brokers (real processes).

The group's heartbeat interval is 500 ms (``group.consumer.heartbeat.interval.ms``, its minimum
lowered) so that a rebalance takes a heartbeat or two, not seconds.  What is proved:

* two consumers share a topic: on a join and on a leave each partition goes to one member at a
  time (never two), the assignment ends balanced, and every record is consumed;
* a member killed with ``kill -9`` is removed after its session timeout, not before, and the
  survivor then owns every partition;
* commits carry the member epoch: librdkafka's commits succeed, a restarted consumer resumes
  exactly where the last one committed, and a commit with a stale epoch or an unknown member
  gets STALE_MEMBER_EPOCH / UNKNOWN_MEMBER_ID, and so does an OffsetFetch v9 naming them;
* a member asking for ``range`` (``group.remote.assignor``) gets contiguous ranges;
* a static member (``group.instance.id``) that restarts gets its partitions back, the other
  member keeping its own throughout;
* the admin clients see the new group type: confluent's describe (ConsumerGroupDescribe: type
  CONSUMER, the uniform assignor, each member's current and target assignment) and list,
  kafka-python's and aiokafka's ListGroups (group_type "consumer"); an empty group is deleted;
* a classic JoinGroup to a consumer group gets INCONSISTENT_GROUP_PROTOCOL, a classic
  Heartbeat GROUP_ID_NOT_FOUND, and a ConsumerGroupHeartbeat to a live classic group
  GROUP_ID_NOT_FOUND;
* bad heartbeats (an invalid epoch, no member id, no subscription, an unknown assignor, an
  unknown member) get Kafka's errors and messages, and no group is created;
* ``kill -9`` of the coordinator: the new coordinator loads the group from its KIP-848 records
  in ``__consumer_offsets``: the same member keeps its id, epoch and partitions and consumes on.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, Producer
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]
from kafka.admin import KafkaAdminClient

from integration.cluster_process import LocalCluster, admin_client, rest_call
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
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


CRASHING_MEMBER = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "group.protocol": "consumer", "auto.offset.reset": "earliest"})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.1)
    print(len(c.assignment()), flush=True)
"""


def test_a_crashed_member_is_expired_after_its_session(cluster: LocalCluster) -> None:
    """``kill -9`` of a member (no leave): the coordinator removes it once
    ``group.consumer.session.timeout.ms`` (6 s here) has passed, and the survivor gets every
    partition; not before (the crashed member's partitions are not handed out early)."""
    group = "crashing"
    survivor = consumer(cluster, group)
    crasher = subprocess.Popen(
        [sys.executable, "-c", CRASHING_MEMBER, cluster.bootstrap, group, TOPIC],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        reader = Reader(survivor)
        reader.until("a split with the other process", lambda: len(owned(survivor)) == 3)
        assert crasher.stdout is not None
        while crasher.stdout.readline().strip() != "3":
            pass
        crasher.kill()
        crasher.wait()
        killed_at = time.monotonic()
        reader.until(
            "the survivor to get everything",
            lambda: owned(survivor) == set(range(PARTITIONS)),
            timeout_s=WAIT_S,
        )
        assert time.monotonic() - killed_at >= 4.0  # the 6 s session, less heartbeat phases
    finally:
        if crasher.poll() is None:
            crasher.kill()
            crasher.wait()
        survivor.close()


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
            response = conn.request(req, 9)
            assert response.topics[0].partitions[0].error_code == error
        # a member's commit needs v9 (the version that carries member epochs), as Kafka's
        epoch = raw_describe(cluster, group).members[0].member_epoch
        v8 = OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=epoch,
            member_id=member.member_id,
            topics=req.topics,
        )
        assert conn.request(v8, 8).topics[0].partitions[0].error_code == (
            ErrorCode.UNSUPPORTED_VERSION
        )
        # OffsetFetch v9 carries the member too: the same checks, a group-level error
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        for member_id, epoch, fetch_error in (
            (member.member_id, 9999, ErrorCode.STALE_MEMBER_EPOCH),
            ("nobody", 1, ErrorCode.UNKNOWN_MEMBER_ID),
            (None, -1, ErrorCode.NONE),  # not a member (an admin client): allowed
        ):
            fetch = OffsetFetchRequest(
                groups=[G(group_id=group, member_id=member_id, member_epoch=epoch, topics=None)]
            )
            assert conn.request(fetch, 9).groups[0].error_code == fetch_error
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
    check_rest_and_cli(cluster, group)
    c1.close()
    c2.close()
    deleted = admin.delete_consumer_groups([group])[group]
    deleted.result(10)
    listed = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    assert group not in listed


def check_rest_and_cli(cluster: LocalCluster, group: str) -> None:
    """REST and ``kraft groups`` show the type, the epochs and each member's current and target
    assignment (the controller's admin API asks the brokers too)."""
    controller = next(iter(cluster.controllers.values()))
    status, listed = rest_call(controller, "GET", "/v1/groups")
    assert status == 200 and {g["group_id"]: g["group_type"] for g in listed}[group] == "consumer"
    status, described = rest_call(cluster.any_broker(), "GET", f"/v1/groups/{group}")
    assert status == 200, described
    assert (described["group_type"], described["state"]) == ("consumer", "Stable")
    assert described["protocol"] == "uniform"
    assert described["group_epoch"] == described["assignment_epoch"] >= 2
    for m in described["members"]:
        assert m["assignment"] == m["target_assignment"]
        assert m["member_epoch"] == described["group_epoch"]
    assigned = sorted(
        p for m in described["members"] for a in m["assignment"] for p in a["partitions"]
    )
    assert assigned == list(range(PARTITIONS))
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "kraft.cli",
            "groups",
            "describe",
            group,
            "--members",
            "--admin",
            controller.admin,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    header, *rows = cli.stdout.split("\n")
    assert "MEMBER-EPOCH" in header and "TARGET-ASSIGNMENT" in header
    assert sum(f"{TOPIC}(" in row for row in rows) == 2


async def aiokafka_list(cluster: LocalCluster) -> list[tuple[str, str]]:
    client = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    await client.start()
    try:
        return [(g[0], g[1]) for g in await client.list_consumer_groups()]
    finally:
        await client.close()


def test_members_ask_for_the_range_assignor(cluster: LocalCluster) -> None:
    """``group.remote.assignor=range``: contiguous ranges, and describe names the assignor."""
    group = "ranged"
    c1 = consumer(cluster, group, **{"group.remote.assignor": "range"})
    c2 = consumer(cluster, group, **{"group.remote.assignor": "range"})
    Reader(c1, c2).until("a balanced split", lambda: len(owned(c1)) == len(owned(c2)) == 3)
    assert sorted([sorted(owned(c1)), sorted(owned(c2))]) == [[0, 1, 2], [3, 4, 5]]
    admin = admin_client(cluster)
    assert admin.describe_consumer_groups([group])[group].result(10).partition_assignor == "range"
    c1.close()
    c2.close()


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


def test_a_static_member_comes_back_to_its_partitions(cluster: LocalCluster) -> None:
    """``group.instance.id``: a closing static member only steps out (member epoch -2), its
    partitions wait for it while the other member keeps its own, and the restarted instance gets
    them back under its new member id without a rebalance."""
    group = "static"
    first = consumer(cluster, group, **{"group.instance.id": "instance-1"})
    other = consumer(cluster, group, **{"group.instance.id": "instance-2"})
    reader = Reader(first, other)
    reader.until("a balanced split", lambda: len(owned(first)) == len(owned(other)) == 3)
    held, others = owned(first), owned(other)
    first.close()
    reader.consumers.remove(first)
    deadline = time.monotonic() + 1.5  # three heartbeats of the other member
    reader.until("time to pass", lambda: time.monotonic() > deadline)
    assert owned(other) == others
    again = consumer(cluster, group, **{"group.instance.id": "instance-1"})
    reader.consumers.append(again)
    reader.until("the instance to get its partitions back", lambda: owned(again) == held)
    assert owned(other) == others
    admin = admin_client(cluster)
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert sorted(m.group_instance_id for m in described.members) == ["instance-1", "instance-2"]
    again.close()
    other.close()


def test_bad_heartbeats_get_kafkas_errors_and_change_nothing(cluster: LocalCluster) -> None:
    """Refused before the group is touched: no group is created, the broker stays up."""
    base = {
        "group_id": "refused",
        "member_id": "m",
        "member_epoch": 0,
        "rebalance_timeout_ms": 10_000,
        "subscribed_topic_names": [TOPIC],
        "topic_partitions": [],
    }
    cases: list[tuple[dict[str, object], ErrorCode, str]] = [
        ({"member_epoch": -3}, ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid."),
        ({"member_id": ""}, ErrorCode.INVALID_REQUEST, "MemberId can't be empty."),
        (
            {"subscribed_topic_names": []},
            ErrorCode.INVALID_REQUEST,
            "SubscribedTopicNames must be set in first request.",
        ),
        ({"server_assignor": "sticky"}, ErrorCode.UNSUPPORTED_ASSIGNOR, "ServerAssignor sticky"),
        ({"member_epoch": 5}, ErrorCode.UNKNOWN_MEMBER_ID, "Member m is not a member"),
    ]
    admin = admin_client(cluster)  # its FindCoordinator creates __consumer_offsets if need be
    # librdkafka waits for the coordinator, then falls back to DescribeGroups: Dead
    dead = admin.describe_consumer_groups(["refused"])["refused"].result(30)
    assert dead.state is ConsumerGroupState.DEAD
    for broker in cluster.brokers.values():
        conn = RawConnection(broker.address)
        try:
            for changes, error, message in cases:
                response = conn.request(ConsumerGroupHeartbeatRequest(**{**base, **changes}), 1)
                if response.error_code == ErrorCode.NOT_COORDINATOR:
                    break
                assert response.error_code == error, (changes, response)
                assert (response.error_message or "").startswith(message), response
        finally:
            conn.close()
    assert raw_describe_error(cluster, "refused") == ErrorCode.GROUP_ID_NOT_FOUND


def raw_describe_error(cluster: LocalCluster, group: str) -> int:
    """The coordinator's ConsumerGroupDescribe error for ``group``."""
    for broker in cluster.brokers.values():
        if not broker.alive():
            continue
        conn = RawConnection(broker.address)
        try:
            response = conn.request(ConsumerGroupDescribeRequest(group_ids=[group]), 0)
        finally:
            conn.close()
        if response.groups[0].error_code != ErrorCode.NOT_COORDINATOR:
            return int(response.groups[0].error_code)
    raise AssertionError(f"no broker coordinates {group}")


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
