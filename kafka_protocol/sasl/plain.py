"""SASL PLAIN (RFC 4616); sans-IO.

One token from the client, UTF-8:   [authzid] NUL authcid NUL passwd
and an empty token back.  The authzid must be empty or equal to the authcid (Kafka's
PlainSaslServer), neither name nor password may be empty, and the password is compared in
constant time against the one configured for the user (JAAS ``user_<name>="..."`` options).
PLAIN sends the password in clear: use it over SASL_SSL, or on a trusted network.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Final

from kafka_protocol.sasl.errors import SaslAuthenticationError
from kafka_protocol.sasl.scram import AUTHZID_MISMATCH

MAX_PLAIN_TOKEN_BYTES: Final = 4096


class PlainServer:
    """The broker's side of a PLAIN exchange: one token in, an empty token out."""

    mechanism: Final = "PLAIN"

    def __init__(self, lookup: Callable[[str], str | None]) -> None:
        self._lookup = lookup
        self._done = False
        self.complete = False
        self.authorization_id = ""

    def step(self, token: bytes) -> bytes:
        if self._done:
            raise SaslAuthenticationError(reason="PLAIN token after the exchange ended")
        self._done = True
        if len(token) > MAX_PLAIN_TOKEN_BYTES:
            raise SaslAuthenticationError(reason=f"PLAIN token of {len(token)} bytes")
        try:
            authzid, authcid, password = token.decode("utf-8").split("\0")
        except (UnicodeDecodeError, ValueError):
            raise SaslAuthenticationError(reason="malformed PLAIN token") from None
        if not authcid or not password:
            raise SaslAuthenticationError(reason="PLAIN token without a user or a password")
        if authzid and authzid != authcid:
            raise SaslAuthenticationError(AUTHZID_MISMATCH, reason=AUTHZID_MISMATCH)
        expected = self._lookup(authcid)
        # Compare even for an unknown user, so both failures take the same time.
        matches = hmac.compare_digest(
            password.encode("utf-8"), (expected if expected is not None else "\0").encode("utf-8")
        )
        if expected is None or not matches:
            reason = "unknown user" if expected is None else "wrong password"
            raise SaslAuthenticationError(reason=f"PLAIN {reason} {authcid!r}")
        self.complete = True
        self.authorization_id = authcid
        return b""


class PlainClient:
    """A client's side of PLAIN: ``first()`` is the whole exchange."""

    mechanism: Final = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        if "\0" in username or "\0" in password:
            raise ValueError("PLAIN user names and passwords cannot contain NUL")
        self._token = f"\0{username}\0{password}".encode()
        self.complete = False

    def first(self) -> bytes:
        return self._token

    def step(self, server_token: bytes) -> bytes | None:
        if self.complete:
            raise SaslAuthenticationError("PLAIN: the exchange has already ended")
        self.complete = True  # the broker answers an empty token, or an error code
        return None
