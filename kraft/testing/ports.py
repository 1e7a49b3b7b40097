"""Ports for the nodes of a test cluster, safe when several test processes pick at once.

Ports
-----
A node that binds port 0 itself (``kraft dev --port 0``) needs nothing from us.  A cluster
needs its ports *before* its nodes start (every node is told the others' addresses), and a
port that was free when it was picked must still be free when the node binds it, perhaps
seconds later, and again when a killed node restarts.  Binding port 0 and closing does not
promise that: the kernel hands out the same range for port-0 binds and for the source ports
of outgoing connections (``ip_local_port_range``), and other test processes pick at the same
time.  So :func:`free_ports` picks

* outside the ephemeral range (from :data:`PORT_FLOOR` up to it, or above it, whichever is
  larger), where the kernel never picks on its own;
* from a slice of that range this process holds exclusively (an ``flock`` on the slice's
  file, released when the process exits; the first slice tried depends on the pid), so two
  test processes never pick the same port;
* never the same port twice in one process (a killed node's port stays its own), and only
  ports that can be bound right now (a leftover listener or a TIME_WAIT is skipped).

Used by :mod:`kraft.testing.local_cluster`, the project's own test harness and its benchmarks.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
import threading
from pathlib import Path

HOST = "127.0.0.1"
PORT_FLOOR = 20_000  # below it: ports people run services on (9092, 8080, kraft dev's 9192...)
SLICE_PORTS = 100  # ports per exclusively held slice
LOCK_DIR = Path(tempfile.gettempdir()) / "kraft-test-ports"
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for port-0 binds and outgoing connections (inclusive)."""
    try:
        low, high = (int(n) for n in EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return low, high


def port_pool(ephemeral: tuple[int, int]) -> range:
    """The ports tests pick from: the larger side of ``ephemeral`` above :data:`PORT_FLOOR`."""
    low, high = ephemeral
    pool = max(range(PORT_FLOOR, low), range(high + 1, 65536), key=len)
    if len(pool) < 10 * SLICE_PORTS:
        raise RuntimeError(
            f"ip_local_port_range {low}-{high} leaves no room for test ports above {PORT_FLOOR};"
            f" narrow it (sysctl net.ipv4.ip_local_port_range) to leave {10 * SLICE_PORTS} free"
        )
    return pool


class PortAllocator:
    """This process's ports: slices of ``pool`` held by ``flock``, handed out in order."""

    def __init__(self, pool: range, lock_dir: Path, first_slice: int) -> None:
        self.pool = pool
        self.lock_dir = lock_dir
        self.slices = len(pool) // SLICE_PORTS
        self.first_slice = first_slice % self.slices
        self.tried = 0  # slices tried so far, from ``first_slice`` on
        self.ports: list[int] = []  # the rest of the slice held last
        self.held: list[int] = []  # lock file descriptors, kept open until exit
        self.lock = threading.Lock()

    def take(self, count: int) -> list[int]:
        with self.lock:
            return [self._next() for _ in range(count)]

    def _next(self) -> int:
        while True:
            while not self.ports:
                self._claim_slice()
            port = self.ports.pop(0)
            if bindable(port):
                return port

    def _claim_slice(self) -> None:
        if self.tried >= self.slices:
            raise RuntimeError(f"every port of {self.pool} is taken (locks in {self.lock_dir})")
        index = (self.first_slice + self.tried) % self.slices
        self.tried += 1
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_dir / f"slice-{index}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # another process holds it
            return
        self.held.append(fd)
        start = self.pool.start + index * SLICE_PORTS
        self.ports = list(range(start, start + SLICE_PORTS))


def bindable(port: int) -> bool:
    """Nothing is bound to ``port`` and no connection lingers on it (no SO_REUSEADDR)."""
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


_allocators: dict[int, PortAllocator] = {}  # by pid: a forked child must not share slices
_allocators_lock = threading.Lock()


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports for nodes of this process to bind, now or after a restart."""
    pid = os.getpid()
    with _allocators_lock:
        allocator = _allocators.get(pid)
        if allocator is None:
            pool = port_pool(ephemeral_port_range())
            allocator = _allocators[pid] = PortAllocator(pool, LOCK_DIR, first_slice=pid)
    return allocator.take(count)


def free_port() -> int:
    [port] = free_ports(1)
    return port
