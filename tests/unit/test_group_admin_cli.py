"""``kraft groups ...``: argument parsing, and the requests and output (kafka-consumer-groups.sh's
tables) against a fake REST admin API."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import test_admin_cli
from test_admin_cli import FakeApi, assert_usage_error, parser, run

from kraft.cli import groups as admin_cli
from kraft.cli.groups import datetime_ms, offsets_text

# --- arguments -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "func"),
    [
        (["groups", "list"], admin_cli.groups_list),
        (["groups", "describe", "g"], admin_cli.groups_describe),
        (["groups", "describe", "--group", "g", "--members"], admin_cli.groups_describe),
        (["groups", "describe", "g", "--state"], admin_cli.groups_describe),
        (["groups", "delete", "g"], admin_cli.groups_delete),
        (
            ["groups", "reset-offsets", "--group", "g", "--all-topics", "--to-latest"],
            admin_cli.groups_reset_offsets,
        ),
    ],
)
def test_every_groups_command_has_a_function_and_common_options(argv: list[str], func: Any) -> None:
    args = parser().parse_args([*argv, "--admin", "http://h:1", "--json"])
    assert args.func is func
    assert (args.admin, args.json) == ("http://h:1", True)


def test_reset_offsets_arguments() -> None:
    args = parser().parse_args(
        ["groups", "reset-offsets", "g", "--topic", "a", "--topic", "b", "--to-offset", "7"]
    )
    assert (args.group, args.topic, args.all_topics, args.to_offset) == ("g", ["a", "b"], False, 7)
    assert (args.execute, args.dry_run) == (False, False)  # a dry run, as Kafka's default


@pytest.mark.parametrize(
    "argv",
    [
        ["groups"],
        ["groups", "reset-offsets", "g", "--to-earliest"],  # no scope
        ["groups", "reset-offsets", "g", "--all-topics"],  # no target
        ["groups", "reset-offsets", "g", "--all-topics", "--topic", "t", "--to-earliest"],
        ["groups", "reset-offsets", "g", "--all-topics", "--to-earliest", "--to-latest"],
        ["groups", "reset-offsets", "g", "--all-topics", "--to-offset", "-1"],
        ["groups", "reset-offsets", "g", "--all-topics", "--to-datetime", "yesterday"],
        ["groups", "reset-offsets", "g", "--all-topics", "--to-datetime", "1969-12-31T00:00Z"],
        ["groups", "reset-offsets", "g", "--all-topics", "--to-latest", "--execute", "--dry-run"],
        ["groups", "describe", "g", "--members", "--state"],
    ],
)
def test_bad_arguments_are_usage_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert_usage_error(argv, capsys)


def test_datetimes_are_epoch_milliseconds(monkeypatch: pytest.MonkeyPatch) -> None:
    assert datetime_ms("1970-01-01T00:00:01Z") == 1000
    assert datetime_ms("2024-05-01T12:00:00.250+02:00") == 1714557600250
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        assert datetime_ms("1970-01-01T00:00:02") == 2000  # no zone: local time
        assert datetime_ms("2024-05-01") == 1714521600000
    finally:
        monkeypatch.undo()
        time.tzset()


# --- against a fake admin API --------------------------------------------------------------------

api = test_admin_cli.api  # the fixture: test_admin_cli's fake REST API


MEMBER = {
    "member_id": "rdkafka-1",
    "group_instance_id": None,
    "client_id": "app",
    "host": "/127.0.0.1",
    "assignment": [{"topic": "orders", "partitions": [0, 1]}],
}
IDLE_MEMBER = {**MEMBER, "member_id": "rdkafka-2", "client_id": "app2", "assignment": []}
GROUP: dict[str, Any] = {
    "group_id": "g",
    "state": "Stable",
    "protocol_type": "consumer",
    "protocol": "range",
    "coordinator": {"id": 2, "host": "127.0.0.1", "port": 9093},
    "members": [MEMBER, IDLE_MEMBER],
    "partitions": [
        {
            "topic": "orders",
            "partition": 0,
            "committed": 5,
            "high_watermark": 12,
            "lag": 7,
            "member_id": "rdkafka-1",
        },
        {
            "topic": "orders",
            "partition": 1,
            "committed": None,
            "high_watermark": 3,
            "lag": None,
            "member_id": "rdkafka-1",
        },
        {
            "topic": "old",
            "partition": 0,
            "committed": 9,
            "high_watermark": 9,
            "lag": 0,
            "member_id": None,
        },
    ],
    "lag": 7,
}


def test_describe_prints_kafkas_offsets_table(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.reply("GET", "/v1/groups/g", (200, GROUP))
    assert run(["groups", "describe", "g"], api) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ],
        ["g", "orders", "0", "5", "12", "7", "rdkafka-1", "/127.0.0.1", "app"],
        ["g", "orders", "1", "-", "3", "-", "rdkafka-1", "/127.0.0.1", "app"],
        ["g", "old", "0", "9", "9", "0", "-", "-", "-"],
        ["g", "-", "-", "-", "-", "-", "rdkafka-2", "/127.0.0.1", "app2"],
    ]


def test_offsets_table_columns_line_up() -> None:
    lines = offsets_text(GROUP).splitlines()
    lag_column = lines[0].index("LAG")
    assert lines[1][lag_column] == "7" and lines[2][lag_column] == "-"


def test_describe_notes_an_empty_or_rebalancing_group(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = {**GROUP, "state": "Empty", "members": [], "partitions": GROUP["partitions"][2:]}
    api.reply("GET", "/v1/groups/e", (200, {**empty, "group_id": "e"}))
    assert run(["groups", "describe", "e"], api) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Consumer group 'e' has no active members."
    assert out[2].split() == ["e", "old", "0", "9", "9", "0", "-", "-", "-"]
    api.reply(
        "GET", "/v1/groups/r", (200, {**GROUP, "group_id": "r", "state": "PreparingRebalance"})
    )
    assert run(["groups", "describe", "--group", "r"], api) == 0
    assert capsys.readouterr().out.startswith("Warning: Consumer group 'r' is rebalancing.\n")


def test_describe_members_and_state(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.reply("GET", "/v1/groups/g", (200, GROUP))
    assert run(["groups", "describe", "g", "--members"], api) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        [
            "GROUP",
            "CONSUMER-ID",
            "GROUP-INSTANCE-ID",
            "HOST",
            "CLIENT-ID",
            "#PARTITIONS",
            "ASSIGNMENT",
        ],
        ["g", "rdkafka-1", "-", "/127.0.0.1", "app", "2", "orders(0,1)"],
        ["g", "rdkafka-2", "-", "/127.0.0.1", "app2", "0", "-"],
    ]
    assert run(["groups", "describe", "g", "--state"], api) == 0
    state = capsys.readouterr().out.splitlines()
    assert state[0].split() == [
        "GROUP",
        "COORDINATOR",
        "(ID)",
        "ASSIGNMENT-STRATEGY",
        "STATE",
        "#MEMBERS",
    ]
    assert state[1].split() == ["g", "127.0.0.1:9093", "(2)", "range", "Stable", "2"]


def test_describe_a_consumer_group_shows_epochs_and_targets(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    """A KIP-848 group: --members adds each member's epoch and target assignment, --state the
    group and assignment epochs (Kafka's --verbose columns)."""
    member = {
        **MEMBER,
        "member_epoch": 7,
        "target_assignment": [{"topic": "orders", "partitions": [0, 1, 2]}],
    }
    waiting = {**IDLE_MEMBER, "member_epoch": 6, "target_assignment": None}
    consumer = {
        **GROUP,
        "group_type": "consumer",
        "state": "Reconciling",
        "protocol": "uniform",
        "group_epoch": 7,
        "assignment_epoch": 7,
        "members": [member, waiting],
    }
    api.reply("GET", "/v1/groups/k", (200, {**consumer, "group_id": "k"}))
    assert run(["groups", "describe", "k", "--members"], api) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines[0][-3:] == ["ASSIGNMENT", "MEMBER-EPOCH", "TARGET-ASSIGNMENT"]
    assert lines[1][-3:] == ["orders(0,1)", "7", "orders(0,1,2)"]
    assert lines[2][-3:] == ["-", "6", "-"]
    assert run(["groups", "describe", "k", "--state"], api) == 0
    state = capsys.readouterr().out.splitlines()
    assert state[0].split()[-2:] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
    assert state[1].split() == [
        "k",
        "127.0.0.1:9093",
        "(2)",
        "uniform",
        "Reconciling",
        "2",
        "7",
        "7",
    ]


def test_describe_json_is_the_api_answer(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.reply("GET", "/v1/groups/a%2Fb", (200, GROUP))
    assert run(["groups", "describe", "a/b", "--json"], api) == 0
    assert json.loads(capsys.readouterr().out) == GROUP
    assert api.requests[0][1] == "/v1/groups/a%2Fb"


def test_the_group_is_needed_once(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["groups", "describe"], api) == 1
    assert (
        capsys.readouterr().err
        == "kraft: INVALID_ARGUMENTS: no group given: kraft groups describe GROUP\n"
    )
    assert run(["groups", "delete", "a", "--group", "b"], api) == 1
    assert "give the group once" in capsys.readouterr().err
    assert api.requests == []


def test_list(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    groups = [
        {"group_id": "g", "state": "Stable", "protocol_type": "consumer", "coordinator": 2},
        {"group_id": "h", "state": "Empty", "protocol_type": "consumer", "coordinator": 3},
        {
            "group_id": "k",
            "state": "Reconciling",
            "protocol_type": "consumer",
            "coordinator": 4,
            "group_type": "consumer",
        },
    ]
    api.reply("GET", "/v1/groups", (200, groups))
    assert run(["groups", "list"], api) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE", "COORDINATOR"],
        ["g", "classic", "Stable", "consumer", "2"],
        ["h", "classic", "Empty", "consumer", "3"],
        ["k", "consumer", "Reconciling", "consumer", "4"],
    ]


def test_delete(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.reply("DELETE", "/v1/groups/g", (204, None))
    assert run(["groups", "delete", "g"], api) == 0
    assert (
        capsys.readouterr().out == "Deletion of requested consumer groups ('g') was successful.\n"
    )
    error = {"error": "NON_EMPTY_GROUP", "message": "consumer group 'busy' has active members"}
    api.reply("DELETE", "/v1/groups/busy", (409, error))
    assert run(["groups", "delete", "busy"], api) == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"kraft: NON_EMPTY_GROUP: {error['message']}\n")


RESET = {
    "group_id": "g",
    "executed": False,
    "partitions": [
        {"topic": "orders", "partition": 0, "previous_offset": 5, "new_offset": 0},
        {"topic": "orders", "partition": 1, "previous_offset": None, "new_offset": 0},
    ],
}


def test_reset_offsets_is_a_dry_run_by_default(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.reply("POST", "/v1/groups/g/offsets", (200, RESET))
    assert run(["groups", "reset-offsets", "g", "--topic", "orders", "--to-earliest"], api) == 0
    assert api.requests == [
        ("POST", "/v1/groups/g/offsets", {"to": "earliest", "execute": False, "topics": ["orders"]})
    ]
    captured = capsys.readouterr()
    assert [line.split() for line in captured.out.splitlines()] == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        ["g", "orders", "0", "0"],
        ["g", "orders", "1", "0"],
    ]
    assert "Dry run" in captured.err and "--execute" in captured.err


@pytest.mark.parametrize(
    ("argv", "body"),
    [
        (
            ["--all-topics", "--to-latest", "--execute"],
            {"to": "latest", "execute": True, "all_topics": True},
        ),
        (
            ["--topic", "t", "--to-offset", "3", "--dry-run"],
            {"to": {"offset": 3}, "execute": False, "topics": ["t"]},
        ),
        (
            ["--topic", "t", "--to-datetime", "1970-01-01T00:00:05Z", "--execute"],
            {"to": {"timestamp": 5000}, "execute": True, "topics": ["t"]},
        ),
    ],
)
def test_reset_offsets_requests(
    argv: list[str], body: dict[str, Any], api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.reply("POST", "/v1/groups/g/offsets", (200, {**RESET, "executed": body["execute"]}))
    assert run(["groups", "reset-offsets", "--group", "g", *argv], api) == 0
    assert api.requests == [("POST", "/v1/groups/g/offsets", body)]
    assert ("Dry run" in capsys.readouterr().err) is not body["execute"]


def test_reset_offsets_of_an_active_group_fails(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    error = {"error": "NON_EMPTY_GROUP", "message": "offsets can only be reset while ... inactive"}
    api.reply("POST", "/v1/groups/g/offsets", (409, error))
    assert (
        run(["groups", "reset-offsets", "g", "--all-topics", "--to-earliest", "--json"], api) == 1
    )
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(
        "kraft: NON_EMPTY_GROUP: offsets can only"
    )
