"""The import contracts (pyproject.toml's [tool.importlinter], run by scripts/test as
``lint-imports``) and the no-cycle contract type they use (scripts/import_contracts.py).

They replace hand-written AST checks of the layers: what those checked is asserted here to
still be among the contracts, and the cycle finder is checked on graphs small enough to see.
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _contracts_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "import_contracts", ROOT / "scripts" / "import_contracts.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


contracts = _contracts_module()


def _pyproject_contracts() -> dict[str, dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def test_tarjan_reports_every_cycle_once_and_nothing_else() -> None:
    graph = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},  # a -> b -> c -> a, and a way out to d
        "d": set(),
        "e": {"a", "e"},  # imports the cycle, and itself
        "f": {"g"},
        "g": {"f"},
    }
    found = contracts.strongly_connected(graph, lambda m: graph[m])
    assert found == [("a", "b", "c"), ("e",), ("f", "g")]


def test_a_long_chain_does_not_hit_the_recursion_limit() -> None:
    n = sys.getrecursionlimit() * 2
    graph = {f"m{i}": {f"m{(i + 1) % n}"} for i in range(n)}
    (cycle,) = contracts.strongly_connected(graph, lambda m: graph[m])
    assert len(cycle) == n


def _package(root: Path, files: dict[str, str]) -> None:
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    for name, text in files.items():
        (root / "pkg" / f"{name}.py").write_text(text)


def _check(graph: grimp.ImportGraph, ignore: list[str] | None = None) -> Any:
    options: dict[str, Any] = {"packages": ["pkg"]}
    if ignore is not None:
        options["ignore_cycles"] = ignore
    contract = contracts.AcyclicContract("acyclic", {}, options)
    return contract.check(graph, verbose=False)


def test_cycles_through_type_checking_and_function_imports_are_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _package(
        tmp_path,
        {
            "a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import b\n",
            "b": "def later() -> None:\n    from pkg.c import X\n",
            "c": "import pkg.a\nX = 1\n",
            "d": "import pkg.a\n",  # imports the cycle, not part of it
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("pkg", cache_dir=None)
    assert graph.find_modules_directly_imported_by("pkg.a") == {"pkg.b"}  # TYPE_CHECKING
    assert graph.find_modules_directly_imported_by("pkg.b") == {"pkg.c"}  # in a function

    broken = _check(graph)
    assert not broken.kept
    assert broken.metadata["cycles"] == [("pkg.a", "pkg.b", "pkg.c")]
    assert broken.metadata["edges"][("pkg.a", "pkg.b", "pkg.c")] == [
        ("pkg.a", "pkg.b"),
        ("pkg.b", "pkg.c"),
        ("pkg.c", "pkg.a"),
    ]
    assert _check(graph, ignore=["pkg.c, pkg.a, pkg.b"]).kept


def test_the_contracts_keep_every_rule_of_the_layer_tests_they_replace() -> None:
    """The AST tests allowed metadata_log only kafka_protocol, kraft.controller only
    kafka_protocol and metadata_log, spark_source only kafka_protocol, and no I/O module
    (os, socket, asyncio, threading, subprocess, time) in the pure modules."""
    found = _pyproject_contracts()
    assert found["layers"]["type"] == "layers"
    assert found["layers"]["layers"] == ["kraft", "broker", "metadata_log", "kafka_protocol"]
    assert "metadata_log" in found["pure-packages"]["source_modules"]
    assert found["pure-packages"]["forbidden_modules"] == ["spark_source"]
    assert set(found["spark-source"]["forbidden_modules"]) == {"broker", "kraft", "metadata_log"}
    kraft_parts = {p.name for p in (ROOT / "kraft").iterdir() if p.is_dir() and p.name[0] != "_"}
    siblings = {f"kraft.{name}" for name in kraft_parts - {"controller"}}
    assert set(found["controller"]["forbidden_modules"]) >= {"broker", "spark_source", *siblings}
    pure = found["pure-modules"]
    assert set(pure["forbidden_modules"]) >= {
        "os",
        "socket",
        "asyncio",
        "threading",
        "subprocess",
        "time",
    }
    assert set(pure["source_modules"]) >= {
        "kafka_protocol.client",  # the sans-I/O client core (issue 15)
        "kraft.controller",
        *(f"metadata_log.{m}" for m in ("records", "image", "delta", "configs", "exceptions")),
        "spark_source.options",
        "spark_source.planning",
    }
    assert found["log-below-replication"]["forbidden_modules"] == ["broker.replication"]
    assert found["acyclic"]["ignore_cycles"] == []
    for contract in found.values():
        assert contract.get("allow_indirect_imports", False) is False
