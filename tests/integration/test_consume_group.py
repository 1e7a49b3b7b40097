"""``kraft consume TOPIC --group G`` as a real member of a consumer group, end to end: one
controller and three brokers as processes (test_consumer_groups.py's cluster), ``kraft`` CLI
processes, and confluent-kafka / kafka-python members (``group_consumer_proc.py``) in the same
groups.

What is proved:

* two CLI members and a confluent-kafka member (the leader, range) share a 6-partition topic:
  DescribeGroups shows every partition owned by exactly one of them; every record is printed at
  least once, and records produced while the group is stable exactly once; a CLI member stopped
  with SIGTERM leaves at once (LeaveGroup: the rebalance comes long before its session timeout);
* a CLI member leads a group with a kafka-python member that offers only roundrobin;
* a ``--max-messages`` run, then another: the second starts exactly where the first committed
  (no gap, no repeat); the group is Empty after each run and its lag 0 at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupState

from integration import test_consumer_groups
from integration.cluster_process import LocalCluster, http_json
from integration.test_consumer_groups import (
    Member,
    Members,
    Rec,
    broker_assignment,
    committed,
    create_topic,
    describe,
    produce,
    wait_for,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 45.0  # generous: a 2-core machine shared with other tests
SESSION_MS = 20_000  # a CLI member's: a rebalance well before this is its LeaveGroup's doing

# The same fixtures: one controller and three brokers for the module, the members of a test.
cluster = test_consumer_groups.cluster
members = test_consumer_groups.members


def kraft_argv(cluster: LocalCluster, topic: str, group: str, *options: str) -> list[str]:
    admin = cluster.any_broker().admin
    return [
        sys.executable,
        *("-m", "kraft.cli", "consume", topic, "--group", group, "--json", "--admin", admin),
        *options,
    ]


def kraft_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


@dataclass
class CliMember:
    """A ``kraft consume --group --json`` process and the records it has printed."""

    client_id: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[str] | None = None
    printed: list[Rec] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> CliMember:
        self.proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=self.log_path.open("a"),
            text=True,
            cwd=REPO,
            env=kraft_env(),
        )
        threading.Thread(target=self._read, name=f"read-{self.client_id}", daemon=True).start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            r = json.loads(line)
            with self.lock:
                self.printed.append((r["partition"], r["offset"], r["value"]))

    def records(self) -> list[Rec]:
        with self.lock:
            return list(self.printed)

    def stop(self) -> float:
        """SIGTERM: it commits, leaves and exits 0; when it was told."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        told = time.monotonic()
        code = self.proc.wait(30)
        assert code == 0, f"{self} exited {code}\n{self.tail()}"
        assert "Processed a total of" in self.tail(), self.tail()
        return told

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-15:])
        return "(no stderr)"

    def __str__(self) -> str:
        return f"kraft consume member {self.client_id}"


@pytest.fixture
def cli() -> Iterator[list[CliMember]]:
    started: list[CliMember] = []
    try:
        yield started
    finally:
        for m in started:
            m.kill()


def start_cli(
    started: list[CliMember], cluster: LocalCluster, tmp_path: Path, topic: str, group: str
) -> CliMember:
    client_id = f"{group}-kraft-{len(started)}"
    argv = kraft_argv(
        cluster,
        topic,
        group,
        "--from-beginning",
        *("--consumer-property", f"client.id={client_id}"),
        *("--consumer-property", f"session.timeout.ms={SESSION_MS}"),
        *("--consumer-property", "heartbeat.interval.ms=500"),
    )
    member = CliMember(client_id, argv, tmp_path / f"{client_id}.stderr.log").start()
    started.append(member)
    return member


# --- waiting, with the evidence ------------------------------------------------------------------


def why(cluster: LocalCluster, cli: list[CliMember], members: Members) -> Any:
    def tails() -> str:
        mine = "\n".join(f"--- {m}:\n{m.tail()}" for m in cli)
        return f"{mine}\n{members.tails()}\n{cluster.logs()}"

    return tails


def wait_owned(
    cluster: LocalCluster, group: str, owners: list[str], partitions: int, evidence: Any
) -> dict[str, frozenset[int]]:
    """Until DescribeGroups shows the group Stable with exactly ``owners`` (client ids) as
    members, every partition owned by exactly one of them; client id -> partitions."""
    seen: dict[str, Any] = {}

    def owned() -> dict[str, frozenset[int]] | None:
        desc = describe(cluster, group)
        split = broker_assignment(desc)
        seen["last"] = (desc.state, split)
        every = sorted(p for ps in split.values() for p in ps)
        ok = sorted(split) == sorted(owners) and every == list(range(partitions))
        return split if ok and desc.state == ConsumerGroupState.STABLE else None

    result: dict[str, frozenset[int]] = wait_for(
        f"group {group} owned by {owners}", owned, WAIT_S, lambda: f"{seen}\n{evidence()}"
    )
    return result


def consumed(readers: list[CliMember | Member]) -> Counter[tuple[int, int]]:
    """How often each (partition, offset) was printed or consumed, checking the values."""
    counts: Counter[tuple[int, int]] = Counter()
    for m in readers:
        counts.update((p, o) for p, o, _ in m.records())
    return counts


def wait_consumed(
    readers: list[CliMember | Member], produced: dict[tuple[int, int], str], evidence: Any
) -> None:
    def done() -> bool:
        for m in readers:
            for p, o, v in m.records():
                assert produced.get((p, o), v) == v, f"{m} read {v!r} at {p}/{o}"
        return set(produced) <= set(consumed(readers))

    def missing() -> str:
        gone = sorted(set(produced) - set(consumed(readers)))
        return f"{len(gone)} missing, first {gone[:10]}\n{evidence()}"

    wait_for("every record consumed", done, WAIT_S, missing)


