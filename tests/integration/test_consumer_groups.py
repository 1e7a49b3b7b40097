"""Consumer groups with real clients and real processes: the acceptance list of issue 6.

One controller and three brokers for the module (``__consumer_offsets`` with 5 partitions,
``group.initial.rebalance.delay.ms=300``, ``group.min.session.timeout.ms=1000`` so that a
crashed member is noticed in seconds).  Each group member is its own process
(``group_consumer_proc.py``: confluent-kafka, kafka-python or aiokafka), reporting its
assignment, the records it consumed and its commits as JSON lines, so that a test can SIGTERM
it (a clean close: LeaveGroup) or ``kill -9`` it (a crash: only its session timeout tells).

What is proved:

* the three clients share one group: every partition owned by exactly one member (as each
  client says, and as DescribeGroups says), rebalanced on a join, a clean leave (faster than the
  leaver's session timeout) and a crash; every record consumed at least once; a second group
  receives every record too;
* committed offsets are honoured across restarts, from one client to the next: each starts
  exactly where the previous one committed (no gap, nothing re-read after a clean close);
* librdkafka's ``range``, ``roundrobin`` and ``cooperative-sticky`` assignors, with a member
  leaving (cooperative: the others keep their partitions, nothing revoked);
* ListGroups, DescribeGroups and DeleteGroups through confluent's AdminClient and kafka-python's
  KafkaAdminClient (NON_EMPTY_GROUP for a group with members);
* Debian's ``kcat -G`` (librdkafka 2.0.2) in a group with librdkafka 2.16;
* ``kill -9`` of the group's coordinator: the group goes on on the new coordinator with its
  committed offsets (nothing re-read from 0), and a new member joins there.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import (
    ConsumerGroupState,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, NewTopic
from kafka.admin import KafkaAdminClient

from broker.coordinator.records import OFFSETS_TOPIC, partition_for
from integration.cluster_process import LocalCluster

pytestmark = pytest.mark.integration

PROC = Path(__file__).with_name("group_consumer_proc.py")
OFFSETS_PARTITIONS = 5
INITIAL_DELAY_MS = 300
EXTRA = {
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "group.initial.rebalance.delay.ms": str(INITIAL_DELAY_MS),
    "group.min.session.timeout.ms": "1000",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}
SESSION_MS = 3000  # a member's session timeout, unless a test says otherwise
LONG_SESSION_MS = 20_000  # a leaver's: a rebalance well before this is the LeaveGroup's doing
BALANCE_TIMEOUT_S = 30.0
CONSUME_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0

Rec = tuple[int, int, str]  # partition, offset, value


# --- group members as processes -----------------------------------------------------------------


@dataclass
class Member:
    """One ``group_consumer_proc.py`` process and what it has reported so far."""

    client: str
    client_id: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[str] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Member:
        stderr = self.log_path.open("a")
        self.proc = subprocess.Popen(
            [sys.executable, str(PROC), *self.argv],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            bufsize=1,
        )
        threading.Thread(target=self._read, name=f"read-{self.client_id}", daemon=True).start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):  # a line cut short by SIGKILL
                event = json.loads(line)
                event["t"] = time.monotonic()
                with self.lock:
                    self.events.append(event)

    def _of(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e["ev"] == kind]

    @property
    def assignment(self) -> frozenset[int] | None:
        """The last full assignment the client reported (None: none yet)."""
        found = self._of("assignment")
        return frozenset(found[-1]["partitions"]) if found else None

    def assignments(self) -> list[frozenset[int]]:
        return [frozenset(e["partitions"]) for e in self._of("assignment")]

    def records(self, since: float = 0.0) -> list[Rec]:
        return [(p, o, v) for e in self._of("records") if e["t"] >= since for p, o, v in e["recs"]]

    def committed(self) -> dict[int, int]:
        """partition -> the last offset this member committed."""
        out: dict[int, int] = {}
        for e in self._of("committed"):
            out.update({int(p): o for p, o in e["offsets"].items()})
        return out

    def revoked(self) -> list[list[int]]:
        return [e["partitions"] for e in self._of("revoked") if e["partitions"]]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> float:
        """SIGTERM: the client closes (LeaveGroup) and the process exits 0; when it was told."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        told = time.monotonic()
        self.wait_exit()
        return told

    def wait_exit(self) -> None:
        assert self.proc is not None
        try:
            code = self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{self} did not close in {STOP_TIMEOUT_S} s\n{self.tail()}"
            ) from None
        assert code == 0 and self._of("closed"), f"{self} exited {code}\n{self.tail()}"

    def kill(self) -> None:
        """kill -9: no LeaveGroup, no commit."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def tail(self, lines: int = 15) -> str:
        try:
            stderr = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            stderr = "(no stderr)"
        with self.lock:
            last = [
                {k: v for k, v in e.items() if k != "recs"}
                | ({"n": len(e["recs"])} if "recs" in e else {})
                for e in self.events[-8:]
            ]
        return f"--- {self} events: {last}\n    stderr:\n{stderr}"

    def __str__(self) -> str:
        state = (
            "running" if self.alive() else f"exited {self.proc.returncode if self.proc else '-'}"
        )
        return f"member {self.client_id} ({self.client}, {state})"


class Members:
    """The members a test started; every one still running is killed at the end."""

    def __init__(self, cluster: LocalCluster, root: Path) -> None:
        self.cluster = cluster
        self.root = root
        self.all: list[Member] = []

    def start(
        self,
        client: str,
        group: str,
        topic: str,
        *,
        assignor: str = "",
        session_ms: int = SESSION_MS,
        commit: str = "sync",
        max_batch: int = 500,
        stop_after: int = 0,
    ) -> Member:
        client_id = f"{group}-{client}-{len(self.all)}"
        argv = [
            f"--client={client}",
            f"--bootstrap={self.cluster.bootstrap}",
            f"--group={group}",
            f"--topic={topic}",
            f"--client-id={client_id}",
            f"--session-timeout-ms={session_ms}",
            f"--heartbeat-ms={min(500, session_ms // 3)}",
            f"--commit={commit}",
            f"--max-batch={max_batch}",
            f"--stop-after={stop_after}",
        ]
        if assignor:
            argv.append(f"--assignor={assignor}")
        member = Member(client, client_id, argv, self.root / f"{client_id}.stderr.log")
        self.all.append(member.start())
        return member

    def tails(self) -> str:
        return "\n".join(m.tail() for m in self.all)

    def kill_all(self) -> None:
        for m in self.all:
            m.kill()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """1 controller + 3 brokers, started; every node killed on the way out (also when the
    start fails)."""
    cluster = LocalCluster.create(Path(tmp_path_factory.mktemp("groups")), 1, 3, EXTRA)
    try:
        yield cluster.start()
    finally:
        cluster.kill_all()


@pytest.fixture
def members(cluster: LocalCluster, tmp_path: Path) -> Iterator[Members]:
    started = Members(cluster, tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


# --- waiting, with the evidence -----------------------------------------------------------------


def wait_for(
    what: str, condition: Callable[[], Any], timeout_s: float, why: Callable[[], str]
) -> Any:
    """Poll ``condition`` until truthy; on timeout fail naming ``what``, with ``why()``."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if value := condition():
                return value
        except (AssertionError, OSError, KafkaException) as exc:
            last = exc
        time.sleep(0.1)
    raise AssertionError(
        f"timed out after {timeout_s:g} s waiting for {what} (last: {last!r})\n{why()}"
    )


