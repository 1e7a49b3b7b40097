"""WriteTxnMarkers 0-1 and DescribeProducers 0: the partition leader's side of transactions.

WriteTxnMarkers comes from a transaction coordinator (over the inter-broker listener) once it
has decided a transaction: for each ``(producer, partitions)`` it writes a COMMIT or ABORT
marker (a control batch) to every partition this broker leads
(``ReplicaManager.append_marker``), and answers per partition once the marker is replicated
to the ISR (acks=all), as Kafka does.  A partition this broker does not host answers
UNKNOWN_TOPIC_OR_PARTITION, one it does not lead NOT_LEADER_OR_FOLLOWER, a marker older than
what the partition has seen INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED; the
coordinator retries the retriable ones.  A marker that does not reach the ISR within
:data:`MARKER_TIMEOUT_MS` answers REQUEST_TIMED_OUT (it may still commit; a retry writes a
second marker, which closes nothing).  For the partitions its own broker leads, the coordinator
calls :meth:`WriteTxnMarkersHandler.write` in process instead, with the same answers.

Once a marker is committed on a ``__consumer_offsets`` partition the group coordinator hears of
it (``TransactionMarkerListener.complete_transaction``): the producer's transactional offsets
there become visible (COMMIT) or are dropped (ABORT).

DescribeProducers (KIP-664) lists the active producers of partitions this broker leads: their
epoch, last sequence and timestamp, coordinator epoch and open transaction's first offset.
"""

from __future__ import annotations

import asyncio
import logging

from broker.deferred import Deferred
from broker.dispatcher import ApiHandler, RequestContext
from broker.partition import AppendOutcome
from broker.replica_manager import ReplicaManager
from broker.transaction.interfaces import TransactionMarkerListener
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka_protocol.types import ProducerId, TopicName

log = logging.getLogger("broker.txn_markers")

OFFSETS_TOPIC = "__consumer_offsets"
MARKER_TIMEOUT_MS = 30_000  # Kafka writes markers with request.timeout.ms (default 30 s)

MarkerResult = WriteTxnMarkersResponse.WritableTxnMarkerResult
TopicResult = WriteTxnMarkersResponse.WritableTxnMarkerTopicResult
PartitionResult = WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult


class WriteTxnMarkersHandler:
    def __init__(
        self,
        replicas: ReplicaManager,
        listener: TransactionMarkerListener,
        *,
        timeout_ms: int = MARKER_TIMEOUT_MS,
    ) -> None:
        self.replicas = replicas
        self.listener = listener
        self.timeout_ms = timeout_ms

    def spec(self) -> ApiHandler:
        return ApiHandler(27, 0, 1, self.handle, "WriteTxnMarkers")

    async def handle(
        self, ctx: RequestContext, req: WriteTxnMarkersRequest
    ) -> WriteTxnMarkersResponse:
        return await self.write(req.markers)

    async def write(
        self, markers: list[WriteTxnMarkersRequest.WritableTxnMarker]
    ) -> WriteTxnMarkersResponse:
        """Every marker written and answered per partition: the request's work, also called in
        process by this broker's own transaction coordinator for the partitions it leads."""
        written = [self._write(marker) for marker in markers]  # all appended at once
        results = []
        for marker, outcomes in zip(markers, written, strict=True):
            errors = {tp: await self._settle(o) for tp, o in outcomes.items()}
            self._tell_group_coordinator(marker, errors)
            results.append(_result(marker.producer_id, errors))
        return WriteTxnMarkersResponse(markers=results)

    def _write(
        self, marker: WriteTxnMarkersRequest.WritableTxnMarker
    ) -> dict[tuple[str, int], AppendOutcome | Deferred[AppendOutcome]]:
        outcomes: dict[tuple[str, int], AppendOutcome | Deferred[AppendOutcome]] = {}
        commit = bool(marker.transaction_result)
        for topic in marker.topics:
            for index in topic.partition_indexes:
                part = self.replicas.get(topic.name, index)
                if part is None:
                    outcome: AppendOutcome | Deferred[AppendOutcome] = AppendOutcome(
                        self.replicas.missing_error(topic.name, index)
                    )
                else:
                    outcome = self.replicas.append_marker(
                        part,
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.coordinator_epoch,
                        commit,
                    )
                outcomes[(topic.name, index)] = outcome
        return outcomes

    async def _settle(self, outcome: AppendOutcome | Deferred[AppendOutcome]) -> ErrorCode:
        if isinstance(outcome, Deferred):
            try:
                async with asyncio.timeout(self.timeout_ms / 1000):
                    outcome = await outcome
            except TimeoutError:
                return ErrorCode.REQUEST_TIMED_OUT
        if outcome.error is not ErrorCode.NONE:
            log.debug("marker refused error=%s message=%s", outcome.error.name, outcome.message)
        return outcome.error

    def _tell_group_coordinator(
        self,
        marker: WriteTxnMarkersRequest.WritableTxnMarker,
        errors: dict[tuple[str, int], ErrorCode],
    ) -> None:
        commit = bool(marker.transaction_result)
        for (topic, index), error in errors.items():
            if topic == OFFSETS_TOPIC and error is ErrorCode.NONE:
                self.listener.complete_transaction(
                    index, marker.producer_id, marker.producer_epoch, commit
                )


