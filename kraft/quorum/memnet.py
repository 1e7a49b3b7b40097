"""An in-memory network for deterministic simulation of the quorum (pure, no sockets).

Theory of operation
-------------------
:class:`MemoryNetwork` stands in for pysyncobj's TCP transport. Every ``send`` is copied
(pickled and unpickled, like the wire would) into one list of :class:`InFlight` messages,
and nothing is delivered until the test says so: ``deliver``, ``drop``, ``duplicate``, or a
seeded ``rng`` choosing among them. Nothing here reads a clock or spawns a thread, so one
seed and one sequence of calls reproduce one run exactly.

:class:`MemoryTransport` implements the duck-typed surface pysyncobj's ``SyncObj`` calls on
a transport (callbacks, ``ready``, ``send``, ``addNode``, ``dropNode``, ``destroy``). It does
not import pysyncobj: node objects are whatever ``SyncObj`` hands it, matched by ``.id``.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

MAX_IN_FLIGHT: Final = 100_000  # a runaway simulation fails loudly instead of eating memory

MessageCallback = Callable[[Any, Any], None]
NodeCallback = Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class InFlight:
    seq: int
    src: str
    dst: str
    wire: bytes  # the pickled pysyncobj message, as it would cross a socket

    @property
    def message(self) -> Any:
        return pickle.loads(self.wire)

    @property
    def type(self) -> str:
        return str(self.message.get("type"))


class MemoryNetwork:
    def __init__(self) -> None:
        self._transports: dict[str, MemoryTransport] = {}
        self.in_flight: list[InFlight] = []
        self.down: set[str] = set()  # crashed or isolated nodes: their traffic is dropped
        self._seq = 0
        self.delivered_count = 0

    def transport_factory(self, sync_obj: Any, self_node: Any, other_nodes: Any) -> MemoryTransport:
        """The ``transportClass`` signature pysyncobj expects."""
        del sync_obj
        transport = MemoryTransport(self, self_node, other_nodes)
        previous = self._transports.get(transport.node_id)
        assert previous is None or previous.destroyed, f"{transport.node_id} runs twice"
        self._transports[transport.node_id] = transport  # a restarted node replaces its old self
        return transport

    def connect_all(self) -> None:
        for transport in self._transports.values():
            transport.connect_peers()

    def _enqueue(self, src: str, dst: str, message: Any) -> bool:
        if src in self.down or dst in self.down or dst not in self._transports:
            return False
        assert len(self.in_flight) < MAX_IN_FLIGHT, "simulation is not draining its network"
        self._seq += 1
        self.in_flight.append(InFlight(self._seq, src, dst, pickle.dumps(message)))
        return True

    def pending(
        self, *, src: str | None = None, dst: str | None = None, type: str | None = None
    ) -> list[InFlight]:
        return [
            m
            for m in self.in_flight
            if (src is None or m.src == src)
            and (dst is None or m.dst == dst)
            and (type is None or m.type == type)
        ]

    def deliver(self, item: InFlight) -> None:
        """Remove ``item`` from the network and hand it to its destination."""
        self.in_flight.remove(item)
        if item.src in self.down or item.dst in self.down:
            return
        self.delivered_count += 1
        self._transports[item.dst].receive(item.src, item.message)

    def drop(self, item: InFlight) -> None:
        self.in_flight.remove(item)

    def inject(self, item: InFlight) -> None:
        """Put a previously dropped (held back) message into the network again."""
        self.in_flight.append(item)

    def duplicate(self, item: InFlight) -> InFlight:
        """Put a copy of ``item`` back into the network (a retransmission, or a replay)."""
        self._seq += 1
        copy = InFlight(self._seq, item.src, item.dst, item.wire)
        self.in_flight.append(copy)
        return copy

    def deliver_all(self, predicate: Callable[[InFlight], bool] = lambda m: True) -> int:
        """Deliver matching messages in send order until none match; returns how many."""
        count = 0
        while True:
            batch = [m for m in self.in_flight if predicate(m)]
            if not batch:
                return count
            for item in batch:
                self.deliver(item)
                count += 1


class MemoryTransport:
    """The transport surface ``SyncObj`` uses, backed by a :class:`MemoryNetwork`."""

    def __init__(self, network: MemoryNetwork, self_node: Any, other_nodes: Any) -> None:
        self._network = network
        self.node_id = str(self_node.id)
        self._peers: dict[str, Any] = {str(node.id): node for node in other_nodes}
        self._on_message: MessageCallback | None = None
        self.destroyed = False
        self._on_connected: NodeCallback | None = None
        self._on_disconnected: NodeCallback | None = None

    # pysyncobj's callback setters (names are pysyncobj's).
    def setOnMessageReceivedCallback(self, callback: MessageCallback | None) -> None:
        self._on_message = callback

    def setOnNodeConnectedCallback(self, callback: NodeCallback | None) -> None:
        self._on_connected = callback

    def setOnNodeDisconnectedCallback(self, callback: NodeCallback | None) -> None:
        self._on_disconnected = callback

    def setOnReadonlyNodeConnectedCallback(self, callback: object) -> None:
        pass  # the simulation has no read-only nodes

    def setOnReadonlyNodeDisconnectedCallback(self, callback: object) -> None:
        pass

    def setOnUtilityMessageCallback(self, message: str, callback: object) -> None:
        pass  # no admin port in memory: nothing can ask for add/remove/transfer

    @property
    def ready(self) -> bool:
        return True

    def tryGetReady(self) -> None:
        pass

    def waitReady(self) -> None:
        pass

    def addNode(self, node: Any) -> None:
        self._peers[str(node.id)] = node

    def dropNode(self, node: Any) -> None:
        self._peers.pop(str(node.id), None)

    def send(self, node: Any, message: Any) -> bool:
        return self._network._enqueue(self.node_id, str(node.id), message)

    def destroy(self) -> None:
        self._on_message = None
        self.destroyed = True

    def connect_peers(self) -> None:
        if self._on_connected is not None:
            for node in self._peers.values():
                self._on_connected(node)

    def receive(self, src: str, message: Any) -> None:
        node = self._peers.get(src)
        if node is not None and self._on_message is not None:
            self._on_message(node, message)
