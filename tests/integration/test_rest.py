"""The REST admin API and the admin CLI against a real node (``kraft dev`` in a subprocess).

Every route is exercised, bad requests included (each answers a JSON error and the node stays
healthy); successful responses are checked against the node's own OpenAPI document when
``openapi-schema-validator`` is installed.  The last tests stop a node with SIGTERM and restart
it on the same data directory.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest

from integration.node_process import NodeProcess
from kafka_protocol.partitioner import partition_for_key
from kraft.rest import MAX_BODY_BYTES, ROUTES

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


# --- the node (the module's ``node`` fixture comes from conftest.py) ---------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("KRAFT_ADMIN", None)
    return env


# --- HTTP ---------------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    text: str

    @property
    def json(self) -> Any:
        return json.loads(self.text)


def http(
    node: NodeProcess,
    method: str,
    path: str,
    body: Any = None,
    raw: bytes | None = None,
    timeout_s: float = 30.0,
    content_type: str | None = "application/json",
) -> Reply:
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(node.admin + path, data=data, method=method)
    if data is not None and content_type is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return Reply(response.status, dict(response.headers), response.read().decode())
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, dict(exc.headers), exc.read().decode())


def expect_error(reply: Reply, status: int, error: str) -> dict[str, Any]:
    """A JSON error of this status and name, with a message and no traceback."""
    assert reply.status == status, reply.text
    assert reply.headers["Content-Type"].startswith("application/json")
    body: dict[str, Any] = reply.json
    assert body["error"] == error, body
    assert isinstance(body["message"], str) and body["message"]
    assert "Traceback" not in reply.text
    return body


class ApiSchemas:
    """Checks response bodies against the node's OpenAPI document (when a validator exists)."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        try:
            import openapi_schema_validator
        except ImportError:
            self.validator: Any = None
        else:
            self.validator = openapi_schema_validator

    def _resolve(self, schema: Any) -> Any:
        if isinstance(schema, dict):
            ref = schema.get("$ref")
            if ref is not None:
                return self._resolve(self.doc["components"]["schemas"][ref.rsplit("/", 1)[1]])
            return {k: self._resolve(v) for k, v in schema.items()}
        if isinstance(schema, list):
            return [self._resolve(v) for v in schema]
        return schema

    def response_schema(self, method: str, template: str, status: int) -> Any:
        """The schema of the JSON answer (``$ref``s resolved); None if the answer has no body."""
        responses = self.doc["paths"][template][method.lower()]["responses"]
        spec = responses.get(str(status), responses["default"])
        content = spec.get("content", {}).get("application/json")
        return None if content is None else self._resolve(content["schema"])

    def check(self, method: str, template: str, reply: Reply) -> Any:
        schema = self.response_schema(method, template, reply.status)
        if schema is None or self.validator is None:
            return None
        self.validator.validate(reply.json, schema, cls=self.validator.OAS30Validator)
        return reply.json


@pytest.fixture(scope="module")
def schemas(node: NodeProcess) -> ApiSchemas:
    return ApiSchemas(http(node, "GET", "/v1/openapi.json").json)


