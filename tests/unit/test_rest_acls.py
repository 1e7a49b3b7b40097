"""The bodies of the ACL and user routes (kraft/rest/acls.py, users.py): Kafka's
AclBinding fields in any case, defaults, filters, and a 400 naming the field for anything
else."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from test_rest_security import basic, security, serve

from kraft.rest.acls import AclFilter, acl_json, parse_acl
from kraft.rest.common import ApiError, Body
from metadata_log.acls import AclEntry, AclOperation, AclPermissionType, PatternType, ResourceType

ADMIN = basic("admin", "admin-secret")
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


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"name": "u", "password": "pw", "iterations": 100}, "'iterations' must be an integer >="),
        ({"name": "u", "password": "pw", "iterations": 20000}, "between 4096 and 16384"),
        ({"name": "u", "password": "pw", "mechanism": "SCRAM-SHA-1"}, "is not one of"),
        ({"name": "u", "password": ""}, "must not be empty"),
        ({"name": "u", "password": "x" * 2000}, "over 1024 bytes"),
        ({"name": "u"}, "'password' is required"),
        ({"name": "u", "password": "pw", "salt": "00"}, "unknown field 'salt'"),
    ],
)
def test_a_bad_user_body_is_a_400_before_anything_is_sent(
    body: dict[str, Any], message: str
) -> None:
    async def scenario(client: TestClient[Any, Any]) -> tuple[int, Any]:
        response = await client.post("/v1/users", json=body, headers=ADMIN)
        return response.status, await response.json()

    # the fake node has no controller: a request that got as far as sending would be a 503
    status, answer = serve(scenario, security())
    assert (status, answer["error"]) == (400, "INVALID_REQUEST"), answer
    assert message in answer["message"]


def test_a_bad_acl_request_is_a_400_before_anything_is_sent() -> None:
    async def scenario(client: TestClient[Any, Any]) -> list[int]:
        statuses = []
        for method, body in (
            ("POST", {"acls": []}),
            ("POST", {"acls": [acl_json(ALICE_READS)] * 1001}),
            ("POST", {"acls": "all"}),
            ("DELETE", {"filters": [{"operation": "FLY"}]}),
        ):
            response = await client.request(method, "/v1/acls", json=body, headers=ADMIN)
            statuses.append(response.status)
        response = await client.get("/v1/acls?colour=red", headers=ADMIN)
        statuses.append(response.status)
        return statuses

    assert serve(scenario, security()) == [400] * 5
