"""Leader elections on three controllers and three brokers as real processes, driven by
confluent-kafka's ``AdminClient.elect_leaders`` and by ``kraft elect-leaders``.

Only metadata is asserted (who leads, the ISR, per-partition errors): data replication between
brokers is not part of this test. Partitions are made leaderless the way it happens in
production, by stopping brokers: with replicas [a, b], stopping a then b leaves b as the last
ISR member; when a returns it is not in the ISR, so only an unclean election can give the
partition a leader.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from integration import cluster_process
from integration.cluster_process import LocalCluster, ServerProcess, admin_client, running_cluster

pytestmark = pytest.mark.integration

UNCLEAN = "unclean.leader.election.enable"


# The REST API's partition views may lack a key while a change is under way.
wait_for = functools.partial(
    cluster_process.wait_for, poll_s=0.05, ignore=(AssertionError, OSError, KeyError)
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = Path(tmp_path_factory.mktemp("elections"))
    extra = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}
    with running_cluster(root, extra) as cluster:
        yield cluster


def elect(
    cluster: LocalCluster, election_type: ElectionType, partitions: list[tuple[str, int]] | None
) -> dict[tuple[str, int], str]:
    """Each partition's outcome: its Kafka error name, or NONE."""
    wanted = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
    client = admin_client(cluster)  # the handle must outlive its future
    results = client.elect_leaders(election_type, wanted).result(timeout=15)
    out = {}
    for tp, error in results.items():
        out[(tp.topic, tp.partition)] = "NONE" if error is None else _name(error)
    return out


def _name(error: KafkaError | KafkaException) -> str:
    code = error.code() if isinstance(error, KafkaError) else error.args[0].code()
    return {
        KafkaError.ELECTION_NOT_NEEDED: "ELECTION_NOT_NEEDED",
        KafkaError.UNKNOWN_TOPIC_OR_PART: "UNKNOWN_TOPIC_OR_PARTITION",
        KafkaError.PREFERRED_LEADER_NOT_AVAILABLE: "PREFERRED_LEADER_NOT_AVAILABLE",
        KafkaError.ELIGIBLE_LEADERS_NOT_AVAILABLE: "ELIGIBLE_LEADERS_NOT_AVAILABLE",
    }.get(code, str(code))


def partition(node: ServerProcess, topic: str, pid: int = 0) -> dict[str, Any]:
    described = node.get(f"/v1/topics/{topic}")
    return next(p for p in described["partitions"] if p["partition"] == pid)


def create_topic(cluster: LocalCluster, name: str, assignment: list[list[int]]) -> None:
    client = admin_client(cluster)
    topic = NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment)
    futures = client.create_topics([topic])
    futures[name].result(timeout=15)


def test_nothing_to_elect_in_a_healthy_cluster(cluster: LocalCluster) -> None:
    brokers = sorted(cluster.brokers)
    create_topic(cluster, "healthy", [brokers, brokers[1:] + brokers[:1], brokers[::-1]])
    wanted = [("healthy", 0), ("healthy", 1), ("healthy", 2), ("healthy", 7), ("nope", 0)]
    assert elect(cluster, ElectionType.PREFERRED, wanted) == {
        ("healthy", 0): "ELECTION_NOT_NEEDED",
        ("healthy", 1): "ELECTION_NOT_NEEDED",
        ("healthy", 2): "ELECTION_NOT_NEEDED",
        ("healthy", 7): "UNKNOWN_TOPIC_OR_PARTITION",
        ("nope", 0): "UNKNOWN_TOPIC_OR_PARTITION",
    }
    assert set(elect(cluster, ElectionType.UNCLEAN, wanted[:3]).values()) == {"ELECTION_NOT_NEEDED"}
    assert elect(cluster, ElectionType.PREFERRED, None) == {}
    assert elect(cluster, ElectionType.UNCLEAN, None) == {}


def test_unclean_elections_bring_leaderless_partitions_back(cluster: LocalCluster) -> None:
    a, b, c = sorted(cluster.brokers)
    create_topic(cluster, "by-request", [[a, b]])
    create_topic(cluster, "by-config", [[a, b]])
    observer = cluster.brokers[c]  # never stopped here; its REST API shows the metadata
    cluster.brokers[a].stop()  # controlled shutdown: b leads, a leaves the ISR
    wait_for("b leading", lambda: partition(observer, "by-request")["leader"] == b, 10, cluster)
    cluster.brokers[b].stop()  # the last ISR member: nobody leads
    cluster.brokers[a].launch().wait_ready()
    for topic in ("by-request", "by-config"):
        p = wait_for(
            "a leaderless partition", lambda t=topic: _leaderless(observer, t), 10, cluster
        )
        assert p["isr"] == [b], "a is back, but not in the ISR"

    # Preferred: a is the preferred replica, active, but not in the ISR.
    assert elect(cluster, ElectionType.PREFERRED, [("by-request", 0)]) == {
        ("by-request", 0): "PREFERRED_LEADER_NOT_AVAILABLE"
    }
    assert elect(cluster, ElectionType.UNCLEAN, [("by-request", 0)]) == {("by-request", 0): "NONE"}
    p = wait_for("a leading", lambda: _led_by(observer, "by-request", a), 10, cluster)
    assert p["isr"] == [a]

    # Turning unclean.leader.election.enable on elects at once (the config's own batch).
    _set_config(cluster, "by-config", UNCLEAN, "true")
    p = wait_for("a leading by-config", lambda: _led_by(observer, "by-config", a), 10, cluster)
    assert p["isr"] == [a]

    # The command line, through a broker: nothing left to do.
    done = _kraft_elect(cluster, "--election-type", "unclean", "--topic", "by-config")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "by-config-0: ELECTION_NOT_NEEDED: " + (
        "Leader election not needed for topic partition.\n"
    )
    cluster.brokers[b].launch().wait_ready()
    # b is back; whether it is in the ISRs yet depends on replication, which is not what this
    # test exercises: each answer must only be consistent, and decide the exit status.
    every = _kraft_elect(
        cluster, "--election-type", "preferred", "--all-topic-partitions", "--json"
    )
    outcomes = json.loads(every.stdout)
    assert {o["error"] for o in outcomes} <= {"NONE", "PREFERRED_LEADER_NOT_AVAILABLE"}, outcomes
    failed = any(o["error"] != "NONE" for o in outcomes)
    assert every.returncode == (1 if failed else 0), every.stderr
    assert ("ELECTION_FAILED" in every.stderr) == failed


def _leaderless(node: ServerProcess, topic: str) -> dict[str, Any] | None:
    p = partition(node, topic)
    return p if p["leader"] == -1 else None


def _led_by(node: ServerProcess, topic: str, broker: int) -> dict[str, Any] | None:
    p = partition(node, topic)
    return p if p["leader"] == broker else None


def _set_config(cluster: LocalCluster, topic: str, key: str, value: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)],
    )
    client = admin_client(cluster)
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=15)


def _kraft_elect(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "kraft.cli", "elect-leaders"]
    command += ["--bootstrap-server", cluster.bootstrap, *args]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=60, env=dict(os.environ), check=False
    )
