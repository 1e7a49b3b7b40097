"""Consumer group administration over the Kafka protocol: what Kafka's AdminClient and
``kafka-consumer-groups.sh`` do, for the REST admin API of any node (a controller's too: it
reaches the brokers at the PLAINTEXT endpoints of its metadata image).

Theory of operation
-------------------
Every operation is a few requests on the brokers' own Kafka client::

    list       ListGroups to every unfenced broker (each lists the groups it coordinates)
    describe   FindCoordinator -> DescribeGroups + OffsetFetch (all partitions) on the
               coordinator -> ListOffsets (latest) on each partition's leader
    delete     FindCoordinator -> DeleteGroups (an empty group only: NON_EMPTY_GROUP)
    reset      FindCoordinator -> DescribeGroups (Empty or Dead only, as Kafka's tool) +
               OffsetFetch -> ListOffsets (earliest, latest or by timestamp) -> plan
               -> OffsetCommit (generation -1, no member id) unless it is a dry run

A request that fails in a way a later attempt may cure (a connection lost, no answer within
``request_timeout_s``, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, any retriable Kafka
error) is retried with backoff, the coordinator found again each time, at most
:data:`MAX_ATTEMPTS` times; the caller bounds the whole operation (``asyncio.timeout``).
Connections are kept, one per broker address, until :meth:`GroupAdmin.close`.

What the answers mean is computed by plain functions (no I/O): :func:`decode_assignment`,
:func:`lag_of`, :func:`partition_offsets`, :func:`offsets_needed` and :func:`plan_reset`.

Lag is Kafka's: the high watermark (the consumer-visible log end) minus the committed offset,
and unknown (``None``, the tool's ``-``) without a committed offset or a high watermark.

Local failures (remote outcomes end as Kafka error codes)::

    GroupAdminError     an operation failed: a Kafka error code and a message (after the
                        retries, for a retriable one)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from broker.kafka_client import Backoff, KafkaClientError, KafkaConnection
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.messages import (
    ConsumerProtocolAssignment,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka_protocol.types import BrokerId, GroupId, TopicName
from metadata_log.image import ClusterImage, TopicPartition

__all__ = [
    "Coordinator",
    "GroupAdmin",
    "GroupAdminError",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "PartitionOffsets",
    "PlannedOffset",
    "ResetResult",
    "ResetTarget",
    "ToEarliest",
    "ToLatest",
    "ToOffset",
    "ToOffsets",
    "ToTimestamp",
    "decode_assignment",
    "lag_of",
    "offsets_needed",
    "partition_offsets",
    "plan_reset",
]

log = logging.getLogger(__name__)

CLIENT_ID: Final = "kraft-group-admin"
LISTENER: Final = "PLAINTEXT"
DEFAULT_REQUEST_TIMEOUT_S: Final = 5.0  # one round trip to one broker
MAX_ATTEMPTS: Final = 8  # per operation; about 3.5 s of backoff in all
LIST_OFFSETS_ATTEMPTS: Final = 3  # a partition without a leader should not stall a describe
RETRY_INITIAL_S, RETRY_MAX_S = 0.05, 1.0
# Highest versions asked for (the broker may support more; these have the single-group shapes).
FIND_COORDINATOR_MAX: Final = 3  # v4 batches keys
DESCRIBE_GROUPS_MAX: Final = 5
LIST_GROUPS_MAX: Final = 4
OFFSET_FETCH_MAX, OFFSET_FETCH_ALL_MIN = 7, 2  # v8 batches groups; v2 added topics=null (all)
OFFSET_COMMIT_MAX: Final = 8
LIST_OFFSETS_MAX, LIST_OFFSETS_MIN = 7, 1
DELETE_GROUPS_MAX: Final = 2
GROUP_KEY_TYPE: Final = 0
CONSUMER_REPLICA_ID: Final = BrokerId(-1)
LATEST, EARLIEST = -1, -2  # ListOffsets timestamps
NO_OFFSET: Final = -1  # OffsetFetch: no committed offset; ListOffsets: no record at a timestamp
INACTIVE_STATES: Final = frozenset({"Empty", "Dead"})  # where Kafka's tool resets offsets
# OffsetCommit without a generation is refused while members are in the group.
_GROUP_BECAME_ACTIVE: Final = frozenset(
    {
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.FENCED_INSTANCE_ID,
    }
)

T = TypeVar("T")
Address = tuple[str, int]


class GroupAdminError(Exception):
    """An operation failed with ``error`` (a Kafka error code) and ``message``."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(f"{error.name}: {message}")
        self.error = error
        self.message = message


