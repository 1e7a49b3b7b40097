"""The building blocks the parts of the OpenAPI document share (:mod:`kraft.rest.openapi`,
:mod:`kraft.rest.openapi_security`, :mod:`kraft.rest.openapi_transactions`): the common
scalar schemas, references, JSON bodies, errors, operations and query parameters."""

from __future__ import annotations

from typing import Any, Final

Schema = dict[str, Any]
JSON: Final = "application/json"
STR: Final[Schema] = {"type": "string"}
INT: Final[Schema] = {"type": "integer", "format": "int64"}
INT32: Final[Schema] = {"type": "integer", "format": "int32"}


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def json_body(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def error(description: str) -> Schema:
    """A response of the one error shape (``Error``)."""
    return json_body(ref("Error"), description)


def op(op_id: str, summary: str, responses: dict[str, Schema], **extra: Any) -> Schema:
    """An operation answering ``responses``, and any other error in the same shape."""
    return {
        "operationId": op_id,
        "summary": summary,
        "responses": {**responses, "default": error("any other error, same shape")},
        **extra,
    }


def query(name: str, schema: Schema, description: str) -> Schema:
    """An optional query parameter."""
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }
