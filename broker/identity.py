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
    # The advertised (host, port) of each named listener (None: only ``advertised``, named
    # ``default_listener``); a request is answered with the addresses of the listener it came
    # in on, as Kafka does.
    listener_address: Callable[[str], tuple[str, int] | None] | None = None
    default_listener: str = "PLAINTEXT"

    def listener_for(self, session_listener: str) -> str:
        """The listener whose addresses a request that came in on ``session_listener`` gets:
        that one, or the default one for a request that came from no listener of this broker
        (the node's own internal requests)."""
        if self.listener_address is not None and self.listener_address(session_listener):
            return session_listener
        return self.default_listener

    def address_on(self, listener: str) -> tuple[str, int]:
        """This broker's advertised address on ``listener`` (see :meth:`listener_for`)."""
        if (
            self.listener_address is not None
            and (found := self.listener_address(listener)) is not None
        ):
            return found
        return self.advertised()
