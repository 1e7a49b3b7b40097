"""What bounds a Kafka listener's connections, as plain values and rules (no sockets here):

* :class:`ConnectionQuotas`: ``max.connections`` and ``max.connections.per.ip`` (with
  ``max.connections.per.ip.overrides``), checked when a connection is accepted;
* :class:`RateLimitedWarning`: one warning line per interval however many connections are
  refused, so that a connection flood does not become a log flood;
* :class:`RequestMemoryBudget`: ``queued.max.request.bytes``, the bytes of requests a listener
  holds (received and not yet answered); reading pauses while it is exhausted;
* :func:`idle_connection_check_interval_s`: how often ``connections.max.idle.ms`` is enforced.

Kafka's semantics, with one difference said plainly: Kafka *blocks* accepting at
``max.connections`` (clients wait in the kernel's backlog) and counts it across the broker's
listeners; here a connection over either limit is accepted and closed at once (the client sees
a prompt close and retries, and the log says why), and each listener counts its own, so a
flood on the client listener cannot lock brokers out of the controller listener (Kafka gets
that by exempting its inter-broker listener).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

log = logging.getLogger("broker.server")

UNBOUNDED: Final = 2**31 - 1  # Kafka's default of both connection limits (Int.MaxValue)
REFUSAL_LOG_INTERVAL_S: Final = 10.0


def normalize_ip(address: str) -> str:
    """The address a peer is counted under (an IPv4-mapped IPv6 address as its IPv4 form)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def parse_ip_overrides(
    value: str, resolve: Callable[[str], list[str]] | None = None
) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host-or-ip:limit,...`` (Kafka's format, e.g.
    ``hostName:100,127.0.0.1:200``).  A host name counts for every address ``resolve`` gives
    it (resolved once, at start).  ValueError names the entry that is wrong."""
    out: dict[str, int] = {}
    for entry in filter(None, (e.strip() for e in value.split(","))):
        host, sep, limit = entry.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not limit.strip().isdigit():
            raise ValueError(f"{entry!r} is not host:limit")
        count = int(limit)
        if count > UNBOUNDED:
            raise ValueError(f"{entry!r}: the limit is above {UNBOUNDED}")
        try:
            addresses = [str(ipaddress.ip_address(host))]
        except ValueError:
            if resolve is None:
                raise ValueError(f"{entry!r}: {host!r} is not an IP address") from None
            addresses = resolve(host)
        for address in addresses:
            out[normalize_ip(address)] = count
    return out


@dataclass
class ConnectionQuotas:
    """Open connections of one listener, in total and per peer address."""

    max_connections: int = UNBOUNDED
    max_connections_per_ip: int = UNBOUNDED
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    total: int = 0
    by_ip: dict[str, int] = field(default_factory=dict)

    def limit_for(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.max_connections_per_ip)

    def admit(self, ip: str) -> str | None:
        """Count a new connection from ``ip``; or, if a limit forbids it, say which."""
        if self.total >= self.max_connections:
            return "max.connections"
        if self.by_ip.get(ip, 0) >= self.limit_for(ip):
            return "max.connections.per.ip"
        self.total += 1
        self.by_ip[ip] = self.by_ip.get(ip, 0) + 1
        return None

    def release(self, ip: str) -> None:
        count = self.by_ip[ip] - 1
        assert count >= 0 and self.total > 0, f"released more connections of {ip} than admitted"
        self.total -= 1
        if count:
            self.by_ip[ip] = count
        else:
            del self.by_ip[ip]


@dataclass
class RateLimitedWarning:
    """At most one warning line per ``interval_s``: the first at once, then the next one after
    the interval with the count of those left out (``suppressed=N``), so that a connection
    flood stays visible in the log without flooding it."""

    interval_s: float = REFUSAL_LOG_INTERVAL_S
    _last_s: float | None = None
    _suppressed: int = 0

    def warn(self, now_s: float, message: str, *args: object) -> bool:
        """Log ``message % args`` unless a line was written less than ``interval_s`` ago;
        returns whether it was written."""
        if self._last_s is not None and now_s - self._last_s < self.interval_s:
            self._suppressed += 1
            return False
        log.warning(message + " suppressed=%d", *args, self._suppressed)
        self._last_s, self._suppressed = now_s, 0
        return True


class RequestMemoryBudget:
    """``queued.max.request.bytes`` of one listener: the bytes its connections hold for
    requests received and not yet answered.  Non-strict, as Kafka's pool: a connection may
    take the budget past its limit (a frame it has begun is finished), and new reading pauses
    while the limit is reached; ``on_available`` runs when it drops below again.  A limit of
    0 or less is no limit (Kafka's -1)."""

    __slots__ = ("held", "limit_bytes", "on_available")

    def __init__(self, limit_bytes: int, on_available: Callable[[], None] | None = None) -> None:
        self.limit_bytes = limit_bytes
        self.held = 0
        self.on_available = on_available

    @property
    def exhausted(self) -> bool:
        return 0 < self.limit_bytes <= self.held

    def change(self, delta: int) -> None:
        was_exhausted = self.exhausted
        self.held += delta
        assert self.held >= 0, f"request memory released twice ({self.held})"
        if was_exhausted and not self.exhausted and self.on_available is not None:
            self.on_available()


def idle_connection_check_interval_s(max_idle_ms: int) -> float | None:
    """How often to look for idle connections: a tenth of ``connections.max.idle.ms`` within
    10 ms..1 s (a connection is closed at most that late); None when it is disabled (< 0)."""
    if max_idle_ms < 0:
        return None
    return min(1.0, max(0.01, max_idle_ms / 10_000))
