"""The transaction APIs' rules of :mod:`broker.security.api_authorization`, as Kafka's
``KafkaApis`` (3.x/4.0) checks them::

    API                     checks                              refused with (X_: X_AUTH..._FAILED)
    AddPartitionsToTxn v0-3 WRITE TRANSACTIONAL_ID              TRANSACTIONAL_ID_ for all partitions
                            WRITE TOPIC (never internal ones)   TOPIC_ for those, UNKNOWN_TOPIC_OR_
                                                                PARTITION for unknown ones,
                                                                OPERATION_NOT_ATTEMPTED for the rest
    AddPartitionsToTxn v4+  CLUSTER_ACTION CLUSTER (brokers     CLUSTER_ (top level)
                            only: batched, verify_only)
    AddOffsetsToTxn         WRITE TRANSACTIONAL_ID, READ GROUP  TRANSACTIONAL_ID_, GROUP_
    EndTxn                  WRITE TRANSACTIONAL_ID              TRANSACTIONAL_ID_
    WriteTxnMarkers         ALTER CLUSTER, else CLUSTER_ACTION  CLUSTER_ for every partition
    TxnOffsetCommit         WRITE TRANSACTIONAL_ID, READ GROUP  TRANSACTIONAL_ID_, GROUP_ (all)
                            READ TOPIC                          TOPIC_ for that topic's partitions
    DescribeTransactions    DESCRIBE TRANSACTIONAL_ID           TRANSACTIONAL_ID_ for that id;
                            DESCRIBE TOPIC                      other topics left out of the answer
    ListTransactions        DESCRIBE TRANSACTIONAL_ID           the others left out
    DescribeProducers       READ TOPIC                          TOPIC_ for that topic's partitions

(Produce with a transactional id, InitProducerId and FindCoordinator of key type 1 are in
:mod:`broker.security.api_rules`.)
"""

from __future__ import annotations

from typing import Any, Final

from broker.security.api_authorization import Check, Passed, Verdict
from broker.security.api_rules import (
    CLUSTER_DENIED,
    GROUP_DENIED,
    TOPIC_DENIED,
    TXN_DENIED,
    replace,
    split_topics,
)
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka_protocol.types import ProducerId, TopicName
from metadata_log.acls import AclOperation, ResourceType

BROKER_ONLY_VERSION: Final = 4  # AddPartitionsToTxn v4+ come from brokers (KIP-890)
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})
NOT_ATTEMPTED: Final = ErrorCode.OPERATION_NOT_ATTEMPTED


def _txn_writable(check: Check, transactional_id: str) -> bool:
    return check.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _partition_exists(check: Check, topic: str, partition: int) -> bool:
    found = check.image.topics.get(topic)
    return found is not None and partition in found.partitions


# --- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn -----------------------------------------------


def add_partitions_to_txn(check: Check, req: AddPartitionsToTxnRequest) -> Verdict:
    R = AddPartitionsToTxnResponse
    if check.api_version >= BROKER_ONLY_VERSION:
        if check.cluster(AclOperation.CLUSTER_ACTION):
            return Passed(req)
        return R(error_code=CLUSTER_DENIED)

    def answered(error_of: Any) -> AddPartitionsToTxnResponse:
        return R(
            results_by_topic_v3_and_below=[
                R.AddPartitionsToTxnTopicResult(
                    name=t.name,
                    results_by_partition=[
                        R.AddPartitionsToTxnPartitionResult(
                            partition_index=p, partition_error_code=error_of(t.name, p)
                        )
                        for p in t.partitions
                    ],
                )
                for t in req.v3_and_below_topics
            ]
        )

    if not _txn_writable(check, req.v3_and_below_transactional_id):
        return answered(lambda topic, partition: TXN_DENIED)
    names = [t.name for t in req.v3_and_below_topics]
    allowed = check.topics(AclOperation.WRITE, (n for n in names if n not in INTERNAL_TOPICS))
    if all(n in allowed for n in names):
        return Passed(req)

    def error_of(topic: str, partition: int) -> ErrorCode:
        if topic not in allowed:
            return TOPIC_DENIED
        if not _partition_exists(check, topic, partition):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return NOT_ATTEMPTED  # any refusal fails the whole request: nothing is added

    return answered(error_of)


def add_offsets_to_txn(check: Check, req: AddOffsetsToTxnRequest) -> Verdict:
    if not _txn_writable(check, req.transactional_id):
        return AddOffsetsToTxnResponse(error_code=TXN_DENIED)
    if not check.group(AclOperation.READ, req.group_id):
        return AddOffsetsToTxnResponse(error_code=GROUP_DENIED)
    return Passed(req)


def end_txn(check: Check, req: EndTxnRequest) -> Verdict:
    if _txn_writable(check, req.transactional_id):
        return Passed(req)
    return EndTxnResponse(error_code=TXN_DENIED, producer_id=ProducerId(-1), producer_epoch=-1)


