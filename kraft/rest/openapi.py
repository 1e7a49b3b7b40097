"""The OpenAPI 3.0 document of the REST admin API (``GET /v1/openapi.json``).

Kept by hand next to the routes of :mod:`kraft.rest`: the integration tests check that every
route of ``kraft.rest.ROUTES`` is described here (and nothing else), that the document is valid
OpenAPI 3.0, and that real responses match the schemas.

One module although about 600 lines: it is one document (schemas and paths as data), kept
whole so a route and its description are found in one place.
"""

from __future__ import annotations

from typing import Any, Final

from kraft.rest.common import MAX_BODY_BYTES, MAX_JSON_DEPTH
from kraft.rest.openapi_log_dirs import LOG_DIRS_SCHEMAS, log_dirs_paths
from kraft.rest.openapi_parts import (
    INT,
    INT32,
    JSON,
    STR,
    Schema,
)
from kraft.rest.openapi_parts import error as _error
from kraft.rest.openapi_parts import json_body as _json_body
from kraft.rest.openapi_parts import op as _op
from kraft.rest.openapi_parts import query as _query
from kraft.rest.openapi_parts import ref as _ref
from kraft.rest.openapi_quotas import QUOTA_SCHEMAS, quota_paths
from kraft.rest.openapi_reassignments import REASSIGNMENT_SCHEMAS, reassignment_paths
from kraft.rest.openapi_security import (
    SECURITY_SCHEMAS,
    SECURITY_SCHEMES,
    security_paths,
    with_security,
)
from kraft.rest.openapi_transactions import TRANSACTION_SCHEMAS, transaction_paths


def _obj(required: list[str], **properties: Schema) -> Schema:
    out: Schema = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    return out


def _nullable(schema: Schema) -> Schema:
    return {**schema, "nullable": True}


BOOL: Final[Schema] = {"type": "boolean"}
INT_LIST: Final[Schema] = {"type": "array", "items": INT32}
STR_MAP: Final[Schema] = {"type": "object", "additionalProperties": STR}
NULLABLE_STR_MAP: Final[Schema] = {"type": "object", "additionalProperties": _nullable(STR)}
CONFIG_VALUES: Final[Schema] = {
    "type": "object",
    "description": "Kafka topic config names and values; numbers and booleans are accepted",
    "additionalProperties": {"oneOf": [STR, {"type": "number"}, BOOL]},
}


