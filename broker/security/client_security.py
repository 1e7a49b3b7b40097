"""How this node connects, as a client, to another node's listener (interface D).

A broker fetching from a leader uses the inter-broker listener (``inter.broker.listener.name``)
and ``sasl.mechanism.inter.broker.protocol``; a broker talking to the controllers uses the
controller listener and ``sasl.mechanism.controller.protocol``.  It logs in as Kafka's own
inter-broker client does: with the ``username``/``password`` options of that listener's JAAS
config for the mechanism, and the listener's TLS keys (its truststore to check the peer, its
keystore as client certificate when the peer asks for one).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from broker.security.listener_config import (
    ListenerConfigError,
    jaas_config,
    jaas_key,
    protocol_map,
)
from broker.security.session import SecurityProtocol
from broker.security.ssl_config import client_ssl_context, resolve_listener_props
from kafka_protocol.sasl import MECHANISMS
from kafka_protocol.sasl.jaas import own_credentials, parse_jaas


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """What a client connection does before its first request: TLS, then SASL."""

    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    def __repr__(self) -> str:  # never the password
        return (
            f"ClientSecurity({self.protocol.name}, mechanism={self.sasl_mechanism},"
            f" user={self.username})"
        )


PLAINTEXT_CLIENT = ClientSecurity()


def client_security_for(
    values: Mapping[str, str], listener_name: str, mechanism_key: str
) -> ClientSecurity:
    """This node's login to ``listener_name`` of its peers: the listener's protocol, TLS keys,
    the mechanism of ``mechanism_key`` (default PLAIN) and the JAAS ``username``/``password``."""
    protocol = protocol_map(values, [listener_name])[listener_name]
    context = None
    if protocol.uses_tls:
        try:
            context = client_ssl_context(resolve_listener_props(values, listener_name))
        except (ValueError, OSError) as exc:
            raise ListenerConfigError(f"listener {listener_name}: TLS settings: {exc}") from None
    if not protocol.uses_sasl:
        return ClientSecurity(protocol, context)
    mechanism = (values.get(mechanism_key) or "PLAIN").strip().upper()
    if mechanism not in MECHANISMS:
        raise ListenerConfigError(
            f"{mechanism_key}={mechanism}: not supported (supported: {', '.join(MECHANISMS)})"
        )
    key = jaas_key(values, listener_name, mechanism)
    text = jaas_config(values, listener_name, mechanism)
    if text is None:
        raise ListenerConfigError(
            f"listener {listener_name} is {protocol.name}: this node logs in to it with"
            f' {mechanism} and needs {key} with username="..." password="..."'
        )
    try:
        credentials = own_credentials(parse_jaas(text))
    except ValueError as exc:
        raise ListenerConfigError(f"{key}: {exc}") from None
    if credentials is None:
        raise ListenerConfigError(
            f'{key}: no username="..." password="..." options: this node logs in to'
            f" listener {listener_name} with {mechanism} as those"
        )
    username, password = credentials
    return ClientSecurity(protocol, context, mechanism, username, password)