def create_topic(
    node: NodeProcess, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> Any:
    body = {"name": name, "partitions": partitions, "configs": configs or {}}
    reply = http(node, "POST", "/v1/topics", body)
    assert reply.status == 201, reply.text
    return reply.json


def produce(node: NodeProcess, topic: str, records: list[dict[str, Any]], **extra: Any) -> Reply:
    return http(node, "POST", f"/v1/topics/{topic}/records", {"records": records, **extra})


def read(node: NodeProcess, topic: str, partition: int, **query: Any) -> Reply:
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    return http(node, "GET", f"/v1/topics/{topic}/partitions/{partition}/records?{qs}")


# --- node and cluster ---------------------------------------------------------------------------


def test_health_ready_and_cluster(node: NodeProcess, schemas: ApiSchemas) -> None:
    health = http(node, "GET", "/v1/health")
    assert health.status == 200 and health.json["status"] == "ok"
    schemas.check("GET", "/v1/health", health)
    ready = http(node, "GET", "/v1/ready")
    assert ready.status == 200 and ready.json == {"ready": True}
    cluster = http(node, "GET", "/v1/cluster")
    assert cluster.status == 200
    schemas.check("GET", "/v1/cluster", cluster)
    body = cluster.json
    assert body["controller"]["leader_id"] == 1
    assert [v["id"] for v in body["controller"]["voters"]] == [1]
    assert body["cluster_id"]
    [broker] = body["brokers"]
    assert broker["id"] == 1 and broker["fenced"] is False
    # started with --port 0: the port bound, not the one configured
    assert (broker["host"], broker["port"]) == (node.host, node.port)


def test_metrics_are_prometheus_text(node: NodeProcess) -> None:
    create_topic(node, "metered")
    assert produce(node, "metered", [{"value": "x"}]).status == 200
    reply = http(node, "GET", "/metrics")
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert 'kafka_messages_in_total{topic="metered"} 1.0' in reply.text


def test_openapi_describes_every_route(node: NodeProcess) -> None:
    doc = http(node, "GET", "/v1/openapi.json").json
    assert doc["openapi"].startswith("3.0")
    served = {(method.lower(), path) for method, path, _ in ROUTES}
    described = {
        (method, path)
        for path, item in doc["paths"].items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    }
    assert described == served
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method != "parameters":
                assert op["responses"], (method, path)
    spec_validator = pytest.importorskip("openapi_spec_validator")
    spec_validator.validate(doc)


def test_head_works_for_health_checks(node: NodeProcess) -> None:
    assert http(node, "HEAD", "/v1/health").status == 200


# --- topics -------------------------------------------------------------------------------------


def test_topic_lifecycle(node: NodeProcess, schemas: ApiSchemas) -> None:
    body = {"name": "orders", "partitions": 3, "configs": {"retention.ms": 60000}}
    created = http(node, "POST", "/v1/topics", body)
    assert created.status == 201, created.text
    schemas.check("POST", "/v1/topics", created)
    topic = created.json
    assert topic["name"] == "orders" and topic["configs"] == {"retention.ms": "60000"}
    assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2]
    for p in topic["partitions"]:
        assert (p["leader"], p["replicas"], p["isr"]) == (1, [1], [1])
        assert (p["log_start_offset"], p["high_watermark"], p["leader_epoch"]) == (0, 0, 0)

    expect_error(http(node, "POST", "/v1/topics", body), 409, "TOPIC_ALREADY_EXISTS")
    listed = http(node, "GET", "/v1/topics")
    schemas.check("GET", "/v1/topics", listed)
    summary = {t["name"]: t for t in listed.json}["orders"]
    assert (summary["partitions"], summary["replication_factor"]) == (3, 1)

    described = http(node, "GET", "/v1/topics/orders")
    schemas.check("GET", "/v1/topics/{name}", described)
    assert described.json["partitions"] == topic["partitions"]
    every = http(node, "GET", "/v1/topics/orders?all_configs=true").json["configs"]
    assert every["retention.ms"] == "60000" and every["cleanup.policy"] == "delete"

    changes = {
        "set": {"cleanup.policy": "compact", "max.message.bytes": 2000},
        "delete": ["retention.ms"],
    }
    altered = http(node, "PATCH", "/v1/topics/orders/configs", changes)
    assert altered.status == 200, altered.text
    schemas.check("PATCH", "/v1/topics/{name}/configs", altered)
    assert altered.json["configs"] == {"cleanup.policy": "compact", "max.message.bytes": "2000"}

    grown = http(node, "POST", "/v1/topics/orders/partitions", {"count": 5})
    assert grown.status == 200, grown.text
    schemas.check("POST", "/v1/topics/{name}/partitions", grown)
    assert len(grown.json["partitions"]) == 5
    shrink = http(node, "POST", "/v1/topics/orders/partitions", {"count": 2})
    expect_error(shrink, 400, "INVALID_PARTITIONS")

    deleted = http(node, "DELETE", "/v1/topics/orders")
    assert deleted.status in (202, 204), deleted.text
    expect_error(http(node, "GET", "/v1/topics/orders"), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    expect_error(http(node, "DELETE", "/v1/topics/orders"), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert "orders" not in {t["name"] for t in http(node, "GET", "/v1/topics").json}


def test_default_partitions_and_validate_only(node: NodeProcess) -> None:
    created = http(node, "POST", "/v1/topics", {"name": "defaults"})
    assert created.status == 201 and len(created.json["partitions"]) == 1
    checked = http(
        node, "POST", "/v1/topics", {"name": "dry", "partitions": 2, "validate_only": True}
    )
    assert checked.status == 200 and checked.json["partitions"] == 2
    expect_error(http(node, "GET", "/v1/topics/dry"), 404, "UNKNOWN_TOPIC_OR_PARTITION")


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"name": "bad name!"}, 400, "INVALID_TOPIC_EXCEPTION"),
        ({"name": ""}, 400, "INVALID_TOPIC_EXCEPTION"),
        ({"name": "x" * 250}, 400, "INVALID_TOPIC_EXCEPTION"),
        ({"name": "rf3", "replication_factor": 3}, 400, "INVALID_REPLICATION_FACTOR"),
        ({"name": "cfg", "configs": {"retention.ms": "soon"}}, 400, "INVALID_CONFIG"),
        ({"name": "cfg", "configs": {"no.such.config": "1"}}, 400, "INVALID_CONFIG"),
        ({"name": "neg", "partitions": -3}, 400, "INVALID_REQUEST"),
        ({"name": "zero", "partitions": 0}, 400, "INVALID_REQUEST"),
        ({"name": "str", "partitions": "3"}, 400, "INVALID_REQUEST"),
        ({"name": "bool", "partitions": True}, 400, "INVALID_REQUEST"),
        ({"name": 5}, 400, "INVALID_REQUEST"),
        ({"partitions": 1}, 400, "INVALID_REQUEST"),
        ({"name": "t", "configs": ["a"]}, 400, "INVALID_REQUEST"),
        ({"name": "t", "configs": {"retention.ms": None}}, 400, "INVALID_REQUEST"),
        ({"name": "t", "partition": 1}, 400, "INVALID_REQUEST"),
    ],
)
def test_create_topic_rejects(node: NodeProcess, body: Any, status: int, error: str) -> None:
    expect_error(http(node, "POST", "/v1/topics", body), status, error)


