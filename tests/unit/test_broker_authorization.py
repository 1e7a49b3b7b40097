"""BrokerAuthorizer: Kafka's config keys, and one StandardAuthorizer per set of ACLs."""

from __future__ import annotations

import uuid

import pytest

from broker.security.authorization import AuthorizerSettings, BrokerAuthorizer, operations_bits
from broker.security.session import Session
from metadata_log.acls import AclEntry, AclOperation, AclPermissionType, PatternType, ResourceType
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage, acl_record

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
READ_T = AclEntry(
    ResourceType.TOPIC,
    "t",
    PatternType.LITERAL,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)


def test_settings_from_kafka_keys() -> None:
    settings = AuthorizerSettings.from_config(
        {
            "authorizer.class.name": STANDARD,
            "super.users": "User:admin; User:broker;",
            "allow.everyone.if.no.acl.found": "TRUE",
        }
    )
    assert settings == AuthorizerSettings(True, frozenset({"User:admin", "User:broker"}), True)
    assert not AuthorizerSettings.from_config({"authorizer.class.name": ""}).enabled
    assert not AuthorizerSettings.from_config({}).allow_everyone_if_no_acl_found


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}, "authorizer.class"),
        ({"allow.everyone.if.no.acl.found": "yes"}, "allow.everyone.if.no.acl.found"),
        ({"super.users": "admin"}, "super.users"),
    ],
)
def test_bad_settings_name_the_key(values: dict[str, str], key: str) -> None:
    with pytest.raises(ValueError, match=key):
        AuthorizerSettings.from_config(values)


def test_rebuilt_only_when_the_acls_change() -> None:
    image = ClusterImage.EMPTY
    authorizer = BrokerAuthorizer.from_config({"authorizer.class.name": STANDARD}, lambda: image)
    alice = Session.internal("User:alice")
    assert not authorizer.authorize(alice, AclOperation.READ, ResourceType.TOPIC, "t")
    first = authorizer.current()
    image = replay_records(image, [])  # a new image, the same ACL map
    assert authorizer.current() is first
    image = replay_records(image, [acl_record(uuid.UUID(int=1), READ_T)])
    assert authorizer.current() is not first
    assert authorizer.authorize(alice, AclOperation.READ, ResourceType.TOPIC, "t")
    ops = authorizer.authorized_operations(alice, ResourceType.TOPIC, "t")
    assert ops == {AclOperation.READ, AclOperation.DESCRIBE}
    bits = authorizer.authorized_operations_bits(alice, ResourceType.TOPIC, "t")
    assert bits == (1 << 3) | (1 << 8) == operations_bits(ops)


def test_disabled_allows_everything() -> None:
    authorizer = BrokerAuthorizer.from_config({}, lambda: ClusterImage.EMPTY)
    assert not authorizer.enabled
    assert authorizer.authorize(Session.internal(), AclOperation.DELETE, ResourceType.CLUSTER)
