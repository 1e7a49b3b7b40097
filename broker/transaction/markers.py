"""Sending COMMIT/ABORT markers to partition leaders (Kafka's
``TransactionMarkerChannelManager``), over :class:`~broker.transaction.remote.BrokerConnections`;
the markers of partitions this broker leads itself are written in process
(:meth:`MarkerChannel.deliver_locally`), with no request encoded, sent to itself and decoded.

:meth:`MarkerChannel.write` writes one transaction's markers: every round it groups the
partitions still pending by their current leader (from the metadata image) and queues each
leader's share.  One sender task per broker drains its queue: everything queued, of every
transaction, goes in one WriteTxnMarkers v1 request (one marker per transaction), so a broker
gets one request per round however many transactions complete at once.  A partition is done
when its leader answers NONE, or when its topic or partition no longer exists (Kafka drops those
too).  A partition without a leader, an unreachable broker, a leader that does not answer within
:data:`ROUND_TIMEOUT_S` or a retriable error is retried in the transaction's next round, after
a backoff (50 ms doubling to 1 s).  INVALID_PRODUCER_EPOCH
or TRANSACTION_COORDINATOR_FENCED mean a newer coordinator (or epoch) owns the transaction: the
sending stops and the transaction is left to it.  Sending stops too when ``still_current()``
says this coordinator no longer owns the id's partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable

from broker.kafka_client import Backoff, KafkaClientError
from broker.transaction.remote import BrokerConnections
from broker.transaction.state import TopicPartition
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from kafka_protocol.types import ProducerId, TopicName
from metadata_log.image import ClusterImage

log = logging.getLogger("broker.transaction")

WRITE_TXN_MARKERS_VERSION = 1
# A round waits this long for its leaders' answers, then recomputes the leaders and retries the
# partitions not answered (their request may still complete: a marker written twice is harmless,
# the second one ends no transaction).
ROUND_TIMEOUT_S = 5.0
# Kafka's TransactionMarkerRequestCompletionHandler: the coordinator is stale, stop sending
_FENCED = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})
# a partition the marker can never reach: drop it (Kafka logs and removes it too)
_GONE = frozenset({ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT})

Marker = WriteTxnMarkersRequest.WritableTxnMarker
Answers = dict[TopicPartition, ErrorCode]
# the leader's side of WriteTxnMarkers, called in process (WriteTxnMarkersHandler.write)
LocalWriter = Callable[[list[Marker]], Awaitable[WriteTxnMarkersResponse]]


def _marker(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    partitions: Iterable[TopicPartition],
) -> Marker:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, index in sorted(partitions):
        by_topic[topic].append(index)
    Topic = WriteTxnMarkersRequest.WritableTxnMarkerTopic
    return Marker(
        producer_id=ProducerId(producer_id),
        producer_epoch=producer_epoch,
        transaction_result=commit,
        topics=[Topic(name=TopicName(t), partition_indexes=ps) for t, ps in by_topic.items()],
        coordinator_epoch=coordinator_epoch,
    )


def _partitions_of(marker: Marker) -> list[TopicPartition]:
    return [(str(t.name), p) for t in marker.topics for p in t.partition_indexes]


def _leaders(
    image: ClusterImage, pending: set[TopicPartition]
) -> tuple[dict[int, list[TopicPartition]], list[TopicPartition]]:
    """The pending partitions by current leader, and those whose partition no longer exists
    (partitions without a leader are in neither: they wait)."""
    by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
    gone: list[TopicPartition] = []
    for tp in pending:
        topic = image.topics.get(tp[0])
        partition = topic.partitions.get(tp[1]) if topic is not None else None
        if partition is None:
            gone.append(tp)
        elif partition.leader >= 0:
            by_leader[partition.leader].append(tp)
    return by_leader, gone


async def _answers_within(sends: list[asyncio.Future[Answers]], timeout_s: float) -> list[Answers]:
    """The answers that came within ``timeout_s`` (a leader that hangs, paused or cut off,
    must not hold the markers of partitions whose leadership moves elsewhere meanwhile)."""
    if not sends:
        return []
    done, _ = await asyncio.wait(sends, timeout=timeout_s)
    return [f.result() for f in sends if f in done and not f.cancelled()]


class MarkerChannel:
    """Markers to partition leaders, batched per broker (see the module docstring)."""

    def __init__(
        self,
        connections: BrokerConnections,
        image: Callable[[], ClusterImage],
        node_id: int | None = None,
    ) -> None:
        self.connections = connections
        self.image = image
        self.node_id = node_id
        self._local: LocalWriter | None = None
        self._queues: dict[int, list[tuple[Marker, asyncio.Future[Answers]]]] = defaultdict(list)
        self._senders: dict[int, asyncio.Task[None]] = {}

    def deliver_locally(self, writer: LocalWriter) -> None:
        """Markers for partitions this broker (``node_id``) leads go to ``writer`` -- the
        WriteTxnMarkers handler's work -- in process, not over a connection to itself."""
        assert self.node_id is not None, "deliver_locally needs the channel's node_id"
        self._local = writer

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Iterable[TopicPartition],
        still_current: Callable[[], bool],
    ) -> bool:
        """True once every partition has its marker, False if the sending was stopped
        (fenced, or no longer the coordinator)."""
        pending = set(partitions)
        backoff = Backoff(0.05, 1.0)
        failing = False
        while pending:
            if not still_current():
                return False
            by_leader, gone = _leaders(self.image(), pending)
            for tp in gone:
                log.info("no marker for %s-%d: the partition no longer exists", *tp)
                pending.discard(tp)
            sends = [
                self._send(
                    leader,
                    _marker(producer_id, producer_epoch, commit, coordinator_epoch, tps),
                )
                for leader, tps in by_leader.items()
            ]
            fenced = False
            answered = await _answers_within(sends, ROUND_TIMEOUT_S)
            for tp in pending.difference(*answered):
                if not failing and any(tp in tps for tps in by_leader.values()):
                    log.info(
                        "marker for %s-%d not answered within %g s; retrying", *tp, ROUND_TIMEOUT_S
                    )
                    failing = True
            for errors in answered:
                for tp, error in errors.items():
                    if error is ErrorCode.NONE or error in _GONE:
                        pending.discard(tp)
                    elif error in _FENCED:
                        fenced = True
                    elif not failing:
                        log.info(
                            "marker for %s-%d not written yet error=%s; retrying", *tp, error.name
                        )
                        failing = True
            if fenced:
                log.info(
                    "markers fenced producer_id=%d epoch=%d: a newer coordinator owns it",
                    producer_id,
                    producer_epoch,
                )
                return False
            if pending:
                await backoff.sleep()
        return True

    def _send(self, leader: int, marker: Marker) -> asyncio.Future[Answers]:
        future: asyncio.Future[Answers] = asyncio.get_running_loop().create_future()
        self._queues[leader].append((marker, future))
        sender = self._senders.get(leader)
        if sender is None or sender.done():
            self._senders[leader] = asyncio.get_running_loop().create_task(
                self._drain(leader), name=f"txn-markers-{leader}"
            )
        return future

    async def _drain(self, leader: int) -> None:
        """Send everything queued for ``leader``, one request at a time, until none is left."""
        queue = self._queues[leader]
        while queue:
            # one marker per producer id in a request (the response is keyed by producer id)
            batch: dict[int, tuple[Marker, asyncio.Future[Answers]]] = {}
            later = []
            for item in queue:
                if item[0].producer_id in batch:
                    later.append(item)
                else:
                    batch[item[0].producer_id] = item
            queue[:] = later
            try:
                answers = await self._request(leader, [m for m, _ in batch.values()])
            except BaseException:
                for _, future in batch.values():
                    future.cancel()
                raise
            for pid, (marker, future) in batch.items():
                if not future.done():
                    future.set_result({tp: answers[pid, tp] for tp in _partitions_of(marker)})

    async def _request(
        self, leader: int, markers: list[Marker]
    ) -> dict[tuple[int, TopicPartition], ErrorCode]:
        """Each (producer id, partition)'s answer (a request that failed answers each with
        why)."""
        asked = [(int(m.producer_id), tp) for m in markers for tp in _partitions_of(m)]
        if leader == self.node_id and self._local is not None:
            response = await self._local(markers)
        else:
            request = WriteTxnMarkersRequest(markers=markers)
            try:
                answer = await self.connections.request(leader, request, WRITE_TXN_MARKERS_VERSION)
            except (KafkaClientError, OSError, TimeoutError) as exc:
                log.debug("WriteTxnMarkers to broker %d failed: %s", leader, exc or "timeout")
                return dict.fromkeys(asked, ErrorCode.NETWORK_EXCEPTION)
            assert isinstance(answer, WriteTxnMarkersResponse)
            response = answer
        errors = dict.fromkeys(asked, ErrorCode.UNKNOWN_SERVER_ERROR)
        for result in response.markers:
            for topic in result.topics:
                for p in topic.partitions:
                    key = (int(result.producer_id), (str(topic.name), p.partition_index))
                    if key in errors:
                        errors[key] = ErrorCode.from_code(p.error_code)
        return errors

    async def close(self) -> None:
        senders, self._senders = list(self._senders.values()), {}
        for task in senders:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
