"""``kraft acls``: create, list and delete ACLs through the REST API, with the flags of Kafka's
``kafka-acls.sh``.

kraft acls create --allow-principal User:alice --operation Read --topic orders
                  [--group G] [--cluster] [--resource-pattern-type literal|prefixed]
                  [--allow-host H] [--deny-principal P] [--deny-host H]
kraft acls list   [--topic T] [--group G] [--cluster] [--principal P]
kraft acls delete (the flags of create; an omitted one matches every value)

As with ``kafka-acls.sh``, one ACL is made for each combination of principal, host, operation
and resource given.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from kraft.cli.arguments import command_family
from kraft.cli.output import fail, format_table, print_result
from kraft.cli.rest_client import AdminClient, command

CLUSTER_NAME = "kafka-cluster"
COLUMNS = (
    "principal",
    "permission_type",
    "operation",
    "host",
    "resource_type",
    "resource_name",
    "pattern_type",
)
PATTERN_TYPES = ("literal", "prefixed", "match", "any")


def operation_name(text: str) -> str:
    """kafka-acls spells operations in CamelCase (``DescribeConfigs``); the API upper-case."""
    text = text.strip()
    if "_" in text or text.isupper() or text.islower():
        return text.upper()
    return "".join("_" + c if c.isupper() and i else c for i, c in enumerate(text)).upper()


def resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    found = [("TOPIC", t) for t in args.topic or []]
    found += [("GROUP", g) for g in args.group or []]
    found += [("TRANSACTIONAL_ID", t) for t in args.transactional_id or []]
    if args.cluster:
        found.append(("CLUSTER", CLUSTER_NAME))
    return found


def bindings(args: argparse.Namespace, *, filters: bool) -> list[dict[str, Any]]:
    """One ACL (or filter) per principal x host x operation x resource."""
    pattern = None if args.resource_pattern_type is None else args.resource_pattern_type.upper()
    grants: list[tuple[str | None, str | None]] = [
        ("ALLOW", p) for p in args.allow_principal or []
    ] + [("DENY", p) for p in args.deny_principal or []]
    if filters and not grants:
        grants = [(None, None)]
    out = []
    operations: list[str | None] = args.operation or ([None] if filters else ["ALL"])
    named: list[tuple[str, str] | None] = [*resources(args)] or [None]
    for (permission, principal), operation, resource in itertools.product(
        grants, operations, named
    ):
        hosts = (args.allow_host if permission == "ALLOW" else args.deny_host) or [
            None if filters else "*"
        ]
        for host in hosts:
            acl: dict[str, Any] = {
                "principal": principal,
                "permission_type": permission,
                "operation": operation and operation_name(operation),
                "host": host,
                "resource_type": resource and resource[0],
                "resource_name": resource and resource[1],
                "pattern_type": pattern or (None if filters else "LITERAL"),
            }
            out.append({k: v for k, v in acl.items() if v is not None})
    return out


def _acl_table(acls: list[dict[str, Any]]) -> str:
    rows = [[acl[c] for c in COLUMNS] for acl in acls]
    return format_table([c.upper() for c in COLUMNS], rows)


@command
def acls_create(args: argparse.Namespace, client: AdminClient) -> int:
    if not (args.allow_principal or args.deny_principal) or not resources(args):
        return fail(
            "INVALID_REQUEST",
            "give --allow-principal or --deny-principal, and --topic, --group, --cluster or"
            " --transactional-id",
        )
    created = client.call("POST", "/v1/acls", {"acls": bindings(args, filters=False)}).body
    return print_result(args.json, created, lambda: "Added ACLs:\n" + _acl_table(created["acls"]))


@command
def acls_list(args: argparse.Namespace, client: AdminClient) -> int:
    (query,) = bindings(args, filters=True)[:1] or [{}]
    if args.principal:
        query["principal"] = args.principal
    acls = client.call("GET", "/v1/acls", query=query).body
    return print_result(args.json, acls, lambda: _acl_table(acls))


@command
def acls_delete(args: argparse.Namespace, client: AdminClient) -> int:
    if not (resources(args) or args.allow_principal or args.deny_principal):
        return fail("INVALID_REQUEST", "say which ACLs: give a resource or a principal")
    body = {"filters": bindings(args, filters=True)}
    deleted = client.call("DELETE", "/v1/acls", body).body
    return print_result(
        args.json, deleted, lambda: "Removed ACLs:\n" + _acl_table(deleted["deleted"])
    )


def _resource_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", action="append", metavar="TOPIC")
    parser.add_argument("--group", action="append", metavar="GROUP")
    parser.add_argument("--transactional-id", action="append", metavar="ID")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument(
        "--resource-pattern-type", type=str.lower, choices=PATTERN_TYPES, default=None
    )


def _grant_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-principal", action="append", metavar="User:NAME")
    parser.add_argument("--deny-principal", action="append", metavar="User:NAME")
    parser.add_argument("--allow-host", action="append", metavar="HOST", help="default: *")
    parser.add_argument("--deny-host", action="append", metavar="HOST", help="default: *")
    parser.add_argument(
        "--operation", action="append", metavar="OP", help="Read, Write, Create, ..., All"
    )


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    actions = command_family(sub, "acls", "create, list and delete ACLs (as kafka-acls.sh)")
    create = actions.add_parser("create", parents=[common], help="add ACLs")
    delete = actions.add_parser("delete", parents=[common], help="remove matching ACLs")
    for parser in (create, delete):
        _resource_options(parser)
        _grant_options(parser)
    create.set_defaults(func=acls_create)
    delete.set_defaults(func=acls_delete)
    listing = actions.add_parser("list", parents=[common], help="ACLs, filtered")
    _resource_options(listing)
    listing.add_argument("--principal", metavar="User:NAME")
    listing.set_defaults(func=acls_list, allow_principal=None, deny_principal=None, operation=None)
    listing.set_defaults(allow_host=None, deny_host=None)
