"""Container tests (marker ``container``): the image and docker-compose.yml on a real Docker
engine.  Without an engine they skip, saying why, unless ``KRAFT_REQUIRE_CONTAINER_TESTS=1``
(``.ci/run`` sets it after preparing an engine), where they fail: CI cannot pass them by
accident.  Run them alone with ``scripts/test -m container``."""

from __future__ import annotations

import os

import pytest

from container.engine import IMAGE, REQUIRED_ENV, build_image, engine_problem

_built_in_s: list[float] = []


@pytest.fixture(scope="session")
def image() -> str:
    """``kraft-platform:local``, built from this checkout once per session."""
    problem = engine_problem()
    if problem is not None:
        if os.environ.get(REQUIRED_ENV) == "1":
            pytest.fail(f"{REQUIRED_ENV}=1 but {problem}")
        pytest.skip(problem)
    _built_in_s.append(build_image())
    return IMAGE


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: tests/conftest.py's controller reports it
        workeroutput["container_build_s"] = list(_built_in_s)
        _built_in_s.clear()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for seconds in _built_in_s:  # what CI spends before the first container starts
        terminalreporter.write_line(f"container tests: docker build {IMAGE} took {seconds:.0f} s")
