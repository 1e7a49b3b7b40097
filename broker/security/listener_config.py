"""Named listeners' security settings from Kafka's keys (``server.properties``).

``listener.security.protocol.map`` gives each listener name its protocol (Kafka's default map:
each protocol name to itself, and ``CONTROLLER`` to PLAINTEXT when the map is not given);
``inter.broker.listener.name`` or ``security.inter.broker.protocol`` (not both, as Kafka checks)
names the listener brokers replicate over; ``controller.listener.names`` the controllers' ones.
A key prefixed ``listener.name.<name lower-case>.`` overrides the global key for that listener;
the JAAS config of a mechanism is looked up most specific first:
``listener.name.<l>.<mechanism lower>.sasl.jaas.config``, ``listener.name.<l>.sasl.jaas.config``,
``sasl.jaas.config``.

Everything here is pure: values in, settings out, :class:`ListenerConfigError` (a ValueError
naming the key) when they cannot be used.  The node turns these into ConfigErrors at start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from broker.security.principal import PrincipalMapper
from broker.security.session import ListenerSecurity, SecurityProtocol
from broker.security.ssl_config import resolve_listener_props, server_ssl_context
from kafka_protocol.sasl import MECHANISMS, SCRAM_MECHANISM_IDS, ScramCredential, server_for
from kafka_protocol.sasl.jaas import parse_jaas, plain_users

PROTOCOL_MAP_KEY: Final = "listener.security.protocol.map"
DEFAULT_PROTOCOL_MAP: Final = {p.name: p for p in SecurityProtocol}
DEFAULT_CONTROLLER_LISTENER: Final = "CONTROLLER"
DEFAULT_MECHANISMS: Final = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
JAAS_KEY: Final = "sasl.jaas.config"

# (user, mechanism) -> the user's SCRAM credential for that mechanism (the metadata image's)
ScramLookup = Callable[[str, str], ScramCredential | None]


class ListenerConfigError(ValueError):
    """A listener setting that cannot be used; the message names the key."""


def listener_prefix(listener_name: str) -> str:
    return f"listener.name.{listener_name.lower()}."


def listener_value(values: Mapping[str, str], listener_name: str, key: str) -> str | None:
    """``listener.name.<l>.<key>`` if set, else ``<key>``."""
    specific = values.get(listener_prefix(listener_name) + key)
    return specific if specific is not None else values.get(key)


def protocol_map(
    values: Mapping[str, str], listener_names: Sequence[str]
) -> dict[str, SecurityProtocol]:
    """Each listener name's protocol; an unmapped name that is no protocol name is an error."""
    raw = values.get(PROTOCOL_MAP_KEY)
    mapping: dict[str, SecurityProtocol] = dict(DEFAULT_PROTOCOL_MAP)
    if raw is None or not raw.strip():
        mapping[DEFAULT_CONTROLLER_LISTENER] = SecurityProtocol.PLAINTEXT
        for name in controller_listener_names(values):
            mapping.setdefault(name, SecurityProtocol.PLAINTEXT)
    else:
        mapping = {}
        for item in filter(None, (x.strip() for x in raw.split(","))):
            name, colon, protocol = item.partition(":")
            name, protocol = name.strip().upper(), protocol.strip().upper()
            if not colon or not name or protocol not in DEFAULT_PROTOCOL_MAP:
                raise ListenerConfigError(
                    f"{PROTOCOL_MAP_KEY}: {item!r} is not NAME:PROTOCOL"
                    f" (PROTOCOL one of {', '.join(DEFAULT_PROTOCOL_MAP)})"
                )
            if name in mapping:
                raise ListenerConfigError(f"{PROTOCOL_MAP_KEY}: {name} is mapped twice")
            mapping[name] = DEFAULT_PROTOCOL_MAP[protocol]
    out = {}
    for name in listener_names:
        protocol_of = mapping.get(name, DEFAULT_PROTOCOL_MAP.get(name))
        if protocol_of is None:
            raise ListenerConfigError(
                f"{PROTOCOL_MAP_KEY}: listener {name} has no security protocol"
                f" (add {name}:PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)"
            )
        out[name] = protocol_of
    return out


def controller_listener_names(values: Mapping[str, str]) -> tuple[str, ...]:
    raw = values.get("controller.listener.names") or DEFAULT_CONTROLLER_LISTENER
    return tuple(n.strip().upper() for n in raw.split(",") if n.strip())