def evidence(cluster: LocalCluster, members: Members) -> Callable[[], str]:
    return lambda: f"{members.tails()}\n{cluster.logs()}"


def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 5000})


def describe(
    cluster: LocalCluster, group: str, client: AdminClient | None = None
) -> ConsumerGroupDescription:
    client = client or admin(cluster)
    result: ConsumerGroupDescription = client.describe_consumer_groups([group], request_timeout=5)[
        group
    ].result(timeout=10)
    return result


def broker_assignment(desc: ConsumerGroupDescription) -> dict[str, frozenset[int]]:
    """client id -> partitions, as DescribeGroups reports the group."""
    return {
        m.client_id: frozenset(tp.partition for tp in m.assignment.topic_partitions)
        for m in desc.members
    }


def wait_balanced(
    cluster: LocalCluster,
    members: Members,
    group: str,
    owners: list[Member],
    partitions: int,
    what: str,
) -> dict[str, frozenset[int]]:
    """Until ``owners`` (and no one else) own every partition exactly once, as each client
    says and as DescribeGroups says (Stable); client id -> partitions."""
    seen: dict[str, Any] = {}
    client = admin(cluster)

    def balanced() -> dict[str, frozenset[int]] | None:
        mine = {m.client_id: m.assignment for m in owners}
        seen["clients"] = mine
        if any(a is None for a in mine.values()):
            return None
        owned = [p for a in mine.values() if a is not None for p in a]
        if sorted(owned) != list(range(partitions)):
            return None
        desc = describe(cluster, group, client)
        seen["broker"] = (desc.state, broker_assignment(desc))
        if desc.state != ConsumerGroupState.STABLE or broker_assignment(desc) != mine:
            return None
        return {k: v for k, v in mine.items() if v is not None}

    def why() -> str:
        return f"last seen: {seen}\n{evidence(cluster, members)()}"

    result: dict[str, frozenset[int]] = wait_for(
        f"{what}: group {group} balanced over {[m.client_id for m in owners]}",
        balanced,
        BALANCE_TIMEOUT_S,
        why,
    )
    return result