def test_config_and_partition_changes_reject_bad_input(node: NodeProcess) -> None:
    create_topic(node, "strict")
    patch = "/v1/topics/strict/configs"
    expect_error(http(node, "PATCH", patch, {}), 400, "INVALID_REQUEST")
    expect_error(
        http(node, "PATCH", patch, {"set": {"a": "b"}, "extra": 1}), 400, "INVALID_REQUEST"
    )
    expect_error(http(node, "PATCH", patch, {"delete": "retention.ms"}), 400, "INVALID_REQUEST")
    expect_error(http(node, "PATCH", patch, {"set": {"retention.ms": "x"}}), 400, "INVALID_CONFIG")
    expect_error(
        http(node, "PATCH", "/v1/topics/nope/configs", {"set": {"retention.ms": "1"}}),
        404,
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    parts = "/v1/topics/strict/partitions"
    expect_error(http(node, "POST", parts, {"count": -1}), 400, "INVALID_REQUEST")
    expect_error(http(node, "POST", parts, {}), 400, "INVALID_REQUEST")
    expect_error(
        http(node, "POST", "/v1/topics/nope/partitions", {"count": 2}),
        404,
        "UNKNOWN_TOPIC_OR_PARTITION",
    )


@pytest.mark.parametrize(
    ("method", "path", "raw", "status", "error"),
    [
        ("POST", "/v1/topics", b"{not json", 400, "INVALID_REQUEST"),
        ("POST", "/v1/topics", b"", 400, "INVALID_REQUEST"),
        ("POST", "/v1/topics", b"[1, 2]", 400, "INVALID_REQUEST"),
        ("POST", "/v1/topics", b'"name"', 400, "INVALID_REQUEST"),
        ("POST", "/v1/topics", b"\xff\xfe", 400, "INVALID_REQUEST"),
        ("GET", "/v1/no-such-route", None, 404, "NOT_FOUND"),
        ("PUT", "/v1/topics", b"{}", 405, "METHOD_NOT_ALLOWED"),
        ("POST", "/v1/topics", b"[" + b" " * MAX_BODY_BYTES + b"]", 413, "PAYLOAD_TOO_LARGE"),
        pytest.param(
            "POST", "/v1/topics", b"[" * 100_000, 400, "INVALID_REQUEST", id="100000-nested-["
        ),
        pytest.param(
            "POST", "/v1/topics", b'{"a":' * 50_000, 400, "INVALID_REQUEST", id="50000-nested-{"
        ),
        pytest.param(
            "POST",
            "/v1/groups/g/offsets",
            b'{"topics": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            400,
            "INVALID_REQUEST",
            id="5000-nested-valid-json",
        ),
    ],
)
def test_malformed_requests_get_json_errors(
    node: NodeProcess, method: str, path: str, raw: bytes | None, status: int, error: str
) -> None:
    expect_error(http(node, method, path, raw=raw), status, error)
    assert http(node, "GET", "/v1/health").status == 200


def test_json_nested_too_deep_is_refused_before_parsing(node: NodeProcess) -> None:
    """64 levels are allowed (and then checked as usual), 65 are not; brackets inside strings
    do not count."""
    deep = "[" * 63 + "]" * 63
    reply = http(node, "POST", "/v1/topics", raw=b'{"name": "n", "configs": %s}' % deep.encode())
    assert "configs" in expect_error(reply, 400, "INVALID_REQUEST")["message"]
    deeper = "[" * 64 + "]" * 64
    reply = http(node, "POST", "/v1/topics", raw=b'{"name": "n", "configs": %s}' % deeper.encode())
    assert "64 deep" in expect_error(reply, 400, "INVALID_REQUEST")["message"]
    name = "[" * 200
    reply = http(node, "POST", "/v1/topics", {"name": name, "partitions": 1})
    assert "64 deep" not in expect_error(reply, 400, "INVALID_TOPIC_EXCEPTION")["message"]


@pytest.mark.parametrize(
    ("method", "path", "content_type"),
    [
        ("POST", "/v1/topics", "text/plain"),
        ("POST", "/v1/topics", "text/plain;charset=UTF-8"),
        ("POST", "/v1/topics", "application/x-www-form-urlencoded"),
        ("POST", "/v1/topics", "multipart/form-data; boundary=x"),
        ("PATCH", "/v1/topics/csrf/configs", "text/plain"),
        ("POST", "/v1/topics/csrf/partitions", "text/plain"),
        ("POST", "/v1/topics/csrf/records", "text/plain"),
        ("DELETE", "/v1/topics/csrf", "text/plain"),
        ("POST", "/v1/groups/g/offsets", "text/plain"),
    ],
)
def test_writes_without_a_json_body_get_415_and_change_nothing(
    node: NodeProcess, method: str, path: str, content_type: str | None
) -> None:
    """What a web page can make a browser send cross-site without a CORS preflight (text/plain,
    forms) is refused: a local admin API cannot be driven from a page the admin visits."""
    if http(node, "GET", "/v1/topics/csrf").status == 404:
        create_topic(node, "csrf", configs={"retention.ms": "3600000"})
    body: dict[str, Any] = {
        "name": "csrf-created",
        "partitions": 1,
        "set": {"retention.ms": "1000"},
        "count": 3,
        "records": [{"value": "x"}],
        "to": "earliest",
    }
    raw = json.dumps(body).encode()  # valid JSON, only the media type is wrong
    reply = http(node, method, path, raw=raw, content_type=content_type)
    message = expect_error(reply, 415, "UNSUPPORTED_MEDIA_TYPE")["message"]
    assert "application/json" in message
    assert http(node, "GET", "/v1/topics/csrf-created").status == 404
    topic = http(node, "GET", "/v1/topics/csrf").json
    assert len(topic["partitions"]) == 1 and topic["configs"]["retention.ms"] == "3600000"
    reply = http(node, "GET", "/v1/topics/csrf/partitions/0/records")
    assert reply.json["records"] == []


def test_json_media_types_with_parameters_and_bodiless_deletes_are_accepted(
    node: NodeProcess,
) -> None:
    body = json.dumps({"name": "media", "partitions": 1}).encode()
    reply = http(
        node, "POST", "/v1/topics", raw=body, content_type="Application/JSON; charset=utf-8"
    )
    assert reply.status == 201, reply.text
    assert http(node, "DELETE", "/v1/topics/media").status in (202, 204)
    expect_error(
        http(node, "PUT", "/v1/topics", raw=b"x", content_type="text/plain"),
        405,
        "METHOD_NOT_ALLOWED",
    )
    # a body without any Content-Type (urllib would add a form type: http.client does not)
    host, port = node.admin.removeprefix("http://").rsplit(":", 1)
    conn = HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", "/v1/topics", body=body)
    response = conn.getresponse()
    text = response.read().decode()
    conn.close()
    assert response.status == 415 and "UNSUPPORTED_MEDIA_TYPE" in text, text


# --- records ------------------------------------------------------------------------------------


def test_produce_and_read_records(node: NodeProcess, schemas: ApiSchemas) -> None:
    create_topic(node, "events", partitions=4)
    records: list[dict[str, Any]] = [
        {"key": "user-1", "value": "signup", "headers": {"source": "web", "trace": None}},
        {"key": "user-2", "value": "login", "timestamp": 1_700_000_000_000},
        {"key": None, "value": "tick"},
        {"value": "tock"},
        {"value": None, "partition": 2},
    ]
    reply = produce(node, "events", records)
    assert reply.status == 200, reply.text
    schemas.check("POST", "/v1/topics/{name}/records", reply)
    offsets = reply.json["offsets"]
    assert [o["partition"] for o in offsets[:2]] == [
        partition_for_key(b"user-1", 4),
        partition_for_key(b"user-2", 4),
    ]
    assert offsets[2]["partition"] != offsets[3]["partition"]  # round robin
    assert offsets[4]["partition"] == 2

    for sent, where in zip(records, offsets, strict=True):
        page = read(node, "events", where["partition"], offset=where["offset"], max_records=1)
        assert page.status == 200, page.text
        schemas.check("GET", "/v1/topics/{name}/partitions/{partition}/records", page)
        [got] = page.json["records"]
        assert got["offset"] == where["offset"]
        assert (got["key"], got["value"]) == (sent.get("key"), sent["value"])
        assert got["headers"] == sent.get("headers", {})
        assert page.json["next_offset"] == where["offset"] + 1
    ts = read(node, "events", offsets[1]["partition"], offset=offsets[1]["offset"])
    assert ts.json["records"][0]["timestamp"] == 1_700_000_000_000


def test_read_pages_and_offsets(node: NodeProcess) -> None:
    create_topic(node, "pages")
    reply = produce(node, "pages", [{"value": str(i)} for i in range(25)])
    assert [o["offset"] for o in reply.json["offsets"]] == list(range(25))
    first = read(node, "pages", 0, max_records=10).json
    assert [r["value"] for r in first["records"]] == [str(i) for i in range(10)]
    assert (first["next_offset"], first["high_watermark"]) == (10, 25)
    rest = read(node, "pages", 0, offset=first["next_offset"], max_records=100).json
    assert [r["value"] for r in rest["records"]] == [str(i) for i in range(10, 25)]
    latest = read(node, "pages", 0, offset="latest").json
    assert (latest["records"], latest["next_offset"]) == ([], 25)
    earliest = read(node, "pages", 0, offset="earliest", max_records=1).json
    assert earliest["records"][0]["offset"] == 0
    middle = read(node, "pages", 0, offset=13, max_records=2).json
    assert [r["offset"] for r in middle["records"]] == [13, 14]


def test_binary_records_with_base64(node: NodeProcess) -> None:
    create_topic(node, "binary")
    key, value = bytes(range(256)), b"\x00\xff\xfe"
    record = {
        "key": base64.b64encode(key).decode(),
        "value": base64.b64encode(value).decode(),
        "headers": {"h": base64.b64encode(b"\x01").decode()},
    }
    assert produce(node, "binary", [record], encoding="base64").status == 200
    got = read(node, "binary", 0, encoding="base64").json["records"][0]
    assert base64.b64decode(got["key"]) == key and base64.b64decode(got["value"]) == value
    assert base64.b64decode(got["headers"]["h"]) == b"\x01"


def test_long_poll_wakes_when_a_record_arrives(node: NodeProcess) -> None:
    create_topic(node, "poll")
    result: list[Reply] = []
    started = time.monotonic()
    reader = threading.Thread(
        target=lambda: result.append(read(node, "poll", 0, offset=0, timeout_ms=10_000))
    )
    reader.start()
    time.sleep(0.3)
    assert produce(node, "poll", [{"value": "hello"}]).status == 200
    reader.join(timeout=15)
    assert [r["value"] for r in result[0].json["records"]] == ["hello"]
    assert time.monotonic() - started < 5

    started = time.monotonic()
    empty = read(node, "poll", 0, offset=1, timeout_ms=300)
    assert empty.json["records"] == [] and 0.25 < time.monotonic() - started < 5


def test_produce_auto_creates_the_topic(node: NodeProcess) -> None:
    reply = produce(node, "auto-created", [{"value": "first"}])
    assert reply.status == 200, reply.text
    assert http(node, "GET", "/v1/topics/auto-created").status == 200
    illegal = produce(node, "no%20spaces", [{"value": "v"}])
    expect_error(illegal, 400, "INVALID_TOPIC_EXCEPTION")


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"records": []}, 400, "INVALID_REQUEST"),
        ({"records": {}}, 400, "INVALID_REQUEST"),
        ({}, 400, "INVALID_REQUEST"),
        ({"records": [1]}, 400, "INVALID_REQUEST"),
        ({"records": [{"value": 5}]}, 400, "INVALID_REQUEST"),
        ({"records": [{"value": "v", "partition": -1}]}, 400, "INVALID_REQUEST"),
        ({"records": [{"value": "v", "timestamp": "now"}]}, 400, "INVALID_REQUEST"),
        ({"records": [{"value": "v", "headers": ["h"]}]}, 400, "INVALID_REQUEST"),
        ({"records": [{"value": "v", "color": "red"}]}, 400, "INVALID_REQUEST"),
        ({"records": [{"value": "%%%"}], "encoding": "base64"}, 400, "INVALID_REQUEST"),
        ({"records": [{"value": "v"}], "encoding": "latin-1"}, 400, "INVALID_REQUEST"),
        ({"records": [{"value": "v", "partition": 7}]}, 404, "UNKNOWN_TOPIC_OR_PARTITION"),
        ({"records": [{"value": "x" * 5000}]}, 413, "MESSAGE_TOO_LARGE"),
    ],
)
def test_produce_rejects(node: NodeProcess, body: Any, status: int, error: str) -> None:
    if http(node, "GET", "/v1/topics/small").status == 404:
        create_topic(node, "small", partitions=2, configs={"max.message.bytes": "1000"})
    reply = http(node, "POST", "/v1/topics/small/records", body)
    expect_error(reply, status, error)
    assert read(node, "small", 0).json["high_watermark"] == 0  # nothing appended


