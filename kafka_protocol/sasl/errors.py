"""The one exception of :mod:`kafka_protocol.sasl`.

Its message is safe to send to the client (SaslAuthenticate's ``error_message``): for anything
about users and passwords it is the generic :data:`GENERIC_FAILURE`, which never says whether the
user exists.  ``reason`` says what actually went wrong, for the broker's log only.
"""

from __future__ import annotations

from typing import Final

GENERIC_FAILURE: Final = "Authentication failed: Invalid username or password"


class SaslAuthenticationError(Exception):
    """A SASL exchange failed; ``str(error)`` may go to the client, ``reason`` to the log."""

    def __init__(self, message: str = GENERIC_FAILURE, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message
