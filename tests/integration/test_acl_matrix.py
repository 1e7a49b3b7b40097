"""The ACL matrix: produce, consume, group join and commit, create/delete/alter topics and
describe configs, each allowed and refused, through confluent-kafka, kafka-python, aiokafka
(and kcat for produce/consume), against a real ``kraft dev`` node running Kafka's
StandardAuthorizer (``authorizer.class.name=`` Kafka's class name).

Who is who: on the node's PLAINTEXT listener every client is ``User:ANONYMOUS``; the node runs
with ``allow.everyone.if.no.acl.found=true`` so that the ACLs can be created (through
confluent-kafka's ``AdminClient.create_acls``) before any exists, and the ACLs then give that
principal ALL on the topics and groups prefixed ``open-`` and deny it ALL on those prefixed
``closed-``; on the cluster it may ALTER and DESCRIBE but not CREATE (so creating a topic needs
CREATE on the topic, as Kafka's CreateTopics rule says).  Each test asserts the exact Kafka error
each client surfaces for the refused case, and that the allowed case works.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka.errors
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.errors import (
    GroupAuthorizationFailedError as AioGroupDenied,
)
from aiokafka.errors import (
    TopicAuthorizationFailedError as AioTopicDenied,
)
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import NewTopic as KpNewTopic

from integration.clients import (
    CLIENT_TIMEOUT_MS,
    TIMEOUT_S,
    confluent_conf,
    kcat,
    log_since,
    log_size,
)
from integration.node_process import NodeProcess

pytestmark = pytest.mark.integration

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PRINCIPAL = "User:ANONYMOUS"  # every PLAINTEXT client
OPEN, CLOSED = "open-", "closed-"
CLIENTS = ("confluent", "kafka-python", "aiokafka")
_names = itertools.count()


def _acls() -> list[AclBinding]:
    def binding(rtype: Any, name: str, pattern: Any, op: Any, permission: Any) -> AclBinding:
        return AclBinding(rtype, name, pattern, PRINCIPAL, "*", op, permission)

    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    prefixed, literal = ResourcePatternType.PREFIXED, ResourcePatternType.LITERAL
    return [
        binding(ResourceType.TOPIC, OPEN, prefixed, AclOperation.ALL, allow),
        binding(ResourceType.GROUP, OPEN, prefixed, AclOperation.ALL, allow),
        binding(ResourceType.TOPIC, CLOSED, prefixed, AclOperation.ALL, deny),
        binding(ResourceType.GROUP, CLOSED, prefixed, AclOperation.ALL, deny),
        binding(ResourceType.BROKER, "kafka-cluster", literal, AclOperation.ALTER, allow),
        binding(ResourceType.BROKER, "kafka-cluster", literal, AclOperation.DESCRIBE, allow),
    ]


def _topic(prefix: str, what: str) -> str:
    return f"{prefix}{what}-{next(_names)}"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    overrides = (
        f"authorizer.class.name={STANDARD_AUTHORIZER}",
        "super.users=User:admin",
        "allow.everyone.if.no.acl.found=true",
        "auto.create.topics.enable=false",
    )
    proc = NodeProcess(Path(tmp_path_factory.mktemp("acl")), overrides).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture(scope="module")
def topics(node: NodeProcess) -> dict[str, str]:
    """The topics every test uses, created (with a record each) before the ACLs exist."""
    admin = AdminClient(confluent_conf(node))
    names = {
        "open": _topic(OPEN, "data"),
        "closed": _topic(CLOSED, "data"),
    }
    for client in CLIENTS:
        for prefix in (OPEN, CLOSED):
            for what in ("delete", "alter"):
                names[f"{prefix}{what}-{client}"] = _topic(prefix, f"{what}-{client}")
    futures = admin.create_topics(
        [NewTopic(n, 1, 1) for n in names.values()], operation_timeout=TIMEOUT_S
    )
    for f in futures.values():
        f.result(TIMEOUT_S)
    producer = Producer(confluent_conf(node))
    for n in (names["open"], names["closed"]):
        producer.produce(n, b"first", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    for f in admin.create_acls(_acls(), request_timeout=TIMEOUT_S).values():
        f.result(TIMEOUT_S)
    return names


@pytest.fixture(autouse=True)
def show_node_log(node: NodeProcess) -> Iterator[None]:
    start = log_size(node)
    yield
    print(f"node stderr during this test:\n{log_since(node, start)}")


def _conf(node: NodeProcess, **extra: Any) -> dict[str, Any]:
    return confluent_conf(node, **extra)


# --- produce ----------------------------------------------------------------------------------


def _confluent_produce(node: NodeProcess, topic: str) -> KafkaError | None:
    producer = Producer(_conf(node, message_timeout_ms=5000))
    errors: list[KafkaError | None] = []
    producer.produce(topic, b"v", partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT_S)
    assert len(errors) == 1
    return errors[0]


def _kafka_python_produce(node: NodeProcess, topic: str) -> None:
    producer = KafkaProducer(
        bootstrap_servers=node.bootstrap,
        max_block_ms=5000,
        request_timeout_ms=CLIENT_TIMEOUT_MS,
    )
    try:
        producer.send(topic, b"v", partition=0).get(TIMEOUT_S)
    finally:
        producer.close(1)


async def _aiokafka_produce(node: NodeProcess, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=node.bootstrap, request_timeout_ms=5000)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"v", partition=0)
    finally:
        await producer.stop()


def test_produce_allowed_and_refused(node: NodeProcess, topics: dict[str, str]) -> None:
    assert _confluent_produce(node, topics["open"]) is None
    err = _confluent_produce(node, topics["closed"])
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err

    _kafka_python_produce(node, topics["open"])
    with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
        _kafka_python_produce(node, topics["closed"])

    asyncio.run(_aiokafka_produce(node, topics["open"]))
    with pytest.raises(AioTopicDenied):
        asyncio.run(_aiokafka_produce(node, topics["closed"]))


def test_kcat_produce_and_consume(node: NodeProcess, topics: dict[str, str]) -> None:
    kcat(node, "-P", "-t", topics["open"], "-p", "0", stdin="from-kcat\n")
    out = kcat(node, "-C", "-t", topics["open"], "-p", "0", "-o", "beginning", "-e", "-q")
    assert "first" in out.stdout and "from-kcat" in out.stdout
    for args in (("-P",), ("-C", "-o", "beginning", "-e")):
        refused = _kcat_failing(node, *args, "-t", topics["closed"], "-p", "0")
        assert "Topic authorization failed" in refused.stderr, refused.stderr


def _kcat_failing(node: NodeProcess, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("kcat") or shutil.which("kafkacat")
    assert exe is not None
    result = subprocess.run(
        [exe, "-b", node.bootstrap, "-X", f"socket.timeout.ms={CLIENT_TIMEOUT_MS}", *args],
        input="refused\n",
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S + 10,
    )
    assert result.returncode != 0, result
    return result


# --- consume (no group) -----------------------------------------------------------------------


def _confluent_consume(
    node: NodeProcess, topic: str, subscribe: bool = False
) -> bytes | KafkaError:
    """The first record, or the error the consumer reports.  (librdkafka reports a topic it
    may not describe to a subscription; an assignment of one just never fetches, as against
    Kafka.)"""
    consumer = Consumer(
        _conf(
            node, group_id=_topic(OPEN, "g"), enable_auto_commit=False, auto_offset_reset="earliest"
        )
    )
    if subscribe:
        consumer.subscribe([topic])
    else:
        consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        msg = consumer.poll(TIMEOUT_S)
        assert msg is not None, "nothing and no error"
        return msg.error() or msg.value()
    finally:
        consumer.close()


def _kafka_python_consume(
    node: NodeProcess, topic: str, subscribe: bool = False, wait_s: float = TIMEOUT_S
) -> bytes:
    """The first record.  (kafka-python logs "Topic ... is not authorized for this client" for
    a topic it may not describe and never delivers from it.)"""
    consumer = KafkaConsumer(
        bootstrap_servers=node.bootstrap,
        group_id=_topic(OPEN, "g"),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    tp = KpTopicPartition(topic, 0)
    try:
        if subscribe:
            consumer.subscribe([topic])
        else:
            consumer.assign([tp])
            consumer.seek(tp, 0)
        for _ in range(int(wait_s)):
            polled = consumer.poll(timeout_ms=1000)
            if polled:
                return polled[tp][0].value  # type: ignore[no-any-return]
        raise AssertionError("nothing and no error")
    finally:
        consumer.close()


async def _aiokafka_consume(
    node: NodeProcess, topic: str, subscribe: bool = False, wait_s: float = TIMEOUT_S
) -> bytes:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=node.bootstrap,
        group_id=_topic(OPEN, "g") if subscribe else None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tp = AioTopicPartition(topic, 0)
        if subscribe:
            consumer.subscribe([topic])
        else:
            consumer.assign([tp])
            consumer.seek(tp, 0)
        async with asyncio.timeout(wait_s):
            msg = await consumer.getone()
        return msg.value  # type: ignore[no-any-return]
    finally:
        await consumer.stop()


def test_consume_allowed_and_refused(node: NodeProcess, topics: dict[str, str]) -> None:
    assert _confluent_consume(node, topics["open"]) == b"first"
    refused = _confluent_consume(node, topics["closed"], subscribe=True)
    assert isinstance(refused, KafkaError), refused
    assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused

    assert _kafka_python_consume(node, topics["open"]) == b"first"
    with pytest.raises(AssertionError, match="nothing and no error"):
        _kafka_python_consume(node, topics["closed"], subscribe=True, wait_s=5)
    probe = KafkaConsumer(bootstrap_servers=node.bootstrap)
    try:
        assert probe.partitions_for_topic(topics["closed"]) == set(), "Metadata hides it"
        assert probe.partitions_for_topic(topics["open"]) == {0}
    finally:
        probe.close()

    assert asyncio.run(_aiokafka_consume(node, topics["open"])) == b"first"
    # aiokafka, too, only logs the topic as unauthorized and never delivers from it
    with pytest.raises(TimeoutError):
        asyncio.run(_aiokafka_consume(node, topics["closed"], subscribe=True, wait_s=5))


# --- group join and commit --------------------------------------------------------------------


def _confluent_group(node: NodeProcess, topic: str, group: str) -> KafkaError | None:
    consumer = Consumer(
        _conf(node, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest")
    )
    consumer.subscribe([topic])
    try:
        msg = consumer.poll(TIMEOUT_S)
        assert msg is not None
        if msg.error():
            return msg.error()  # type: ignore[no-any-return]
        consumer.commit(message=msg, asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0)], TIMEOUT_S)
        assert committed[0].offset == msg.offset() + 1
        return None
    except KafkaException as exc:
        return exc.args[0]  # type: ignore[no-any-return]
    finally:
        consumer.close()


def _kafka_python_group(node: NodeProcess, topic: str, group: str) -> None:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=node.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        polled: dict[Any, Any] = {}
        for _ in range(20):
            polled = consumer.poll(timeout_ms=1000)
            if polled:
                break
        assert polled, "no records"
        consumer.commit()
        assert consumer.committed(KpTopicPartition(topic, 0)) is not None
    finally:
        consumer.close()


async def _aiokafka_group(node: NodeProcess, topic: str, group: str) -> None:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=node.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        async with asyncio.timeout(TIMEOUT_S):
            await consumer.getone()
        await consumer.commit()
        assert await consumer.committed(AioTopicPartition(topic, 0)) is not None
    finally:
        await consumer.stop()


def test_group_join_and_commit_allowed_and_refused(
    node: NodeProcess, topics: dict[str, str]
) -> None:
    topic = topics["open"]
    assert _confluent_group(node, topic, _topic(OPEN, "g")) is None
    refused = _confluent_group(node, topic, _topic(CLOSED, "g"))
    assert refused is not None and refused.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, refused

    _kafka_python_group(node, topic, _topic(OPEN, "g"))
    with pytest.raises(kafka.errors.GroupAuthorizationFailedError):
        _kafka_python_group(node, topic, _topic(CLOSED, "g"))

    asyncio.run(_aiokafka_group(node, topic, _topic(OPEN, "g")))
    with pytest.raises(AioGroupDenied):
        asyncio.run(_aiokafka_group(node, topic, _topic(CLOSED, "g")))


# --- admin: create, delete, alter, describe configs -------------------------------------------


def _confluent_error(future: Any) -> int | None:
    try:
        future.result(TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0].code()  # type: ignore[no-any-return]
    return None


def test_confluent_admin(node: NodeProcess, topics: dict[str, str]) -> None:
    admin = AdminClient(_conf(node))
    denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    create = [NewTopic(_topic(OPEN, "new"), 1, 1), NewTopic(_topic(CLOSED, "new"), 1, 1)]
    futures = admin.create_topics(create, operation_timeout=TIMEOUT_S)
    assert [_confluent_error(futures[t.topic]) for t in create] == [None, denied]

    pair = [topics["open-delete-confluent"], topics["closed-delete-confluent"]]
    futures = admin.delete_topics(pair, operation_timeout=TIMEOUT_S)
    assert [_confluent_error(futures[t]) for t in pair] == [None, denied]

    pair = [topics["open-alter-confluent"], topics["closed-alter-confluent"]]
    futures = admin.create_partitions(
        [NewPartitions(t, 2) for t in pair], operation_timeout=TIMEOUT_S
    )
    assert [_confluent_error(futures[t]) for t in pair] == [None, denied]

    resources = [ConfigResource("topic", topics["open"]), ConfigResource("topic", topics["closed"])]
    futures = admin.describe_configs(resources, request_timeout=TIMEOUT_S)
    assert [_confluent_error(futures[r]) for r in resources] == [None, denied]
    assert "retention.ms" in futures[resources[0]].result(TIMEOUT_S)

    listed = admin.list_topics(timeout=TIMEOUT_S).topics
    assert topics["open"] in listed and topics["closed"] not in listed, "Describe hides it"


def test_kafka_python_admin(node: NodeProcess, topics: dict[str, str]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS)
    try:
        admin.create_topics([KpNewTopic(_topic(OPEN, "new"), 1, 1)])
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            admin.create_topics([KpNewTopic(_topic(CLOSED, "new"), 1, 1)])
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


async def _aiokafka_admin(node: NodeProcess, topics: dict[str, str]) -> None:
    denied = AioTopicDenied.errno
    admin = AIOKafkaAdminClient(
        bootstrap_servers=node.bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS
    )
    await admin.start()
    try:
        created = await admin.create_topics(
            [AioNewTopic(_topic(OPEN, "new"), 1, 1), AioNewTopic(_topic(CLOSED, "new"), 1, 1)]
        )
        assert [t[1] for t in created.topic_errors] == [0, denied]
        deleted = await admin.delete_topics(
            [topics["open-delete-aiokafka"], topics["closed-delete-aiokafka"]]
        )
        assert sorted(t[1] for t in deleted.topic_error_codes) == [0, denied]
    finally:
        await admin.close()


def test_aiokafka_admin(node: NodeProcess, topics: dict[str, str]) -> None:
    asyncio.run(_aiokafka_admin(node, topics))


# --- no ACL at all: everything is refused (allow.everyone.if.no.acl.found=false) ------------


@pytest.fixture(scope="module")
def closed_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    overrides = (f"authorizer.class.name={STANDARD_AUTHORIZER}", "super.users=User:admin")
    proc = NodeProcess(Path(tmp_path_factory.mktemp("closed")), overrides).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


def test_without_acls_every_client_is_refused(closed_node: NodeProcess) -> None:
    node = closed_node
    err = _confluent_produce(node, "anything")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
        _kafka_python_produce(node, "anything")
    with pytest.raises(AioTopicDenied):
        asyncio.run(_aiokafka_produce(node, "anything"))
    refused = _confluent_group(node, "anything", "a-group")
    assert refused is not None and refused.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    admin = AdminClient(_conf(node))
    futures = admin.create_topics([NewTopic("anything", 1, 1)], operation_timeout=TIMEOUT_S)
    assert _confluent_error(futures["anything"]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert admin.list_topics(timeout=TIMEOUT_S).topics == {}
