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

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import NewTopic

from integration.cluster_process import LocalCluster, admin_client
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


@pytest.fixture(scope="module")
def lone_controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    extra = {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin"}
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
    cluster = controller.get("/v1/cluster")
    assert cluster["brokers"] == [], "no broker registered"


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
