"""What transaction administration asks and answers, as plain values: the requests it sends
(ListTransactions, DescribeTransactions, DescribeProducers, WriteTxnMarkers), what their answers
mean, and KIP-664's two decisions, which producer an abort by start offset means and which open
transactions are hanging.  No I/O: :mod:`kraft.transactions.admin` sends and receives.

A *hanging* transaction (KIP-664) is one a partition holds open that its coordinator will never
complete: the partition's last stable offset is stuck at its first offset, so read_committed
consumers stop there.  It is found from both sides, as ``kafka-transactions.sh find-hanging``
does: DescribeProducers lists the open transactions of a partition (a producer with a current
transaction start offset) whose producer has written nothing for longer than the longest
transaction timeout allowed (``transaction.max.timeout.ms``); such a transaction is hanging if
no coordinator lists its producer id (ListTransactions), or the coordinator's transaction for
that id (DescribeTransactions) does not include the partition, so no marker will come.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka_protocol.types import ProducerId, TopicName
from kraft.groups.model import Coordinator
from metadata_log.image import ClusterImage, TopicPartition

# Kafka's TransactionState names, as ListTransactions filters and DescribeTransactions answers.
TRANSACTION_STATES: Final = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
)
NO_VALUE: Final = -1  # DescribeProducers / DescribeTransactions: not known, or no transaction
NO_DURATION_FILTER: Final = -1
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS: Final = 15 * 60_000  # kafka-transactions.sh: 15 minutes
MAX_PARTITIONS_PER_REQUEST: Final = 500  # DescribeProducers batches, as Kafka's tool


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator: int  # the broker that listed it


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int | None  # None: no transaction in progress
    partitions: tuple[TopicPartition, ...]
    coordinator: Coordinator


@dataclass(frozen=True, slots=True)
class ProducerState:
    """One active producer of a partition, as DescribeProducers answers."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None  # None: no marker written for it yet
    current_txn_start_offset: int | None  # None: no open transaction


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    partition: TopicPartition
    producer: ProducerState


@dataclass(frozen=True, slots=True)
class AbortSpec:
    """What WriteTxnMarkers needs to abort one producer's transaction on one partition."""

    partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int

    def __post_init__(self) -> None:
        assert self.producer_id >= 0 and self.producer_epoch >= 0, self
        assert self.coordinator_epoch >= 0, self


# --- ListTransactions ---------------------------------------------------------------------------


def list_transactions_request(
    states: Sequence[str] = (),
    producer_ids: Sequence[int] = (),
    duration_ms: int = NO_DURATION_FILTER,
) -> tuple[ListTransactionsRequest, int]:
    """The request and the lowest version that carries its filters (v1 added the duration)."""
    assert all(s in TRANSACTION_STATES for s in states), states
    request = ListTransactionsRequest(
        state_filters=list(states),
        producer_id_filters=[ProducerId(p) for p in producer_ids],
        duration_filter=duration_ms,
    )
    return request, 0 if duration_ms == NO_DURATION_FILTER else 1


def listings_from(response: ListTransactionsResponse, broker_id: int) -> list[TransactionListing]:
    return [
        TransactionListing(
            str(t.transactional_id), int(t.producer_id), t.transaction_state, broker_id
        )
        for t in response.transaction_states
    ]


# --- DescribeTransactions -----------------------------------------------------------------------


def description_from(
    state: DescribeTransactionsResponse.TransactionState, coordinator: Coordinator
) -> TransactionDescription:
    partitions = sorted(TopicPartition(str(t.topic), p) for t in state.topics for p in t.partitions)
    start = state.transaction_start_time_ms
    return TransactionDescription(
        transactional_id=str(state.transactional_id),
        state=state.transaction_state,
        producer_id=int(state.producer_id),
        producer_epoch=state.producer_epoch,
        timeout_ms=state.transaction_timeout_ms,
        start_time_ms=None if start < 0 else start,
        partitions=tuple(partitions),
        coordinator=coordinator,
    )


# --- DescribeProducers --------------------------------------------------------------------------


def describe_producers_request(partitions: Iterable[TopicPartition]) -> DescribeProducersRequest:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return DescribeProducersRequest(
        topics=[
            DescribeProducersRequest.TopicRequest(name=TopicName(t), partition_indexes=ps)
            for t, ps in by_topic.items()
        ]
    )


@dataclass(frozen=True, slots=True)
class PartitionError:
    error: ErrorCode
    message: str | None


def producers_from(
    response: DescribeProducersResponse, asked: Iterable[TopicPartition]
) -> dict[TopicPartition, list[ProducerState] | PartitionError]:
    """Each asked partition's active producers (sorted by producer id), or its error; one left
    out of the answer is UNKNOWN_SERVER_ERROR."""
    out: dict[TopicPartition, list[ProducerState] | PartitionError] = {}
    for topic in response.topics:
        for p in topic.partitions:
            tp = TopicPartition(str(topic.name), p.partition_index)
            if p.error_code != ErrorCode.NONE:
                out[tp] = PartitionError(ErrorCode.from_code(p.error_code), p.error_message)
            else:
                out[tp] = sorted(
                    (producer_state(s) for s in p.active_producers), key=lambda s: s.producer_id
                )
    missing = PartitionError(ErrorCode.UNKNOWN_SERVER_ERROR, "left out of the answer")
    return {tp: out.get(tp, missing) for tp in asked}