def _group_schemas() -> dict[str, Schema]:
    state = {
        **STR,
        "description": "Empty, PreparingRebalance, CompletingRebalance, Stable or Dead; a"
        " consumer group (KIP-848): Empty, Assigning, Reconciling, Stable or Dead",
    }
    group_type = {**STR, "enum": ["classic", "consumer"], "description": "the group protocol"}
    epoch = _nullable({**INT32, "description": "consumer groups (KIP-848) only"})
    assigned = _obj(["topic", "partitions"], topic=STR, partitions=INT_LIST)
    non_negative = {**INT, "minimum": 0}
    return {
        "GroupSummary": _obj(
            ["group_id", "state", "protocol_type", "coordinator"],
            group_id=STR,
            state=state,
            protocol_type={**STR, "description": "consumer for consumer groups"},
            coordinator={**INT32, "description": "the broker coordinating the group"},
            group_type=group_type,
        ),
        "GroupMember": _obj(
            ["member_id", "group_instance_id", "client_id", "host", "assignment"],
            member_id=STR,
            group_instance_id=_nullable({**STR, "description": "static membership"}),
            client_id=STR,
            host=STR,
            assignment=_nullable(
                {
                    "type": "array",
                    "items": assigned,
                    "description": "the member's partitions (empty until the group is Stable;"
                    " null when the assignment is not a consumer's)",
                }
            ),
            member_epoch=epoch,
            target_assignment=_nullable(
                {
                    "type": "array",
                    "items": assigned,
                    "description": "consumer groups (KIP-848): the partitions the member moves"
                    " towards (null for a classic group)",
                }
            ),
        ),
        "GroupPartition": _obj(
            ["topic", "partition", "committed", "high_watermark", "lag", "member_id"],
            topic=STR,
            partition=INT32,
            committed=_nullable({**INT, "description": "null: no committed offset"}),
            high_watermark=_nullable({**INT, "description": "null: the leader did not answer"}),
            lag=_nullable(
                {**INT, "description": "high_watermark - committed; null if either is unknown"}
            ),
            member_id=_nullable({**STR, "description": "the member it is assigned to"}),
        ),
        "Group": _obj(
            [
                "group_id",
                "state",
                "protocol_type",
                "protocol",
                "coordinator",
                "members",
                "partitions",
                "lag",
            ],
            group_id=STR,
            group_type=group_type,
            state=state,
            protocol_type=STR,
            protocol={**STR, "description": "the assignor (range, roundrobin, ...) once Stable"},
            group_epoch=epoch,
            assignment_epoch=epoch,
            coordinator=_obj(["id", "host", "port"], id=INT32, host=STR, port=INT32),
            members={"type": "array", "items": _ref("GroupMember")},
            partitions={
                "type": "array",
                "items": _ref("GroupPartition"),
                "description": "every partition assigned to a member or with a committed offset",
            },
            lag={**INT, "description": "the sum of the known lags"},
        ),
        "OffsetReset": {
            **_obj(
                ["to"],
                topic={**STR, "description": "every partition of this topic"},
                topics={"type": "array", "items": STR, "minItems": 1},
                all_topics={
                    **BOOL,
                    "description": "every partition the group has committed offsets for",
                },
                to={
                    "description": "the new offsets: the log start, the high watermark, the"
                    " first offset at or after a timestamp (the high watermark if none), one"
                    " offset for every partition, or an offset per partition of 'topic';"
                    " offsets outside [log start, high watermark] are moved to the nearest end",
                    "oneOf": [
                        {"type": "string", "enum": ["earliest", "latest"]},
                        {
                            **_obj(["timestamp"], timestamp={**non_negative, "description": "ms"}),
                            "additionalProperties": False,
                        },
                        {**_obj(["offset"], offset=non_negative), "additionalProperties": False},
                        {
                            **_obj(
                                ["offsets"],
                                offsets={
                                    "type": "object",
                                    "description": "partition number -> offset",
                                    "additionalProperties": non_negative,
                                },
                            ),
                            "additionalProperties": False,
                        },
                    ],
                },
                execute={
                    **BOOL,
                    "default": False,
                    "description": "commit the new offsets; false: a dry run that only plans",
                },
            ),
            "description": 'exactly one of "topic", "topics" or "all_topics": true',
            "additionalProperties": False,
        },
        "OffsetResetResult": _obj(
            ["group_id", "executed", "partitions"],
            group_id=STR,
            executed=BOOL,
            partitions={
                "type": "array",
                "items": _obj(
                    ["topic", "partition", "previous_offset", "new_offset"],
                    topic=STR,
                    partition=INT32,
                    previous_offset=_nullable(INT),
                    new_offset=INT,
                ),
            },
        ),
    }


SCHEMAS: Final[dict[str, Schema]] = {
    "Error": _obj(
        ["error", "message"],
        error={
            "type": "string",
            "description": "a Kafka error name (TOPIC_ALREADY_EXISTS, INVALID_CONFIG, ...) or a"
            " short code of this API (INVALID_REQUEST, NOT_FOUND, METHOD_NOT_ALLOWED,"
            " PAYLOAD_TOO_LARGE, NOT_READY)",
        },
        message=STR,
    ),
    "Health": _obj(["status", "node_id"], status={"type": "string", "enum": ["ok"]}, node_id=INT32),
    "Ready": _obj(["ready"], ready=BOOL),
    "Voter": _obj(["id", "address", "lag"], id=INT32, address=_nullable(STR), lag=INT),
    "Broker": _obj(
        ["id", "host", "port", "rack", "fenced", "epoch"],
        id=INT32,
        host=_nullable(STR),
        port=_nullable(INT32),
        rack=_nullable(STR),
        fenced=BOOL,
        epoch=INT,
        log_dirs={"type": "array", "items": STR, "description": "online log directory ids"},
        offline_log_dirs={
            "type": "array",
            "items": STR,
            "description": "log directory ids the broker reported offline (KIP-112)",
        },
    ),
    "Cluster": _obj(
        ["cluster_id", "controller", "brokers"],
        cluster_id=STR,
        controller=_obj(
            ["leader_id", "epoch", "voters"],
            leader_id=INT32,
            epoch=INT32,
            voters={"type": "array", "items": _ref("Voter")},
        ),
        brokers={"type": "array", "items": _ref("Broker")},
        metadata_offset=INT,
        version=STR,
    ),
    "TopicSummary": _obj(
        ["name", "partitions", "replication_factor"],
        name=STR,
        topic_id=STR,
        partitions=INT32,
        replication_factor=INT32,
    ),
    "PartitionState": _obj(
        ["partition", "leader", "leader_epoch", "replicas", "isr"],
        partition=INT32,
        leader={**INT32, "description": "-1: no leader"},
        leader_epoch=INT32,
        replicas=INT_LIST,
        isr=INT_LIST,
        offline_replicas=INT_LIST,
        log_start_offset=_nullable({**INT, "description": "null: not hosted by this node"}),
        high_watermark=_nullable(INT),
        log_end_offset=_nullable(INT),
        log_dirs={
            "type": "array",
            "items": _nullable(STR),
            "description": "each replica's log directory id (null: not assigned)",
        },
    ),
    "Topic": _obj(
        ["name", "configs", "partitions"],
        name=STR,
        topic_id=STR,
        replication_factor=INT32,
        configs={
            **NULLABLE_STR_MAP,
            "description": "the topic's overrides (every effective value with all_configs=true)",
        },
        partitions={"type": "array", "items": _ref("PartitionState")},
    ),
    "TopicValidated": _obj(
        ["name", "partitions", "replication_factor", "validate_only"],
        name=STR,
        partitions=INT32,
        replication_factor=INT32,
        validate_only=BOOL,
    ),
    "TopicDeletion": _obj(["name", "deleted"], name=STR, deleted=BOOL),
    "NewTopic": {
        **_obj(
            ["name"],
            name={**STR, "description": "1-249 characters of [a-zA-Z0-9._-]"},
            partitions={**INT32, "minimum": 1, "description": "default: num.partitions"},
            replication_factor={
                **INT32,
                "minimum": 1,
                "description": "default: default.replication.factor",
            },
            configs=CONFIG_VALUES,
            validate_only={**BOOL, "description": "check only; create nothing (200)"},
        ),
        "additionalProperties": False,
    },
    "ConfigChanges": {
        **_obj(
            [],
            set=CONFIG_VALUES,
            delete={"type": "array", "items": STR, "description": "back to the default"},
        ),
        "additionalProperties": False,
    },
    "PartitionCount": {
        **_obj(["count"], count={**INT32, "minimum": 1, "description": "the new total"}),
        "additionalProperties": False,
    },
    "Encoding": {
        "type": "string",
        "enum": ["utf-8", "base64"],
        "default": "utf-8",
        "description": "how keys, values and header values are written in JSON",
    },
    "NewRecord": {
        **_obj(
            [],
            key=_nullable(STR),
            value=_nullable(STR),
            headers=NULLABLE_STR_MAP,
            partition=_nullable(
                {
                    **INT32,
                    "minimum": 0,
                    "description": "default: murmur2(key) like Kafka's default partitioner for"
                    " keyed records, round robin otherwise",
                }
            ),
            timestamp=_nullable({**INT, "minimum": 0, "description": "ms; default: now"}),
        ),
        "additionalProperties": False,
    },
    "ProduceRequest": {
        **_obj(
            ["records"],
            records={"type": "array", "minItems": 1, "maxItems": 10000, "items": _ref("NewRecord")},
            encoding=_ref("Encoding"),
        ),
        "additionalProperties": False,
    },
    "RecordOffset": _obj(
        ["partition", "offset"],
        partition=INT32,
        offset=_nullable(INT),
        error={**STR, "description": "set when this record was not appended"},
        message=STR,
    ),
    "ProduceResult": _obj(
        ["topic", "offsets"],
        topic=STR,
        offsets={"type": "array", "items": _ref("RecordOffset"), "description": "request order"},
    ),
    "ProduceError": {
        "allOf": [
            _ref("Error"),
            _obj([], topic=STR, offsets={"type": "array", "items": _ref("RecordOffset")}),
        ]
    },
    "Record": _obj(
        ["offset", "timestamp", "key", "value", "headers"],
        offset=INT,
        timestamp=INT,
        key=_nullable(STR),
        value=_nullable(STR),
        headers={**NULLABLE_STR_MAP, "description": "a repeated header key keeps its last value"},
    ),
    "Records": _obj(
        ["topic", "partition", "records", "next_offset", "high_watermark", "log_start_offset"],
        topic=STR,
        partition=INT32,
        records={"type": "array", "items": _ref("Record")},
        next_offset={**INT, "description": "the offset to read next"},
        high_watermark=INT,
        log_start_offset=INT,
    ),
    **_group_schemas(),
}


BAD_REQUEST: Final = _error(
    "malformed body or parameters (INVALID_REQUEST, also for JSON that nests arrays and"
    f" objects more than {MAX_JSON_DEPTH} deep) or a Kafka error"
)
NOT_FOUND: Final = _error("UNKNOWN_TOPIC_OR_PARTITION")
UNAVAILABLE: Final = _error("NOT_READY or a retriable Kafka error")
NAME: Final[Schema] = {"name": "name", "in": "path", "required": True, "schema": STR}


def _request(schema_name: str) -> Schema:
    return {"required": True, "content": {JSON: {"schema": _ref(schema_name)}}}


def _topic_paths() -> dict[str, Schema]:
    topic_ok = _json_body(_ref("Topic"), "the topic, as described by GET")
    return {
        "/v1/topics": {
            "get": _op(
                "listTopics",
                "List topics",
                {
                    "200": _json_body({"type": "array", "items": _ref("TopicSummary")}, "topics"),
                },
            ),
            "post": _op(
                "createTopic",
                "Create a topic (at the active controller)",
                {
                    "201": _json_body(_ref("Topic"), "created"),
                    "200": _json_body(_ref("TopicValidated"), "validate_only: would be created"),
                    "400": _error(
                        "INVALID_REQUEST, INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS,"
                        " INVALID_REPLICATION_FACTOR, INVALID_CONFIG, ..."
                    ),
                    "409": _error("TOPIC_ALREADY_EXISTS"),
                    "413": _error("PAYLOAD_TOO_LARGE"),
                },
                requestBody=_request("NewTopic"),
            ),
        },
        "/v1/topics/{name}": {
            "parameters": [NAME],
            "get": _op(
                "describeTopic",
                "Describe a topic: configs, partitions, offsets",
                {
                    "200": topic_ok,
                    "404": NOT_FOUND,
                },
                parameters=[
                    _query("all_configs", BOOL, "every effective config, not only overrides")
                ],
            ),
            "delete": _op(
                "deleteTopic",
                "Delete a topic (at the active controller)",
                {
                    "204": {"description": "deleted (this node no longer has it)"},
                    "202": _json_body(_ref("TopicDeletion"), "accepted; brokers delete it soon"),
                    "404": NOT_FOUND,
                },
            ),
        },
        "/v1/topics/{name}/configs": {
            "parameters": [NAME],
            "patch": _op(
                "alterTopicConfigs",
                "Set and delete topic configs (at the active controller)",
                {
                    "200": topic_ok,
                    "400": _error("INVALID_REQUEST or INVALID_CONFIG"),
                    "404": NOT_FOUND,
                },
                requestBody=_request("ConfigChanges"),
            ),
        },
        "/v1/topics/{name}/partitions": {
            "parameters": [NAME],
            "post": _op(
                "createPartitions",
                "Increase the partition count (at the active controller)",
                {
                    "200": topic_ok,
                    "400": _error("INVALID_REQUEST or INVALID_PARTITIONS"),
                    "404": NOT_FOUND,
                },
                requestBody=_request("PartitionCount"),
            ),
        },
    }


def _record_paths() -> dict[str, Schema]:
    partition = {"name": "partition", "in": "path", "required": True, "schema": INT32}
    offset = {"oneOf": [{**INT, "minimum": 0}, {"type": "string", "enum": ["earliest", "latest"]}]}
    return {
        "/v1/topics/{name}/records": {
            "parameters": [NAME],
            "post": _op(
                "produceRecords",
                "Append records (auto-creates the topic when auto.create.topics.enable); any"
                " node serves every partition, reaching those it does not lead at their"
                " leader, as a producer with acks=1",
                {
                    "200": _json_body(_ref("ProduceResult"), "every record appended"),
                    "400": BAD_REQUEST,
                    "404": _json_body(_ref("ProduceError"), "UNKNOWN_TOPIC_OR_PARTITION"),
                    "413": _json_body(
                        _ref("ProduceError"), "MESSAGE_TOO_LARGE or PAYLOAD_TOO_LARGE"
                    ),
                    "503": _json_body(_ref("ProduceError"), "a retriable error; retry"),
                },
                requestBody=_request("ProduceRequest"),
            ),
        },
        "/v1/topics/{name}/partitions/{partition}/records": {
            "parameters": [NAME, partition],
            "get": _op(
                "readRecords",
                "Read committed records (below the high watermark); any node serves every"
                " partition, reading those it does not host from their leader",
                {
                    "200": _json_body(_ref("Records"), "records, possibly none"),
                    "400": BAD_REQUEST,
                    "404": NOT_FOUND,
                    "416": _error("OFFSET_OUT_OF_RANGE"),
                },
                parameters=[
                    _query("offset", offset, "where to start; default: earliest"),
                    _query(
                        "max_records",
                        {**INT32, "minimum": 1, "maximum": 10000, "default": 500},
                        "at most this many records",
                    ),
                    _query(
                        "timeout_ms",
                        {**INT32, "minimum": 0, "maximum": 60000, "default": 0},
                        "long-poll: wait this long for a record at or after offset",
                    ),
                    _query("encoding", _ref("Encoding"), "how keys and values are written"),
                ],
            ),
        },
    }


def _group_paths() -> dict[str, Schema]:
    group = {"name": "group", "in": "path", "required": True, "schema": STR}
    missing = _error("GROUP_ID_NOT_FOUND")
    unavailable = _error("a retriable Kafka error (COORDINATOR_NOT_AVAILABLE, ...) or NOT_READY")
    timed_out = _error("REQUEST_TIMED_OUT")
    return {
        "/v1/groups": {
            "get": _op(
                "listGroups",
                "List consumer groups (ListGroups to every broker)",
                {
                    "200": _json_body({"type": "array", "items": _ref("GroupSummary")}, "groups"),
                    "503": unavailable,
                },
            ),
        },
        "/v1/groups/{group}": {
            "parameters": [group],
            "get": _op(
                "describeGroup",
                "Describe a group: state, members, assignments, committed offsets and lag",
                {
                    "200": _json_body(_ref("Group"), "the group"),
                    "404": missing,
                    "503": unavailable,
                    "504": timed_out,
                },
            ),
            "delete": _op(
                "deleteGroup",
                "Delete an empty group and its offsets (DeleteGroups)",
                {
                    "204": {"description": "deleted"},
                    "404": missing,
                    "409": _error("NON_EMPTY_GROUP: the group has members"),
                    "503": unavailable,
                },
            ),
        },
        "/v1/groups/{group}/offsets": {
            "parameters": [group],
            "post": _op(
                "resetGroupOffsets",
                "Reset an inactive group's committed offsets (a dry run unless execute)",
                {
                    "200": _json_body(_ref("OffsetResetResult"), "the planned (or new) offsets"),
                    "400": BAD_REQUEST,
                    "404": _error("GROUP_ID_NOT_FOUND or UNKNOWN_TOPIC_OR_PARTITION"),
                    "409": _error("NON_EMPTY_GROUP: the group has members (Empty or Dead only)"),
                    "503": unavailable,
                },
                requestBody=_request("OffsetReset"),
            ),
        },
    }


def _node_paths() -> dict[str, Schema]:
    text = {"text/plain": {"schema": STR}}
    return {
        "/v1/health": {
            "get": _op(
                "health",
                "Liveness: 200 while the process runs",
                {
                    "200": _json_body(_ref("Health"), "alive"),
                },
            )
        },
        "/v1/ready": {
            "get": _op(
                "ready",
                "Readiness: the node serves clients",
                {
                    "200": _json_body(_ref("Ready"), "ready"),
                    "503": _json_body({"allOf": [_ref("Error"), _ref("Ready")]}, "NOT_READY"),
                },
            )
        },
        "/v1/cluster": {
            "get": _op(
                "cluster",
                "Cluster id, controller quorum and brokers",
                {
                    "200": _json_body(_ref("Cluster"), "the cluster"),
                    "503": UNAVAILABLE,
                },
            )
        },
        "/v1/cluster/brokers/{id}": {
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": INT32}],
            "delete": _op(
                "unregisterBroker",
                "Remove a stale broker registration (Kafka's UnregisterBroker); the broker must"
                " be fenced (stopped, its session expired)",
                {
                    "204": {"description": "unregistered"},
                    "400": BAD_REQUEST,
                    "404": _error("BROKER_ID_NOT_REGISTERED"),
                    "409": _error("BROKER_IS_ALIVE: the broker is unfenced"),
                },
            ),
        },
        "/metrics": {
            "get": _op(
                "metrics",
                "Prometheus metrics (text format 0.0.4)",
                {
                    "200": {"description": "text/plain; version=0.0.4", "content": text},
                },
            )
        },
        "/v1/openapi.json": {
            "get": _op(
                "openapi",
                "This document",
                {
                    "200": _json_body({"type": "object"}, "OpenAPI 3.0"),
                },
            )
        },
    }


def _with_input_limits(paths: dict[str, Schema]) -> dict[str, Schema]:
    """Every write answers 415 to a body that is not application/json (the API's defence
    against cross-site requests); one that takes a body also answers 413 above the size limit
    and 400 when the JSON nests too deep (kraft.rest.common's input limits)."""
    for item in paths.values():
        for method in ("post", "put", "patch", "delete"):
            if method not in item:
                continue
            responses = item[method]["responses"]
            responses.setdefault(
                "415", _error("UNSUPPORTED_MEDIA_TYPE: a body that is not application/json")
            )
            if "requestBody" in item[method]:
                responses.setdefault("400", BAD_REQUEST)
                too_large = f"PAYLOAD_TOO_LARGE: a body above {MAX_BODY_BYTES} bytes"
                responses.setdefault("413", _error(too_large))
    return paths


def openapi_document(version: str) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "kraft REST admin API",
            "version": version,
            "description": "Served by every node. Writes go to the active controller. Errors are"
            ' {"error": NAME, "message": TEXT} with a Kafka error name or a short code.',
        },
        "paths": with_security(
            _with_input_limits(
                {
                    **_node_paths(),
                    **_topic_paths(),
                    **_record_paths(),
                    **_group_paths(),
                    **transaction_paths(),
                    **reassignment_paths(),
                    **security_paths(),
                    **quota_paths(),
                    **log_dirs_paths(),
                }
            )
        ),
        "components": {
            "schemas": {
                **SCHEMAS,
                **SECURITY_SCHEMAS,
                **TRANSACTION_SCHEMAS,
                **LOG_DIRS_SCHEMAS,
                **REASSIGNMENT_SCHEMAS,
                **QUOTA_SCHEMAS,
            },
            "securitySchemes": SECURITY_SCHEMES,
        },
        "security": [{"basicAuth": []}],
    }
