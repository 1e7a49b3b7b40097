"""One Kafka connection's security state, and the security settings of one listener.

A connection starts with the principal its transport gives it: ``User:ANONYMOUS`` on PLAINTEXT
and SASL listeners and on SSL without a client certificate, ``User:<mapped DN>`` on SSL with one
(``ssl.principal.mapping.rules``).  On a SASL listener it is not *authenticated* until a
SaslHandshake and SaslAuthenticate exchange succeeds; until then only ApiVersions, SaslHandshake
and SaslAuthenticate are served (Kafka's ``SaslServerAuthenticator``), and the principal becomes
``User:<authorization id>``.  Handlers read the session from their request context
(``ctx.session``) to authorize.
"""

from __future__ import annotations

import enum
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

ANONYMOUS: Final = "User:ANONYMOUS"
USER_TYPE: Final = "User"


class SecurityProtocol(enum.IntEnum):
    """Kafka's ``SecurityProtocol`` ids (BrokerRegistration's ``security_protocol``)."""

    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


def user_principal(name: str) -> str:
    """``User:<name>``, Kafka's ``KafkaPrincipal`` as ACLs and ``super.users`` spell it."""
    return f"{USER_TYPE}:{name}"


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """How one listener authenticates its clients (built from the node's config).

    ``ssl_context``: the server context on SSL and SASL_SSL listeners (None otherwise).
    ``sasl_mechanisms``: ``sasl.enabled.mechanisms`` of the listener (SASL listeners).
    ``sasl_servers``: a factory per mechanism name of the SASL server state machine
    (:mod:`kafka_protocol.sasl`), bound to the credentials the listener accepts (JAAS users for
    PLAIN, the metadata image's SCRAM credentials for SCRAM-*).
    ``principal_of_certificate``: the client certificate (``SSLSocket.getpeercert()``) to a
    principal, per ``ssl.principal.mapping.rules``.
    """

    name: str = "PLAINTEXT"
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    sasl_servers: Mapping[str, Callable[[], Any]] = field(default_factory=dict)
    principal_of_certificate: Callable[[Mapping[str, Any]], str] | None = None
    failed_authentication_delay_ms: int = 100  # connection.failed.authentication.delay.ms
    max_reauth_ms: int = 0  # connections.max.reauth.ms (0: sessions never expire)


PLAINTEXT_LISTENER: Final = ListenerSecurity()


@dataclass(slots=True)
class Session:
    """One connection's security state; the listener's connection owns it."""

    listener: str
    protocol: SecurityProtocol
    client_host: str  # the peer's address, for ACL host matching
    peer: str  # "host:port", for logs
    principal: str = ANONYMOUS
    authenticated: bool = True  # False on SASL listeners until SaslAuthenticate succeeds
    mechanism: str | None = None  # the SASL mechanism chosen by SaslHandshake
    sasl_server: Any = None  # its state machine while the exchange runs
    handshake_version: int = -1  # 0: raw SASL tokens follow (no SaslAuthenticate framing)
    expires_at_ms: int | None = None  # KIP-368: re-authenticate before this
    security: ListenerSecurity = PLAINTEXT_LISTENER  # the listener's settings (SASL handlers)
    # Client quotas (broker.quotas.throttle): the connection reads nothing before this
    # (loop.time(), seconds).
    muted_until_s: float = 0.0

    @classmethod
    def for_listener(cls, security: ListenerSecurity, client_host: str, peer: str) -> Session:
        return cls(
            listener=security.name,
            protocol=security.protocol,
            client_host=client_host,
            peer=peer,
            authenticated=not security.protocol.uses_sasl,
            security=security,
        )

    @classmethod
    def internal(cls, principal: str = ANONYMOUS) -> Session:
        """A request made by the node itself (tests, in-process forwarding)."""
        return cls("INTERNAL", SecurityProtocol.PLAINTEXT, "127.0.0.1", "internal", principal)
