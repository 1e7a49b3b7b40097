"""The files of a ``kraft dev`` cluster: its identity and each node's properties.

``<data-dir>/cluster.properties`` (mode 0600) holds the cluster id, the controllers' Raft
password and the number of controllers; they are generated once, so starting ``kraft dev``
again on the same directory restarts the same cluster with its data. Each node has
``<data-dir>/node-<id>/`` with ``server.properties`` (rewritten on every start; ``--override``
settings go to every node), ``metadata/`` and ``logs/``.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kraft.node.config import ConfigError, parse_properties
from kraft.node.dev_cluster_plan import HOST, ClusterPlan, NodeSpec

IDENTITY_FILE = "cluster.properties"
IDENTITY_KEYS = ("cluster.id", "controller.quorum.password", "controllers")
_IDENTITY_HEADER = "kraft dev: this local cluster's identity; keep it with the node directories"
NODE_CONFIG_FILE = "server.properties"


@dataclass(frozen=True, slots=True)
class ClusterIdentity:
    """What must stay the same across restarts of one local cluster."""

    cluster_id: str
    quorum_password: str
    controllers: int


def new_cluster_id() -> str:
    """Kafka's format: a random UUID, URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def load_or_create_identity(data_dir: Path, controllers: int) -> ClusterIdentity:
    """Read ``<data-dir>/cluster.properties``, or create it on the first start."""
    path = data_dir / IDENTITY_FILE
    if not path.exists():
        identity = ClusterIdentity(new_cluster_id(), secrets.token_urlsafe(24), controllers)
        write_private(path, render_properties(_identity_properties(identity), _IDENTITY_HEADER))
        return identity
    try:
        props = parse_properties(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    missing = [k for k in IDENTITY_KEYS if not props.get(k)]
    if missing:
        raise ConfigError(
            f"{path} lacks {', '.join(missing)}; restore it or use another --data-dir"
        )
    if props["controllers"] != str(controllers):
        raise ConfigError(
            f"{path}: this cluster has {props['controllers']} controllers; run with"
            f" --controllers {props['controllers']} or use another --data-dir"
        )
    return ClusterIdentity(props["cluster.id"], props["controller.quorum.password"], controllers)


def _identity_properties(identity: ClusterIdentity) -> dict[str, str]:
    return {
        "cluster.id": identity.cluster_id,
        "controller.quorum.password": identity.quorum_password,
        "controllers": str(identity.controllers),
    }


def node_properties(
    spec: NodeSpec,
    plan: ClusterPlan,
    identity: ClusterIdentity,
    data_dir: Path,
    overrides: Mapping[str, str],
    node_settings: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The ``server.properties`` of one node; ``node_settings`` (this node's, e.g. its TLS
    keys) and then ``overrides`` win over generated values."""
    node_dir = data_dir / spec.name
    props = {
        "node.id": str(spec.node_id),
        "process.roles": spec.role,
        "cluster.id": identity.cluster_id,
    }
    if spec.role == "controller":
        props["controller.quorum.voters"] = plan.quorum_voters
        props["controller.quorum.password"] = identity.quorum_password
        props["controller.listener.names"] = "CONTROLLER"
        props["listeners"] = f"CONTROLLER://{HOST}:{spec.port}"
        # a standby controller's REST API forwards writes to the active one through these
        props["controller.quorum.bootstrap.servers"] = plan.quorum_bootstrap_servers
    else:
        props["controller.quorum.bootstrap.servers"] = plan.quorum_bootstrap_servers
        props["listeners"] = f"PLAINTEXT://{HOST}:{spec.port}"
        if spec.rack is not None:
            props["broker.rack"] = spec.rack
    props["admin.listener"] = spec.admin_url
    props["log.dirs"] = str(node_dir / "logs")
    props["metadata.log.dir"] = str(node_dir / "metadata")
    if node_settings and spec.role != "controller":  # a broker's listener takes the protocol
        props["listeners"] = f"SASL_SSL://{HOST}:{spec.port}"
    return {**props, **(node_settings or {}), **overrides}


def render_properties(props: Mapping[str, str], header: str) -> str:
    """Java properties text that :func:`kraft.node.config.parse_properties` reads back exactly."""
    lines = [f"# {header}"]
    lines += [f"{_escape(k, key=True)}={_escape(v, key=False)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}
_UNWRITABLE = re.compile("[\v\x1c-\x1e\x85\u2028\u2029]")  # line breaks with no escape


def _escape(text: str, *, key: bool) -> str:
    if _UNWRITABLE.search(text):
        raise ConfigError(f"{text!r}: this line-break character cannot go in a properties file")
    out = "".join(_ESCAPES.get(ch, ch) for ch in text)
    if key:
        return re.sub(r"([=:\s#!])", r"\\\1", out)
    return "\\" + out if out[:1] == " " else out


def write_node_configs(
    plan: ClusterPlan,
    identity: ClusterIdentity,
    data_dir: Path,
    overrides: Mapping[str, str],
    node_settings: Mapping[int, Mapping[str, str]] | None = None,
) -> dict[int, Path]:
    """Write every node's ``server.properties`` (mode 0600: controllers' hold the password)."""
    paths = {}
    for spec in plan.nodes:
        path = data_dir / spec.name / NODE_CONFIG_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        settings = (node_settings or {}).get(spec.node_id)
        props = node_properties(spec, plan, identity, data_dir, overrides, settings)
        header = f"generated by kraft dev for {spec.name} ({spec.role}); rewritten on every start"
        write_private(path, render_properties(props, header))
        paths[spec.node_id] = path
    return paths


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (mode 0600 from the start)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    tmp.replace(path)
