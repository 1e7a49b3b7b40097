"""StandardAuthorizer against a brute-force model of Kafka's rules, and the rules by example."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from metadata_log.acls import AclEntry, AclOperation, AclPermissionType, PatternType, ResourceType
from metadata_log.authorizer import DISABLED_AUTHORIZER, SUPPORTED_OPERATIONS, StandardAuthorizer

OPERATIONS = [op for op in AclOperation if op > AclOperation.ANY]
TYPES = [ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER]
NAMES = ["", "a", "ab", "abc", "b", "*", "a*"]
PRINCIPALS = ["User:alice", "User:bob", "User:*", "Group:alice", "Group:*"]
HOSTS = ["*", "10.0.0.1", "10.0.0.2"]
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, LITERAL, PREFIXED = ResourceType.TOPIC, PatternType.LITERAL, PatternType.PREFIXED

acls = st.builds(
    AclEntry,
    resource_type=st.sampled_from(TYPES),
    resource_name=st.sampled_from(NAMES),
    pattern_type=st.sampled_from([LITERAL, PREFIXED]),
    principal=st.sampled_from(PRINCIPALS),
    host=st.sampled_from(HOSTS),
    operation=st.sampled_from(OPERATIONS),
    permission=st.sampled_from([ALLOW, DENY]),
)
requests = st.tuples(
    st.sampled_from(["User:alice", "User:bob", "User:carol", "Group:alice"]),
    st.sampled_from(HOSTS[1:]),
    st.sampled_from(OPERATIONS),
    st.sampled_from(TYPES),
    st.sampled_from(NAMES),
)


def reference(
    all_acls: list[AclEntry],
    super_users: frozenset[str],
    allow_if_no_acl: bool,
    request: tuple[str, str, AclOperation, ResourceType, str],
) -> bool:
    """Kafka's rules, written out plainly: a scan of every ACL."""
    principal, host, operation, resource_type, name = request
    if principal in super_users:
        return True

    def pattern_matches(acl: AclEntry) -> bool:
        if acl.resource_type != resource_type:
            return False
        if acl.pattern_type == LITERAL:
            return acl.resource_name == name or acl.resource_name == "*"
        return name.startswith(acl.resource_name)

    def applies(acl: AclEntry) -> bool:
        principal_type = principal.split(":")[0]
        if acl.principal not in (principal, principal_type + ":*"):
            return False
        if acl.host not in ("*", host):
            return False
        if acl.operation in (AclOperation.ALL, operation):
            return True
        if acl.permission == DENY:
            return False
        if operation == AclOperation.DESCRIBE:
            return acl.operation in (
                AclOperation.READ,
                AclOperation.WRITE,
                AclOperation.DELETE,
                AclOperation.ALTER,
            )
        if operation == AclOperation.DESCRIBE_CONFIGS:
            return acl.operation == AclOperation.ALTER_CONFIGS
        return False

    on_resource = [acl for acl in all_acls if pattern_matches(acl)]
    matching = [acl for acl in on_resource if applies(acl)]
    if any(acl.permission == DENY for acl in matching):
        return False
    if any(acl.permission == ALLOW for acl in matching):
        return True
    return allow_if_no_acl and not on_resource


@given(
    st.lists(acls, max_size=12),
    st.sampled_from([frozenset(), frozenset({"User:bob"})]),
    st.booleans(),
    st.lists(requests, min_size=1, max_size=10),
)
def test_authorize_agrees_with_a_full_scan(
    all_acls: list[AclEntry],
    super_users: frozenset[str],
    allow_if_no_acl: bool,
    reqs: list[tuple[str, str, AclOperation, ResourceType, str]],
) -> None:
    authorizer = StandardAuthorizer(all_acls, super_users, allow_if_no_acl)
    for request in reqs:
        expected = reference(all_acls, super_users, allow_if_no_acl, request)
        assert authorizer.authorize(*request) == expected, request
        principal, host, _, resource_type, name = request
        assert authorizer.authorized_operations(principal, host, resource_type, name) == {
            op
            for op in SUPPORTED_OPERATIONS[resource_type]
            if reference(all_acls, super_users, allow_if_no_acl, (*request[:2], op, *request[3:]))
        }


