"""``kraft elect-leaders``: preferred or unclean leader elections, over the Kafka protocol.

    kraft elect-leaders --bootstrap-server HOST:PORT --election-type preferred|unclean
                        (--all-topic-partitions | --topic T [--partition P ...])

Unlike the REST commands, this one sends ElectLeaders to a broker (as Kafka's
``kafka-leader-election.sh`` does), which forwards it to the active controller; it is the only
command module that names that request, and it uses the project's own Kafka client.  A
partition that failed for a reason other than ``ELECTION_NOT_NEEDED`` makes the command print
``kraft: ELECTION_FAILED: ...`` and exit with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Final, NamedTuple

from kraft.cli.admin_auth import LoginError, kafka_security
from kraft.cli.arguments import non_negative_int
from kraft.cli.broker_tool import add_broker_options, connect_to_broker
from kraft.cli.output import fail, print_json
from kraft.cli.rest_client import REQUEST_TIMEOUT_S, AdminError

if TYPE_CHECKING:
    from broker.kafka_client import KafkaConnection
    from broker.security.client_security import ClientSecurity

ELECTION_TYPES: Final = {"preferred": 0, "unclean": 1}  # Kafka's ElectionType
ELECT_LEADERS_KEY, ELECT_LEADERS_MAX_VERSION = 43, 2
METADATA_KEY, METADATA_MAX_VERSION = 3, 12
NOT_NEEDED: Final = "ELECTION_NOT_NEEDED"


class ElectionOutcome(NamedTuple):
    topic: str
    partition: int
    error: str  # the Kafka error name; NONE: a leader was elected
    message: str | None

    @property
    def failed(self) -> bool:
        return self.error not in ("NONE", NOT_NEEDED)

    def line(self) -> str:
        what = "leader elected" if self.error == "NONE" else self.error
        return f"{self.topic}-{self.partition}: {what}" + (
            f": {self.message}" if self.message and self.error != "NONE" else ""
        )


def run(args: argparse.Namespace) -> int:
    """``kraft elect-leaders``: one line per partition result; status 1 if any partition failed
    for a reason other than ELECTION_NOT_NEEDED."""
    if args.partition and not args.topic:
        return fail("INVALID_ARGUMENTS", "--partition needs --topic")
    try:
        security = kafka_security(args)
    except LoginError as exc:
        return fail("INVALID_LOGIN", str(exc))
    try:
        outcomes = asyncio.run(_elect(args, security))
    except AdminError as exc:
        return fail(exc.error, exc.message)
    outcomes.sort(key=lambda o: (o.topic, o.partition))
    if args.json:
        print_json([o._asdict() for o in outcomes])
    elif outcomes:
        print("\n".join(o.line() for o in outcomes))
    else:
        print("No partition needed an election.")
    failed = [o for o in outcomes if o.failed]
    if failed:
        names = ", ".join(f"{o.topic}-{o.partition} ({o.error})" for o in failed[:10])
        more = f" and {len(failed) - 10} more" if len(failed) > 10 else ""
        return fail("ELECTION_FAILED", f"{len(failed)} partition(s) failed: {names}{more}")
    return 0


async def _elect(
    args: argparse.Namespace, security: ClientSecurity | None
) -> list[ElectionOutcome]:
    from broker.kafka_client import KafkaClientError
    from kafka_protocol.errors import ErrorCode
    from kafka_protocol.exceptions import ProtocolError
    from kafka_protocol.messages import ElectLeadersRequest, ElectLeadersResponse

    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            conn = await connect_to_broker(args.bootstrap_server, security)
            try:
                version = conn.version_for(ELECT_LEADERS_KEY, ELECT_LEADERS_MAX_VERSION)
                if version is None or (version == 0 and args.election_type != "preferred"):
                    raise AdminError("UNSUPPORTED_VERSION", f"{conn.peer} cannot elect leaders")
                wanted = None
                if not args.all_topic_partitions:
                    partitions = args.partition or await _partitions_of(conn, args.topic)
                    wanted = [
                        ElectLeadersRequest.TopicPartitions(topic=args.topic, partitions=partitions)
                    ]
                request = ElectLeadersRequest(
                    election_type=ELECTION_TYPES[args.election_type],
                    topic_partitions=wanted,
                    timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
                )
                response = await conn.send(request, version)
            finally:
                conn.close()
                await conn.wait_closed()
    except TimeoutError:
        raise AdminError("REQUEST_TIMED_OUT", f"no answer within {REQUEST_TIMEOUT_S:g} s") from None
    except (KafkaClientError, ProtocolError) as exc:
        raise AdminError("BROKER_UNREACHABLE", str(exc)) from None
    assert isinstance(response, ElectLeadersResponse)
    if response.error_code != ErrorCode.NONE:
        error = ErrorCode.from_code(response.error_code)
        raise AdminError(error.name, error.message)
    return [
        ElectionOutcome(
            topic.topic,
            result.partition_id,
            ErrorCode.from_code(result.error_code).name,
            result.error_message,
        )
        for topic in response.replica_election_results
        for result in topic.partition_result
    ]


async def _partitions_of(conn: KafkaConnection, topic: str) -> list[int]:
    """Every partition of ``topic``, from a Metadata request (never creating the topic)."""
    from kafka_protocol.errors import ErrorCode
    from kafka_protocol.messages import MetadataRequest, MetadataResponse
    from kafka_protocol.types import TopicName

    version = conn.version_for(METADATA_KEY, METADATA_MAX_VERSION)
    if version is None or version < 4:  # v4 added allow_auto_topic_creation
        raise AdminError("UNSUPPORTED_VERSION", f"{conn.peer} cannot describe topics")
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=TopicName(topic))],
        allow_auto_topic_creation=False,
    )
    response = await conn.send(request, version)
    assert isinstance(response, MetadataResponse)
    described = next((t for t in response.topics if t.name == topic), None)
    if described is None or described.error_code != ErrorCode.NONE:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if described is None else described.error_code
        error = ErrorCode.from_code(code)
        raise AdminError(error.name, f"topic {topic!r}: {error.message}")
    return sorted(p.partition_index for p in described.partitions)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    elect = sub.add_parser(
        "elect-leaders",
        help="run preferred or unclean leader elections (Kafka protocol, via a broker)",
        description="Ask the active controller, through a broker, to elect partition leaders: "
        "the preferred replica (the first of the replicas, if it is in the ISR), or, when no "
        "in-sync replica is alive, any live replica (unclean: committed records may be lost).",
    )
    elect.add_argument(
        "--election-type",
        type=str.lower,
        choices=tuple(ELECTION_TYPES),
        required=True,
        help="preferred or unclean",
    )
    which = elect.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--all-topic-partitions",
        action="store_true",
        help="every partition (only those needing an election are reported)",
    )
    which.add_argument("--topic", metavar="T", help="one topic (all its partitions by default)")
    elect.add_argument(
        "--partition",
        type=non_negative_int,
        action="append",
        metavar="P",
        help="a partition of --topic (repeatable)",
    )
    add_broker_options(elect, "kafka-leader-election.sh --admin.config")
    elect.set_defaults(func=run)
