"""The controller's CreateAcls / DeleteAcls / AlterUserScramCredentials rules."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from controller_helpers import make_controller, run
from hypothesis import given
from hypothesis import strategies as st

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
)
from metadata_log.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from metadata_log.image import ClusterImage

STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
Creation = CreateAclsRequest.AclCreation
Filter = DeleteAclsRequest.DeleteAclsFilter
Upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
Deletion = AlterUserScramCredentialsRequest.ScramCredentialDeletion


def creation(name: str = "t", **fields: Any) -> Creation:
    base: dict[str, Any] = {
        "resource_type": ResourceType.TOPIC,
        "resource_name": name,
        "resource_pattern_type": PatternType.LITERAL,
        "principal": "User:alice",
        "host": "*",
        "operation": AclOperation.READ,
        "permission_type": AclPermissionType.ALLOW,
    }
    return Creation(**(base | fields))


def acl_filter(**fields: Any) -> Filter:
    base: dict[str, Any] = {
        "resource_type_filter": ResourceType.ANY,
        "resource_name_filter": None,
        "pattern_type_filter": PatternType.ANY,
        "principal_filter": None,
        "host_filter": None,
        "operation": AclOperation.ANY,
        "permission_type": AclPermissionType.ANY,
    }
    return Filter(**(base | fields))


def errors(response: Any, field: str) -> list[int]:
    return [r.error_code for r in getattr(response, field)]


def test_create_acls_validates_and_deduplicates() -> None:
    c = make_controller(static_broker_config=STANDARD)
    request = CreateAclsRequest(
        creations=[
            creation(),
            creation(),  # the same ACL again: success, no second record
            creation("", operation=AclOperation.WRITE),
            creation(resource_type=ResourceType.ANY),
            creation(resource_pattern_type=PatternType.MATCH),
            creation(operation=AclOperation.ANY),
            creation(permission_type=AclPermissionType.ANY),
            creation(principal="alice"),
            creation(resource_type=ResourceType.CLUSTER),  # CLUSTER must be kafka-cluster
            creation("kafka-cluster", resource_type=ResourceType.CLUSTER),
        ]
    )
    image, response = run(c, ClusterImage.EMPTY, "handle", request)
    assert errors(response, "results") == [0, 0] + [ErrorCode.INVALID_REQUEST] * 7 + [0]
    assert len(image.acls) == 2
    again, response = run(c, image, "handle", CreateAclsRequest(creations=[creation()]))
    assert errors(response, "results") == [0] and again.acls == image.acls


def test_acl_apis_are_disabled_without_the_authorizer() -> None:
    c = make_controller()
    _, created = run(c, ClusterImage.EMPTY, "handle", CreateAclsRequest(creations=[creation()]))
    _, deleted = run(c, ClusterImage.EMPTY, "handle", DeleteAclsRequest(filters=[acl_filter()]))
    assert errors(created, "results") == [ErrorCode.SECURITY_DISABLED]
    assert errors(deleted, "filter_results") == [ErrorCode.SECURITY_DISABLED]


def test_delete_acls_by_filter() -> None:
    c = make_controller(static_broker_config=STANDARD)
    creations = [
        creation("orders", resource_pattern_type=PatternType.PREFIXED),
        creation("orders.eu"),
        creation("*", principal="User:bob"),
        creation("other"),
    ]
    image, _ = run(c, ClusterImage.EMPTY, "handle", CreateAclsRequest(creations=creations))
    request = DeleteAclsRequest(
        filters=[
            acl_filter(resource_name_filter="orders.eu", pattern_type_filter=PatternType.MATCH),
            acl_filter(principal_filter="User:bob"),  # matched above already: listed, removed once
            acl_filter(operation=0),  # UNKNOWN
        ]
    )
    after, response = run(c, image, "handle", request)
    assert errors(response, "filter_results") == [0, 0, ErrorCode.INVALID_REQUEST]
    matched = response.filter_results
    assert sorted(m.resource_name for m in matched[0].matching_acls) == ["*", "orders", "orders.eu"]
    assert [m.principal for m in matched[1].matching_acls] == ["User:bob"]
    assert [a.resource_name for a in after.acls.values()] == ["other"]


def filter_matches(name: str | None, pattern: PatternType, principal: str | None, acl: Any) -> bool:
    """Kafka's ResourcePatternFilter / AccessControlEntryFilter rules, written out."""
    if principal is not None and acl.principal != principal:
        return False
    if name is None:
        return pattern in (PatternType.ANY, PatternType.MATCH) or acl.pattern_type == pattern
    if pattern == PatternType.ANY:
        return acl.resource_name == name
    if pattern == PatternType.MATCH:
        if acl.pattern_type == PatternType.LITERAL:
            return acl.resource_name in (name, "*")
        return name.startswith(acl.resource_name)
    return acl.pattern_type == pattern and acl.resource_name == name


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "ab", "b", "*"]),
            st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
            st.sampled_from(["User:a", "User:b"]),
        ),
        max_size=6,
    ),
    st.sampled_from([None, "a", "ab", "*"]),
    st.sampled_from(list(PatternType)[1:]),
    st.sampled_from([None, "User:a"]),
)
def test_delete_removes_exactly_what_the_filter_matches(
    acls: list[tuple[str, PatternType, str]],
    name: str | None,
    pattern: PatternType,
    principal: str | None,
) -> None:
    c = make_controller(static_broker_config=STANDARD)
    creations = [creation(n, resource_pattern_type=p, principal=u) for n, p, u in acls]
    image, _ = run(c, ClusterImage.EMPTY, "handle", CreateAclsRequest(creations=creations))
    f = acl_filter(
        resource_name_filter=name, pattern_type_filter=pattern, principal_filter=principal
    )
    after, response = run(c, image, "handle", DeleteAclsRequest(filters=[f]))
    kept = [a for a in image.acls.values() if not filter_matches(name, pattern, principal, a)]
    assert sorted(map(repr, after.acls.values())) == sorted(map(repr, kept))
    assert len(response.filter_results[0].matching_acls) == len(image.acls) - len(kept)