def acl(
    name: str,
    operation: AclOperation,
    permission: AclPermissionType = ALLOW,
    *,
    pattern: PatternType = LITERAL,
    principal: str = "User:alice",
    host: str = "*",
    resource_type: ResourceType = TOPIC,
) -> AclEntry:
    return AclEntry(resource_type, name, pattern, principal, host, operation, permission)


def test_deny_beats_allow_and_prefixes_match() -> None:
    authorizer = StandardAuthorizer(
        [
            acl("orders", AclOperation.ALL, pattern=PREFIXED),
            acl("orders.secret", AclOperation.READ, DENY),
        ],
        frozenset(),
        False,
    )
    assert authorizer.authorize("User:alice", "1.2.3.4", AclOperation.READ, TOPIC, "orders.eu")
    assert not authorizer.authorize(
        "User:alice", "1.2.3.4", AclOperation.READ, TOPIC, "orders.secret"
    )
    # DENY READ implies nothing: DESCRIBE of the secret topic stays allowed by the ALL prefix
    assert authorizer.authorize(
        "User:alice", "1.2.3.4", AclOperation.DESCRIBE, TOPIC, "orders.secret"
    )
    assert not authorizer.authorize("User:alice", "1.2.3.4", AclOperation.READ, TOPIC, "order")
    assert not authorizer.authorize("User:bob", "1.2.3.4", AclOperation.READ, TOPIC, "orders.eu")


def test_implied_operations() -> None:
    authorizer = StandardAuthorizer(
        [acl("t", AclOperation.WRITE), acl("t", AclOperation.ALTER_CONFIGS)], frozenset(), False
    )
    ops = authorizer.authorized_operations("User:alice", "h", TOPIC, "t")
    assert ops == {
        AclOperation.WRITE,
        AclOperation.DESCRIBE,
        AclOperation.ALTER_CONFIGS,
        AclOperation.DESCRIBE_CONFIGS,
    }


def test_wildcards_of_principal_host_and_name() -> None:
    authorizer = StandardAuthorizer(
        [acl("*", AclOperation.READ, principal="User:*", host="10.0.0.1")], frozenset(), False
    )
    assert authorizer.authorize("User:anyone", "10.0.0.1", AclOperation.READ, TOPIC, "x")
    assert not authorizer.authorize("User:anyone", "10.0.0.2", AclOperation.READ, TOPIC, "x")
    assert not authorizer.authorize("Group:anyone", "10.0.0.1", AclOperation.READ, TOPIC, "x")


def test_allow_everyone_only_where_no_acl_names_the_resource() -> None:
    authorizer = StandardAuthorizer(
        [acl("t", AclOperation.WRITE, principal="User:bob")], frozenset(), True
    )
    assert authorizer.authorize("User:alice", "h", AclOperation.READ, TOPIC, "other")
    # an ACL of bob on t means t is governed by ACLs: alice gets nothing there
    assert not authorizer.authorize("User:alice", "h", AclOperation.READ, TOPIC, "t")
    assert not StandardAuthorizer([], frozenset(), False).authorize(
        "User:alice", "h", AclOperation.READ, TOPIC, "t"
    )


def test_super_users_and_the_disabled_authorizer() -> None:
    authorizer = StandardAuthorizer(
        [acl("t", AclOperation.ALL, DENY, principal="User:*")], frozenset({"User:admin"}), False
    )
    assert authorizer.enabled
    assert authorizer.authorize("User:admin", "h", AclOperation.DELETE, TOPIC, "t")
    assert not authorizer.authorize("User:alice", "h", AclOperation.DELETE, TOPIC, "t")
    assert not DISABLED_AUTHORIZER.enabled
    assert DISABLED_AUTHORIZER.authorize("User:x", "h", AclOperation.DELETE, TOPIC, "t")
    cluster = ResourceType.CLUSTER
    assert (
        DISABLED_AUTHORIZER.authorized_operations("User:x", "h", cluster, "kafka-cluster")
        == (SUPPORTED_OPERATIONS[cluster])
    )
