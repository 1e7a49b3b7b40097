"""``kraft transactions ...``: argument parsing (kafka-transactions.sh's options), and the
requests and tables (kafka-transactions.sh's columns) against a fake REST admin API."""

from __future__ import annotations

from typing import Any

import pytest
import test_admin_cli
from test_admin_cli import FakeApi, assert_usage_error, parser, run

from kraft.cli import transactions as cli

api = test_admin_cli.api  # the fixture


@pytest.mark.parametrize(
    ("argv", "func"),
    [
        (["transactions", "list"], cli.transactions_list),
        (["transactions", "describe", "--transactional-id", "x"], cli.transactions_describe),
        (
            ["transactions", "describe-producers", "--topic", "t", "--partition", "0"],
            cli.transactions_describe_producers,
        ),
        (
            ["transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "5"],
            cli.transactions_abort,
        ),
        (["transactions", "find-hanging", "--broker-id", "1"], cli.transactions_find_hanging),
    ],
)
def test_every_command_has_a_function_and_common_options(argv: list[str], func: Any) -> None:
    args = parser().parse_args([*argv, "--admin", "http://h:1", "--json", "--user", "u"])
    assert args.func is func
    assert (args.admin, args.json, args.user) == ("http://h:1", True, "u")


@pytest.mark.parametrize(
    "argv",
    [
        ["transactions"],
        ["transactions", "describe"],  # --transactional-id is required
        ["transactions", "describe-producers", "--topic", "t"],
        ["transactions", "abort", "--partition", "0", "--start-offset", "1"],
        ["transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "-1"],
        ["transactions", "abort", "--topic", "t", "--partition", "0", "--producer-epoch", "40000"],
        ["transactions", "find-hanging", "--max-transaction-timeout", "-1"],
        ["transactions", "list", "--duration-filter", "soon"],
        ["transactions", "list", "--state", "Running"],  # not one of Kafka's states
        ["transactions", "list", "--bootstrap-server", "no-port"],
    ],
)
def test_bad_arguments_are_usage_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert_usage_error(argv, capsys)


def test_list_sends_the_filters_and_prints_kafkas_table(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    listed = [{"transactional_id": "app", "producer_id": 7, "state": "Ongoing", "coordinator": 2}]
    api.reply("GET", "/v1/transactions", (200, listed))
    argv = ["transactions", "list", "--state", "Ongoing", "--state", "Empty"]
    assert run([*argv, "--producer-id", "7", "--duration-filter", "500"], api) == 0
    [(_, path, _)] = api.requests
    assert path == "/v1/transactions?state=Ongoing%2CEmpty&producer_id=7&duration_ms=500"
    assert capsys.readouterr().out.splitlines() == [
        "TransactionalId  Coordinator  ProducerId  TransactionState",
        "app              2            7           Ongoing",
    ]


def test_describe_prints_none_without_a_running_transaction(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    described = {
        "transactional_id": "a/b",
        "state": "Empty",
        "producer_id": 7,
        "producer_epoch": 1,
        "transaction_timeout_ms": 60000,
        "transaction_start_time_ms": None,
        "transaction_duration_ms": None,
        "partitions": [],
        "coordinator": {"id": 3, "host": "h", "port": 1},
    }
    api.reply("GET", "/v1/transactions/a%2Fb", (200, described))
    assert run(["transactions", "describe", "--transactional-id", "a/b"], api) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == list(cli.DESCRIBE_COLUMNS)
    assert row.split() == ["3", "a/b", "7", "1", "Empty", "60000", "None", "None"]  # no partitions


def test_describe_producers(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    producers = [
        {
            "producer_id": 9,
            "producer_epoch": 0,
            "last_sequence": 4,
            "last_timestamp": 1700000000000,
            "coordinator_epoch": None,
            "current_transaction_start_offset": 12,
        },
        {
            "producer_id": 11,
            "producer_epoch": 2,
            "last_sequence": 0,
            "last_timestamp": 1700000000001,
            "coordinator_epoch": 4,
            "current_transaction_start_offset": None,
        },
    ]
    answer = {"topic": "t", "partition": 1, "broker_id": 2, "producers": producers}
    api.reply("GET", "/v1/topics/t/partitions/1/producers", (200, answer))
    argv = ["transactions", "describe-producers", "--topic", "t", "--partition", "1"]
    assert run([*argv, "--broker-id", "2"], api) == 0
    assert api.requests[0][1] == "/v1/topics/t/partitions/1/producers?broker_id=2"
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        list(cli.PRODUCER_COLUMNS),
        ["9", "0", "-1", "4", "1700000000000", "12"],
        ["11", "2", "4", "0", "1700000000001", "None"],
    ]


ABORTED = {
    "topic": "t",
    "partition": 0,
    "producer_id": 9,
    "producer_epoch": 0,
    "coordinator_epoch": 0,
    "aborted": True,
}


def test_abort_by_start_offset_or_by_producer(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.reply("POST", "/v1/transactions/abort", (200, ABORTED))
    base = ["transactions", "abort", "--topic", "t", "--partition", "0"]
    assert run([*base, "--start-offset", "12"], api) == 0
    assert "Aborted the transaction of producer 9" in capsys.readouterr().out
    argv = ["--producer-id", "9", "--producer-epoch", "0", "--coordinator-epoch", "-1"]
    assert run([*base, *argv], api) == 0
    assert [body for _, _, body in api.requests] == [
        {"topic": "t", "partition": 0, "start_offset": 12},
        {
            "topic": "t",
            "partition": 0,
            "producer_id": 9,
            "producer_epoch": 0,
            "coordinator_epoch": 0,  # negative: 0, as Kafka's tool
        },
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "either with --start-offset or with --producer-id"),
        (["--producer-id", "9"], "Missing required argument --producer-epoch"),
        (
            ["--producer-id", "9", "--producer-epoch", "1"],
            "Missing required argument --coordinator-epoch",
        ),
    ],
)
def test_abort_needs_one_whole_form(
    extra: list[str], message: str, api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["transactions", "abort", "--topic", "t", "--partition", "0", *extra], api) == 1
    assert message in capsys.readouterr().err
    assert api.requests == []


def test_find_hanging_prints_minutes(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    found = {
        "max_transaction_timeout_ms": 60000,
        "partitions_searched": 3,
        "hanging": [
            {
                "topic": "t",
                "partition": 0,
                "producer_id": 9,
                "producer_epoch": 0,
                "coordinator_epoch": None,
                "start_offset": 12,
                "last_timestamp": 1700000000000,
                "duration_ms": 20 * 60000 + 59999,
            }
        ],
    }
    api.reply("GET", "/v1/transactions/hanging", (200, found))
    argv = ["transactions", "find-hanging", "--topic", "t", "--max-transaction-timeout", "1"]
    assert run(argv, api) == 0
    assert api.requests[0][1] == "/v1/transactions/hanging?max_transaction_timeout_ms=60000&topic=t"
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        list(cli.HANGING_COLUMNS),
        ["t", "0", "9", "0", "-1", "12", "1700000000000", "20"],
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "requires either --topic or --broker-id"),
        (["--broker-id", "1", "--partition", "0"], "requires --topic"),
    ],
)
def test_find_hanging_needs_a_scope(
    extra: list[str], message: str, api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["transactions", "find-hanging", *extra], api) == 1
    assert message in capsys.readouterr().err
    assert api.requests == []


def test_errors_are_one_line(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    error = {"error": "TRANSACTIONAL_ID_NOT_FOUND", "message": "transactional id 'x' is not known"}
    api.reply("GET", "/v1/transactions/x", (404, error))
    assert run(["transactions", "describe", "--transactional-id", "x"], api) == 1
    assert capsys.readouterr().err == (
        "kraft: TRANSACTIONAL_ID_NOT_FOUND: transactional id 'x' is not known\n"
    )
