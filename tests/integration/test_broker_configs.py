"""BROKER and BROKER_LOGGER config resources on a real cluster (1 controller, 3 brokers), as
``kafka-configs.sh --entity-type brokers`` / ``broker-loggers`` use them.

BROKER: dynamic configs per broker ("<id>") and for the cluster default (""), kept in the
metadata log; each broker describes its own, a per-broker value winning over the default.
confluent-kafka's ``AdminClient``, kafka-python's ``KafkaAdminClient`` and aiokafka's
``AIOKafkaAdminClient`` (BROKER only) describe them.  The first two refuse an empty
resource name locally (librdkafka: "Invalid ConfigResource"; kafka-python: "Broker resource
names must be an integer"), so the cluster default goes through kafka-python's protocol classes
on its own connection, as kafka-configs.sh ``--entity-default`` sends it.

BROKER_LOGGER: the named broker lists its Python loggers and changes their levels live.
confluent-kafka 2.16.1's ``ConfigResource.Type`` has no BROKER_LOGGER, so only kafka-python
(which has it) shows it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource as AioResource
from aiokafka.admin.config_resource import ConfigResourceType as AioType
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kafka.admin import AlterConfigOp, KafkaAdminClient
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType as KpType
from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest

from integration.cluster_process import LocalCluster, ServerProcess, wait_for

pytestmark = pytest.mark.integration

BROKER, BROKER_LOGGER = 4, 8
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC_OR_DEFAULT = 2, 3, (4, 5)
INVALID_REQUEST, INVALID_CONFIG = 42, 40
KEY = "log.retention.ms"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(Path(tmp_path_factory.mktemp("broker-configs")), 1, 3).start()
    try:
        yield cluster
    finally:
        cluster.kill_all()


def send(node: ServerProcess, request: Any) -> Any:
    """One request on kafka-python's own connection to ``node`` (the name "" or a request
    the admin client has no call for)."""
    admin = KafkaAdminClient(bootstrap_servers=node.address, request_timeout_ms=10000)
    try:
        manager = admin._manager  # no public call for these
        return manager.run(manager.send, request, node.node_id)
    finally:
        admin.close()


def described(node: ServerProcess, resource_type: int, name: str) -> tuple[int, dict[str, Any]]:
    D = DescribeConfigsRequest
    response = send(
        node,
        D(
            resources=[
                D.DescribeConfigsResource(
                    resource_type=resource_type, resource_name=name, configuration_keys=None
                )
            ]
        ),
    )
    (result,) = response.results
    return result.error_code, {c.name: (c.value, c.config_source) for c in result.configs}


def set_default(node: ServerProcess, changes: dict[str, str | None]) -> int:
    Inc = IncrementalAlterConfigsRequest
    ops = [
        Inc.AlterConfigsResource.AlterableConfig(
            name=k, config_operation=1 if v is None else 0, value=v
        )
        for k, v in changes.items()
    ]
    response = send(
        node,
        Inc(
            resources=[
                Inc.AlterConfigsResource(resource_type=BROKER, resource_name="", configs=ops)
            ]
        ),
    )
    return response.responses[0].error_code


def aiokafka_value(cluster: LocalCluster, broker_id: int) -> str | None:
    """``KEY`` of one broker, as aiokafka's AIOKafkaAdminClient.describe_configs reads it."""

    async def describe() -> str | None:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await admin.start()
        try:
            resource = AioResource(AioType.BROKER, str(broker_id), {KEY: None})
            (response,) = await admin.describe_configs([resource])
        finally:
            await admin.close()
        (resource_result,) = response.resources
        entries = {e[0]: e[1] for e in resource_result[4]}
        return entries.get(KEY)

    return asyncio.run(describe())


def confluent_value(admin: AdminClient, broker_id: int) -> tuple[str | None, int]:
    resource = ConfigResource("BROKER", str(broker_id))
    entry = admin.describe_configs([resource])[resource].result(10)[KEY]
    return entry.value, entry.source


