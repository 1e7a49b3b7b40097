"""The CONTROLLER listener with Kafka's StandardAuthorizer: brokers' APIs need CLUSTER_ACTION.

Before authorization an anonymous client could register a fake broker on a controller (it
became unfenced and could never be removed).  With ``authorizer.class.name`` set, a principal
without CLUSTER_ACTION on the cluster (here ``User:ANONYMOUS``, every PLAINTEXT client) is
refused BrokerRegistration, BrokerHeartbeat, metadata Fetch, AllocateProducerIds and (without
DESCRIBE) DescribeQuorum with CLUSTER_AUTHORIZATION_FAILED, and an admin request sent straight
to the controller is checked in full (TOPIC_AUTHORIZATION_FAILED).  When the brokers' principal
is a super user the cluster forms and serves clients as before.
"""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import NewTopic

from broker.kafka_client import KafkaConnection
from broker.security.client_security import ClientSecurity
from broker.security.session import SecurityProtocol
from integration.cluster_process import LocalCluster, ServerProcess, admin_client
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AllocateProducerIdsRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreateTopicsRequest,
    DescribeQuorumRequest,
    FetchRequest,
)
from kafka_protocol.types import BrokerId, TopicName

pytestmark = pytest.mark.integration

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ADMIN_PASSWORD = "admin-secret-password"  # a PLAIN user, for the REST API (HTTP Basic)


def registered_brokers(node: ServerProcess, user: str, password: str) -> list[Any]:
    """``/v1/cluster``'s brokers, asked as ``user`` (the REST API takes the node's PLAIN
    users once an authorizer is on)."""
    request = urllib.request.Request(node.admin + "/v1/cluster")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())["brokers"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def lone_controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    extra = {
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:admin",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required"
        f' user_admin="{ADMIN_PASSWORD}";',
    }
    cluster = LocalCluster.create(tmp_path_factory.mktemp("ctl-authz"), 1, 0, extra).start()
    try:
        yield cluster
    finally:
        cluster.kill_all()


def test_anonymous_cannot_act_as_a_broker(lone_controller: LocalCluster) -> None:
    controller = lone_controller.controllers[1]
    conn = RawConnection(controller.address)
    try:
        registration = BrokerRegistrationRequest(
            broker_id=BrokerId(99), cluster_id="x", incarnation_id=uuid.uuid4()
        )
        denied = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        assert conn.request(registration, 2).error_code == denied
        heartbeat = BrokerHeartbeatRequest(broker_id=BrokerId(99), broker_epoch=1)
        assert conn.request(heartbeat, 0).error_code == denied
        fetch = FetchRequest(replica_id=BrokerId(99), max_wait_ms=0, topics=[])
        assert conn.request(fetch, 12).error_code == denied
        allocate = AllocateProducerIdsRequest(broker_id=BrokerId(99), broker_epoch=1)
        assert conn.request(allocate, 0).error_code == denied
        assert conn.request(DescribeQuorumRequest(), 1).error_code == denied
        create = CreateTopicsRequest(
            topics=[CreateTopicsRequest.CreatableTopic(name=TopicName("sneaky"), num_partitions=1)],
            timeout_ms=5000,
        )
        [result] = conn.request(create, 7).topics
        assert result.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert not conn.is_closed_by_peer(), "refused, not disconnected"
    finally:
        conn.close()
    assert registered_brokers(controller, "admin", ADMIN_PASSWORD) == [], "none registered"


def test_brokers_with_a_super_user_principal_form_the_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    extra = {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS"}
    cluster = LocalCluster.create(tmp_path_factory.mktemp("ctl-ok"), 1, 1, extra).start()
    try:
        admin = admin_client(cluster)
        futures = admin.create_topics([NewTopic("allowed", 1, 1)], operation_timeout=10)
        futures["allowed"].result(15)
        assert "allowed" in admin.list_topics(timeout=10).topics
    finally:
        cluster.kill_all()


# --- an authenticated principal is not a broker -----------------------------------------------

BROKER_PASSWORD = "broker-secret-password"
ALICE_PASSWORD = "alice-secret-password"


@pytest.fixture(scope="module")
def sasl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One controller and one broker; the CONTROLLER listener is SASL_PLAINTEXT (PLAIN users
    broker and alice), the broker logs in as broker, a super user."""
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
        f' username="broker" password="{BROKER_PASSWORD}"'
        f' user_broker="{BROKER_PASSWORD}" user_alice="{ALICE_PASSWORD}";'
    )
    extra = {
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:broker",
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "listener.name.controller.plain.sasl.jaas.config": jaas,
        "sasl.mechanism.controller.protocol": "PLAIN",
    }
    cluster = LocalCluster.create(tmp_path_factory.mktemp("ctl-sasl"), 1, 1, extra).start()
    try:
        yield cluster
    finally:
        cluster.kill_all()


def test_an_authenticated_user_without_cluster_action_cannot_register(
    sasl_cluster: LocalCluster,
) -> None:

    broker = next(iter(sasl_cluster.brokers.values()))
    brokers = registered_brokers(broker, "broker", BROKER_PASSWORD)
    assert [b["fenced"] for b in brokers] == [False]
    controller = sasl_cluster.controllers[1]
    host, port = controller.address.rsplit(":", 1)
    alice = ClientSecurity(SecurityProtocol.SASL_PLAINTEXT, None, "PLAIN", "alice", ALICE_PASSWORD)

    async def as_alice() -> list[int]:
        conn = await KafkaConnection.open(host, int(port), "alice", alice)
        try:
            registration = BrokerRegistrationRequest(
                broker_id=BrokerId(99),
                cluster_id=controller.properties["cluster.id"],
                incarnation_id=uuid.uuid4(),
                listeners=[
                    BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="127.0.0.1", port=1)
                ],
            )
            registered = await conn.request(registration, 4)
            quorum = await conn.request(DescribeQuorumRequest(), 1)
            return [registered.error_code, quorum.error_code]
        finally:
            conn.close()

    denied = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    assert asyncio.run(as_alice()) == [denied, denied]
    brokers = registered_brokers(broker, "broker", BROKER_PASSWORD)
    assert 99 not in {b["id"] for b in brokers}
