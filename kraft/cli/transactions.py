"""``kraft transactions``: list and describe transactions, describe a partition's producers,
find hanging transactions and abort one, through the REST API; the options and tables are
those of Kafka's ``kafka-transactions.sh`` (KIP-664).

    kraft transactions list [--state S ...] [--producer-id P ...] [--duration-filter MS]
    kraft transactions describe --transactional-id ID
    kraft transactions describe-producers --topic T --partition P [--broker-id B]
    kraft transactions abort --topic T --partition P
                 (--start-offset N | --producer-id P --producer-epoch E --coordinator-epoch C)
    kraft transactions find-hanging (--broker-id B | --topic T [--partition P])
                 [--max-transaction-timeout MINUTES]

Each also takes ``--bootstrap-server HOST:PORT[,...]`` (with ``--command-config`` for the
login), as Kafka's tool does: then it asks the brokers directly over Kafka
(:mod:`kraft.cli.transactions_kafka`), which authorize the caller themselves.
"""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from kraft.cli.admin_auth import LoginError, kafka_security
from kraft.cli.arguments import bootstrap_addresses, command_family, non_negative_int
from kraft.cli.output import format_table, print_result
from kraft.cli.rest_client import AdminClient, AdminError, command, topic_path
from kraft.transactions.model import NO_DURATION_FILTER, TRANSACTION_STATES, AbortSpec
from metadata_log.image import TopicPartition

if TYPE_CHECKING:
    from kraft.cli.transactions_kafka import KafkaTransactions

LIST_COLUMNS: Final = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_COLUMNS: Final = (
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
)
PRODUCER_COLUMNS: Final = (
    "ProducerId",
    "ProducerEpoch",
    "LatestCoordinatorEpoch",
    "LastSequence",
    "LastTimestamp",
    "CurrentTransactionStartOffset",
)
HANGING_COLUMNS: Final = (
    "Topic",
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "CoordinatorEpoch",
    "StartOffset",
    "LastTimestamp",
    "Duration(min)",
)
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN: Final = 15  # Kafka's tool
MS_PER_MINUTE: Final = 60_000


def _or_none(value: object) -> object:
    """Kafka's tool prints ``None`` where there is no value."""
    return "None" if value is None else value


def _or_minus_one(value: object) -> object:
    return -1 if value is None else value


def ask(
    args: argparse.Namespace,
    client: AdminClient,
    rest: Callable[[AdminClient], Any],
    kafka: Callable[[KafkaTransactions], Awaitable[Any]],
) -> Any:
    """The answer (the REST API's JSON) of the REST API, or with ``--bootstrap-server`` of
    the brokers directly."""
    if args.bootstrap_server is None:
        return rest(client)
    from kraft.cli.transactions_kafka import run_on_brokers

    try:
        security = kafka_security(args)
    except LoginError as exc:
        raise AdminError("INVALID_LOGIN", str(exc)) from None
    return run_on_brokers(args.bootstrap_server, security, kafka)


@command
def transactions_list(args: argparse.Namespace, client: AdminClient) -> int:
    query: dict[str, Any] = {}
    if args.state:
        query["state"] = ",".join(args.state)
    if args.producer_id:
        query["producer_id"] = ",".join(map(str, args.producer_id))
    if args.duration_filter is not None:
        query["duration_ms"] = args.duration_filter
    duration_ms = NO_DURATION_FILTER if args.duration_filter is None else args.duration_filter
    listings = ask(
        args,
        client,
        lambda c: c.call("GET", "/v1/transactions", query=query).body,
        lambda k: k.list(args.state or [], args.producer_id or [], duration_ms),
    )
    rows = [
        (t["transactional_id"], t["coordinator"], t["producer_id"], t["state"]) for t in listings
    ]
    return print_result(args.json, listings, lambda: format_table(LIST_COLUMNS, rows))


@command
def transactions_describe(args: argparse.Namespace, client: AdminClient) -> int:
    path = "/v1/transactions/" + urllib.parse.quote(args.transactional_id, safe="")
    t = ask(
        args,
        client,
        lambda c: c.call("GET", path).body,
        lambda k: k.describe(args.transactional_id),
    )
    return print_result(args.json, t, lambda: describe_text(t))


