"""The group coordinator's APIs: FindCoordinator 0-6, the classic group protocol (JoinGroup 0-7,
SyncGroup 0-5, Heartbeat 0-4, LeaveGroup 0-5), offsets (OffsetCommit 2-9, OffsetFetch 1-9,
OffsetDelete 0) and the group admin APIs (ListGroups 0-5, DescribeGroups 0-5, DeleteGroups 0-2).

The group protocol is answered by the group's state machine (broker/group/classic.py) through
``ClassicGroups``: a JoinGroup or SyncGroup may wait (parked) until the rebalance completes.
Requests for a group this broker does not coordinate get NOT_COORDINATOR, and
COORDINATOR_LOAD_IN_PROGRESS while its partition loads.

FindCoordinator names the leader of the group's ``__consumer_offsets`` partition (creating the
topic on first use: COORDINATOR_NOT_AVAILABLE until it has a leader).  librdkafka (and kcat)
enable consumer groups only when FindCoordinator v0 is advertised.  Key type 1 names the
leader of the transactional id's ``__transaction_state`` partition (the transaction
coordinator, which creates that topic on first use); other key types get INVALID_REQUEST.

OffsetCommit and OffsetFetch are answered by the coordinator (NOT_COORDINATOR elsewhere,
COORDINATOR_LOAD_IN_PROGRESS while it loads); a commit is answered once its records are
committed in ``__consumer_offsets``.  OffsetFetch v8 asks for several groups at once.  v9 of
both is the first a KIP-848 consumer uses (its member id and epoch); a classic group answers it
as v8, as Kafka's ``ClassicGroup`` ignores them.  FindCoordinator v4+ batches keys; v5 only
adds an error code, and v6's share-group keys (type 2) are refused INVALID_REQUEST like any
other key type this broker does not coordinate.

TxnOffsetCommit 0-4 (a transactional producer's ``send_offsets_to_transaction``) appends the
offsets as a transactional batch of the producer; they stay pending, invisible to OffsetFetch,
until the transaction's marker reaches the partition.  OffsetFetch v7+ with ``require_stable``
answers UNSTABLE_OFFSET_COMMIT for a partition with pending transactional offsets (the consumer
retries), as Kafka does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from broker.coordinator.classic_groups import GroupCall
from broker.coordinator.commits import OffsetCommit, Producer
from broker.coordinator.offsets import CommittedOffset, explicit_expiry
from broker.coordinator.runtime import GroupCoordinator
from broker.dispatcher import ApiHandler, RequestContext
from broker.group.classic import ClassicGroup
from broker.group.classic_member import Token
from broker.group.classic_outcome import Outcome
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka_protocol.types import BrokerId, GroupId, TopicName

GROUP_KEY = 0
TRANSACTION_KEY = 1
_R = TypeVar("_R", JoinGroupResponse, SyncGroupResponse, HeartbeatResponse, LeaveGroupResponse)
_Q = TypeVar("_Q", SyncGroupRequest, HeartbeatRequest, LeaveGroupRequest)
_M = TypeVar("_M")
_T = TypeVar("_T")
MULTI_GROUP_FETCH_VERSION = 8
REQUIRE_STABLE_VERSION = 7
TXN_LOAD_ERROR_VERSION = 2  # TxnOffsetCommit v0-1 clients cannot take LOAD_IN_PROGRESS
PER_PARTITION_ERROR_VERSION = 2  # OffsetFetch v2+ has a top-level error code too


class GroupHandlers:
    def __init__(
        self,
        coordinator: GroupCoordinator,
        endpoint_of: Callable[[int, str], tuple[str, int] | None],
        transaction_coordinator_of: Callable[[str], int | ErrorCode],
    ) -> None:
        self.coordinator = coordinator
        # the broker coordinating a transactional id (FindCoordinator key type 1)
        self.transaction_coordinator_of = transaction_coordinator_of
        # a coordinator's address on a listener, for FindCoordinator
        self.endpoint_of = endpoint_of

    def specs(self) -> list[ApiHandler]:
        return [
            ApiHandler(10, 0, 6, self.find_coordinator, "FindCoordinator"),
            ApiHandler(11, 0, 7, self.join_group, "JoinGroup"),
            ApiHandler(14, 0, 5, self.sync_group, "SyncGroup"),
            ApiHandler(12, 0, 4, self.heartbeat, "Heartbeat"),
            ApiHandler(13, 0, 5, self.leave_group, "LeaveGroup"),
            ApiHandler(8, 2, 9, self.offset_commit, "OffsetCommit"),
            ApiHandler(9, 1, 9, self.offset_fetch, "OffsetFetch"),
            ApiHandler(47, 0, 0, self.offset_delete, "OffsetDelete"),
            ApiHandler(28, 0, 4, self.txn_offset_commit, "TxnOffsetCommit"),
            ApiHandler(16, 0, 5, self.list_groups, "ListGroups"),
            ApiHandler(15, 0, 5, self.describe_groups, "DescribeGroups"),
            ApiHandler(42, 0, 2, self.delete_groups, "DeleteGroups"),
        ]

    # --- the classic group protocol -----------------------------------------------------------

    async def join_group(self, ctx: RequestContext, req: JoinGroupRequest) -> JoinGroupResponse:
        client_id = ctx.header.client_id or ""
        host = "/" + ctx.peer.rpartition(":")[0]  # Kafka shows the client's address so
        return await self._ask(
            req.group_id,
            not req.member_id,  # only a new member creates a group (else UNKNOWN_MEMBER_ID)
            lambda g, token, now: g.join(token, req, ctx.api_version, client_id, host, now),
            lambda error: JoinGroupResponse(error_code=error, member_id=req.member_id),
            JoinGroupResponse,
        )

    async def sync_group(self, ctx: RequestContext, req: SyncGroupRequest) -> SyncGroupResponse:
        return await self._member_request(ctx, req, ClassicGroup.sync, SyncGroupResponse)

    async def heartbeat(self, ctx: RequestContext, req: HeartbeatRequest) -> HeartbeatResponse:
        return await self._member_request(ctx, req, ClassicGroup.heartbeat, HeartbeatResponse)

    async def leave_group(self, ctx: RequestContext, req: LeaveGroupRequest) -> LeaveGroupResponse:
        return await self._member_request(ctx, req, ClassicGroup.leave, LeaveGroupResponse)

    async def _member_request(
        self,
        ctx: RequestContext,
        req: _Q,
        method: Callable[[ClassicGroup, Token, _Q, int, int], Outcome],
        kind: type[_R],
    ) -> _R:
        """SyncGroup, Heartbeat and LeaveGroup: a request of an existing group (never creates
        one), answered by ``method`` of its state machine, failed with only an error code."""
        return await self._ask(
            req.group_id,
            False,
            lambda g, token, now: method(g, token, req, ctx.api_version, now),
            lambda error: kind(error_code=error),
            kind,
        )

    async def _ask(
        self,
        group_id: str,
        create: bool,
        call: GroupCall,
        failed: Callable[[ErrorCode], _R],
        kind: type[_R],
    ) -> _R:
        """One request to its group's state machine: its answer, or ``failed(error)`` when the
        group cannot be asked (not the coordinator, loading, unknown)."""
        answer = await self.coordinator.classic.call(group_id, create, call)
        if isinstance(answer, ErrorCode):
            return failed(answer)
        assert isinstance(answer, kind), answer
        return answer

    # --- group admin --------------------------------------------------------------------------

    def list_groups(self, ctx: RequestContext, req: ListGroupsRequest) -> ListGroupsResponse:
        states = {s.lower() for s in req.states_filter}
        types = {t.lower() for t in req.types_filter}
        coordinator = self.coordinator
        found = {
            g: (grp.state.value, grp.protocol_type or "")
            for g, grp in coordinator.classic.loaded_groups()
        }
        for group_id in coordinator.groups_with_offsets():
            found.setdefault(group_id, ("Empty", ""))  # committed offsets only: an empty group
        listed = [
            ListGroupsResponse.ListedGroup(
                group_id=GroupId(group_id),
                protocol_type=protocol_type,
                group_state=state,
                group_type="classic",
            )
            for group_id, (state, protocol_type) in sorted(found.items())
            if (not states or state.lower() in states)
            and (not types or "classic" in types)
            and coordinator.consumer.get(group_id) is None
        ]
        listed += [  # KIP-848 consumer groups: type "consumer", protocol type "consumer"
            ListGroupsResponse.ListedGroup(
                group_id=GroupId(group_id),
                protocol_type="consumer",
                group_state=group.state.value,
                group_type="consumer",
            )
            for group_id, group in coordinator.consumer.loaded_groups()
            if (not states or group.state.value.lower() in states)
            and (not types or "consumer" in types)
        ]
        listed.sort(key=lambda g: g.group_id)
        return ListGroupsResponse(groups=listed)

    def describe_groups(
        self, ctx: RequestContext, req: DescribeGroupsRequest
    ) -> DescribeGroupsResponse:
        described = []
        for group_id in req.groups:
            found = self.coordinator.classic.get(group_id)
            if isinstance(found, ErrorCode):
                error = ErrorCode.NONE if found is ErrorCode.GROUP_ID_NOT_FOUND else found
                # Kafka describes an unknown group as Dead with no members, and one with only
                # committed offsets as Empty
                offsets_only = group_id in self.coordinator.groups_with_offsets()
                described.append(
                    DescribeGroupsResponse.DescribedGroup(
                        error_code=error,
                        group_id=group_id,
                        group_state="Empty" if offsets_only else "Dead",
                        protocol_type="",
                        protocol_data="",
                    )
                )
            else:
                described.append(found.describe())
        return DescribeGroupsResponse(groups=described)

    async def delete_groups(
        self, ctx: RequestContext, req: DeleteGroupsRequest
    ) -> DeleteGroupsResponse:
        results = []
        for group_id in req.groups_names:
            error = await self.coordinator.delete_group(group_id)
            results.append(
                DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=error)
            )
        return DeleteGroupsResponse(results=results)

    async def offset_delete(
        self, ctx: RequestContext, req: OffsetDeleteRequest
    ) -> OffsetDeleteResponse:
        asked = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
        error, per_partition = await self.coordinator.delete_offsets(req.group_id, asked)
        topics = _each_partition_answered(
            req.topics,
            OffsetDeleteResponse.OffsetDeleteResponseTopic,
            OffsetDeleteResponse.OffsetDeleteResponsePartition,
            lambda topic, partition: per_partition.get((topic, partition), error),
        )
        return OffsetDeleteResponse(error_code=error, topics=topics)

    # --- FindCoordinator ----------------------------------------------------------------------

    def _coordinator(
        self, key: str, key_type: int, listener: str
    ) -> FindCoordinatorResponse.Coordinator:
        if key_type not in (GROUP_KEY, TRANSACTION_KEY):
            return FindCoordinatorResponse.Coordinator(
                key=key,
                node_id=BrokerId(-1),
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"unknown coordinator key type {key_type}",
            )
        if key_type == TRANSACTION_KEY:
            found = self.transaction_coordinator_of(key)
        else:
            found = self.coordinator.coordinator_of(key)
        address = self.endpoint_of(found, listener) if isinstance(found, int) else None
        if address is None:
            error = found if isinstance(found, ErrorCode) else ErrorCode.COORDINATOR_NOT_AVAILABLE
            return FindCoordinatorResponse.Coordinator(
                key=key, node_id=BrokerId(-1), error_code=error, error_message=error.name
            )
        assert isinstance(found, int)
        host, port = address
        return FindCoordinatorResponse.Coordinator(
            key=key, node_id=BrokerId(found), host=host, port=port, error_message=None
        )

    def find_coordinator(
        self, ctx: RequestContext, req: FindCoordinatorRequest
    ) -> FindCoordinatorResponse:
        listener = ctx.session.listener  # answered with the addresses of this listener
        if ctx.api_version >= 4:
            return FindCoordinatorResponse(
                coordinators=[
                    self._coordinator(k, req.key_type, listener) for k in req.coordinator_keys
                ]
            )
        c = self._coordinator(req.key, req.key_type, listener)
        return FindCoordinatorResponse(
            error_code=c.error_code,
            error_message=c.error_message,
            node_id=c.node_id,
            host=c.host,
            port=c.port,
        )

    # --- OffsetCommit -------------------------------------------------------------------------

    async def offset_commit(
        self, ctx: RequestContext, req: OffsetCommitRequest
    ) -> OffsetCommitResponse:
        commits = _commits_asked(req.topics)
        # v2-4 carry a retention time: an explicit expiry for these offsets (-1: the default)
        expire = -1
        if 2 <= ctx.api_version <= 4:
            expire = explicit_expiry(req.retention_time_ms, self.coordinator.clock_ms())
        results = await self.coordinator.commit_offsets(
            req.group_id,
            req.member_id,
            req.generation_id_or_member_epoch,
            req.group_instance_id,
            commits,
            expire,
            ctx.api_version,  # KIP-848 members must commit with v9+
        )
        topics = _each_partition_answered(
            req.topics,
            OffsetCommitResponse.OffsetCommitResponseTopic,
            OffsetCommitResponse.OffsetCommitResponsePartition,
            lambda topic, partition: results[(topic, partition)],
        )
        return OffsetCommitResponse(topics=topics)

    # --- TxnOffsetCommit ----------------------------------------------------------------------

    async def txn_offset_commit(
        self, ctx: RequestContext, req: TxnOffsetCommitRequest
    ) -> TxnOffsetCommitResponse:
        commits = _commits_asked(req.topics)
        # v0-2 have no member id, generation (-1) or instance id: the group is not checked
        results = await self.coordinator.commit_transactional_offsets(
            req.transactional_id,
            req.group_id,
            req.member_id,
            req.generation_id,
            req.group_instance_id,
            Producer(req.producer_id, req.producer_epoch),
            commits,
        )

        def error_of(topic: str, partition: int) -> ErrorCode:
            error = results[(topic, partition)]
            if (
                error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                and ctx.api_version < TXN_LOAD_ERROR_VERSION
            ):
                return ErrorCode.COORDINATOR_NOT_AVAILABLE  # as Kafka (KAFKA-7296)
            return error

        topics = _each_partition_answered(
            req.topics,
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic,
            TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition,
            error_of,
        )
        return TxnOffsetCommitResponse(topics=topics)

    # --- OffsetFetch --------------------------------------------------------------------------

    def offset_fetch(self, ctx: RequestContext, req: OffsetFetchRequest) -> OffsetFetchResponse:
        stable = ctx.api_version >= REQUIRE_STABLE_VERSION and req.require_stable
        if ctx.api_version >= MULTI_GROUP_FETCH_VERSION:
            return OffsetFetchResponse(
                groups=[
                    # v9: a KIP-848 member's id and epoch, checked by the coordinator
                    self._fetch_group(
                        g.group_id, _asked(g.topics), stable, g.member_id, g.member_epoch
                    )
                    for g in req.groups
                ]
            )
        group = self._fetch_group(req.group_id, _asked(req.topics), stable)
        error = group.error_code
        if error != ErrorCode.NONE and ctx.api_version < PER_PARTITION_ERROR_VERSION:
            # v0-1 have no top-level error: every partition carries it
            for topic in group.topics:
                for p in topic.partitions:
                    p.error_code = error
        # v0-7 carry one group's topics at the top level, in classes of their own with the
        # same fields as v8's per-group ones
        Topic = OffsetFetchResponse.OffsetFetchResponseTopic
        Partition = OffsetFetchResponse.OffsetFetchResponsePartition
        topics = [
            Topic(name=t.name, partitions=[_copy_fields(Partition, p) for p in t.partitions])
            for t in group.topics
        ]
        return OffsetFetchResponse(error_code=error, topics=topics)

    def _fetch_group(
        self,
        group_id: str,
        asked: list[tuple[str, list[int]]] | None,
        require_stable: bool,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> OffsetFetchResponse.OffsetFetchResponseGroup:
        wanted = None if asked is None else [(t, p) for t, ps in asked for p in ps]
        found = self.coordinator.fetch_offsets(
            group_id, wanted, require_stable, member_id, member_epoch
        )
        by_topic: dict[str, list[OffsetFetchResponse.OffsetFetchResponsePartitions]] = {}
        if isinstance(found, ErrorCode):
            for t, p in wanted or []:
                by_topic.setdefault(t, []).append(_no_offset(p))
            return _group(group_id, by_topic, found)
        for (t, p), committed in sorted(found.items()):
            if isinstance(committed, ErrorCode):
                answer = _no_offset(p)
                answer.error_code = committed
            elif committed is None:
                answer = _no_offset(p)
            else:
                answer = _committed(p, committed)
            by_topic.setdefault(t, []).append(answer)
        return _group(group_id, by_topic, ErrorCode.NONE)


def _asked(
    topics: Sequence[OffsetFetchRequest.OffsetFetchRequestTopic]
    | Sequence[OffsetFetchRequest.OffsetFetchRequestTopics]
    | None,
) -> list[tuple[str, list[int]]] | None:
    """The (topic, partitions) asked for; None: every partition with a committed offset."""
    return None if topics is None else [(str(t.name), t.partition_indexes) for t in topics]


def _commits_asked(asked: Iterable[Any]) -> list[OffsetCommit]:
    """The offsets an OffsetCommit or TxnOffsetCommit asks to commit (``asked``: its topics,
    each with its ``partitions``), in request order."""
    return [
        OffsetCommit(
            t.name,
            p.partition_index,
            p.committed_offset,
            p.committed_leader_epoch,
            p.committed_metadata,
        )
        for t in asked
        for p in t.partitions
    ]


def _each_partition_answered(
    asked: Iterable[Any],
    topic_type: Callable[..., _T],
    partition_type: Callable[..., Any],
    error_of: Callable[[str, int], ErrorCode],
) -> list[_T]:
    """The answer to each asked partition (``asked``: a request's topics, each with its
    ``partitions``), in request order: its index and ``error_of(topic, partition)``."""
    return [
        topic_type(
            name=t.name,
            partitions=[
                partition_type(
                    partition_index=p.partition_index,
                    error_code=error_of(t.name, p.partition_index),
                )
                for p in t.partitions
            ],
        )
        for t in asked
    ]


def _copy_fields(cls: type[_M], source: object) -> _M:
    """A ``cls`` holding ``source``'s values of ``cls``'s fields."""
    return cls(**{f.name: getattr(source, f.name) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


def _no_offset(partition: int) -> OffsetFetchResponse.OffsetFetchResponsePartitions:
    return OffsetFetchResponse.OffsetFetchResponsePartitions(
        partition_index=partition, committed_offset=-1, committed_leader_epoch=-1, metadata=""
    )


def _committed(
    partition: int, committed: CommittedOffset
) -> OffsetFetchResponse.OffsetFetchResponsePartitions:
    return OffsetFetchResponse.OffsetFetchResponsePartitions(
        partition_index=partition,
        committed_offset=committed.offset,
        committed_leader_epoch=committed.leader_epoch,
        metadata=committed.metadata,
    )


def _group(
    group_id: str,
    by_topic: dict[str, list[OffsetFetchResponse.OffsetFetchResponsePartitions]],
    error: ErrorCode,
) -> OffsetFetchResponse.OffsetFetchResponseGroup:
    return OffsetFetchResponse.OffsetFetchResponseGroup(
        group_id=GroupId(group_id),
        error_code=error,
        topics=[
            OffsetFetchResponse.OffsetFetchResponseTopics(name=TopicName(t), partitions=ps)
            for t, ps in by_topic.items()
        ],
    )
