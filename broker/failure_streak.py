"""Failures in a row of one retried action, logged once per streak.

A broker retries some things for ever (heartbeats to the controllers, fetches of the metadata
log).  Logging every failed attempt would bury the log during a controller election, and logging
none would hide an outage, so a streak is logged at its start (WARNING), each further failure
only at DEBUG, and its end once (INFO, with how many attempts failed).
"""

from __future__ import annotations

import logging


class FailureStreak:
    """The failures in a row of one action, and the log lines that mark a streak's bounds."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.count = 0

    def failed(self, message: str, *args: object) -> None:
        """One more failure: ``message % args`` at WARNING if it starts a streak, else DEBUG."""
        self.count += 1
        self.log.log(logging.WARNING if self.count == 1 else logging.DEBUG, message, *args)

    def ended(self, message: str, *args: object) -> None:
        """A success: ``message % (*args, count)`` at INFO if it ends a streak."""
        if self.count:
            self.log.info(message, *args, self.count)
        self.count = 0
