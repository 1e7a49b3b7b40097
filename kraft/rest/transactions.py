"""The transaction routes of the REST admin API, as ``kafka-transactions.sh`` (KIP-664): list,
describe, the producers of a partition, abort (a hanging transaction, by its start offset), and
find-hanging.

Served by every node: :class:`kraft.transactions.admin.TransactionAdmin` speaks the Kafka
protocol to the brokers of the node's metadata image, each call bounded by
:data:`TRANSACTION_CALL_TIMEOUT_S`.  The node asks with its own (inter-broker) login, so these
handlers check what Kafka's APIs would check of the caller (:mod:`kraft.rest.access`): DESCRIBE
on a transactional id (list filters by it; a description shows the partitions of topics the
caller may DESCRIBE), READ on a topic for its producers, ALTER (else CLUSTER_ACTION) on the
cluster to abort (Kafka's WriteTxnMarkers since KIP-664).

The abort body (``POST /v1/transactions/abort``)::

    {"topic": "orders", "partition": 0, "start_offset": 42}
    {"topic": "orders", "partition": 0, "producer_id": 7, "producer_epoch": 0,
     "coordinator_epoch": 3}          (a negative coordinator epoch is taken as 0, as Kafka's)
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable
from typing import Final, TypeVar

from aiohttp import web

from kafka_protocol.clock import wall_ms
from kafka_protocol.errors import ErrorCode
from kraft.groups.client import GroupError
from kraft.node.security_config import broker_route
from kraft.rest.access import abort_transaction_allowed, require, visible
from kraft.rest.common import (
    AdminNode,
    ApiError,
    Body,
    bad_request,
    http_status,
    image_of,
    json_object,
    node_of,
    query_int,
    topic_of,
)
from kraft.transactions.admin import NoOpenTransaction, TransactionAdmin
from kraft.transactions.answers import (
    abort_json,
    description_json,
    listing_json,
    producers_json,
    search_json,
)
from kraft.transactions.model import (
    DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    NO_DURATION_FILTER,
    TRANSACTION_STATES,
    AbortSpec,
    partitions_to_search,
    replicas_of,
)
from metadata_log.acls import AclOperation, ResourceType
from metadata_log.image import TopicPartition

T = TypeVar("T")

TRANSACTION_CALL_TIMEOUT_S: Final = 25.0  # below the CLI's 30 s, so that it gets the reason
TRANSACTION_ADMIN: Final = web.AppKey("transaction_admin", TransactionAdmin)
MAX_INT32: Final = 2**31 - 1
MAX_INT64: Final = 2**63 - 1
MAX_FILTERS: Final = 1000  # producer ids or states in one list query
ABORT_FIELDS: Final = (
    "topic",
    "partition",
    "start_offset",
    "producer_id",
    "producer_epoch",
    "coordinator_epoch",
)
BY_PRODUCER: Final = ("producer_id", "producer_epoch", "coordinator_epoch")
_STATUS: Final = {
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: 404,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 404,
    ErrorCode.INVALID_PRODUCER_EPOCH: 409,
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: 409,
    ErrorCode.BROKER_NOT_AVAILABLE: 503,
    ErrorCode.REQUEST_TIMED_OUT: 504,
}


def setup_transactions(app: web.Application, node: AdminNode) -> None:
    """Give ``app`` a transaction admin on ``node``'s image, closed with the app."""
    app[TRANSACTION_ADMIN] = TransactionAdmin.on_image(
        lambda: node.image, broker_route(node.config)
    )

    async def close(app: web.Application) -> None:
        await app[TRANSACTION_ADMIN].close()

    app.on_cleanup.append(close)


# --- request parsing --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class AbortByOffset:
    partition: TopicPartition
    start_offset: int


