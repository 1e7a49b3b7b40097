"""Crash-stop on a broken invariant: one CRITICAL line, then the process exits with status 70.

Why stop rather than log and carry on: a node whose own state breaks an invariant (a committed
Raft entry that conflicts with the leader's, a metadata image that skipped a committed batch, a
high watermark above the log end offset) can only make things worse by serving on: it would
acknowledge, replicate or publish state that is already wrong. Stopping is what Kafka does too
(``ProcessTerminatingFaultHandler``); the operator sees one line that names the invariant and its
values, and a supervisor restarts the node or leaves it down.

How: ``fatal(invariant, message, **values)`` builds an :class:`InvariantViolation` and hands it
to the stop handler. The default one logs one CRITICAL line, flushes the log handlers and the
standard streams, and calls ``os._exit(FATAL_EXIT_STATUS)``: no ``finally`` blocks, no atexit,
no other thread gets to write anything more. ``os._exit`` rather than raising, because these
checks run on pysyncobj's tick thread too, whose loop catches every exception, logs it and ticks
again.

Tests (unit tests, the deterministic simulations) install their own handler with
:func:`stop_handler`: it may record the violation and raise it, so that the stop is observed
as a failure instead of ending the test process. If a handler returns, :func:`fatal` raises
the violation itself: the code after a broken invariant never runs.

This module is a leaf (standard library only) at the bottom of ``broker``, so that ``broker``
and ``kraft`` (above it) can both use it; ``kafka_protocol`` and ``metadata_log`` stay pure and
report broken rules by raising, to the I/O owner that decides.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Final, NoReturn

log = logging.getLogger(__name__)

FATAL_EXIT_STATUS: Final = 70  # sysexits.h EX_SOFTWARE: an internal software error


class InvariantViolation(AssertionError):
    """A broken invariant: ``invariant`` names it (a stable slug), ``values`` are its inputs.

    An ``AssertionError``: what used to be an ``assert`` is still one where a test catches it.
    """

    def __init__(self, invariant: str, message: str, values: dict[str, object]) -> None:
        self.invariant = invariant
        self.message = message
        self.values = values
        super().__init__(self.line())

    def line(self) -> str:
        """``invariant=<slug> key=value ...: message``, one line."""
        pairs = " ".join(f"{key}={value!r}" for key, value in self.values.items())
        return f"invariant={self.invariant} {pairs}: {self.message}".replace("\n", " ")


StopHandler = Callable[[InvariantViolation], None]


def halt(violation: InvariantViolation) -> NoReturn:
    """The production stop handler: log, flush, ``os._exit(FATAL_EXIT_STATUS)``."""
    thread = threading.current_thread().name
    try:
        log.critical(
            "FATAL %s thread=%r; stopping the node (exit status %d)",
            violation.line(),
            thread,
            FATAL_EXIT_STATUS,
        )
        logging.shutdown()  # flushes every handler
        for stream in (sys.stderr, sys.stdout):
            stream.flush()
    finally:
        os._exit(FATAL_EXIT_STATUS)


_handler: StopHandler = halt


def fatal(invariant: str, message: str, **values: object) -> NoReturn:
    """Stop the node: ``invariant`` is broken (see the module docstring)."""
    violation = InvariantViolation(invariant, message, values)
    _handler(violation)
    raise violation  # only a test's handler returns


@contextlib.contextmanager
def stop_handler(handler: StopHandler) -> Iterator[None]:
    """Use ``handler`` instead of :func:`halt` within the block (tests and simulations)."""
    global _handler
    saved, _handler = _handler, handler
    try:
        yield
    finally:
        _handler = saved
