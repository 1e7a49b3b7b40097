"""``kraft reassign``: move partitions between brokers, as ``kafka-reassign-partitions.sh`` does,
over the Kafka protocol (through any broker, which forwards to the active controller).

    kraft reassign --bootstrap-server HOST:PORT --generate --broker-list 1,2,3
                   (--topics-to-move-json-file F | --topics a,b) [--seed N]
                   [--disable-rack-aware]
    kraft reassign --bootstrap-server HOST:PORT --execute --reassignment-json-file F
                   [--throttle BYTES_PER_S] [--additional]
    kraft reassign --bootstrap-server HOST:PORT --verify --reassignment-json-file F
                   [--preserve-throttles]
    kraft reassign --bootstrap-server HOST:PORT --cancel --reassignment-json-file F
                   [--preserve-throttles]
    kraft reassign --bootstrap-server HOST:PORT --list

``--plan`` is ``--reassignment-json-file`` and ``--brokers`` is ``--broker-list``. The files
are Kafka's JSON (``kraft.reassign.plan``). ``--generate`` prints the current assignment (keep
it for a rollback) and a proposed plan spreading the topics over the brokers given, rack-aware;
it changes nothing. ``--execute`` sets the throttle when asked, then starts the moves; like
the tool, it refuses while other moves are in progress unless ``--additional``.
``--verify`` reports each partition and, once all are done, clears the throttles (broker rates on
every broker, the plan's topics' lists); ``--cancel`` cancels the moves and clears them too.
A partition refused, or not at its target and not moving (``--verify``), makes the command
print ``kraft: REASSIGNMENT_FAILED: ...`` and exit with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from kraft.cli.admin_auth import LoginError, kafka_security
from kraft.cli.arguments import non_negative_int, positive_int
from kraft.cli.broker_tool import add_broker_options, connect_to_broker
from kraft.cli.output import fail, print_json
from kraft.cli.rest_client import REQUEST_TIMEOUT_S, AdminError
from kraft.reassign.plan import (
    BROKER_THROTTLE_KEYS,
    TOPIC_THROTTLE_KEYS,
    Assignment,
    Move,
    PlanError,
    assignment_json,
    generate,
    parse_plan,
    parse_topics_to_move,
    plan_json,
    throttles,
)

if TYPE_CHECKING:
    from broker.kafka_client import KafkaConnection
    from broker.security.client_security import ClientSecurity
    from kraft.controller.placement import UsableBroker

METADATA: Final = (3, 12)
ALTER_REASSIGNMENTS: Final = (45, 0)
LIST_REASSIGNMENTS: Final = (46, 0)
INCREMENTAL_ALTER_CONFIGS: Final = (44, 1)
BROKER, TOPIC = 4, 2  # ConfigResource types
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
NO_REASSIGNMENT: Final = "NO_REASSIGNMENT_IN_PROGRESS"

Ongoing = dict[tuple[str, int], dict[str, list[int]]]


class KafkaAdmin:
    """The few requests the command sends, on one connection."""

    def __init__(self, conn: KafkaConnection) -> None:
        self.conn = conn

    async def _send(self, request: Any, api: tuple[int, int]) -> Any:
        version = self.conn.version_for(*api)
        if version is None:
            raise AdminError("UNSUPPORTED_VERSION", f"{self.conn.peer} lacks {request.NAME}")
        return await self.conn.send(request, version)

    async def metadata(self, topics: list[str] | None) -> tuple[list[UsableBroker], Assignment]:
        """The brokers (with racks) and the replicas of ``topics`` (None: every topic)."""
        from kafka_protocol.errors import ErrorCode
        from kafka_protocol.messages import MetadataRequest
        from kafka_protocol.types import TopicName
        from kraft.controller.placement import UsableBroker

        wanted = None
        if topics is not None:
            wanted = [MetadataRequest.MetadataRequestTopic(name=TopicName(t)) for t in topics]
        request = MetadataRequest(topics=wanted, allow_auto_topic_creation=False)
        response = await self._send(request, METADATA)
        brokers = [UsableBroker(b.node_id, b.rack, False) for b in response.brokers]
        assignment: dict[tuple[str, int], list[int]] = {}
        for topic in response.topics:
            if topic.error_code != ErrorCode.NONE:
                error = ErrorCode.from_code(topic.error_code)
                raise AdminError(error.name, f"topic {topic.name!r}: {error.message}")
            for p in topic.partitions:
                assignment[(topic.name, p.partition_index)] = list(p.replica_nodes)
        return sorted(brokers, key=lambda b: b.id), assignment

    async def alter(self, targets: dict[tuple[str, int], list[int] | None]) -> dict[Any, Any]:
        """Start (or, with None, cancel) moves: (topic, partition) -> (error name, message)."""
        from kafka_protocol.errors import ErrorCode
        from kafka_protocol.messages import AlterPartitionReassignmentsRequest as Req
        from kafka_protocol.types import BrokerId, TopicName

        by_topic: dict[str, list[Req.ReassignablePartition]] = {}
        for (topic, partition), replicas in sorted(targets.items()):
            by_topic.setdefault(topic, []).append(
                Req.ReassignablePartition(
                    partition_index=partition,
                    replicas=None if replicas is None else [BrokerId(b) for b in replicas],
                )
            )
        request = Req(
            timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
            topics=[
                Req.ReassignableTopic(name=TopicName(t), partitions=p) for t, p in by_topic.items()
            ],
        )
        response = await self._send(request, ALTER_REASSIGNMENTS)
        if response.error_code != ErrorCode.NONE:
            error = ErrorCode.from_code(response.error_code)
            raise AdminError(error.name, response.error_message or error.message)
        return {
            (t.name, p.partition_index): (ErrorCode.from_code(p.error_code).name, p.error_message)
            for t in response.responses
            for p in t.partitions
        }

    async def ongoing(self) -> Ongoing:
        from kafka_protocol.errors import ErrorCode
        from kafka_protocol.messages import ListPartitionReassignmentsRequest

        request = ListPartitionReassignmentsRequest(
            timeout_ms=int(REQUEST_TIMEOUT_S * 1000), topics=None
        )
        response = await self._send(request, LIST_REASSIGNMENTS)
        if response.error_code != ErrorCode.NONE:
            error = ErrorCode.from_code(response.error_code)
            raise AdminError(error.name, response.error_message or error.message)
        return {
            (t.name, p.partition_index): {
                "replicas": list(p.replicas),
                "adding_replicas": list(p.adding_replicas),
                "removing_replicas": list(p.removing_replicas),
            }
            for t in response.topics
            for p in t.partitions
        }

    async def configs(self, resource_type: int, changes: dict[str, dict[str, str | None]]) -> None:
        """Set (a value) or delete (None) configs of several resources of one type."""
        from kafka_protocol.errors import ErrorCode
        from kafka_protocol.messages import IncrementalAlterConfigsRequest as Req

        if not changes:
            return
        request = Req(
            resources=[
                Req.AlterConfigsResource(
                    resource_type=resource_type,
                    resource_name=name,
                    configs=[
                        Req.AlterableConfig(
                            name=k, config_operation=DELETE if v is None else SET, value=v
                        )
                        for k, v in values.items()
                    ],
                )
                for name, values in changes.items()
            ]
        )
        response = await self._send(request, INCREMENTAL_ALTER_CONFIGS)
        for result in response.responses:
            if result.error_code != ErrorCode.NONE:
                error = ErrorCode.from_code(result.error_code)
                raise AdminError(
                    error.name, f"{result.resource_name!r}: {result.error_message or error.message}"
                )


# --- the actions ----------------------------------------------------------------------------


def _name(key: tuple[str, int]) -> str:
    return f"{key[0]}-{key[1]}"


async def _generate(admin: KafkaAdmin, args: argparse.Namespace) -> int:
    from kraft.controller.placement import UsableBroker

    if args.topics_to_move_json_file:
        topics = parse_topics_to_move(Path(args.topics_to_move_json_file).read_text())
    else:
        topics = [t for t in args.topics.split(",") if t]
    brokers, current = await admin.metadata(topics)
    wanted = set(args.broker_list)
    unknown = sorted(wanted - {b.id for b in brokers})
    if unknown:
        raise AdminError("INVALID_REPLICA_ASSIGNMENT", f"broker {unknown[0]} is not registered")
    usable = [b for b in brokers if b.id in wanted]
    if args.disable_rack_aware:
        usable = [UsableBroker(b.id, None, b.fenced) for b in usable]
    proposed = generate(current, topics, usable, random.Random(args.seed))
    current_json = assignment_json(current)
    if args.json:
        print_json({"current": current_json, "proposed": plan_json(proposed)})
    else:
        print("Current partition replica assignment")
        print(json.dumps(current_json))
        print()
        print("Proposed partition reassignment configuration")
        print(json.dumps(plan_json(proposed)))
    return 0


async def _execute(admin: KafkaAdmin, args: argparse.Namespace, moves: list[Move]) -> int:
    if not args.additional and (ongoing := await admin.ongoing()):
        raise AdminError(
            "REASSIGNMENT_IN_PROGRESS",
            f"{len(ongoing)} partition(s) are being reassigned ({_name(min(ongoing))}, ...);"
            " use --additional to start this plan too, or --cancel",
        )
    topics = sorted({m.topic for m in moves})
    _, current = await admin.metadata(topics)
    missing = [m for m in moves if m.key not in current]
    if missing:
        raise AdminError("UNKNOWN_TOPIC_OR_PARTITION", f"{_name(missing[0].key)} does not exist")
    if not args.json:
        print("Current partition replica assignment\n")
        print(json.dumps(assignment_json({m.key: current[m.key] for m in moves})))
        print("\nSave this to use as the --reassignment-json-file option during rollback")
    if args.throttle is not None:
        wanted = throttles(current, moves, args.throttle)
        await admin.configs(BROKER, {str(b): dict(v) for b, v in wanted.brokers.items()})
        await admin.configs(TOPIC, {t: dict(v) for t, v in wanted.topics.items()})
        if not args.json:
            print(
                "Warning: You must run --verify periodically, until the reassignment completes,"
                " to ensure the throttle is removed."
            )
            print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
    results = await admin.alter({m.key: list(m.replicas) for m in moves})
    failed = {k: v for k, v in results.items() if v[0] != "NONE"}
    started = sorted(k for k in results if k not in failed)
    if args.json:
        print_json(
            {
                "started": [_name(k) for k in started],
                "failed": {_name(k): {"error": e, "message": m} for k, (e, m) in failed.items()},
            }
        )
    elif started:
        print("Successfully started partition reassignments for " + ",".join(map(_name, started)))
    if failed:
        first = ", ".join(f"{_name(k)} ({e}: {m})" for k, (e, m) in sorted(failed.items())[:5])
        return fail("REASSIGNMENT_FAILED", f"{len(failed)} partition(s) refused: {first}")
    return 0


async def _clear_throttles(admin: KafkaAdmin, topics: list[str], json_out: bool) -> None:
    brokers, _ = await admin.metadata([])
    ids = [b.id for b in brokers]
    cleared: dict[str, str | None] = dict.fromkeys(BROKER_THROTTLE_KEYS)
    await admin.configs(BROKER, {str(b): dict(cleared) for b in ids})
    topic_keys: dict[str, str | None] = dict.fromkeys(TOPIC_THROTTLE_KEYS)
    await admin.configs(TOPIC, {t: dict(topic_keys) for t in topics})
    if not json_out:
        print(f"Clearing broker-level throttles on brokers {','.join(map(str, ids))}")
        for topic in topics:
            print(f"Clearing topic-level throttles on topic {topic}")


async def _verify(admin: KafkaAdmin, args: argparse.Namespace, moves: list[Move]) -> int:
    topics = sorted({m.topic for m in moves})
    _, current = await admin.metadata(topics)
    ongoing = await admin.ongoing()
    status: dict[str, str] = {}
    lines = ["Status of partition reassignment:"]
    for move in sorted(moves, key=lambda m: m.key):
        name = _name(move.key)
        if move.key in ongoing:
            status[name] = "in_progress"
            lines.append(f"Reassignment of partition {name} is still in progress.")
        elif tuple(current.get(move.key, ())) == move.replicas:
            status[name] = "completed"
            lines.append(f"Reassignment of partition {name} is completed.")
        else:
            status[name] = "failed"
            lines.append(
                f"There is no active reassignment of partition {name}, but replica set is"
                f" {current.get(move.key, [])} rather than {list(move.replicas)}."
            )
    if not args.json:
        print("\n".join(lines))
    done = all(s == "completed" for s in status.values())
    if done and not args.preserve_throttles:
        if not args.json:
            print()
        await _clear_throttles(admin, topics, args.json)
    if args.json:
        print_json({"partitions": status, "complete": done})
    failed = sorted(n for n, s in status.items() if s == "failed")
    if failed:
        return fail("REASSIGNMENT_FAILED", f"not at their target: {', '.join(failed[:10])}")
    return 0


async def _cancel(admin: KafkaAdmin, args: argparse.Namespace, moves: list[Move]) -> int:
    results = await admin.alter(dict.fromkeys((m.key for m in moves), None))
    cancelled = sorted(k for k, (e, _) in results.items() if e == "NONE")
    idle = sorted(k for k, (e, _) in results.items() if e == NO_REASSIGNMENT)
    failed = {k: v for k, v in results.items() if v[0] not in ("NONE", NO_REASSIGNMENT)}
    if args.json:
        print_json(
            {"cancelled": [_name(k) for k in cancelled], "not_moving": [_name(k) for k in idle]}
        )
    else:
        if cancelled:
            print(
                "Successfully cancelled partition reassignments for: "
                + ",".join(map(_name, cancelled))
            )
        if idle:
            print("Not being reassigned: " + ",".join(map(_name, idle)))
    if not failed and not args.preserve_throttles:
        await _clear_throttles(admin, sorted({m.topic for m in moves}), args.json)
    if failed:
        first = ", ".join(f"{_name(k)} ({e})" for k, (e, _) in sorted(failed.items())[:5])
        return fail("REASSIGNMENT_FAILED", f"{len(failed)} partition(s) not cancelled: {first}")
    return 0


async def _list(admin: KafkaAdmin, args: argparse.Namespace) -> int:
    ongoing = await admin.ongoing()
    if args.json:
        print_json({_name(k): v for k, v in sorted(ongoing.items())})
    elif not ongoing:
        print("No partition reassignments found.")
    else:
        print("Current partition reassignments:")
        for key, r in sorted(ongoing.items()):
            print(
                f"{_name(key)}: replicas: {_ids(r['replicas'])}. adding: "
                f"{_ids(r['adding_replicas'])}. removing: {_ids(r['removing_replicas'])}."
            )
    return 0


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))


async def _run(args: argparse.Namespace, security: ClientSecurity | None) -> int:
    from broker.kafka_client import KafkaClientError
    from kafka_protocol.exceptions import ProtocolError

    moves: list[Move] = []
    if args.execute or args.verify or args.cancel:
        if not args.reassignment_json_file:
            raise AdminError("INVALID_ARGUMENTS", "give the plan: --reassignment-json-file FILE")
        moves = parse_plan(Path(args.reassignment_json_file).read_text())
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            conn = await connect_to_broker(args.bootstrap_server, security)
        try:
            admin = KafkaAdmin(conn)
            async with asyncio.timeout(REQUEST_TIMEOUT_S * 4):
                if args.generate:
                    return await _generate(admin, args)
                if args.execute:
                    return await _execute(admin, args, moves)
                if args.verify:
                    return await _verify(admin, args, moves)
                if args.cancel:
                    return await _cancel(admin, args, moves)
                return await _list(admin, args)
        finally:
            conn.close()
            await conn.wait_closed()
    except TimeoutError:
        raise AdminError("REQUEST_TIMED_OUT", f"no answer within {REQUEST_TIMEOUT_S:g} s") from None
    except (KafkaClientError, ProtocolError) as exc:
        raise AdminError("BROKER_UNREACHABLE", str(exc)) from None


def run(args: argparse.Namespace) -> int:
    if args.generate and not (args.topics_to_move_json_file or args.topics):
        return fail("INVALID_ARGUMENTS", "--generate needs --topics-to-move-json-file or --topics")
    if args.generate and not args.broker_list:
        return fail("INVALID_ARGUMENTS", "--generate needs --broker-list")
    try:
        security = kafka_security(args)
    except LoginError as exc:
        return fail("INVALID_LOGIN", str(exc))
    try:
        return asyncio.run(_run(args, security))
    except AdminError as exc:
        return fail(exc.error, exc.message)
    except PlanError as exc:
        return fail("INVALID_PLAN", str(exc))
    except OSError as exc:
        return fail("INVALID_ARGUMENTS", f"{exc.filename}: {exc.strerror}")


def _broker_ids(text: str) -> list[int]:
    try:
        ids = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected broker ids like 1,2,3, got {text!r}") from None
    if not ids or any(b < 0 for b in ids):
        raise argparse.ArgumentTypeError(f"expected broker ids like 1,2,3, got {text!r}")
    return ids


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "reassign",
        help="move partitions between brokers (kafka-reassign-partitions.sh; Kafka protocol)",
        description="Generate, start, verify, cancel or list partition reassignments. Plans"
        " are kafka-reassign-partitions.sh's JSON files.",
    )
    action = p.add_mutually_exclusive_group(required=True)
    for name, text in (
        ("--generate", "propose a plan spreading --topics over --broker-list (changes nothing)"),
        ("--execute", "start the moves of the plan"),
        ("--verify", "report each move; once all are done, clear the throttles"),
        ("--cancel", "cancel the moves of the plan in progress; clear the throttles"),
        ("--list", "list every move in progress"),
    ):
        action.add_argument(name, action="store_true", help=text)
    p.add_argument(
        "--reassignment-json-file", "--plan", metavar="FILE", help="the plan (Kafka's JSON)"
    )
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help='{"topics": [...]}')
    p.add_argument("--topics", metavar="A,B", help="the topics to move (instead of the file)")
    p.add_argument(
        "--broker-list", "--brokers", type=_broker_ids, metavar="1,2,3", help="target brokers"
    )
    p.add_argument(
        "--seed", type=non_negative_int, default=None, help="--generate: a reproducible plan"
    )
    p.add_argument(
        "--throttle",
        type=positive_int,
        metavar="BYTES_PER_S",
        help="--execute: limit the replication the moves cause to this rate per broker",
    )
    p.add_argument(
        "--preserve-throttles", action="store_true", help="--verify/--cancel: leave throttles"
    )
    p.add_argument(
        "--additional",
        action="store_true",
        help="--execute: start the plan although other moves are in progress",
    )
    p.add_argument(
        "--disable-rack-aware", action="store_true", help="--generate: ignore the brokers' racks"
    )
    add_broker_options(p, "kafka-reassign-partitions.sh --command-config")
    p.set_defaults(func=run)