def test_many_records_are_split_into_batches_that_fit(node: NodeProcess) -> None:
    create_topic(node, "tight", configs={"max.message.bytes": "1000"})
    records = [{"key": f"k{i}", "value": "v" * 100, "headers": {"h": "x"}} for i in range(40)]
    reply = produce(node, "tight", records)
    assert reply.status == 200, reply.text
    assert [o["offset"] for o in reply.json["offsets"]] == list(range(40))
    page = read(node, "tight", 0, max_records=100).json
    assert [r["key"] for r in page["records"]] == [f"k{i}" for i in range(40)]


@pytest.mark.parametrize(
    ("query", "status", "error"),
    [
        ("offset=99", 416, "OFFSET_OUT_OF_RANGE"),
        ("offset=-1", 416, "OFFSET_OUT_OF_RANGE"),
        ("offset=soon", 400, "INVALID_REQUEST"),
        ("max_records=0", 400, "INVALID_REQUEST"),
        ("timeout_ms=999999", 400, "INVALID_REQUEST"),
        ("encoding=hex", 400, "INVALID_REQUEST"),
    ],
)
def test_read_rejects(node: NodeProcess, query: str, status: int, error: str) -> None:
    if http(node, "GET", "/v1/topics/readable").status == 404:
        create_topic(node, "readable")
    reply = http(node, "GET", f"/v1/topics/readable/partitions/0/records?{query}")
    expect_error(reply, status, error)


