"""The REST admin API of one node (aiohttp): health, cluster, topics, configs, records, metrics.

Every route is listed in :data:`ROUTES` and described in :mod:`kraft.openapi`.  Handlers parse
and check the request, make one call (a controller RPC for writes, the replica manager for
records, the broker's image for descriptions) and answer JSON.

Errors are always ``{"error": NAME, "message": TEXT}``: a Kafka error name (the per-item code the
controller or the log answered, mapped to an HTTP status by :func:`http_status`) or a short code
of this API (``INVALID_REQUEST`` for malformed bodies, ``NOT_FOUND``, ``METHOD_NOT_ALLOWED``,
``PAYLOAD_TOO_LARGE``, ``NOT_READY``).  One middleware turns every exception into that shape; an
unexpected one is logged with its traceback here and answered 500 without it.

Writes commit at the controller before this broker replays them, so a handler that answers with
the new state first waits (briefly, bounded) for the broker's image to show it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from aiohttp import web
from aiohttp.typedefs import Handler

from broker.log.errors import LogError, OffsetOutOfRangeError
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka_protocol.record_batch import (
    HEADER_BYTES,
    Record,
    SimpleRecord,
    build_batch,
    iter_batches,
)
from kafka_protocol.types import TopicName
from kraft import __version__
from kraft.config import ConfigError, NodeConfig
from metadata_log.configs import effective_topic_config
from metadata_log.image import BrokerRegistration, ClusterImage, ConfigResourceType, TopicImage

if TYPE_CHECKING:
    from broker.broker import Broker
    from broker.replica_manager import AppendOutcome, Partition

log = logging.getLogger("kraft.rest")

MAX_BODY_BYTES: Final = 8 * 1024 * 1024  # aiohttp answers 413 above this
MAX_RECORDS_PER_REQUEST: Final = 10_000
MAX_BATCH_BYTES: Final = 512 * 1024  # a produce request's records are split into batches of this
MAX_READ_RECORDS: Final = 10_000
MAX_READ_BYTES: Final = 4 * 1024 * 1024  # bytes of batches one records read decodes
MAX_LONG_POLL_MS: Final = 60_000
IMAGE_WAIT_S: Final = 5.0  # how long a write waits for this broker to replay its records
SHUTDOWN_TIMEOUT_S: Final = 1.0  # in-flight requests (long polls) at shutdown
PROMETHEUS_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

# Controller API versions the REST writes use (the newest each handler serves).
CREATE_TOPICS_VERSION: Final = 7
DELETE_TOPICS_VERSION: Final = 6
CREATE_PARTITIONS_VERSION: Final = 3
INCREMENTAL_ALTER_CONFIGS_VERSION: Final = 1
CONFIG_SET, CONFIG_DELETE = 0, 1  # IncrementalAlterConfigs operations
DEFAULT_FROM_CONTROLLER: Final = -1  # CreateTopics partitions / replication factor


class AdminNode(Protocol):
    """What the API needs of :class:`kraft.node.Node`."""

    @property
    def config(self) -> NodeConfig: ...

    @property
    def broker(self) -> Broker | None: ...

    @property
    def ready(self) -> bool: ...


NODE: Final = web.AppKey["AdminNode"]("node")
PARTITIONER: Final = web.AppKey["DefaultPartitioner"]("partitioner")
LONG_POLLS: Final = web.AppKey["LongPolls"]("long_polls")


# --- errors -----------------------------------------------------------------------------------


class ApiError(Exception):
    """An answer other than success: HTTP status, error name and message."""

    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message


def bad_request(message: str) -> ApiError:
    return ApiError(400, "INVALID_REQUEST", message)


_STATUS_OF: Final = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 404,
    ErrorCode.TOPIC_ALREADY_EXISTS: 409,
    ErrorCode.OFFSET_OUT_OF_RANGE: 416,
    ErrorCode.MESSAGE_TOO_LARGE: 413,
    ErrorCode.RECORD_LIST_TOO_LARGE: 413,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: 403,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: 403,
    ErrorCode.TOPIC_DELETION_DISABLED: 403,
    ErrorCode.REQUEST_TIMED_OUT: 504,
    ErrorCode.UNKNOWN_SERVER_ERROR: 500,
}


def http_status(code: ErrorCode) -> int:
    """A Kafka error as an HTTP status: retriable errors are 503, other client errors 400."""
    return _STATUS_OF.get(code) or (503 if code.retriable else 400)


def kafka_error(code: int, message: str | None = None) -> ApiError:
    error = ErrorCode.from_code(code)
    return ApiError(http_status(error), error.name, message or error.message)


def unknown_topic(name: str) -> ApiError:
    return ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")


_HTTP_ERROR_NAMES: Final = {
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
}


def error_response(status: int, error: str, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": error, "message": message, **extra}, status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.error, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        name = _HTTP_ERROR_NAMES.get(exc.status, "HTTP_ERROR")
        text = exc.text or exc.reason
        if text.startswith(f"{exc.status}: "):  # aiohttp's default body "404: Not Found"
            text = f"{exc.reason}: {request.method} {request.path}"
        return error_response(exc.status, name, text)
    except Exception as exc:
        log.exception("REST %s %s failed", request.method, request.path)
        message = f"internal error ({type(exc).__name__}); see the node's log"
        return error_response(500, "UNKNOWN_SERVER_ERROR", message)


# --- request parsing --------------------------------------------------------------------------


async def json_object(request: web.Request) -> Body:
    """The request body as a JSON object (400 with the reason otherwise)."""
    raw = await request.read()
    if not raw:
        raise bad_request("the request needs a JSON object body")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_request(f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise bad_request(f"the body must be a JSON object, not {_json_type(data)}")
    return Body(data)


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Body:
    """Checked access to the fields of one JSON object; errors name the field's path."""

    def __init__(self, data: dict[str, Any], path: str = "") -> None:
        self.data = data
        self.path = path

    def _name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def only(self, *allowed: str) -> Body:
        unknown = sorted(set(self.data) - set(allowed))
        if unknown:
            raise bad_request(
                f"unknown field {self._name(unknown[0])!r}; expected: {', '.join(allowed)}"
            )
        return self

    def get_int(self, key: str, default: int | None = None, *, minimum: int = 0) -> int:
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise bad_request(f"field {self._name(key)!r} is required")
            return default
        if not _is_int(value) or value < minimum:
            raise bad_request(
                f"field {self._name(key)!r} must be an integer >= {minimum},"
                f" got {json.dumps(value)}"
            )
        return int(value)

    def opt_int(self, key: str, *, minimum: int = 0) -> int | None:
        return None if self.data.get(key) is None else self.get_int(key, minimum=minimum)

    def get_str(self, key: str, default: str | None = None) -> str:
        value = self.data.get(key, default)
        if value is None:
            raise bad_request(f"field {self._name(key)!r} is required")
        if not isinstance(value, str):
            raise bad_request(
                f"field {self._name(key)!r} must be a string, not {_json_type(value)}"
            )
        return value

    def opt_str(self, key: str) -> str | None:
        return None if self.data.get(key) is None else self.get_str(key)

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise bad_request(f"field {self._name(key)!r} must be true or false")
        return value

    def config_map(self, key: str) -> dict[str, str]:
        """An object of config values; numbers and booleans are accepted as their strings."""
        value = self.data.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise bad_request(f"field {self._name(key)!r} must be an object of config values")
        out = {}
        for k, v in value.items():
            if isinstance(v, bool):
                out[k] = "true" if v else "false"
            elif isinstance(v, str | int | float):
                out[k] = str(v)
            else:
                raise bad_request(
                    f"config {self._name(key)}.{k} must be a string, number or boolean,"
                    f" not {_json_type(v)}"
                )
        return out

    def str_list(self, key: str) -> list[str]:
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad_request(f"field {self._name(key)!r} must be an array of strings")
        return list(value)

    def objects(self, key: str) -> list[Body]:
        value = self.data.get(key)
        if not isinstance(value, list):
            raise bad_request(f"field {self._name(key)!r} must be an array of objects")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise bad_request(f"{self._name(key)}[{i}] must be an object")
            out.append(Body(item, f"{self._name(key)}[{i}]"))
        return out


