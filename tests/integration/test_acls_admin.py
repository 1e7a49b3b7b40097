"""ACL and SCRAM-credential admin APIs through real admin clients against real ``kraft dev``.

confluent-kafka (librdkafka) and kafka-python create, describe and delete ACLs on a node with
Kafka's StandardAuthorizer (``super.users=User:ANONYMOUS``: the plaintext clients are super
users); the ACLs take effect (a DENY makes the cluster refuse the same client); both alter and
describe SCRAM credentials (salts and keys never come back); without an authorizer the ACL APIs
answer SECURITY_DISABLED.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
)
from kafka.admin import ResourcePattern as KpPattern
from kafka.admin import ResourcePatternFilter as KpPatternFilter
from kafka.admin import ResourceType as KpResourceType
from kafka.admin import UserScramCredentialDeletion as KpDeletion
from kafka.admin import UserScramCredentialUpsertion as KpUpsertion
from kafka.errors import ClusterAuthorizationFailedError, NoError, SecurityDisabledError

from integration.clients import CLIENT_TIMEOUT_MS, TIMEOUT_S, confluent_conf
from integration.node_process import NodeProcess

pytestmark = pytest.mark.integration
STANDARD = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
EVERY_ACL = AclBindingFilter(
    ResourceType.ANY,
    None,
    ResourcePatternType.ANY,
    None,
    None,
    AclOperation.ANY,
    AclPermissionType.ANY,
)

KP_EVERY_ACL = ACLFilter(
    principal=None,
    host=None,
    operation=ACLOperation.ANY,
    permission_type=ACLPermissionType.ANY,
    resource_pattern=KpPatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY),
)


def start(path: Path, *overrides: str) -> NodeProcess:
    return NodeProcess(path, overrides=overrides).start()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = start(tmp_path_factory.mktemp("secured"), STANDARD, "super.users=User:ANONYMOUS")
    yield proc
    assert proc.stop() == 0, proc.log_tail()


def admin_of(node: NodeProcess) -> AdminClient:
    return AdminClient(confluent_conf(node))


def binding(name: str, principal: str = "User:alice", **kw: object) -> AclBinding:
    return AclBinding(
        kw.get("restype", ResourceType.TOPIC),  # type: ignore[arg-type]
        name,
        kw.get("pattern", ResourcePatternType.LITERAL),  # type: ignore[arg-type]
        principal,
        "*",
        kw.get("operation", AclOperation.READ),  # type: ignore[arg-type]
        kw.get("permission", AclPermissionType.ALLOW),  # type: ignore[arg-type]
    )


def create(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)


def described(admin: AdminClient, acl_filter: AclBindingFilter = EVERY_ACL) -> set[AclBinding]:
    return set(admin.describe_acls(acl_filter, request_timeout=TIMEOUT_S).result(TIMEOUT_S))


def delete_all(admin: AdminClient) -> list[AclBinding]:
    futures = admin.delete_acls([EVERY_ACL], request_timeout=TIMEOUT_S)
    return [b for f in futures.values() for b in f.result(timeout=TIMEOUT_S)]


def test_confluent_create_describe_delete_acls(secured: NodeProcess) -> None:
    admin = admin_of(secured)
    wanted = [
        binding("orders", pattern=ResourcePatternType.PREFIXED, operation=AclOperation.WRITE),
        binding("orders.secret", operation=AclOperation.READ, permission=AclPermissionType.DENY),
        binding("g1", "User:bob", restype=ResourceType.GROUP),
    ]
    create(admin, wanted)
    assert described(admin) == set(wanted)
    # MATCH: every ACL that applies to the topic orders.secret
    match = AclBindingFilter(
        ResourceType.TOPIC,
        "orders.secret",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert described(admin, match) == set(wanted[:2])
    bad = binding("", operation=AclOperation.READ)  # an empty resource name
    with pytest.raises(KafkaException) as exc:
        create(admin, [bad])
    assert exc.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert set(delete_all(admin)) == set(wanted)
    assert described(admin) == set()


def test_kafka_python_create_describe_delete_acls(secured: NodeProcess) -> None:
    admin = KafkaAdminClient(
        bootstrap_servers=secured.bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS
    )
    try:
        acl = ACL(
            principal="User:carol",
            host="*",
            operation=ACLOperation.DESCRIBE,
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=KpPattern(KpResourceType.TOPIC, "kp-topic"),
        )
        result = admin.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        acl_filter = ACLFilter(
            principal="User:carol",
            host=None,
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=KpPatternFilter(
                KpResourceType.TOPIC, None, ACLResourcePatternType.ANY
            ),
        )
        acls, error = admin.describe_acls(acl_filter)
        assert error is NoError and acls == [acl]
        ((_, matching, error),) = admin.delete_acls([acl_filter])
        assert error is NoError and matching == [acl]
        assert admin.describe_acls(acl_filter)[0] == []
    finally:
        admin.close()


def test_acls_take_effect(tmp_path: Path) -> None:
    """No super user; allow.everyone.if.no.acl.found opens the cluster until an ACL names it."""
    node = start(tmp_path, STANDARD, "allow.everyone.if.no.acl.found=true")
    try:
        admin = admin_of(node)
        anonymous = "User:ANONYMOUS"
        assert described(admin) == set()
        allow_alter = binding(
            "kafka-cluster", anonymous, restype=ResourceType.BROKER, operation=AclOperation.ALTER
        )
        deny_describe = binding(
            "kafka-cluster",
            anonymous,
            restype=ResourceType.BROKER,
            operation=AclOperation.DESCRIBE,
            permission=AclPermissionType.DENY,
        )
        create(admin, [allow_alter, deny_describe])
        # librdkafka 2.x reports a DescribeAcls error as an empty result: ask with kafka-python
        kp = KafkaAdminClient(
            bootstrap_servers=node.bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS
        )
        try:
            with pytest.raises(ClusterAuthorizationFailedError):
                kp.describe_acls(KP_EVERY_ACL)
            assert set(delete_all(admin)) == {allow_alter, deny_describe}  # ALTER: still allowed
            assert kp.describe_acls(KP_EVERY_ACL) == ([], NoError)
        finally:
            kp.close()
    finally:
        assert node.stop() == 0, node.log_tail()


def test_scram_credentials(secured: NodeProcess) -> None:
    admin = admin_of(secured)
    sha256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    sha512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futures = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion("alice", sha256, b"alice-secret", b"salt-of-alice"),
            UserScramCredentialUpsertion("bob", sha512, b"bob-secret"),
        ],
        request_timeout=TIMEOUT_S,
    )
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)
    everyone = admin.describe_user_scram_credentials(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    assert {
        user: [(i.mechanism, i.iterations) for i in d.scram_credential_infos]
        for user, d in everyone.items()
    } == {
        "alice": [(ScramMechanism.SCRAM_SHA_256, 4096)],
        "bob": [(ScramMechanism.SCRAM_SHA_512, 8192)],
    }
    too_few = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100)
    (future,) = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("carol", too_few, b"pw")], request_timeout=TIMEOUT_S
    ).values()
    with pytest.raises(KafkaException) as exc:
        future.result(timeout=TIMEOUT_S)
    assert exc.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    (future,) = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_512)],
        request_timeout=TIMEOUT_S,
    ).values()
    with pytest.raises(KafkaException) as exc:
        future.result(timeout=TIMEOUT_S)
    assert exc.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    (future,) = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_256)],
        request_timeout=TIMEOUT_S,
    ).values()
    future.result(timeout=TIMEOUT_S)
    (future,) = admin.describe_user_scram_credentials(["alice"], request_timeout=TIMEOUT_S).values()
    with pytest.raises(KafkaException) as exc:
        future.result(timeout=TIMEOUT_S)
    assert exc.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def test_acl_apis_without_an_authorizer(node: NodeProcess) -> None:
    admin = admin_of(node)
    with pytest.raises(KafkaException) as exc:
        create(admin, [binding("t")])
    assert exc.value.args[0].code() == KafkaError.SECURITY_DISABLED
    with pytest.raises(KafkaException) as exc:
        delete_all(admin)
    assert exc.value.args[0].code() == KafkaError.SECURITY_DISABLED
    kp = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS)
    try:
        with pytest.raises(SecurityDisabledError):
            kp.describe_acls(KP_EVERY_ACL)
    finally:
        kp.close()


def test_kafka_python_scram_credentials(secured: NodeProcess) -> None:
    admin = KafkaAdminClient(
        bootstrap_servers=secured.bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS
    )
    try:
        result = admin.alter_user_scram_credentials(
            [
                KpUpsertion("kp-user", "SCRAM-SHA-512", "kp-secret", iterations=8192),
                KpDeletion("kp-ghost", "SCRAM-SHA-256"),
            ]
        )
        assert result["kp-user"] is None and "does not exist" in result["kp-ghost"]
        described = admin.describe_user_scram_credentials(["kp-user", "kp-nobody"])
        assert [
            (int(i["mechanism"]), i["iterations"]) for i in described["kp-user"]["credential_infos"]
        ] == [(2, 8192)]
        assert described["kp-user"]["error"] is None and described["kp-nobody"]["error"]
    finally:
        admin.close()
