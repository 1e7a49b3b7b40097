"""The ACL matrix's principals, their client settings and their ACLs (``integration/acl``)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from integration.clients import (
    TIMEOUT_S,
    confluent_conf,
)
from integration.node_process import NodeProcess

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


def sasl_user(node: NodeProcess, user: str) -> Conn:
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


def sasl_overrides() -> tuple[str, ...]:
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


def acls_for(principal: str) -> list[AclBinding]:
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


def unique_name(prefix: str, what: str) -> str:
    return f"{prefix}{what}-{next(_names)}"


def confluent_error(future: Any) -> int | None:
    """The Kafka error code an admin future failed with, or None."""
    try:
        future.result(TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0].code()  # type: ignore[no-any-return]
    return None
