"""``kraft consume TOPIC --group G``: the console consumer as a member of consumer group G, as
Kafka's ``kafka-console-consumer.sh --group`` is one.

Theory of operation
-------------------
::

    brokers     --bootstrap-server, or the live brokers the admin API lists (GET /v1/cluster)
    metadata    Metadata (never creating the topic) from any broker: partitions and leaders
    join        GroupMember.join(): this process is a member of G with some partitions
    positions   G's committed offset of each; without one, auto.offset.reset: the log start
                with --from-beginning, else the high watermark (ListOffsets); the same after
                OFFSET_OUT_OF_RANGE
    fetch       Fetch from each partition's leader (its partitions in one request), long polls
                of at most FETCH_WAIT_MS, so that a rebalance or a signal is noticed soon
    print       the records, in offset order per partition
    commit      every position that moved: after each batch printed, and before rejoining or
                leaving; a partition's next owner starts after what was printed (nothing
                skipped, at least once), and in a stable group nothing is printed twice
    exit        SIGINT/SIGTERM, --max-messages, or --timeout-ms without a record (counted
                from the last join): commit, then LeaveGroup, so the group rebalances at once

Records come over Kafka Fetch (``GroupClient.fetch_at``) from each leader, not through the REST
records endpoint of the group-less path: the member speaks the Kafka protocol to its coordinator
already (one client, one connection per broker for both), and a REST read of a partition led
elsewhere would take one more hop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from broker.kafka_client import Backoff
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import MetadataRequest, MetadataResponse
from kafka_protocol.record_batch import Record
from kafka_protocol.types import TopicName
from kraft.cli.admin_auth import LoginError, kafka_security
from kraft.cli.record_printer import Consumed, Printer
from kraft.cli.rest_client import AdminClient, AdminError
from kraft.groups.client import Address, Fetched, GroupClient, GroupError, Retriable, check
from kraft.groups.member import GroupMember, MemberConfig
from kraft.groups.model import EARLIEST, LATEST
from metadata_log.image import TopicPartition

__all__ = ["GroupConsumer", "MetadataView", "consume_in_group", "consumer_settings"]

METADATA_MAX, METADATA_MIN = 12, 4  # v4+: allow_auto_topic_creation=false
FETCH_WAIT_MS: Final = 500
FETCH_MAX_BYTES: Final = 16 * 1024 * 1024  # per response (fetch.max.bytes is 50 MiB)
PARTITION_MAX_BYTES: Final = 1024 * 1024  # max.partition.fetch.bytes
RESET_ROUNDS: Final = 5  # ListOffsets rounds, each after new metadata
CLOSE_TIMEOUT_S: Final = 15.0  # the last commit and the LeaveGroup
Reset = Literal["earliest", "latest", "none"]
RESETS: Final[Mapping[str, Reset]] = {"earliest": "earliest", "latest": "latest", "none": "none"}
# partition.assignment.strategy: our names, and the Java classes' names for them.
ASSIGNOR_NAMES: Final = {
    "range": "range",
    "roundrobin": "roundrobin",
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
}
PROPERTIES: Final = (
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "partition.assignment.strategy",
    "auto.offset.reset",
    "client.id",
)


# --- settings (pure) --------------------------------------------------------------------------


def consumer_settings(
    group: str,
    topic: str,
    from_beginning: bool,
    properties: Iterable[tuple[str, str]] = (),
) -> tuple[MemberConfig, Reset]:
    """The member's configuration and the auto.offset.reset policy, from the command line's
    --consumer-property pairs (Kafka's names and rules); AdminError for what is not valid."""
    props = dict(properties)
    unknown = sorted(set(props) - set(PROPERTIES))
    if unknown:
        raise AdminError(
            "INVALID_ARGUMENTS",
            f"unsupported consumer property {unknown[0]!r}; supported: {', '.join(PROPERTIES)}",
        )
    given = props.get("auto.offset.reset", "earliest" if from_beginning else "latest")
    reset = RESETS.get(given)
    if reset is None:
        raise AdminError(
            "INVALID_ARGUMENTS",
            f"auto.offset.reset must be earliest, latest or none, not {given!r}",
        )
    if from_beginning and reset != "earliest":
        raise AdminError(
            "INVALID_ARGUMENTS",
            f"can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}'",
        )
    defaults = MemberConfig(group, (topic,))
    timeouts = {
        name: _positive(props, key, getattr(defaults, name))
        for name, key in (
            ("session_timeout_ms", "session.timeout.ms"),
            ("heartbeat_interval_ms", "heartbeat.interval.ms"),
            ("rebalance_timeout_ms", "max.poll.interval.ms"),
        )
    }
    if timeouts["heartbeat_interval_ms"] >= timeouts["session_timeout_ms"]:
        raise AdminError(
            "INVALID_ARGUMENTS", "heartbeat.interval.ms must be lower than session.timeout.ms"
        )
    config = MemberConfig(
        group,
        (topic,),
        assignors=_assignors(props.get("partition.assignment.strategy"), defaults.assignors),
        client_id=props.get("client.id") or defaults.client_id,
        **timeouts,
    )
    return config, reset


def _positive(props: Mapping[str, str], key: str, default: int) -> int:
    text = props.get(key)
    if text is None:
        return default
    if not text.strip().isdigit() or int(text) < 1:
        raise AdminError(
            "INVALID_ARGUMENTS", f"{key} must be a whole number of ms >= 1, not {text!r}"
        )
    return int(text)


def _assignors(text: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    if text is None:
        return default
    names = [n.strip() for n in text.split(",") if n.strip()]
    wrong = [n for n in names if n not in ASSIGNOR_NAMES]
    if wrong or not names:
        raise AdminError(
            "INVALID_ARGUMENTS",
            f"partition.assignment.strategy {text!r}: this consumer offers range and roundrobin",
        )
    return tuple(dict.fromkeys(ASSIGNOR_NAMES[n] for n in names))


# --- brokers and partitions -------------------------------------------------------------------


class MetadataView:
    """The brokers and leaders of the last Metadata answer (a ``BrokerView``); before the
    first, the bootstrap brokers."""

    def __init__(self, bootstrap: Sequence[tuple[int, Address]]) -> None:
        assert bootstrap, "no bootstrap brokers"
        self._brokers: dict[int, Address] = dict(bootstrap)
        self._leaders: dict[TopicPartition, int] = {}
        self.partitions: dict[str, int] = {}  # topic -> partition count

    def live_brokers(self) -> list[tuple[int, Address]]:
        if not self._brokers:
            raise Retriable(ErrorCode.BROKER_NOT_AVAILABLE, "no broker is alive")
        return sorted(self._brokers.items())

    def leader_of(self, tp: TopicPartition) -> Address | ErrorCode:
        if tp.topic not in self.partitions or tp.partition >= self.partitions[tp.topic]:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        address = self._brokers.get(self._leaders.get(tp, -1))
        return ErrorCode.LEADER_NOT_AVAILABLE if address is None else address

    def apply(self, response: MetadataResponse, topics: Iterable[str]) -> None:
        """Take in an answer about ``topics`` (a topic it does not list: gone)."""
        if response.brokers:
            self._brokers = {int(b.node_id): (b.host, b.port) for b in response.brokers}
        for name in topics:
            self.partitions.pop(name, None)
        self._leaders = {tp: b for tp, b in self._leaders.items() if tp.topic in self.partitions}
        for topic in response.topics:
            if topic.error_code != ErrorCode.NONE or topic.name is None:
                continue  # UNKNOWN_TOPIC_OR_PARTITION, or being created (LEADER_NOT_AVAILABLE)
            self.partitions[topic.name] = len(topic.partitions)
            for p in topic.partitions:
                self._leaders[TopicPartition(topic.name, p.partition_index)] = int(p.leader_id)


async def refresh_metadata(
    client: GroupClient, view: MetadataView, topics: Sequence[str]
) -> dict[str, int]:
    """Metadata about ``topics`` from any broker, into ``view``; their partition counts (a
    topic that does not exist is left out)."""
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=TopicName(t)) for t in topics],
        allow_auto_topic_creation=False,
    )

    async def attempt(n: int) -> MetadataResponse:
        brokers = view.live_brokers()
        _, address = brokers[n % len(brokers)]
        response = await client.send(address, request, METADATA_MAX, METADATA_MIN)
        assert isinstance(response, MetadataResponse)
        return response

    view.apply(await client.retrying("Metadata", attempt), topics)
    return {t: view.partitions[t] for t in topics if t in view.partitions}


