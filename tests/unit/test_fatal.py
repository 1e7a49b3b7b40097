"""``broker.fatal``: the crash-stop itself, in a real process, and the handler tests use."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from crash_stops import CrashStops

from broker import fatal as fatal_module
from broker.fatal import FATAL_EXIT_STATUS, InvariantViolation, fatal, stop_handler

ROOT = Path(__file__).resolve().parents[2]

# A thread whose loop catches every exception and carries on, like pysyncobj's tick thread:
# raising there would be swallowed, so the stop must end the process from the thread itself.
SWALLOWING_THREAD = textwrap.dedent(
    """
    import logging, sys, threading, time
    from broker.fatal import fatal

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")

    def tick_loop():
        while True:
            try:
                fatal("test.raft-thread", "a committed entry conflicts", index=7, term=3)
            except Exception:
                logging.exception("swallowed, as pysyncobj does")
            time.sleep(0.01)

    threading.Thread(target=tick_loop, name="tick", daemon=True).start()
    time.sleep(30)
    print("still running")
    """
)


def test_fatal_stops_the_process_with_one_critical_line() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SWALLOWING_THREAD],
        capture_output=True,
        text=True,
        timeout=20,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert result.returncode == FATAL_EXIT_STATUS == 70, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr  # nothing after it: no traceback, no "swallowed"
    assert " CRITICAL broker.fatal FATAL invariant=test.raft-thread index=7 term=3:" in lines[0]
    tail = "a committed entry conflicts thread='tick'; stopping the node (exit status 70)"
    assert lines[0].endswith(tail), lines[0]


def test_without_logging_configured_the_line_still_reaches_stderr() -> None:
    code = "from broker.fatal import fatal; fatal('test.bare', 'no logging set up', n=1)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=20,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert result.returncode == FATAL_EXIT_STATUS, result.stderr
    assert "FATAL invariant=test.bare n=1: no logging set up" in result.stderr


def test_a_handler_that_returns_still_stops_the_caller(crash_stops: CrashStops) -> None:
    seen: list[InvariantViolation] = []
    reached = False
    with stop_handler(seen.append), pytest.raises(InvariantViolation) as raised:
        fatal("test.returning", "the code after fatal must not run", value=[1, 2])
        reached = True
    assert not reached and seen == [raised.value]
    assert raised.value.line() == (
        "invariant=test.returning value=[1, 2]: the code after fatal must not run"
    )
    assert isinstance(raised.value, AssertionError)  # what was an assert still is one
    assert crash_stops.take() == []  # the inner handler had it, not the test's


def test_the_handler_is_restored_after_the_block() -> None:
    before = fatal_module._handler
    with stop_handler(lambda violation: None):
        assert fatal_module._handler is not before
    assert fatal_module._handler is before