def describe_text(t: dict[str, Any]) -> str:
    partitions = ",".join(f"{p['topic']}-{p['partition']}" for p in t["partitions"])
    row = [
        t["coordinator"]["id"],
        t["transactional_id"],
        t["producer_id"],
        t["producer_epoch"],
        t["state"],
        t["transaction_timeout_ms"],
        _or_none(t["transaction_start_time_ms"]),
        _or_none(t["transaction_duration_ms"]),
        partitions,
    ]
    return format_table(DESCRIBE_COLUMNS, [row])


@command
def transactions_describe_producers(args: argparse.Namespace, client: AdminClient) -> int:
    path = topic_path(args.topic, "partitions", str(args.partition), "producers")
    query = {} if args.broker_id is None else {"broker_id": args.broker_id}
    answer = ask(
        args,
        client,
        lambda c: c.call("GET", path, query=query).body,
        lambda k: k.producers(TopicPartition(args.topic, args.partition), args.broker_id),
    )
    return print_result(args.json, answer, lambda: producers_text(answer["producers"]))


def producers_text(producers: list[dict[str, Any]]) -> str:
    rows = [
        [
            p["producer_id"],
            p["producer_epoch"],
            _or_minus_one(p["coordinator_epoch"]),
            p["last_sequence"],
            p["last_timestamp"],
            _or_none(p["current_transaction_start_offset"]),
        ]
        for p in producers
    ]
    return format_table(PRODUCER_COLUMNS, rows)


def abort_body(args: argparse.Namespace) -> dict[str, Any]:
    """The REST body of ``abort``: by start offset, or by all three producer options (Kafka's
    tool's two forms; a negative coordinator epoch is sent as 0, as it does)."""
    body: dict[str, Any] = {"topic": args.topic, "partition": args.partition}
    by_producer = {
        "--producer-id": args.producer_id,
        "--producer-epoch": args.producer_epoch,
        "--coordinator-epoch": args.coordinator_epoch,
    }
    if args.start_offset is not None:
        return {**body, "start_offset": args.start_offset}
    if args.producer_id is None:
        raise AdminError(
            "INVALID_ARGUMENTS",
            "The transaction to abort must be identified either with --start-offset or with"
            " --producer-id, --producer-epoch, and --coordinator-epoch",
        )
    missing = [option for option, value in by_producer.items() if value is None]
    if missing:
        raise AdminError("INVALID_ARGUMENTS", f"Missing required argument {missing[0]}")
    return {
        **body,
        "producer_id": args.producer_id,
        "producer_epoch": args.producer_epoch,
        "coordinator_epoch": max(args.coordinator_epoch, 0),
    }


@command
def transactions_abort(args: argparse.Namespace, client: AdminClient) -> int:
    body = abort_body(args)
    tp = TopicPartition(args.topic, args.partition)
    target = body.get("start_offset")
    if target is None:
        target = AbortSpec(
            tp, body["producer_id"], body["producer_epoch"], body["coordinator_epoch"]
        )
    done = ask(
        args,
        client,
        lambda c: c.call("POST", "/v1/transactions/abort", body).body,
        lambda k: k.abort(tp, target),
    )
    text = (
        f"Aborted the transaction of producer {done['producer_id']} (epoch"
        f" {done['producer_epoch']}, coordinator epoch {done['coordinator_epoch']}) on"
        f" {done['topic']}-{done['partition']}."
    )
    return print_result(args.json, done, lambda: text)


@command
def transactions_find_hanging(args: argparse.Namespace, client: AdminClient) -> int:
    if args.topic is None and args.broker_id is None:
        raise AdminError(
            "INVALID_ARGUMENTS",
            "The `find-hanging` command requires either --topic or --broker-id to limit the"
            " scope of the search",
        )
    if args.partition is not None and args.topic is None:
        raise AdminError(
            "INVALID_ARGUMENTS", "The --partition argument requires --topic to be provided"
        )
    query: dict[str, Any] = {
        "max_transaction_timeout_ms": args.max_transaction_timeout * MS_PER_MINUTE
    }
    for key in ("topic", "partition", "broker_id"):
        if getattr(args, key) is not None:
            query[key] = getattr(args, key)
    found = ask(
        args,
        client,
        lambda c: c.call("GET", "/v1/transactions/hanging", query=query).body,
        lambda k: k.hanging(
            args.topic, args.partition, args.broker_id, query["max_transaction_timeout_ms"]
        ),
    )
    return print_result(args.json, found, lambda: hanging_text(found["hanging"]))


