"""The pytest plugin of :mod:`kraft.testing` (entry point ``pytest11``: on with the package).

Fixtures
--------
``kraft_cluster``
    A running :class:`~kraft.testing.KraftCluster`, shared by the whole session by default
    (``--kraft-cluster-scope=module|package|function`` or the ini key ``kraft_cluster_scope``
    to change that).  One combined node unless a test asks for another shape through indirect
    parametrisation, with a :class:`~kraft.testing.ClusterSpec` or a dict of its fields::

        @pytest.mark.parametrize("kraft_cluster", [{"brokers": 3, "partitions": 3}],
                                 indirect=True)
        def test_replicated(kraft_cluster): ...

    Tests asking for the same spec share one cluster at the chosen scope.
``kraft_cluster_factory``
    ``kraft_cluster_factory(brokers=3, secure=True)`` starts a cluster for this test (as many
    as it likes), all closed when the test ends.

Clusters keep their data under pytest's ``tmp_path_factory`` (per xdist worker), their node
logs included, and take their ports from :mod:`kraft.testing.ports` (never the same port in two
test processes).  A failing test's report shows the last log lines of every node.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the rest is imported when a fixture runs: every pytest run loads this
    from kraft.testing.local_cluster import KraftCluster
    from kraft.testing.spec import ClusterSpec

SCOPES = ("session", "package", "module", "class", "function")
SCOPE_OPTION = "--kraft-cluster-scope"
SCOPE_INI = "kraft_cluster_scope"
CLUSTERS = pytest.StashKey["list[KraftCluster]"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kraft", "kraft.testing: a real kraft cluster for tests")
    group.addoption(
        SCOPE_OPTION,
        choices=SCOPES,
        default=None,
        help=f"how long one kraft_cluster lives (default: the ini key {SCOPE_INI}, else session)",
    )
    parser.addini(SCOPE_INI, "how long one kraft_cluster lives (session, module, function...)")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[CLUSTERS] = []


def cluster_scope(fixture_name: str, config: pytest.Config) -> Any:
    """The dynamic scope of ``kraft_cluster``: the option, else the ini key, else session."""
    scope = config.getoption(SCOPE_OPTION) or config.getini(SCOPE_INI) or "session"
    if scope not in SCOPES:
        raise pytest.UsageError(f"{SCOPE_INI} = {scope!r}: use one of {', '.join(SCOPES)}")
    return scope


def _start(request: pytest.FixtureRequest, spec: ClusterSpec) -> KraftCluster:
    from kraft.testing.local_cluster import start_cluster

    factory = request.getfixturevalue("tmp_path_factory")
    running = start_cluster(spec, factory.mktemp(f"kraft-{spec.id}", numbered=True))
    request.config.stash[CLUSTERS].append(running)
    return running


def _close(request: pytest.FixtureRequest, running: KraftCluster) -> None:
    running.close()
    clusters = request.config.stash[CLUSTERS]
    if running in clusters:
        clusters.remove(running)


@pytest.fixture(scope=cluster_scope)
def kraft_cluster(request: pytest.FixtureRequest) -> Iterator[KraftCluster]:
    """A running kraft cluster (see the module's documentation)."""
    from kraft.testing.spec import ClusterSpec

    running = _start(request, ClusterSpec.of(getattr(request, "param", None)))
    try:
        yield running
    finally:
        _close(request, running)


@pytest.fixture
def kraft_cluster_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., KraftCluster]]:
    """Start clusters for this test: ``kraft_cluster_factory(brokers=3)``; closed at its end."""
    from kraft.testing.spec import ClusterSpec

    started: list[KraftCluster] = []

    def start(spec: ClusterSpec | None = None, **fields: Any) -> KraftCluster:
        running = _start(request, spec if spec is not None else ClusterSpec.of(fields))
        started.append(running)
        return running

    try:
        yield start
    finally:
        for running in reversed(started):
            _close(request, running)


def pytest_make_parametrize_id(config: pytest.Config, val: object, argname: str) -> str | None:
    """``test_x[1c3b-p3-secure]`` rather than ``test_x[kraft_cluster0]``."""
    if argname != "kraft_cluster":
        return None
    from kraft.testing.spec import ClusterSpec, SpecError

    try:
        return ClusterSpec.of(val).id
    except (SpecError, TypeError):
        return None  # pytest's own id; the fixture reports the bad spec


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        for running in item.config.stash.get(CLUSTERS, []):
            report.sections.append((f"kraft cluster {running.spec.id} logs", running.logs()))
    return report


def pytest_unconfigure(config: pytest.Config) -> None:
    """A last stop for clusters a fixture did not close (an interrupted teardown)."""
    for running in config.stash.get(CLUSTERS, []):
        running.close()