def wait_consumed(
    cluster: LocalCluster,
    members: Members,
    readers: Iterable[Member],
    produced: dict[tuple[int, int], str],
    what: str,
) -> None:
    """Until ``readers`` together have consumed every record of ``produced`` (at least once);
    every record they consumed must be one that was produced."""
    readers = list(readers)

    def missing() -> set[tuple[int, int]]:
        consumed: dict[tuple[int, int], str] = {}
        for m in readers:
            for p, o, v in m.records():
                consumed[(p, o)] = v
        wrong = {k: (v, produced.get(k)) for k, v in consumed.items() if produced.get(k) != v}
        assert not wrong, f"{what}: records not as produced: {sorted(wrong.items())[:5]}"
        return set(produced) - set(consumed)

    def done() -> bool:
        return not missing()

    def why() -> str:
        gone = sorted(missing())
        return f"{len(gone)} not consumed, first {gone[:10]}\n{evidence(cluster, members)()}"

    wait_for(f"{what}: every record consumed", done, CONSUME_TIMEOUT_S, why)


# --- topics and records -------------------------------------------------------------------------


def create_topic(cluster: LocalCluster, name: str, partitions: int, rf: int = 1) -> None:
    client = admin(cluster)
    client.create_topics([NewTopic(name, partitions, rf)], request_timeout=15)[name].result(20)


def produce(
    cluster: LocalCluster, topic: str, partitions: int, count: int, tag: str
) -> dict[tuple[int, int], str]:
    """``count`` records spread over the partitions; (partition, offset) -> value."""
    out: dict[tuple[int, int], str] = {}
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            out[(msg.partition(), msg.offset())] = msg.value().decode()

    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "message.timeout.ms": 20_000}
    )
    for i in range(count):
        producer.produce(
            topic, f"{tag}-{i}".encode(), partition=i % partitions, on_delivery=delivered
        )
    left = producer.flush(30)
    assert left == 0 and not errors, f"produce to {topic}: {left} left, errors {errors[:3]}"
    return out


