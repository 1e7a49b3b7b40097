"""``kraft groups``: list, describe and delete consumer groups, and reset their offsets, through
the REST API; the tables are those of Kafka's ``kafka-consumer-groups.sh``.

    kraft groups list | describe GROUP [--members | --state] | delete GROUP
    kraft groups reset-offsets GROUP (--topic T ... | --all-topics)
                 (--to-earliest | --to-latest | --to-datetime ISO | --to-offset N) [--execute]
"""

from __future__ import annotations

import argparse
import datetime
import sys
import urllib.parse
from typing import Any, Final

from kraft.cli.arguments import command_family, non_negative_int
from kraft.cli.output import format_table, print_json, print_result
from kraft.cli.rest_client import AdminClient, AdminError, command

OFFSET_COLUMNS: Final = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
)
REBALANCING: Final = ("PreparingRebalance", "CompletingRebalance")


def group_path(group: str, *rest: str) -> str:
    return "/".join(["/v1/groups", urllib.parse.quote(group, safe=""), *rest])


def group_of(args: argparse.Namespace) -> str:
    """The group, given as the argument or with ``--group`` (Kafka's spelling)."""
    given = {g for g in (args.group, args.group_option) if g is not None}
    if len(given) != 1:
        problem = "give the group once" if given else "no group given"
        raise AdminError(
            "INVALID_ARGUMENTS", f"{problem}: kraft groups {args.groups_command} GROUP"
        )
    return str(given.pop())


@command
def groups_list(args: argparse.Namespace, client: AdminClient) -> int:
    groups = client.call("GET", "/v1/groups").body
    rows = [
        (
            g["group_id"],
            g.get("group_type", "classic"),
            g["state"],
            g["protocol_type"],
            g["coordinator"],
        )
        for g in groups
    ]
    headers = ("GROUP", "TYPE", "STATE", "PROTOCOL-TYPE", "COORDINATOR")
    return print_result(args.json, groups, lambda: format_table(headers, rows))


@command
def groups_describe(args: argparse.Namespace, client: AdminClient) -> int:
    group = client.call("GET", group_path(group_of(args))).body
    if args.json:
        print_json(group)
    elif args.state:
        print(group_state_text(group))
    else:
        print(
            group_notes(group)
            + (group_members_text(group) if args.members else offsets_text(group))
        )
    return 0


def group_notes(group: dict[str, Any]) -> str:
    """Kafka's remarks above the table (an empty group, a rebalance), each on its own line."""
    notes = ""
    if group["state"] in REBALANCING:
        notes += f"Warning: Consumer group '{group['group_id']}' is rebalancing.\n"
    if not group["members"]:
        notes += f"Consumer group '{group['group_id']}' has no active members.\n"
    return notes


def offsets_text(group: dict[str, Any]) -> str:
    """``kafka-consumer-groups.sh --describe``: a row per partition (assigned or with a
    committed offset), then members without partitions; ``-`` where there is no value."""
    members = {m["member_id"]: m for m in group["members"]}
    rows: list[list[object]] = []
    for p in group["partitions"]:
        member = members.get(p["member_id"]) or {}
        rows.append(
            [
                group["group_id"],
                p["topic"],
                p["partition"],
                p["committed"],
                p["high_watermark"],
                p["lag"],
                member.get("member_id"),
                member.get("host"),
                member.get("client_id"),
            ]
        )
    assigned = {p["member_id"] for p in group["partitions"]}
    for m in group["members"]:
        if m["member_id"] not in assigned:
            idle = [group["group_id"], None, None, None, None, None]
            rows.append([*idle, m["member_id"], m["host"], m["client_id"]])
    return format_table(OFFSET_COLUMNS, rows)


def assignment_text(assignment: list[dict[str, Any]] | None) -> str | None:
    """Partitions as Kafka's tool prints them, ``topic(0,1)``; None for none."""
    parts = assignment or []
    text = " ".join(f"{a['topic']}({','.join(map(str, a['partitions']))})" for a in parts)
    return text or None


def group_members_text(group: dict[str, Any]) -> str:
    """``--describe --members``: each member and its partitions, ``topic(0,1)``; a consumer
    group (KIP-848) also shows each member's epoch and target assignment (Kafka's
    ``--members --verbose``)."""
    consumer = group.get("group_type") == "consumer"
    rows = []
    for m in group["members"]:
        assignment = m["assignment"] or []
        count = sum(len(a["partitions"]) for a in assignment)
        row = [
            group["group_id"],
            m["member_id"],
            m["group_instance_id"],
            m["host"],
            m["client_id"],
            count,
            assignment_text(assignment),
        ]
        if consumer:
            row += [m.get("member_epoch"), assignment_text(m.get("target_assignment"))]
        rows.append(row)
    headers = ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
    extra = ("MEMBER-EPOCH", "TARGET-ASSIGNMENT") if consumer else ()
    return format_table((*headers, "ASSIGNMENT", *extra), rows)


