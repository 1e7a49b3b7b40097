"""The bodies of the ACL routes (kraft/rest/acls.py): Kafka's
AclBinding fields in any case, defaults, filters, and a 400 naming the field for anything
else."""

from __future__ import annotations

from typing import Any

import pytest

from kraft.rest.acls import AclFilter, acl_json, parse_acl
from kraft.rest.common import ApiError, Body
from metadata_log.acls import AclEntry, AclOperation, AclPermissionType, PatternType, ResourceType

ALICE_READS = AclEntry(
    ResourceType.TOPIC,
    "orders",
    PatternType.LITERAL,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)


def test_an_acl_in_any_case_with_defaults() -> None:
    body = {
        "resource_type": "topic",
        "resource_name": "orders",
        "principal": "User:alice",
        "operation": "Read",
    }
    assert parse_acl(Body(body)) == ALICE_READS
    assert acl_json(ALICE_READS) == {
        "resource_type": "TOPIC",
        "resource_name": "orders",
        "pattern_type": "LITERAL",
        "principal": "User:alice",
        "host": "*",
        "operation": "READ",
        "permission_type": "ALLOW",
    }
    assert parse_acl(Body(acl_json(ALICE_READS))) == ALICE_READS


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"resource_type": "ANY"}, "only for filters"),
        ({"resource_type": "TABLE"}, "resource_type 'TABLE' is not one of TOPIC"),
        ({"operation": 3}, "must be a string"),
        ({"pattern_type": "MATCH"}, "only for filters"),
        ({"permission_type": "MAYBE"}, "permission_type"),
        ({"principal": "alice"}, "TYPE:NAME"),
        ({"resource_name": ""}, "must not be empty"),
        ({"host": 5}, "'host' must be a string"),
        ({"colour": "red"}, "unknown field 'colour'"),
    ],
)
def test_a_bad_acl_is_a_400_naming_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiError) as refused:
        parse_acl(Body({**acl_json(ALICE_READS), **change}))
    assert refused.value.status == 400
    assert message in refused.value.message


def test_filters_match_what_they_name() -> None:
    assert AclFilter({}).matches(ALICE_READS)
    assert AclFilter({"principal": "User:alice", "operation": "read"}).matches(ALICE_READS)
    assert AclFilter({"resource_type": "any", "pattern_type": "any"}).matches(ALICE_READS)
    assert not AclFilter({"principal": "User:bob"}).matches(ALICE_READS)
    assert not AclFilter({"permission_type": "DENY"}).matches(ALICE_READS)
    assert not AclFilter({"pattern_type": "PREFIXED"}).matches(ALICE_READS)
    wire = AclFilter({"resource_name": "orders"}).request_filter()
    assert (wire.resource_type_filter, wire.operation, wire.principal_filter) == (
        ResourceType.ANY,
        AclOperation.ANY,
        None,
    )
    with pytest.raises(ApiError, match="must be a string"):
        AclFilter({"principal": ["User:alice"]})
