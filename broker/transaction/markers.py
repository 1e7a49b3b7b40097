"""Sending COMMIT/ABORT markers to partition leaders (Kafka's
``TransactionMarkerChannelManager``), over :class:`~broker.transaction.remote.BrokerConnections`.

:func:`write_markers` writes one transaction's markers: every round it groups the partitions
still pending by their current leader (from the metadata image) and sends each leader one
WriteTxnMarkers v1 request for its share, all leaders at once.  A partition is done when its
leader answers NONE, or when its topic or partition no longer exists (Kafka drops those too).
A partition without a leader, an unreachable broker or a retriable error is retried in the next
round, after a backoff (50 ms doubling to 1 s).  INVALID_PRODUCER_EPOCH or
TRANSACTION_COORDINATOR_FENCED mean a newer coordinator (or epoch) owns the transaction: the
sending stops and the transaction is left to it.  Sending stops too when ``still_current()``
says this coordinator no longer owns the id's partition.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable

from broker.kafka_client import Backoff, KafkaClientError
from broker.transaction.remote import BrokerConnections
from broker.transaction.state import TopicPartition
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from kafka_protocol.types import ProducerId, TopicName
from metadata_log.image import ClusterImage

log = logging.getLogger("broker.transaction")

WRITE_TXN_MARKERS_VERSION = 1
# Kafka's TransactionMarkerRequestCompletionHandler: the coordinator is stale, stop sending
_FENCED = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})
# a partition the marker can never reach: drop it (Kafka logs and removes it too)
_GONE = frozenset({ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT})


def _request(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    partitions: Iterable[TopicPartition],
) -> WriteTxnMarkersRequest:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, index in sorted(partitions):
        by_topic[topic].append(index)
    Topic = WriteTxnMarkersRequest.WritableTxnMarkerTopic
    marker = WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=ProducerId(producer_id),
        producer_epoch=producer_epoch,
        transaction_result=commit,
        topics=[Topic(name=TopicName(t), partition_indexes=ps) for t, ps in by_topic.items()],
        coordinator_epoch=coordinator_epoch,
    )
    return WriteTxnMarkersRequest(markers=[marker])


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


async def write_markers(
    connections: BrokerConnections,
    image: Callable[[], ClusterImage],
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    partitions: Iterable[TopicPartition],
    still_current: Callable[[], bool],
) -> bool:
    """Write the markers (see the module docstring): True once every partition has its
    marker, False if the sending was stopped (fenced, or no longer the coordinator)."""
    pending = set(partitions)
    backoff = Backoff(0.05, 1.0)
    failing = False
    while pending:
        if not still_current():
            return False
        by_leader, gone = _leaders(image(), pending)
        for tp in gone:
            log.info("no marker for %s-%d: the partition no longer exists", *tp)
            pending.discard(tp)
        sends = [
            _send(
                connections,
                leader,
                _request(producer_id, producer_epoch, commit, coordinator_epoch, tps),
            )
            for leader, tps in by_leader.items()
        ]
        fenced = False
        for errors in await asyncio.gather(*sends):
            for tp, error in errors.items():
                if error is ErrorCode.NONE or error in _GONE:
                    pending.discard(tp)
                elif error in _FENCED:
                    fenced = True
                elif not failing:
                    log.info("marker for %s-%d not written yet: %s; retrying", *tp, error.name)
                    failing = True
        if fenced:
            log.info(
                "markers of producer %d epoch %d fenced: a newer coordinator owns it",
                producer_id,
                producer_epoch,
            )
            return False
        if pending:
            await backoff.sleep()
    return True


async def _send(
    connections: BrokerConnections, leader: int, request: WriteTxnMarkersRequest
) -> dict[TopicPartition, ErrorCode]:
    """Each partition's answer (a request that failed answers every partition with why)."""
    asked: list[TopicPartition] = [
        (str(t.name), p) for m in request.markers for t in m.topics for p in t.partition_indexes
    ]
    try:
        response = await connections.request(leader, request, WRITE_TXN_MARKERS_VERSION)
    except (KafkaClientError, OSError, TimeoutError) as exc:
        log.debug("WriteTxnMarkers to broker %d failed: %s", leader, exc or "timeout")
        return dict.fromkeys(asked, ErrorCode.NETWORK_EXCEPTION)
    assert isinstance(response, WriteTxnMarkersResponse)
    errors = dict.fromkeys(asked, ErrorCode.UNKNOWN_SERVER_ERROR)
    for marker in response.markers:
        for topic in marker.topics:
            for p in topic.partitions:
                key = (str(topic.name), p.partition_index)
                if key in errors:
                    errors[key] = ErrorCode.from_code(p.error_code)
    return errors
