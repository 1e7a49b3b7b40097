"""The ``kraft`` command line.

    kraft dev [--data-dir DIR] [--port N] [--admin-port N]    one combined node, for development
    kraft dev --controllers 3 --brokers 3                     a local cluster of processes
    kraft dev --secure                                        TLS + SCRAM, generated CA/password
    kraft server [--config FILE] [--override key=value ...]   one node, exactly as a container runs
    kraft storage format --config FILE [--add-scram ...]      format a node (kafka-storage format)
    kraft healthcheck [--ready] [--config FILE]               probe the node's configured REST API
    kraft topics|groups|transactions|produce|consume|...      admin commands over the REST API
    kraft --help                                              every command (one module each)

Errors in configuration exit with status 2 and one line that names the key and its source.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kraft import __version__
from kraft.cli import (
    acls,
    arguments,
    certs,
    cluster,
    elect,
    groups,
    healthcheck,
    quotas,
    reassign,
    records,
    storage,
    topics,
    transactions,
    users,
)
from kraft.node.config import ConfigError, NodeConfig, StartupError, load_config, parse_overrides

if TYPE_CHECKING:
    from kraft.node.dev_secure import SecureDev


def _setup_logging() -> None:
    level = os.environ.get("KRAFT_LOG_LEVEL", "WARNING").upper()
    logging.basicConfig(
        level=getattr(logging, level, logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


def dev_config(args: argparse.Namespace, secure: dict[str, str] | None = None) -> NodeConfig:
    """``secure``: the settings of ``--secure`` (between the defaults and ``--override``)."""
    port = args.port
    admin_port = args.admin_port
    if admin_port is None:  # derived: 9092 -> 8080, N -> N - 1012; any free port for --port 0
        admin_port = port - 1012 if port > 1012 else 0
    data = Path(args.data_dir)
    return load_config(
        overrides={
            "node.id": "1",
            "process.roles": "broker,controller",
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            # --secure: the REST API over https too, with the same keystore
            "admin.listener": f"{'https' if secure else 'http'}://127.0.0.1:{admin_port}",
            "log.dirs": str(data / "logs"),
            "metadata.log.dir": str(data / "metadata"),
            **(secure or {}),
            **parse_overrides(args.override or []),
        },
        environ={},
    )


def _announce(line: str) -> None:
    print(line, flush=True)


def cmd_dev(args: argparse.Namespace) -> int:
    if args.parent_pid is not None:
        from kraft.node.dev_cluster import exit_with_parent

        exit_with_parent(args.parent_pid)
    if args.controllers != 1 or args.brokers != 1:
        from kraft.node.dev_cluster import run_dev_cluster

        return run_dev_cluster(
            Path(args.data_dir),
            args.controllers,
            args.brokers,
            args.port,
            args.admin_port,
            parse_overrides(args.override or []),
            _announce,
            secure=args.secure,
        )
    from kraft.node.run import run, serve

    if not args.secure:
        cfg = dev_config(args)
        run(lambda: serve(cfg, _announce))
        return 0
    from kraft.node.dev_secure import prepare_secure_dev

    data = Path(args.data_dir)
    secure = prepare_secure_dev(data, data / "metadata")
    cfg = dev_config(args, secure.overrides(args.port))

    def announce(line: str) -> None:  # the settings first: READY means all is printed
        bootstrap = line.split("bootstrap=", 1)[1].split()[0]
        print(secure.client_settings(bootstrap), file=sys.stderr, flush=True)
        if "admin=" in line:
            print(_cli_settings(line.split("admin=", 1)[1].split()[0], secure), file=sys.stderr)
        _announce(line)

    run(lambda: serve(cfg, announce))
    return 0


def _cli_settings(admin: str, secure: SecureDev) -> str:
    password = secure.password if secure.new_password else f"$(cat {secure.password_file})"
    return (
        "kraft CLI (REST admin API):\n"
        f"  export KRAFT_ADMIN={admin} KRAFT_ADMIN_USER=admin KRAFT_ADMIN_PASSWORD={password}\n"
        f"  kraft topics list --ca-file {secure.ca_file}"
    )


def cmd_server(args: argparse.Namespace) -> int:
    from kraft.node.run import run, serve

    if args.parent_pid is not None:
        from kraft.node.dev_cluster import exit_with_parent

        exit_with_parent(args.parent_pid)
    from kraft.node.autoconfigure import load_autoconfigured

    cfg = load_autoconfigured(
        Path(args.config) if args.config else None, parse_overrides(args.override or [])
    )
    run(lambda: serve(cfg, _announce))
    return 0


_DEV_EPILOG = """\
With --controllers 1 --brokers 1 (the default) one process is both controller and broker.
Otherwise controllers get node ids 1..M and brokers M+1..M+N (racks rack-1..rack-3 in turn),
with P = --port and A = --admin-port, counting brokers i and controllers j from 0:

  node            Kafka listener            Raft (pysyncobj)   REST admin API
  broker i        PLAINTEXT   P + i         -                  A + i
  controller j    CONTROLLER  P + 100 + j   P + 200 + j        A + 100 + j

