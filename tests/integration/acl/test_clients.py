"""The ACL matrix, clients half: produce, consume, group join and commit, each allowed and
refused, through confluent-kafka, kafka-python, aiokafka and kcat, against a real ``kraft dev``
node running Kafka's StandardAuthorizer; the admin half is ``test_admin.py``.

Two rows (``conftest.py``): on PLAINTEXT every client is ``User:ANONYMOUS`` and the node runs
with ``allow.everyone.if.no.acl.found=true`` so that the ACLs can be created (through
confluent-kafka's ``AdminClient.create_acls``) before any exists; on SASL_PLAINTEXT the PLAIN
user admin (a super user) creates them for alice, and bob has none.  The ACLs give the principal
ALL on the topics and groups prefixed ``open-`` and deny it ALL on those prefixed ``closed-``;
on the cluster it may ALTER and DESCRIBE but not CREATE (so creating a topic needs CREATE on the
topic, as Kafka's CreateTopics rule says).  Each test asserts what each client surfaces for the
refused case (Kafka's error where the client reports one), and that the allowed case works.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka.errors
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
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
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from integration.acl.principals import (
    CLOSED,
    OPEN,
    STANDARD_AUTHORIZER,
    Conn,
    confluent_error,
    sasl_user,
    unique_name,
)
from integration.clients import (
    CLIENT_TIMEOUT_MS,
    TIMEOUT_S,
)
from integration.node_process import NodeProcess

pytestmark = pytest.mark.integration


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
        c.conf(
            group_id=unique_name(OPEN, "g"), enable_auto_commit=False, auto_offset_reset="earliest"
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
    c: Conn, topic: str, subscribe: bool = False, wait_s: float = TIMEOUT_S
) -> bytes:
    """The first record.  (kafka-python logs "Topic ... is not authorized for this client" for
    a topic it may not describe and never delivers from it.)"""
    consumer = KafkaConsumer(
        bootstrap_servers=c.bootstrap,
        **c.kwargs,
        group_id=unique_name(OPEN, "g"),
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
        group_id=unique_name(OPEN, "g") if subscribe else None,
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
    assert _confluent_group(c, topic, unique_name(OPEN, "g")) is None
    refused = _confluent_group(c, topic, unique_name(CLOSED, "g"))
    assert refused is not None and refused.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, refused

    _kafka_python_group(c, topic, unique_name(OPEN, "g"))
    with pytest.raises(kafka.errors.GroupAuthorizationFailedError):
        _kafka_python_group(c, topic, unique_name(CLOSED, "g"))

    asyncio.run(_aiokafka_group(c, topic, unique_name(OPEN, "g")))
    with pytest.raises(AioGroupDenied):
        asyncio.run(_aiokafka_group(c, topic, unique_name(CLOSED, "g")))


# --- no ACL at all: everything is refused -----------------------------------------------------


@pytest.fixture(scope="module")
def nobody(
    node: NodeProcess, sasl: bool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Conn]:
    """A principal no ACL names: bob on the SASL node; on PLAINTEXT, User:ANONYMOUS on a node
    without ``allow.everyone.if.no.acl.found``."""
    if sasl:
        yield sasl_user(node, "bob")
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
    assert confluent_error(futures["anything"]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert admin.list_topics(timeout=TIMEOUT_S).topics == {}


# --- admin: create, delete, alter, describe configs -------------------------------------------
