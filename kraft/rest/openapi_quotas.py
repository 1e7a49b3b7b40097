"""The client-quota part of the OpenAPI document (:mod:`kraft.rest.openapi`): the routes of
:mod:`kraft.rest.quotas` and their schemas."""

from __future__ import annotations

from typing import Final

from kraft.rest.openapi_parts import JSON, STR, Schema
from kraft.rest.openapi_parts import error as _error
from kraft.rest.openapi_parts import json_body as _body
from kraft.rest.openapi_parts import op as _op
from kraft.rest.openapi_parts import query as _query
from kraft.rest.openapi_parts import ref as _ref

_NAME: Final[Schema] = {**STR, "nullable": True, "description": "null: the default entity"}
_ENTITY: Final[Schema] = {
    "type": "object",
    "description": 'entity type ("user", "client-id", "ip") -> name',
    "additionalProperties": _NAME,
}
_VALUES: Final[Schema] = {
    "type": "object",
    "description": "quota key (producer_byte_rate, consumer_byte_rate, request_percentage,"
    " controller_mutation_rate, connection_creation_rate) -> value",
    "additionalProperties": {"type": "number"},
}

QUOTA_SCHEMAS: Final[dict[str, Schema]] = {
    "ClientQuota": {
        "type": "object",
        "required": ["entity", "quotas"],
        "properties": {"entity": _ENTITY, "quotas": _VALUES},
    },
    "QuotaAlteration": {
        "type": "object",
        "required": ["entity"],
        "properties": {
            "entity": _ENTITY,
            "set": _VALUES,
            "remove": {"type": "array", "items": STR},
            "validate_only": {"type": "boolean"},
        },
    },
}


def quota_paths() -> dict[str, Schema]:
    by = "a name, <default> for the default entity, or * for any"
    return {
        "/v1/quotas": {
            "get": _op(
                "listQuotas",
                "Client quotas, filtered by entity (DescribeClientQuotas)",
                {
                    "200": _body({"type": "array", "items": _ref("ClientQuota")}, "quotas"),
                    "400": _error("BAD_REQUEST: an invalid filter"),
                },
                parameters=[
                    _query("user", STR, by),
                    _query("client-id", STR, by),
                    _query("ip", STR, by),
                    _query("strict", {"type": "boolean"}, "only entities of exactly these types"),
                ],
            ),
            "post": _op(
                "alterQuotas",
                "Set and remove an entity's quotas (AlterClientQuotas)",
                {
                    "200": _body(_ref("ClientQuota"), "the entity's quotas now"),
                    "400": _error("INVALID_REQUEST: unknown key, value <= 0 or bad entity"),
                },
                requestBody={
                    "required": True,
                    "content": {JSON: {"schema": _ref("QuotaAlteration")}},
                },
            ),
        }
    }
