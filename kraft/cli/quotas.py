"""``kraft quotas``: client quotas of the cluster, through the REST API (Kafka's
``kafka-configs.sh --entity-type users/clients/ips --describe / --alter``).

kraft quotas describe [--user U] [--client-id C] [--ip A] [--strict]
kraft quotas alter [--user U] [--client-id C] [--ip A]
                   [--add-config k=v,k=v] [--delete-config k,k] [--validate-only]

A name is an entity's name, ``<default>`` its type's default entity, and (describe only) ``*``
any name of that type.
"""

from __future__ import annotations

import argparse
from typing import Any

from kraft.cli.arguments import command_family
from kraft.cli.output import format_table, print_result
from kraft.cli.rest_client import AdminClient, command

DEFAULT = "<default>"
# (option, entity type): --user is the REST login's, so the quota user is --quota-user
ENTITY_OPTIONS = (("quota-user", "user"), ("client-id", "client-id"), ("ip", "ip"))


def _given(args: argparse.Namespace, option: str) -> str | None:
    value = getattr(args, option.replace("-", "_"))
    assert value is None or isinstance(value, str)
    return value


def _entity_text(entity: dict[str, str | None]) -> str:
    return ", ".join(f"{t}={DEFAULT if n is None else n}" for t, n in sorted(entity.items()))


@command
def quotas_describe(args: argparse.Namespace, client: AdminClient) -> int:
    query = {name: _given(args, option) for option, name in ENTITY_OPTIONS if _given(args, option)}
    if args.strict:
        query["strict"] = "true"
    quotas = client.call("GET", "/v1/quotas", query=query or None).body
    rows = [
        (_entity_text(q["entity"]), key, value)
        for q in quotas
        for key, value in sorted(q["quotas"].items())
    ]
    return print_result(args.json, quotas, lambda: format_table(("ENTITY", "QUOTA", "VALUE"), rows))


def _parse_configs(text: str | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in filter(None, (text or "").split(",")):
        key, sep, value = item.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise argparse.ArgumentTypeError(f"--add-config wants key=number, got {item!r}")
    return out


@command
def quotas_alter(args: argparse.Namespace, client: AdminClient) -> int:
    entity: dict[str, Any] = {
        name: None if _given(args, option) == DEFAULT else _given(args, option)
        for option, name in ENTITY_OPTIONS
        if _given(args, option) is not None
    }
    body = {
        "entity": entity,
        "set": _parse_configs(args.add_config),
        "remove": [k.strip() for k in (args.delete_config or "").split(",") if k.strip()],
        "validate_only": args.validate_only,
    }
    result = client.call("POST", "/v1/quotas", body).body
    verb = "Validated" if args.validate_only else "Altered"
    return print_result(
        args.json,
        result,
        lambda: (
            f"{verb} the quotas of {_entity_text(result['entity'])}: "
            + (", ".join(f"{k}={v}" for k, v in result["quotas"].items()) or "none left")
        ),
    )


def _entity_options(parser: argparse.ArgumentParser, any_allowed: bool) -> None:
    extra = ", * for any" if any_allowed else ""
    for option, name in ENTITY_OPTIONS:
        help_text = f"the {name} (<default>: the default{extra})"
        parser.add_argument(f"--{option}", metavar="NAME", help=help_text)


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    actions = command_family(sub, "quotas", "describe and alter client quotas")
    describe = actions.add_parser("describe", parents=[common], help="quotas by entity")
    _entity_options(describe, any_allowed=True)
    describe.add_argument("--strict", action="store_true", help="exactly these entity types")
    describe.set_defaults(func=quotas_describe)
    alter = actions.add_parser("alter", parents=[common], help="set and remove an entity's quotas")
    _entity_options(alter, any_allowed=False)
    alter.add_argument("--add-config", metavar="K=V,...", help="e.g. producer_byte_rate=1048576")
    alter.add_argument("--delete-config", metavar="K,...", help="quota keys to remove")
    alter.add_argument("--validate-only", action="store_true")
    alter.set_defaults(func=quotas_alter)