# --- records (pure) ---------------------------------------------------------------------------


# --- the member's loop ------------------------------------------------------------------------


@dataclass
class GroupConsumer:
    """Prints the records of the partitions ``member`` is assigned (module docstring)."""

    client: GroupClient
    view: MetadataView
    member: GroupMember
    topic: str
    printer: Printer
    reset: Reset
    max_messages: int | None = None
    timeout_ms: int | None = None
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    _backoff: Backoff = field(default_factory=lambda: Backoff(0.1, 1.0))

    async def run(self) -> None:
        """Until --max-messages or --timeout-ms (the caller cancels it on a signal)."""
        loop = asyncio.get_running_loop()
        last_record = loop.time()
        while not self._enough():
            if self.member.failure is not None:
                raise self.member.failure
            if self.member.rejoin_needed:
                await self.commit()  # the next owner of each partition starts after these
                await self._join()
                last_record = loop.time()
            wait_ms = FETCH_WAIT_MS
            if self.timeout_ms is not None:
                wait_ms = min(wait_ms, int(self.timeout_ms - (loop.time() - last_record) * 1000))
                if wait_ms <= 0:
                    return
            if await self._poll(wait_ms):
                last_record = loop.time()

    async def commit(self) -> None:
        """Commit every position that moved (a rebalance first: not committed, but the
        generation's end is noted and the next :meth:`run` step rejoins)."""
        moved = {tp: p for tp, p in self.positions.items() if self.committed.get(tp) != p}
        if moved and await self.member.commit(moved):
            self.committed.update(moved)

    async def close(self, *, commit: bool = True) -> None:
        """Commit (unless what was written never reached the reader: a closed stdout), then
        leave the group."""
        try:
            if commit:
                await self.commit()
        finally:
            await self.member.leave()

    def _enough(self) -> bool:
        return self.max_messages is not None and self.printer.count >= self.max_messages

    async def _join(self) -> None:
        self.positions, self.committed = {}, {}
        assigned = (await self.member.join()).assignment
        committed = await self.member.committed_offsets() if assigned else {}
        self.committed = {tp: committed[tp] for tp in assigned if tp in committed}
        self.positions = dict(self.committed)
        await self._reset([tp for tp in assigned if tp not in committed])

    async def _reset(self, partitions: Sequence[TopicPartition]) -> None:
        """auto.offset.reset: position ``partitions`` at their log start or high watermark."""
        if not partitions:
            return
        if self.reset == "none":
            names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions)
            raise GroupError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"no committed offset (or one out of range) for {names} and"
                " auto.offset.reset=none; reset the group's offsets with `kraft groups"
                " reset-offsets`",
            )
        timestamp = EARLIEST if self.reset == "earliest" else LATEST
        pending = list(partitions)
        for _ in range(RESET_ROUNDS):
            answers = await self.client.list_offsets(pending, timestamp)
            pending = []
            for tp, answer in sorted(answers.items()):
                if isinstance(answer, int):
                    self.positions[tp] = answer
                elif answer.retriable:
                    pending.append(tp)
                else:
                    check(answer, f"ListOffsets of {tp.topic}-{tp.partition}")
            if not pending:
                return
            await self._refresh()
        raise GroupError(
            ErrorCode.LEADER_NOT_AVAILABLE,
            f"no leader answered ListOffsets for {pending[0].topic}-{pending[0].partition};"
            " check the topic's leaders (`kraft topics describe`)",
        )

    async def _poll(self, wait_ms: int) -> bool:
        """One fetch and what it brings printed and committed; whether it printed any."""
        if not self.positions:
            await asyncio.sleep(wait_ms / 1000)  # nothing assigned: wait for a rebalance
            return False
        fetched = await self._fetch(wait_ms)
        printed, stale, out_of_range = False, False, []
        for tp, answer in sorted(fetched.items()):
            if isinstance(answer, ErrorCode):
                if answer == ErrorCode.OFFSET_OUT_OF_RANGE:
                    out_of_range.append(tp)
                elif answer.retriable:
                    stale = True  # a leader moved, or is not known yet
                else:
                    check(answer, f"Fetch of {tp.topic}-{tp.partition}")
            elif not self._enough():
                printed |= self._print(tp, answer.records, answer.next_position)
        self.printer.out.flush()
        if printed:
            self._backoff.reset()
            await self.commit()
        await self._reset(out_of_range)
        if stale:
            await self._refresh()
        return printed

    def _print(self, tp: TopicPartition, records: list[Record], next_position: int) -> bool:
        left = None if self.max_messages is None else self.max_messages - self.printer.count
        shown = records if left is None else records[:left]
        for r in shown:
            self.printer.write(
                Consumed(tp.partition, r.offset, r.timestamp, r.key, r.value, r.headers)
            )
            self.positions[tp] = r.offset + 1
        if len(shown) == len(records):
            self.positions[tp] = max(self.positions[tp], next_position)
        return bool(shown)

    async def _refresh(self) -> None:
        await self._backoff.sleep()
        if self.topic not in await refresh_metadata(self.client, self.view, [self.topic]):
            raise GroupError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {self.topic!r} no longer exists"
            )

    async def _fetch(self, wait_ms: int) -> dict[TopicPartition, Fetched | ErrorCode]:
        async def fetch(
            address: Address, positions: dict[TopicPartition, int]
        ) -> dict[TopicPartition, Fetched | ErrorCode]:
            return await self.client.fetch_at(
                address,
                self.topic,
                {tp.partition: offset for tp, offset in positions.items()},
                wait_ms=wait_ms,
                max_bytes=FETCH_MAX_BYTES,
                partition_max_bytes=PARTITION_MAX_BYTES,
            )

        return await self.client.on_leaders(self.positions, fetch)


