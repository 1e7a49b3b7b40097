"""FindCoordinator 0-4, OffsetCommit 2-8 and OffsetFetch 1-8 (the group coordinator's offsets).

FindCoordinator names the leader of the group's ``__consumer_offsets`` partition (creating the
topic on first use: COORDINATOR_NOT_AVAILABLE until it has a leader).  librdkafka (and kcat)
enable consumer groups only when FindCoordinator v0 is advertised.  Transaction coordinators
do not exist yet: COORDINATOR_NOT_AVAILABLE.

OffsetCommit and OffsetFetch are answered by the coordinator (NOT_COORDINATOR elsewhere,
COORDINATOR_LOAD_IN_PROGRESS while it loads); a commit is answered once its records are
committed in ``__consumer_offsets``.  OffsetFetch v8 asks for several groups at once;
``require_stable`` needs no wait without transactions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from broker.coordinator.runtime import OffsetCommit
from broker.dispatcher import ApiHandler, RequestContext
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka_protocol.types import BrokerId, GroupId, TopicName

if TYPE_CHECKING:
    from broker.broker import Broker

GROUP_KEY = 0
MULTI_GROUP_FETCH_VERSION = 8
PER_PARTITION_ERROR_VERSION = 2  # OffsetFetch v2+ has a top-level error code too


class GroupHandlers:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def specs(self) -> list[ApiHandler]:
        return [
            ApiHandler(10, 0, 4, self.find_coordinator, "FindCoordinator"),
            ApiHandler(8, 2, 8, self.offset_commit, "OffsetCommit"),
            ApiHandler(9, 1, 8, self.offset_fetch, "OffsetFetch"),
        ]

    # --- FindCoordinator ----------------------------------------------------------------------

    def _coordinator(self, key: str, key_type: int) -> FindCoordinatorResponse.Coordinator:
        if key_type != GROUP_KEY:
            return FindCoordinatorResponse.Coordinator(
                key=key,
                node_id=BrokerId(-1),
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message="transactions are not supported yet",
            )
        found = self.broker.coordinator.coordinator_of(key)
        address = self.broker.endpoint_of(found) if isinstance(found, int) else None
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
        if ctx.api_version >= 4:
            return FindCoordinatorResponse(
                coordinators=[self._coordinator(k, req.key_type) for k in req.coordinator_keys]
            )
        c = self._coordinator(req.key, req.key_type)
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
        commits = [
            OffsetCommit(
                t.name,
                p.partition_index,
                p.committed_offset,
                p.committed_leader_epoch,
                p.committed_metadata,
            )
            for t in req.topics
            for p in t.partitions
        ]
        # v2-4 carry a retention time: an explicit expiry for these offsets (-1: the default)
        retention = req.retention_time_ms if 2 <= ctx.api_version <= 4 else -1
        expire = self.broker.coordinator.clock_ms() + retention if retention >= 0 else -1
        results = await self.broker.coordinator.commit_offsets(
            req.group_id,
            req.member_id,
            req.generation_id_or_member_epoch,
            req.group_instance_id,
            commits,
            expire,
        )
        return OffsetCommitResponse(
            topics=[
                OffsetCommitResponse.OffsetCommitResponseTopic(
                    name=t.name,
                    partitions=[
                        OffsetCommitResponse.OffsetCommitResponsePartition(
                            partition_index=p.partition_index,
                            error_code=results[(t.name, p.partition_index)],
                        )
                        for p in t.partitions
                    ],
                )
                for t in req.topics
            ]
        )

    # --- OffsetFetch --------------------------------------------------------------------------

    def offset_fetch(self, ctx: RequestContext, req: OffsetFetchRequest) -> OffsetFetchResponse:
        if ctx.api_version >= MULTI_GROUP_FETCH_VERSION:
            return OffsetFetchResponse(
                groups=[self._fetch_group(g.group_id, _asked(g.topics)) for g in req.groups]
            )
        group = self._fetch_group(req.group_id, _asked(req.topics))
        error = group.error_code
        if error != ErrorCode.NONE and ctx.api_version < PER_PARTITION_ERROR_VERSION:
            # v0-1 have no top-level error: every partition carries it
            for topic in group.topics:
                for p in topic.partitions:
                    p.error_code = error
        return OffsetFetchResponse(
            error_code=error,
            topics=[
                OffsetFetchResponse.OffsetFetchResponseTopic(
                    name=t.name,
                    partitions=[
                        OffsetFetchResponse.OffsetFetchResponsePartition(
                            partition_index=p.partition_index,
                            committed_offset=p.committed_offset,
                            committed_leader_epoch=p.committed_leader_epoch,
                            metadata=p.metadata,
                            error_code=p.error_code,
                        )
                        for p in t.partitions
                    ],
                )
                for t in group.topics
            ],
        )

    def _fetch_group(
        self, group_id: str, asked: list[tuple[str, list[int]]] | None
    ) -> OffsetFetchResponse.OffsetFetchResponseGroup:
        wanted = None if asked is None else [(t, p) for t, ps in asked for p in ps]
        found = self.broker.coordinator.fetch_offsets(group_id, wanted)
        by_topic: dict[str, list[OffsetFetchResponse.OffsetFetchResponsePartitions]] = {}
        if isinstance(found, ErrorCode):
            for t, p in wanted or []:
                by_topic.setdefault(t, []).append(_no_offset(p))
            return _group(group_id, by_topic, found)
        for (t, p), committed in sorted(found.items()):
            if committed is None:
                by_topic.setdefault(t, []).append(_no_offset(p))
            else:
                by_topic.setdefault(t, []).append(
                    OffsetFetchResponse.OffsetFetchResponsePartitions(
                        partition_index=p,
                        committed_offset=committed.offset,
                        committed_leader_epoch=committed.leader_epoch,
                        metadata=committed.metadata,
                    )
                )
        return _group(group_id, by_topic, ErrorCode.NONE)


def _asked(
    topics: Sequence[OffsetFetchRequest.OffsetFetchRequestTopic]
    | Sequence[OffsetFetchRequest.OffsetFetchRequestTopics]
    | None,
) -> list[tuple[str, list[int]]] | None:
    """The (topic, partitions) asked for; None: every partition with a committed offset."""
    return None if topics is None else [(str(t.name), t.partition_indexes) for t in topics]


def _no_offset(partition: int) -> OffsetFetchResponse.OffsetFetchResponsePartitions:
    return OffsetFetchResponse.OffsetFetchResponsePartitions(
        partition_index=partition, committed_offset=-1, committed_leader_epoch=-1, metadata=""
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
