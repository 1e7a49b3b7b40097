"""The admin CLI (argument parsing, output, its HTTP client against a fake API) and the REST
API's default partitioner (Kafka's murmur2)."""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_protocol.partitioner import DefaultPartitioner, murmur2, partition_for_key
from kraft.cli import topics as admin_cli
from kraft.cli.main import add_admin_commands
from kraft.cli.output import format_table
from kraft.cli.records import b64, read_bursts, split_key
from kraft.cli.rest_client import AdminClient, AdminError
from kraft.cli.topics import describe_text


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="kraft")
    add_admin_commands(root.add_subparsers(dest="command"))
    return root


# --- murmur2 ------------------------------------------------------------------------------------

# org.apache.kafka.common.utils.UtilsTest#testMurmur2 (the Java client's vectors).
KAFKA_MURMUR2_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"": 275646681,
}


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2_VECTORS.items())
def test_murmur2_matches_the_java_client(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@given(st.binary(max_size=64))
def test_murmur2_agrees_with_kafka_python(data: bytes) -> None:
    default = pytest.importorskip("kafka.partitioner.default")
    assert murmur2(data) & 0xFFFFFFFF == default.murmur2(data)


def test_keyed_partition_is_the_positive_hash_modulo_the_count() -> None:
    # toPositive(-790332482) = 0x7fffffff & h = 1357151166; % 50 = 16 (Kafka's formula)
    assert partition_for_key(b"foobar", 50) == (murmur2(b"foobar") & 0x7FFFFFFF) % 50 == 16
    assert all(0 <= partition_for_key(bytes([i]), 7) < 7 for i in range(256))


def test_unkeyed_records_round_robin_per_topic() -> None:
    partitioner = DefaultPartitioner()
    assert [partitioner.partition("a", None, 3) for _ in range(5)] == [0, 1, 2, 0, 1]
    assert partitioner.partition("b", None, 3) == 0
    assert partitioner.partition("a", b"foobar", 50) == 16


# --- argument parsing ---------------------------------------------------------------------------


def test_topics_create_arguments() -> None:
    args = parser().parse_args(
        [
            "topics",
            "create",
            "events",
            "--partitions",
            "3",
            "--replication-factor",
            "1",
            "--config",
            "retention.ms=1000",
            "--config",
            "cleanup.policy=compact",
        ]
    )
    assert args.func is admin_cli.topics_create
    assert (args.name, args.partitions, args.replication_factor) == ("events", 3, 1)
    assert args.config == [("retention.ms", "1000"), ("cleanup.policy", "compact")]
    assert args.json is False


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "create", "t", "--partitions", "0"],
        ["topics", "create", "t", "--partitions", "-2"],
        ["topics", "create", "t", "--partitions", "x"],
        ["topics", "create", "t", "--config", "no-equals-sign"],
        ["topics", "alter", "t", "--set", "=v"],
        ["topics"],
        ["cluster"],
        ["consume", "t", "--timeout-ms", "-1"],
        ["produce"],
    ],
)
def test_bad_arguments_are_usage_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert_usage_error(argv, capsys)


def assert_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """argparse refuses ``argv``: exit status 2 and a usage line on stderr."""
    with pytest.raises(SystemExit) as exc:
        parser().parse_args(argv)
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_every_command_has_a_function_and_common_options() -> None:
    for argv in (
        ["topics", "list"],
        ["topics", "describe", "t"],
        ["topics", "delete", "t"],
        ["topics", "alter", "t", "--set", "a=b", "--delete", "c", "--partitions", "4"],
        ["produce", "t", "--key-separator", ":", "--partition", "0", "--header", "h=v"],
        ["consume", "t", "--from-beginning", "--max-messages", "5", "--group", "g"],
        ["cluster", "status"],
    ):
        args = parser().parse_args([*argv, "--admin", "http://h:1", "--json"])
        assert callable(args.func), argv
        assert (args.admin, args.json) == ("http://h:1", True)


def test_alter_and_client_options() -> None:
    alter = parser().parse_args(["topics", "alter", "t", "--set", "a=1=2", "--delete", "b"])
    assert (alter.set, alter.delete, alter.partitions) == ([("a", "1=2")], ["b"], None)
    prod = parser().parse_args(["produce", "t", "--header", "h=v", "--key-separator", ":"])
    assert (prod.header, prod.key_separator, prod.partition) == ([("h", "v")], ":", None)
    cons = parser().parse_args(["consume", "t"])
    assert (cons.from_beginning, cons.max_messages, cons.timeout_ms) == (False, None, None)
    assert (cons.print_key, cons.key_separator, cons.group) == (False, "\t", None)


def test_admin_url_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KRAFT_ADMIN", raising=False)
    assert parser().parse_args(["topics", "list"]).admin == "http://127.0.0.1:8080"
    monkeypatch.setenv("KRAFT_ADMIN", "http://10.0.0.1:9000")
    assert parser().parse_args(["topics", "list"]).admin == "http://10.0.0.1:9000"


