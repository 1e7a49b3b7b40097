"""A node that cannot start says why in one line and exits non-zero (no traceback)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def run_dev(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "kraft.cli", "dev", "--data-dir", str(tmp_path), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("log.dirs=", "log.dirs"),
        ("log.segment.bytes=abc", "segment.bytes"),
        ("log.retention.check.interval.ms=0", "log.retention.check.interval.ms"),
        ("socket.request.max.bytes=-5", "socket.request.max.bytes"),
        ("num.partitions=many", "num.partitions"),
    ],
)
def test_bad_configuration(tmp_path: Path, override: str, needle: str) -> None:
    result = run_dev(tmp_path, "--port", "0", "--admin-port", "0", "--override", override)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and needle in result.stderr, result.stderr
    assert "READY" not in result.stdout


def test_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_dev(tmp_path, "--port", str(port), "--admin-port", "0")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "cannot start" in result.stderr, result.stderr
