"""``kraft cluster status``: the cluster id, the controller quorum and the brokers (with any
offline log directory); ``kraft cluster unregister --broker-id N``: remove a stale (fenced)
broker's registration (Kafka's UnregisterBroker)."""

from __future__ import annotations

import argparse
from typing import Any

from kraft.cli.arguments import command_family
from kraft.cli.output import format_table, print_json, print_result
from kraft.cli.rest_client import AdminClient, command


@command
def cluster_status(args: argparse.Namespace, client: AdminClient) -> int:
    cluster = client.call("GET", "/v1/cluster").body
    return print_result(args.json, cluster, lambda: _status_text(cluster))


def _status_text(cluster: dict[str, Any]) -> str:
    controller = cluster["controller"]
    voters = ", ".join(
        f"{v['id']}" + (f"@{v['address']}" if v.get("address") else "") + f" (lag {v['lag']})"
        for v in controller["voters"]
    )
    columns = ("id", "host", "port", "rack", "fenced", "epoch")
    rows = [
        [*(b[column] for column in columns), ",".join(b.get("offline_log_dirs", [])) or "-"]
        for b in cluster["brokers"]
    ]
    return "\n".join(
        [
            f"Cluster: {cluster['cluster_id']}",
            f"Controller: leader {controller['leader_id']}, epoch {controller['epoch']}",
            f"Voters: {voters}",
            format_table(
                ("BROKER", "HOST", "PORT", "RACK", "FENCED", "EPOCH", "OFFLINE LOG DIRS"), rows
            ),
        ]
    )


@command
def cluster_unregister(args: argparse.Namespace, client: AdminClient) -> int:
    client.call("DELETE", f"/v1/cluster/brokers/{args.broker_id}")
    if args.json:
        print_json({"broker_id": args.broker_id, "unregistered": True})
    else:
        print(f"Unregistered broker {args.broker_id}.")
    return 0


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    actions = command_family(sub, "cluster", "cluster status, broker unregistration")
    status = actions.add_parser("status", parents=[common], help="controller and brokers")
    status.set_defaults(func=cluster_status)
    unregister = actions.add_parser(
        "unregister",
        parents=[common],
        help="remove a stale broker registration (the broker must be stopped and fenced)",
    )
    unregister.add_argument("--broker-id", type=int, required=True, metavar="N")
    unregister.set_defaults(func=cluster_unregister)
