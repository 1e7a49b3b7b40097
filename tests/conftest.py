"""Shared test configuration: hypothesis profiles (``HYPOTHESIS_PROFILE=ci`` runs more examples),
and crash-stops observed instead of exiting (``crash_stops``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from crash_stops import CrashStops
from hypothesis import HealthCheck, settings

from broker.fatal import stop_handler

# kraft.testing's fixtures (also loaded by its pytest11 entry point once the package is installed)
pytest_plugins = ("kraft.testing.plugin",)

settings.register_profile(
    "dev", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# Spark's driver and workers bind to loopback, as every other test peer does: Spark otherwise
# resolves the machine's host name, which a minimal machine or container may not resolve.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


# In-process, a broken invariant must not end the test run: it raises instead. Installed for
# the whole session (threads of module-scoped fixtures run between tests too); each test gets
# its own record.
_outside_tests = CrashStops()
_current = [_outside_tests]
_session_handler = stop_handler(lambda violation: _current[0].record(violation))


def pytest_configure(config: pytest.Config) -> None:
    _session_handler.__enter__()


# What pytest-xdist workers (.ci/run runs two) hand to the controller, which alone reports and
# decides the run's exit status: crash-stops outside any test, and docker build times.
_from_workers: dict[str, list[Any]] = {"crash_stops_outside_tests": [], "container_build_s": []}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    unclaimed = [v.line() for v in _outside_tests.take()]
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: its exit status is not the run's
        workeroutput["crash_stops_outside_tests"] = unclaimed
        return
    unclaimed += _from_workers["crash_stops_outside_tests"]
    if unclaimed:
        print(f"\ncrash-stop(s) outside any test: {unclaimed}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's, on the controller
def pytest_testnodedown(node: Any, error: object) -> None:
    output = getattr(node, "workeroutput", {})
    for key, values in _from_workers.items():
        values.extend(output.get(key, ()))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for seconds in _from_workers["container_build_s"]:  # tests/container/conftest.py's, by xdist
        terminalreporter.write_line(f"container tests: docker build took {seconds:.0f} s")


@pytest.fixture(autouse=True)
def crash_stops() -> Iterator[CrashStops]:
    """This test's crash-stops. One the test did not :meth:`~CrashStops.take` fails it at
    teardown, also one raised on a thread that swallowed it (pysyncobj's tick loop logs and
    retries)."""
    stops = CrashStops()
    _current[0] = stops
    try:
        yield stops
    finally:
        _current[0] = _outside_tests
    unclaimed = stops.take()
    if unclaimed:
        pytest.fail(f"crash-stop(s) not expected by the test: {[v.line() for v in unclaimed]}")