def inter_broker_listener_name(values: Mapping[str, str]) -> str:
    """``inter.broker.listener.name``, else the listener named ``security.inter.broker.protocol``
    (default PLAINTEXT); both set is an error, as in Kafka."""
    name = (values.get("inter.broker.listener.name") or "").strip().upper()
    protocol = (values.get("security.inter.broker.protocol") or "").strip().upper()
    if name and protocol:
        raise ListenerConfigError(
            "inter.broker.listener.name and security.inter.broker.protocol"
            " should not both be set (use inter.broker.listener.name)"
        )
    if protocol and protocol not in DEFAULT_PROTOCOL_MAP:
        raise ListenerConfigError(
            f"security.inter.broker.protocol={protocol!r} is not one of"
            f" {', '.join(DEFAULT_PROTOCOL_MAP)}"
        )
    return name or protocol or SecurityProtocol.PLAINTEXT.name


def jaas_config(values: Mapping[str, str], listener_name: str, mechanism: str) -> str | None:
    """The JAAS config of ``mechanism`` on the listener, most specific key first."""
    prefix = listener_prefix(listener_name)
    for key in (f"{prefix}{mechanism.lower()}.{JAAS_KEY}", f"{prefix}{JAAS_KEY}", JAAS_KEY):
        if (value := values.get(key)) is not None and value.strip():
            return value
    return None


def jaas_key(values: Mapping[str, str], listener_name: str, mechanism: str) -> str:
    """Which key :func:`jaas_config` read, or (none set) the one to set (for messages)."""
    prefix = listener_prefix(listener_name)
    keys = (f"{prefix}{mechanism.lower()}.{JAAS_KEY}", f"{prefix}{JAAS_KEY}", JAAS_KEY)
    return next((key for key in keys if values.get(key, "").strip()), keys[0])


def enabled_mechanisms(values: Mapping[str, str], listener_name: str) -> tuple[str, ...]:
    raw = listener_value(values, listener_name, "sasl.enabled.mechanisms")
    names = tuple(m.strip().upper() for m in (raw or DEFAULT_MECHANISMS).split(",") if m.strip())
    for name in names:
        if name not in MECHANISMS:
            raise ListenerConfigError(
                f"{listener_prefix(listener_name)}sasl.enabled.mechanisms: {name} is not"
                f" supported (supported: {', '.join(MECHANISMS)})"
            )
    return names


def plain_users_of(values: Mapping[str, str], listener_name: str) -> dict[str, str]:
    """The listener's PLAIN users (``user_<name>="password"`` of its JAAS config)."""
    text = jaas_config(values, listener_name, "PLAIN")
    if text is None:
        return {}
    try:
        return plain_users(parse_jaas(text))
    except ValueError as exc:
        raise ListenerConfigError(f"{jaas_key(values, listener_name, 'PLAIN')}: {exc}") from None


def scram_credential_of(image: Any, user: str, mechanism: str) -> ScramCredential | None:
    """A user's SCRAM credential in a metadata image's ``scram`` map (keyed by (user,
    mechanism name) or (user, Kafka's mechanism id)), or None."""
    scram = getattr(image, "scram", None)
    if not scram:
        return None
    found = scram.get((user, mechanism))
    if found is None and mechanism in SCRAM_MECHANISM_IDS:
        found = scram.get((user, SCRAM_MECHANISM_IDS[mechanism]))
    if found is None or isinstance(found, ScramCredential):
        return found
    return ScramCredential(
        salt=bytes(found.salt),
        stored_key=bytes(found.stored_key),
        server_key=bytes(found.server_key),
        iterations=int(found.iterations),
    )


@dataclass(frozen=True, slots=True)
class NodeSecurity:
    """The security settings of a node's listeners, validated."""

    protocols: Mapping[str, SecurityProtocol]  # every listener name -> its protocol
    inter_broker_listener: str
    controller_listeners: tuple[str, ...]
    inter_broker_mechanism: str
    controller_mechanism: str
    max_reauth_ms: int
    failed_authentication_delay_ms: int


