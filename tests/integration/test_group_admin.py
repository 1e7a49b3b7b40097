"""Consumer group administration end to end: one controller and three brokers as real
processes, a real confluent-kafka consumer group, and the REST API and ``kraft groups``.

The consumer reads a 3-partition topic and commits part of it; REST (on a broker and on the
controller) and the CLI report lag = high watermark - committed for each partition.  An active
group cannot be deleted or reset (409).  Once the consumer has left, a dry run changes nothing,
``--execute`` moves the offsets (and librdkafka reads them back), and the group is deleted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from integration.cluster_process import LocalCluster, admin_client, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPIC = "lagged"
GROUP = "lag-watchers"
RECORDS_PER_PARTITION = 10
COMMITTED = {0: 4, 1: 7}  # partition 2: nothing committed
EXTRA = {
    "offsets.topic.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "0",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(Path(tmp_path_factory.mktemp("groups")), 1, 3, EXTRA).start()
    try:
        client = admin_client(cluster)  # kept: a collected client cancels its futures
        client.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(timeout=10)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for partition in range(3):
            for i in range(RECORDS_PER_PARTITION):
                producer.produce(TOPIC, f"{partition}-{i}".encode(), partition=partition)
        assert producer.flush(10) == 0, "records not delivered"
        yield cluster
    finally:
        cluster.kill_all()


# --- helpers -------------------------------------------------------------------------------------


def call(admin: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(admin + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=WAIT_S + 5) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def group_path(group: str, *rest: str) -> str:
    return "/".join(["/v1/groups", urllib.parse.quote(group, safe=""), *rest])


def describe(admin: str, group: str = GROUP) -> dict[str, Any]:
    status, body = call(admin, "GET", group_path(group))
    assert status == 200, body
    assert isinstance(body, dict)
    return body


def kraft(admin: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "kraft.cli", *argv, "--admin", admin],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )


def committed_by_partition(group: dict[str, Any]) -> dict[int, int | None]:
    return {p["partition"]: p["committed"] for p in group["partitions"] if p["topic"] == TOPIC}


def consume_and_commit_part(cluster: LocalCluster) -> Consumer:
    """A group member that has read every record and committed only ``COMMITTED``."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": GROUP,
            "client.id": "lag-test",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([TOPIC])
    seen = {0: 0, 1: 0, 2: 0}

    def read_all() -> bool:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            partition = message.partition()
            assert partition is not None
            seen[partition] += 1
        return all(n == RECORDS_PER_PARTITION for n in seen.values())

    wait_for(f"the group to read every record (read so far: {seen})", read_all, WAIT_S, cluster)
    offsets = [TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()]
    result = consumer.commit(offsets=offsets, asynchronous=False)
    assert result is not None and all(tp.error is None for tp in result), result
    return consumer


# --- the test ------------------------------------------------------------------------------------


def test_lag_reset_and_delete_of_a_consumer_group(cluster: LocalCluster) -> None:
    broker_admin = cluster.any_broker().admin
    controller_admin = next(iter(cluster.controllers.values())).admin
    consumer = consume_and_commit_part(cluster)
    try:
        check_lag_while_active(cluster, broker_admin, controller_admin)
        check_an_active_group_is_protected(broker_admin)
    finally:
        consumer.close()  # LeaveGroup: the group becomes Empty
    wait_for(
        "the group to be Empty after its consumer left",
        lambda: describe(broker_admin)["state"] == "Empty",
        WAIT_S,
        cluster,
    )
    check_reset(cluster, broker_admin)
    check_delete(broker_admin, controller_admin)


