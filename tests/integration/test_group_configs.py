"""Group configs (KIP-848's GROUP config resource, type 32) on one controller and three brokers
(real processes): described and altered with confluent-kafka's and kafka-python's admin
clients, and honoured by the group coordinator.

The brokers' and controller's ``group.consumer.min.heartbeat.interval.ms`` and
``group.consumer.min.session.timeout.ms`` are lowered (100 ms, 1 s) so that a group may be given
a 200 ms heartbeat interval or a 2 s session; the broker defaults stay 5 s and 45 s.  What is
proved:

* DescribeConfigs on a group that does not exist answers both keys with the broker's values,
  source DEFAULT_CONFIG;
* IncrementalAlterConfigs sets a group's heartbeat interval (then described with source
  GROUP_CONFIG); an unknown key, a value below the broker's minimum, an empty group name are
  refused (INVALID_CONFIG / INVALID_REQUEST) and nothing changes; kafka-python's legacy
  AlterConfigs replaces a group's set and its DescribeConfigs sees it;
* a group's session timeout is its members': a raw member that falls silent is removed after
  the group's 2 s, the broker's being 45 s;
* a ``group.protocol=consumer`` confluent-kafka member of that group gets the override: the raw
  ConsumerGroupHeartbeat response carries 200 ms (another group: 5000 ms), and the member
  heartbeats about five times a second (counted in the brokers' /metrics).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka.admin import ConfigResource as KafkaPythonResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from integration.clients import request_count
from integration.cluster_process import LocalCluster, admin_client, wait_for
from integration.raw_client import RawConnection
from kafka_protocol._codec import Request
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    IncrementalAlterConfigsRequest,
)

pytestmark = pytest.mark.integration

TOPIC = "group-configs"
SESSION, HEARTBEAT = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"
EXTRA = {
    "offsets.topic.num.partitions": "3",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.min.session.timeout.ms": "1000",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}
TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(Path(tmp_path_factory.mktemp("groupcfg")), 1, 3, EXTRA).start()
    try:
        admin = admin_client(cluster)
        admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(timeout=10)
        yield cluster
    finally:
        cluster.kill_all()


def described(cluster: LocalCluster, group: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.GROUP, group)
    admin = admin_client(cluster)  # kept until answered
    result: dict[str, ConfigEntry] = admin.describe_configs([resource])[resource].result(
        timeout=TIMEOUT_S
    )
    return result


def alter(cluster: LocalCluster, group: str, **values: str) -> None:
    entries = [
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in values.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin = admin_client(cluster)
    admin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT_S)


def test_describe_and_alter_with_confluent(cluster: LocalCluster) -> None:
    defaults = described(cluster, "no-such-group")
    assert {k: (e.value, e.source) for k, e in defaults.items()} == {
        SESSION: ("45000", ConfigSource.DEFAULT_CONFIG.value),
        HEARTBEAT: ("5000", ConfigSource.DEFAULT_CONFIG.value),
    }
    alter(cluster, "configured", consumer_heartbeat_interval_ms="200")
    after = described(cluster, "configured")
    assert (after[HEARTBEAT].value, after[HEARTBEAT].source) == (
        "200",
        ConfigSource.GROUP_CONFIG.value,
    )
    assert (after[SESSION].value, after[SESSION].source) == (
        "45000",
        ConfigSource.DEFAULT_CONFIG.value,
    )
    for bad, code in (
        ({"consumer_heartbeat_interval_ms": "50"}, "INVALID_CONFIG"),  # below the minimum
        ({"share_session_timeout_ms": "50000"}, "INVALID_CONFIG"),  # no share groups here
        ({"consumer_session_timeout_ms": "abc"}, "INVALID_CONFIG"),
    ):
        with pytest.raises(KafkaException) as refused:
            alter(cluster, "configured", **bad)
        assert refused.value.args[0].name() == code, bad
    assert described(cluster, "configured")[HEARTBEAT].value == "200", "nothing changed"


def test_kafka_python_alter_and_describe(cluster: LocalCluster) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20_000)

    def alter(configs: dict[str, str], incremental: bool) -> object:
        resource = KafkaPythonResource(ConfigResourceType.GROUP, "kp", configs=configs)
        return admin.alter_configs([resource], incremental=incremental)

    def sources() -> dict[str, tuple[str, str]]:
        resource = KafkaPythonResource(ConfigResourceType.GROUP, "kp", configs=None)
        answer = admin.describe_configs([resource], config_filter="all")["group"]["kp"]
        return {k: (v["value"], v["config_source"]) for k, v in answer.items()}

    try:
        assert alter({SESSION: "50000"}, incremental=True) == {"group": {"kp": "OK"}}
        assert sources() == {
            SESSION: ("50000", "DYNAMIC_GROUP_CONFIG"),
            HEARTBEAT: ("5000", "DEFAULT_CONFIG"),
        }
        assert alter({SESSION: "55000", HEARTBEAT: "6000"}, incremental=False) == {
            "group": {"kp": "OK"}
        }
        assert sources() == {
            SESSION: ("55000", "DYNAMIC_GROUP_CONFIG"),
            HEARTBEAT: ("6000", "DYNAMIC_GROUP_CONFIG"),
        }
    finally:
        admin.close()


def test_the_default_group_resource_is_refused(cluster: LocalCluster) -> None:
    """confluent's and kafka-python's clients will not send a group named "": a raw request."""
    request = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=32,
                resource_name="",
                configs=[
                    IncrementalAlterConfigsRequest.AlterableConfig(
                        name=SESSION, config_operation=0, value="50000"
                    )
                ],
            )
        ]
    )
    conn = RawConnection(cluster.any_broker().address)
    try:
        (answer,) = conn.request(request, 1).responses
    finally:
        conn.close()
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.INVALID_REQUEST,
        "Default group resources are not allowed.",
    )


def on_coordinator(cluster: LocalCluster, group: str, request: Request, version: int) -> Any:
    """The answer of ``group``'s coordinator to a raw request (the others: NOT_COORDINATOR)."""
    for broker in cluster.brokers.values():
        conn = RawConnection(broker.address)
        try:
            response = conn.request(request, version)
        finally:
            conn.close()
        error = getattr(response, "error_code", None)
        if error is None:  # ConsumerGroupDescribe: per group
            error = response.groups[0].error_code
        if error != ErrorCode.NOT_COORDINATOR:
            return response
    raise AssertionError("no coordinator answered")