def test_read_unknown_partitions(node: NodeProcess) -> None:
    create_topic(node, "known")
    for path in ("/v1/topics/known/partitions/5/records", "/v1/topics/nope/partitions/0/records"):
        expect_error(http(node, "GET", path), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    expect_error(http(node, "GET", "/v1/topics/known/partitions/x/records"), 400, "INVALID_REQUEST")


def test_a_kafka_client_reads_what_rest_wrote(node: NodeProcess) -> None:
    kafka = pytest.importorskip("kafka")
    create_topic(node, "interop")
    produce(node, "interop", [{"key": "k", "value": f"v{i}"} for i in range(3)])
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=node.bootstrap, consumer_timeout_ms=5000, auto_offset_reset="earliest"
    )
    try:
        consumer.assign([kafka.TopicPartition("interop", 0)])
        got = [(m.offset, m.key, m.value) for _, m in zip(range(3), consumer, strict=False)]
    finally:
        consumer.close()
    assert got == [(i, b"k", f"v{i}".encode()) for i in range(3)]


# --- the CLI ------------------------------------------------------------------------------------


def kraft(
    node: NodeProcess | str, *argv: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    admin = node if isinstance(node, str) else node.admin
    return subprocess.run(
        [sys.executable, "-m", "kraft.cli", *argv, "--admin", admin],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=_env(),
    )


def test_cli_topics(node: NodeProcess) -> None:
    made = kraft(
        node, "topics", "create", "cli-topic", "--partitions", "2", "--config", "retention.ms=5000"
    )
    assert (made.returncode, made.stdout) == (0, "Created topic cli-topic.\n"), made.stderr
    listed = kraft(node, "topics", "list")
    assert listed.returncode == 0
    assert listed.stdout.splitlines()[0].split() == ["NAME", "PARTITIONS", "REPLICATION_FACTOR"]
    assert ["cli-topic", "2", "1"] in [line.split() for line in listed.stdout.splitlines()]
    names = [t["name"] for t in json.loads(kraft(node, "topics", "list", "--json").stdout)]
    assert "cli-topic" in names

    described = kraft(node, "topics", "describe", "cli-topic")
    assert described.returncode == 0
    assert "PartitionCount: 2" in described.stdout and "retention.ms=5000" in described.stdout
    altered = kraft(
        node,
        "topics",
        "alter",
        "cli-topic",
        "--set",
        "retention.ms=9000",
        "--partitions",
        "3",
        "--json",
    )
    assert altered.returncode == 0, altered.stderr
    topic = json.loads(altered.stdout)
    assert topic["configs"] == {"retention.ms": "9000"} and len(topic["partitions"]) == 3
    cleared = kraft(node, "topics", "alter", "cli-topic", "--delete", "retention.ms", "--json")
    assert json.loads(cleared.stdout)["configs"] == {}

    gone = kraft(node, "topics", "delete", "cli-topic")
    assert gone.returncode == 0 and "cli-topic" in gone.stdout
    missing = kraft(node, "topics", "describe", "cli-topic")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("kraft: UNKNOWN_TOPIC_OR_PARTITION: ")
    assert missing.stderr.count("\n") == 1


def test_cli_errors(node: NodeProcess) -> None:
    kraft(node, "topics", "create", "twice")
    again = kraft(node, "topics", "create", "twice")
    assert again.returncode == 1 and again.stderr.startswith("kraft: TOPIC_ALREADY_EXISTS: ")
    bad = kraft(node, "topics", "create", "bad", "--config", "retention.ms=x")
    assert bad.returncode == 1 and bad.stderr.startswith("kraft: INVALID_CONFIG: ")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    down = kraft(closed, "cluster", "status")
    assert down.returncode == 1
    assert down.stderr.startswith(
        f"kraft: ADMIN_UNREACHABLE: the admin API is not reachable at {closed}"
    )
    assert "kraft dev" in down.stderr


def test_cli_produce_and_consume(node: NodeProcess) -> None:
    kraft(node, "topics", "create", "lines", "--partitions", "3")
    lines = "".join(f"key{i}:value {i}\n" for i in range(50))
    sent = kraft(
        node, "produce", "lines", "--key-separator", ":", "--header", "app=cli", stdin=lines
    )
    assert sent.returncode == 0, sent.stderr
    got = kraft(
        node,
        "consume",
        "lines",
        "--from-beginning",
        "--max-messages",
        "50",
        "--print-key",
        "--timeout-ms",
        "10000",
    )
    assert got.returncode == 0, got.stderr
    pairs = sorted(tuple(line.split("\t")) for line in got.stdout.splitlines())
    assert pairs == sorted((f"key{i}", f"value {i}") for i in range(50))
    assert "Processed a total of 50 messages" in got.stderr
    for i in (0, 17):  # keyed records land where Kafka's partitioner puts them
        page = read(node, "lines", partition_for_key(f"key{i}".encode(), 3), max_records=100)
        assert any(r["key"] == f"key{i}" for r in page.json["records"])
        assert all(r["headers"] == {"app": "cli"} for r in page.json["records"])

    one = kraft(node, "produce", "lines", "--partition", "1", stdin="solo\n")
    assert one.returncode == 0
    tail = kraft(
        node,
        "consume",
        "lines",
        "--partition",
        "1",
        "--from-beginning",
        "--timeout-ms",
        "500",
        "--json",
    )
    records = [json.loads(line) for line in tail.stdout.splitlines()]
    assert records[-1]["value"] == "solo" and records[-1]["partition"] == 1


def test_cli_consume_waits_for_new_records(node: NodeProcess) -> None:
    create_topic(node, "live")
    produce(node, "live", [{"value": "old"}])
    argv = [
        sys.executable,
        "-m",
        "kraft.cli",
        "consume",
        "live",
        "--max-messages",
        "1",
        "--timeout-ms",
        "20000",
        "--admin",
        node.admin,
    ]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=_env()
    ) as proc:
        # The consumer starts at the end, so "old" is never printed; produce until it has
        # started and printed one of the new records (however long it took to start).
        for i in range(60):
            produce(node, "live", [{"value": f"new-{i}"}])
            try:
                out, err = proc.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            proc.kill()
            out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert out.startswith("new-") and out.count("\n") == 1, out