# --- the command ------------------------------------------------------------------------------


def consume_in_group(args: argparse.Namespace, admin: AdminClient, printer: Printer) -> None:
    """``kraft consume --group``: print records as a member of the group until done."""
    config, reset = consumer_settings(
        args.group, args.topic, args.from_beginning, args.consumer_property or ()
    )
    if args.bootstrap_server:
        bootstrap = [(-1 - i, address) for i, address in enumerate(args.bootstrap_server)]
    else:
        bootstrap = _brokers_of(admin)
    try:
        with contextlib.suppress(KeyboardInterrupt):  # before the signal handlers are set
            asyncio.run(_consume(args, bootstrap, config, reset, printer))
    except GroupError as exc:
        raise AdminError(exc.error.name, exc.message) from None


def _brokers_of(admin: AdminClient) -> list[tuple[int, Address]]:
    cluster = admin.call("GET", "/v1/cluster").body
    brokers = [
        (int(b["id"]), (str(b["host"]), int(b["port"])))
        for b in cluster["brokers"]
        if not b["fenced"] and b["host"] and b["port"]
    ]
    if not brokers:
        raise AdminError(
            "BROKER_NOT_AVAILABLE",
            f"the admin API at {admin.base_url} lists no live broker with an address to connect"
            " to; start a broker, or give --bootstrap-server HOST:PORT",
        )
    return brokers