def joined(cluster: LocalCluster, group: str, member_id: str) -> Any:
    """A raw member joins ``group`` (ConsumerGroupHeartbeat v1, epoch 0): the response."""
    join = ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=10_000,
        subscribed_topic_names=[TOPIC],
        topic_partitions=[],
    )
    response = on_coordinator(cluster, group, join, 1)
    assert response.error_code == ErrorCode.NONE, response
    return response


def heartbeat_interval(cluster: LocalCluster, group: str) -> int:
    """A raw member joining ``group`` (then leaving): its heartbeat_interval_ms."""
    response = joined(cluster, group, "raw-member")
    leave = ConsumerGroupHeartbeatRequest(group_id=group, member_id="raw-member", member_epoch=-1)
    on_coordinator(cluster, group, leave, 1)
    return int(response.heartbeat_interval_ms)


def test_a_member_gets_its_groups_heartbeat_interval(cluster: LocalCluster) -> None:
    alter(cluster, "fast", consumer_heartbeat_interval_ms="200")
    member = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "fast",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        member.subscribe([TOPIC])
        deadline = time.monotonic() + TIMEOUT_S
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.1)
        assert member.assignment(), "the member joined"

        def heartbeats() -> float:
            return sum(request_count(b, "ConsumerGroupHeartbeat") for b in cluster.brokers.values())

        before, started = heartbeats(), time.monotonic()
        while time.monotonic() - started < 2.0:
            member.poll(0.1)
        rate = (heartbeats() - before) / (time.monotonic() - started)
        # 200 ms: about 5 a second (the broker default of 5 s would give at most one in 2 s)
        assert 3 <= rate <= 8, rate
        # the response itself, to a raw member of the same group and of another one
        assert (
            wait_for("the fast interval", lambda: heartbeat_interval(cluster, "fast"), 20, cluster)
            == 200
        )
        assert heartbeat_interval(cluster, "slow") == 5000
    finally:
        member.close()


def test_a_silent_member_leaves_after_its_groups_session_timeout(cluster: LocalCluster) -> None:
    """A 2 s session for one group (the broker's is 45 s): a member that stops heartbeating is
    removed after about 2 s, not before."""
    alter(
        cluster, "short", consumer_session_timeout_ms="2000", consumer_heartbeat_interval_ms="500"
    )
    joined(cluster, "short", "silent")
    started = time.monotonic()

    def members() -> list[str]:
        response = on_coordinator(
            cluster, "short", ConsumerGroupDescribeRequest(group_ids=["short"]), 0
        )
        return [m.member_id for m in response.groups[0].members]

    assert members() == ["silent"]
    wait_for("the silent member's removal", lambda: not members(), 10, cluster, poll_s=0.1)
    assert 1.5 <= time.monotonic() - started <= 6.0
