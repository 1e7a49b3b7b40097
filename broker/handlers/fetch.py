"""Fetch 4-17 (sessionless): whole batches up to the high watermark, served with sendfile.

Consumers (``replica_id`` -1) read from the leader up to its high watermark.  A follower
(``replica_id`` = its broker id; from v15 in ``replica_state``, KIP-903) reads up to the log
end offset, and its fetch offset tells the leader what it holds
(``ReplicaManager.on_follower_fetch``: the follower's log end offset, the high watermark, ISR
expansion); the response carries the leader's high watermark.  A stale or future
``current_leader_epoch`` gets FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH (KIP-320).

Follower fetching (KIP-392).  A consumer's Fetch v11+ carries client metadata (its
``rack_id``), and then any replica serves it, a follower up to *its* high watermark (an
offset past its log end is OFFSET_OUT_OF_RANGE, which sends the client back to the leader);
older consumers and replicas are served by the leader only (NOT_LEADER_OR_FOLLOWER
elsewhere), as Kafka's ``FetchParams.fetchOnlyLeader``.  With ``replica.selector.class`` set,
the leader asks :mod:`broker.replica_selector` for the replica of the client's rack and, when
it names a follower, answers that partition at once with no records and
``preferred_read_replica``.

Topic ids (KIP-516): from v13 topics are named by id, resolved through the metadata image; an
unknown id answers UNKNOWN_TOPIC_ID.  From v16 NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH
carry the current leader and its address (KIP-951, :mod:`broker.handlers.leader_hints`).
Versions 14, 15 and 17 change nothing a sessionless broker without tiered storage serves
differently.

Reading plans slices first (positions in segment files, no bytes touched) and materializes
them as :class:`FileRegion` chunks (a dup'd fd the connection sends with ``os.sendfile`` and
closes) only for the response actually sent.  If fewer than ``min_bytes`` are available the
request long-polls: it waits on every requested partition's append wake-up, or
``max_wait_ms``, then plans again.

Transactions (KIP-98): a consumer fetching with ``isolation_level`` 1 (read_committed) reads
up to the last stable offset instead of the high watermark, and gets the aborted transactions
overlapping what it fetched (``PartitionLog.aborted_transactions_for``: the aborted-transaction
indexes, looked at only when the log has any), so it can drop their records itself.  Every
response reports the last stable offset (the high watermark when no transaction is open).

Limits (KIP-74): ``partition_max_bytes`` per partition and ``max_bytes`` per response, except
that the first batch of the first non-empty partition is returned whole even if larger, so a
consumer can always make progress.  A fetch from inside a batch returns that whole batch; the
client drops the records before its offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from broker.dispatcher import ApiHandler, RequestContext
from broker.handlers.leader_hints import LeaderHints
from broker.log.errors import LogError, OffsetOutOfRangeError
from broker.log.reader import FetchSlice
from broker.log.txn_index import AbortedTxn
from broker.metrics import BrokerMetrics
from broker.partition import Partition
from broker.replica_manager import ReplicaManager
from broker.replica_selector import FollowerView, preferred_read_replica
from broker.replication.partition_state import PartitionState
from broker.replication.throttle import ReplicationQuota
from kafka_protocol._codec import Chunk, FileRegion
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import FetchRequest, FetchResponse
from kafka_protocol.types import BrokerId, ProducerId, TopicName
from metadata_log.image import ClusterImage

log = logging.getLogger("broker.fetch")

READ_COMMITTED = 1  # isolation_level
CLIENT_METADATA_VERSION = 11  # rack_id: consumers may read from followers (KIP-392)
TOPIC_ID_VERSION = 13  # topics named by id (KIP-516)
REPLICA_STATE_VERSION = 15  # the replica id moved into replica_state (KIP-903)
NODE_ENDPOINTS_VERSION = 16  # where the leader is, with NOT_LEADER_OR_FOLLOWER (KIP-951)
NO_TOPIC_ID = uuid.UUID(int=0)


@dataclass(slots=True)
class _Planned:
    topic: str
    index: int
    error: ErrorCode
    part: Partition | None = None
    slice: FetchSlice | None = None
    aborted: list[AbortedTxn] | None = None  # read_committed: overlapping aborted transactions
    topic_id: uuid.UUID = NO_TOPIC_ID
    preferred: int | None = None  # KIP-392: read from this follower instead


@dataclass(frozen=True, slots=True)
class _Scope:
    """What one request decides for all its partitions."""

    replica_id: int  # -1: a consumer
    isolation_level: int
    client_rack: str | None  # a consumer's Fetch v11+: followers may serve it

    @property
    def leader_only(self) -> bool:
        return self.client_rack is None


def _settle(wake: asyncio.Future[None]) -> None:
    if not wake.done():
        wake.set_result(None)


def check_leader(part: Partition, requested: int) -> ErrorCode:
    """Only the leader answers; KIP-320: a client's view of the leader epoch must match ours
    (-1 skips the check).  A partition whose log directory failed answers
    KAFKA_STORAGE_ERROR, as Kafka's ``ReplicaManager.getPartitionOrError`` does."""
    if part.offline:
        return ErrorCode.KAFKA_STORAGE_ERROR
    if not part.is_leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return check_epoch(part, requested)


