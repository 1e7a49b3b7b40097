"""pytest plugin (``-p functional_only``) keeping only aiokafka's functional tests: those
that use the ``kafka_server`` fixture (a broker), which its own suite skips without
``--docker-image``; the unit tests are deselected (reported as deselected by pytest)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, dropped = [], []
    for item in items:
        (kept if "kafka_server" in getattr(item, "fixturenames", ()) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
