"""Real kraft clusters for tests: ``with kraft.testing.cluster(brokers=3) as c: ...`` for any
code, and the pytest fixtures ``kraft_cluster`` / ``kraft_cluster_factory`` (the ``pytest11``
plugin :mod:`kraft.testing.plugin`).  Nothing here imports pytest but the plugin."""

from kraft.testing.cluster import KraftCluster, cluster, start_cluster
from kraft.testing.nodes import ClusterStartError
from kraft.testing.rest import Record
from kraft.testing.spec import ClusterSpec, SpecError

__all__ = [
    "ClusterSpec",
    "ClusterStartError",
    "KraftCluster",
    "Record",
    "SpecError",
    "cluster",
    "start_cluster",
]