def check_epoch(part: Partition, requested: int) -> ErrorCode:
    """KIP-320 on any replica: the requester's leader epoch against the one this replica
    knows (-1 skips the check)."""
    if part.offline:
        return ErrorCode.KAFKA_STORAGE_ERROR
    if requested < 0 or requested == part.leader_epoch:
        return ErrorCode.NONE
    if requested < part.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    return ErrorCode.UNKNOWN_LEADER_EPOCH


class FetchHandler:
    """``image``: the metadata image (topic ids, the brokers' racks); ``replica_selector``:
    ``replica.selector.class`` (None: consumers are never sent to a follower)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        metrics: BrokerMetrics,
        broker_epoch_of: Callable[[int], int],
        image: Callable[[], ClusterImage],
        replica_selector: str | None = None,
        throttle: ReplicationQuota | None = None,
        hints: LeaderHints | None = None,
    ) -> None:
        self.replicas = replicas
        self.metrics = metrics
        self.broker_epoch_of = broker_epoch_of  # a follower's registration, from the image
        self.image = image
        self.replica_selector = replica_selector
        self.throttle = throttle  # leader.replication.throttled.* (broker.replication.throttle)
        self.hints = hints  # KIP-951 (None: no hints)

    def spec(self) -> ApiHandler:
        return ApiHandler(1, 4, 17, self.handle, "Fetch")

    def handle(
        self, ctx: RequestContext, req: FetchRequest
    ) -> FetchResponse | asyncio.Future[FetchResponse | None]:
        scope = self._scope(ctx.api_version, req)
        plan, available = self._plan(ctx.api_version, req, scope)
        if available >= req.min_bytes or req.max_wait_ms <= 0 or _answer_now(plan):
            return self._respond(ctx, plan, scope.replica_id < 0)
        # Register before returning: an append later in this loop pass must wake us.
        wake = self._register(plan)
        return asyncio.ensure_future(self._long_poll(ctx, req, scope, plan, wake))

    @staticmethod
    def _scope(version: int, req: FetchRequest) -> _Scope:
        replica_id = (
            req.replica_state.replica_id if version >= REPLICA_STATE_VERSION else req.replica_id
        )
        consumer_metadata = replica_id < 0 and version >= CLIENT_METADATA_VERSION
        return _Scope(replica_id, req.isolation_level, req.rack_id if consumer_metadata else None)

    @staticmethod
    def _register(plan: list[_Planned]) -> asyncio.Future[None]:
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for p in plan:
            if p.part is not None:
                p.part.waiters.append(wake)
        return wake

    @staticmethod
    def _unregister(plan: list[_Planned], wake: asyncio.Future[None]) -> None:
        for p in plan:  # an idle partition must not accumulate dead waiters
            if p.part is not None:
                with contextlib.suppress(ValueError):
                    p.part.waiters.remove(wake)

    async def _long_poll(
        self,
        ctx: RequestContext,
        req: FetchRequest,
        scope: _Scope,
        plan: list[_Planned],
        wake: asyncio.Future[None],
    ) -> FetchResponse:
        loop = asyncio.get_running_loop()
        deadline = ctx.received_loop_time + req.max_wait_ms / 1000
        while True:
            timer = loop.call_later(max(0.0, deadline - loop.time()), _settle, wake)
            try:
                await wake
            finally:
                timer.cancel()
                self._unregister(plan, wake)
            plan, available = self._plan(ctx.api_version, req, scope)
            if available >= req.min_bytes or _answer_now(plan) or loop.time() >= deadline:
                return self._respond(ctx, plan, scope.replica_id < 0)
            wake = self._register(plan)

    def _plan(self, version: int, req: FetchRequest, scope: _Scope) -> tuple[list[_Planned], int]:
        budget = max(0, req.max_bytes)
        total = 0
        plan: list[_Planned] = []
        by_id = self.image().topics.by_id if version >= TOPIC_ID_VERSION else None
        for topic in req.topics:
            name: str = topic.topic
            if by_id is not None:
                known = by_id.get(topic.topic_id)
                if known is None:
                    plan.extend(
                        _Planned(
                            "", fp.partition, ErrorCode.UNKNOWN_TOPIC_ID, topic_id=topic.topic_id
                        )
                        for fp in topic.partitions
                    )
                    continue
                name = known.name
            for fp in topic.partitions:
                limit = max(0, min(fp.partition_max_bytes, budget))
                p = self._plan_one(name, fp, limit, total == 0, scope)
                p.topic_id = topic.topic_id
                if p.slice is not None:
                    total += p.slice.size_bytes
                    budget = max(0, budget - p.slice.size_bytes)
                plan.append(p)
        return plan, total

    def _plan_one(
        self,
        topic: str,
        fp: FetchRequest.FetchPartition,
        max_bytes: int,
        first: bool,
        scope: _Scope,
    ) -> _Planned:
        part = self.replicas.get(topic, fp.partition)
        if part is None:
            return _Planned(topic, fp.partition, self.replicas.missing_error(topic, fp.partition))
        if scope.leader_only:
            error = check_leader(part, fp.current_leader_epoch)
        else:
            error = check_epoch(part, fp.current_leader_epoch)
        if error is not ErrorCode.NONE:
            return _Planned(topic, fp.partition, error, part)
        if scope.client_rack is not None and self.replica_selector is not None:
            preferred = self._preferred_replica(part, scope.client_rack, fp.fetch_offset)
            if preferred is not None:
                log.debug(
                    "partition=%s consumer rack=%s sent to replica=%d",
                    part.name,
                    scope.client_rack,
                    preferred,
                )
                return _Planned(topic, fp.partition, ErrorCode.NONE, part, preferred=preferred)
        if fp.fetch_offset > part.log_end_offset or fp.fetch_offset < part.log_start_offset:
            return _Planned(topic, fp.partition, ErrorCode.OFFSET_OUT_OF_RANGE, part)
        replica_id = scope.replica_id
        read_committed = scope.isolation_level == READ_COMMITTED and replica_id < 0
        limit = part.last_stable_offset if read_committed else part.high_watermark
        if replica_id >= 0:  # a follower: it reads to the log end, and says what it holds
            decision = self.replicas.on_follower_fetch(
                part,
                replica_id,
                fp.fetch_offset,
                fp.current_leader_epoch,
                self.broker_epoch_of(replica_id),
                fp.log_start_offset,  # DeleteRecords' low watermark (broker/delete_records.py)
            )
            if decision.error is not None:
                return _Planned(topic, fp.partition, decision.error, part)
            limit = part.log_end_offset
            if self._throttled(part, replica_id):
                return _Planned(topic, fp.partition, ErrorCode.NONE, part)
        if fp.fetch_offset >= limit or (max_bytes <= 0 and not first):
            return _Planned(topic, fp.partition, ErrorCode.NONE, part)
        try:
            chunk = part.log.read(fp.fetch_offset, max_bytes, max_offset=limit, min_one_batch=first)
        except OffsetOutOfRangeError:
            return _Planned(topic, fp.partition, ErrorCode.OFFSET_OUT_OF_RANGE, part)
        except LogError as exc:
            return _Planned(topic, fp.partition, exc.error_code, part)
        # Counted when planned: a follower's min_bytes is 1, so a plan with bytes is sent.
        throttle = self.throttle if replica_id >= 0 else None
        if throttle is not None and throttle.is_throttled(topic, fp.partition):
            throttle.record(chunk.size_bytes)
        aborted = None
        if read_committed and chunk.size_bytes:
            try:
                aborted = part.log.aborted_transactions_for(fp.fetch_offset, chunk)
            except LogError as exc:
                return _Planned(topic, fp.partition, exc.error_code, part)
        return _Planned(topic, fp.partition, ErrorCode.NONE, part, chunk, aborted)

    def _preferred_replica(
        self, part: Partition, client_rack: str, fetch_offset: int
    ) -> int | None:
        """The leader's choice of replica for a consumer in ``client_rack`` (None: itself)."""
        role = part.role
        if not isinstance(role, PartitionState):
            return None  # only the leader redirects
        brokers = self.image().brokers
        starts = part.follower_log_starts
        followers = [
            FollowerView(
                b, b in role.isr, s.log_end_offset, s.last_caught_up_time_ms, starts.get(b, -1)
            )
            for b, s in role.followers.items()
        ]
        return preferred_read_replica(
            client_rack,
            fetch_offset,
            role.replica_id,
            part.log_end_offset,
            followers,
            lambda b: reg.rack if (reg := brokers.get(b)) is not None else None,
            self.replicas.clock_ms(),
        )

    def _throttled(self, part: Partition, replica_id: int) -> bool:
        """A follower out of the ISR gets nothing from a throttled partition while the leader
        quota is exceeded (Kafka's ``shouldLeaderThrottle``)."""
        if self.throttle is None:
            return False
        role = part.role
        in_sync = isinstance(role, PartitionState) and replica_id in role.isr
        return self.throttle.holds_back(part.topic, part.index, in_sync)

    def _records(self, p: _Planned) -> Chunk:
        if p.slice is None or p.slice.size_bytes == 0 or p.part is None:
            return b""
        fd = p.slice.fileno
        if fd is None:  # in-memory storage (tests)
            return p.part.log.read_bytes(p.slice)
        return FileRegion(os.dup(fd), p.slice.position, p.slice.size_bytes)

    def _respond(self, ctx: RequestContext, plan: list[_Planned], consumer: bool) -> FetchResponse:
        metrics = self.metrics
        by_topic: dict[tuple[str, uuid.UUID], list[FetchResponse.PartitionData]] = {}
        hints = self.hints if ctx.api_version >= NODE_ENDPOINTS_VERSION else None
        leaders: set[int] = set()
        for p in plan:
            part = p.part
            if p.error is not ErrorCode.NONE:
                metrics.partition_error_counter("Fetch", p.error).inc()
            data = FetchResponse.PartitionData(
                partition_index=p.index,
                error_code=p.error,
                high_watermark=part.high_watermark if part else -1,
                last_stable_offset=part.last_stable_offset if part else -1,
                log_start_offset=part.log_start_offset if part else -1,
                aborted_transactions=[
                    FetchResponse.AbortedTransaction(
                        producer_id=ProducerId(a[0]), first_offset=a[1]
                    )
                    for a in p.aborted
                ]
                if p.aborted
                else [],
                preferred_read_replica=BrokerId(-1 if p.preferred is None else p.preferred),
                records=self._records(p),
            )
            if p.slice is not None and p.slice.size_bytes:
                metrics.topic_counters(p.topic)[2].inc(p.slice.size_bytes)
            if part is not None and consumer and p.error is ErrorCode.NONE:
                metrics.consumer_fetch_counter(_served_as(p, part)).inc()
            if hints and (leader := hints.current_leader(p.error, p.topic, p.index)):
                data.current_leader = FetchResponse.LeaderIdAndEpoch(
                    leader_id=BrokerId(leader[0]), leader_epoch=leader[1]
                )
                leaders.add(leader[0])
            by_topic.setdefault((p.topic, p.topic_id), []).append(data)
        metrics.fetch_latency.observe(time.perf_counter() - ctx.received_s)
        return FetchResponse(
            responses=[
                FetchResponse.FetchableTopicResponse(
                    topic=TopicName(name), topic_id=topic_id, partitions=parts
                )
                for (name, topic_id), parts in by_topic.items()
            ],
            node_endpoints=[
                FetchResponse.NodeEndpoint(
                    node_id=BrokerId(e.node_id), host=e.host, port=e.port, rack=e.rack
                )
                for e in (hints.endpoints(leaders, ctx.session.listener) if hints else ())
            ],
        )


def _answer_now(plan: list[_Planned]) -> bool:
    """No long poll: nothing asked, an error, or a partition sent to another replica."""
    return not plan or any(p.error is not ErrorCode.NONE or p.preferred is not None for p in plan)


def _served_as(p: _Planned, part: Partition) -> str:
    if p.preferred is not None:
        return "redirected"
    return "leader" if part.is_leader else "follower"