def _result(producer_id: int, errors: dict[tuple[str, int], ErrorCode]) -> MarkerResult:
    by_topic: dict[str, list[PartitionResult]] = {}
    for (topic, index), error in errors.items():
        by_topic.setdefault(topic, []).append(
            PartitionResult(partition_index=index, error_code=error)
        )
    return MarkerResult(
        producer_id=ProducerId(producer_id),
        topics=[TopicResult(name=TopicName(t), partitions=parts) for t, parts in by_topic.items()],
    )


class NoTransactionMarkerListener:
    """Until the group coordinator implements ``complete_transaction`` (helper G), markers on
    ``__consumer_offsets`` have no one to tell: transactional offset commits are not held."""

    def complete_transaction(
        self, offsets_partition: int, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        pass


class DescribeProducersHandler:
    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def spec(self) -> ApiHandler:
        return ApiHandler(61, 0, 0, self.handle, "DescribeProducers")

    def handle(
        self, ctx: RequestContext, req: DescribeProducersRequest
    ) -> DescribeProducersResponse:
        return DescribeProducersResponse(
            topics=[
                DescribeProducersResponse.TopicResponse(
                    name=topic.name,
                    partitions=[self._one(topic.name, i) for i in topic.partition_indexes],
                )
                for topic in req.topics
            ]
        )

    def _one(self, topic: str, index: int) -> DescribeProducersResponse.PartitionResponse:
        Answer = DescribeProducersResponse.PartitionResponse
        # every replica with the log answers, as Kafka's (kafka-transactions.sh
        # describe-producers --broker-id asks a follower): followers learn producers from what
        # they replicate
        part = self.replicas.get(topic, index)
        if part is None:
            error = self.replicas.missing_error(topic, index)
        elif part.offline:
            error = ErrorCode.KAFKA_STORAGE_ERROR
        else:
            error = ErrorCode.NONE
        if part is None or error is not ErrorCode.NONE:
            return Answer(
                partition_index=index,
                error_code=error,
                error_message=f"{topic}-{index}: {error.name}",
                active_producers=[],
            )
        return Answer(
            partition_index=index,
            error_code=ErrorCode.NONE,
            active_producers=[
                DescribeProducersResponse.ProducerState(
                    producer_id=ProducerId(s.producer_id),
                    producer_epoch=s.producer_epoch,
                    last_sequence=s.last_sequence,
                    last_timestamp=s.last_timestamp,
                    coordinator_epoch=s.coordinator_epoch,
                    current_txn_start_offset=s.current_txn_start_offset,
                )
                for s in part.producers.producer_summaries()
            ],
        )
