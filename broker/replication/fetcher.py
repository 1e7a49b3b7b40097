"""Followers fetch from leaders (Kafka's ``ReplicaFetcherManager`` / ``ReplicaFetcherThread``).

Theory of operation
-------------------
One :class:`LeaderFetcher` task per leader broker fetches every partition this broker follows
from that leader, in one Fetch request at a time (``replica_id`` = this broker, so the leader
serves up to its log end offset and counts the fetch offset as this follower's log end
offset).  :class:`ReplicaFetcherManager` moves partitions between fetchers as the metadata
changes leaders (``update``), and stops a fetcher that has nothing left to fetch.

A partition joins a fetcher needing *truncation* whenever its leader epoch is new to the
fetcher.  Before fetching it, the fetcher asks the leader, with OffsetForLeaderEpoch, where
this replica's latest epoch ends in the leader's log and cuts any divergent tail
(``FollowerState.truncation_offset``: KIP-101, and KIP-279's extra round when the leader
answers with an epoch this log never had).  Only then does it fetch from its log end offset;
the leader's batches are appended verbatim (``ReplicaManager.append_as_follower``) and the
leader's high watermark, capped at this log's end, becomes this replica's.

Errors are per partition and never stop the others: a stale or unknown epoch, or a leader
that is not (yet) the leader, backs the partition off until the metadata catches up (a new
registration re-adds it); OFFSET_OUT_OF_RANGE re-runs the truncation, or restarts the log at
the leader's log start when retention removed what we need; a connection failure backs the
whole fetcher off and reconnects.  Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.kafka_client import AuthenticationError, Backoff, KafkaClientError, KafkaConnection
from broker.log.epochs import EpochEndOffset
from broker.log.errors import CorruptBatchError, LogError
from broker.replication.partition_state import FollowerState
from broker.replication.throttle import ReplicationQuota
from broker.security.client_security import ClientSecurity
from kafka_protocol._codec import FileRegion
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    FetchRequest,
    FetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka_protocol.types import BrokerId, TopicName

if TYPE_CHECKING:
    from broker.replica_manager import Partition, ReplicaManager

log = logging.getLogger("broker.fetcher")

FETCH_VERSION = 12  # the last version that names topics (13+ use topic ids)
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
PARTITION_BACKOFF_S = 0.5  # Kafka's replica.fetch.backoff.ms is 1000
Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    broker_id: int
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    partition_max_bytes: int = 1 << 20  # replica.fetch.max.bytes
    response_max_bytes: int = 10 << 20  # replica.fetch.response.max.bytes
    request_timeout_ms: int = 30_000  # replica.socket.timeout.ms
    on_corrupt_batch: Callable[[], None] | None = None  # a metrics hook
    # How to connect to leaders: inter.broker.listener.name's protocol and
    # sasl.mechanism.inter.broker.protocol (None: PLAINTEXT)
    security: ClientSecurity | None = None
    # follower.replication.throttled.* (KIP-73): None, never throttled
    throttle: ReplicationQuota | None = None


@dataclass(slots=True)
class _Fetching:
    part: Partition
    leader_epoch: int
    needs_truncation: bool = True
    backoff_until: float = 0.0
    in_sync: bool = False  # the last fetch reached the leader's high watermark


Endpoint = Callable[[int], tuple[str, int] | None]  # leader id -> its inter-broker address


class LeaderFetcher:
    """Fetches every partition followed from one leader."""

    def __init__(
        self,
        leader_id: int,
        replicas: ReplicaManager,
        endpoint: Endpoint,
        config: FetcherConfig,
    ) -> None:
        self.leader_id = leader_id
        self.replicas = replicas
        self.endpoint = endpoint
        self.config = config
        self.partitions: dict[Key, _Fetching] = {}
        self._changed = asyncio.Event()
        self._conn: KafkaConnection | None = None
        self._backoff = Backoff(0.05, 1.0)
        self._failing = False
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{leader_id}")

    def add(self, part: Partition, leader_epoch: int) -> None:
        key = (part.topic, part.index)
        current = self.partitions.get(key)
        if current is not None and current.part is part and current.leader_epoch == leader_epoch:
            current.backoff_until = 0.0  # newer metadata: try again now
        else:
            self.partitions[key] = _Fetching(part, leader_epoch)
        self._changed.set()

    def remove(self, key: Key) -> None:
        self.partitions.pop(key, None)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        if self._conn is not None:
            self._conn.close()

    # --- the loop -----------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._changed.clear()
            now = loop.time()
            ready = [f for f in self.partitions.values() if f.backoff_until <= now]
            if not ready:
                waits = [f.backoff_until - now for f in self.partitions.values()]
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(waits, default=None)):
                        await self._changed.wait()
                continue
            try:
                conn = await self._connection()
                truncating = [f for f in ready if f.needs_truncation]
                if truncating:
                    await self._truncate(conn, truncating)
                else:
                    await self._fetch(conn, ready)
                self._backoff.reset()
                if self._failing:
                    log.info("fetching from broker %d again", self.leader_id)
                    self._failing = False
            except (KafkaClientError, OSError, TimeoutError) as exc:
                # The first failure is news; repeats while the leader stays away are not.
                level = logging.DEBUG if self._failing else logging.INFO
                if isinstance(exc, AuthenticationError) and not self._failing:
                    level = logging.WARNING  # credentials to fix: the operator must see it
                log.log(level, "fetch from broker %d failed: %s", self.leader_id, exc or "timeout")
                self._failing = True
                self._drop_connection()
                await self._backoff.sleep()
                continue
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug: keep the broker up, retry after a pause
                log.exception("replica fetcher for broker %d failed", self.leader_id)
                self._drop_connection()
                await asyncio.sleep(1.0)

    async def _connection(self) -> KafkaConnection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        address = self.endpoint(self.leader_id)
        if address is None:
            raise KafkaClientError(
                f"broker {self.leader_id} has no known endpoint on the inter-broker listener"
            )
        async with asyncio.timeout(self.config.request_timeout_ms / 1000):
            self._conn = await KafkaConnection.open(
                *address,
                client_id=f"replica-fetcher-{self.config.broker_id}",
                security=self.config.security,
            )
        return self._conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _current(self, fetching: _Fetching) -> FollowerState | None:
        """The follower role this fetch was planned for, if it still is (the metadata may have
        moved the partition since: then the answer is for a past state and is dropped)."""
        part = fetching.part
        key = (part.topic, part.index)
        if self.partitions.get(key) is not fetching or self.replicas.get(*key) is not part:
            return None
        role = part.role
        if (
            not isinstance(role, FollowerState)
            or role.leader_id != self.leader_id
            or role.leader_epoch != fetching.leader_epoch
        ):
            return None
        return role

    def _back_off(self, fetching: _Fetching, why: str) -> None:
        log.info("partition=%s leader=%d backing off: %s", fetching.part.name, self.leader_id, why)
        fetching.backoff_until = asyncio.get_running_loop().time() + PARTITION_BACKOFF_S

    # --- truncation (OffsetForLeaderEpoch) ----------------------------------------------------

    async def _truncate(self, conn: KafkaConnection, batch: list[_Fetching]) -> None:
        version = conn.version_for(23, OFFSET_FOR_LEADER_EPOCH_VERSION)
        if version is None or version < 2:
            raise KafkaClientError(f"broker {self.leader_id} lacks OffsetForLeaderEpoch v2+")
        asked: dict[Key, tuple[_Fetching, int]] = {}
        by_topic: dict[str, list[OffsetForLeaderEpochRequest.OffsetForLeaderPartition]] = {}
        for f in batch:
            if self._current(f) is None:
                continue
            latest = f.part.log.latest_epoch
            if latest is None or latest < 0:
                f.needs_truncation = False  # no epoch in this log: nothing can diverge
                continue
            asked[(f.part.topic, f.part.index)] = (f, latest)
            by_topic.setdefault(f.part.topic, []).append(
                OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                    partition=f.part.index,
                    current_leader_epoch=f.leader_epoch,
                    leader_epoch=latest,
                )
            )
        if not by_topic:
            return
        request = OffsetForLeaderEpochRequest(
            replica_id=BrokerId(self.config.broker_id),
            topics=[
                OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=TopicName(t), partitions=p)
                for t, p in by_topic.items()
            ],
        )
        async with asyncio.timeout(self.config.request_timeout_ms / 1000):
            response = await conn.send(request, version)
        assert isinstance(response, OffsetForLeaderEpochResponse)
        for topic in response.topics:
            for answer in topic.partitions:
                found = asked.pop((topic.topic, answer.partition), None)
                if found is not None:
                    self._apply_epoch_answer(*found, answer)
        for f, _ in asked.values():  # not answered: ask again later
            self._back_off(f, "no OffsetForLeaderEpoch answer")

    def _apply_epoch_answer(
        self,
        fetching: _Fetching,
        asked_epoch: int,
        answer: OffsetForLeaderEpochResponse.EpochEndOffset,
    ) -> None:
        role = self._current(fetching)
        if role is None or fetching.part.log.latest_epoch != asked_epoch:
            return
        if answer.error_code != ErrorCode.NONE:
            self._back_off(fetching, ErrorCode.from_code(answer.error_code).name)
            return
        part = fetching.part
        truncation = role.truncation_offset(
            EpochEndOffset(answer.leader_epoch, answer.end_offset), part.log.epoch_entries()
        )
        before = part.log_end_offset
        try:
            self.replicas.truncate(part, truncation)
        except LogError as exc:
            self._back_off(fetching, f"truncation failed: {exc}")
            return
        if part.log_end_offset != before:
            log.info(
                "truncated partition=%s from=%d to=%d (leader %d epoch %d ends at %d)",
                part.name,
                before,
                part.log_end_offset,
                self.leader_id,
                answer.leader_epoch,
                answer.end_offset,
            )
        fetching.needs_truncation = not truncation.complete

    # --- fetch --------------------------------------------------------------------------------

    async def _fetch(self, conn: KafkaConnection, batch: list[_Fetching]) -> None:
        version = conn.version_for(1, FETCH_VERSION)
        if version is None or version < 4:
            raise KafkaClientError(f"broker {self.leader_id} lacks Fetch v4+")
        planned: dict[Key, _Fetching] = {}
        by_topic: dict[str, list[FetchRequest.FetchPartition]] = {}
        for f in batch:
            if self._current(f) is None or self._held_back(f):
                continue
            part = f.part
            planned[(part.topic, part.index)] = f
            by_topic.setdefault(part.topic, []).append(
                FetchRequest.FetchPartition(
                    partition=part.index,
                    current_leader_epoch=f.leader_epoch,
                    fetch_offset=part.log_end_offset,
                    log_start_offset=part.log_start_offset,
                    partition_max_bytes=self.config.partition_max_bytes,
                )
            )
        if not by_topic:
            return
        request = FetchRequest(
            replica_id=BrokerId(self.config.broker_id),
            max_wait_ms=self.config.max_wait_ms,
            min_bytes=self.config.min_bytes,
            max_bytes=self.config.response_max_bytes,
            session_epoch=-1,  # sessionless
            topics=[
                FetchRequest.FetchTopic(topic=TopicName(t), partitions=p)
                for t, p in by_topic.items()
            ],
        )
        timeout = (self.config.max_wait_ms + self.config.request_timeout_ms) / 1000
        async with asyncio.timeout(timeout):
            response = await conn.send(request, version)
        assert isinstance(response, FetchResponse)
        if response.error_code != ErrorCode.NONE:
            raise KafkaClientError(
                f"broker {self.leader_id} refused the fetch: "
                f"{ErrorCode.from_code(response.error_code).name}"
            )
        for topic in response.responses:
            for data in topic.partitions:
                fetching = planned.get((topic.topic, data.partition_index))
                if fetching is not None:
                    self._apply_fetched(fetching, data)

    def _held_back(self, fetching: _Fetching) -> bool:
        """A lagging throttled partition waits while the follower quota is exceeded (Kafka's
        ``shouldFollowerThrottle``): it sits out until the rate is back within the bound."""
        throttle, part = self.config.throttle, fetching.part
        if throttle is None or not throttle.holds_back(part.topic, part.index, fetching.in_sync):
            return False
        wait_s = max(throttle.wait_ms(), 1) / 1000
        fetching.backoff_until = asyncio.get_running_loop().time() + wait_s
        return True

    def _apply_fetched(self, fetching: _Fetching, data: FetchResponse.PartitionData) -> None:
        if self._current(fetching) is None:
            return
        part = fetching.part
        error = ErrorCode.from_code(data.error_code)
        if error is ErrorCode.OFFSET_OUT_OF_RANGE:
            self._out_of_range(fetching, data.log_start_offset)
            return
        if error is not ErrorCode.NONE:
            self._back_off(fetching, error.name)
            return
        records = data.records
        assert not isinstance(records, FileRegion), "a decoded response holds bytes"
        view = memoryview(records) if records else memoryview(b"")
        try:
            self.replicas.append_as_follower(part, view, data.high_watermark)
        except CorruptBatchError as exc:
            # Never appended, so never served: fetch it again after a backoff (the leader's
            # copy may have been damaged in transit), and say so where an operator looks.
            log.error(
                "corrupt batch from the leader, not appended partition=%s leader=%d offset=%d"
                " problem=%s",
                part.name,
                self.leader_id,
                part.log.log_end_offset,
                exc,
            )
            if self.config.on_corrupt_batch is not None:
                self.config.on_corrupt_batch()
            self._back_off(fetching, str(exc))
            return
        except LogError as exc:
            log.error("follower append failed partition=%s error=%s", part.name, exc)
            fetching.needs_truncation = True  # re-check where we stand before going on
            self._back_off(fetching, str(exc))
            return
        if 0 <= part.log_start_offset < data.log_start_offset <= part.high_watermark:
            part.log.delete_records_before(data.log_start_offset)  # follow the leader's start
        fetching.in_sync = part.log_end_offset >= data.high_watermark
        throttle = self.config.throttle
        if throttle is not None and throttle.is_throttled(part.topic, part.index):
            throttle.record(len(view))

    def _out_of_range(self, fetching: _Fetching, leader_log_start: int) -> None:
        """Our log end is outside the leader's log: above its end (it truncated: find the
        divergence again) or below its start (retention removed what we need: restart)."""
        part = fetching.part
        if leader_log_start >= 0 and part.log_end_offset < leader_log_start:
            log.warning(
                "partition=%s log end %d is below leader %d's log start %d: restarting the log",
                part.name,
                part.log_end_offset,
                self.leader_id,
                leader_log_start,
            )
            try:
                self.replicas.reset_follower_log(part, leader_log_start)
            except LogError as exc:
                self._back_off(fetching, f"reset failed: {exc}")
            return
        fetching.needs_truncation = True


class ReplicaFetcherManager:
    """Assigns followed partitions to one fetcher per leader."""

    def __init__(self, replicas: ReplicaManager, endpoint: Endpoint, config: FetcherConfig):
        self.replicas = replicas
        self.endpoint = endpoint
        self.config = config
        self.fetchers: dict[int, LeaderFetcher] = {}
        self._leader_of: dict[Key, int] = {}

    def update(self, part: Partition) -> None:
        """Follow ``part`` from its current leader, or stop following it."""
        key = (part.topic, part.index)
        role = part.role
        leader = role.leader_id if isinstance(role, FollowerState) else -1
        old = self._leader_of.get(key)
        if old is not None and old != leader:
            self._remove_from(old, key)
        if leader < 0 or leader == self.config.broker_id or not isinstance(role, FollowerState):
            return
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            fetcher = self.fetchers[leader] = LeaderFetcher(
                leader, self.replicas, self.endpoint, self.config
            )
        fetcher.add(part, role.leader_epoch)
        self._leader_of[key] = leader

    def remove(self, key: Key) -> None:
        leader = self._leader_of.get(key)
        if leader is not None:
            self._remove_from(leader, key)

    def _remove_from(self, leader: int, key: Key) -> None:
        self._leader_of.pop(key, None)
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            return
        fetcher.remove(key)
        if not fetcher.partitions:
            del self.fetchers[leader]
            asyncio.get_running_loop().create_task(fetcher.close())

    def followed(self) -> dict[Key, int]:
        """Partitions followed, and the leader each is fetched from."""
        return dict(self._leader_of)

    async def close(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self._leader_of.clear()
        for fetcher in fetchers:
            await fetcher.close()