def hanging_text(hanging: list[dict[str, Any]]) -> str:
    rows = [
        [
            t["topic"],
            t["partition"],
            t["producer_id"],
            t["producer_epoch"],
            _or_minus_one(t["coordinator_epoch"]),
            t["start_offset"],
            t["last_timestamp"],
            t["duration_ms"] // MS_PER_MINUTE,
        ]
        for t in hanging
    ]
    return format_table(HANGING_COLUMNS, rows)


def coordinator_epoch(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def producer_epoch(text: str) -> int:
    value = non_negative_int(text)
    if value > 32767:
        raise argparse.ArgumentTypeError(f"a producer epoch is at most 32767, got {value}")
    return value


def _topic_partition(parser: argparse.ArgumentParser, *, partition_required: bool) -> None:
    parser.add_argument("--topic", required=partition_required, metavar="T", help="topic name")
    parser.add_argument(
        "--partition",
        type=non_negative_int,
        required=partition_required,
        metavar="P",
        help="partition number",
    )


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    actions = command_family(
        sub,
        "transactions",
        "list and describe transactions and producers; find and abort hanging transactions",
    )
    kafka = argparse.ArgumentParser(add_help=False)
    kafka.add_argument(
        "--bootstrap-server",
        type=bootstrap_addresses,
        metavar="HOST:PORT",
        help="ask the brokers directly over Kafka, as kafka-transactions.sh (logging in with"
        " --command-config); without it, through the REST API at --admin",
    )
    common = argparse.ArgumentParser(add_help=False, parents=[common, kafka])
    listing = actions.add_parser("list", parents=[common], help="list transactions")
    listing.add_argument(
        "--state",
        action="append",
        choices=TRANSACTION_STATES,
        metavar="STATE",
        help=f"only in this state (repeatable): {', '.join(TRANSACTION_STATES)}",
    )
    listing.add_argument(
        "--producer-id", type=non_negative_int, action="append", metavar="P", help="repeatable"
    )
    listing.add_argument(
        "--duration-filter",
        type=non_negative_int,
        metavar="MS",
        help="only transactions running longer than MS milliseconds",
    )
    listing.set_defaults(func=transactions_list)

    describe = actions.add_parser(
        "describe", parents=[common], help="describe the state of an active transactional-id"
    )
    describe.add_argument("--transactional-id", required=True, metavar="ID")
    describe.set_defaults(func=transactions_describe)

    producers = actions.add_parser(
        "describe-producers",
        parents=[common],
        help="describe the states of active producers for a topic partition",
    )
    producers.add_argument(
        "--broker-id", type=non_negative_int, metavar="B", help="ask this replica, not the leader"
    )
    _topic_partition(producers, partition_required=True)
    producers.set_defaults(func=transactions_describe_producers)

    abort = actions.add_parser(
        "abort",
        parents=[common],
        help="abort a hanging transaction (requires Alter or ClusterAction on the cluster)",
        description="Abort one producer's transaction on one partition, named by its start"
        " offset there (as find-hanging shows), or by producer id, epoch and coordinator epoch.",
    )
    _topic_partition(abort, partition_required=True)
    abort.add_argument(
        "--start-offset", type=non_negative_int, metavar="N", help="the transaction's first offset"
    )
    abort.add_argument("--producer-id", type=non_negative_int, metavar="P")
    abort.add_argument("--producer-epoch", type=producer_epoch, metavar="E")
    abort.add_argument("--coordinator-epoch", type=coordinator_epoch, metavar="C")
    abort.set_defaults(func=transactions_abort)

    find = actions.add_parser("find-hanging", parents=[common], help="find hanging transactions")
    find.add_argument(
        "--broker-id", type=non_negative_int, metavar="B", help="search the partitions on B"
    )
    _topic_partition(find, partition_required=False)
    find.add_argument(
        "--max-transaction-timeout",
        type=non_negative_int,
        default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
        metavar="MINUTES",
        help="transaction.max.timeout.ms of the cluster, in minutes (default: %(default)s)",
    )
    find.set_defaults(func=transactions_find_hanging)
