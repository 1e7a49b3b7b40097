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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kafka.errors
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewPartitions as AioNewPartitions
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from aiokafka.errors import (
    GroupAuthorizationFailedError as AioGroupDenied,
)
from aiokafka.errors import (
    TopicAuthorizationFailedError as AioTopicDenied,
)
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
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
    log_since,
    log_size,
)
from integration.node_process import NodeProcess

pytestmark = pytest.mark.integration

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
OPEN, CLOSED = "open-", "closed-"
CLIENTS = ("confluent", "kafka-python", "aiokafka")
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
_names = itertools.count()


@dataclass(frozen=True)
class Conn:
    """How one principal's clients connect: every client library's settings."""

    node: NodeProcess
    principal: str
    confluent: dict[str, Any] = field(default_factory=dict)  # librdkafka (and kcat -X) keys
    kwargs: dict[str, Any] = field(default_factory=dict)  # kafka-python and aiokafka arguments

    @property
    def bootstrap(self) -> str:
        return self.node.bootstrap

    def conf(self, **extra: Any) -> dict[str, Any]:
        return {**confluent_conf(self.node, **extra), **self.confluent}

    @property
    def kcat(self) -> list[str]:
        return [a for k, v in self.confluent.items() for a in ("-X", f"{k}={v}")]


def _sasl_user(node: NodeProcess, user: str) -> Conn:
    password = PASSWORDS[user]
    return Conn(
        node,
        f"User:{user}",
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": password,
        },
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": user,
            "sasl_plain_password": password,
        },
    )


def _sasl_overrides() -> tuple[str, ...]:
    users = " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="{PASSWORDS["admin"]}" {users};'
    )
    return (
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name=SASL_PLAINTEXT",  # the node logs in as admin (its JAAS)
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}",
        "sasl.enabled.mechanisms=PLAIN",
    )


def _acls(principal: str) -> list[AclBinding]:
    def binding(rtype: Any, name: str, pattern: Any, op: Any, permission: Any) -> AclBinding:
        return AclBinding(rtype, name, pattern, principal, "*", op, permission)

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


def _start(root: Path, overrides: tuple[str, ...], sasl: bool) -> NodeProcess:
    try:
        return NodeProcess(root, overrides).start()
    except AssertionError as exc:
        if sasl and "a broker needs a PLAINTEXT listener" in str(exc):
            # until named SASL listeners are configurable (helper "listeners"), the SASL row of
            # the matrix cannot run; the PLAINTEXT row covers the same rules
            pytest.skip(f"SASL_PLAINTEXT listeners are not configurable yet: {exc}")
        raise


