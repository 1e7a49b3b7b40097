"""The security part of the OpenAPI document (:mod:`kraft.rest.openapi`): HTTP Basic, the 401
and 403 every route but the probes may answer, and the SCRAM user and ACL routes."""

from __future__ import annotations

from typing import Final

from kraft.rest.authentication import OPEN_PATHS
from kraft.rest.openapi_parts import (
    INT32,
    JSON,
    STR,
    Schema,
)
from kraft.rest.openapi_parts import error as _error
from kraft.rest.openapi_parts import json_body as _body
from kraft.rest.openapi_parts import op as _op
from kraft.rest.openapi_parts import ref as _ref

MECHANISM: Final[Schema] = {"type": "string", "enum": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}
ACL_FIELDS: Final = (
    "resource_type",
    "resource_name",
    "pattern_type",
    "principal",
    "host",
    "operation",
    "permission_type",
)

SECURITY_SCHEMES: Final[Schema] = {
    "basicAuth": {
        "type": "http",
        "scheme": "basic",
        "description": "a PLAIN user of the node's JAAS configs or a SCRAM user (or a TLS client"
        " certificate when admin.ssl.client.auth asks for one)",
    }
}


SECURITY_SCHEMAS: Final[dict[str, Schema]] = {
    "ScramCredentialInfo": {
        "type": "object",
        "required": ["mechanism", "iterations"],
        "properties": {"mechanism": MECHANISM, "iterations": INT32},
    },
    "User": {
        "type": "object",
        "required": ["name", "credentials"],
        "properties": {
            "name": STR,
            "credentials": {"type": "array", "items": _ref("ScramCredentialInfo")},
        },
    },
    "NewUser": {
        "type": "object",
        "required": ["name", "password"],
        "additionalProperties": False,
        "properties": {
            "name": STR,
            "password": STR,
            "mechanism": {**MECHANISM, "default": "SCRAM-SHA-256"},
            "iterations": {**INT32, "minimum": 4096, "maximum": 16384, "default": 4096},
        },
    },
    "UserCredential": {
        "type": "object",
        "required": ["name", "mechanism", "iterations"],
        "properties": {"name": STR, "mechanism": MECHANISM, "iterations": INT32},
    },
    "Acl": {
        "type": "object",
        "description": "Kafka's AclBinding; enum names in any case",
        "required": list(ACL_FIELDS),
        "properties": {
            "resource_type": {**STR, "description": "TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID"},
            "resource_name": STR,
            "pattern_type": {**STR, "description": "LITERAL or PREFIXED"},
            "principal": {**STR, "description": "User:NAME or User:*"},
            "host": {**STR, "description": "an address or *"},
            "operation": {**STR, "description": "READ, WRITE, CREATE, DELETE, ALTER, ..."},
            "permission_type": {**STR, "description": "ALLOW or DENY"},
        },
    },
    "AclFilter": {
        "type": "object",
        "description": "fields of an Acl; an absent one (or ANY) matches every value",
        "properties": {field: STR for field in ACL_FIELDS},
    },
    "NewAcls": {
        "description": '{"acls": [Acl, ...]} or one Acl (pattern_type LITERAL, host * and'
        " permission_type ALLOW by default)",
        "oneOf": [
            {
                "type": "object",
                "required": ["acls"],
                "properties": {"acls": {"type": "array", "items": _ref("AclFilter")}},
            },
            _ref("AclFilter"),
        ],
    },
    "AclFilters": {
        "description": '{"filters": [AclFilter, ...]} or one AclFilter',
        "oneOf": [
            {
                "type": "object",
                "required": ["filters"],
                "properties": {"filters": {"type": "array", "items": _ref("AclFilter")}},
            },
            _ref("AclFilter"),
        ],
    },
}

FORBIDDEN: Final = _error(
    "the ACLs deny it: TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED or"
    " CLUSTER_AUTHORIZATION_FAILED"
)
UNAUTHENTICATED: Final = _error(
    'AUTHENTICATION_FAILED: no or wrong credentials (with WWW-Authenticate: Basic realm="kraft")'
)


def security_paths() -> dict[str, Schema]:
    users = {"type": "array", "items": _ref("User")}
    acls = {"type": "array", "items": _ref("Acl")}
    only = {
        "name": "mechanism",
        "in": "query",
        "required": False,
        "schema": MECHANISM,
        "description": "only this mechanism's credential (default: all)",
    }
    filters = [{"name": f, "in": "query", "required": False, "schema": STR} for f in ACL_FIELDS]
    secdisabled = _error("SECURITY_DISABLED: no authorizer is configured")
    return {
        "/v1/users": {
            "get": _op(
                "listUsers",
                "SCRAM users: mechanisms and iterations (DescribeUserScramCredentials)",
                {"200": _body(users, "users")},
            ),
            "post": _op(
                "upsertUser",
                "Create or update a user's SCRAM credential (AlterUserScramCredentials); the"
                " salted password is computed on the node",
                {"200": _body(_ref("UserCredential"), "stored")},
                requestBody={"required": True, "content": {JSON: {"schema": _ref("NewUser")}}},
            ),
        },
        "/v1/users/{name}": {
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": STR}],
            "delete": _op(
                "deleteUser",
                "Delete a user's SCRAM credentials",
                {"204": {"description": "deleted"}, "404": _error("RESOURCE_NOT_FOUND")},
                parameters=[only],
            ),
        },
        "/v1/acls": {
            "get": _op(
                "listAcls",
                "ACLs, filtered by any field (DescribeAcls)",
                {"200": _body(acls, "ACLs")},
                parameters=filters,
            ),
            "post": _op(
                "createAcls",
                "Create ACLs (CreateAcls)",
                {
                    "201": _body(
                        {
                            "type": "object",
                            "required": ["acls"],
                            "properties": {"acls": acls},
                        },
                        "created",
                    ),
                    "400": secdisabled,
                },
                requestBody={"required": True, "content": {JSON: {"schema": _ref("NewAcls")}}},
            ),
            "delete": _op(
                "deleteAcls",
                "Delete the ACLs matching filters (DeleteAcls)",
                {
                    "200": _body(
                        {
                            "type": "object",
                            "required": ["deleted"],
                            "properties": {"deleted": acls},
                        },
                        "the ACLs removed",
                    ),
                    "400": secdisabled,
                },
                requestBody={"required": True, "content": {JSON: {"schema": _ref("AclFilters")}}},
            ),
        },
    }


def with_security(paths: dict[str, Schema]) -> dict[str, Schema]:
    """Every route but the open ones may answer 401 and 403; the open ones need nothing."""
    for path, item in paths.items():
        for method, op in item.items():
            if method == "parameters":
                continue
            if path in OPEN_PATHS:
                op["security"] = []
                continue
            op["responses"].setdefault("401", UNAUTHENTICATED)
            op["responses"].setdefault("403", FORBIDDEN)
    return paths