# --- WriteTxnMarkers, TxnOffsetCommit ----------------------------------------------------------


def write_txn_markers(check: Check, req: WriteTxnMarkersRequest) -> Verdict:
    """Kafka asks ALTER on the cluster first (quietly), then CLUSTER_ACTION."""
    if check.cluster(AclOperation.ALTER) or check.cluster(AclOperation.CLUSTER_ACTION):
        return Passed(req)
    R = WriteTxnMarkersResponse
    return R(
        markers=[
            R.WritableTxnMarkerResult(
                producer_id=m.producer_id,
                topics=[
                    R.WritableTxnMarkerTopicResult(
                        name=t.name,
                        partitions=[
                            R.WritableTxnMarkerPartitionResult(
                                partition_index=p, error_code=CLUSTER_DENIED
                            )
                            for p in t.partition_indexes
                        ],
                    )
                    for t in m.topics
                ],
            )
            for m in req.markers
        ]
    )


def _txn_commit_answers(topics: list[Any], error: ErrorCode) -> list[Any]:
    R = TxnOffsetCommitResponse
    return [
        R.TxnOffsetCommitResponseTopic(
            name=t.name,
            partitions=[
                R.TxnOffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=error
                )
                for p in t.partitions
            ],
        )
        for t in topics
    ]


def txn_offset_commit(check: Check, req: TxnOffsetCommitRequest) -> Verdict:
    if not _txn_writable(check, req.transactional_id):
        return TxnOffsetCommitResponse(topics=_txn_commit_answers(req.topics, TXN_DENIED))
    if not check.group(AclOperation.READ, req.group_id):
        return TxnOffsetCommitResponse(topics=_txn_commit_answers(req.topics, GROUP_DENIED))
    allowed = check.topics(AclOperation.READ, (t.name for t in req.topics))
    kept, refused = split_topics(req.topics, lambda t: t.name, allowed)
    if not refused:
        return Passed(req)

    def amend(response: TxnOffsetCommitResponse) -> TxnOffsetCommitResponse:
        response.topics.extend(_txn_commit_answers(refused, TOPIC_DENIED))
        return response

    return Passed(replace(req, topics=kept), amend, skip=not kept)


# --- DescribeTransactions, ListTransactions, DescribeProducers ---------------------------------


def describe_transactions(check: Check, req: DescribeTransactionsRequest) -> Verdict:
    R = DescribeTransactionsResponse
    refused = [
        t
        for t in req.transactional_ids
        if not check.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t)
    ]
    kept = [t for t in req.transactional_ids if t not in refused]

    def amend(response: DescribeTransactionsResponse) -> DescribeTransactionsResponse:
        for state in response.transaction_states:  # only the topics it may describe
            state.topics = [t for t in state.topics if check.topic(AclOperation.DESCRIBE, t.topic)]
        response.transaction_states.extend(
            R.TransactionState(
                error_code=TXN_DENIED,
                transactional_id=t,
                transaction_state="",
                transaction_timeout_ms=0,
                transaction_start_time_ms=-1,
                producer_id=ProducerId(-1),
                producer_epoch=-1,
            )
            for t in refused
        )
        order = {t: i for i, t in enumerate(req.transactional_ids)}
        response.transaction_states.sort(key=lambda s: order.get(s.transactional_id, len(order)))
        return response

    return Passed(replace(req, transactional_ids=kept), amend, skip=not kept)


def list_transactions(check: Check, req: ListTransactionsRequest) -> Verdict:
    def amend(response: ListTransactionsResponse) -> ListTransactionsResponse:
        response.transaction_states = [
            s
            for s in response.transaction_states
            if check.allowed(
                AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, s.transactional_id
            )
        ]
        return response

    return Passed(req, amend)


def describe_producers(check: Check, req: DescribeProducersRequest) -> Verdict:
    allowed = check.topics(AclOperation.READ, (t.name for t in req.topics))
    kept, refused = split_topics(req.topics, lambda t: t.name, allowed)
    if not refused:
        return Passed(req)
    R = DescribeProducersResponse

    def amend(response: DescribeProducersResponse) -> DescribeProducersResponse:
        response.topics.extend(
            R.TopicResponse(
                name=TopicName(t.name),
                partitions=[
                    R.PartitionResponse(
                        partition_index=p,
                        error_code=TOPIC_DENIED,
                        error_message=TOPIC_DENIED.message,
                    )
                    for p in t.partition_indexes
                ],
            )
            for t in refused
        )
        order = {t.name: i for i, t in enumerate(req.topics)}
        response.topics.sort(key=lambda t: order.get(t.name, len(order)))
        return response

    return Passed(replace(req, topics=kept), amend, skip=not kept)
