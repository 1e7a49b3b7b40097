"""The suite's own safety net under pytest-xdist (``.ci/run`` runs two workers): a crash-stop
that no test claims, raised outside any test on a worker, still fails the run and is reported
by the controller, as it is without xdist.  The suite's ``tests/conftest.py`` and
``crash_stops.py`` run a small suite of their own in a pytest subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parents[1]

BROKEN_TEARDOWN = """
import pytest

from broker.fatal import fatal


@pytest.fixture(scope="module")
def breaks_on_teardown():
    yield
    try:
        fatal("suite.teardown", "a broken invariant after the module's tests")
    except AssertionError:
        pass  # swallowed, as a background thread's loop would


def test_uses_it(breaks_on_teardown):
    pass
"""

FINE = """
def test_fine():
    pass
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(TESTS / "conftest.py", suite / "conftest.py")
    shutil.copy(TESTS / "crash_stops.py", suite / "crash_stops.py")
    (suite / "test_broken_teardown.py").write_text(BROKEN_TEARDOWN)
    (suite / "test_fine.py").write_text(FINE)
    env = {**os.environ, "PYTHONPATH": str(suite)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, str(suite)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("workers", ["0", "2"], ids=["one-process", "two-workers"])
def test_a_crash_stop_outside_any_test_fails_the_run(tmp_path: Path, workers: str) -> None:
    done = _run(tmp_path, "-n", workers, "--dist", "loadfile")
    assert "2 passed" in done.stdout, done.stdout + done.stderr
    assert "crash-stop(s) outside any test" in done.stdout, done.stdout
    assert "suite.teardown" in done.stdout
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout + done.stderr


def test_a_clean_run_under_xdist_passes(tmp_path: Path) -> None:
    done = _run(tmp_path, "-n", "2", "-k", "fine")
    assert "1 passed" in done.stdout, done.stdout + done.stderr
    assert "crash-stop" not in done.stdout, done.stdout
    assert done.returncode == 0