class _Retriable(GroupAdminError):
    """A failure that another attempt (another broker, a new coordinator) may cure."""


# --- what the operations answer ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    state: str
    protocol_type: str
    coordinator: int  # the broker that listed it


@dataclass(frozen=True, slots=True)
class Coordinator:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    # The member's partitions; None when the assignment is not a consumer's (another protocol
    # type, or bytes that do not decode).  Empty until the group is Stable (Kafka).
    assignment: tuple[TopicPartition, ...] | None


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    topic: str
    partition: int
    committed: int | None  # None: no committed offset
    high_watermark: int | None  # None: the partition's leader did not answer
    lag: int | None
    member_id: str | None  # the member it is assigned to


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the assignor (consumers) or the protocol; "" unless Stable
    coordinator: Coordinator
    members: tuple[MemberDescription, ...]
    partitions: tuple[PartitionOffsets, ...]

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions if p.lag is not None)


@dataclass(frozen=True, slots=True)
class ToEarliest:
    """Each partition's log start offset."""


@dataclass(frozen=True, slots=True)
class ToLatest:
    """Each partition's high watermark."""


@dataclass(frozen=True, slots=True)
class ToTimestamp:
    """The first offset whose timestamp is at or after ``timestamp_ms``; the high watermark
    where there is none (Kafka's tool)."""

    timestamp_ms: int

    def __post_init__(self) -> None:
        assert self.timestamp_ms >= 0, self.timestamp_ms


@dataclass(frozen=True, slots=True)
class ToOffset:
    """The same offset for every partition, kept within [log start, high watermark]."""

    offset: int

    def __post_init__(self) -> None:
        assert self.offset >= 0, self.offset


@dataclass(frozen=True, slots=True)
class ToOffsets:
    """An offset per partition (these partitions only), each kept within the log's range."""

    offsets: Mapping[TopicPartition, int]


ResetTarget = ToEarliest | ToLatest | ToTimestamp | ToOffset | ToOffsets


@dataclass(frozen=True, slots=True)
class PlannedOffset:
    topic: str
    partition: int
    previous: int | None  # the committed offset before (None: none)
    offset: int  # the new one


@dataclass(frozen=True, slots=True)
class ResetResult:
    group_id: str
    executed: bool  # False: a dry run, nothing was committed
    partitions: tuple[PlannedOffset, ...]


# --- pure functions ---------------------------------------------------------------------------


def decode_assignment(data: bytes) -> tuple[TopicPartition, ...] | None:
    """A ``ConsumerProtocolAssignment`` (an int16 version, then the body; later versions only
    add fields, so a newer one is read as the newest we know, ignoring what follows): the
    partitions, sorted; None if ``data`` is not one.  Empty bytes: no assignment yet."""
    if not data:
        return ()
    if len(data) < 2:
        return None
    version = int.from_bytes(data[:2], "big", signed=True)
    if version < 0:
        return None
    version = min(version, ConsumerProtocolAssignment.MAX_VERSION)
    try:
        assignment, _ = ConsumerProtocolAssignment.decode_from(memoryview(data), 2, version)
    except (ProtocolError, ValueError):
        return None
    return tuple(
        sorted(
            TopicPartition(str(t.topic), p)
            for t in assignment.assigned_partitions
            for p in t.partitions
        )
    )


def lag_of(committed: int | None, high_watermark: int | None) -> int | None:
    """Kafka's ``getLag``: unknown without a committed offset or a high watermark."""
    if committed is None or committed < 0 or high_watermark is None:
        return None
    return high_watermark - committed


def partition_offsets(
    members: Iterable[MemberDescription],
    committed: Mapping[TopicPartition, int],
    high_watermarks: Mapping[TopicPartition, int | None],
) -> list[PartitionOffsets]:
    """One row per partition that is assigned to a member or has a committed offset (Kafka's
    ``describe --offsets``), sorted by topic and partition."""
    owner = {tp: m.member_id for m in members for tp in m.assignment or ()}
    rows = []
    for tp in sorted(set(owner) | set(committed)):
        offset = committed.get(tp)
        hw = high_watermarks.get(tp)
        rows.append(
            PartitionOffsets(tp.topic, tp.partition, offset, hw, lag_of(offset, hw), owner.get(tp))
        )
    return rows


