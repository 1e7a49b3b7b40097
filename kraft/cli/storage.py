"""``kraft storage format``: prepare a node's metadata directory, as ``kafka-storage format``.

    kraft storage format [--config FILE] [--cluster-id ID] [--ignore-formatted]
        [--add-scram 'SCRAM-SHA-256=[name=admin,password=admin-secret]' ...]

Writes ``meta.properties`` (cluster id and node id) and with ``--add-scram`` the bootstrap file
of SCRAM users that the controller appends when it starts the cluster. The settings come from
``--config`` and ``KRAFT_*`` variables, as ``kraft server`` reads them. As in Kafka, a directory
already formatted is an error, or with ``--ignore-formatted`` left unchanged (a container runs
the same command at every start).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kraft.node.config import ConfigError, load_config, parse_overrides


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    storage = sub.add_parser("storage", help="format a node's metadata directory")
    commands = storage.add_subparsers(dest="storage_command", metavar="COMMAND", required=True)
    fmt = commands.add_parser(
        "format",
        help="write meta.properties and the bootstrap SCRAM users (kafka-storage format)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fmt.add_argument(
        "--config", "-c", help="the node's properties file (default: KRAFT_* variables only)"
    )
    fmt.add_argument("--cluster-id", "-t", help="the cluster id (default: a new random one)")
    fmt.add_argument("--override", action="append", metavar="KEY=VALUE")
    fmt.add_argument(
        "--add-scram",
        "-S",
        action="append",
        default=[],
        metavar="MECHANISM=[name=...,password=...]",
        help="a SCRAM user to create with the cluster (repeatable)",
    )
    fmt.add_argument(
        "--ignore-formatted", "-g", action="store_true", help="succeed if already formatted"
    )
    fmt.set_defaults(func=cmd_format)


def cmd_format(args: argparse.Namespace) -> int:
    from kraft.node.bootstrap_scram import BootstrapScram, parse_add_scram, write_bootstrap_scram
    from kraft.node.run import ensure_meta_properties

    overrides = parse_overrides(args.override or [])
    if args.cluster_id:
        overrides["cluster.id"] = args.cluster_id
    cfg = load_config(Path(args.config) if args.config else None, overrides)
    try:
        users: list[BootstrapScram] = [parse_add_scram(text) for text in args.add_scram]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    meta = cfg.metadata_log_dir / "meta.properties"
    if meta.exists():
        if not args.ignore_formatted:
            print(
                f"kraft: {meta} exists: already formatted (use --ignore-formatted)", file=sys.stderr
            )
            return 1
        cluster_id = ensure_meta_properties(cfg)  # checks the node id
        if args.cluster_id and cluster_id != args.cluster_id:
            raise ConfigError(f"{meta} belongs to cluster {cluster_id}, not --cluster-id")
        print(f"{cfg.metadata_log_dir} is already formatted (cluster.id={cluster_id}): unchanged")
        return 0
    cluster_id = ensure_meta_properties(cfg)
    if users:
        try:
            path = write_bootstrap_scram(cfg.metadata_log_dir, users)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        print(f"Formatting {cfg.metadata_log_dir} with {len(users)} SCRAM user(s) in {path.name}")
    print(f"cluster.id={cluster_id} node.id={cfg.node_id} metadata.log.dir={cfg.metadata_log_dir}")
    return 0