async def _consume(
    args: argparse.Namespace,
    bootstrap: Sequence[tuple[int, Address]],
    config: MemberConfig,
    reset: Reset,
    printer: Printer,
) -> None:
    view = MetadataView(bootstrap)
    try:
        security = kafka_security(args)
    except LoginError as exc:
        raise AdminError("INVALID_LOGIN", str(exc)) from None
    client = GroupClient(view, client_id=config.client_id, security=security)
    try:
        try:
            found = await refresh_metadata(client, view, [args.topic])
        except GroupError as exc:
            raise AdminError(
                "BROKER_UNREACHABLE",
                f"{exc.message}; are the brokers up (`kraft cluster status`)? or give"
                " --bootstrap-server HOST:PORT",
            ) from None
        if args.topic not in found:
            raise AdminError(
                "UNKNOWN_TOPIC_OR_PARTITION",
                f"topic {args.topic!r} does not exist; create it with"
                f" `kraft topics create {args.topic}`",
            )

        async def partition_counts(topics: Sequence[str]) -> dict[str, int]:
            return await refresh_metadata(client, view, topics)

        member = GroupMember(client, config, partition_counts)
        consumer = GroupConsumer(
            client, view, member, args.topic, printer, reset, args.max_messages, args.timeout_ms
        )
        await _run_until_stopped(consumer)
    finally:
        await client.close()


async def _run_until_stopped(consumer: GroupConsumer) -> None:
    """Run the consumer until it is done or a signal comes, then commit and leave (a second
    signal: exit without them); raise what ended it, if it failed."""
    loop = asyncio.get_running_loop()
    consuming = asyncio.create_task(consumer.run(), name="consume")
    closing: asyncio.Task[None] | None = None

    def stop() -> None:
        (consuming if closing is None else closing).cancel()

    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        with contextlib.suppress(NotImplementedError):  # no signal handlers (Windows)
            loop.add_signal_handler(sig, stop)
    try:
        async with consumer.member.heartbeating():
            await asyncio.wait([consuming])
            broken = not consuming.cancelled() and isinstance(
                consuming.exception(), BrokenPipeError
            )
            closing = asyncio.create_task(_close(consumer, not broken), name="close")
            await asyncio.wait([closing])
    finally:
        for sig in signals:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(sig)
    for task in (consuming, closing):
        if not task.cancelled() and (failure := task.exception()) is not None:
            raise failure


async def _close(consumer: GroupConsumer, commit: bool) -> None:
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await consumer.close(commit=commit)
    except TimeoutError:
        raise GroupError(
            ErrorCode.REQUEST_TIMED_OUT,
            f"could not commit and leave consumer group {consumer.member.group_id!r} within"
            f" {CLOSE_TIMEOUT_S:g} s; the group rebalances after the session timeout",
        ) from None