def committed(cluster: LocalCluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    """partition -> the group's committed offset (OffsetFetch; no join)."""
    consumer = ConfluentConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
        errors = [tp.error for tp in found if tp.error is not None]
        if errors:
            raise KafkaException(errors[0])
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def first_offsets(records: Iterable[Rec]) -> dict[int, int]:
    first: dict[int, int] = {}
    for p, o, _ in records:
        first.setdefault(p, o)
    return first


# --- the tests ----------------------------------------------------------------------------------


def test_three_clients_share_one_group(cluster: LocalCluster, members: Members) -> None:
    """confluent-kafka, kafka-python and aiokafka in one group on 6 partitions: after each join,
    the crash (kill -9) and the clean leave, every partition is owned by exactly one member;
    every record is read at least once; a second group reads every record too."""
    topic, group, parts = "shared", "shared-group", 6
    create_topic(cluster, topic, parts)
    why = evidence(cluster, members)
    produced = produce(cluster, topic, parts, 300, "a")
    # librdkafka is told roundrobin, kafka-python offers range then roundrobin, aiokafka only
    # roundrobin: the coordinator must pick the one every member supports.
    a = members.start("confluent", group, topic, assignor="roundrobin")
    other_group = members.start("kafka-python", "shared-copy", topic)
    wait_balanced(cluster, members, group, [a], parts, "one member")
    b = members.start("kafka-python", group, topic, session_ms=LONG_SESSION_MS)
    wait_balanced(cluster, members, group, [a, b], parts, "kafka-python joined")
    c = members.start("aiokafka", group, topic)
    split = wait_balanced(cluster, members, group, [a, b, c], parts, "aiokafka joined")
    assert sorted(len(ps) for ps in split.values()) == [2, 2, 2], split
    assert describe(cluster, group).partition_assignor == "roundrobin"
    produced |= produce(cluster, topic, parts, 300, "b")
    wait_consumed(cluster, members, [a, b, c], produced, "three members")

    c.kill()
    killed = time.monotonic()
    wait_balanced(cluster, members, group, [a, b], parts, "aiokafka member killed (-9)")
    crash_s = time.monotonic() - killed
    produced |= produce(cluster, topic, parts, 300, "c")
    wait_consumed(cluster, members, [a, b, c], produced, "after the crash")

    left = b.stop()
    wait_balanced(cluster, members, group, [a], parts, "kafka-python member closed")
    leave_s = time.monotonic() - left
    assert leave_s < LONG_SESSION_MS / 2000, (
        f"the group rebalanced {leave_s:.1f} s after a clean close: LeaveGroup not honoured "
        f"(the leaver's session timeout is {LONG_SESSION_MS / 1000:g} s)\n{why()}"
    )
    produced |= produce(cluster, topic, parts, 300, "d")
    wait_consumed(cluster, members, [a, b, c], produced, "after the clean leave")
    wait_consumed(cluster, members, [other_group], produced, "the second group")
    a.stop()
    other_group.stop()
    print(
        f"rebalanced {crash_s:.1f} s after kill -9 (session {SESSION_MS} ms),"
        f" {leave_s:.1f} s after SIGTERM to a member (session {LONG_SESSION_MS} ms)"
    )


def test_committed_offsets_honoured_on_restart(cluster: LocalCluster, members: Members) -> None:
    """One member at a time, each a different client, each stopping after ~60 records: each
    starts exactly at the offsets its predecessor committed; together they read everything."""
    topic, group, parts = "resume", "resume-group", 3
    create_topic(cluster, topic, parts)
    why = evidence(cluster, members)
    produced = produce(cluster, topic, parts, 300, "r")
    commits: dict[int, int] = {}
    sequence: list[Member] = []
    for client in ("confluent", "kafka-python", "aiokafka", "confluent"):
        m = members.start(client, group, topic, max_batch=20, stop_after=60)
        sequence.append(m)
        m.wait_exit()
        got = m.records()
        assert got, f"{m} read nothing\n{why()}"
        starts = first_offsets(got)
        for p, first in starts.items():
            assert first == commits.get(p, 0), (
                f"{m} began partition {p} at offset {first}, but the group had committed"
                f" {commits.get(p, 0)} (gap or re-read)\n{why()}"
            )
        # OffsetFetch has what the member said it committed (kafka-python also commits the
        # position of a partition it read nothing from).
        fetched = committed(cluster, group, topic, parts)
        mine = m.committed()
        assert mine and {p: fetched[p] for p in mine} == mine, f"{m}: OffsetFetch {fetched}"
        commits = {p: o for p, o in fetched.items() if o >= 0}
    last = members.start("kafka-python", group, topic)
    wait_consumed(cluster, members, [*sequence, last], produced, "the sequence of members")
    for p, first in first_offsets(last.records()).items():
        assert first == commits.get(p, 0), f"{last}: partition {p} began at {first}"
    last.stop()
    ends = {p: max(o for q, o in produced if q == p) + 1 for p in range(parts)}
    assert committed(cluster, group, topic, parts) == ends


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "cooperative-sticky"])
def test_librdkafka_assignors(cluster: LocalCluster, members: Members, assignor: str) -> None:
    """Three confluent members split 6 partitions 2/2/2 in the assignor's pattern (members in
    member-id order, as DescribeGroups lists them); one leaves and the other two take its
    partitions (cooperative-sticky: without giving any of theirs up)."""
    topic, group, parts = f"assign-{assignor}", f"assign-{assignor}-group", 6
    create_topic(cluster, topic, parts)
    produced = produce(cluster, topic, parts, 120, assignor)
    trio = [members.start("confluent", group, topic, assignor=assignor) for _ in range(3)]
    split = wait_balanced(cluster, members, group, trio, parts, f"{assignor}: three members")
    desc = describe(cluster, group)
    assert desc.partition_assignor == assignor
    by_member_id = [split[m.client_id] for m in sorted(desc.members, key=lambda m: m.member_id)]
    if assignor == "range":
        assert by_member_id == [{0, 1}, {2, 3}, {4, 5}], by_member_id
    elif assignor == "roundrobin":
        assert by_member_id == [{0, 3}, {1, 4}, {2, 5}], by_member_id
    else:
        assert sorted(len(ps) for ps in by_member_id) == [2, 2, 2], by_member_id
    wait_consumed(cluster, members, trio, produced, assignor)

    before = {m.client_id: m.assignment for m in trio}
    revoked_before = {m.client_id: len(m.revoked()) for m in trio}
    trio[0].stop()
    after = wait_balanced(cluster, members, group, trio[1:], parts, f"{assignor}: one left")
    assert sorted(len(ps) for ps in after.values()) == [3, 3], after
    if assignor == "cooperative-sticky":
        for m in trio[1:]:
            old = before[m.client_id]
            assert old is not None and old <= after[m.client_id], (
                f"{m} had {sorted(old or ())}, now {sorted(after[m.client_id])}: not sticky"
            )
            assert len(m.revoked()) == revoked_before[m.client_id], (
                f"{m} gave up partitions in a cooperative rebalance: {m.revoked()}"
            )
    produced |= produce(cluster, topic, parts, 60, f"{assignor}-more")
    wait_consumed(cluster, members, trio, produced, f"{assignor} after the leave")
    for m in trio[1:]:
        m.stop()