def test_the_kraft_parser_includes_the_admin_commands() -> None:
    from kraft.cli.main import build_parser

    args = build_parser().parse_args(["topics", "describe", "events"])
    assert args.func is admin_cli.topics_describe


# --- output and input helpers -------------------------------------------------------------------


def test_format_table_aligns_columns() -> None:
    text = format_table(("NAME", "N", "FLAG"), [("a", 10, True), ("long-name", None, [1, 2])])
    assert text.splitlines() == [
        "NAME       N   FLAG",
        "a          10  yes",
        "long-name  -   1,2",
    ]


def test_describe_text() -> None:
    topic = {
        "name": "t",
        "topic_id": "id",
        "replication_factor": 1,
        "configs": {"retention.ms": "5"},
        "partitions": [
            {
                "partition": 0,
                "leader": 1,
                "leader_epoch": 2,
                "replicas": [1],
                "isr": [1],
                "log_start_offset": 0,
                "high_watermark": 7,
            }
        ],
    }
    lines = describe_text(topic).splitlines()
    assert lines[0].startswith("Topic: t  TopicId: id  PartitionCount: 1  ReplicationFactor: 1")
    assert lines[0].endswith("Configs: retention.ms=5")
    assert lines[1].split() == [
        "PARTITION",
        "LEADER",
        "LEADER_EPOCH",
        "REPLICAS",
        "ISR",
        "LOG_START_OFFSET",
        "HIGH_WATERMARK",
    ]
    assert lines[2].split() == ["0", "1", "2", "1", "1", "0", "7"]


def test_read_bursts_splits_lines_and_reports_waiting_input() -> None:
    r, w = os.pipe()
    try:
        os.write(w, b"a\nb\r\nc")
        bursts = read_bursts(r)
        assert next(bursts) == ([b"a", b"b"], False)
        os.write(w, b"d\n\nlast")
        os.close(w)
        assert list(bursts) == [([b"cd", b""], True), ([b"last"], False)]
    finally:
        os.close(r)


def test_split_key() -> None:
    assert split_key(b"k:v:w", b":", 1) == (b"k", b"v:w")
    assert split_key(b"plain", None, 1) == (None, b"plain")
    with pytest.raises(AdminError, match="no key separator ':' on line 7"):
        split_key(b"plain", b":", 7)


# --- against a fake admin API -------------------------------------------------------------------


