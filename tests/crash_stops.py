"""Crash-stops observed in-process (see ``conftest.crash_stops``): ``broker.fatal`` raises in a
test instead of ending the test process."""

from __future__ import annotations

from broker.fatal import InvariantViolation


class CrashStops:
    """The crash-stops (``broker.fatal``) a test provoked: recorded and raised, not exits."""

    def __init__(self) -> None:
        self._seen: list[InvariantViolation] = []

    def record(self, violation: InvariantViolation) -> None:
        self._seen.append(violation)
        raise violation

    def take(self) -> list[InvariantViolation]:
        """The stops so far, claimed by the test (teardown fails on unclaimed ones)."""
        seen, self._seen = self._seen, []
        return seen
