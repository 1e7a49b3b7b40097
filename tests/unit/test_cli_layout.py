"""The ``kraft`` command line's layout: one module per command family, no import cycle among
them (function-level and TYPE_CHECKING imports included), and the leader-election request
named by one command module only."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import grimp

import kraft.cli

CLI_DIR = Path(kraft.cli.__file__).parent


def test_no_import_cycle_between_cli_modules() -> None:
    graph = grimp.build_graph("kraft", include_external_packages=False)
    modules = sorted(m for m in graph.modules if m.startswith("kraft.cli."))
    assert "kraft.cli.consume_group" in modules and "kraft.cli.records" in modules
    cycles = [
        (a, b)
        for a, b in itertools.combinations(modules, 2)
        if graph.chain_exists(a, b, as_packages=False) and graph.chain_exists(b, a)
    ]
    assert cycles == []


def test_only_the_elect_module_names_the_election_request() -> None:
    pattern = re.compile(r"ElectLeaders|elect_leaders")
    naming = sorted(p.name for p in CLI_DIR.glob("*.py") if pattern.search(p.read_text()))
    assert naming == ["elect.py"]
