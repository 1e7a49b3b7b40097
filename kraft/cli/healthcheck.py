"""``kraft healthcheck``: does this node's REST API answer where the node is configured to serve it?

    kraft healthcheck [--ready] [--config FILE] [--override key=value ...] [--pid N]

The container's HEALTHCHECK (and docker-compose.yml's): it reads the configuration exactly as
``kraft server`` does (``--config``, ``KRAFT_*`` variables, ``--override``), so the probe follows
``admin.listener`` -- its scheme, host and port -- wherever it is moved.  Given neither
``--config`` nor ``--override``, it takes those the node was started with from the node's
command line (``/proc/<pid>/cmdline``; ``--pid`` defaults to 1, the node in its container), so
``docker run IMAGE --config FILE`` or ``--override admin.listener=...`` is followed too.
``GET /v1/health`` must answer 200 with this node's ``node.id`` (an answer from another
process on that port is not this node's health), and with ``--ready`` ``GET /v1/ready`` must
answer 200 too (the node serves clients).  Over https the certificate is checked against the
CA the node trusts (``admin.ssl.truststore.location``, else ``ssl.truststore.location``, else
the CA that ``security.autoconfigure`` generated); the host name is not, because the probe
connects to the node's own loopback address, which a user's certificate need not name.

Exit status 0 healthy, 1 not (one line on stderr says why), as Docker's HEALTHCHECK reads it.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path

from kraft.node.config import ConfigError, NodeConfig, load_config, parse_overrides
from kraft.node.dev_secure import SECURE_DIR

# The wildcard addresses a listener binds; the probe connects to the loopback of that family.
_LOOPBACK = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "healthcheck",
        help="probe this node's REST API at its configured admin.listener (exit 0 healthy)",
        description=__doc__.split("\n\n", 2)[2] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="the properties file kraft server reads")
    parser.add_argument("--override", action="append", metavar="KEY=VALUE")
    parser.add_argument(
        "--ready", action="store_true", help="also require GET /v1/ready (serving clients)"
    )
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds per request")
    parser.add_argument(
        "--pid",
        type=int,
        default=1,
        help="the `kraft server` process whose --config/--override to read when none are given"
        " (default 1: the node in its container)",
    )
    parser.set_defaults(func=cmd_healthcheck)


def cmd_healthcheck(args: argparse.Namespace) -> int:
    config, overrides = args.config, args.override or []
    if config is None and not overrides and (node := node_options(args.pid)) is not None:
        config, overrides = node.config, node.override or []
    try:
        cfg = load_config(Path(config) if config else None, parse_overrides(overrides))
        problem = probe(cfg, ready=args.ready, timeout_s=args.timeout)
    except ConfigError as exc:  # status 2 is reserved by Docker: unhealthy is 1
        problem = f"configuration error: {exc}"
    if problem is None:
        return 0
    print(f"kraft healthcheck: {problem}", file=sys.stderr)
    return 1


def node_options(pid: int) -> argparse.Namespace | None:
    """The ``--config``/``--override`` options of process ``pid`` if it is ``kraft server``
    (``kraft server ...`` or ``python -m kraft.cli server ...``), else None."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    argv = raw.decode(errors="replace").split("\0")[:-1]
    for i, arg in enumerate(argv[:-1]):
        if (Path(arg).name == "kraft" or arg == "kraft.cli") and argv[i + 1] == "server":
            server = argparse.ArgumentParser(add_help=False)
            server.add_argument("--config")
            server.add_argument("--override", action="append")
            options, _ = server.parse_known_args(argv[i + 2 :])
            return options
    return None


def admin_url(cfg: NodeConfig) -> str:
    """The URL of the node's REST API as seen from the node's own host."""
    if cfg.admin_listener is None:
        raise ConfigError("admin.listener is not set: this node serves no REST API to probe")
    host, port = cfg.admin_listener
    host = _LOOPBACK.get(host, host)
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if cfg.admin_https else 'http'}://{host}:{port}"


def trusted_ca(cfg: NodeConfig) -> Path | None:
    """The CA file the node's REST certificate is checked against (None: not checked)."""
    for key in ("admin.ssl.truststore.location", "ssl.truststore.location"):
        if location := cfg.get(key):
            return Path(location)
    generated = cfg.metadata_log_dir / SECURE_DIR / "ca" / "ca.pem"
    if cfg.get_bool("security.autoconfigure", False) and generated.exists():
        return generated
    return None


def probe(cfg: NodeConfig, *, ready: bool, timeout_s: float) -> str | None:
    """None when healthy, else what is wrong."""
    url = admin_url(cfg)
    context = None
    if cfg.admin_https:
        ca = trusted_ca(cfg)
        context = ssl.create_default_context(cafile=str(ca) if ca else None)
        context.check_hostname = False
        if ca is None:
            context.verify_mode = ssl.CERT_NONE
    try:
        health = _get_json(url + "/v1/health", context, timeout_s)
        if health.get("node_id") != cfg.node_id:
            return (
                f"{url}/v1/health answers for node {health.get('node_id')!r}, not for this"
                f" node ({cfg.node_id}): another process serves that port"
            )
        if ready:
            _get_json(url + "/v1/ready", context, timeout_s)
    except urllib.error.HTTPError as exc:
        return f"{exc.url}: HTTP {exc.code}"
    except (OSError, ValueError) as exc:  # URLError, TLS, timeouts, not JSON
        return f"{url}: {getattr(exc, 'reason', exc)}"
    return None


def _get_json(url: str, context: ssl.SSLContext | None, timeout_s: float) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=timeout_s, context=context) as response:
        body = json.loads(response.read())
    if not isinstance(body, dict):
        raise ValueError(f"{url} answered {body!r}, not a JSON object")
    return body