def check_lag_while_active(cluster: LocalCluster, admin: str, controller_admin: str) -> None:
    group = wait_for(
        "the group to be Stable with its committed offsets",
        lambda: (
            (g := describe(admin))["state"] == "Stable"
            and committed_by_partition(g) == {0: 4, 1: 7, 2: None}
            and g
        ),
        WAIT_S,
        cluster,
    )
    assert (group["protocol_type"], group["members"][0]["client_id"]) == ("consumer", "lag-test")
    [member] = group["members"]
    assert member["assignment"] == [{"topic": TOPIC, "partitions": [0, 1, 2]}]
    for p in group["partitions"]:
        assert p["high_watermark"] == RECORDS_PER_PARTITION, p
        expected = None if p["committed"] is None else p["high_watermark"] - p["committed"]
        assert p["lag"] == expected, p
        assert p["member_id"] == member["member_id"]
    assert group["lag"] == (10 - 4) + (10 - 7)

    # The same from a controller's REST API, which reaches the brokers over the Kafka protocol.
    assert describe(controller_admin)["partitions"] == group["partitions"]
    status, listed = call(controller_admin, "GET", "/v1/groups")
    assert status == 200
    mine = [g for g in listed if g["group_id"] == GROUP]
    assert mine == [
        {
            "group_id": GROUP,
            "state": "Stable",
            "protocol_type": "consumer",
            "coordinator": group["coordinator"]["id"],
            "group_type": "classic",
        }
    ]

    shown = kraft(admin, "groups", "describe", GROUP)
    assert shown.returncode == 0, shown.stderr
    lines = [line.split() for line in shown.stdout.splitlines()]
    assert lines[0] == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    rows = {int(row[2]): row for row in lines[1:]}
    assert rows[0][:6] == [GROUP, TOPIC, "0", "4", "10", "6"]
    assert rows[1][:6] == [GROUP, TOPIC, "1", "7", "10", "3"]
    assert rows[2][:6] == [GROUP, TOPIC, "2", "-", "10", "-"]
    assert all(row[6] == member["member_id"] and row[8] == "lag-test" for row in rows.values())


def check_an_active_group_is_protected(admin: str) -> None:
    status, body = call(admin, "DELETE", group_path(GROUP))
    assert (status, body["error"]) == (409, "NON_EMPTY_GROUP"), body
    refused = kraft(admin, "groups", "delete", GROUP)
    assert refused.returncode == 1 and refused.stderr.startswith("kraft: NON_EMPTY_GROUP: ")
    reset = {"topic": TOPIC, "to": "earliest", "execute": True}
    status, body = call(admin, "POST", group_path(GROUP, "offsets"), reset)
    assert (status, body["error"]) == (409, "NON_EMPTY_GROUP"), body
    assert "Stable" in body["message"]
    assert committed_by_partition(describe(admin)) == {0: 4, 1: 7, 2: None}


def check_reset(cluster: LocalCluster, admin: str) -> None:
    dry = kraft(admin, "groups", "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest")
    assert dry.returncode == 0, dry.stderr
    assert [line.split() for line in dry.stdout.splitlines()] == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        *([GROUP, TOPIC, str(p), "0"] for p in range(3)),
    ]
    assert "Dry run" in dry.stderr
    # (without members, only partitions with a committed offset are described, as in Kafka)
    assert committed_by_partition(describe(admin)) == {0: 4, 1: 7}, "a dry run changed them"

    # by timestamp: every record is older than this, so each partition goes to its end
    future = {"topic": TOPIC, "to": {"timestamp": 4_000_000_000_000}}
    status, planned = call(admin, "POST", group_path(GROUP, "offsets"), future)
    assert status == 200, planned
    assert [p["new_offset"] for p in planned["partitions"]] == [10, 10, 10]

    done = kraft(
        admin,
        "groups",
        "reset-offsets",
        "--group",
        GROUP,
        "--topic",
        TOPIC,
        "--to-earliest",
        "--execute",
    )
    assert done.returncode == 0, done.stderr
    group = describe(admin)
    assert committed_by_partition(group) == {0: 0, 1: 0, 2: 0}
    assert [p["lag"] for p in group["partitions"]] == [10, 10, 10]

    explicit = {"topic": TOPIC, "to": {"offsets": {"1": 5}}, "execute": True}
    status, moved = call(admin, "POST", group_path(GROUP, "offsets"), explicit)
    assert status == 200, moved
    assert moved["partitions"] == [
        {"topic": TOPIC, "partition": 1, "previous_offset": 0, "new_offset": 5}
    ]
    # librdkafka reads the reset offsets back
    reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP})
    try:
        found = reader.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=10)
        assert [tp.offset for tp in found] == [0, 5, 0]
    finally:
        reader.close()


def check_delete(admin: str, controller_admin: str) -> None:
    deleted = kraft(admin, "groups", "delete", GROUP)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == f"Deletion of requested consumer groups ('{GROUP}') was successful.\n"
    status, body = call(admin, "GET", group_path(GROUP))
    assert (status, body["error"]) == (404, "GROUP_ID_NOT_FOUND")
    status, body = call(controller_admin, "DELETE", group_path(GROUP))
    assert (status, body["error"]) == (404, "GROUP_ID_NOT_FOUND")
    listed = kraft(admin, "groups", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert GROUP not in [g["group_id"] for g in json.loads(listed.stdout)]
