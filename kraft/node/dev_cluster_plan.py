"""The plan of a ``kraft dev`` cluster (pure): node ids, roles, racks and ports.

Controllers get node ids 1..M, brokers M+1..M+N; brokers get racks ``rack-1..rack-3`` in turn.
With ``--port P`` (default 9092) and ``--admin-port A`` (default P - 1012, so 8080), counting
brokers ``i`` and controllers ``j`` from 0::

    node            Kafka listener              Raft (pysyncobj)   REST admin API
    broker i        PLAINTEXT   P + i           -                  A + i
    controller j    CONTROLLER  P + 100 + j     P + 200 + j        A + 100 + j

With the defaults and 3 + 3 nodes: brokers 9092-9094 (admin 8080-8082), controllers' CONTROLLER
listeners 9192-9194, Raft 9292-9294, admin 8180-8182. ``--port 0`` picks free ports for every
Kafka, CONTROLLER and Raft port, ``--admin-port 0`` for every admin port. Everything binds to
127.0.0.1.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from kraft.node.config import ConfigError

HOST = "127.0.0.1"
CONTROLLER_COUNTS = (1, 3, 5)
CONTROLLER_PORT_OFFSET = 100
RAFT_PORT_OFFSET = 200
MAX_BROKERS = CONTROLLER_PORT_OFFSET  # more would run into the controllers' ports
RACKS = ("rack-1", "rack-2", "rack-3")

Role = Literal["controller", "broker"]
FreePorts = Callable[[int], list[int]]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node of the local cluster; ``port`` is its PLAINTEXT or CONTROLLER listener."""

    node_id: int
    role: Role
    port: int
    admin_port: int
    raft_port: int | None = None
    rack: str | None = None

    @property
    def name(self) -> str:
        return f"node-{self.node_id}"

    @property
    def admin_url(self) -> str:
        return f"http://{HOST}:{self.admin_port}"


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    controllers: tuple[NodeSpec, ...]
    brokers: tuple[NodeSpec, ...]

    @property
    def nodes(self) -> tuple[NodeSpec, ...]:
        return self.controllers + self.brokers

    @property
    def quorum_voters(self) -> str:
        """``controller.quorum.voters``: every controller's Raft endpoint."""
        return ",".join(f"{c.node_id}@{HOST}:{c.raft_port}" for c in self.controllers)

    @property
    def quorum_bootstrap_servers(self) -> str:
        """``controller.quorum.bootstrap.servers``: the controllers' CONTROLLER listeners."""
        return ",".join(f"{HOST}:{c.port}" for c in self.controllers)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{b.port}" for b in self.brokers)


def default_admin_port(port: int, admin_port: int | None) -> int:
    """As for the single dev node: 9092 -> 8080, N -> N - 1012, and free ports for --port 0."""
    if admin_port is not None:
        return admin_port
    return port - 1012 if port > 1012 else 0


def pick_free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free a moment ago (bound together, then closed)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in socks]


def plan_cluster(
    controllers: int,
    brokers: int,
    port: int,
    admin_port: int,
    free_ports: FreePorts = pick_free_ports,
) -> ClusterPlan:
    """Node ids, ports and racks by the scheme in the module docstring."""
    if controllers not in CONTROLLER_COUNTS:
        raise ConfigError(f"--controllers {controllers}: use 1, 3 or 5 (a Raft majority)")
    if not 1 <= brokers <= MAX_BROKERS:
        raise ConfigError(f"--brokers {brokers}: use 1 to {MAX_BROKERS}")
    kafka_offsets = [
        *range(brokers),
        *(CONTROLLER_PORT_OFFSET + j for j in range(controllers)),
        *(RAFT_PORT_OFFSET + j for j in range(controllers)),
    ]
    admin_offsets = [*range(brokers), *(CONTROLLER_PORT_OFFSET + j for j in range(controllers))]
    free = iter(
        free_ports((0 if port else len(kafka_offsets)) + (0 if admin_port else len(admin_offsets)))
    )
    kafka = _port_family("--port", port, kafka_offsets, free)
    admin = _port_family("--admin-port", admin_port, admin_offsets, free)
    _check_distinct(kafka + admin)
    raft = kafka[brokers + controllers :]
    return ClusterPlan(
        controllers=tuple(
            NodeSpec(j + 1, "controller", kafka[brokers + j], admin[brokers + j], raft[j])
            for j in range(controllers)
        ),
        brokers=tuple(
            NodeSpec(controllers + 1 + i, "broker", kafka[i], admin[i], rack=RACKS[i % len(RACKS)])
            for i in range(brokers)
        ),
    )


def _port_family(flag: str, base: int, offsets: list[int], free: Iterator[int]) -> list[int]:
    if base == 0:
        return [next(free) for _ in offsets]
    if not 0 < base <= 65535:
        raise ConfigError(f"{flag} {base} is outside 0-65535")
    if base + max(offsets) > 65535:
        raise ConfigError(
            f"{flag} {base}: this cluster needs ports {base}-{base + max(offsets)}, past 65535"
        )
    return [base + offset for offset in offsets]


def _check_distinct(ports: list[int]) -> None:
    seen: set[int] = set()
    for port in ports:
        if port in seen:
            raise ConfigError(
                f"port {port} would serve two nodes: keep --admin-port at least"
                f" {RAFT_PORT_OFFSET + 100} away from --port"
            )
        seen.add(port)


def describe_plan(plan: ClusterPlan, broker_listener: str = "PLAINTEXT") -> list[str]:
    """One line per node, for the launcher's stderr."""
    lines = []
    for c in plan.controllers:
        lines.append(
            f"{c.name} controller  CONTROLLER {HOST}:{c.port}  Raft {HOST}:{c.raft_port}"
            f"  admin {c.admin_url}"
        )
    for b in plan.brokers:
        lines.append(
            f"{b.name} broker  {broker_listener} {HOST}:{b.port}  admin {b.admin_url}  {b.rack}"
        )
    return lines
