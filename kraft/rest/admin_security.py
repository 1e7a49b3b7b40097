"""The REST admin API's security settings, from the node's configuration.

* TLS when ``admin.listener=https://host:port``: each of Kafka's ``ssl.*`` keys is read as
  ``admin.ssl.<key>`` if given, else the node's own ``ssl.<key>`` (the same keystore as the
  Kafka listeners), and :func:`broker.security.ssl_config.server_ssl_context` builds the
  context.  ``admin.ssl.client.auth=required|requested`` asks for client certificates, whose
  distinguished names map to principals by ``ssl.principal.mapping.rules``.
* Users: the PLAIN users of every JAAS config of the node (``sasl.jaas.config``,
  ``listener.name.<l>.sasl.jaas.config``, ``listener.name.<l>.plain.sasl.jaas.config``: the
  ``user_<name>="password"`` options of a ``PlainLoginModule``) and the SCRAM credentials of the
  metadata image.
* ``admin.authentication``: ``basic`` (every route but the probes needs a user and password, or
  a client certificate) or ``none`` (anonymous callers are ``User:ANONYMOUS``, still judged by
  the ACLs).  Unset, it is ``basic`` when the node has an authorizer
  (``authorizer.class.name``) or any SASL listener, so that a secured cluster is never open over
  REST by accident, and ``none`` otherwise (``kraft dev``).
"""

from __future__ import annotations

import re
import ssl
from typing import Any, Final

from broker.security.authorization import BrokerAuthorizer
from broker.security.principal import PrincipalMapper
from broker.security.ssl_config import server_ssl_context
from kafka_protocol.sasl import verify_scram_password
from kafka_protocol.sasl.jaas import parse_jaas, plain_users
from kraft.node.config import ConfigError, NodeConfig
from kraft.rest.access import RestAuthorizer
from kraft.rest.authentication import AdminSecurity
from kraft.rest.common import AdminNode
from metadata_log.image import ClusterImage

ADMIN_PREFIX: Final = "admin."
FAILED_DELAY_KEY: Final = "connection.failed.authentication.delay.ms"
SSL_KEYS: Final = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.cipher.suites",
)
_PLAIN_JAAS_KEY: Final = re.compile(r"(listener\.name\.[^.]+\.)?(plain\.)?sasl\.jaas\.config")
_SASL_PROTOCOLS: Final = ("SASL_PLAINTEXT", "SASL_SSL")


def admin_ssl_props(cfg: NodeConfig) -> dict[str, str]:
    """The ``ssl.*`` keys of the admin listener: ``admin.ssl.*``, else the node's ``ssl.*``."""
    props = {}
    for key in SSL_KEYS:
        value = cfg.get(ADMIN_PREFIX + key)
        if value is None:
            value = cfg.get(key)
        if value is not None:
            props[key] = value
    return props


def client_auth(cfg: NodeConfig) -> str:
    return admin_ssl_props(cfg).get("ssl.client.auth", "none").strip().lower() or "none"


def admin_ssl_context(cfg: NodeConfig) -> ssl.SSLContext | None:
    """The admin listener's TLS context (None on http://); a ConfigError says what is wrong."""
    if not cfg.admin_https:
        return None
    props = admin_ssl_props(cfg)
    if not (props.get("ssl.keystore.location") or props.get("ssl.keystore.certificate.chain")):
        raise ConfigError(
            "admin.listener is https:// but no keystore is configured: set"
            " admin.ssl.keystore.location (or ssl.keystore.location, or"
            " admin.ssl.keystore.certificate.chain and admin.ssl.keystore.key)"
        )
    if client_auth(cfg) not in ("required", "requested", "none"):
        raise ConfigError(
            f"admin.ssl.client.auth={client_auth(cfg)!r} must be required, requested or none"
        )
    try:
        return server_ssl_context(props)
    except (ValueError, OSError, ssl.SSLError) as exc:
        raise ConfigError(f"admin.listener TLS: {exc}") from None


def node_plain_users(cfg: NodeConfig) -> dict[str, str]:
    """The PLAIN users of the node's JAAS configs (a key sorting first wins a duplicate)."""
    users: dict[str, str] = {}
    for key in sorted(cfg.values):
        if not _PLAIN_JAAS_KEY.fullmatch(key):
            continue
        try:
            entry = parse_jaas(cfg.values[key])
        except ValueError as exc:
            raise ConfigError(f"{key}: {exc}") from None
        if entry.login_module.endswith("PlainLoginModule"):
            for user, password in plain_users(entry).items():
                users.setdefault(user, password)
    return users


def has_sasl_listener(cfg: NodeConfig) -> bool:
    mapping = {p: p for p in ("PLAINTEXT", "SSL", *_SASL_PROTOCOLS)}  # Kafka's default map
    for item in (cfg.get("listener.security.protocol.map") or "").split(","):
        name, sep, protocol = item.strip().partition(":")
        if sep:
            mapping[name.strip().upper()] = protocol.strip().upper()
    return any(mapping.get(x.name, x.name) in _SASL_PROTOCOLS for x in cfg.listeners)


def authentication_required(cfg: NodeConfig) -> bool:
    raw = (cfg.get("admin.authentication") or "").strip().lower()
    if raw in ("basic", "none"):
        return raw == "basic"
    if raw:
        raise ConfigError(f"admin.authentication={raw!r} must be basic or none")
    return bool((cfg.get("authorizer.class.name") or "").strip()) or has_sasl_listener(cfg)


def scram_credential_of(image: ClusterImage | None, user: str, mechanism: str) -> Any:
    """The image's SCRAM credential of ``user`` for ``mechanism`` (salt, keys, iterations)."""
    return None if image is None else image.scram.get((user, mechanism))


def admin_security(node: AdminNode) -> AdminSecurity:
    cfg = node.config
    plain = node_plain_users(cfg)
    mapper = None
    if cfg.admin_https and client_auth(cfg) in ("required", "requested"):
        rules = cfg.get("ssl.principal.mapping.rules") or "DEFAULT"
        try:
            mapper = PrincipalMapper(rules).principal_of
        except ValueError as exc:
            raise ConfigError(f"ssl.principal.mapping.rules: {exc}") from None
    return AdminSecurity(
        required=authentication_required(cfg),
        plain_users=lambda: plain,
        scram_lookup=lambda user, mechanism: scram_credential_of(node.image, user, mechanism),
        scram_verify=verify_scram_password,
        principal_of_certificate=mapper,
        failed_authentication_delay_ms=cfg.get_bounded_int(FAILED_DELAY_KEY),
    )


def admin_authorizer(node: AdminNode) -> RestAuthorizer | None:
    """The node's authorizer as the API asks it (None: ``authorizer.class.name`` unset, so
    every caller may do everything, as on the Kafka listeners)."""
    if not (node.config.get("authorizer.class.name") or "").strip():
        return None

    def image() -> ClusterImage:
        return node.image or ClusterImage.EMPTY

    try:
        return BrokerAuthorizer.from_config(node.config.values, image)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