def test_admin_lists_describes_and_deletes_groups(cluster: LocalCluster, members: Members) -> None:
    """Both admin clients list and describe a Stable group of two (state, protocol, members,
    assignments, coordinator); deleting it fails with NON_EMPTY_GROUP while it has members
    and, once Empty, succeeds and takes its committed offsets with it."""
    topic, group, parts = "admin-groups", "admin-group", 4
    create_topic(cluster, topic, parts)
    produce(cluster, topic, parts, 40, "adm")
    pair = [
        members.start("confluent", group, topic, assignor="roundrobin"),
        members.start("kafka-python", group, topic, assignor="roundrobin"),
    ]
    split = wait_balanced(cluster, members, group, pair, parts, "two members")
    client = admin(cluster)

    listed = client.list_consumer_groups(request_timeout=10).result(timeout=15)
    assert not listed.errors, listed.errors
    ours = {g.group_id: g for g in listed.valid}
    assert group in ours, f"ListGroups: {sorted(ours)}"
    assert ours[group].state == ConsumerGroupState.STABLE
    assert not ours[group].is_simple_consumer_group

    desc = describe(cluster, group)
    assert desc.state == ConsumerGroupState.STABLE
    assert desc.partition_assignor == "roundrobin"
    assert not desc.is_simple_consumer_group
    assert sorted(m.client_id for m in desc.members) == sorted(split)
    assert len({m.member_id for m in desc.members}) == 2
    offsets_md = client.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC]
    leader = offsets_md.partitions[partition_for(group, OFFSETS_PARTITIONS)].leader
    assert desc.coordinator.id == leader, "the coordinator is the offsets partition's leader"

    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10_000)
    try:
        kp_listed = kp.list_groups()
        assert any(_group_id(g) == group for g in kp_listed), f"kafka-python: {kp_listed}"
        kp_desc = kp.describe_groups([group])[group]
        assert kp_desc["group_state"] == "Stable", kp_desc
        assert kp_desc["protocol_type"] == "consumer" and kp_desc["protocol_data"] == "roundrobin"
        kp_members = {m["client_id"]: m for m in kp_desc["members"]}
        assert sorted(kp_members) == sorted(split), kp_desc
        for client_id, partitions in split.items():
            assignment = kp_members[client_id]["member_assignment"]
            got = {p for t in assignment["assigned_partitions"] for p in t["partitions"]}
            assert got == partitions, f"kafka-python sees {client_id} with {assignment}"

        refused = client.delete_consumer_groups([group], request_timeout=10)[group]
        with pytest.raises(KafkaException) as non_empty:
            refused.result(timeout=15)
        assert non_empty.value.args[0].code() == KafkaError.NON_EMPTY_GROUP, non_empty.value
        assert kp.delete_groups([group]) == {group: "NonEmptyGroupError"}

        for m in pair:
            m.stop()
        wait_for(
            "the group to be Empty",
            lambda: describe(cluster, group).state == ConsumerGroupState.EMPTY,
            15,
            evidence(cluster, members),
        )
        assert committed(cluster, group, topic, parts) == {p: 10 for p in range(parts)}
        client.delete_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
        assert committed(cluster, group, topic, parts) == {p: -1001 for p in range(parts)}
        listed = client.list_consumer_groups(request_timeout=10).result(timeout=15)
        assert group not in {g.group_id for g in listed.valid}

        # kafka-python deletes an empty group too.
        other = members.start("aiokafka", "admin-group-2", topic, stop_after=40)
        other.wait_exit()
        assert kp.delete_groups(["admin-group-2"]) == {"admin-group-2": "OK"}
        assert committed(cluster, "admin-group-2", topic, parts) == {p: -1001 for p in range(parts)}
    finally:
        kp.close()


