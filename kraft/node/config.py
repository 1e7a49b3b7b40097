"""Node configuration: Kafka's key names from a properties file, the environment and overrides.

Precedence, highest first: ``--override key=value`` > ``KRAFT_<KEY>`` environment variables
(the key upper-cased, dots as underscores: ``KRAFT_NODE_ID``) > the properties file > defaults.
Every value is validated when the node starts, and an error names the key, the value and
where it came from, so that a container that will not start says why.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from broker.connection_limits import parse_ip_overrides
from broker.security.authorization import AuthorizerSettings
from broker.server import ListenerLimits
from metadata_log.configs import BROKER_CONFIGS

ENV_PREFIX = "KRAFT_"


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message says which and why."""


class StartupError(Exception):
    """The node cannot start (port in use, unreadable data, controller refusal)."""


@dataclass(frozen=True, slots=True)
class Listener:
    name: str  # PLAINTEXT, CONTROLLER, ...
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_properties(text: str) -> dict[str, str]:
    """Java ``.properties``: ``key=value`` / ``key: value`` / ``key value``, ``#``/``!``
    comments, backslash line continuations and escapes."""
    out: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.lstrip() if pending else raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = line[:-1]
            continue
        pending = ""
        logical.append(line)
    if pending:
        logical.append(pending)
    for line in logical:
        m = re.match(r"((?:\\.|[^=:\s\\])+)\s*[=:\s]?\s*(.*)$", line)
        if m is None:
            continue
        out[_unescape(m.group(1))] = _unescape(m.group(2))
    return out


def _unescape(s: str) -> str:
    escapes = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), s)


def env_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    return {
        k[len(ENV_PREFIX) :].lower().replace("_", "."): v
        for k, v in environ.items()
        if k.startswith(ENV_PREFIX) and len(k) > len(ENV_PREFIX)
    }


