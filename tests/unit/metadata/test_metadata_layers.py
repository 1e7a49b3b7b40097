"""Imports flow one way: kafka_protocol <- metadata_log <- kraft.controller, and the Spark
source needs nothing but the protocol package on executors (STYLE.md 10)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROJECT = {"kafka_protocol", "metadata_log", "kraft", "broker", "spark_source"}
ALLOWED = {
    "metadata_log": {"kafka_protocol", "metadata_log"},
    "kraft/controller": {"kafka_protocol", "metadata_log", "kraft.controller"},
    "spark_source": {"kafka_protocol", "spark_source"},
}
IO_MODULES = {"os", "socket", "asyncio", "threading", "subprocess", "time"}
PURE = ["records.py", "image.py", "delta.py", "configs.py", "exceptions.py"]


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_layers(package: str) -> None:
    for path in sorted((ROOT / package).glob("*.py")):
        for name in imports(path):
            if name.split(".")[0] in PROJECT:
                allowed = ALLOWED[package]
                assert any(name == a or name.startswith(a + ".") for a in allowed), (
                    path.name,
                    name,
                )


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_do_no_io(module: str) -> None:
    assert not imports(ROOT / "metadata_log" / module) & IO_MODULES


def test_controller_state_machine_does_no_io() -> None:
    for path in sorted((ROOT / "kraft" / "controller").glob("*.py")):
        if path.name != "__init__.py":
            assert not imports(path) & IO_MODULES, path.name


@pytest.mark.parametrize("module", ["options.py", "planning.py"])
def test_spark_planning_is_pure(module: str) -> None:
    assert not imports(ROOT / "spark_source" / module) & IO_MODULES
