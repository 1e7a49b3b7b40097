"""``kraft cluster status``: the cluster id, the controller quorum and the brokers."""

from __future__ import annotations

import argparse

from kraft.cli.output import format_table, print_json
from kraft.cli.rest_client import AdminClient, command


@command
def cluster_status(args: argparse.Namespace, client: AdminClient) -> int:
    cluster = client.call("GET", "/v1/cluster").body
    if args.json:
        print_json(cluster)
        return 0
    controller = cluster["controller"]
    voters = ", ".join(
        f"{v['id']}" + (f"@{v['address']}" if v.get("address") else "") + f" (lag {v['lag']})"
        for v in controller["voters"]
    )
    print(f"Cluster: {cluster['cluster_id']}")
    print(f"Controller: leader {controller['leader_id']}, epoch {controller['epoch']}")
    print(f"Voters: {voters}")
    columns = ("id", "host", "port", "rack", "fenced", "epoch")
    rows = [[b[column] for column in columns] for b in cluster["brokers"]]
    print(format_table(("BROKER", "HOST", "PORT", "RACK", "FENCED", "EPOCH"), rows))
    return 0


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    cluster = sub.add_parser("cluster", help="cluster status")
    actions = cluster.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    status = actions.add_parser("status", parents=[common], help="controller and brokers")
    status.set_defaults(func=cluster_status)