def test_cli_cluster_status(node: NodeProcess) -> None:
    status = kraft(node, "cluster", "status")
    assert status.returncode == 0, status.stderr
    assert "Controller: leader 1" in status.stdout
    assert status.stdout.splitlines()[-2].split()[:1] == ["BROKER"]
    as_json = json.loads(kraft(node, "cluster", "status", "--json").stdout)
    assert as_json["controller"]["leader_id"] == 1


# --- lifecycle ----------------------------------------------------------------------------------


def test_sigterm_stops_cleanly_and_a_restart_keeps_topics_and_records(tmp_path: Path) -> None:
    first = NodeProcess(tmp_path / "data").start()
    try:
        create_topic(first, "durable", partitions=2, configs={"retention.ms": "86400000"})
        reply = produce(first, "durable", [{"key": f"k{i}", "value": f"v{i}"} for i in range(20)])
        assert reply.status == 200
        before = http(first, "GET", "/v1/topics/durable").json
        hw = before["partitions"][0]["high_watermark"]
        polls: list[Reply] = []
        poller = threading.Thread(
            target=lambda: polls.append(read(first, "durable", 0, offset=hw, timeout_ms=60_000))
        )
        poller.start()
        time.sleep(0.3)
    finally:
        started = time.monotonic()
        assert first.stop() == 0, first.log_tail()
    poller.join(timeout=10)
    assert time.monotonic() - started < 10
    assert polls[0].status == 200 and polls[0].json["records"] == []  # answered, not dropped

    second = NodeProcess(tmp_path / "data").start()
    try:
        after = http(second, "GET", "/v1/topics/durable").json
        assert after["topic_id"] == before["topic_id"]
        assert after["configs"] == {"retention.ms": "86400000"}
        watermarks = [p["high_watermark"] for p in after["partitions"]]
        assert watermarks == [p["high_watermark"] for p in before["partitions"]]
        pages = [read(second, "durable", p, max_records=100).json for p in range(2)]
        values = {r["value"] for page in pages for r in page["records"]}
        assert values == {f"v{i}" for i in range(20)}
        assert produce(second, "durable", [{"value": "after restart"}]).status == 200
    finally:
        assert second.stop() == 0, second.log_tail()
