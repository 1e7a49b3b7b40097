"""What the routes of the REST admin API share: errors, the error middleware, request parsing,
lookups of the node, its image and topics, and topic creation at the controller.

Errors are always ``{"error": NAME, "message": TEXT}``: a Kafka error name (the per-item code the
controller or the log answered, mapped to an HTTP status by :func:`http_status`) or a short code
of this API (``INVALID_REQUEST`` for malformed bodies, ``NOT_FOUND``, ``METHOD_NOT_ALLOWED``,
``PAYLOAD_TOO_LARGE``, ``UNSUPPORTED_MEDIA_TYPE``, ``NOT_READY``).  One middleware turns every
exception into that shape; an unexpected one is logged with its traceback here and answered 500
without it.

Input limits: a body is at most ``MAX_BODY_BYTES`` (413, aiohttp's ``client_max_size``), nests
arrays and objects at most :data:`MAX_JSON_DEPTH` deep (400, checked before parsing: the standard
library's parser recurses), and a POST, PUT, PATCH or DELETE that carries a body or a
Content-Type must say ``application/json`` (415, :func:`json_only_middleware`).  The last is also
the API's defence against cross-site requests: a web page can make a browser send a
``text/plain`` or form POST to a local admin API without asking first (no CORS preflight), but
not an ``application/json`` one.

Every node serves every route.  Writes go to the active controller through the node's
:class:`~broker.controller_channel.Forwarder` (a broker's controller channel; on a controller, its
own quorum controller when active, else the active one over the controller listener).  They commit
there before this node replays them, so a handler that answers with the new state first waits
(briefly, bounded: :func:`image_settles`) for the node's image to show it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Callable
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Final, Protocol

from aiohttp import web
from aiohttp.typedefs import Handler

from broker.controller_channel import (
    CreatedTopic,
    Forwarder,
    NewTopic,
    created_topics,
    newest_version,
    topic_creation,
)
from broker.metrics import BrokerMetrics
from kafka_protocol.errors import ErrorCode
from kraft.node.config import NodeConfig
from metadata_log.image import ClusterImage, TopicImage

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("kraft.rest")  # the package's logger

IMAGE_WAIT_S: Final = 5.0  # how long a write waits for this node to replay its records
MAX_BODY_BYTES: Final = 8 * 1024 * 1024  # aiohttp answers 413 above this
MAX_JSON_DEPTH: Final = 64  # nested arrays and objects in a body (ours need 4)
JSON_MEDIA_TYPE: Final = "application/json"
BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class AdminNode(Protocol):
    """What the API needs of :class:`kraft.node.run.Node`."""

    @property
    def config(self) -> NodeConfig: ...

    @property
    def broker(self) -> Broker | None:
        """This node's broker (None on a controller-only node, or before it starts)."""
        ...

    @property
    def controller(self) -> Forwarder | None:
        """Where writes go (None before the node has started)."""
        ...

    @property
    def metrics(self) -> BrokerMetrics | None:
        """The Kafka listener's request metrics (the controller listener's on a controller)."""
        ...

    @property
    def ready(self) -> bool: ...

    @property
    def image(self) -> ClusterImage | None: ...

    @property
    def cluster_id(self) -> str: ...

    async def controller_status(self) -> dict[str, Any]:
        """``{"leader_id", "epoch", "voters": [{"id", "address", "lag"}]}``."""
        ...


NODE: Final = web.AppKey["AdminNode"]("node")


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


@web.middleware
async def json_only_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """415 for a write whose body (or declared Content-Type) is not ``application/json``; an
    unknown route or method still gets its 404 or 405."""
    if (
        request.method in BODY_METHODS
        and request.match_info.http_exception is None
        and (request.body_exists or "Content-Type" in request.headers)
        and request.content_type != JSON_MEDIA_TYPE
    ):
        given = request.headers.get("Content-Type", "none")
        raise ApiError(
            415,
            "UNSUPPORTED_MEDIA_TYPE",
            f"{request.method} {request.path} takes a body of Content-Type {JSON_MEDIA_TYPE},"
            f" not {given!r}",
        )
    return await handler(request)


# --- request parsing --------------------------------------------------------------------------

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_NESTING_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 / -1 as signed bytes


def json_nesting_exceeds(raw: bytes, limit: int) -> bool:
    """Whether JSON text nests arrays and objects deeper than ``limit``: found in linear time
    and without recursion (string contents do not count), before anything parses it."""
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    if brackets.count(b"[") + brackets.count(b"{") <= limit:
        return False
    steps = memoryview(brackets.translate(_NESTING_STEPS)).cast("b")
    return max(accumulate(steps)) > limit


async def json_object(request: web.Request) -> Body:
    """The request body as a JSON object (400 with the reason otherwise)."""
    raw = await request.read()
    if not raw:
        raise bad_request("the request needs a JSON object body")
    if json_nesting_exceeds(raw, MAX_JSON_DEPTH):
        raise bad_request(f"the body nests arrays or objects more than {MAX_JSON_DEPTH} deep")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_request(f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise bad_request(f"the body must be a JSON object, not {json_type(data)}")
    return Body(data)


def json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)


def is_int(value: object) -> bool:
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
        if not is_int(value) or value < minimum:
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
            raise bad_request(f"field {self._name(key)!r} must be a string, not {json_type(value)}")
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
                    f" not {json_type(v)}"
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


def image_of(node: AdminNode) -> ClusterImage:
    image = node.image
    if image is None:
        raise ApiError(503, "NOT_READY", "the node has no metadata yet")
    return image


def controller_of(node: AdminNode) -> Forwarder:
    controller = node.controller
    if controller is None:
        raise ApiError(503, "NOT_READY", "the node has not started yet")
    return controller


def topic_of(image: ClusterImage, name: str) -> TopicImage:
    topic = image.topics.get(name)
    if topic is None:
        raise unknown_topic(name)
    return topic


async def image_settles(node: AdminNode, done: Callable[[ClusterImage], bool]) -> bool:
    """Whether this node's image satisfies ``done``, waiting at most ``IMAGE_WAIT_S``."""

    def settled() -> bool:
        image = node.image
        return image is not None and done(image)

    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(IMAGE_WAIT_S):
            while not settled():
                await asyncio.sleep(0.01)
    return settled()


# --- controller calls -------------------------------------------------------------------------


async def create_topic_at_controller(
    node: AdminNode, topic: NewTopic, validate_only: bool = False
) -> CreatedTopic:
    """Create (or only validate) one topic at the controller; its error raised as an ApiError."""
    request = topic_creation([topic], validate_only=validate_only)
    response = await controller_of(node).forward(request, newest_version(request))
    result: CreatedTopic = only_result(created_topics(response), topic.name)
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message)
    return result


def only_result(results: list[Any], name: str) -> Any:
    assert len(results) == 1, f"the controller answered {len(results)} results for {name!r}"
    return results[0]
