"""``kraft reassign``'s argument checks, which answer before any broker is contacted (the
commands against a cluster are in tests/integration/test_reassignment.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft.cli.main import main

UNREACHABLE = ["--bootstrap-server", "127.0.0.1:1"]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--generate", "--topics", "t"], "INVALID_ARGUMENTS: --generate needs --broker-list"),
        (["--generate", "--broker-list", "1,2"], "INVALID_ARGUMENTS: --generate needs"),
        (["--execute"], "INVALID_ARGUMENTS: give the plan"),
        (["--verify", "--plan", "/nonexistent/plan.json"], "INVALID_ARGUMENTS: /nonexistent"),
    ],
)
def test_bad_arguments_fail_before_connecting(
    args: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["reassign", *UNREACHABLE, *args]) == 1
    assert f"kraft: {error}" in capsys.readouterr().err


def test_a_bad_plan_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(
        '{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": []}]}'
    )
    assert main(["reassign", *UNREACHABLE, "--cancel", "--plan", str(plan)]) == 1
    assert "kraft: INVALID_PLAN: partitions[0].replicas" in capsys.readouterr().err


def test_unreachable_broker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reassign", *UNREACHABLE, "--list"]) == 1
    assert "kraft: BROKER_UNREACHABLE" in capsys.readouterr().err


def test_broker_list_must_be_ids(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["reassign", "--generate", "--topics", "t", "--broker-list", "a,b"])
    assert "expected broker ids" in capsys.readouterr().err
