"""SASL for Kafka connections: PLAIN and SCRAM-SHA-256/512 state machines, JAAS parsing; pure.

Servers take the client's tokens one at a time (``step(token) -> next token``) and end
``complete`` with the ``authorization_id`` of the user; clients give ``first()`` then answer
each server token with ``step`` until it returns None.  Neither does I/O: the broker's
SaslAuthenticate handler and the node's own Kafka client carry the tokens.  Every failure is a
:class:`SaslAuthenticationError` whose message may be sent to the client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from kafka_protocol.sasl.errors import GENERIC_FAILURE, SaslAuthenticationError
from kafka_protocol.sasl.plain import PlainClient, PlainServer
from kafka_protocol.sasl.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISM_IDS,
    ScramClient,
    ScramCredential,
    ScramServer,
    credential_of_salted_password,
    scram_credential,
    verify_scram_password,
)

MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

__all__ = [
    "GENERIC_FAILURE",
    "MAX_ITERATIONS",
    "MECHANISMS",
    "MIN_ITERATIONS",
    "SCRAM_MECHANISM_IDS",
    "PlainClient",
    "PlainServer",
    "SaslAuthenticationError",
    "ScramClient",
    "ScramCredential",
    "ScramServer",
    "client_for",
    "credential_of_salted_password",
    "scram_credential",
    "server_for",
    "verify_scram_password",
]


def client_for(mechanism: str, username: str, password: str) -> PlainClient | ScramClient:
    """The client state machine of ``mechanism`` (ValueError if it is not one of MECHANISMS)."""
    if mechanism == "PLAIN":
        return PlainClient(username, password)
    if mechanism in SCRAM_MECHANISM_IDS:
        return ScramClient(mechanism, username, password)
    raise ValueError(f"unsupported SASL mechanism {mechanism!r} (supported: {MECHANISMS})")


def server_for(
    mechanism: str,
    plain_lookup: Callable[[str], str | None],
    scram_lookup: Callable[[str], ScramCredential | None],
) -> PlainServer | ScramServer:
    """The server state machine of ``mechanism``.

    ``plain_lookup``: user -> password (JAAS ``user_<name>``); ``scram_lookup``: user -> the
    user's credential *for this mechanism*.  ValueError if it is not one of MECHANISMS.
    """
    if mechanism == "PLAIN":
        return PlainServer(plain_lookup)
    if mechanism in SCRAM_MECHANISM_IDS:
        return ScramServer(mechanism, scram_lookup)
    raise ValueError(f"unsupported SASL mechanism {mechanism!r} (supported: {MECHANISMS})")