def _group_id(listing: Any) -> str:
    if isinstance(listing, dict):
        return str(listing["group_id"])
    return str(listing[0])


KCAT_CONF = {
    "client.id": "kcat-member",
    "partition.assignment.strategy": "range",
    "session.timeout.ms": "6000",
    "heartbeat.interval.ms": "500",
    "auto.commit.interval.ms": "200",
    "auto.offset.reset": "earliest",
}


def test_kcat_consumes_as_a_group_member(cluster: LocalCluster, members: Members) -> None:
    """``kcat -G`` (librdkafka 2.0.2) and a confluent-kafka member (librdkafka 2.16) share a
    group and each read exactly its partitions; on SIGTERM kcat commits what it read and
    leaves, and the other member goes on from kcat's commits."""
    exe = shutil.which("kcat") or shutil.which("kafkacat")
    assert exe is not None, "kcat is not installed (CI installs the Debian package)"
    topic, group, parts = "kcat-group-topic", "kcat-group", 4
    create_topic(cluster, topic, parts)
    mate = members.start("confluent", group, topic, assignor="range")
    wait_balanced(cluster, members, group, [mate], parts, "before kcat")
    log_path = members.root / "kcat.stderr.log"
    conf = [arg for k, v in KCAT_CONF.items() for arg in ("-X", f"{k}={v}")]
    argv = [exe, "-b", cluster.bootstrap, "-G", group, topic, *conf, "-u", "-f", "%p|%o|%s\\n"]
    kcat = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log_path.open("w"), text=True)
    assert kcat.stdout is not None
    lines: list[str] = []
    stdout = kcat.stdout
    threading.Thread(target=lambda: lines.extend(stdout), daemon=True).start()

    def why() -> str:
        return f"kcat stderr:\n{log_path.read_text()[-2000:]}\n{evidence(cluster, members)()}"

    def kcat_records() -> list[Rec]:
        split_lines = (line.rstrip("\n").split("|", 2) for line in list(lines))
        return [(int(p), int(o), v) for p, o, v in split_lines]

    def shared() -> dict[str, frozenset[int]] | None:
        desc = describe(cluster, group)
        split = broker_assignment(desc)
        owned = sorted(p for ps in split.values() for p in ps)
        if desc.state != ConsumerGroupState.STABLE or owned != list(range(parts)):
            return None
        return split if len(split) == 2 and split.get(mate.client_id) == mate.assignment else None

    try:
        split = wait_for("kcat and confluent sharing the group", shared, BALANCE_TIMEOUT_S, why)
        assert set(split) == {"kcat-member", mate.client_id} and all(split.values()), split
        produced = produce(cluster, topic, parts, 200, "kcat")
        wait_for(
            "kcat and confluent to read every record",
            lambda: {(p, o) for p, o, _ in [*kcat_records(), *mate.records()]} >= set(produced),
            CONSUME_TIMEOUT_S,
            why,
        )
        assert {p for p, _, _ in kcat_records()} == split["kcat-member"], why()
        assert {p for p, _, _ in mate.records()} == split[mate.client_id], why()
        assert {(p, o): v for p, o, v in kcat_records()} == {
            k: v for k, v in produced.items() if k[0] in split["kcat-member"]
        }
        kcat.send_signal(signal.SIGTERM)
        assert kcat.wait(STOP_TIMEOUT_S) == 0, why()
        ends = {p: max(o for q, o in produced if q == p) + 1 for p in range(parts)}
        fetched = committed(cluster, group, topic, parts)
        assert all(fetched[p] == ends[p] for p in split["kcat-member"]), (
            f"kcat's commits {fetched}, ends {ends}"
        )
        wait_balanced(cluster, members, group, [mate], parts, "kcat left")
        left = time.monotonic()
        produced_after = produce(cluster, topic, parts, 40, "kcat-after")
        wait_for(
            "the remaining member to read what was produced after kcat left",
            lambda: {(p, o) for p, o, _ in mate.records(since=left)} >= set(produced_after),
            CONSUME_TIMEOUT_S,
            why,
        )
        first = first_offsets(mate.records(since=left))
        assert first == ends, f"after kcat left, {mate} began at {first}, commits were {ends}"
        mate.stop()
    finally:
        if kcat.poll() is None:
            kcat.kill()
            kcat.wait()