def parse_overrides(items: list[str], option: str = "--override") -> dict[str, str]:
    """``key=value`` command-line arguments (of ``option``) as a dict."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{option} {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def parse_listeners(value: str, key: str) -> list[Listener]:
    listeners = []
    for part in filter(None, (p.strip() for p in value.split(","))):
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)://(\[[^\]]*\]|[^:]*):(\d+)", part)
        if m is None:
            raise ConfigError(f"{key}: {part!r} is not NAME://host:port")
        host = m.group(2).strip("[]")
        listeners.append(Listener(m.group(1).upper(), host, _port(int(m.group(3)), key)))
    return listeners


def _advertise_address(
    address: str, listeners: list[Listener], by_name: dict[str, Listener], values: dict[str, str]
) -> None:
    """``advertised.address=host:port`` (ours; the container's one variable,
    ``KRAFT_ADVERTISED_ADDRESS``): what clients are told for the first client listener that
    ``advertised.listeners`` does not name.  A node without such a listener (a controller, or
    every listener advertised explicitly) ignores it."""
    m = re.fullmatch(r"(\[[^\]]*\]|[^:\s]+):(\d+)", address)
    if m is None or int(m.group(2)) == 0:
        raise ConfigError(
            f"advertised.address={address!r} is not host:port (the address clients reach"
            " this node at, e.g. localhost:19092 for docker run -p 19092:9092)"
        )
    controllers = {
        n.strip().upper() for n in values.get("controller.listener.names", "CONTROLLER").split(",")
    }
    for x in listeners:
        if x.name not in controllers and x.name not in by_name:
            port = _port(int(m.group(2)), "advertised.address")
            by_name[x.name] = Listener(x.name, m.group(1).strip("[]"), port)
            return


def _port(port: int, key: str) -> int:
    if not 0 <= port <= 65535:
        raise ConfigError(f"{key}: port {port} is outside 0-65535")
    return port


@dataclass(frozen=True)
class NodeConfig:
    """The validated settings one node runs with; ``values`` keeps every key as given."""

    node_id: int
    process_roles: frozenset[str]
    listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...]
    admin_listener: tuple[str, int] | None
    log_dirs: tuple[Path, ...]
    metadata_log_dir: Path
    values: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    admin_https: bool = False  # admin.listener=https://...

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def get_int(self, key: str, default: int) -> int:
        raw = self.values.get(key)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(self._bad(key, raw, "an integer")) from None

    def get_bounded_int(self, key: str) -> int:
        """An integer key of :data:`~metadata_log.configs.BROKER_CONFIGS`, its default and
        minimum read from that one table rather than stated again by the caller."""
        definition = BROKER_CONFIGS[key]
        value = self.get_int(key, definition.int_default)
        minimum, _ = definition.bounds
        if value < minimum:
            raise ConfigError(f"{key}={value} must be at least {minimum}")
        if (error := definition.validate(str(value))) is not None:
            raise ConfigError(error)
        return value

    def get_bool(self, key: str, default: bool) -> bool:
        raw = self.values.get(key)
        if raw is None:
            return default
        if raw.lower() not in ("true", "false"):
            raise ConfigError(self._bad(key, raw, "true or false"))
        return raw.lower() == "true"

    def _bad(self, key: str, raw: str, want: str) -> str:
        return f"{key}={raw!r} (from {self.sources.get(key, 'default')}) must be {want}"

    def listener(self, name: str) -> Listener | None:
        return next((x for x in self.listeners if x.name == name), None)

    def advertised(self, name: str) -> Listener | None:
        return next((x for x in self.advertised_listeners if x.name == name), None)

    @property
    def is_broker(self) -> bool:
        return "broker" in self.process_roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles


def load_config(
    file: Path | None = None,
    overrides: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    defaults: Mapping[str, str] | None = None,
) -> NodeConfig:
    layers: list[tuple[str, Mapping[str, str]]] = [("default", defaults or {})]
    if file is not None:
        try:
            layers.append((str(file), parse_properties(file.read_text())))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {file}: {exc.strerror}") from None
    layers.append(("environment", env_overrides(os.environ if environ is None else environ)))
    layers.append(("--override", overrides or {}))
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    for source, layer in layers:
        for k, v in layer.items():
            values[k] = v
            sources[k] = source
    return _validate(values, sources)


def _validate(values: dict[str, str], sources: dict[str, str]) -> NodeConfig:
    def need(key: str) -> str:
        if key not in values or not values[key].strip():
            raise ConfigError(f"{key} is required")
        return values[key].strip()

    try:
        node_id = int(need("node.id"))
    except ValueError:
        raise ConfigError(f"node.id={values['node.id']!r} must be an integer") from None
    roles = frozenset(r.strip() for r in need("process.roles").split(",") if r.strip())
    if not roles or not roles <= {"broker", "controller"}:
        raise ConfigError(
            f"process.roles={values['process.roles']!r}: use broker and/or controller"
        )
    listeners = parse_listeners(values.get("listeners", ""), "listeners")
    advertised = parse_listeners(values.get("advertised.listeners", ""), "advertised.listeners")
    by_name = {x.name: x for x in advertised}
    if unknown := sorted(set(by_name) - {x.name for x in listeners}):
        raise ConfigError(  # Kafka: a subset of the names of listeners
            f"advertised.listeners: {', '.join(unknown)} not among the names of listeners"
        )
    if address := values.get("advertised.address", "").strip():
        _advertise_address(address, listeners, by_name, values)
    for x in listeners:  # advertised defaults to listeners, 0.0.0.0 becomes loopback
        if x.name not in by_name:
            host = "127.0.0.1" if x.host in ("", "0.0.0.0", "::") else x.host
            by_name[x.name] = Listener(x.name, host, x.port)
    admin, admin_https = None, False
    if raw := values.get("admin.listener", "").strip():
        m = re.fullmatch(r"(https?)://(\[[^\]]*\]|[^:/]*):(\d+)/?", raw, re.IGNORECASE)
        if m is None:
            raise ConfigError(f"admin.listener={raw!r} is not http://host:port")
        # https: TLS from admin.ssl.* (else ssl.*) keys, checked where the API starts
        admin_https = m.group(1).lower() == "https"
        admin = (m.group(2).strip("[]"), _port(int(m.group(3)), "admin.listener"))
    log_dirs = tuple(
        Path(p.strip())
        for p in values.get("log.dirs", values.get("log.dir", "./kraft-data")).split(",")
        if p.strip()
    )
    if not log_dirs:
        raise ConfigError("log.dirs is empty: give at least one data directory")
    metadata_dir = Path(values.get("metadata.log.dir", str(log_dirs[0])))
    try:  # authorizer.class.name, super.users, allow.everyone.if.no.acl.found
        AuthorizerSettings.from_config(values)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return NodeConfig(
        node_id=node_id,
        process_roles=roles,
        listeners=tuple(listeners),
        advertised_listeners=tuple(by_name.values()),
        admin_listener=admin,
        admin_https=admin_https,
        log_dirs=log_dirs,
        metadata_log_dir=metadata_dir,
        values=dict(values),
        sources=dict(sources),
    )


def listener_limits(cfg: NodeConfig) -> ListenerLimits:
    """The limits of every Kafka listener of the node (the broker's and the controller's)."""
    max_frame_bytes = cfg.get_bounded_int("socket.request.max.bytes")
    queued = cfg.get_bounded_int("queued.max.request.bytes")
    if 0 < queued < max_frame_bytes:  # Kafka's KafkaConfig rule: one request must fit
        raise ConfigError(
            f"queued.max.request.bytes={queued} must be at least"
            f" socket.request.max.bytes={max_frame_bytes} (or -1: no limit)"
        )
    per_ip = cfg.get_bounded_int("max.connections.per.ip")
    raw_overrides = cfg.get("max.connections.per.ip.overrides") or ""
    try:
        overrides = parse_ip_overrides(raw_overrides, _addresses_of)
    except ValueError as exc:
        raise ConfigError(f"max.connections.per.ip.overrides: {exc}") from None
    if per_ip == 0 and not overrides:  # Kafka's rule, too
        raise ConfigError(
            "max.connections.per.ip=0 refuses every connection:"
            " give max.connections.per.ip.overrides, or a limit above 0"
        )
    return ListenerLimits(
        max_frame_bytes=max_frame_bytes,
        max_connections=cfg.get_bounded_int("max.connections"),
        max_connections_per_ip=per_ip,
        max_connections_per_ip_overrides=overrides,
        connections_max_idle_ms=cfg.get_bounded_int("connections.max.idle.ms"),
        queued_max_request_bytes=queued,
    )


def _addresses_of(host: str) -> list[str]:
    """Every address of ``host`` (max.connections.per.ip.overrides names hosts, too)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ValueError(f"cannot resolve {host!r}: {exc}") from None
    return sorted({str(info[4][0]) for info in infos})