class FakeApi:
    """A stand-in REST API: canned replies by (method, path), every request recorded."""

    def __init__(self) -> None:
        self.replies: dict[tuple[str, str], list[tuple[int, Any]]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                fake.requests.append((self.command, self.path, body))
                path = self.path.split("?")[0]
                queue = fake.replies.get((self.command, path)) or [(404, {"error": "NOT_FOUND"})]
                status, reply = queue.pop(0) if len(queue) > 1 else queue[0]
                data = b"" if reply is None else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def reply(self, method: str, path: str, *replies: tuple[int, Any]) -> None:
        self.replies[(method, path)] = list(replies)


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    thread = threading.Thread(target=fake.server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def run(argv: list[str], api: FakeApi) -> int:
    args = parser().parse_args([*argv, "--admin", api.url])
    return int(args.func(args))


def test_topics_create_sends_the_body_and_reports(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.reply("POST", "/v1/topics", (201, {"name": "t"}))
    assert run(["topics", "create", "t", "--partitions", "2", "--config", "a=b"], api) == 0
    assert api.requests == [
        ("POST", "/v1/topics", {"name": "t", "configs": {"a": "b"}, "partitions": 2})
    ]
    assert capsys.readouterr().out == "Created topic t.\n"


def test_api_errors_are_one_line_and_status_1(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    error = {"error": "TOPIC_ALREADY_EXISTS", "message": "Topic 't' already exists."}
    api.reply("POST", "/v1/topics", (409, error))
    assert run(["topics", "create", "t"], api) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "kraft: TOPIC_ALREADY_EXISTS: Topic 't' already exists.\n"


def test_non_json_errors_keep_the_status(api: FakeApi) -> None:
    api.reply("GET", "/v1/topics", (502, None))
    with pytest.raises(AdminError) as exc:
        AdminClient(api.url).call("GET", "/v1/topics")
    assert exc.value.error == "HTTP_502"


def test_connection_refused_says_how_to_start_a_node(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    args = parser().parse_args(["cluster", "status", "--admin", url])
    assert args.func(args) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"kraft: ADMIN_UNREACHABLE: the admin API is not reachable at {url}")
    assert "connection refused" in err and "kraft dev" in err
    assert err.count("\n") == 1


def test_a_url_without_scheme_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    args = parser().parse_args(["topics", "list", "--admin", "localhost:8080"])
    assert args.func(args) == 1
    assert capsys.readouterr().err.startswith("kraft: INVALID_ADMIN_URL:")


def test_alter_without_changes_is_an_error(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["topics", "alter", "t"], api) == 1
    assert "nothing to alter" in capsys.readouterr().err
    assert api.requests == []


def test_alter_patches_configs_then_partitions(api: FakeApi) -> None:
    api.reply("PATCH", "/v1/topics/t/configs", (200, {"name": "t"}))
    api.reply("POST", "/v1/topics/t/partitions", (200, {"name": "t"}))
    assert (
        run(["topics", "alter", "t", "--set", "a=1", "--delete", "b", "--partitions", "3"], api)
        == 0
    )
    assert api.requests == [
        ("PATCH", "/v1/topics/t/configs", {"set": {"a": "1"}, "delete": ["b"]}),
        ("POST", "/v1/topics/t/partitions", {"count": 3}),
    ]


def test_produce_batches_stdin_lines_as_base64(api: FakeApi) -> None:
    api.reply("POST", "/v1/topics/t/records", (200, {"topic": "t", "offsets": []}))
    r, w = os.pipe()
    os.write(w, b"k1:v1\nk2:\xff\n")
    os.close(w)
    args = parser().parse_args(
        ["produce", "t", "--key-separator", ":", "--header", "h=x", "--admin", api.url]
    )
    args.stdin_fd = r
    try:
        assert args.func(args) == 0
    finally:
        os.close(r)
    [(method, path, body)] = api.requests
    assert (method, path, body["encoding"]) == ("POST", "/v1/topics/t/records", "base64")
    decoded = [(base64.b64decode(x["key"]), base64.b64decode(x["value"])) for x in body["records"]]
    assert decoded == [(b"k1", b"v1"), (b"k2", b"\xff")]
    assert body["records"][0]["headers"] == {"h": base64.b64encode(b"x").decode()}


def test_consume_prints_values_and_keys(
    api: FakeApi, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    def rec(offset: int, key: bytes | None, value: bytes | None) -> dict[str, Any]:
        enc = b64
        return {
            "offset": offset,
            "timestamp": 1,
            "key": enc(key),
            "value": enc(value),
            "headers": {},
        }

    api.reply("GET", "/v1/topics/t", (200, {"name": "t", "partitions": [{"partition": 0}]}))
    records = [rec(0, b"k", b"v1"), rec(1, None, None), rec(2, b"x", b"v3")]
    page = {"records": records, "next_offset": 3, "high_watermark": 3, "log_start_offset": 0}
    api.reply("GET", "/v1/topics/t/partitions/0/records", (200, page))
    argv = ["consume", "t", "--from-beginning", "--max-messages", "2", "--print-key"]
    assert run(argv, api) == 0
    captured = capfdbinary.readouterr()
    assert captured.out == b"k\tv1\nnull\tnull\n"
    assert b"Processed a total of 2 messages" in captured.err
    query = api.requests[1][1].split("?")[1]
    assert "offset=earliest" in query and "max_records=2" in query


def produce_from(api: FakeApi, data: bytes, *argv: str) -> int:
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    args = parser().parse_args(["produce", "t", *argv, "--admin", api.url])
    args.stdin_fd = r
    try:
        return int(args.func(args))
    finally:
        os.close(r)


def test_produce_sends_the_lines_before_a_bad_one(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.reply("POST", "/v1/topics/t/records", (200, {"topic": "t", "offsets": []}))
    assert produce_from(api, b"a:1\nno separator\nb:2\n", "--key-separator", ":") == 1
    assert capsys.readouterr().err == "kraft: INVALID_INPUT: no key separator ':' on line 2\n"
    [(_, _, body)] = api.requests
    assert [base64.b64decode(r["value"]) for r in body["records"]] == [b"1"]


def test_a_failed_batch_is_reported_once_and_not_resent(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    error = {"error": "MESSAGE_TOO_LARGE", "message": "1 of 2 records failed: too big"}
    api.reply("POST", "/v1/topics/t/records", (413, error))
    assert produce_from(api, b"small\nbig\n") == 1
    assert capsys.readouterr().err == "kraft: MESSAGE_TOO_LARGE: 1 of 2 records failed: too big\n"
    assert len(api.requests) == 1


def test_long_polls_leave_no_waiters_and_end_at_shutdown() -> None:
    import asyncio
    from types import SimpleNamespace

    from kraft.rest.records import LongPolls

    async def scenario() -> None:
        polls, part = LongPolls(), SimpleNamespace(waiters=[])
        await polls.wait(part, 0.01)  # type: ignore[arg-type]
        assert part.waiters == []  # an idle partition collects nothing
        waiting = asyncio.create_task(polls.wait(part, 60))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert len(part.waiters) == 1
        polls.close()
        await asyncio.wait_for(waiting, 1)
        assert polls.closing

    asyncio.run(scenario())
