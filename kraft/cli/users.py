"""``kraft users``: SCRAM users of the cluster, through the REST API (Kafka's
``kafka-configs.sh --entity-type users --alter --add-config 'SCRAM-SHA-256=[...]'``).

kraft users create NAME --user-password PW [--mechanism SCRAM-SHA-256] [--iterations N]
kraft users list | delete NAME [--mechanism M]
"""

from __future__ import annotations

import argparse
import urllib.parse

from kraft.cli.arguments import command_family, positive_int
from kraft.cli.output import format_table, print_json, print_result
from kraft.cli.rest_client import AdminClient, command

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def user_path(name: str) -> str:
    return "/v1/users/" + urllib.parse.quote(name, safe="")


@command
def users_create(args: argparse.Namespace, client: AdminClient) -> int:
    body = {"name": args.name, "password": args.user_password, "mechanism": args.mechanism}
    if args.iterations is not None:
        body["iterations"] = args.iterations
    user = client.call("POST", "/v1/users", body).body
    return print_result(
        args.json,
        user,
        lambda: (
            f"Set {user['mechanism']} credentials of user {args.name}"
            f" ({user['iterations']} iterations)."
        ),
    )


@command
def users_list(args: argparse.Namespace, client: AdminClient) -> int:
    users = client.call("GET", "/v1/users").body
    rows = [(u["name"], c["mechanism"], c["iterations"]) for u in users for c in u["credentials"]]
    return print_result(
        args.json, users, lambda: format_table(("USER", "MECHANISM", "ITERATIONS"), rows)
    )


@command
def users_delete(args: argparse.Namespace, client: AdminClient) -> int:
    query = {"mechanism": args.mechanism} if args.mechanism else None
    client.call("DELETE", user_path(args.name), query=query)
    if args.json:
        print_json({"name": args.name, "deleted": True})
    else:
        print(f"Deleted the SCRAM credentials of user {args.name}.")
    return 0


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    actions = command_family(sub, "users", "create, list and delete SCRAM users")
    create = actions.add_parser("create", parents=[common], help="create or update a user")
    create.add_argument("name")
    create.add_argument(
        "--user-password", required=True, metavar="PASSWORD", help="the new user's password"
    )
    create.add_argument("--mechanism", choices=MECHANISMS, default=MECHANISMS[0])
    create.add_argument("--iterations", type=positive_int, metavar="N", help="default 4096")
    create.set_defaults(func=users_create)
    actions.add_parser("list", parents=[common], help="users and mechanisms").set_defaults(
        func=users_list
    )
    delete = actions.add_parser("delete", parents=[common], help="delete a user's credentials")
    delete.add_argument("name")
    delete.add_argument("--mechanism", choices=MECHANISMS, help="only this one")
    delete.set_defaults(func=users_delete)
