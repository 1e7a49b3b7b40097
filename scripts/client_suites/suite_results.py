"""What one selection of a client's own tests gave: :class:`SuiteResult` (passed, failed,
skipped with the reason, left out with the reason), read from a pytest junit report, and the
report ``run_client_suites.py`` prints."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class SuiteResult:
    suite: str
    selection: str
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (test, reason)
    excluded: list[tuple[str, str]] = field(default_factory=list)  # deselected (test, reason)
    note: str = ""

    def line(self) -> str:
        return (
            f"{self.suite}: {len(self.passed)} passed, {len(self.failed)} failed, "
            f"{len(self.skipped)} skipped"
        )


def junit_results(path: Path, result: SuiteResult) -> SuiteResult:
    if not path.exists():
        result.note = "no junit report: the run did not start (see its output)"
        return result
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            result.failed.append(name)
        elif skipped is not None:
            result.skipped.append((name, skipped.get("message", "")))
        else:
            result.passed.append(name)
    return result


def print_report(results: list[SuiteResult]) -> None:
    print("\n=== the clients' own tests against our broker ===")
    for r in results:
        print(f"\n{r.line()}\n  selection: {r.selection}")
        if r.note:
            print(f"  note: {r.note}")
        for name in r.failed:
            print(f"  FAILED  {name}")
        for name, reason in r.skipped:
            print(f"  skipped {name}: {reason}")
        for name, reason in r.excluded:
            print(f"  excluded {name}: {reason}")
    passed = sum(len(r.passed) for r in results)
    failed = sum(len(r.failed) for r in results)
    skipped = sum(len(r.skipped) for r in results)
    print(f"\n{passed} passed, {failed} failed, {skipped} skipped")
