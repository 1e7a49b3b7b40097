"""Who this broker is to its clients, and where its handlers read the cluster's metadata.

Handlers and the group coordinator take these small values instead of the whole
:class:`broker.broker.Broker`, so that the broker assembles them and nothing below it imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from metadata_log.image import ClusterImage

# The broker's current metadata image: it changes with every delta, so it is read on each use.
ImageSource = Callable[[], ClusterImage]


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """This broker as Metadata and DescribeCluster list it."""

    node_id: int
    cluster_id: str
    rack: str | None
    # (host, port) as advertised: the port may be the listener's, known only once it is bound
    advertised: Callable[[], tuple[str, int]]