def parse_abort(body: Body) -> AbortByOffset | AbortSpec:
    """The abort body: by start offset, or by producer id, epoch and coordinator epoch; 400
    with the reason for anything else."""
    body.only(*ABORT_FIELDS)
    topic = body.get_str("topic")
    if not topic:
        raise bad_request('"topic" must not be empty')
    tp = TopicPartition(topic, _bounded(body, "partition", 0, MAX_INT32))
    given = [k for k in BY_PRODUCER if body.data.get(k) is not None]
    if body.data.get("start_offset") is not None:
        if given:
            raise bad_request(
                'give either "start_offset" or "producer_id", "producer_epoch" and'
                f' "coordinator_epoch", not both (got start_offset and {", ".join(given)})'
            )
        return AbortByOffset(tp, _bounded(body, "start_offset", 0, MAX_INT64))
    if not given:
        raise bad_request(
            'name the transaction with "start_offset" (its first offset on the partition), or'
            ' with "producer_id", "producer_epoch" and "coordinator_epoch"'
        )
    missing = [k for k in BY_PRODUCER if k not in given]
    if missing:
        raise bad_request(f'field {missing[0]!r} is required with "{given[0]}"')
    coordinator_epoch = _bounded(body, "coordinator_epoch", -1, MAX_INT32)
    return AbortSpec(
        tp,
        _bounded(body, "producer_id", 0, MAX_INT64),
        _bounded(body, "producer_epoch", 0, 2**15 - 1),
        # -1: no coordinator has written a marker for this producer here yet; 0 is at most
        # every coordinator epoch (Kafka's tool does the same)
        max(coordinator_epoch, 0),
    )


def _bounded(body: Body, key: str, low: int, high: int) -> int:
    value = body.get_int(key, minimum=low)
    if value > high:
        raise bad_request(f"field {key!r} must be at most {high}, got {value}")
    return value


def _query_list(request: web.Request, key: str) -> list[str]:
    """A list query parameter, repeated (``?state=a&state=b``) or comma-separated."""
    values = [v for raw in request.query.getall(key, []) for v in raw.split(",") if v]
    if len(values) > MAX_FILTERS:
        raise bad_request(f"query parameter {key!r}: at most {MAX_FILTERS} values")
    return values


def parse_list_filters(request: web.Request) -> tuple[list[str], list[int], int]:
    states = _query_list(request, "state")
    unknown = [s for s in states if s not in TRANSACTION_STATES]
    if unknown:
        raise bad_request(
            f"unknown transaction state {unknown[0]!r}; expected: {', '.join(TRANSACTION_STATES)}"
        )
    producer_ids = []
    for raw in _query_list(request, "producer_id"):
        if not raw.isdigit() or int(raw) > MAX_INT64:
            raise bad_request(f"query parameter 'producer_id' must be a producer id, got {raw!r}")
        producer_ids.append(int(raw))
    duration_ms = query_int(request, "duration_ms", NO_DURATION_FILTER, 0, MAX_INT64)
    return states, producer_ids, duration_ms


def _partition_param(request: web.Request) -> int:
    raw = request.match_info["partition"]
    if not raw.isdigit() or int(raw) > MAX_INT32:
        raise bad_request(f"partition must be a partition number, got {raw!r}")
    return int(raw)


def _known_partition(request: web.Request, tp: TopicPartition) -> None:
    topic = topic_of(image_of(node_of(request)), tp.topic)
    if tp.partition not in topic.partitions:
        raise ApiError(
            404,
            "UNKNOWN_TOPIC_OR_PARTITION",
            f"topic {tp.topic!r} has no partition {tp.partition}",
        )


def _optional_broker(request: web.Request) -> int | None:
    if request.query.get("broker_id") in (None, ""):
        return None
    broker_id = query_int(request, "broker_id", -1, 0, MAX_INT32)
    if broker_id not in image_of(node_of(request)).brokers:
        raise ApiError(404, "BROKER_NOT_AVAILABLE", f"broker {broker_id} is not registered")
    return broker_id


# --- routes -----------------------------------------------------------------------------------


def _admin(request: web.Request) -> TransactionAdmin:
    image_of(node_of(request))  # 503 NOT_READY before the node has metadata
    return request.app[TRANSACTION_ADMIN]


async def _call(what: str, call: Awaitable[T]) -> T:
    """``call`` within :data:`TRANSACTION_CALL_TIMEOUT_S`; its failure as an API error."""
    try:
        async with asyncio.timeout(TRANSACTION_CALL_TIMEOUT_S):
            return await call
    except GroupError as exc:
        status = _STATUS.get(exc.error) or http_status(exc.error)
        raise ApiError(status, exc.error.name, exc.message) from None
    except TimeoutError:
        raise ApiError(
            504, "REQUEST_TIMED_OUT", f"{what}: no answer within {TRANSACTION_CALL_TIMEOUT_S:g} s"
        ) from None