@pytest.fixture(scope="module", params=["PLAINTEXT", "SASL_PLAINTEXT"])
def sasl(request: pytest.FixtureRequest) -> bool:
    """The row of the matrix: PLAINTEXT or SASL_PLAINTEXT clients."""
    return request.param == "SASL_PLAINTEXT"  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def node(sasl: bool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """PLAINTEXT: every client is User:ANONYMOUS, and ``allow.everyone.if.no.acl.found`` lets
    it create the topics and the ACLs before any ACL exists.  SASL_PLAINTEXT: PLAIN users
    admin (a super user: creates the topics and ACLs), alice (the ACLs' principal) and bob
    (no ACL at all)."""
    overrides = (
        f"authorizer.class.name={STANDARD_AUTHORIZER}",
        "super.users=User:admin",
        f"allow.everyone.if.no.acl.found={'false' if sasl else 'true'}",
        "auto.create.topics.enable=false",
        *(_sasl_overrides() if sasl else ()),
    )
    proc = _start(Path(tmp_path_factory.mktemp("acl")), overrides, sasl)
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture(scope="module")
def c(node: NodeProcess, sasl: bool) -> Conn:
    """The principal the ACLs are about."""
    if sasl:
        return _sasl_user(node, "alice")
    return Conn(node, "User:ANONYMOUS")


@pytest.fixture(scope="module")
def admin(node: NodeProcess, c: Conn, sasl: bool) -> Conn:
    return _sasl_user(node, "admin") if sasl else c


@pytest.fixture(scope="module")
def topics(admin: Conn, c: Conn) -> dict[str, str]:
    """The topics every test uses, with a record each, then the ACLs for ``c``'s principal."""
    client = AdminClient(admin.conf())
    names = {"open": _topic(OPEN, "data"), "closed": _topic(CLOSED, "data")}
    for lib in CLIENTS:
        for prefix in (OPEN, CLOSED):
            for what in ("delete", "alter"):
                names[f"{prefix}{what}-{lib}"] = _topic(prefix, f"{what}-{lib}")
    futures = client.create_topics(
        [NewTopic(n, 1, 1) for n in names.values()], operation_timeout=TIMEOUT_S
    )
    for f in futures.values():
        f.result(TIMEOUT_S)
    producer = Producer(admin.conf())
    for n in (names["open"], names["closed"]):
        producer.produce(n, b"first", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    for f in client.create_acls(_acls(c.principal), request_timeout=TIMEOUT_S).values():
        f.result(TIMEOUT_S)
    return names


@pytest.fixture(autouse=True)
def show_node_log(node: NodeProcess) -> Iterator[None]:
    start = log_size(node)
    yield
    print(f"node stderr during this test:\n{log_since(node, start)}")


# --- produce ----------------------------------------------------------------------------------


def _confluent_produce(c: Conn, topic: str) -> KafkaError | None:
    producer = Producer(c.conf(message_timeout_ms=5000))
    errors: list[KafkaError | None] = []
    producer.produce(topic, b"v", partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT_S)
    assert len(errors) == 1
    return errors[0]


def _kafka_python_produce(c: Conn, topic: str) -> None:
    producer = KafkaProducer(
        bootstrap_servers=c.bootstrap,
        **c.kwargs,
        max_block_ms=5000,
        request_timeout_ms=CLIENT_TIMEOUT_MS,
    )
    try:
        producer.send(topic, b"v", partition=0).get(TIMEOUT_S)
    finally:
        producer.close(1)


async def _aiokafka_produce(c: Conn, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=c.bootstrap, **c.kwargs, request_timeout_ms=5000)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"v", partition=0)
    finally:
        await producer.stop()


def test_produce_allowed_and_refused(c: Conn, topics: dict[str, str]) -> None:
    assert _confluent_produce(c, topics["open"]) is None
    err = _confluent_produce(c, topics["closed"])
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err

    _kafka_python_produce(c, topics["open"])
    with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
        _kafka_python_produce(c, topics["closed"])

    asyncio.run(_aiokafka_produce(c, topics["open"]))
    with pytest.raises(AioTopicDenied):
        asyncio.run(_aiokafka_produce(c, topics["closed"]))


def test_kcat_produce_and_consume(c: Conn, topics: dict[str, str]) -> None:
    _kcat(c, "-P", "-t", topics["open"], "-p", "0", stdin="from-kcat\n")
    out = _kcat(c, "-C", "-t", topics["open"], "-p", "0", "-o", "beginning", "-e", "-q")
    assert out.returncode == 0, out.stderr
    assert "first" in out.stdout and "from-kcat" in out.stdout
    for args in (("-P",), ("-C", "-o", "beginning", "-e")):
        refused = _kcat(c, *args, "-t", topics["closed"], "-p", "0", stdin="refused\n")
        assert refused.returncode != 0, refused
        assert "Topic authorization failed" in refused.stderr, refused.stderr


def _kcat(c: Conn, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    exe = shutil.which("kcat") or shutil.which("kafkacat")
    assert exe is not None, "kcat is not installed"
    return subprocess.run(
        [exe, "-b", c.bootstrap, "-X", f"socket.timeout.ms={CLIENT_TIMEOUT_MS}", *c.kcat, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S + 10,
    )


# --- consume (no group) -----------------------------------------------------------------------


def _confluent_consume(c: Conn, topic: str, subscribe: bool = False) -> bytes | KafkaError:
    """The first record, or the error the consumer reports.  (librdkafka reports a topic it
    may not describe to a subscription; an assignment of one just never fetches, as against
    Kafka.)"""
    consumer = Consumer(
        c.conf(group_id=_topic(OPEN, "g"), enable_auto_commit=False, auto_offset_reset="earliest")
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
    c: Conn, topic: str, subscribe: bool = False, wait_s: float = TIMEOUT_S
) -> bytes:
    """The first record.  (kafka-python logs "Topic ... is not authorized for this client" for
    a topic it may not describe and never delivers from it.)"""
    consumer = KafkaConsumer(
        bootstrap_servers=c.bootstrap,
        **c.kwargs,
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
    c: Conn, topic: str, subscribe: bool = False, wait_s: float = TIMEOUT_S
) -> bytes:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=c.bootstrap,
        **c.kwargs,
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


def test_consume_allowed_and_refused(c: Conn, topics: dict[str, str]) -> None:
    assert _confluent_consume(c, topics["open"]) == b"first"
    refused = _confluent_consume(c, topics["closed"], subscribe=True)
    assert isinstance(refused, KafkaError), refused
    assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused

    assert _kafka_python_consume(c, topics["open"]) == b"first"
    with pytest.raises(AssertionError, match="nothing and no error"):
        _kafka_python_consume(c, topics["closed"], subscribe=True, wait_s=5)
    probe = KafkaConsumer(bootstrap_servers=c.bootstrap, **c.kwargs)
    try:
        assert probe.partitions_for_topic(topics["closed"]) == set(), "Metadata hides it"
        assert probe.partitions_for_topic(topics["open"]) == {0}
    finally:
        probe.close()

    assert asyncio.run(_aiokafka_consume(c, topics["open"])) == b"first"
    # aiokafka, too, only logs the topic as unauthorized and never delivers from it
    with pytest.raises(TimeoutError):
        asyncio.run(_aiokafka_consume(c, topics["closed"], subscribe=True, wait_s=5))


# --- group join and commit --------------------------------------------------------------------


def _confluent_group(c: Conn, topic: str, group: str) -> KafkaError | None:
    consumer = Consumer(
        c.conf(group_id=group, enable_auto_commit=False, auto_offset_reset="earliest")
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


def _kafka_python_group(c: Conn, topic: str, group: str) -> None:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=c.bootstrap,
        **c.kwargs,
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


async def _aiokafka_group(c: Conn, topic: str, group: str) -> None:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=c.bootstrap,
        **c.kwargs,
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


def test_group_join_and_commit_allowed_and_refused(c: Conn, topics: dict[str, str]) -> None:
    topic = topics["open"]
    assert _confluent_group(c, topic, _topic(OPEN, "g")) is None
    refused = _confluent_group(c, topic, _topic(CLOSED, "g"))
    assert refused is not None and refused.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, refused

    _kafka_python_group(c, topic, _topic(OPEN, "g"))
    with pytest.raises(kafka.errors.GroupAuthorizationFailedError):
        _kafka_python_group(c, topic, _topic(CLOSED, "g"))

    asyncio.run(_aiokafka_group(c, topic, _topic(OPEN, "g")))
    with pytest.raises(AioGroupDenied):
        asyncio.run(_aiokafka_group(c, topic, _topic(CLOSED, "g")))


# --- admin: create, delete, alter, describe configs -------------------------------------------


def _confluent_error(future: Any) -> int | None:
    try:
        future.result(TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0].code()  # type: ignore[no-any-return]
    return None


def test_confluent_admin(c: Conn, topics: dict[str, str]) -> None:
    admin = AdminClient(c.conf())
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

    changes = [ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)]
    resources = [
        ConfigResource("topic", topics["open-alter-confluent"], incremental_configs=changes),
        ConfigResource("topic", topics["closed-alter-confluent"], incremental_configs=changes),
    ]
    futures = admin.incremental_alter_configs(resources, request_timeout=TIMEOUT_S)
    assert [_confluent_error(futures[r]) for r in resources] == [None, denied]

    listed = admin.list_topics(timeout=TIMEOUT_S).topics
    assert topics["open"] in listed and topics["closed"] not in listed, "Describe hides it"


def test_kafka_python_admin(c: Conn, topics: dict[str, str]) -> None:
    admin = KafkaAdminClient(
        bootstrap_servers=c.bootstrap, **c.kwargs, request_timeout_ms=CLIENT_TIMEOUT_MS
    )
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


async def _aiokafka_admin(c: Conn, topics: dict[str, str]) -> None:
    denied = AioTopicDenied.errno
    admin = AIOKafkaAdminClient(
        bootstrap_servers=c.bootstrap, **c.kwargs, request_timeout_ms=CLIENT_TIMEOUT_MS
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


# --- no ACL at all: everything is refused -----------------------------------------------------


@pytest.fixture(scope="module")
def nobody(
    node: NodeProcess, sasl: bool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Conn]:
    """A principal no ACL names: bob on the SASL node; on PLAINTEXT, User:ANONYMOUS on a node
    without ``allow.everyone.if.no.acl.found``."""
    if sasl:
        yield _sasl_user(node, "bob")
        return
    overrides = (f"authorizer.class.name={STANDARD_AUTHORIZER}", "super.users=User:admin")
    proc = NodeProcess(Path(tmp_path_factory.mktemp("closed")), overrides).start()
    yield Conn(proc, "User:ANONYMOUS")
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


def test_without_acls_every_client_is_refused(nobody: Conn, topics: dict[str, str]) -> None:
    c = nobody
    err = _confluent_produce(c, topics["open"])
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
        _kafka_python_produce(c, topics["open"])
    with pytest.raises(AioTopicDenied):
        asyncio.run(_aiokafka_produce(c, topics["open"]))
    refused = _confluent_group(c, topics["open"], "a-group")
    assert refused is not None and refused.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    admin = AdminClient(c.conf())
    futures = admin.create_topics([NewTopic("anything", 1, 1)], operation_timeout=TIMEOUT_S)
    assert _confluent_error(futures["anything"]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert admin.list_topics(timeout=TIMEOUT_S).topics == {}


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
    assert _confluent_error(futures[topics["closed"]]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=TIMEOUT_S)
    operations = set(cluster.result(TIMEOUT_S).authorized_operations)
    assert operations == {AclOperation.ALTER, AclOperation.DESCRIBE}
