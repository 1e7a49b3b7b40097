"""A node's listeners and logins from its config (:mod:`broker.security.listener_config`'s
rules, applied to a :class:`~kraft.node.config.NodeConfig`, errors as ConfigErrors).

The broker serves every listener not named in ``controller.listener.names``; the controller
serves its ``controller.listener.names`` listener.  As a client, a broker reaches its peers on
``inter.broker.listener.name`` with ``sasl.mechanism.inter.broker.protocol``, and the
controllers on their listener with ``sasl.mechanism.controller.protocol``.
"""

from __future__ import annotations

from typing import Any, Final

from broker.broker_config import BrokerListener
from broker.security.client_security import ClientSecurity, client_security_for
from broker.security.listener_config import (
    NodeSecurity,
    ScramLookup,
    listener_security,
    node_security,
    scram_credential_of,
)
from broker.security.session import ListenerSecurity
from kafka_protocol.sasl import ScramCredential
from kraft.groups.client import PLAINTEXT_ROUTE, BrokerRoute
from kraft.node.config import ConfigError, Listener, NodeConfig

MIN_QUORUM_PASSWORD_CHARS: Final = 16
INTER_BROKER_MECHANISM_KEY: Final = "sasl.mechanism.inter.broker.protocol"
CONTROLLER_MECHANISM_KEY: Final = "sasl.mechanism.controller.protocol"


def security_of(cfg: NodeConfig) -> NodeSecurity:
    """The node's listener settings, validated (a ConfigError naming the key otherwise)."""
    try:
        return node_security(
            cfg.values,
            [x.name for x in cfg.listeners],
            is_broker=cfg.is_broker,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def image_scram_lookup(image: Any) -> ScramLookup:
    """SCRAM credentials read from whatever image ``image()`` returns at login time."""

    def lookup(user: str, mechanism: str) -> ScramCredential | None:
        return scram_credential_of(image(), user, mechanism)

    return lookup


def broker_listeners(cfg: NodeConfig, scram_lookup: ScramLookup) -> tuple[BrokerListener, ...]:
    """Every listener the broker serves, with its advertised address and security."""
    settings = security_of(cfg)
    out = []
    for listener in cfg.listeners:
        if listener.name in settings.controller_listeners:
            continue
        advertised = cfg.advertised(listener.name) or listener
        out.append(
            BrokerListener(
                listener.name,
                listener.host,
                listener.port,
                advertised.host,
                advertised.port,
                _listener_security(cfg, listener, settings, scram_lookup),
            )
        )
    if not out:
        raise ConfigError(
            "listeners: a broker needs a listener not named in controller.listener.names"
        )
    return tuple(out)


def controller_listener(
    cfg: NodeConfig, scram_lookup: ScramLookup
) -> tuple[Listener, ListenerSecurity]:
    """The controller's listener (the first of ``controller.listener.names`` in listeners)."""
    settings = security_of(cfg)
    for name in settings.controller_listeners:
        listener = cfg.listener(name)
        if listener is not None:
            return listener, _listener_security(cfg, listener, settings, scram_lookup)
    raise ConfigError(
        f"listeners: a controller needs a {' or '.join(settings.controller_listeners)} listener"
        " (controller.listener.names)"
    )


def _listener_security(
    cfg: NodeConfig, listener: Listener, settings: NodeSecurity, scram_lookup: ScramLookup
) -> ListenerSecurity:
    try:
        return listener_security(cfg.values, listener.name, settings, scram_lookup)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def inter_broker_client(cfg: NodeConfig) -> ClientSecurity:
    """How this broker logs in to its peers' inter-broker listener."""
    settings = security_of(cfg)
    return _client(cfg, settings.inter_broker_listener, INTER_BROKER_MECHANISM_KEY)


def controller_client(cfg: NodeConfig) -> ClientSecurity:
    """How this node logs in to the controllers' listener (the first of
    ``controller.listener.names``, which the controllers serve)."""
    settings = security_of(cfg)
    return _client(cfg, settings.controller_listeners[0], CONTROLLER_MECHANISM_KEY)


def _client(cfg: NodeConfig, listener_name: str, mechanism_key: str) -> ClientSecurity:
    try:
        return client_security_for(cfg.values, listener_name, mechanism_key)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def inter_broker_listener(cfg: NodeConfig) -> str:
    """``inter.broker.listener.name`` (PLAINTEXT when the node's settings cannot say)."""
    try:
        return security_of(cfg).inter_broker_listener
    except ConfigError:
        return "PLAINTEXT"


def broker_route(cfg: NodeConfig) -> BrokerRoute:
    """How the node's own Kafka clients (REST records and groups) reach the brokers: their
    inter-broker listener with this node's login there; PLAINTEXT without one (a
    controller-only node that has no credentials for it)."""
    try:
        settings = security_of(cfg)
        return BrokerRoute(settings.inter_broker_listener, inter_broker_client(cfg))
    except ConfigError:
        return PLAINTEXT_ROUTE


def check_quorum_password(password: str, voters: int) -> None:
    """``controller.quorum.password`` authenticates the Raft peers of a multi-voter quorum:
    required, and long enough not to be guessed."""
    if not password:
        raise ConfigError(
            "controller.quorum.password is required on controllers"
            " (or KRAFT_CONTROLLER_QUORUM_PASSWORD)"
        )
    if voters > 1 and len(password) < MIN_QUORUM_PASSWORD_CHARS:
        raise ConfigError(
            f"controller.quorum.password is {len(password)} characters: use at least"
            f" {MIN_QUORUM_PASSWORD_CHARS} (e.g. python -c 'import secrets;"
            " print(secrets.token_urlsafe(24))')"
        )