async def list_transactions(request: web.Request) -> web.Response:
    """Kafka's ListTransactions: only the ids the caller may DESCRIBE."""
    admin = _admin(request)
    states, producer_ids, duration_ms = parse_list_filters(request)
    listings = await _call(
        "listing the transactions", admin.list_transactions(states, producer_ids, duration_ms)
    )
    shown = visible(request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID)
    return web.json_response([listing_json(t) for t in listings if shown(t.transactional_id)])


async def describe_transaction(request: web.Request) -> web.Response:
    admin = _admin(request)
    transactional_id = request.match_info["transactional_id"]
    description = await _call(
        f"describing {transactional_id!r}", admin.describe_transaction(transactional_id)
    )
    # Kafka's DescribeTransactions leaves out the partitions of topics the caller may not see
    shown = visible(request, AclOperation.DESCRIBE, ResourceType.TOPIC)
    partitions = tuple(tp for tp in description.partitions if shown(tp.topic))
    described = dataclasses.replace(description, partitions=partitions)
    return web.json_response(description_json(described, wall_ms()))


async def describe_producers(request: web.Request) -> web.Response:
    admin = _admin(request)
    tp = TopicPartition(request.match_info["name"], _partition_param(request))
    _known_partition(request, tp)
    broker_id = _optional_broker(request)
    producers = await _call(
        f"describing the producers of {tp.topic}-{tp.partition}",
        admin.producers_of(tp, broker_id),
    )
    return web.json_response(producers_json(tp.topic, tp.partition, broker_id, producers))


async def abort_transaction(request: web.Request) -> web.Response:
    """ALTER (else CLUSTER_ACTION) on the cluster, as WriteTxnMarkers; by start offset also
    READ on the topic, for DescribeProducers."""
    abort_transaction_allowed(request)
    admin = _admin(request)
    parsed = parse_abort(await json_object(request))
    _known_partition(request, parsed.partition)
    tp = parsed.partition
    if isinstance(parsed, AbortByOffset):
        require(request, AclOperation.READ, ResourceType.TOPIC, tp.topic)
        try:
            spec = await _call(
                f"aborting at offset {parsed.start_offset} of {tp.topic}-{tp.partition}",
                admin.abort_at(tp, parsed.start_offset),
            )
        except NoOpenTransaction as exc:
            raise ApiError(404, "NOT_FOUND", str(exc)) from None
    else:
        spec = parsed
        await _call(f"aborting on {tp.topic}-{tp.partition}", admin.abort(spec))
    return web.json_response(abort_json(spec))


async def find_hanging(request: web.Request) -> web.Response:
    """READ on the topic searched (403), or on each topic searched by broker (the others are
    skipped); ids the caller may not DESCRIBE are treated as unknown, as Kafka's tool sees
    them."""
    admin = _admin(request)
    image = image_of(node_of(request))
    topic = request.query.get("topic") or None
    partition = None
    if request.query.get("partition") not in (None, ""):
        partition = query_int(request, "partition", -1, 0, MAX_INT32)
    broker_id = _optional_broker(request)
    max_timeout_ms = query_int(
        request, "max_transaction_timeout_ms", DEFAULT_MAX_TRANSACTION_TIMEOUT_MS, 0, MAX_INT64
    )
    if topic is None and broker_id is None:
        raise bad_request("give 'topic' or 'broker_id' to limit the search (as Kafka's tool)")
    if partition is not None and topic is None:
        raise bad_request("'partition' needs 'topic'")
    if topic is not None:
        require(request, AclOperation.READ, ResourceType.TOPIC, topic)
        _known_partition(request, TopicPartition(topic, partition or 0))
    readable = visible(request, AclOperation.READ, ResourceType.TOPIC)
    partitions = partitions_to_search(replicas_of(image), topic, partition, broker_id, readable)
    now_ms = wall_ms()
    found = await _call(
        "searching for hanging transactions",
        admin.find_hanging(
            partitions,
            broker_id=broker_id,
            max_transaction_timeout_ms=max_timeout_ms,
            now_ms=now_ms,
            may_describe=visible(request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID),
        ),
    )
    return web.json_response(search_json(max_timeout_ms, len(partitions), found, now_ms))