def topic_with_records(
    cluster: LocalCluster, topic: str, partitions: int, count: int
) -> dict[tuple[int, int], str]:
    create_topic(cluster, topic, partitions)
    return produce(cluster, topic, partitions, count, "a")


def rest_group(cluster: LocalCluster, group: str) -> dict[str, Any]:
    body: dict[str, Any] = http_json(f"{cluster.any_broker().admin}/v1/groups/{group}")
    return body


# --- the tests -----------------------------------------------------------------------------------


def test_cli_members_share_a_group_with_confluent(
    cluster: LocalCluster, members: Members, cli: list[CliMember], tmp_path: Path
) -> None:
    topic, group, parts = "cli-shared", "cli-shared-group", 6
    evidence = why(cluster, cli, members)
    produced = topic_with_records(cluster, topic, parts, 120)
    c = members.start("confluent", group, topic, assignor="range")  # joins first: the leader
    wait_owned(cluster, group, [c.client_id], parts, evidence)
    k1 = start_cli(cli, cluster, tmp_path, topic, group)
    k2 = start_cli(cli, cluster, tmp_path, topic, group)
    split = wait_owned(cluster, group, [c.client_id, k1.client_id, k2.client_id], parts, evidence)
    assert sorted(len(ps) for ps in split.values()) == [2, 2, 2], split
    assert describe(cluster, group).partition_assignor == "range"
    listed = {m["client_id"] for m in rest_group(cluster, group)["members"]}
    assert {k1.client_id, k2.client_id} <= listed
    readers: list[CliMember | Member] = [c, k1, k2]
    wait_consumed(readers, produced, evidence)

    # Stable: what is produced now is printed exactly once, by the partition's owner.
    before = consumed(readers)
    steady = produce(cluster, topic, parts, 120, "b")
    wait_consumed(readers, steady, evidence)
    after = consumed(readers) - before
    twice = {k: n for k, n in after.items() if k in steady and n > 1}
    assert not twice, f"printed more than once in a stable group: {sorted(twice)[:10]}"
    for m, owned_partitions in ((k1, split[k1.client_id]), (k2, split[k2.client_id])):
        assert {p for p, o, _ in m.records() if (p, o) in steady} == set(owned_partitions)

    # SIGTERM: commit and LeaveGroup; the others take its partitions at once.
    told = k1.stop()
    wait_owned(cluster, group, [c.client_id, k2.client_id], parts, evidence)
    assert time.monotonic() - told < SESSION_MS / 2000, "no LeaveGroup: the session expired"
    produced |= steady | produce(cluster, topic, parts, 60, "c")
    wait_consumed(readers, produced, evidence)
    k2.stop()
    c.stop()
    ends = {p: max(o for q, o in produced if q == p) + 1 for p in range(parts)}
    assert committed(cluster, group, topic, parts) == ends


def test_a_cli_member_leads_kafka_python_with_roundrobin(
    cluster: LocalCluster, members: Members, cli: list[CliMember], tmp_path: Path
) -> None:
    topic, group, parts = "cli-leads", "cli-leads-group", 4
    evidence = why(cluster, cli, members)
    produced = topic_with_records(cluster, topic, parts, 80)
    k = start_cli(cli, cluster, tmp_path, topic, group)
    wait_owned(cluster, group, [k.client_id], parts, evidence)
    py = members.start("kafka-python", group, topic, assignor="roundrobin")
    split = wait_owned(cluster, group, [k.client_id, py.client_id], parts, evidence)
    assert sorted(len(ps) for ps in split.values()) == [2, 2], split
    assert describe(cluster, group).partition_assignor == "roundrobin"
    wait_for(  # what kafka-python reports lags DescribeGroups by a poll
        "kafka-python to report what DescribeGroups says it owns",
        lambda: py.assignment == split[py.client_id],
        WAIT_S,
        evidence,
    )
    produced |= produce(cluster, topic, parts, 80, "b")
    wait_consumed([k, py], produced, evidence)
    py.stop()
    k.stop()


def test_a_second_run_continues_where_the_first_committed(cluster: LocalCluster) -> None:
    topic, group, parts = "cli-restart", "cli-restart-group", 3
    produced = topic_with_records(cluster, topic, parts, 90)

    def run(*options: str) -> list[Rec]:
        argv = kraft_argv(cluster, topic, group, "--from-beginning", *options)
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=90, cwd=REPO, env=kraft_env()
        )
        assert done.returncode == 0, done.stderr
        # LeaveGroup: Empty at once (the session timeout, 45 s, has not passed).
        assert rest_group(cluster, group)["state"] == "Empty", done.stderr
        records = [json.loads(line) for line in done.stdout.splitlines()]
        return [(r["partition"], r["offset"], r["value"]) for r in records]

    first = run("--max-messages", "40")
    second = run("--max-messages", "50")
    assert (len(first), len(second)) == (40, 50)
    seen = [(p, o) for p, o, _ in first + second]
    assert sorted(seen) == sorted(produced), "a gap or a repeat"
    assert all(produced[(p, o)] == v for p, o, v in first + second)
    ends_of_first: dict[int, int] = {}
    for p, o, _ in first:
        ends_of_first[p] = o + 1
    for p in range(parts):
        starts = [o for q, o, _ in second if q == p]
        if starts:
            assert min(starts) == ends_of_first.get(p, 0), (p, ends_of_first)
    assert run("--timeout-ms", "2000") == []
    group_now = rest_group(cluster, group)
    assert group_now["lag"] == 0 and group_now["members"] == []
    assert {p["partition"]: p["lag"] for p in group_now["partitions"]} == dict.fromkeys(
        range(parts), 0
    )
