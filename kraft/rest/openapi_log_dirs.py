"""The OpenAPI description of ``GET /v1/brokers/{id}/log-dirs`` (kraft/rest/log_dirs.py)."""

from __future__ import annotations

from typing import Any, Final

from kraft.rest.openapi_parts import INT, INT32, STR, Schema
from kraft.rest.openapi_parts import error as _error
from kraft.rest.openapi_parts import json_body as _json_body
from kraft.rest.openapi_parts import op as _op
from kraft.rest.openapi_parts import ref as _ref

_PARTITION: Final[Schema] = {
    "type": "object",
    "required": ["topic", "partition", "size_bytes", "offset_lag", "future"],
    "properties": {
        "topic": STR,
        "partition": INT32,
        "size_bytes": INT,
        "offset_lag": {**INT, "description": "high watermark minus log end (future: behind)"},
        "future": {"type": "boolean", "description": "a copy being moved into this directory"},
    },
}

LOG_DIRS_SCHEMAS: Final[dict[str, Schema]] = {
    "LogDirs": {
        "type": "object",
        "required": ["broker", "log_dirs"],
        "properties": {
            "broker": INT32,
            "log_dirs": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["path", "error", "partitions"],
                    "properties": {
                        "path": STR,
                        "error": {**STR, "description": "NONE, or KAFKA_STORAGE_ERROR: offline"},
                        "total_bytes": {**INT, "description": "-1: unknown"},
                        "usable_bytes": {**INT, "description": "-1: unknown"},
                        "partitions": {"type": "array", "items": _PARTITION},
                    },
                },
            },
        },
    }
}


def log_dirs_paths() -> dict[str, Any]:
    return {
        "/v1/brokers/{id}/log-dirs": {
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": INT32}],
            "get": _op(
                "brokerLogDirs",
                "A broker's log directories and the partitions in each (Kafka's DescribeLogDirs)",
                {
                    "200": _json_body(_ref("LogDirs"), "the broker's log directories"),
                    "400": _error("INVALID_REQUEST: the id is not an integer"),
                    "404": _error("BROKER_NOT_AVAILABLE: not registered"),
                    "503": _error("NOT_READY, or the broker did not answer"),
                },
            ),
        }
    }
