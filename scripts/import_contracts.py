"""An import-linter contract that the product has no import cycles (``lint-imports``).

import-linter's own contracts check layers and forbidden imports between named modules; none
checks a whole graph for cycles (``acyclic_siblings`` looks only at siblings' packages).  This
one finds the strongly connected components (Tarjan) of the import graph over every module of
the contract's ``packages`` and fails listing each cycle found.  grimp's graph counts every
import: at module level, under ``if TYPE_CHECKING:`` and inside functions, so a cycle hidden in
a type annotation or a deferred import is still a cycle here (a test shows it).

Used from pyproject.toml::

    [tool.importlinter]
    contract_types = ["acyclic: scripts.import_contracts.AcyclicContract"]

    [[tool.importlinter.contracts]]
    type = "acyclic"
    packages = ["broker", "kraft"]
    ignore_cycles = []   # e.g. ["a.x, a.y"]: a known cycle, with its modules in sorted order

This module is tooling: it is not part of the shipped packages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck

Cycle = tuple[str, ...]  # the modules of one strongly connected component, sorted


def strongly_connected(
    modules: Iterable[str], imported_by: Callable[[str], Iterable[str]]
) -> list[Cycle]:
    """Every strongly connected component of more than one module (or of one module importing
    itself), each sorted, in sorted order.  Tarjan's algorithm, iterative: the graph has
    thousands of modules and Python's recursion limit is a thousand frames."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[Cycle] = []
    work: list[tuple[str, list[str]]] = []  # the depth-first path: (module, imports to visit)

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        work.append((module, sorted(imported_by(module))))

    for root in sorted(modules):
        if root in index:
            continue
        visit(root)
        while work:
            module, pending = work[-1]
            if pending:
                target = pending.pop()
                if target not in index:
                    visit(target)
                elif target in on_stack:
                    low[module] = min(low[module], index[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1 or module in imported_by(module):
                    found.append(tuple(sorted(component)))
    return sorted(found)


class AcyclicContract(Contract):
    """No module of ``packages`` reaches itself through imports (ignoring ``ignore_cycles``)."""

    type_name = "acyclic"

    packages = fields.ListField(subfield=fields.StringField())
    ignore_cycles = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        roots: list[str] = list(self.packages)  # type: ignore[call-overload]  # a parsed field
        inside = {m for m in graph.modules if any(m == r or m.startswith(r + ".") for r in roots)}

        def imported_by(module: str) -> set[str]:
            return graph.find_modules_directly_imported_by(module) & inside

        entries: list[str] = self.ignore_cycles or []  # type: ignore[assignment]  # parsed
        ignored = {tuple(sorted(name.strip() for name in entry.split(","))) for entry in entries}
        cycles = [c for c in strongly_connected(inside, imported_by) if c not in ignored]
        edges = {c: _edges(c, imported_by) for c in cycles}
        return ContractCheck(kept=not cycles, metadata={"cycles": cycles, "edges": edges})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error(f"A cycle of {len(cycle)} modules:", bold=True)
            output.new_line()
            for importer, imported in check.metadata["edges"][cycle]:
                output.indent_cursor()
                output.print_error(f"{importer} -> {imported}", bold=False)
            output.new_line()


def _edges(cycle: Cycle, imported_by: Callable[[str], Iterable[str]]) -> list[tuple[str, str]]:
    """The imports that hold one cycle together (between its modules)."""
    members = set(cycle)
    return [(m, t) for m in cycle for t in sorted(imported_by(m)) if t in members]