e.g. 3 + 3 nodes: brokers 9092-9094 (admin 8080-8082), controllers 9192-9194 (Raft
9292-9294, admin 8180-8182). --port 0 / --admin-port 0 pick free ports. The READY line lists
every broker: READY bootstrap=127.0.0.1:9092,127.0.0.1:9093,... admin=http://127.0.0.1:8080.
DIR/cluster.properties keeps the cluster id and Raft password, so a restart on the same
--data-dir resumes the same cluster; each node's files are under DIR/node-<id>/.
--secure: SASL_SSL listeners (SCRAM-SHA-256/512, PLAIN) with a CA, certificates and the admin
password generated under DIR/secure/ (the password printed once), SASL_SSL between the nodes
of a cluster, super.users=User:admin and the StandardAuthorizer."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kraft", description="A Kafka-compatible streaming platform in Python."
    )
    parser.add_argument("--version", action="version", version=f"kraft {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    dev = sub.add_parser(
        "dev",
        help="run one combined node, or a local cluster, for development",
        description="Run one combined node (the default), or with --controllers/--brokers a\n"
        "local cluster of separate `kraft server` processes, until Ctrl-C / SIGTERM.",
        epilog=_DEV_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dev.add_argument("--data-dir", default="./kraft-data", metavar="DIR")
    dev.add_argument("--port", type=int, default=9092, help="Kafka port (0: any free port)")
    dev.add_argument(
        "--admin-port", type=int, default=None, help="REST port (default: --port - 1012, so 8080)"
    )
    dev.add_argument(
        "--controllers", type=int, default=1, choices=(1, 3, 5), help="controller processes"
    )
    dev.add_argument("--brokers", type=int, default=1, help="broker processes (1 to 100)")
    dev.add_argument(
        "--secure",
        action="store_true",
        help="TLS + SASL (SCRAM, PLAIN) on 127.0.0.1 with a generated CA and admin password,"
        " the StandardAuthorizer on (one combined node)",
    )
    dev.add_argument(
        "--override", action="append", metavar="KEY=VALUE", help="a setting for every node"
    )
    # a test harness's process: stop when it dies, whatever killed it (as `server` takes it)
    dev.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    dev.set_defaults(func=cmd_dev)

    server = sub.add_parser("server", help="run one node from a properties file and KRAFT_* env")
    server.add_argument("--config", help="Java-properties file with Kafka's key names")
    server.add_argument("--override", action="append", metavar="KEY=VALUE")
    # kraft dev's launcher: stop when that process dies, whatever killed it
    server.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    server.set_defaults(func=cmd_server)
    healthcheck.add_parser(sub)
    storage.add_parser(sub)

    add_admin_commands(sub)
    return parser


def add_admin_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add every command family but ``dev`` and ``server`` to the ``kraft`` parser (in the order
    ``kraft --help`` lists them)."""
    common = arguments.common_options()
    topics.add_parser(sub, common)
    groups.add_parser(sub, common)
    transactions.add_parser(sub, common)
    records.add_parser(sub, common)
    cluster.add_parser(sub, common)
    users.add_parser(sub, common)
    acls.add_parser(sub, common)
    quotas.add_parser(sub, common)
    elect.add_parser(sub)
    reassign.add_parser(sub)
    certs.add_parser(sub)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    _setup_logging()
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"kraft: configuration error: {exc}", file=sys.stderr)
        return 2
    except StartupError as exc:
        print(f"kraft: cannot start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