def node_security(
    values: Mapping[str, str],
    listener_names: Sequence[str],
    *,
    is_broker: bool,
) -> NodeSecurity:
    """Validate the listener keys of a node with these ``listeners`` names."""
    protocols = protocol_map(values, listener_names)
    controllers = controller_listener_names(values)
    inter = inter_broker_listener_name(values)
    broker_listeners = [n for n in listener_names if n not in controllers]
    if is_broker and inter not in broker_listeners:
        raise ListenerConfigError(
            f"inter.broker.listener.name: {inter} is not one of the broker's listeners"
            f" ({', '.join(broker_listeners) or 'none'}): add it to listeners, or name another"
        )
    mechanisms = {}
    for key in ("sasl.mechanism.inter.broker.protocol", "sasl.mechanism.controller.protocol"):
        mechanism = (values.get(key) or "PLAIN").strip().upper()
        if mechanism not in MECHANISMS:
            raise ListenerConfigError(
                f"{key}={mechanism}: not supported (supported: {', '.join(MECHANISMS)})"
            )
        mechanisms[key] = mechanism
    return NodeSecurity(
        protocols=protocols,
        inter_broker_listener=inter,
        controller_listeners=controllers,
        inter_broker_mechanism=mechanisms["sasl.mechanism.inter.broker.protocol"],
        controller_mechanism=mechanisms["sasl.mechanism.controller.protocol"],
        max_reauth_ms=_non_negative(values, "connections.max.reauth.ms", 0),
        failed_authentication_delay_ms=_non_negative(
            values, "connection.failed.authentication.delay.ms", 100
        ),
    )


def _non_negative(values: Mapping[str, str], key: str, default: int) -> int:
    raw = values.get(key)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ListenerConfigError(f"{key}={raw!r} must be an integer") from None
    if value < 0:
        raise ListenerConfigError(f"{key}={value} must be at least 0")
    return value


def listener_security(
    values: Mapping[str, str],
    name: str,
    settings: NodeSecurity,
    scram_lookup: ScramLookup,
) -> ListenerSecurity:
    """One listener's :class:`ListenerSecurity`: its TLS context, its SASL servers."""
    protocol = settings.protocols[name]
    prefix = listener_prefix(name)
    ssl_context = None
    if protocol.uses_tls:
        props = resolve_listener_props(values, name)
        if not props.get("ssl.keystore.location") and not props.get(
            "ssl.keystore.certificate.chain"
        ):
            raise ListenerConfigError(
                f"listener {name} is {protocol.name}: give {prefix}ssl.keystore.location"
                " (or ssl.keystore.location, or ssl.keystore.certificate.chain and"
                " ssl.keystore.key)"
            )
        try:
            ssl_context = server_ssl_context(props)
        except (ValueError, OSError) as exc:
            raise ListenerConfigError(f"listener {name}: TLS settings: {exc}") from None
    mechanisms: tuple[str, ...] = ()
    servers: dict[str, Callable[[], Any]] = {}
    if protocol.uses_sasl:
        users = plain_users_of(values, name)
        usable = []
        for mechanism in enabled_mechanisms(values, name):
            if mechanism == "PLAIN" and not users:
                continue  # PLAIN only where a JAAS config lists users
            usable.append(mechanism)
            servers[mechanism] = _server_factory(mechanism, users, scram_lookup)
        if not usable:
            raise ListenerConfigError(
                f"listener {name} is {protocol.name} but has no usable SASL mechanism:"
                f' PLAIN needs {prefix}plain.{JAAS_KEY} with user_<name>="<password>" options,'
                f" SCRAM-SHA-256/512 need enabling in {prefix}sasl.enabled.mechanisms"
            )
        mechanisms = tuple(usable)
    mapper = None
    rules = listener_value(values, name, "ssl.principal.mapping.rules")
    if protocol.uses_tls:
        try:
            mapper = PrincipalMapper(rules or "DEFAULT")
        except ValueError as exc:
            raise ListenerConfigError(f"{prefix}ssl.principal.mapping.rules: {exc}") from None
    return ListenerSecurity(
        name=name,
        protocol=protocol,
        ssl_context=ssl_context,
        sasl_mechanisms=mechanisms,
        sasl_servers=servers,
        principal_of_certificate=mapper.principal_of if mapper is not None else None,
        failed_authentication_delay_ms=settings.failed_authentication_delay_ms,
        max_reauth_ms=settings.max_reauth_ms,
    )


def _server_factory(
    mechanism: str, users: Mapping[str, str], scram_lookup: ScramLookup
) -> Callable[[], Any]:
    def create() -> Any:
        return server_for(mechanism, users.get, lambda user: scram_lookup(user, mechanism))

    return create
