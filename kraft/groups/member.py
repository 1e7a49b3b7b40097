"""A member of a classic consumer group (protocol type ``consumer``), as Kafka's own consumer
coordinator is one: it joins, takes part in assignment when it leads, heartbeats, commits with
its generation, and leaves.  Connections, retries and coordinator discovery are the shared
:class:`~kraft.groups.client.GroupClient`'s; the encodings and assignors are
:mod:`kraft.groups.assignment`'s.

Theory of operation
-------------------
::

    join()        FindCoordinator -> JoinGroup (MEMBER_ID_REQUIRED: once more, with the id the
                  coordinator gave) -> the leader asks for every member's topics' partition
                  counts and runs the chosen assignor -> SyncGroup -> this member's partitions
    heartbeats()  a task: Heartbeat every heartbeat.interval.ms while the generation lasts; an
                  answer that ends it sets ``rejoin_needed`` (the owner commits, then joins)
    commit()      OffsetCommit with the generation and member id (and committed_offsets(),
                  OffsetFetch, where a new owner of a partition starts)
    leave()       LeaveGroup, so that the group rebalances at once, not a session timeout later

What an error code means for a member is one table, :func:`next_step`::

    NONE                                                       OK
    MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION  REJOIN (at once)
    UNKNOWN_MEMBER_ID                                          REJOIN_AS_NEW (forget the id)
    NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
    COORDINATOR_LOAD_IN_PROGRESS, a lost connection, a timeout FIND_COORDINATOR (with backoff)
    any other retriable error                                  RETRY (with backoff)
    anything else (INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT,
    GROUP_MAX_SIZE_REACHED, FENCED_INSTANCE_ID, ...)           FAIL

A join keeps trying while the coordinator cannot be reached, until it has failed for
:data:`COORDINATOR_WAIT_S` in a row; a JoinGroup the coordinator holds while the group
rebalances is not a failure, and may last up to the rebalance timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from broker.kafka_client import Backoff
from kafka_protocol._codec import Request, Response
from kafka_protocol.client.error_policy import Action, action_for
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka_protocol.types import GroupId
from kraft.groups.assignment import (
    ASSIGNORS,
    PROTOCOL_TYPE,
    Subscriber,
    assign,
    decode_assignment,
    decode_subscription,
    encode_subscription,
)
from kraft.groups.client import GroupClient, GroupError, check
from kraft.groups.model import Coordinator
from metadata_log.image import TopicPartition

__all__ = ["Generation", "GroupMember", "MemberConfig", "Step", "next_step"]

log = logging.getLogger(__name__)

JOIN_GROUP_MAX: Final = 7  # v4+: MEMBER_ID_REQUIRED; v8 only adds a reason
SYNC_GROUP_MAX: Final = 5
HEARTBEAT_MAX: Final = 4
LEAVE_GROUP_MAX, LEAVE_GROUP_MIN = 5, 3  # v3+ list the members (v0-2: one member id)
JOIN_LAPSE_S: Final = 5.0  # a held JoinGroup/SyncGroup may take the rebalance timeout and this
COORDINATOR_WAIT_S: Final = 60.0  # a join gives up after failing this long in a row
COMMIT_ATTEMPTS: Final = 40  # about 35 s of backoff: a coordinator failover fits in it
LEAVE_ATTEMPTS: Final = 3
LEAVE_REASON: Final = "the consumer is being closed"
RETRY_INITIAL_S, RETRY_MAX_S = 0.1, 1.0


class Step(enum.Enum):
    OK = "ok"
    REJOIN = "rejoin"
    REJOIN_AS_NEW = "rejoin as a new member"
    FIND_COORDINATOR = "find the coordinator again"
    RETRY = "retry"
    FAIL = "fail"


_REJOIN: Final = frozenset(
    {ErrorCode.MEMBER_ID_REQUIRED, ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION}
)
# Beyond the core's STALE_COORDINATOR_ERRORS: what GroupClient makes of a lost connection, and
# of no answer in time.
_COORDINATOR_UNREACHABLE: Final = frozenset(
    {ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT}
)
# What to do about the errors a user can do something about.
_ADVICE: Final = {
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: "the group's members use another protocol type or"
    " only assignors this consumer does not offer (range, roundrobin): choose them with"
    " --consumer-property partition.assignment.strategy=..., or use another group",
    ErrorCode.INVALID_SESSION_TIMEOUT: "set session.timeout.ms (--consumer-property) within the"
    " brokers' group.min.session.timeout.ms and group.max.session.timeout.ms",
    ErrorCode.GROUP_MAX_SIZE_REACHED: "the group already has group.max.size members",
}


def next_step(error: ErrorCode) -> Step:
    """What a member does after an answer with ``error`` (the module docstring's table)."""
    if error == ErrorCode.NONE:
        return Step.OK
    if error in _REJOIN:
        return Step.REJOIN
    if error == ErrorCode.UNKNOWN_MEMBER_ID:
        return Step.REJOIN_AS_NEW
    action = action_for(error)
    if error in _COORDINATOR_UNREACHABLE or action is Action.FIND_COORDINATOR:
        return Step.FIND_COORDINATOR
    return Step.FAIL if action is Action.FAIL else Step.RETRY


@dataclass(frozen=True, slots=True)
class MemberConfig:
    """Kafka's consumer settings, by their Kafka names in the comments."""

    group_id: str
    topics: tuple[str, ...]
    assignors: tuple[str, ...] = ("range", "roundrobin")  # partition.assignment.strategy
    session_timeout_ms: int = 45_000  # session.timeout.ms
    heartbeat_interval_ms: int = 3_000  # heartbeat.interval.ms
    rebalance_timeout_ms: int = 300_000  # max.poll.interval.ms
    client_id: str = "kraft-console-consumer"  # client.id

    def __post_init__(self) -> None:
        assert self.group_id and self.topics, self
        assert self.assignors and set(self.assignors) <= set(ASSIGNORS), self.assignors
        assert 0 < self.heartbeat_interval_ms < self.session_timeout_ms, self
        assert self.rebalance_timeout_ms > 0, self


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int
    member_id: str
    leader_id: str
    protocol: str  # the assignor the coordinator chose
    assignment: tuple[TopicPartition, ...]


PartitionCounts = Callable[[Sequence[str]], Awaitable[Mapping[str, int]]]


class GroupMember:
    """This process as a member of ``config.group_id`` (see the module docstring).

    ``partition_counts(topics)`` answers how many partitions each topic has (those that
    exist); the member asks it when it leads the group."""

    def __init__(
        self, client: GroupClient, config: MemberConfig, partition_counts: PartitionCounts
    ) -> None:
        self.client = client
        self.config = config
        self._partition_counts = partition_counts
        self.member_id = ""
        self.generation: Generation | None = None
        self.rejoin_needed = True
        self.failure: GroupError | None = None  # a heartbeat's fatal answer, for the owner
        self._owned: tuple[TopicPartition, ...] = ()

    @property
    def group_id(self) -> str:
        return self.config.group_id

    # --- join ---------------------------------------------------------------------------------

    async def join(self) -> Generation:
        """Join (again) and return the new generation with this member's partitions."""
        self.generation = None
        self.rejoin_needed = True
        backoff = Backoff(RETRY_INITIAL_S, RETRY_MAX_S)
        loop = asyncio.get_running_loop()
        failing_since: float | None = None
        while True:
            try:
                generation = await self._join_and_sync()
            except GroupError as exc:
                step = self._after(exc)
                if step in (Step.REJOIN, Step.REJOIN_AS_NEW):
                    failing_since = None  # the coordinator answered
                    continue  # at once: the coordinator holds the next JoinGroup if need be
                failing_since = failing_since or loop.time()
                if loop.time() - failing_since >= COORDINATOR_WAIT_S:
                    raise GroupError(
                        ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        f"could not join consumer group {self.group_id!r} for"
                        f" {COORDINATOR_WAIT_S:g} s ({exc.message}); check that the brokers"
                        " are up (`kraft cluster status`) and that __consumer_offsets has"
                        " leaders (`kraft topics describe __consumer_offsets`)",
                    ) from None
                await backoff.sleep()
                continue
            self.generation, self._owned = generation, generation.assignment
            self.rejoin_needed = False
            log.info("joined %r: %s", self.group_id, generation)
            return generation

    def _after(self, exc: GroupError) -> Step:
        """Act on a failed request of the group protocol; raise if nothing can cure it."""
        step = next_step(exc.error)
        log.debug("group %r: %s: %s", self.group_id, step.value, exc)
        if step is Step.FAIL:
            advice = _ADVICE.get(exc.error)
            raise GroupError(exc.error, f"{exc.message}; {advice}" if advice else exc.message)
        if step is Step.REJOIN_AS_NEW:
            self.member_id = ""
        if step is Step.FIND_COORDINATOR:
            self.client.forget_coordinator(self.group_id)
        return step

    async def _join_and_sync(self) -> Generation:
        coordinator = await self.client.coordinator(self.group_id)
        joined = await self._join_group(coordinator)
        if joined.protocol_name not in self.config.assignors:
            raise GroupError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"the coordinator chose assignor {joined.protocol_name!r}",
            )
        protocol = joined.protocol_name
        assignments = []
        if joined.leader == self.member_id:
            assigned = await self._assign(protocol, joined.members)
            assignments = [
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in sorted(assigned.items())
            ]
        request = SyncGroupRequest(
            group_id=GroupId(self.group_id),
            generation_id=joined.generation_id,
            member_id=self.member_id,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=protocol,
            assignments=assignments,
        )
        response = await self._send(coordinator, request, SYNC_GROUP_MAX, held=True)
        assert isinstance(response, SyncGroupResponse)
        check(response.error_code, f"SyncGroup of {self.group_id!r}")
        assignment = decode_assignment(response.assignment)
        if assignment is None:
            raise GroupError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"the leader of {self.group_id!r} sent an assignment that is not a consumer's",
            )
        return Generation(
            joined.generation_id,
            self.member_id,
            joined.leader,
            protocol,
            tuple(tp for tp in assignment if tp.topic in self.config.topics),
        )

    async def _join_group(self, coordinator: Coordinator) -> JoinGroupResponse:
        metadata = encode_subscription(self.config.topics, self._owned)
        request = JoinGroupRequest(
            group_id=GroupId(self.group_id),
            session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.rebalance_timeout_ms,
            member_id=self.member_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=[
                JoinGroupRequest.JoinGroupRequestProtocol(name=name, metadata=metadata)
                for name in self.config.assignors
            ],
        )
        response = await self._send(coordinator, request, JOIN_GROUP_MAX, held=True)
        assert isinstance(response, JoinGroupResponse)
        if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id  # KIP-394: join again with it
        check(response.error_code, f"JoinGroup of {self.group_id!r}")
        self.member_id = response.member_id
        return response

    async def _assign(
        self, protocol: str, members: Sequence[JoinGroupResponse.JoinGroupResponseMember]
    ) -> dict[str, bytes]:
        """As the leader: every member's assignment under ``protocol``."""
        subscribers = []
        for m in members:
            subscription = decode_subscription(m.metadata)
            if subscription is None:
                log.warning("member %s of %r sent no consumer subscription", m.member_id, self)
            topics = frozenset(subscription.topics if subscription else ())
            subscribers.append(Subscriber(m.member_id, m.group_instance_id, topics))
        wanted = sorted({t for s in subscribers for t in s.topics})
        counts = await self._partition_counts(wanted)
        return assign(protocol, subscribers, counts)

    # --- heartbeats ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def heartbeating(self) -> AsyncIterator[None]:
        """Heartbeats in a task for as long as the block runs."""
        task = asyncio.create_task(self._heartbeats(), name=f"heartbeats of {self.group_id}")
        try:
            yield
        finally:
            task.cancel()
            await asyncio.wait([task])

    async def _heartbeats(self) -> None:
        interval_s = self.config.heartbeat_interval_ms / 1000
        backoff = Backoff(RETRY_INITIAL_S, min(RETRY_MAX_S, interval_s))
        delay_s = interval_s
        while True:
            await asyncio.sleep(delay_s)
            delay_s = interval_s
            generation = self.generation
            if generation is None or self.rejoin_needed:
                continue  # the owner is joining (a held JoinGroup stands in for heartbeats)
            try:
                await self._heartbeat(generation)
            except GroupError as exc:
                if self.generation is not generation:
                    continue  # a new generation meanwhile: this answer is about the old one
                try:
                    step = self._after(exc)
                except GroupError as fatal:
                    self.failure, self.rejoin_needed = fatal, True
                    continue
                if step in (Step.REJOIN, Step.REJOIN_AS_NEW):
                    self.rejoin_needed = True
                else:  # the coordinator moved, or a passing error: try again soon
                    delay_s = backoff.next_delay()
            else:
                backoff.reset()

    async def _heartbeat(self, generation: Generation) -> None:
        coordinator = await self.client.coordinator(self.group_id)
        request = HeartbeatRequest(
            group_id=GroupId(self.group_id),
            generation_id=generation.generation_id,
            member_id=generation.member_id,
        )
        response = await self._send(coordinator, request, HEARTBEAT_MAX)
        assert isinstance(response, HeartbeatResponse)
        check(response.error_code, f"Heartbeat of {self.group_id!r}")

    # --- commit and leave ---------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> bool:
        """Commit ``offsets`` in this generation: True when done, False when the generation
        ended first (``rejoin_needed`` is set; the partitions' next owners start from the last
        commit, so what was read since is read again: at least once).  Coordinator moves are
        retried (about 35 s); what cannot be cured raises :class:`GroupError`."""
        generation = self.generation
        if not offsets:
            return True
        if generation is None:
            return False

        async def at(coordinator: Coordinator, group_id: str) -> dict[TopicPartition, ErrorCode]:
            return await self.client.commit(
                coordinator,
                group_id,
                offsets,
                generation_id=generation.generation_id,
                member_id=generation.member_id,
            )

        what = f"commit the offsets of consumer group {self.group_id!r}"
        failed = await self.client.on_coordinator(self.group_id, what, at, COMMIT_ATTEMPTS)
        for tp, error in sorted(failed.items()):
            exc = GroupError(error, f"OffsetCommit of {tp.topic}-{tp.partition}: {error.message}")
            if self._after(exc) in (Step.REJOIN, Step.REJOIN_AS_NEW):
                self.rejoin_needed = True
                return False
            raise exc
        return True

    async def committed_offsets(self) -> dict[TopicPartition, int]:
        """Every offset the group has committed (coordinator moves retried, as commits)."""
        what = f"fetch the committed offsets of consumer group {self.group_id!r}"
        return await self.client.on_coordinator(
            self.group_id, what, self.client.committed, COMMIT_ATTEMPTS
        )

    async def leave(self) -> None:
        """LeaveGroup, a few tries (a member that cannot say goodbye is removed after its
        session timeout, so failures are only logged)."""
        member_id, self.member_id = self.member_id, ""
        self.generation, self.rejoin_needed = None, True
        if not member_id:
            return

        async def at(coordinator: Coordinator, group_id: str) -> None:
            identity = LeaveGroupRequest.MemberIdentity(member_id=member_id, reason=LEAVE_REASON)
            request = LeaveGroupRequest(group_id=GroupId(group_id), members=[identity])
            response = await self._send(coordinator, request, LEAVE_GROUP_MAX, LEAVE_GROUP_MIN)
            assert isinstance(response, LeaveGroupResponse)
            check(response.error_code, f"LeaveGroup of {group_id!r}")
            for m in response.members:
                check(m.error_code, f"LeaveGroup of {m.member_id} from {group_id!r}")

        what = f"leave consumer group {self.group_id!r}"
        try:
            await self.client.on_coordinator(self.group_id, what, at, LEAVE_ATTEMPTS)
        except GroupError as exc:  # UNKNOWN_MEMBER_ID: the coordinator had removed it already
            log.log(
                logging.DEBUG if exc.error == ErrorCode.UNKNOWN_MEMBER_ID else logging.WARNING,
                "%s",
                exc,
            )

    async def _send(
        self,
        coordinator: Coordinator,
        request: Request,
        max_version: int,
        min_version: int = 0,
        *,
        held: bool = False,
    ) -> Response:
        """To the coordinator; a request it may hold (``held``: JoinGroup, SyncGroup) gets
        the rebalance timeout and a little more, as Kafka's consumer gives it."""
        timeout_s = self.config.rebalance_timeout_ms / 1000 + JOIN_LAPSE_S if held else None
        address = (coordinator.host, coordinator.port)
        return await self.client.send(
            address, request, max_version, min_version, timeout_s=timeout_s
        )

    def __repr__(self) -> str:
        return f"GroupMember({self.group_id!r}, member_id={self.member_id!r})"