def test_group_recovers_after_coordinator_kill(cluster: LocalCluster, members: Members) -> None:
    """kill -9 of the broker that coordinates the group: the new coordinator has its committed
    offsets, the members go on without re-reading, a new member joins there; then the broker
    is restarted."""
    topic, group, parts = "failover-groups", "failover-group", 4
    create_topic(cluster, topic, parts, rf=3)
    why = evidence(cluster, members)
    produced = produce(cluster, topic, parts, 200, "before")
    pair = [
        members.start("confluent", group, topic, assignor="roundrobin"),
        members.start("kafka-python", group, topic, assignor="roundrobin"),
    ]
    wait_balanced(cluster, members, group, pair, parts, "two members")
    wait_consumed(cluster, members, pair, produced, "before the kill")
    ends = {p: max(o for q, o in produced if q == p) + 1 for p in range(parts)}
    wait_for(
        "every record committed",
        lambda: committed(cluster, group, topic, parts) == ends,
        15,
        why,
    )
    coordinator = describe(cluster, group).coordinator.id
    md = admin(cluster).list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC]
    assert md.partitions[partition_for(group, OFFSETS_PARTITIONS)].leader == coordinator
    victim = cluster.brokers[coordinator]

    def fetch() -> dict[int, int]:
        return committed(cluster, group, topic, parts)

    def new_coordinator() -> bool:
        # Metadata, not DescribeGroups: librdkafka 2.16 can abort the whole process when a
        # DescribeGroups times out while the coordinator is down (`eonce->refcnt > 0` assertion,
        # confluentinc/librdkafka#4605; seen here).
        md = admin(cluster).list_topics(OFFSETS_TOPIC, timeout=5).topics[OFFSETS_TOPIC]
        return md.partitions[offsets_partition].leader not in (coordinator, -1)

    offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
    victim.kill()
    killed = time.monotonic()
    try:
        wait_for("a new leader of the group's offsets partition", new_coordinator, 30, why)
        # Every OffsetFetch answered from now on has the offsets (while the new coordinator
        # loads, it answers COORDINATOR_LOAD_IN_PROGRESS, which librdkafka retries).
        found = wait_for("OffsetFetch from the new coordinator", fetch, 30, why)
        assert found == ends, f"the new coordinator answered {found}, committed were {ends}"
        offsets_s = time.monotonic() - killed
        produced_after = produce(cluster, topic, parts, 200, "after")
        third = members.start("aiokafka", group, topic)
        trio = [*pair, third]
        wait_balanced(cluster, members, group, trio, parts, "a member joined the new coordinator")
        wait_consumed(cluster, members, trio, produced | produced_after, "after the kill")
        reread = [
            (m.client_id, p, o) for m in trio for p, o, _ in m.records(since=killed) if o < ends[p]
        ]
        assert not reread, f"records committed before the kill were read again: {reread[:10]}"
        assert describe(cluster, group).coordinator.id != coordinator
        print(f"offsets served by the new coordinator {offsets_s:.1f} s after the kill")
        for m in trio:
            m.stop()
    finally:
        victim.launch()
        victim.wait_ready()