def offsets_needed(target: ResetTarget) -> tuple[int, ...]:
    """The ListOffsets timestamps a reset to ``target`` needs to know (EARLIEST, LATEST, or
    the target's own timestamp)."""
    if isinstance(target, ToEarliest):
        return (EARLIEST,)
    if isinstance(target, ToLatest):
        return (LATEST,)
    if isinstance(target, ToTimestamp):
        return (target.timestamp_ms, LATEST)
    return (EARLIEST, LATEST)


def plan_reset(
    partitions: Sequence[TopicPartition],
    target: ResetTarget,
    committed: Mapping[TopicPartition, int],
    listed: Mapping[int, Mapping[TopicPartition, int]],
) -> list[PlannedOffset]:
    """The new offset of each partition; ``listed`` holds, for each timestamp of
    :func:`offsets_needed`, every partition's ListOffsets answer."""
    planned = []
    for tp in sorted(partitions):
        if isinstance(target, ToEarliest):
            offset = listed[EARLIEST][tp]
        elif isinstance(target, ToLatest):
            offset = listed[LATEST][tp]
        elif isinstance(target, ToTimestamp):
            found = listed[target.timestamp_ms][tp]
            offset = found if found >= 0 else listed[LATEST][tp]
        else:
            wanted = target.offset if isinstance(target, ToOffset) else target.offsets[tp]
            # Kafka's checkOffsetsRange: below the log start or above the end is moved in.
            offset = max(listed[EARLIEST][tp], min(wanted, listed[LATEST][tp]))
        assert offset >= 0, (tp, target, offset)
        planned.append(PlannedOffset(tp.topic, tp.partition, committed.get(tp), offset))
    return planned


def _check(code: int, what: str) -> None:
    """Raise for an error code: retriable ones (NOT_COORDINATOR, ...) as :class:`_Retriable`."""
    if code == ErrorCode.NONE:
        return
    error = ErrorCode.from_code(code)
    cls = _Retriable if error.retriable else GroupAdminError
    raise cls(error, f"{what}: {error.message}")


# --- the operations ---------------------------------------------------------------------------


