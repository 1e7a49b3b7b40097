"""The ACL matrix, admin half: create/delete/alter topics and describe configs through
confluent-kafka, kafka-python and aiokafka, allowed and refused, and KIP-430's authorized
operations (the node, principals and ACLs: ``integration.acl_matrix``)."""

from __future__ import annotations

import asyncio
import uuid

import kafka.errors
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewPartitions as AioNewPartitions
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from aiokafka.errors import (
    TopicAuthorizationFailedError as AioTopicDenied,
)
from confluent_kafka import (
    KafkaError,
    TopicCollection,
)
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kafka.admin import ACLOperation as KpAclOperation
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import NewTopic as KpNewTopic

from integration.acl.principals import (
    CLOSED,
    OPEN,
    Conn,
    confluent_error,
    unique_name,
)
from integration.clients import (
    CLIENT_TIMEOUT_MS,
    TIMEOUT_S,
)

pytestmark = pytest.mark.integration


def test_confluent_admin(c: Conn, topics: dict[str, str]) -> None:
    admin = AdminClient(c.conf())
    denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    create = [NewTopic(unique_name(OPEN, "new"), 1, 1), NewTopic(unique_name(CLOSED, "new"), 1, 1)]
    futures = admin.create_topics(create, operation_timeout=TIMEOUT_S)
    assert [confluent_error(futures[t.topic]) for t in create] == [None, denied]

    pair = [topics["open-delete-confluent"], topics["closed-delete-confluent"]]
    futures = admin.delete_topics(pair, operation_timeout=TIMEOUT_S)
    assert [confluent_error(futures[t]) for t in pair] == [None, denied]

    pair = [topics["open-alter-confluent"], topics["closed-alter-confluent"]]
    futures = admin.create_partitions(
        [NewPartitions(t, 2) for t in pair], operation_timeout=TIMEOUT_S
    )
    assert [confluent_error(futures[t]) for t in pair] == [None, denied]

    resources = [ConfigResource("topic", topics["open"]), ConfigResource("topic", topics["closed"])]
    futures = admin.describe_configs(resources, request_timeout=TIMEOUT_S)
    assert [confluent_error(futures[r]) for r in resources] == [None, denied]
    assert "retention.ms" in futures[resources[0]].result(TIMEOUT_S)

    changes = [ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)]
    resources = [
        ConfigResource("topic", topics["open-alter-confluent"], incremental_configs=changes),
        ConfigResource("topic", topics["closed-alter-confluent"], incremental_configs=changes),
    ]
    futures = admin.incremental_alter_configs(resources, request_timeout=TIMEOUT_S)
    assert [confluent_error(futures[r]) for r in resources] == [None, denied]

    listed = admin.list_topics(timeout=TIMEOUT_S).topics
    assert topics["open"] in listed and topics["closed"] not in listed, "Describe hides it"


def test_kafka_python_admin(c: Conn, topics: dict[str, str]) -> None:
    admin = KafkaAdminClient(
        bootstrap_servers=c.bootstrap, **c.kwargs, request_timeout_ms=CLIENT_TIMEOUT_MS
    )
    try:
        admin.create_topics([KpNewTopic(unique_name(OPEN, "new"), 1, 1)])
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            admin.create_topics([KpNewTopic(unique_name(CLOSED, "new"), 1, 1)])
        admin.delete_topics([topics["open-delete-kafka-python"]])
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            admin.delete_topics([topics["closed-delete-kafka-python"]])
        admin.create_partitions({topics["open-alter-kafka-python"]: KpNewPartitions(2)})
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            admin.create_partitions({topics["closed-alter-kafka-python"]: KpNewPartitions(2)})
        # kafka-python's describe_configs drops a resource's error: a refused topic has no
        # configs
        described = admin.describe_configs(
            [
                KpConfigResource(KpConfigResourceType.TOPIC, topics["open"]),
                KpConfigResource(KpConfigResourceType.TOPIC, topics["closed"]),
            ],
            config_filter="all",
        )["topic"]
        assert "retention.ms" in described[topics["open"]]
        assert described[topics["closed"]] == {}
    finally:
        admin.close()


