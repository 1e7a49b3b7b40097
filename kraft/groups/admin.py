"""Consumer group administration over the Kafka protocol: what Kafka's AdminClient and
``kafka-consumer-groups.sh`` do, for the REST admin API of any node (a controller's too: it
reaches the brokers at the PLAINTEXT endpoints of its metadata image).

Theory of operation
-------------------
Every operation is a few requests on the brokers' own Kafka client::

    list       ListGroups to every unfenced broker (each lists the groups it coordinates)
    describe   FindCoordinator -> ConsumerGroupDescribe (a KIP-848 group), else
               DescribeGroups + OffsetFetch (all partitions) on the coordinator
               -> ListOffsets (latest) on each partition's leader
    delete     FindCoordinator -> DeleteGroups (an empty group only: NON_EMPTY_GROUP)
    reset      FindCoordinator -> DescribeGroups (Empty or Dead only, as Kafka's tool) +
               OffsetFetch -> ListOffsets (earliest, latest or by timestamp) -> plan
               -> OffsetCommit (generation -1, no member id) unless it is a dry run

Connections, retries and coordinator discovery are :class:`~kraft.groups.client.GroupClient`'s
(on the brokers of the node's metadata image); what the answers mean is computed by plain
functions: :func:`~kraft.groups.assignment.decode_assignment` and those of
:mod:`kraft.groups.model` (lag, describe rows, reset plans).  Failures are
:class:`~kraft.groups.client.GroupError` (``GroupAdminError``): a Kafka error code and a message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka_protocol.types import GroupId
from kraft.groups.assignment import PROTOCOL_TYPE, decode_assignment
from kraft.groups.client import (
    DEFAULT_REQUEST_TIMEOUT_S,
    PLAINTEXT_ROUTE,
    Address,
    BrokerRoute,
    GroupClient,
    GroupError,
    ImageView,
    Retriable,
    check,
)
from kraft.groups.model import (
    LATEST,
    Coordinator,
    GroupDescription,
    GroupListing,
    MemberDescription,
    PlannedOffset,
    ResetResult,
    ResetTarget,
    ToOffsets,
    offsets_needed,
    partition_offsets,
    plan_reset,
)
from metadata_log.image import ClusterImage, TopicPartition

__all__ = ["GroupAdmin", "GroupAdminError"]

GroupAdminError = GroupError

CLIENT_ID: Final = "kraft-group-admin"
DESCRIBE_GROUPS_MAX: Final = 5
CONSUMER_GROUP_DESCRIBE_MAX: Final = 0
LIST_GROUPS_MAX: Final = 5  # v5: each group's type (classic, consumer)
DELETE_GROUPS_MAX: Final = 2
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

Described = tuple[
    Coordinator,
    DescribeGroupsResponse.DescribedGroup | ConsumerGroupDescribeResponse.DescribedGroup,
    dict[TopicPartition, int],
]


class GroupAdmin:
    """Group operations against the brokers of ``image()`` (see the module docstring)."""

    def __init__(
        self,
        image: Callable[[], ClusterImage | None],
        *,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        client_id: str = CLIENT_ID,
        route: BrokerRoute = PLAINTEXT_ROUTE,
    ) -> None:
        self._view = ImageView(image, route.listener)
        self._client = GroupClient(
            self._view,
            request_timeout_s=request_timeout_s,
            client_id=client_id,
            security=route.security,
        )

    async def close(self) -> None:
        """Close every connection (requests in flight fail)."""
        await self._client.close()

    # --- list ---------------------------------------------------------------------------------

    async def list_groups(self) -> list[GroupListing]:
        """Every group of every live broker, sorted by id; a broker that cannot answer fails
        the whole list (Kafka's ``--list``), since a partial list would silently miss groups."""
        listed = await self._client.on_every_broker("list groups", self._list_at)
        merged: dict[str, GroupListing] = {}
        for group in listed:  # during a coordinator move two brokers may list one group
            merged.setdefault(group.group_id, group)
        return [merged[g] for g in sorted(merged)]

    async def _list_at(self, broker_id: int, address: Address) -> list[GroupListing]:
        response = await self._client.send(address, ListGroupsRequest(), LIST_GROUPS_MAX)
        assert isinstance(response, ListGroupsResponse)
        check(response.error_code, f"ListGroups on broker {broker_id}")
        return [
            GroupListing(
                str(g.group_id),
                g.group_state,
                g.protocol_type,
                broker_id,
                g.group_type or "classic",
            )
            for g in response.groups
        ]

    # --- describe -----------------------------------------------------------------------------

    async def describe_group(self, group_id: str) -> GroupDescription:
        """State, members and assignments, and each partition's committed offset, high
        watermark and lag; GROUP_ID_NOT_FOUND if the group has neither members nor offsets."""
        coordinator, described, committed = await self._client.on_coordinator(
            group_id, f"describe group {group_id!r}", self._describe_at
        )
        if isinstance(described, ConsumerGroupDescribeResponse.DescribedGroup):
            members = _consumer_members(described)
        else:
            members = _members(described)
        wanted = {tp for m in members for tp in m.assignment or ()} | set(committed)
        latest = await self._client.list_offsets(wanted, LATEST)
        high_watermarks = {tp: None if isinstance(o, ErrorCode) else o for tp, o in latest.items()}
        partitions = tuple(partition_offsets(members, committed, high_watermarks))
        if isinstance(described, ConsumerGroupDescribeResponse.DescribedGroup):
            return GroupDescription(
                group_id=group_id,
                state=described.group_state,
                protocol_type=PROTOCOL_TYPE,
                protocol=described.assignor_name,
                coordinator=coordinator,
                members=tuple(members),
                partitions=partitions,
                group_type="consumer",
                group_epoch=described.group_epoch,
                assignment_epoch=described.assignment_epoch,
            )
        return GroupDescription(
            group_id=group_id,
            state=_state(described, committed),
            protocol_type=described.protocol_type,
            protocol=described.protocol_data,
            coordinator=coordinator,
            members=tuple(members),
            partitions=partitions,
        )

    async def _describe_at(self, coordinator: Coordinator, group_id: str) -> Described:
        address = (coordinator.host, coordinator.port)
        consumer_group = await self._consumer_group_at(coordinator, group_id)
        if consumer_group is not None:
            return coordinator, consumer_group, await self._client.committed(coordinator, group_id)
        request = DescribeGroupsRequest(groups=[GroupId(group_id)])
        response = await self._client.send(address, request, DESCRIBE_GROUPS_MAX)
        assert isinstance(response, DescribeGroupsResponse)
        [described] = response.groups
        code = described.error_code
        if code == ErrorCode.GROUP_ID_NOT_FOUND:  # Kafka answers NONE and "Dead"; both mean so
            described.group_state, code = "Dead", ErrorCode.NONE
        check(code, f"DescribeGroups of {group_id!r} on broker {coordinator.node_id}")
        committed = await self._client.committed(coordinator, group_id)
        if described.group_state == "Dead" and not committed:
            raise GroupError(
                ErrorCode.GROUP_ID_NOT_FOUND, f"consumer group {group_id!r} does not exist"
            )
        return coordinator, described, committed

    async def _consumer_group_at(
        self, coordinator: Coordinator, group_id: str
    ) -> ConsumerGroupDescribeResponse.DescribedGroup | None:
        """The group as ConsumerGroupDescribe answers (None: not a KIP-848 group), as Kafka's
        AdminClient asks before falling back to DescribeGroups."""
        address = (coordinator.host, coordinator.port)
        request = ConsumerGroupDescribeRequest(group_ids=[GroupId(group_id)])
        try:
            response = await self._client.send(address, request, CONSUMER_GROUP_DESCRIBE_MAX)
        except GroupError as exc:
            if exc.error is ErrorCode.UNSUPPORTED_VERSION:  # a broker without KIP-848
                return None
            raise
        assert isinstance(response, ConsumerGroupDescribeResponse)
        [described] = response.groups
        if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        check(described.error_code, f"ConsumerGroupDescribe of {group_id!r}")
        return described

    # --- delete -------------------------------------------------------------------------------

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP (members remain) or done."""

        async def at(coordinator: Coordinator, group_id: str) -> None:
            request = DeleteGroupsRequest(groups_names=[GroupId(group_id)])
            address = (coordinator.host, coordinator.port)
            response = await self._client.send(address, request, DELETE_GROUPS_MAX)
            assert isinstance(response, DeleteGroupsResponse)
            [result] = response.results
            if result.error_code == ErrorCode.NON_EMPTY_GROUP:
                raise GroupError(
                    ErrorCode.NON_EMPTY_GROUP,
                    f"consumer group {group_id!r} has active members; stop its consumers first",
                )
            if result.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                raise GroupError(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"consumer group {group_id!r} does not exist"
                )
            check(result.error_code, f"DeleteGroups of {group_id!r}")

        await self._client.on_coordinator(group_id, f"delete group {group_id!r}", at)

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
        committed = await self._client.on_coordinator(
            group_id, f"reset offsets of {group_id!r}", self._inactive_at
        )
        partitions = self._partitions_to_reset(group_id, topics, target, committed)
        listed: dict[int, Mapping[TopicPartition, int]] = {}
        for timestamp in offsets_needed(target):
            listed[timestamp] = _all_known(await self._client.list_offsets(partitions, timestamp))
        planned = plan_reset(partitions, target, committed, listed)
        if execute and planned:
            await self._client.on_coordinator(
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
        except Retriable:
            raise
        except GroupError as exc:
            if exc.error != ErrorCode.GROUP_ID_NOT_FOUND:
                raise
            return {}  # a new group: its offsets may be set in advance
        state = _state(described, committed)
        if state not in INACTIVE_STATES:
            raise GroupError(
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
        image = self._view.current()
        if isinstance(target, ToOffsets):
            wanted = sorted(target.offsets)
        elif topics is None:
            wanted = sorted(committed)
            if not wanted:
                raise GroupError(
                    ErrorCode.GROUP_ID_NOT_FOUND,
                    f"consumer group {group_id!r} has no committed offsets; name the topics",
                )
        else:
            wanted = []
            for name in dict.fromkeys(topics):
                topic = image.topics.get(name)
                if topic is None:
                    raise GroupError(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
                    )
                wanted += [TopicPartition(name, p) for p in sorted(topic.partitions)]
        for tp in wanted:
            if image.topics.partition(tp.topic, tp.partition) is None:
                raise GroupError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"partition {tp.topic}-{tp.partition} does not exist",
                )
        return wanted

    async def _commit_at(
        self, coordinator: Coordinator, group_id: str, planned: Sequence[PlannedOffset]
    ) -> None:
        offsets = {TopicPartition(p.topic, p.partition): p.offset for p in planned}
        # No generation, no member: an admin's commit, refused while the group has members.
        failed = await self._client.commit(coordinator, group_id, offsets)
        for tp, error in failed.items():
            if error in _GROUP_BECAME_ACTIVE:
                raise GroupError(
                    ErrorCode.NON_EMPTY_GROUP,
                    f"consumer group {group_id!r} became active during the reset"
                    f" ({error.name}); nothing was committed: stop its consumers and try again",
                )
            check(error, f"OffsetCommit of {tp.topic}-{tp.partition}")


def _members(described: DescribeGroupsResponse.DescribedGroup) -> list[MemberDescription]:
    consumer = described.protocol_type in (PROTOCOL_TYPE, "")
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


def _consumer_members(
    described: ConsumerGroupDescribeResponse.DescribedGroup,
) -> list[MemberDescription]:
    def partitions(a: ConsumerGroupDescribeResponse.Assignment) -> tuple[TopicPartition, ...]:
        return tuple(
            TopicPartition(tp.topic_name, p) for tp in a.topic_partitions for p in tp.partitions
        )

    return [
        MemberDescription(
            member_id=m.member_id,
            group_instance_id=m.instance_id,
            client_id=m.client_id,
            host=m.client_host,
            assignment=partitions(m.assignment),
            member_epoch=m.member_epoch,
            target_assignment=partitions(m.target_assignment),
        )
        for m in sorted(described.members, key=lambda m: m.member_id)
    ]


def _state(
    described: DescribeGroupsResponse.DescribedGroup | ConsumerGroupDescribeResponse.DescribedGroup,
    committed: Mapping[TopicPartition, int],
) -> str:
    if isinstance(described, ConsumerGroupDescribeResponse.DescribedGroup):
        return described.group_state  # a consumer group (KIP-848) is kept while Empty
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
            raise GroupError(answer, f"ListOffsets of {tp.topic}-{tp.partition}: {answer.message}")
        known[tp] = answer
    return known
