"""The one clock: wall-clock and monotonic time, in the units Kafka speaks.

Every package reads time through these functions (ruff's banned-api rule refuses a direct
``time.time`` or ``time.monotonic`` anywhere else), and the stateful parts take them as
injected callables, so a simulation or a test replaces time with a counter.  Pure modules
(codecs, the controller, the metadata image) never import this: they are handed times as
values.  It lives in the lowest package because the Spark source, which may import nothing but
``kafka_protocol``, needs a clock too.

* :func:`wall_ms`: milliseconds since the Unix epoch, for what is stored or sent (record
  timestamps, snapshot times, expiry deadlines written to a log).  It can jump.
* :func:`monotonic_ms` / :func:`monotonic_s`: never go back, for durations and deadlines kept in
  memory (sessions, lag, timeouts).  Asyncio code may use ``loop.time()``, the same clock.
"""

from __future__ import annotations

import time


def wall_ms() -> int:
    """Wall-clock milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Monotonic milliseconds (an arbitrary origin): for durations and deadlines."""
    return time.monotonic_ns() // 1_000_000


def monotonic_s() -> float:
    """Monotonic seconds, as ``time.monotonic()`` (an arbitrary origin)."""
    return time.monotonic()