async def _aiokafka_admin(c: Conn, topics: dict[str, str]) -> None:
    denied = AioTopicDenied.errno
    admin = AIOKafkaAdminClient(
        bootstrap_servers=c.bootstrap, **c.kwargs, request_timeout_ms=CLIENT_TIMEOUT_MS
    )
    await admin.start()
    try:
        created = await admin.create_topics(
            [
                AioNewTopic(unique_name(OPEN, "new"), 1, 1),
                AioNewTopic(unique_name(CLOSED, "new"), 1, 1),
            ]
        )
        assert [t[1] for t in created.topic_errors] == [0, denied]
        deleted = await admin.delete_topics(
            [topics["open-delete-aiokafka"], topics["closed-delete-aiokafka"]]
        )
        assert sorted(t[1] for t in deleted.topic_error_codes) == [0, denied]
        pair = [topics["open-alter-aiokafka"], topics["closed-alter-aiokafka"]]
        grown = await admin.create_partitions({pair[0]: AioNewPartitions(2)})
        assert [t[1] for t in grown.topic_errors] == [0]
        with pytest.raises(AioTopicDenied, match="Topic authorization failed"):
            await admin.create_partitions({pair[1]: AioNewPartitions(2)})
        described = await admin.describe_configs(
            [
                AioConfigResource(AioConfigResourceType.TOPIC, t)
                for t in (topics["open"], topics["closed"])
            ]
        )
        errors = {r[3]: r[0] for response in described for r in response.resources}
        assert errors == {topics["open"]: 0, topics["closed"]: denied}
    finally:
        await admin.close()


def test_aiokafka_admin(c: Conn, topics: dict[str, str]) -> None:
    asyncio.run(_aiokafka_admin(c, topics))


def test_authorized_operations_kip_430(c: Conn, topics: dict[str, str]) -> None:
    """confluent-kafka's describe_topics / describe_cluster with include_authorized_operations
    (Metadata and DescribeCluster's KIP-430 fields)."""
    admin = AdminClient(c.conf())
    futures = admin.describe_topics(
        TopicCollection([topics["open"], topics["closed"]]),
        include_authorized_operations=True,
        request_timeout=TIMEOUT_S,
    )
    described = futures[topics["open"]].result(TIMEOUT_S)
    assert set(described.authorized_operations) == {
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    }
    assert confluent_error(futures[topics["closed"]]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=TIMEOUT_S)
    operations = set(cluster.result(TIMEOUT_S).authorized_operations)
    assert operations == {AclOperation.ALTER, AclOperation.DESCRIBE}


def test_describe_topic_partitions_and_cluster_kip_966(c: Conn, topics: dict[str, str]) -> None:
    """kafka-python's describe_topic_partitions (DescribeTopicPartitions) and describe_cluster
    (DescribeCluster v2): a refused topic named is TOPIC_AUTHORIZATION_FAILED without its id,
    left out of a listing; the authorized operations are the principal's."""
    admin = KafkaAdminClient(
        bootstrap_servers=c.bootstrap, **c.kwargs, request_timeout_ms=CLIENT_TIMEOUT_MS
    )
    try:
        page = admin.describe_topic_partitions([topics["open"], topics["closed"]])
        by_name = {t["name"]: t for t in page["topics"]}
        opened, closed = by_name[topics["open"]], by_name[topics["closed"]]
        assert opened["error_code"] == 0 and len(opened["partitions"]) == 1
        operations = {
            op.name
            for op in KpAclOperation
            if opened["topic_authorized_operations"] & (1 << op.value)
        }
        assert operations == {
            "READ",
            "WRITE",
            "CREATE",
            "DELETE",
            "ALTER",
            "DESCRIBE",
            "DESCRIBE_CONFIGS",
            "ALTER_CONFIGS",
        }
        assert closed["error_code"] == kafka.errors.TopicAuthorizationFailedError.errno
        assert closed["partitions"] == [] and closed["topic_id"] in (None, uuid.UUID(int=0))
        listed: set[str] = set()
        cursor = None
        while True:
            page = admin.describe_topic_partitions([], cursor=cursor)
            listed |= {t["name"] for t in page["topics"]}
            if (cursor := page["next_cursor"]) is None:
                break
        assert topics["open"] in listed and not any(n.startswith(CLOSED) for n in listed)
        assert set(admin.describe_cluster()["authorized_operations"]) == {"ALTER", "DESCRIBE"}
    finally:
        admin.close()