class GroupAdmin:
    """Group operations against the brokers of ``image()`` (see the module docstring)."""

    def __init__(
        self,
        image: Callable[[], ClusterImage | None],
        *,
        local: Callable[[], tuple[int, Address] | None] = lambda: None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        client_id: str = CLIENT_ID,
    ) -> None:
        self._image = image
        # This node's broker id and the address it listens on: a broker that bound an
        # ephemeral port (kraft dev --port 0) is registered with port 0.
        self._local = local
        self.request_timeout_s = request_timeout_s
        self.client_id = client_id
        self._connections: dict[Address, KafkaConnection] = {}
        self._connecting: dict[Address, asyncio.Lock] = {}

    async def close(self) -> None:
        """Close every connection (requests in flight fail)."""
        connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close()
        for conn in connections:
            await conn.wait_closed()

    # --- list ---------------------------------------------------------------------------------

    async def list_groups(self) -> list[GroupListing]:
        """Every group of every live broker, sorted by id; a broker that cannot answer fails
        the whole list (Kafka's ``--list``), since a partial list would silently miss groups."""
        brokers = self._live_brokers()
        listed: dict[int, list[GroupListing] | GroupAdminError] = {}

        async def one(broker_id: int, address: Address) -> None:
            try:
                listed[broker_id] = await self._retrying(
                    f"list groups on broker {broker_id}",
                    lambda _: self._list_at(broker_id, address),
                )
            except GroupAdminError as exc:
                listed[broker_id] = exc

        async with asyncio.TaskGroup() as tasks:
            for broker_id, address in brokers:
                tasks.create_task(one(broker_id, address))
        merged: dict[str, GroupListing] = {}
        for broker_id, _ in brokers:
            result = listed[broker_id]
            if isinstance(result, GroupAdminError):
                raise GroupAdminError(result.error, result.message)
            for group in result:
                # During a coordinator move two brokers may briefly list one group.
                merged.setdefault(group.group_id, group)
        return [merged[g] for g in sorted(merged)]

    async def _list_at(self, broker_id: int, address: Address) -> list[GroupListing]:
        response = await self._send(address, ListGroupsRequest(), LIST_GROUPS_MAX)
        assert isinstance(response, ListGroupsResponse)
        _check(response.error_code, f"ListGroups on broker {broker_id}")
        return [
            GroupListing(str(g.group_id), g.group_state, g.protocol_type, broker_id)
            for g in response.groups
        ]

    # --- describe -----------------------------------------------------------------------------

    async def describe_group(self, group_id: str) -> GroupDescription:
        """State, members and assignments, and each partition's committed offset, high
        watermark and lag; GROUP_ID_NOT_FOUND if the group has neither members nor offsets."""
        coordinator, described, committed = await self._on_coordinator(
            group_id, f"describe group {group_id!r}", self._describe_at
        )
        members = _members(described)
        wanted = {tp for m in members for tp in m.assignment or ()} | set(committed)
        latest = await self._list_offsets(wanted, LATEST)
        high_watermarks = {tp: None if isinstance(o, ErrorCode) else o for tp, o in latest.items()}
        return GroupDescription(
            group_id=group_id,
            state=_state(described, committed),
            protocol_type=described.protocol_type,
            protocol=described.protocol_data,
            coordinator=coordinator,
            members=tuple(members),
            partitions=tuple(partition_offsets(members, committed, high_watermarks)),
        )

    async def _describe_at(
        self, coordinator: Coordinator, group_id: str
    ) -> tuple[Coordinator, DescribeGroupsResponse.DescribedGroup, dict[TopicPartition, int]]:
        address = (coordinator.host, coordinator.port)
        request = DescribeGroupsRequest(groups=[GroupId(group_id)])
        response = await self._send(address, request, DESCRIBE_GROUPS_MAX)
        assert isinstance(response, DescribeGroupsResponse)
        [described] = response.groups
        code = described.error_code
        if code == ErrorCode.GROUP_ID_NOT_FOUND:  # Kafka answers NONE and "Dead"; both mean so
            described.group_state, code = "Dead", ErrorCode.NONE
        _check(code, f"DescribeGroups of {group_id!r} on broker {coordinator.node_id}")
        committed = await self._committed_at(coordinator, group_id)
        if described.group_state == "Dead" and not committed:
            raise GroupAdminError(
                ErrorCode.GROUP_ID_NOT_FOUND, f"consumer group {group_id!r} does not exist"
            )
        return coordinator, described, committed

    async def _committed_at(
        self, coordinator: Coordinator, group_id: str
    ) -> dict[TopicPartition, int]:
        request = OffsetFetchRequest(group_id=GroupId(group_id), topics=None)
        address = (coordinator.host, coordinator.port)
        response = await self._send(address, request, OFFSET_FETCH_MAX, OFFSET_FETCH_ALL_MIN)
        assert isinstance(response, OffsetFetchResponse)
        what = f"OffsetFetch of {group_id!r} on broker {coordinator.node_id}"
        _check(response.error_code, what)
        committed = {}
        for topic in response.topics:
            for p in topic.partitions:
                _check(p.error_code, f"{what} ({topic.name}-{p.partition_index})")
                if p.committed_offset != NO_OFFSET:
                    committed[TopicPartition(str(topic.name), p.partition_index)] = (
                        p.committed_offset
                    )
        return committed

    # --- delete -------------------------------------------------------------------------------

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP (members remain) or done."""

        async def at(coordinator: Coordinator, group_id: str) -> None:
            request = DeleteGroupsRequest(groups_names=[GroupId(group_id)])
            address = (coordinator.host, coordinator.port)
            response = await self._send(address, request, DELETE_GROUPS_MAX)
            assert isinstance(response, DeleteGroupsResponse)
            [result] = response.results
            if result.error_code == ErrorCode.NON_EMPTY_GROUP:
                raise GroupAdminError(
                    ErrorCode.NON_EMPTY_GROUP,
                    f"consumer group {group_id!r} has active members; stop its consumers first",
                )
            if result.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                raise GroupAdminError(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"consumer group {group_id!r} does not exist"
                )
            _check(result.error_code, f"DeleteGroups of {group_id!r}")

        await self._on_coordinator(group_id, f"delete group {group_id!r}", at)

    # --- reset offsets ------------------------------------------------------------------------

    async def reset_offsets(
        self,
        group_id: str,
        topics: Sequence[str] | None,
        target: ResetTarget,
        *,
        execute: bool,
    ) -> ResetResult:
        """Plan (and with ``execute`` commit) new offsets for every partition of ``topics``
        (None: every partition the group has offsets for; a :class:`ToOffsets` target names
        its own).  Only an Empty or Dead group (NON_EMPTY_GROUP otherwise, dry run or not, as
        Kafka's tool); UNKNOWN_TOPIC_OR_PARTITION for a topic or partition that does not exist."""
        committed = await self._on_coordinator(
            group_id, f"reset offsets of {group_id!r}", self._inactive_at
        )
        partitions = self._partitions_to_reset(group_id, topics, target, committed)
        listed: dict[int, Mapping[TopicPartition, int]] = {}
        for timestamp in offsets_needed(target):
            listed[timestamp] = _all_known(await self._list_offsets(partitions, timestamp))
        planned = plan_reset(partitions, target, committed, listed)
        if execute and planned:
            await self._on_coordinator(
                group_id,
                f"commit the offsets of {group_id!r}",
                lambda c, g: self._commit_at(c, g, planned),
            )
        return ResetResult(group_id, execute, tuple(planned))

    async def _inactive_at(
        self, coordinator: Coordinator, group_id: str
    ) -> dict[TopicPartition, int]:
        """The group's committed offsets, if it is inactive."""
        try:
            _, described, committed = await self._describe_at(coordinator, group_id)
        except _Retriable:
            raise
        except GroupAdminError as exc:
            if exc.error != ErrorCode.GROUP_ID_NOT_FOUND:
                raise
            return {}  # a new group: its offsets may be set in advance
        state = _state(described, committed)
        if state not in INACTIVE_STATES:
            raise GroupAdminError(
                ErrorCode.NON_EMPTY_GROUP,
                f"offsets can only be reset while consumer group {group_id!r} is inactive, but"
                f" it is {state} with {len(described.members)} member(s); stop its consumers"
                " first",
            )
        return committed

    def _partitions_to_reset(
        self,
        group_id: str,
        topics: Sequence[str] | None,
        target: ResetTarget,
        committed: Mapping[TopicPartition, int],
    ) -> list[TopicPartition]:
        image = self._current_image()
        if isinstance(target, ToOffsets):
            wanted = sorted(target.offsets)
        elif topics is None:
            wanted = sorted(committed)
            if not wanted:
                raise GroupAdminError(
                    ErrorCode.GROUP_ID_NOT_FOUND,
                    f"consumer group {group_id!r} has no committed offsets; name the topics",
                )
        else:
            wanted = []
            for name in dict.fromkeys(topics):
                topic = image.topics.get(name)
                if topic is None:
                    raise GroupAdminError(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
                    )
                wanted += [TopicPartition(name, p) for p in sorted(topic.partitions)]
        for tp in wanted:
            if image.topics.partition(tp.topic, tp.partition) is None:
                raise GroupAdminError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"partition {tp.topic}-{tp.partition} does not exist",
                )
        return wanted

    async def _commit_at(
        self, coordinator: Coordinator, group_id: str, planned: Sequence[PlannedOffset]
    ) -> None:
        by_topic: dict[str, list[OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
        for plan in planned:
            by_topic.setdefault(plan.topic, []).append(
                OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=plan.partition, committed_offset=plan.offset
                )
            )
        request = OffsetCommitRequest(
            group_id=GroupId(group_id),
            generation_id_or_member_epoch=-1,  # no generation, no member: an admin's commit
            member_id="",
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name=TopicName(t), partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        address = (coordinator.host, coordinator.port)
        response = await self._send(address, request, OFFSET_COMMIT_MAX)
        assert isinstance(response, OffsetCommitResponse)
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code in _GROUP_BECAME_ACTIVE:
                    raise GroupAdminError(
                        ErrorCode.NON_EMPTY_GROUP,
                        f"consumer group {group_id!r} became active during the reset"
                        f" ({ErrorCode.from_code(p.error_code).name}); nothing was committed:"
                        " stop its consumers and try again",
                    )
                _check(p.error_code, f"OffsetCommit of {topic.name}-{p.partition_index}")

    # --- high watermarks and offsets by time ----------------------------------------------------

    async def _list_offsets(
        self, partitions: Iterable[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int | ErrorCode]:
        """ListOffsets at ``timestamp`` to each partition's leader (per the image); a partition
        whose leader is unknown or moved is asked again, a few times, then left as its error."""
        found: dict[TopicPartition, int | ErrorCode] = {}
        pending = sorted(set(partitions))
        backoff = Backoff(RETRY_INITIAL_S, RETRY_MAX_S)
        for attempt in range(LIST_OFFSETS_ATTEMPTS):
            if attempt:
                await backoff.sleep()
            answers = await self._list_offsets_once(pending, timestamp)
            pending = []
            for tp, answer in answers.items():
                last = attempt == LIST_OFFSETS_ATTEMPTS - 1
                if isinstance(answer, ErrorCode) and answer.retriable and not last:
                    pending.append(tp)
                else:
                    found[tp] = answer
            if not pending:
                break
        return found

    async def _list_offsets_once(
        self, partitions: Sequence[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int | ErrorCode]:
        image = self._current_image()
        answers: dict[TopicPartition, int | ErrorCode] = {}
        by_leader: dict[Address, list[TopicPartition]] = {}
        for tp in partitions:
            state = image.topics.partition(tp.topic, tp.partition)
            if state is None:
                answers[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            address = self._address_of(image, state.leader)
            if address is None:
                answers[tp] = ErrorCode.LEADER_NOT_AVAILABLE
            else:
                by_leader.setdefault(address, []).append(tp)

        async def ask(address: Address, tps: list[TopicPartition]) -> None:
            try:
                answers.update(await self._list_offsets_at(address, tps, timestamp))
            except GroupAdminError as exc:
                answers.update(dict.fromkeys(tps, exc.error))

        async with asyncio.TaskGroup() as tasks:
            for address, tps in by_leader.items():
                tasks.create_task(ask(address, tps))
        return answers

    async def _list_offsets_at(
        self, address: Address, partitions: list[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int | ErrorCode]:
        by_topic: dict[str, list[ListOffsetsRequest.ListOffsetsPartition]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(
                ListOffsetsRequest.ListOffsetsPartition(
                    partition_index=tp.partition, timestamp=timestamp
                )
            )
        request = ListOffsetsRequest(
            replica_id=CONSUMER_REPLICA_ID,
            isolation_level=0,  # read_uncommitted, as the tool (no transactions here anyway)
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(name=TopicName(t), partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        response = await self._send(address, request, LIST_OFFSETS_MAX, LIST_OFFSETS_MIN)
        assert isinstance(response, ListOffsetsResponse)
        out: dict[TopicPartition, int | ErrorCode] = {}
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(str(topic.name), p.partition_index)
                out[tp] = (
                    p.offset
                    if p.error_code == ErrorCode.NONE
                    else ErrorCode.from_code(p.error_code)
                )
        for tp in partitions:  # a partition left out of the answer
            out.setdefault(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
        return out

    # --- coordinator, retries and connections -------------------------------------------------

    async def _on_coordinator(
        self,
        group_id: str,
        what: str,
        call: Callable[[Coordinator, str], Awaitable[T]],
    ) -> T:
        """``call(coordinator, group_id)``, finding the coordinator again after a retriable
        failure (it may have moved, or be loading its partition)."""

        async def attempt(n: int) -> T:
            return await call(await self._find_coordinator(group_id, n), group_id)

        return await self._retrying(what, attempt)

    async def _find_coordinator(self, group_id: str, attempt: int) -> Coordinator:
        brokers = self._live_brokers()
        broker_id, address = brokers[attempt % len(brokers)]  # another broker on each retry
        request = FindCoordinatorRequest(key=group_id, key_type=GROUP_KEY_TYPE)
        response = await self._send(address, request, FIND_COORDINATOR_MAX)
        assert isinstance(response, FindCoordinatorResponse)
        _check(response.error_code, f"FindCoordinator for {group_id!r} on broker {broker_id}")
        return Coordinator(int(response.node_id), response.host, response.port)

    async def _retrying(self, what: str, attempt: Callable[[int], Awaitable[T]]) -> T:
        backoff = Backoff(RETRY_INITIAL_S, RETRY_MAX_S)
        for n in range(MAX_ATTEMPTS):
            if n:
                await backoff.sleep()
            try:
                return await attempt(n)
            except _Retriable as exc:
                last = exc
                log.debug("%s: attempt %d failed: %s", what, n + 1, exc)
        raise GroupAdminError(
            last.error, f"{what}: {last.message} (gave up after {MAX_ATTEMPTS} attempts)"
        )

    async def _send(
        self, address: Address, request: Request, max_version: int, min_version: int = 0
    ) -> Response:
        """One round trip; a lost connection or no answer in time is :class:`_Retriable`."""
        peer = f"{address[0]}:{address[1]}"
        conn = None
        try:
            async with asyncio.timeout(self.request_timeout_s):
                conn = await self._connection(address)
                api_key = request.API_KEY
                assert api_key is not None, request.NAME
                version = conn.version_for(api_key, max_version)
                if version is None or version < min_version:
                    raise GroupAdminError(
                        ErrorCode.UNSUPPORTED_VERSION,
                        f"{peer} supports no version {min_version}-{max_version} of {request.NAME}",
                    )
                return await conn.send(request, version)
        except TimeoutError:
            self._drop(address, conn)
            raise _Retriable(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{peer} did not answer {request.NAME} within {self.request_timeout_s:g} s",
            ) from None
        except (OSError, KafkaClientError) as exc:  # connection refused, reset, closed
            self._drop(address, conn)
            raise _Retriable(
                ErrorCode.NETWORK_EXCEPTION, f"{request.NAME} to {peer}: {exc}"
            ) from None
        except ProtocolError as exc:
            raise GroupAdminError(
                ErrorCode.UNKNOWN_SERVER_ERROR, f"{peer} answered {request.NAME} badly: {exc}"
            ) from None

    async def _connection(self, address: Address) -> KafkaConnection:
        lock = self._connecting.setdefault(address, asyncio.Lock())
        async with lock:  # one connection attempt per address at a time
            conn = self._connections.get(address)
            if conn is None or conn.closed:
                conn = await KafkaConnection.open(address[0], address[1], self.client_id)
                self._connections[address] = conn
            return conn

    def _drop(self, address: Address, conn: KafkaConnection | None) -> None:
        if conn is not None and self._connections.get(address) is conn:
            del self._connections[address]
            conn.close()

    # --- the cluster, from the metadata image -------------------------------------------------

    def _current_image(self) -> ClusterImage:
        image = self._image()
        if image is None:
            raise _Retriable(ErrorCode.BROKER_NOT_AVAILABLE, "this node has no metadata yet")
        return image

    def _live_brokers(self) -> list[tuple[int, Address]]:
        image = self._current_image()
        live = []
        for broker_id in sorted(image.brokers):
            address = self._address_of(image, broker_id)
            if address is not None:
                live.append((broker_id, address))
        if not live:
            raise _Retriable(ErrorCode.BROKER_NOT_AVAILABLE, "no broker is alive (unfenced)")
        return live

    def _address_of(self, image: ClusterImage, broker_id: int) -> Address | None:
        """An unfenced broker's PLAINTEXT address (None: unknown, fenced or no listener)."""
        registration = image.brokers.get(broker_id)
        if registration is None or registration.fenced:
            return None
        local = self._local()
        if local is not None and local[0] == broker_id:
            return local[1]
        endpoint = registration.listener(LISTENER)
        return (endpoint.host, endpoint.port) if endpoint is not None else None


def _members(described: DescribeGroupsResponse.DescribedGroup) -> list[MemberDescription]:
    consumer = described.protocol_type in ("consumer", "")
    return sorted(
        (
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                host=m.client_host,
                assignment=decode_assignment(m.member_assignment) if consumer else None,
            )
            for m in described.members
        ),
        key=lambda m: m.member_id,
    )


def _state(
    described: DescribeGroupsResponse.DescribedGroup, committed: Mapping[TopicPartition, int]
) -> str:
    # Offsets committed without membership (assign() and commit) make a group that Kafka's
    # coordinator reports as Empty; this broker keeps no group object for them (Dead).
    if described.group_state == "Dead" and committed:
        return "Empty"
    return described.group_state


def _all_known(answers: Mapping[TopicPartition, int | ErrorCode]) -> dict[TopicPartition, int]:
    """Every partition's offset, or the first partition's error raised (a reset needs all)."""
    known = {}
    for tp, answer in sorted(answers.items()):
        if isinstance(answer, ErrorCode):
            raise GroupAdminError(
                answer, f"ListOffsets of {tp.topic}-{tp.partition}: {answer.message}"
            )
        known[tp] = answer
    return known
