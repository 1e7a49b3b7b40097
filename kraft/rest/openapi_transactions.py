"""The transaction part of the OpenAPI document (:mod:`kraft.rest.openapi`): the routes of
:mod:`kraft.rest.transactions` and their schemas (kafka-transactions.sh, KIP-664)."""

from __future__ import annotations

from typing import Final

from kraft.rest.openapi_parts import (
    INT,
    INT32,
    JSON,
    STR,
    Schema,
)
from kraft.rest.openapi_parts import error as _error
from kraft.rest.openapi_parts import json_body as _body
from kraft.rest.openapi_parts import op as _op
from kraft.rest.openapi_parts import query as _query
from kraft.rest.openapi_parts import ref as _ref
from kraft.transactions.model import DEFAULT_MAX_TRANSACTION_TIMEOUT_MS, TRANSACTION_STATES

STATE: Final[Schema] = {"type": "string", "enum": list(TRANSACTION_STATES)}


def _obj(required: list[str], **properties: Schema) -> Schema:
    return {"type": "object", "required": required, "properties": properties}


def _nullable(schema: Schema, description: str) -> Schema:
    return {**schema, "nullable": True, "description": description}


def _all(*names: str) -> list[str]:
    return list(names)


_PARTITION_REF: Final = _obj(["topic", "partition"], topic=STR, partition=INT32)
_COORDINATOR_EPOCH: Final = _nullable(INT32, "null: no coordinator has written a marker here yet")

TRANSACTION_SCHEMAS: Final[dict[str, Schema]] = {
    "TransactionListing": _obj(
        _all("transactional_id", "producer_id", "state", "coordinator"),
        transactional_id=STR,
        producer_id=INT,
        state=STATE,
        coordinator={**INT32, "description": "the broker coordinating the id"},
    ),
    "Transaction": _obj(
        _all(
            "transactional_id",
            "state",
            "producer_id",
            "producer_epoch",
            "transaction_timeout_ms",
            "transaction_start_time_ms",
            "transaction_duration_ms",
            "partitions",
            "coordinator",
        ),
        transactional_id=STR,
        state=STATE,
        producer_id=INT,
        producer_epoch=INT32,
        transaction_timeout_ms=INT32,
        transaction_start_time_ms=_nullable(INT, "null: no transaction in progress"),
        transaction_duration_ms=_nullable(INT, "now minus the start time"),
        partitions={
            "type": "array",
            "items": _PARTITION_REF,
            "description": "the partitions in the transaction (those still awaiting a marker"
            " while it completes)",
        },
        coordinator=_obj(["id", "host", "port"], id=INT32, host=STR, port=INT32),
    ),
    "ProducerState": _obj(
        _all(
            "producer_id",
            "producer_epoch",
            "last_sequence",
            "last_timestamp",
            "coordinator_epoch",
            "current_transaction_start_offset",
        ),
        producer_id=INT,
        producer_epoch=INT32,
        last_sequence=INT32,
        last_timestamp=INT,
        coordinator_epoch=_COORDINATOR_EPOCH,
        current_transaction_start_offset=_nullable(INT, "null: no open transaction"),
    ),
    "PartitionProducers": _obj(
        _all("topic", "partition", "broker_id", "producers"),
        topic=STR,
        partition=INT32,
        broker_id=_nullable(INT32, "the replica asked; null: the leader"),
        producers={"type": "array", "items": _ref("ProducerState")},
    ),
    "TransactionAbort": {
        "type": "object",
        "required": ["topic", "partition"],
        "description": "the transaction by its first offset on the partition (start_offset),"
        " or by producer_id, producer_epoch and coordinator_epoch (all three)",
        "properties": {
            "topic": STR,
            "partition": {**INT32, "minimum": 0},
            "start_offset": {**INT, "minimum": 0},
            "producer_id": {**INT, "minimum": 0},
            "producer_epoch": {**INT32, "minimum": 0, "maximum": 32767},
            "coordinator_epoch": {
                **INT32,
                "minimum": -1,
                "description": "a negative epoch is taken as 0, as Kafka's tool does",
            },
        },
        "additionalProperties": False,
    },
    "TransactionAborted": _obj(
        _all("topic", "partition", "producer_id", "producer_epoch", "coordinator_epoch", "aborted"),
        topic=STR,
        partition=INT32,
        producer_id=INT,
        producer_epoch=INT32,
        coordinator_epoch=INT32,
        aborted={"type": "boolean"},
    ),
    "HangingTransaction": _obj(
        _all(
            "topic",
            "partition",
            "producer_id",
            "producer_epoch",
            "coordinator_epoch",
            "start_offset",
            "last_timestamp",
            "duration_ms",
        ),
        topic=STR,
        partition=INT32,
        producer_id=INT,
        producer_epoch=INT32,
        coordinator_epoch=_COORDINATOR_EPOCH,
        start_offset=INT,
        last_timestamp={**INT, "description": "of the producer's last write here"},
        duration_ms={**INT, "description": "since that write"},
    ),
    "HangingTransactions": _obj(
        _all("max_transaction_timeout_ms", "partitions_searched", "hanging"),
        max_transaction_timeout_ms=INT,
        partitions_searched=INT32,
        hanging={"type": "array", "items": _ref("HangingTransaction")},
    ),
}


ABORT_BODY: Final = _ref("TransactionAbort")
TRANSACTIONAL_ID: Final = {
    "name": "transactional_id",
    "in": "path",
    "required": True,
    "schema": STR,
}


def transaction_paths() -> dict[str, Schema]:
    unavailable = _error("a retriable Kafka error (COORDINATOR_NOT_AVAILABLE, ...) or NOT_READY")
    bad = _error("INVALID_REQUEST: a malformed parameter or body")
    partition = {"name": "partition", "in": "path", "required": True, "schema": INT32}
    name = {"name": "name", "in": "path", "required": True, "schema": STR}
    broker = _query("broker_id", {**INT32, "minimum": 0}, "ask this replica, not the leader")
    return {
        "/v1/transactions": {
            "get": _op(
                "listTransactions",
                "List transactional ids (ListTransactions to every broker)",
                {
                    "200": _body({"type": "array", "items": _ref("TransactionListing")}, "ids"),
                    "400": bad,
                    "503": unavailable,
                },
                parameters=[
                    _query("state", STR, "only in these states (repeated or comma-separated)"),
                    _query("producer_id", STR, "only of these producer ids (the same)"),
                    _query(
                        "duration_ms",
                        {**INT, "minimum": 0},
                        "only transactions running longer than this",
                    ),
                ],
            ),
        },
        "/v1/transactions/hanging": {
            "get": _op(
                "findHangingTransactions",
                "Open transactions that no coordinator will complete (KIP-664 find-hanging):"
                " older than max_transaction_timeout_ms and unknown to their coordinator, or"
                " not including the partition. A transactional id 'hanging' cannot be"
                " described through this API.",
                {
                    "200": _body(_ref("HangingTransactions"), "what was found"),
                    "400": bad,
                    "404": _error("UNKNOWN_TOPIC_OR_PARTITION or BROKER_NOT_AVAILABLE"),
                    "503": unavailable,
                },
                parameters=[
                    _query("topic", STR, "search this topic (or give broker_id)"),
                    _query("partition", {**INT32, "minimum": 0}, "only this partition of it"),
                    _query(
                        "broker_id", {**INT32, "minimum": 0}, "the partitions with a replica here"
                    ),
                    _query(
                        "max_transaction_timeout_ms",
                        {**INT, "minimum": 0, "default": DEFAULT_MAX_TRANSACTION_TIMEOUT_MS},
                        "transaction.max.timeout.ms of the cluster",
                    ),
                ],
            ),
        },
        "/v1/transactions/abort": {
            "post": _op(
                "abortTransaction",
                "Abort one producer's transaction on one partition (WriteTxnMarkers ABORT to"
                " its leader), e.g. a hanging one",
                {
                    "200": _body(_ref("TransactionAborted"), "the marker is written"),
                    "400": bad,
                    "404": _error(
                        "UNKNOWN_TOPIC_OR_PARTITION, or NOT_FOUND: no open transaction starts"
                        " at start_offset"
                    ),
                    "409": _error("INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED"),
                    "503": unavailable,
                },
                requestBody={
                    "required": True,
                    "content": {JSON: {"schema": _ref("TransactionAbort")}},
                },
            ),
        },
        "/v1/transactions/{transactional_id}": {
            "parameters": [
                {"name": "transactional_id", "in": "path", "required": True, "schema": STR}
            ],
            "get": _op(
                "describeTransaction",
                "Describe a transactional id at its coordinator (DescribeTransactions)",
                {
                    "200": _body(_ref("Transaction"), "its state"),
                    "404": _error("TRANSACTIONAL_ID_NOT_FOUND"),
                    "503": unavailable,
                },
            ),
        },
        "/v1/topics/{name}/partitions/{partition}/producers": {
            "parameters": [name, partition],
            "get": _op(
                "describeProducers",
                "The active producers of a partition and their open transactions"
                " (DescribeProducers)",
                {
                    "200": _body(_ref("PartitionProducers"), "its producers"),
                    "400": bad,
                    "404": _error("UNKNOWN_TOPIC_OR_PARTITION or BROKER_NOT_AVAILABLE"),
                    "503": unavailable,
                },
                parameters=[broker],
            ),
        },
    }