def producer_state(s: DescribeProducersResponse.ProducerState) -> ProducerState:
    return ProducerState(
        producer_id=int(s.producer_id),
        producer_epoch=s.producer_epoch,
        last_sequence=s.last_sequence,
        last_timestamp=s.last_timestamp,
        coordinator_epoch=None if s.coordinator_epoch < 0 else s.coordinator_epoch,
        current_txn_start_offset=(
            None if s.current_txn_start_offset < 0 else s.current_txn_start_offset
        ),
    )


# --- aborting -----------------------------------------------------------------------------------


def abort_spec_at(
    tp: TopicPartition, producers: Sequence[ProducerState], start_offset: int
) -> AbortSpec | None:
    """The transaction open on ``tp`` since ``start_offset`` (None: there is none).  A producer
    whose coordinator never wrote a marker here has no coordinator epoch: 0, which is at most
    any epoch a coordinator can have, as Kafka's tool does."""
    for s in producers:
        if s.current_txn_start_offset == start_offset:
            return AbortSpec(tp, s.producer_id, s.producer_epoch, s.coordinator_epoch or 0)
    return None


def write_abort_marker_request(spec: AbortSpec) -> WriteTxnMarkersRequest:
    marker = WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=ProducerId(spec.producer_id),
        producer_epoch=spec.producer_epoch,
        transaction_result=False,  # ABORT
        topics=[
            WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                name=TopicName(spec.partition.topic), partition_indexes=[spec.partition.partition]
            )
        ],
        coordinator_epoch=spec.coordinator_epoch,
    )
    return WriteTxnMarkersRequest(markers=[marker])


def marker_error(response: WriteTxnMarkersResponse, spec: AbortSpec) -> ErrorCode:
    """The outcome of the one marker asked (UNKNOWN_SERVER_ERROR if the answer lacks it)."""
    for marker in response.markers:
        if marker.producer_id != spec.producer_id:
            continue
        for topic in marker.topics:
            if topic.name != spec.partition.topic:
                continue
            for p in topic.partitions:
                if p.partition_index == spec.partition.partition:
                    return ErrorCode.from_code(p.error_code)
    return ErrorCode.UNKNOWN_SERVER_ERROR


# --- hanging transactions -----------------------------------------------------------------------


def replicas_of(image: ClusterImage) -> dict[TopicPartition, tuple[int, ...]]:
    """Every partition of the image and its replicas."""
    return {
        TopicPartition(name, index): state.replicas
        for name, topic in image.topics.by_name.items()
        for index, state in topic.partitions.items()
    }


def partitions_to_search(
    replicas: Mapping[TopicPartition, Sequence[int]],
    topic: str | None,
    partition: int | None,
    broker_id: int | None,
    readable: Callable[[str], bool] = lambda _: True,
) -> list[TopicPartition]:
    """find-hanging's scope among the partitions of ``replicas``: one partition, a topic's
    partitions, or every partition with a replica on ``broker_id`` (of the topics it may
    read; with both, the topic's partitions on that broker)."""
    assert topic is not None or broker_id is not None
    assert partition is None or topic is not None
    return sorted(
        tp
        for tp, on in replicas.items()
        if (tp.topic == topic if topic is not None else readable(tp.topic))
        and (partition is None or tp.partition == partition)
        and (broker_id is None or broker_id in on)
    )


def no_open_transaction(
    tp: TopicPartition, start_offset: int, producers: Sequence[ProducerState]
) -> str:
    """Why an abort by ``start_offset`` found nothing to abort."""
    open_at = sorted(
        s.current_txn_start_offset for s in producers if s.current_txn_start_offset is not None
    )
    return (
        f"no open transaction starts at offset {start_offset} of {tp.topic}-{tp.partition}"
        f" (open transactions start at: {', '.join(map(str, open_at)) or 'none'})"
    )


def open_for_longer_than(
    producers: Mapping[TopicPartition, Sequence[ProducerState]], max_timeout_ms: int, now_ms: int
) -> list[OpenTransaction]:
    """The candidates: open transactions whose producer last wrote more than
    ``max_timeout_ms`` ago (no coordinator lets a transaction live that long)."""
    return [
        OpenTransaction(tp, s)
        for tp, states in sorted(producers.items())
        for s in states
        if s.current_txn_start_offset is not None and now_ms - s.last_timestamp > max_timeout_ms
    ]


def hanging(
    candidates: Sequence[OpenTransaction],
    transactional_ids: Mapping[int, str],
    descriptions: Mapping[str, TransactionDescription | None],
) -> list[OpenTransaction]:
    """The candidates no coordinator will complete: their producer id is not listed by any
    coordinator, its transactional id is not found, or the coordinator's transaction (which
    names the partitions still awaiting a marker) does not name the partition."""
    out = []
    for candidate in candidates:
        transactional_id = transactional_ids.get(candidate.producer.producer_id)
        description = None if transactional_id is None else descriptions.get(transactional_id)
        if description is None or candidate.partition not in description.partitions:
            out.append(candidate)
    return out


def batches(items: Sequence[TopicPartition], size: int) -> list[Sequence[TopicPartition]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
