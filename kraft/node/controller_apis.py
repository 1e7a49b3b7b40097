"""The controller listener's Kafka APIs: what brokers and tools ask of the quorum.

Brokers register (BrokerRegistration), heartbeat (BrokerHeartbeat), report ISR changes
(AlterPartition), allocate producer ids and forward admin requests (every entry of
``broker.controller_channel.FORWARDED``, served by one handler that runs the request's
controller rule), all of which only the active controller serves: any other controller
answers NOT_CONTROLLER and the broker tries the next one. They tail the committed metadata log
with Fetch on ``__cluster_metadata`` (long-poll, served by every controller that knows a Raft
leader: committed data is the same on all of them, but one that knows none may be cut off
from the quorum and stale, so it answers NOT_LEADER_OR_FOLLOWER) and, when they are behind
the snapshot, FetchSnapshot. DescribeQuorum reports the Raft leader and the voters.

With an authorizer, every API but ApiVersions is checked first as Kafka's ControllerApis does
(``broker.security.admin_rules.CONTROLLER_RULES``): the broker APIs need CLUSTER_ACTION on the
cluster, so only a broker's principal (a super user, or one given that ACL) registers,
heartbeats or fetches metadata; forwarded admin requests are trusted from such a principal (its
broker checked the client) and fully checked from anyone else.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from broker.controller_channel import forwarded_api, forwarded_handlers
from broker.dispatcher import ApiHandler, RequestContext, RequestDispatcher
from broker.handlers.sasl import SaslHandlers
from broker.security.admin_rules import CONTROLLER_RULES
from broker.security.api_authorization import SessionAuthorizer, guard
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)
from kafka_protocol.types import BrokerId, TopicName
from kraft.controller.result import METADATA_TOPIC_ID, ControllerResult
from kraft.quorum.quorum_controller import NotControllerError, QuorumController
from metadata_log.image import ClusterImage
from metadata_log.snapshot import SnapshotId

METADATA_TOPIC: Final = "__cluster_metadata"
MAX_FETCH_WAIT_MS: Final = 5_000
MAX_SNAPSHOT_CHUNK_BYTES: Final = 8 << 20
NOT_CONTROLLER: Final = int(ErrorCode.NOT_CONTROLLER)
NOT_ACTIVE: Final = "this controller is not the active one"

R = TypeVar("R")
S = TypeVar("S", BrokerRegistrationResponse, BrokerHeartbeatResponse)


class ControllerApis:
    """Handlers for one controller's CONTROLLER listener."""

    def __init__(
        self,
        controller: QuorumController,
        node_id: int,
        voters: Mapping[int, str],
        authorizer: SessionAuthorizer | None = None,
    ) -> None:
        self.qc = controller
        self.node_id = node_id
        self.voters = dict(voters)  # node id -> Raft address
        self.authorizer = authorizer
        self.dispatcher: RequestDispatcher | None = None  # set by the owner, for ApiVersions

    def specs(self) -> list[ApiHandler]:
        handlers = self._handlers()
        if self.authorizer is None:
            return handlers
        return guard(handlers, CONTROLLER_RULES, self.authorizer, lambda: self.qc.image)

    def _handlers(self) -> list[ApiHandler]:
        return [
            ApiHandler(1, 12, 13, self.fetch, "Fetch"),
            ApiHandler(18, 0, 4, self.api_versions, "ApiVersions"),
            *SaslHandlers().specs(),
            *forwarded_handlers(self.forwarded),
            ApiHandler(55, 0, 2, self.describe_quorum, "DescribeQuorum"),
            ApiHandler(56, 0, 3, self.alter_partition, "AlterPartition"),
            ApiHandler(59, 0, 1, self.fetch_snapshot, "FetchSnapshot"),
            ApiHandler(62, 0, 4, self.broker_registration, "BrokerRegistration"),
            ApiHandler(63, 0, 1, self.broker_heartbeat, "BrokerHeartbeat"),
            ApiHandler(67, 0, 0, self.allocate_producer_ids, "AllocateProducerIds"),
        ]

    def api_versions(self, ctx: RequestContext, req: ApiVersionsRequest) -> ApiVersionsResponse:
        assert self.dispatcher is not None
        return ApiVersionsResponse(api_keys=self.dispatcher.api_versions())

    async def _run(self, command: Callable[[ClusterImage], ControllerResult[R]]) -> R | None:
        """The command's response, or ``None`` when this controller is not the active one."""
        try:
            return await self.qc.submit(command)
        except NotControllerError:
            return None

    # --- brokers ------------------------------------------------------------------------------

    async def broker_registration(
        self, ctx: RequestContext, req: BrokerRegistrationRequest
    ) -> BrokerRegistrationResponse:
        handle = self.qc.controller.handle_register_broker
        return await self._broker_session(
            req.broker_id,
            lambda image: handle(req, image, self.qc.has_valid_session),
            BrokerRegistrationResponse(error_code=NOT_CONTROLLER),
        )

    async def broker_heartbeat(
        self, ctx: RequestContext, req: BrokerHeartbeatRequest
    ) -> BrokerHeartbeatResponse:
        handle = self.qc.controller.handle_broker_heartbeat
        return await self._broker_session(
            req.broker_id,
            lambda image: handle(req, image),
            BrokerHeartbeatResponse(error_code=NOT_CONTROLLER, is_fenced=True),
        )

    async def _broker_session(
        self, broker_id: int, command: Callable[[ClusterImage], ControllerResult[S]], standby: S
    ) -> S:
        """A registration or heartbeat: an accepted one renews the broker's session here; a
        standby controller answers ``standby``."""
        response = await self._run(command)
        if response is None:
            return standby
        if response.error_code == ErrorCode.NONE:
            self.qc.touch_session(broker_id)
        return response

    async def alter_partition(
        self, ctx: RequestContext, req: AlterPartitionRequest
    ) -> AlterPartitionResponse:
        handle = self.qc.controller.handle_alter_partition
        response = await self._run(lambda image: handle(req, image))
        return response or AlterPartitionResponse(error_code=NOT_CONTROLLER)

    async def allocate_producer_ids(
        self, ctx: RequestContext, req: AllocateProducerIdsRequest
    ) -> AllocateProducerIdsResponse:
        handle = self.qc.controller.handle_allocate_producer_ids
        response = await self._run(lambda image: handle(req, image))
        return response or AllocateProducerIdsResponse(error_code=NOT_CONTROLLER)

    # --- admin requests forwarded by brokers --------------------------------------------------

    async def forwarded(self, request: Request, version: int) -> Response:
        """The active controller's answer (the request's controller rule), or every item
        NOT_CONTROLLER from any other controller: the broker then tries the next one."""
        response = await self.run_forwarded(request)
        if response is None:
            not_active: Response = forwarded_api(request).failed(
                request, ErrorCode.NOT_CONTROLLER, NOT_ACTIVE
            )
            return not_active
        return response

    async def run_forwarded(self, request: Request) -> Response | None:
        """The rule's answer, or ``None`` when this controller is not the active one."""
        return await self._run(lambda image: self.qc.controller.handle(request, image))

    # --- the metadata log ---------------------------------------------------------------------

    async def fetch(self, ctx: RequestContext, req: FetchRequest) -> FetchResponse:
        """Long-poll read of committed metadata batches after ``fetch_offset``."""
        topics = req.topics
        if (
            len(topics) != 1
            or len(topics[0].partitions) != 1
            or topics[0].partitions[0].partition != 0
            or not _is_metadata_topic(topics[0].topic, topics[0].topic_id, ctx.api_version)
        ):
            return FetchResponse(error_code=ErrorCode.INVALID_REQUEST)
        topic, part = topics[0], topics[0].partitions[0]
        if self.qc.quorum.leader is None:
            # Electing, or cut off from the quorum (a minority that lost its leader): what
            # it has committed may be stale for as long as the cut lasts, and a broker that
            # kept long-polling it would not learn of fencings, new leaders or new topics.
            # The broker fetches from another controller.
            refused = FetchResponse.PartitionData(
                partition_index=0, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER
            )
            return FetchResponse(
                responses=[
                    FetchResponse.FetchableTopicResponse(
                        topic=topic.topic, topic_id=topic.topic_id, partitions=[refused]
                    )
                ]
            )
        offset = part.fetch_offset
        wait_s = min(max(req.max_wait_ms, 0), MAX_FETCH_WAIT_MS) / 1000
        if self.qc.log_start_offset <= offset and self.qc.high_watermark <= offset:
            try:
                async with asyncio.timeout(wait_s):
                    await self.qc.wait_for_commit_after(offset)  # a record at ``offset``
            except TimeoutError:
                pass
        max_bytes = max(1, min(part.partition_max_bytes, req.max_bytes or 1 << 30))
        read = self.qc.read(offset, max_bytes)
        data = FetchResponse.PartitionData(
            partition_index=0,
            high_watermark=read.high_watermark,
            last_stable_offset=read.high_watermark,
            log_start_offset=read.log_start_offset,
            records=read.records,
        )
        if read.snapshot_id is not None:
            data.snapshot_id = FetchResponse.SnapshotId(
                end_offset=read.snapshot_id.end_offset, epoch=read.snapshot_id.epoch
            )
        elif offset > read.high_watermark:
            data.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
        reply = FetchResponse.FetchableTopicResponse(
            topic=topic.topic, topic_id=topic.topic_id, partitions=[data]
        )
        return FetchResponse(responses=[reply])

    def fetch_snapshot(
        self, ctx: RequestContext, req: FetchSnapshotRequest
    ) -> FetchSnapshotResponse:
        if (
            len(req.topics) != 1
            or req.topics[0].name != METADATA_TOPIC
            or len(req.topics[0].partitions) != 1
            or req.topics[0].partitions[0].partition != 0
        ):
            return FetchSnapshotResponse(error_code=ErrorCode.INVALID_REQUEST)
        part = req.topics[0].partitions[0]
        wanted = SnapshotId(part.snapshot_id.end_offset, part.snapshot_id.epoch)
        snapshot = self.qc.snapshot(wanted)
        answer = FetchSnapshotResponse.PartitionSnapshot(
            index=0,
            snapshot_id=FetchSnapshotResponse.SnapshotId(
                end_offset=wanted.end_offset, epoch=wanted.epoch
            ),
        )
        if snapshot is None:
            answer.error_code = ErrorCode.SNAPSHOT_NOT_FOUND
        elif not 0 <= part.position <= len(snapshot.data):
            answer.error_code = ErrorCode.POSITION_OUT_OF_RANGE
        else:
            chunk = min(max(req.max_bytes, 1), MAX_SNAPSHOT_CHUNK_BYTES)
            answer.size = len(snapshot.data)
            answer.position = part.position
            answer.unaligned_records = snapshot.data[part.position : part.position + chunk]
        topic = FetchSnapshotResponse.TopicSnapshot(
            name=TopicName(METADATA_TOPIC), partitions=[answer]
        )
        return FetchSnapshotResponse(topics=[topic])

    def describe_quorum(
        self, ctx: RequestContext, req: DescribeQuorumRequest
    ) -> DescribeQuorumResponse:
        quorum = self.qc.quorum
        leader_address = quorum.leader
        leader_id = next((i for i, a in self.voters.items() if a == leader_address), -1)
        hw = self.qc.high_watermark
        lag = quorum.follower_lag()
        voters = []
        for voter_id, address in sorted(self.voters.items()):
            behind = 0 if voter_id == self.node_id else (lag or {}).get(address)
            voters.append(
                DescribeQuorumResponse.ReplicaState(
                    replica_id=BrokerId(voter_id),
                    log_end_offset=hw if behind == 0 else -1,
                )
            )
        partition = DescribeQuorumResponse.PartitionData(
            partition_index=0,
            error_code=0 if leader_id == self.node_id else NOT_CONTROLLER,
            leader_id=BrokerId(leader_id),
            leader_epoch=quorum.epoch,
            high_watermark=hw,
            current_voters=voters,
            observers=[],
        )
        topic = DescribeQuorumResponse.TopicData(
            topic_name=TopicName(METADATA_TOPIC), partitions=[partition]
        )
        nodes = []
        for voter_id, address in sorted(self.voters.items()):
            host, _, port = address.rpartition(":")
            listener = DescribeQuorumResponse.Listener(name="RAFT", host=host, port=int(port))
            nodes.append(
                DescribeQuorumResponse.Node(node_id=BrokerId(voter_id), listeners=[listener])
            )
        return DescribeQuorumResponse(topics=[topic], nodes=nodes)

    def voter_status(self) -> list[dict[str, Any]]:
        """For REST: each voter's id, Raft address and lag in entries (None: unknown)."""
        lag = self.qc.quorum.follower_lag()
        out = []
        for voter_id, address in sorted(self.voters.items()):
            behind: int | None = 0 if voter_id == self.node_id else None
            if lag is not None and voter_id != self.node_id:
                behind = lag.get(address)
            out.append({"id": voter_id, "address": address, "lag": behind})
        return out


def _is_metadata_topic(name: str, topic_id: uuid.UUID, version: int) -> bool:
    return topic_id == METADATA_TOPIC_ID if version >= 13 else name == METADATA_TOPIC
