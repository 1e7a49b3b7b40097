"""Real kraft clusters for tests: ``with kraft.testing.cluster(brokers=3) as c: ...`` for any
code, and the pytest fixtures ``kraft_cluster`` / ``kraft_cluster_factory`` (the ``pytest11``
plugin :mod:`kraft.testing.plugin`).  Nothing here imports pytest but the plugin.

The names below are imported on first use: pytest loads the plugin, and so this package, in
every run of every project that has kraft-platform installed, whether it uses a cluster or not.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kraft.testing.local_cluster import KraftCluster, cluster, start_cluster
    from kraft.testing.nodes import ClusterStartError
    from kraft.testing.rest import Record
    from kraft.testing.spec import ClusterSpec, SpecError

_HOMES = {
    "ClusterSpec": "kraft.testing.spec",
    "ClusterStartError": "kraft.testing.nodes",
    "KraftCluster": "kraft.testing.local_cluster",
    "Record": "kraft.testing.rest",
    "SpecError": "kraft.testing.spec",
    "cluster": "kraft.testing.local_cluster",
    "start_cluster": "kraft.testing.local_cluster",
}

__all__ = [
    "ClusterSpec",
    "ClusterStartError",
    "KraftCluster",
    "Record",
    "SpecError",
    "cluster",
    "start_cluster",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'kraft.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