def test_per_broker_and_cluster_default_configs(cluster: LocalCluster) -> None:
    a, b, c = sorted(cluster.brokers)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # confluent-kafka: IncrementalAlterConfigs on broker a only (the client sends it to a)
    resource = ConfigResource(
        "BROKER",
        str(a),
        incremental_configs=[
            ConfigEntry(KEY, "3600000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    assert admin.incremental_alter_configs([resource])[resource].result(10) is None
    wait_for(
        "a's value", lambda: confluent_value(admin, a) == ("3600000", DYNAMIC_BROKER), 10, cluster
    )
    assert confluent_value(admin, b)[1] in STATIC_OR_DEFAULT
    # the cluster default reaches every broker without an override of its own
    node_b = cluster.brokers[b]
    assert set_default(node_b, {KEY: "7200000"}) == 0
    for broker_id in (b, c):
        wait_for(
            "the default",
            lambda i=broker_id: confluent_value(admin, i) == ("7200000", DYNAMIC_DEFAULT),
            10,
            cluster,
        )
    assert confluent_value(admin, a) == ("3600000", DYNAMIC_BROKER)
    error, configs = described(node_b, BROKER, "")
    assert error == 0 and configs[KEY] == ("7200000", DYNAMIC_DEFAULT)
    # kafka-python: describe and change broker c's own value
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
    got = kp.alter_configs([KpResource(KpType.BROKER, str(c), configs={KEY: "1800000"})])
    assert got == {"broker": {str(c): "OK"}}, got
    wait_for(
        "c's value",
        lambda: (
            kp.describe_configs([KpResource(KpType.BROKER, str(c))])["broker"][str(c)][KEY]["value"]
            == "1800000"
        ),
        10,
        cluster,
    )
    # aiokafka's admin (BROKER resources only) sees it too, and changes it back
    assert aiokafka_value(cluster, c) == "1800000"
    # a broker describes only itself (Kafka: INVALID_REQUEST "Unexpected broker id")
    assert described(node_b, BROKER, str(a))[0] == INVALID_REQUEST
    # bad input: an unknown key is refused, nothing changed
    assert set_default(node_b, {"no.such.key": "1"}) != 0
    assert described(node_b, BROKER, "")[1][KEY] == ("7200000", DYNAMIC_DEFAULT)
    # deleting the default and the overrides brings the static/default value back
    assert set_default(node_b, {KEY: None}) == 0
    kp.alter_configs(
        [
            KpResource(KpType.BROKER, str(i), configs={KEY: (AlterConfigOp.DELETE, None)})
            for i in (a, c)
        ]
    )
    for broker_id in (a, b, c):
        wait_for(
            "the value gone",
            lambda i=broker_id: confluent_value(admin, i)[1] in STATIC_OR_DEFAULT,
            10,
            cluster,
        )
    kp.close()


def test_broker_loggers_are_described_and_changed_on_the_named_broker(
    cluster: LocalCluster,
) -> None:
    a, b, _ = sorted(cluster.brokers)
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
    loggers = kp.describe_configs([KpResource(KpType.BROKER_LOGGER, str(a))])["broker_logger"][
        str(a)
    ]
    assert loggers["root"]["value"] in ("INFO", "WARN")
    assert "broker.dispatcher" in loggers and "kraft.node" in "".join(loggers)
    assert all(e["config_source"] == "DYNAMIC_BROKER_LOGGER_CONFIG" for e in loggers.values())
    before_b = described(cluster.brokers[b], BROKER_LOGGER, str(b))[1]["broker.dispatcher"]
    got = kp.alter_configs(
        [KpResource(KpType.BROKER_LOGGER, str(a), configs={"broker.dispatcher": "TRACE"})],
        raise_on_unknown=False,
    )
    assert got == {"broker_logger": {str(a): "OK"}}, got

    def level(node: int, name: str = "broker.dispatcher") -> Any:
        return described(cluster.brokers[node], BROKER_LOGGER, str(node))[1][name][0]

    assert level(a) == "TRACE"  # changed at once, on a only
    assert level(b) == before_b[0]
    # DELETE: inherit from the parent again
    kp.alter_configs(
        [
            KpResource(
                KpType.BROKER_LOGGER,
                str(a),
                configs={"broker.dispatcher": (AlterConfigOp.DELETE, None)},
            )
        ],
        raise_on_unknown=False,
    )
    assert level(a) == level(a, "broker")
    # bad input: Kafka's errors, nothing changed
    bad = {
        "no.such.logger": ("SET", "DEBUG", INVALID_CONFIG),
        "broker.dispatcher": ("SET", "LOUD", INVALID_CONFIG),
        "root": ("DELETE", None, INVALID_REQUEST),
    }
    for name, (op, value, error) in bad.items():
        answer = kp.alter_configs(
            [KpResource(KpType.BROKER_LOGGER, str(a), configs={name: (op, value)})],
            raise_on_unknown=False,
        )
        assert answer["broker_logger"][str(a)].startswith(f"[Error {error}]"), (name, answer)
    assert level(a) == level(a, "broker")
    assert described(cluster.brokers[a], BROKER_LOGGER, str(b))[0] == INVALID_REQUEST
    kp.close()
