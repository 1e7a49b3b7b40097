"""Transactions under Kafka's StandardAuthorizer, through confluent-kafka over SASL/PLAIN.

``alice`` may write the topic ``txn-open`` and read the group ``txn-group``; she may WRITE the
transactional id ``allowed-tx`` and only DESCRIBE ``denied-tx``.  A transactional producer with
``denied-tx`` finds its coordinator but is refused InitProducerId with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (a fatal error for the producer); with ``allowed-tx``
it produces, commits and its records are read back read_committed; sending offsets for a
group she may not read is refused GROUP_AUTHORIZATION_FAILED (AddOffsetsToTxn) and the
transaction can then only be aborted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from integration.acl.principals import STANDARD_AUTHORIZER, Conn, sasl_overrides, sasl_user
from integration.clients import TIMEOUT_S
from integration.node_process import NodeProcess

pytestmark = pytest.mark.integration
TOPIC = "txn-open"
GROUP = "txn-group"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    overrides = (
        f"authorizer.class.name={STANDARD_AUTHORIZER}",
        "super.users=User:admin",
        "allow.everyone.if.no.acl.found=false",
        "auto.create.topics.enable=false",
        *sasl_overrides(),
    )
    proc = NodeProcess(Path(tmp_path_factory.mktemp("acl-txn")), overrides).start()
    admin = AdminClient(sasl_user(proc, "admin").conf())
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=TIMEOUT_S)

    def allow(rtype: Any, name: str, op: Any) -> AclBinding:
        return AclBinding(
            rtype,
            name,
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            op,
            AclPermissionType.ALLOW,
        )

    acls = [
        allow(ResourceType.TOPIC, TOPIC, AclOperation.WRITE),
        allow(ResourceType.TOPIC, TOPIC, AclOperation.READ),
        allow(ResourceType.GROUP, GROUP, AclOperation.READ),
        allow(ResourceType.TRANSACTIONAL_ID, "allowed-tx", AclOperation.WRITE),
        allow(ResourceType.TRANSACTIONAL_ID, "denied-tx", AclOperation.DESCRIBE),
    ]
    for future in admin.create_acls(acls, request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture(scope="module")
def alice(node: NodeProcess) -> Conn:
    return sasl_user(node, "alice")


def producer(alice: Conn, txn_id: str) -> Producer:
    return Producer(
        alice.conf(
            transactional_id=txn_id, transaction_timeout_ms=30_000, message_timeout_ms=20_000
        )
    )


def test_init_transactions_without_write_on_the_id_is_refused(alice: Conn) -> None:
    p = producer(alice, "denied-tx")
    with pytest.raises(KafkaException) as refused:
        p.init_transactions(TIMEOUT_S)
    error: KafkaError = refused.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error
    assert error.fatal() or not error.retriable(), error


def test_transaction_with_write_on_the_id_commits(alice: Conn) -> None:
    p = producer(alice, "allowed-tx")
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    for i in range(3):
        p.produce(TOPIC, value=f"committed-{i}".encode())
    p.commit_transaction(TIMEOUT_S)

    consumer = Consumer(
        alice.conf(
            group_id=GROUP,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        values: list[bytes] = []
        for _ in range(100):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            if len(values) >= 3:
                break
        assert values[:3] == [f"committed-{i}".encode() for i in range(3)]
    finally:
        consumer.close()


def test_offsets_for_a_group_without_read_are_refused(alice: Conn) -> None:
    p = producer(alice, "allowed-tx")
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.produce(TOPIC, value=b"to-abort")
    metadata = Consumer(alice.conf(group_id="not-hers")).consumer_group_metadata()
    with pytest.raises(KafkaException) as refused:
        p.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 1)], metadata, TIMEOUT_S)
    error: KafkaError = refused.value.args[0]
    assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    p.abort_transaction(TIMEOUT_S)
