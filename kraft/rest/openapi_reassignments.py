"""The partition reassignment part of the OpenAPI document (:mod:`kraft.rest.openapi`): the
routes of :mod:`kraft.rest.reassignments` and their schemas."""

from __future__ import annotations

from typing import Final

from kraft.rest.openapi_parts import INT, INT32, JSON, STR, Schema
from kraft.rest.openapi_parts import error as _error
from kraft.rest.openapi_parts import json_body as _body
from kraft.rest.openapi_parts import op as _op
from kraft.rest.openapi_parts import query as _query
from kraft.rest.openapi_parts import ref as _ref

_BROKERS: Final[Schema] = {"type": "array", "items": INT32}


def _obj(required: list[str], **properties: Schema) -> Schema:
    return {"type": "object", "required": required, "properties": properties}


REASSIGNMENT_SCHEMAS: Final[dict[str, Schema]] = {
    "ReassignmentRequest": {
        **_obj(
            ["partitions"],
            partitions={
                "type": "array",
                "minItems": 1,
                "items": _obj(
                    ["partition", "replicas"],
                    partition={**INT32, "minimum": 0},
                    replicas={**_BROKERS, "minItems": 1, "description": "the target replicas"},
                ),
            },
            throttle_bytes_per_s={
                **INT,
                "minimum": 1,
                "description": "set leader/follower.replication.throttled.rate on the brokers"
                " involved and the topic's throttled-replica lists first",
            },
        ),
        "additionalProperties": False,
    },
    "OngoingReassignment": _obj(
        ["partition", "replicas", "adding_replicas", "removing_replicas"],
        partition=INT32,
        replicas={**_BROKERS, "description": "the targets first, then those being removed"},
        adding_replicas=_BROKERS,
        removing_replicas=_BROKERS,
    ),
    "Reassignments": _obj(
        ["topic", "reassignments"],
        topic=STR,
        reassignments={"type": "array", "items": _ref("OngoingReassignment")},
    ),
    "CancelledReassignments": _obj(
        ["topic", "cancelled"],
        topic=STR,
        cancelled={"type": "array", "items": INT32},
    ),
}


def reassignment_paths() -> dict[str, Schema]:
    name = {"name": "name", "in": "path", "required": True, "schema": STR}
    cluster_denied = _error("CLUSTER_AUTHORIZATION_FAILED")
    return {
        "/v1/topics/{name}/reassignments": {
            "parameters": [name],
            "post": _op(
                "startReassignments",
                "Move partitions to new replicas (AlterPartitionReassignments, KIP-455): the"
                " new replicas catch up, join the ISR, then the old ones are removed",
                {
                    "202": _body(_ref("Reassignments"), "started; the moves still in progress"),
                    "400": _error("INVALID_REQUEST or INVALID_REPLICA_ASSIGNMENT"),
                    "403": cluster_denied,
                    "404": _error("UNKNOWN_TOPIC_OR_PARTITION"),
                },
                requestBody={
                    "required": True,
                    "content": {JSON: {"schema": _ref("ReassignmentRequest")}},
                },
            ),
            "get": _op(
                "listReassignments",
                "The moves of this topic in progress (ListPartitionReassignments)",
                {
                    "200": _body(_ref("Reassignments"), "in progress"),
                    "403": cluster_denied,
                    "404": _error("UNKNOWN_TOPIC_OR_PARTITION"),
                },
            ),
            "delete": _op(
                "cancelReassignments",
                "Cancel the moves in progress (all of the topic's, or one partition's): the"
                " partitions return to their original replicas; without ?partition the"
                " topic's throttled-replica lists are cleared too",
                {
                    "200": _body(_ref("CancelledReassignments"), "cancelled"),
                    "400": _error("NO_REASSIGNMENT_IN_PROGRESS or INVALID_REQUEST"),
                    "403": cluster_denied,
                    "404": _error("UNKNOWN_TOPIC_OR_PARTITION"),
                },
                parameters=[_query("partition", {**INT32, "minimum": 0}, "only this partition")],
            ),
        },
    }