def group_state_text(group: dict[str, Any]) -> str:
    """``--describe --state``: coordinator, assignor, state and member count."""
    c = group["coordinator"]
    row = [
        group["group_id"],
        f"{c['host']}:{c['port']} ({c['id']})",
        group["protocol"] or None,
        group["state"],
        len(group["members"]),
    ]
    headers: tuple[str, ...] = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE")
    headers += ("#MEMBERS",)
    if group.get("group_type") == "consumer":  # Kafka's --state --verbose for KIP-848 groups
        row += [group.get("group_epoch"), group.get("assignment_epoch")]
        headers += ("GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH")
    return format_table(headers, [row])


@command
def groups_delete(args: argparse.Namespace, client: AdminClient) -> int:
    group = group_of(args)
    client.call("DELETE", group_path(group))
    done = f"Deletion of requested consumer groups ('{group}') was successful."
    return print_result(args.json, {"group_id": group, "deleted": True}, lambda: done)


@command
def groups_reset_offsets(args: argparse.Namespace, client: AdminClient) -> int:
    group = group_of(args)
    body: dict[str, Any] = {"to": reset_target(args), "execute": args.execute}
    if args.all_topics:
        body["all_topics"] = True
    else:
        body["topics"] = args.topic
    result = client.call("POST", group_path(group, "offsets"), body).body
    if args.json:
        print_json(result)
        return 0
    rows = [(group, p["topic"], p["partition"], p["new_offset"]) for p in result["partitions"]]
    print(format_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows))
    if not result["executed"]:
        print("Dry run: no offsets were changed; add --execute to apply.", file=sys.stderr)
    return 0


def reset_target(args: argparse.Namespace) -> object:
    if args.to_earliest:
        return "earliest"
    if args.to_latest:
        return "latest"
    if args.to_datetime is not None:
        return {"timestamp": args.to_datetime}
    assert args.to_offset is not None, "argparse requires one target"
    return {"offset": args.to_offset}


def datetime_ms(text: str) -> int:
    """``--to-datetime``: ISO 8601 (``2024-05-01T12:00:00.000``, with an optional ``Z`` or
    ``+02:00``; local time without one, as Kafka's tool) as epoch milliseconds."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a date and time like 2024-05-01T12:00:00.000[+02:00], got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()  # the local time zone
    ms = (when - EPOCH) // datetime.timedelta(milliseconds=1)
    if ms < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is before 1970")
    return ms


EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _add_group_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("group", nargs="?", metavar="GROUP", help="the consumer group")
    parser.add_argument("--group", dest="group_option", metavar="GROUP", help="the same")


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    actions = command_family(
        sub, "groups", "list, describe, delete consumer groups and reset their offsets"
    )
    actions.add_parser("list", parents=[common], help="list groups").set_defaults(func=groups_list)

    describe = actions.add_parser(
        "describe", parents=[common], help="members, committed offsets and lag per partition"
    )
    _add_group_argument(describe)
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="members and their partitions")
    view.add_argument("--state", action="store_true", help="coordinator, assignor and state")
    describe.set_defaults(func=groups_describe)

    delete = actions.add_parser("delete", parents=[common], help="delete an empty group")
    _add_group_argument(delete)
    delete.set_defaults(func=groups_delete)

    reset = actions.add_parser(
        "reset-offsets",
        parents=[common],
        help="move an inactive group's committed offsets (a dry run unless --execute)",
        description="Plan new committed offsets for a group with no active members, and "
        "commit them with --execute (without it, only print them, as Kafka's tool). Offsets "
        "outside a partition's [log start, high watermark] are moved to the nearest end.",
    )
    _add_group_argument(reset)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic", action="append", metavar="T", help="every partition of T (repeatable)"
    )
    scope.add_argument(
        "--all-topics", action="store_true", help="every partition the group has offsets for"
    )
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the high watermark")
    to.add_argument(
        "--to-datetime",
        type=datetime_ms,
        metavar="ISO",
        help="the first offset at or after YYYY-MM-DDTHH:mm:SS[.sss][Z|+HH:MM] (local time"
        " without a zone; the high watermark where no record is that recent)",
    )
    to.add_argument("--to-offset", type=non_negative_int, metavar="N", help="offset N")
    run = reset.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="commit the new offsets")
    run.add_argument("--dry-run", action="store_true", help="only print them (the default)")
    reset.set_defaults(func=groups_reset_offsets)
