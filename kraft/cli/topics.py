"""``kraft topics``: create, list, describe, alter and delete topics through the REST API.

kraft topics create NAME [--partitions N] [--replication-factor N] [--config k=v ...]
kraft topics list | describe NAME | delete NAME
kraft topics alter NAME [--set k=v ...] [--delete k ...] [--partitions N]
"""

from __future__ import annotations

import argparse
from typing import Any, Final

from kraft.cli.arguments import command_family, key_value, positive_int
from kraft.cli.output import fail, format_table, print_json, print_result
from kraft.cli.rest_client import AdminClient, command, topic_path


@command
def topics_create(args: argparse.Namespace, client: AdminClient) -> int:
    body: dict[str, Any] = {"name": args.name, "configs": dict(args.config or [])}
    if args.partitions is not None:
        body["partitions"] = args.partitions
    if args.replication_factor is not None:
        body["replication_factor"] = args.replication_factor
    topic = client.call("POST", "/v1/topics", body).body
    return print_result(args.json, topic, lambda: f"Created topic {args.name}.")


@command
def topics_list(args: argparse.Namespace, client: AdminClient) -> int:
    topics = client.call("GET", "/v1/topics").body
    rows = [(t["name"], t["partitions"], t["replication_factor"]) for t in topics]
    return print_result(
        args.json, topics, lambda: format_table(("NAME", "PARTITIONS", "REPLICATION_FACTOR"), rows)
    )


@command
def topics_describe(args: argparse.Namespace, client: AdminClient) -> int:
    topic = client.call("GET", topic_path(args.name)).body
    return print_result(args.json, topic, lambda: describe_text(topic))


PARTITION_COLUMNS: Final = (
    "partition",
    "leader",
    "leader_epoch",
    "replicas",
    "isr",
    "log_start_offset",
    "high_watermark",
)


def describe_text(topic: dict[str, Any]) -> str:
    configs = ",".join(f"{k}={v}" for k, v in topic["configs"].items()) or "-"
    header = (
        f"Topic: {topic['name']}  TopicId: {topic.get('topic_id', '-')}"
        f"  PartitionCount: {len(topic['partitions'])}"
        f"  ReplicationFactor: {topic.get('replication_factor', '-')}  Configs: {configs}"
    )
    rows = [[p[column] for column in PARTITION_COLUMNS] for p in topic["partitions"]]
    headers = [column.upper() for column in PARTITION_COLUMNS]
    return header + "\n" + format_table(headers, rows)


@command
def topics_delete(args: argparse.Namespace, client: AdminClient) -> int:
    reply = client.call("DELETE", topic_path(args.name))
    if args.json:
        print_json({"name": args.name, "deleted": reply.status == 204})
    elif reply.status == 204:
        print(f"Deleted topic {args.name}.")
    else:
        print(f"Topic {args.name} is marked for deletion.")
    return 0


@command
def topics_alter(args: argparse.Namespace, client: AdminClient) -> int:
    if not (args.set or args.delete or args.partitions is not None):
        return fail("INVALID_REQUEST", "nothing to alter: give --set, --delete or --partitions")
    topic: Any = None
    if args.set or args.delete:
        changes = {"set": dict(args.set or []), "delete": args.delete or []}
        topic = client.call("PATCH", topic_path(args.name, "configs"), changes).body
    if args.partitions is not None:
        count = {"count": args.partitions}
        topic = client.call("POST", topic_path(args.name, "partitions"), count).body
    return print_result(args.json, topic, lambda: f"Altered topic {args.name}.")


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    actions = command_family(sub, "topics", "create, list, describe, alter and delete topics")

    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("name")
    create.add_argument(
        "--partitions", type=positive_int, metavar="N", help="default: num.partitions"
    )
    create.add_argument(
        "--replication-factor",
        type=positive_int,
        metavar="N",
        help="default: default.replication.factor",
    )
    create.add_argument("--config", type=key_value, action="append", metavar="KEY=VALUE")
    create.set_defaults(func=topics_create)

    actions.add_parser("list", parents=[common], help="list topics").set_defaults(func=topics_list)
    for name, func, text in (
        ("describe", topics_describe, "partitions, leaders, offsets and configs"),
        ("delete", topics_delete, "delete a topic"),
    ):
        p = actions.add_parser(name, parents=[common], help=text)
        p.add_argument("name")
        p.set_defaults(func=func)

    alter = actions.add_parser("alter", parents=[common], help="change configs or partitions")
    alter.add_argument("name")
    alter.add_argument("--set", type=key_value, action="append", metavar="KEY=VALUE")
    alter.add_argument("--delete", action="append", metavar="KEY", help="back to the default")
    alter.add_argument(
        "--partitions", type=positive_int, metavar="N", help="the new, larger, count"
    )
    alter.set_defaults(func=topics_alter)