def query_int(request: web.Request, key: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f"query parameter {key!r} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise bad_request(f"query parameter {key!r} must be between {low} and {high}")
    return value


def encoding_of(value: str | None) -> str:
    value = "utf-8" if value is None else value.lower()
    if value not in ("utf-8", "base64"):
        raise bad_request(f"encoding must be 'utf-8' or 'base64', got {value!r}")
    return value


# --- shared lookups ---------------------------------------------------------------------------


def node_of(request: web.Request) -> AdminNode:
    return request.app[NODE]


def broker_of(request: web.Request) -> Broker:
    broker = request.app[NODE].broker
    if broker is None:
        raise ApiError(503, "NOT_READY", "the broker has not started yet")
    return broker


def topic_of(broker: Broker, name: str) -> TopicImage:
    topic = broker.image.topics.get(name)
    if topic is None:
        raise unknown_topic(name)
    return topic


async def image_settles(broker: Broker, done: Callable[[ClusterImage], bool]) -> bool:
    """Whether this broker's image satisfies ``done``, waiting at most ``IMAGE_WAIT_S``."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(IMAGE_WAIT_S):
            while not done(broker.image):
                await asyncio.sleep(0.01)
    return done(broker.image)


# --- health and cluster -----------------------------------------------------------------------


async def get_health(request: web.Request) -> web.Response:
    node = node_of(request)
    return web.json_response({"status": "ok", "node_id": node.config.node_id})


async def get_ready(request: web.Request) -> web.Response:
    if node_of(request).ready:
        return web.json_response({"ready": True})
    return error_response(503, "NOT_READY", "the node is not serving clients yet", ready=False)


def _voter_address(cfg: NodeConfig) -> str | None:
    for voter in (cfg.get("controller.quorum.voters") or "").split(","):
        node_id, _, address = voter.strip().partition("@")
        if node_id == str(cfg.node_id) and address:
            return address
    return None


def broker_json(reg: BrokerRegistration) -> dict[str, Any]:
    endpoint = reg.listener("PLAINTEXT") or (reg.listeners[0] if reg.listeners else None)
    return {
        "id": reg.id,
        "host": endpoint.host if endpoint else None,
        "port": endpoint.port if endpoint else None,
        "rack": reg.rack,
        "fenced": reg.fenced,
        "epoch": reg.epoch,
    }


async def get_cluster(request: web.Request) -> web.Response:
    node, broker = node_of(request), broker_of(request)
    image = broker.image
    brokers = [broker_json(image.brokers[b]) for b in sorted(image.brokers)]
    if not brokers:  # not registered in the image (yet): describe this broker
        host, port = broker.advertised
        rack = broker.config.rack
        fallback = {"id": broker.node_id, "host": host, "port": port, "rack": rack}
        brokers = [{**fallback, "fenced": False, "epoch": -1}]
    node_id = node.config.node_id
    voter = {"id": node_id, "address": _voter_address(node.config), "lag": 0}
    controller = {"leader_id": node_id, "epoch": image.epoch, "voters": [voter]}
    return web.json_response(
        {
            "cluster_id": broker.cluster_id,
            "controller": controller,
            "brokers": brokers,
            "metadata_offset": image.offset,
            "version": __version__,
        }
    )


async def get_metrics(request: web.Request) -> web.Response:
    body = broker_of(request).metrics.render()
    return web.Response(body=body, headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})


async def get_openapi(request: web.Request) -> web.Response:
    from kraft.openapi import openapi_document

    return web.json_response(openapi_document(__version__))


# --- topics -----------------------------------------------------------------------------------


def topic_summary(topic: TopicImage) -> dict[str, Any]:
    first = topic.partitions.get(0)
    return {
        "name": topic.name,
        "topic_id": str(topic.topic_id),
        "partitions": len(topic.partitions),
        "replication_factor": len(first.replicas) if first else 0,
    }


def topic_json(broker: Broker, topic: TopicImage, *, all_configs: bool = False) -> dict[str, Any]:
    overrides = broker.image.topic_configs(topic.name)
    if all_configs:
        entries = effective_topic_config(overrides, broker.config.broker_defaults)
        configs = {k: e.value for k, e in entries.items()}
    else:
        configs = dict(sorted(overrides.items()))
    partitions = []
    for index in sorted(topic.partitions):
        p = topic.partitions[index]
        local = broker.replicas.get(topic.name, index)
        partitions.append(
            {
                "partition": index,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "log_start_offset": local.log_start_offset if local else None,
                "high_watermark": local.high_watermark if local else None,
                "log_end_offset": local.log_end_offset if local else None,
            }
        )
    return {**topic_summary(topic), "configs": configs, "partitions": partitions}


async def list_topics(request: web.Request) -> web.Response:
    topics = broker_of(request).image.topics.by_name
    return web.json_response([topic_summary(topics[name]) for name in sorted(topics)])


async def get_topic(request: web.Request) -> web.Response:
    broker = broker_of(request)
    topic = topic_of(broker, request.match_info["name"])
    all_configs = request.query.get("all_configs", "false").lower() in ("true", "1", "yes")
    return web.json_response(topic_json(broker, topic, all_configs=all_configs))


async def create_topic(request: web.Request) -> web.Response:
    broker = broker_of(request)
    body = (await json_object(request)).only(
        "name", "partitions", "replication_factor", "configs", "validate_only"
    )
    name = body.get_str("name")
    # -1: the controller's num.partitions / default.replication.factor (CreateTopics v4+)
    partitions = body.get_int("partitions", DEFAULT_FROM_CONTROLLER, minimum=1)
    rf = body.get_int("replication_factor", DEFAULT_FROM_CONTROLLER, minimum=1)
    configs = body.config_map("configs")
    validate_only = body.get_bool("validate_only", False)
    result = await _create_topic(broker, name, partitions, rf, configs, validate_only)
    if validate_only:
        summary = {
            "name": name,
            "partitions": result.num_partitions,
            "replication_factor": result.replication_factor,
            "validate_only": True,
        }
        return web.json_response(summary)
    if await image_settles(broker, lambda image: image.topics.get(name) is not None):
        return web.json_response(topic_json(broker, topic_of(broker, name)), status=201)
    summary = {
        "name": name,
        "topic_id": str(result.topic_id),
        "configs": configs,
        "partitions": [],
        "replication_factor": result.replication_factor,
    }
    return web.json_response(summary, status=201)


async def _create_topic(
    broker: Broker,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: dict[str, str],
    validate_only: bool = False,
) -> CreateTopicsResponse.CreatableTopicResult:
    creatable = CreateTopicsRequest.CreatableTopic(
        name=TopicName(name),
        num_partitions=partitions,
        replication_factor=replication_factor,
        configs=[
            CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()
        ],
    )
    request = CreateTopicsRequest(topics=[creatable], validate_only=validate_only)
    response = await broker.controller.create_topics(request, CREATE_TOPICS_VERSION)
    result: CreateTopicsResponse.CreatableTopicResult = _only(response.topics, name)
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message)
    return result


def _only(results: list[Any], name: str) -> Any:
    assert len(results) == 1, f"the controller answered {len(results)} results for {name!r}"
    return results[0]


async def delete_topic(request: web.Request) -> web.Response:
    broker = broker_of(request)
    name = request.match_info["name"]
    topic = topic_of(broker, name)
    state = DeleteTopicsRequest.DeleteTopicState(name=TopicName(name))
    response = await broker.controller.delete_topics(
        DeleteTopicsRequest(topics=[state], timeout_ms=int(IMAGE_WAIT_S * 1000)),
        DELETE_TOPICS_VERSION,
    )
    result = _only(response.responses, name)
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message)
    if await image_settles(broker, lambda image: image.topics.by_id.get(topic.topic_id) is None):
        return web.Response(status=204)
    return web.json_response({"name": name, "deleted": True}, status=202)


async def alter_topic_configs(request: web.Request) -> web.Response:
    broker = broker_of(request)
    name = request.match_info["name"]
    topic_of(broker, name)
    body = (await json_object(request)).only("set", "delete")
    to_set, to_delete = body.config_map("set"), body.str_list("delete")
    if not to_set and not to_delete:
        raise bad_request('give configs to change: {"set": {...}} and/or {"delete": [...]}')
    both = sorted(set(to_set) & set(to_delete))
    if both:
        raise bad_request(f"config {both[0]!r} is both set and deleted")
    ops = [_alterable(k, CONFIG_SET, v) for k, v in to_set.items()]
    ops += [_alterable(k, CONFIG_DELETE, None) for k in to_delete]
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=int(ConfigResourceType.TOPIC), resource_name=name, configs=ops
    )
    response = await broker.controller.incremental_alter_configs(
        IncrementalAlterConfigsRequest(resources=[resource]), INCREMENTAL_ALTER_CONFIGS_VERSION
    )
    result = _only(response.responses, name)
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message)

    def applied(image: ClusterImage) -> bool:
        now = image.topic_configs(name)
        return all(now.get(k) == v for k, v in to_set.items()) and not set(to_delete) & set(now)

    await image_settles(broker, applied)
    return web.json_response(topic_json(broker, topic_of(broker, name)))


def _alterable(
    key: str, operation: int, value: str | None
) -> IncrementalAlterConfigsRequest.AlterableConfig:
    return IncrementalAlterConfigsRequest.AlterableConfig(
        name=key, config_operation=operation, value=value
    )


async def create_partitions(request: web.Request) -> web.Response:
    broker = broker_of(request)
    name = request.match_info["name"]
    topic_of(broker, name)
    count = (await json_object(request)).only("count").get_int("count", minimum=1)
    wanted = CreatePartitionsRequest.CreatePartitionsTopic(
        name=TopicName(name), count=count, assignments=None
    )
    response = await broker.controller.create_partitions(
        CreatePartitionsRequest(topics=[wanted], timeout_ms=int(IMAGE_WAIT_S * 1000)),
        CREATE_PARTITIONS_VERSION,
    )
    result = _only(response.results, name)
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message)

    def grown(image: ClusterImage) -> bool:
        topic = image.topics.get(name)
        return topic is not None and len(topic.partitions) >= count

    await image_settles(broker, grown)
    return web.json_response(topic_json(broker, topic_of(broker, name)))


# --- produce ----------------------------------------------------------------------------------


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: MurmurHash2 with seed 0x9747b28c, as a signed 32-bit int."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    whole = length - length % 4
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The Java client's default partitioner for a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class DefaultPartitioner:
    """Keyed records by murmur2 of the key; unkeyed ones round robin, per topic."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, partitions: int) -> int:
        assert partitions > 0
        if key is not None:
            return partition_for_key(key, partitions)
        n = self._next.get(topic, 0)
        self._next[topic] = n + 1
        return n % partitions


@dataclass(slots=True)
class ToProduce:
    index: int  # position in the request
    partition: int | None
    record: SimpleRecord

    @property
    def size_estimate(self) -> int:
        """At least the encoded size: the varints of a record take at most 36 bytes (Kafka's
        ``DefaultRecord``: length, attributes, deltas, key/value lengths, header count)."""
        r = self.record
        headers = sum(len(k.encode()) + len(v or b"") + 10 for k, v in r.headers)
        return len(r.key or b"") + len(r.value or b"") + headers + 36


def decode_bytes(value: object, encoding: str, where: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_request(f"{where} must be a string or null, not {_json_type(value)}")
    if encoding == "utf-8":
        return value.encode()
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise bad_request(f"{where} is not valid base64") from None


def parse_record(body: Body, index: int, encoding: str) -> ToProduce:
    body.only("key", "value", "headers", "partition", "timestamp")
    headers_in = body.data.get("headers") or {}
    if not isinstance(headers_in, dict):
        raise bad_request(f"{body.path}.headers must be an object of strings")
    headers = [
        (k, decode_bytes(v, encoding, f"{body.path}.headers.{k}")) for k, v in headers_in.items()
    ]
    record = SimpleRecord(
        value=decode_bytes(body.data.get("value"), encoding, f"{body.path}.value"),
        key=decode_bytes(body.data.get("key"), encoding, f"{body.path}.key"),
        headers=headers,
        timestamp=body.opt_int("timestamp"),
    )
    return ToProduce(index, body.opt_int("partition"), record)


def parse_produce(body: Body) -> list[ToProduce]:
    body.only("records", "encoding")
    encoding = encoding_of(body.opt_str("encoding"))
    items = body.objects("records")
    if not items:
        raise bad_request("field 'records' must hold at least one record")
    if len(items) > MAX_RECORDS_PER_REQUEST:
        raise bad_request(f"at most {MAX_RECORDS_PER_REQUEST} records per request")
    return [parse_record(item, i, encoding) for i, item in enumerate(items)]


def batches(items: list[ToProduce], max_bytes: int) -> Iterable[list[ToProduce]]:
    """Consecutive runs of ``items`` of about ``max_bytes`` each (at least one record)."""
    run: list[ToProduce] = []
    size = 0
    for item in items:
        if run and size + item.size_estimate > max_bytes:
            yield run
            run, size = [], 0
        run.append(item)
        size += item.size_estimate
    if run:
        yield run


async def topic_for_produce(broker: Broker, name: str) -> TopicImage:
    """The topic, auto-created with the broker's defaults when allowed (as a Produce would)."""
    topic = broker.image.topics.get(name)
    if topic is not None or not broker.config.auto_create_topics:
        return topic or topic_of(broker, name)
    try:
        await _create_topic(broker, name, DEFAULT_FROM_CONTROLLER, DEFAULT_FROM_CONTROLLER, {})
    except ApiError as exc:
        if exc.error != ErrorCode.TOPIC_ALREADY_EXISTS.name:  # not created concurrently
            raise
    await image_settles(broker, lambda image: image.topics.get(name) is not None)
    return topic_of(broker, name)


async def produce_records(request: web.Request) -> web.Response:
    broker = broker_of(request)
    items = parse_produce(await json_object(request))
    topic = await topic_for_produce(broker, request.match_info["name"])
    count = len(topic.partitions)
    by_partition: dict[int, list[ToProduce]] = {}
    for item in items:
        if item.partition is None:
            item.partition = request.app[PARTITIONER].partition(topic.name, item.record.key, count)
        elif item.partition >= count:
            raise ApiError(
                404,
                "UNKNOWN_TOPIC_OR_PARTITION",
                f"records[{item.index}].partition {item.partition} is not in [0, {count})"
                f" of topic {topic.name!r}",
            )
        by_partition.setdefault(item.partition, []).append(item)
    pending = [
        (run, append_run(broker, topic, p, run))
        for p, run_items in sorted(by_partition.items())
        for run in batches(run_items, batch_limit(broker, topic.name, p))
    ]
    offsets: list[dict[str, Any]] = [{} for _ in items]
    for run, outcome in pending:
        result = outcome if not isinstance(outcome, asyncio.Future) else await outcome
        for j, item in enumerate(run):
            offsets[item.index] = _offset_json(item.partition, result, j)
    return _produce_response(topic.name, offsets)


def batch_limit(broker: Broker, topic: str, index: int) -> int:
    """Record bytes per batch: batches stay within the topic's max.message.bytes, so only a
    record too large on its own is refused (a Java producer splits such batches and retries)."""
    part = broker.replicas.get(topic, index)
    if part is None:
        return MAX_BATCH_BYTES
    return max(1, min(MAX_BATCH_BYTES, part.max_message_bytes - HEADER_BYTES))


def append_run(
    broker: Broker, topic: TopicImage, index: int, run: list[ToProduce]
) -> AppendOutcome | asyncio.Future[AppendOutcome]:
    """Build one batch of ``run`` and queue it on the partition, as a Produce would."""
    from broker.handlers.produce import validate_batch
    from broker.replica_manager import AppendOutcome

    part = broker.replicas.get(topic.name, index)
    if part is None or topic.partitions[index].leader != broker.node_id:
        return AppendOutcome(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            message=f"this broker does not lead {topic.name}-{index}",
        )
    now_ms = int(time.time() * 1000)
    data = build_batch([item.record for item in run], now_ms=now_ms)
    batch = validate_batch(part, memoryview(data))
    if isinstance(batch, AppendOutcome):
        return batch
    return broker.replicas.append_nowait(part, batch)


def _offset_json(partition: int | None, outcome: AppendOutcome, j: int) -> dict[str, Any]:
    if outcome.error == ErrorCode.NONE:
        return {"partition": partition, "offset": outcome.base_offset + j}
    error = ErrorCode.from_code(outcome.error)
    return {
        "partition": partition,
        "offset": None,
        "error": error.name,
        "message": outcome.message or error.message,
    }


def _produce_response(topic: str, offsets: list[dict[str, Any]]) -> web.Response:
    failed = [o for o in offsets if o.get("error")]
    if not failed:
        return web.json_response({"topic": topic, "offsets": offsets})
    first = failed[0]
    status = http_status(ErrorCode[first["error"]])
    message = f"{len(failed)} of {len(offsets)} records failed: {first['message']}"
    return error_response(status, first["error"], message, topic=topic, offsets=offsets)


# --- consume ----------------------------------------------------------------------------------


def hosted_partition(broker: Broker, name: str, raw_index: str) -> Partition:
    topic = topic_of(broker, name)
    try:
        index = int(raw_index)
    except ValueError:
        raise bad_request(f"partition must be an integer, got {raw_index!r}") from None
    part = broker.replicas.get(name, index)
    if part is None:
        if index in topic.partitions:
            raise kafka_error(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{name}-{index} is not here")
        raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"{name}-{index} does not exist")
    return part


def start_offset(raw: str | None, part: Partition) -> int:
    if raw is None or raw == "earliest":
        return part.log_start_offset
    if raw == "latest":
        return part.high_watermark
    try:
        offset = int(raw)
    except ValueError:
        raise bad_request(
            f"offset must be an integer, 'earliest' or 'latest', got {raw!r}"
        ) from None
    if not part.log_start_offset <= offset <= part.log_end_offset:
        raise kafka_error(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"offset {offset} is outside [{part.log_start_offset}, {part.log_end_offset}]"
            f" of {part.name}",
        )
    return offset


class LongPolls:
    """The record reads waiting for appends, so that shutdown answers them at once."""

    def __init__(self) -> None:
        self.closing = False
        self._waiting: set[asyncio.Future[None]] = set()

    async def wait(self, part: Partition, timeout_s: float) -> None:
        """Until an append to ``part``, shutdown, or ``timeout_s``."""
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        part.waiters.append(wake)
        self._waiting.add(wake)
        try:
            async with asyncio.timeout(timeout_s):
                await wake
        except TimeoutError:
            pass
        finally:
            self._waiting.discard(wake)
            # An idle partition must not collect our futures; an append may have taken the
            # list (and resolved the future) already.
            with contextlib.suppress(ValueError):
                part.waiters.remove(wake)

    def close(self) -> None:
        self.closing = True
        for wake in list(self._waiting):
            if not wake.done():
                wake.set_result(None)


async def wait_for_records(
    request: web.Request, part: Partition, offset: int, timeout_ms: int
) -> Partition:
    """Long-poll: wake on appends until the high watermark passes ``offset`` or time is up."""
    broker, polls = broker_of(request), request.app[LONG_POLLS]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000

    def hosted() -> bool:
        return broker.replicas.get(part.topic, part.index) is part

    while part.high_watermark <= offset and hosted() and not polls.closing:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        await polls.wait(part, remaining)
    if not hosted():
        raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"{part.name} was deleted")
    return part


def read_committed(part: Partition, offset: int, max_records: int) -> tuple[list[Record], int]:
    """Records from ``offset`` below the high watermark, and the offset to read next."""
    out: list[Record] = []
    position, hw, budget = offset, part.high_watermark, MAX_READ_BYTES
    while len(out) < max_records and position < hw and budget > 0:
        chunk = part.log.read(position, min(budget, 1 << 20), max_offset=hw, min_one_batch=True)
        if chunk.size_bytes == 0:
            break
        budget -= chunk.size_bytes
        for batch in iter_batches(part.log.read_bytes(chunk)):
            if batch.next_offset <= position:
                continue
            if not batch.is_control:
                for record in batch.iter_records():
                    if record.offset < position:
                        continue
                    if record.offset >= hw or len(out) >= max_records:
                        return out, position
                    out.append(record)
                    position = record.offset + 1
            position = max(position, min(batch.next_offset, hw))
    return out, position


def encode_bytes(value: bytes | None, encoding: str) -> str | None:
    if value is None:
        return None
    if encoding == "base64":
        return base64.b64encode(value).decode("ascii")
    return value.decode("utf-8", errors="replace")


def record_json(record: Record, encoding: str) -> dict[str, Any]:
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": encode_bytes(record.key, encoding),
        "value": encode_bytes(record.value, encoding),
        "headers": {k: encode_bytes(v, encoding) for k, v in record.headers},
    }


