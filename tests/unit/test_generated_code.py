"""The checked-in codecs are exactly what the generator makes from the vendored specs, and the
protocol package stays pure (no sockets, files, asyncio or upper layers)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PURE_FORBIDDEN = {"asyncio", "socket", "selectors", "threading", "broker", "kraft", "spark_source"}


def test_generated_code_is_fresh() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protocol.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_protocol_package_is_sans_io() -> None:
    offenders = []
    for path in (ROOT / "kafka_protocol").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in PURE_FORBIDDEN
            ]
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "open":
                offenders.append(f"{path.relative_to(ROOT)}: open()")
    assert offenders == []
