"""How an admin command logs in to the REST admin API: a user and password (HTTP Basic) and,
for an https:// URL, the CA to trust and an optional client certificate.

Sources, highest first: ``--user``/``--password``; ``KRAFT_ADMIN_USER``/``KRAFT_ADMIN_PASSWORD``;
``--command-config FILE``, a properties file as ``kafka-*.sh --command-config`` takes:
``sasl.jaas.config`` (its ``username``/``password`` options) or ``admin.user``/
``admin.password``; Kafka's client ``ssl.*`` keys (:func:`broker.security.ssl_config.
client_ssl_context`: ``ssl.truststore.location``, ``ssl.keystore.location`` for a client
certificate, ...), or librdkafka's ``ssl.ca.location`` / ``ssl.certificate.location`` +
``ssl.key.location``; ``--ca-file`` names the CA too.
"""

from __future__ import annotations

import argparse
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from broker.security.client_security import ClientSecurity
from broker.security.session import SecurityProtocol
from broker.security.ssl_config import client_ssl_context
from kafka_protocol.sasl import MECHANISMS
from kafka_protocol.sasl.jaas import own_credentials, parse_jaas
from kraft.node.config import parse_properties

USER_ENV = "KRAFT_ADMIN_USER"
PASSWORD_ENV = "KRAFT_ADMIN_PASSWORD"


class LoginError(Exception):
    """The login settings cannot be used (an unreadable file, a bad JAAS value)."""


@dataclass(frozen=True, slots=True)
class AdminLogin:
    user: str | None = None
    password: str | None = None
    ssl_context: ssl.SSLContext | None = None


def add_login_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user", metavar="NAME", help=f"admin API user (default: ${USER_ENV})")
    parser.add_argument(
        "--password", metavar="PASSWORD", help=f"its password (default: ${PASSWORD_ENV})"
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties as kafka-*.sh takes: sasl.jaas.config or admin.user/"
        "admin.password, ssl.truststore.location or ssl.ca.location",
    )
    parser.add_argument("--ca-file", metavar="FILE", help="PEM CA to trust for an https:// URL")


def read_command_config(path: str) -> dict[str, str]:
    try:
        return parse_properties(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise LoginError(f"--command-config {path}: cannot read it ({exc})") from None


def _credentials_of(props: dict[str, str], path: str) -> tuple[str | None, str | None]:
    if props.get("admin.user"):
        return props["admin.user"], props.get("admin.password")
    jaas = props.get("sasl.jaas.config")
    if not jaas:
        return None, None
    try:
        own = own_credentials(parse_jaas(jaas))
    except ValueError as exc:
        raise LoginError(f"--command-config {path}: sasl.jaas.config: {exc}") from None
    return own if own is not None else (None, None)


def admin_ssl_context(props: dict[str, str], ca_file: str | None) -> ssl.SSLContext:
    """Kafka's client ``ssl.*`` keys (the server checked against the CA given, else the
    system's), with librdkafka's ``ssl.ca.location``, ``ssl.certificate.location`` and
    ``ssl.key.location`` read as their Kafka equivalents."""
    tls = {k: v for k, v in props.items() if k.startswith("ssl.")}
    if ca := ca_file or tls.pop("ssl.ca.location", None):
        tls["ssl.truststore.location"] = ca
    try:
        certificate = tls.pop("ssl.certificate.location", None)
        key = tls.pop("ssl.key.location", None)
        if certificate and key:
            tls["ssl.keystore.certificate.chain"] = Path(certificate).read_text()
            tls["ssl.keystore.key"] = Path(key).read_text()
        return client_ssl_context(tls)
    except (OSError, ValueError, ssl.SSLError) as exc:
        raise LoginError(f"TLS settings: {exc}") from None


def admin_login(args: argparse.Namespace) -> AdminLogin:
    path = getattr(args, "command_config", None)
    props = read_command_config(path) if path else {}
    file_user, file_password = _credentials_of(props, path) if path else (None, None)
    user = getattr(args, "user", None) or os.environ.get(USER_ENV) or file_user
    password = getattr(args, "password", None)
    if password is None:
        password = os.environ.get(PASSWORD_ENV) or file_password
    if user and password is None:
        raise LoginError(f"--user {user} needs a password: --password, ${PASSWORD_ENV} or a file")
    context = None
    if str(getattr(args, "admin", "")).startswith("https://"):
        context = admin_ssl_context(props, getattr(args, "ca_file", None))
    return AdminLogin(user or None, password if user else None, context)


def kafka_security(args: argparse.Namespace) -> ClientSecurity | None:
    """How a command that speaks Kafka to the brokers (``kraft elect-leaders``, ``kraft consume
    --group``) logs in, from ``--command-config`` as kafka-*.sh reads it: ``security.protocol``,
    ``sasl.mechanism`` (librdkafka: ``sasl.mechanisms``), ``sasl.jaas.config`` (or librdkafka's
    ``sasl.username``/``sasl.password``) and the ``ssl.*`` keys (``--ca-file`` too).  None
    without the file: PLAINTEXT."""
    path = getattr(args, "command_config", None)
    if not path:
        return None
    props = read_command_config(path)
    name = props.get("security.protocol", "PLAINTEXT").strip().upper()
    try:
        protocol = SecurityProtocol[name]
    except KeyError:
        choices = ", ".join(p.name for p in SecurityProtocol)
        raise LoginError(
            f"--command-config {path}: security.protocol={name}: use {choices}"
        ) from None
    context = None
    if protocol.uses_tls:
        context = admin_ssl_context(props, getattr(args, "ca_file", None))
    if not protocol.uses_sasl:
        return ClientSecurity(protocol, context)
    mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "GSSAPI").strip()
    if mechanism.upper() not in MECHANISMS:
        raise LoginError(
            f"--command-config {path}: sasl.mechanism={mechanism}: use {', '.join(MECHANISMS)}"
        )
    user, password = _credentials_of(props, path)
    user = user or props.get("sasl.username")
    password = password if password is not None else props.get("sasl.password")
    if not user or password is None:
        raise LoginError(
            f"--command-config {path}: {protocol.name} needs a login: sasl.jaas.config with"
            " username and password (or sasl.username and sasl.password)"
        )
    return ClientSecurity(protocol, context, mechanism.upper(), user, password)
