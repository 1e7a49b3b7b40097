"""The server side of a SASL exchange on one connection (Kafka's ``SaslServerAuthenticator``).

States of a :class:`~broker.security.session.Session` on a SASL listener::

    unauthenticated --SaslHandshake(m)--> exchanging --SaslAuthenticate/raw token*--> authenticated
         |                                    |                                          |
         +-- any other API: closed            +-- a bad token: failed, closed            |
                                                                                          |
    authenticated --(connections.max.reauth.ms passed)--> closed at its next request      |
    authenticated --SaslHandshake(same m)--> re-authenticating --SaslAuthenticate*--> <---+

* Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are served;
  anything else closes the connection (Kafka: ``IllegalSaslStateException``, no response).
* SaslHandshake v0 is followed by raw SASL tokens (size-prefixed, no request header), as old
  clients send them; v1 by SaslAuthenticate requests.
* A failed exchange is answered (SASL_AUTHENTICATION_FAILED, or the raw exchange is just
  closed) and the connection closed ``connection.failed.authentication.delay.ms`` later.
* Re-authentication (KIP-368) must keep the mechanism and the principal.

No I/O here: the dispatcher and the SASL handlers call these functions and send the answers.
"""

from __future__ import annotations

import logging
from typing import Final

from broker.security.session import Session, user_principal
from kafka_protocol.clock import monotonic_ms
from kafka_protocol.errors import ErrorCode
from kafka_protocol.sasl import SaslAuthenticationError

log = logging.getLogger("broker.security")

SASL_HANDSHAKE_KEY: Final = 17
SASL_AUTHENTICATE_KEY: Final = 36
API_VERSIONS_KEY: Final = 18
# What an unauthenticated connection may ask (Kafka's SaslServerAuthenticator).
UNAUTHENTICATED_APIS: Final = frozenset(
    {API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY}
)
INVALID_CREDENTIALS: Final = (
    "Authentication failed during authentication due to invalid credentials with SASL mechanism"
)


class SaslExchangeError(Exception):
    """The exchange failed: answer ``error_code`` with ``message``, then close the connection
    (after ``connection.failed.authentication.delay.ms`` when ``delayed``)."""

    def __init__(self, error_code: ErrorCode, message: str, *, delayed: bool = True) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.delayed = delayed


def gate_reason(session: Session, api_key: int) -> str | None:
    """Why this request may not be served on this session (it is then closed), or None."""
    if not session.authenticated:
        if api_key in UNAUTHENTICATED_APIS:
            return None
        return f"api_key={api_key} before SASL authentication completed"
    expires = session.expires_at_ms
    if expires is not None and monotonic_ms() >= expires and api_key not in UNAUTHENTICATED_APIS:
        return "SASL session expired (connections.max.reauth.ms) without re-authentication"
    return None


def expects_raw_token(session: Session) -> bool:
    """After SaslHandshake v0 the next frames are raw SASL tokens, not Kafka requests."""
    return session.handshake_version == 0 and session.sasl_server is not None


def begin(session: Session, mechanism: str, handshake_version: int) -> list[str]:
    """SaslHandshake: choose ``mechanism``; returns the listener's enabled mechanisms.
    Raises :class:`SaslExchangeError` when the handshake is refused."""
    security = session.security
    enabled = [m for m in security.sasl_mechanisms if m in security.sasl_servers]
    if not security.protocol.uses_sasl:
        # Kafka's KafkaApis answer on a listener without SASL; the connection stays open.
        raise SaslExchangeError(
            ErrorCode.ILLEGAL_SASL_STATE, "SASL is not enabled on this listener", delayed=False
        )
    if session.sasl_server is not None:
        raise SaslExchangeError(
            ErrorCode.ILLEGAL_SASL_STATE, "SaslHandshake repeated during an exchange"
        )
    if session.authenticated and session.handshake_version != 1:
        raise SaslExchangeError(
            ErrorCode.ILLEGAL_SASL_STATE, "re-authentication needs SaslHandshake v1"
        )
    if mechanism not in enabled:
        raise SaslExchangeError(
            ErrorCode.UNSUPPORTED_SASL_MECHANISM,
            f"Unsupported SASL mechanism {mechanism!r}; enabled: {','.join(enabled)}",
        )
    if session.authenticated and mechanism != session.mechanism:
        raise SaslExchangeError(
            ErrorCode.ILLEGAL_SASL_STATE,
            f"Reauthentication failed: SASL mechanism changed from {session.mechanism}",
        )
    session.mechanism = mechanism
    session.sasl_server = security.sasl_servers[mechanism]()
    session.handshake_version = handshake_version
    return enabled


def step(session: Session, token: bytes, *, can_reauthenticate: bool) -> tuple[bytes, int]:
    """One client token: returns the server's token and, once the exchange is complete, the
    session lifetime in ms (0: no expiry; -1 while the exchange goes on).  Raises
    :class:`SaslExchangeError` on a failure (the session is then never authenticated).

    ``can_reauthenticate``: the client sent SaslAuthenticate v1+ (Kafka 2.2+); only such
    sessions get a lifetime (``connections.max.reauth.ms``), as in Kafka: older clients
    could not renew it."""
    server = session.sasl_server
    if server is None:
        raise SaslExchangeError(
            ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate without a SaslHandshake first"
        )
    try:
        reply: bytes = server.step(bytes(token))
    except SaslAuthenticationError as exc:  # its message is safe to send to the client
        _failed(session, str(exc))
        raise SaslExchangeError(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc)) from None
    except Exception:  # a bug in a state machine: still a failure, never a success
        log.exception("SASL server %s failed peer=%s", session.mechanism, session.peer)
        _failed(session, "internal error")
        raise SaslExchangeError(
            ErrorCode.SASL_AUTHENTICATION_FAILED, f"{INVALID_CREDENTIALS} {session.mechanism}"
        ) from None
    if not server.complete:
        return reply, -1
    session.sasl_server = None
    principal = user_principal(server.authorization_id)
    if session.authenticated and principal != session.principal:
        log.warning(
            "SASL re-authentication changed the principal peer=%s from=%s to=%s",
            session.peer,
            session.principal,
            principal,
        )
        raise SaslExchangeError(
            ErrorCode.SASL_AUTHENTICATION_FAILED,
            "Cannot change principals during re-authentication",
        )
    session.principal = principal
    session.authenticated = True
    lifetime_ms = max(session.security.max_reauth_ms, 0) if can_reauthenticate else 0
    session.expires_at_ms = monotonic_ms() + lifetime_ms if lifetime_ms else None
    log.debug("SASL authenticated peer=%s principal=%s", session.peer, principal)
    return reply, lifetime_ms


def _failed(session: Session, reason: str) -> None:
    session.sasl_server = None
    log.warning(  # one line per failure, as Kafka; connection.failed.authentication.delay.ms
        # bounds how fast one connection can fail
        "SASL authentication failed listener=%s peer=%s mechanism=%s reason=%r",
        session.listener,
        session.peer,
        session.mechanism,
        reason,
    )