async def read_records(request: web.Request) -> web.Response:
    broker = broker_of(request)
    name = request.match_info["name"]
    part = hosted_partition(broker, name, request.match_info["partition"])
    max_records = query_int(request, "max_records", 500, 1, MAX_READ_RECORDS)
    timeout_ms = query_int(request, "timeout_ms", 0, 0, MAX_LONG_POLL_MS)
    encoding = encoding_of(request.query.get("encoding"))
    offset = start_offset(request.query.get("offset"), part)
    part = await wait_for_records(request, part, offset, timeout_ms)
    try:
        records, next_offset = read_committed(part, offset, max_records)
    except OffsetOutOfRangeError as exc:  # retention moved the log start meanwhile
        raise kafka_error(ErrorCode.OFFSET_OUT_OF_RANGE, str(exc)) from None
    except LogError as exc:
        raise kafka_error(exc.error_code, str(exc)) from None
    return web.json_response(
        {
            "topic": name,
            "partition": part.index,
            "records": [record_json(r, encoding) for r in records],
            "next_offset": next_offset,
            "high_watermark": part.high_watermark,
            "log_start_offset": part.log_start_offset,
        }
    )


# --- the application --------------------------------------------------------------------------

ROUTES: Final = (
    ("GET", "/v1/health", get_health),
    ("GET", "/v1/ready", get_ready),
    ("GET", "/v1/cluster", get_cluster),
    ("GET", "/v1/topics", list_topics),
    ("POST", "/v1/topics", create_topic),
    ("GET", "/v1/topics/{name}", get_topic),
    ("DELETE", "/v1/topics/{name}", delete_topic),
    ("PATCH", "/v1/topics/{name}/configs", alter_topic_configs),
    ("POST", "/v1/topics/{name}/partitions", create_partitions),
    ("POST", "/v1/topics/{name}/records", produce_records),
    ("GET", "/v1/topics/{name}/partitions/{partition}/records", read_records),
    ("GET", "/metrics", get_metrics),
    ("GET", "/v1/openapi.json", get_openapi),
)


def build_app(node: AdminNode) -> web.Application:
    app = web.Application(middlewares=[error_middleware], client_max_size=MAX_BODY_BYTES)
    app[NODE] = node
    app[PARTITIONER] = DefaultPartitioner()
    app[LONG_POLLS] = LongPolls()
    app.on_shutdown.append(_answer_long_polls)
    for method, path, handler in ROUTES:
        if method == "GET":
            app.router.add_get(path, handler)  # and HEAD, for load balancers' checks
        else:
            app.router.add_route(method, path, handler)
    return app


async def _answer_long_polls(app: web.Application) -> None:
    app[LONG_POLLS].close()


async def start_admin_api(node: AdminNode, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve the API on ``host:port`` (0: any free port); returns the runner and bound port."""
    runner = web.AppRunner(build_app(node), shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(
            f"admin.listener: cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    bound_port = int(runner.addresses[0][1])
    log.info("REST admin API on http://%s:%d", host, bound_port)
    return runner, bound_port