def salted(password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)


def test_alter_user_scram_credentials() -> None:
    c = make_controller()
    pw = salted("secret", b"salt", 4096)
    request = AlterUserScramCredentialsRequest(
        deletions=[Deletion(name="ghost", mechanism=1), Deletion(name="twice", mechanism=1)],
        upsertions=[
            Upsertion(name="alice", mechanism=1, iterations=4096, salt=b"salt", salted_password=pw),
            Upsertion(name="bob", mechanism=3, iterations=4096, salt=b"s", salted_password=pw),
            Upsertion(name="carol", mechanism=2, iterations=4095, salt=b"s", salted_password=pw),
            Upsertion(name="dave", mechanism=2, iterations=16385, salt=b"s", salted_password=pw),
            Upsertion(name="twice", mechanism=2, iterations=4096, salt=b"s", salted_password=pw),
        ],
    )
    image, response = run(c, ClusterImage.EMPTY, "handle", request)
    by_user = {r.user: r.error_code for r in response.results}
    assert by_user == {
        "ghost": ErrorCode.RESOURCE_NOT_FOUND,
        "alice": ErrorCode.NONE,
        "bob": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        "carol": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "dave": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "twice": ErrorCode.DUPLICATE_RESOURCE,
    }
    credential = image.scram["alice", "SCRAM-SHA-256"]
    client_key = hmac.digest(pw, b"Client Key", "sha256")
    assert credential.stored_key == hashlib.sha256(client_key).digest()
    assert credential.server_key == hmac.digest(pw, b"Server Key", "sha256")
    assert (credential.salt, credential.iterations) == (b"salt", 4096)
    assert set(image.scram) == {("alice", "SCRAM-SHA-256")}
    delete = AlterUserScramCredentialsRequest(deletions=[Deletion(name="alice", mechanism=1)])
    image, response = run(c, image, "handle", delete)
    assert errors(response, "results") == [0] and not image.scram
