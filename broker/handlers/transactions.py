"""The transaction coordinator's APIs: AddPartitionsToTxn 0-5, AddOffsetsToTxn 0-4, EndTxn 0-4,
DescribeTransactions 0 and ListTransactions 0-1 (InitProducerId is in ``basics.py``,
FindCoordinator key type 1 in ``groups.py``).

Each request is answered by the :class:`TransactionCoordinator` of its id (NOT_COORDINATOR
on other brokers, COORDINATOR_LOAD_IN_PROGRESS while the id's ``__transaction_state``
partition loads).  As in Kafka's ``KafkaApis``:

* AddPartitionsToTxn answers UNKNOWN_TOPIC_OR_PARTITION for partitions the metadata does not
  know, and then OPERATION_NOT_ATTEMPTED for the others (nothing is added); v0-3 carry one
  transaction, v4+ (KIP-890, brokers only) a batch of them, each possibly ``verify_only``
  (whether its partitions are in the transaction, nothing added): a partition that is not is
  INVALID_TXN_STATE to v4 and TRANSACTION_ABORTABLE to v5, as Kafka answers them.
* AddOffsetsToTxn adds the group's ``__consumer_offsets`` partition to the transaction.
* PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH to versions before KIP-588's (v2 of
  AddPartitionsToTxn, AddOffsetsToTxn and EndTxn).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from broker.coordinator.records import OFFSETS_TOPIC, partition_for
from broker.dispatcher import ApiHandler, RequestContext
from broker.transaction.coordinator import TransactionCoordinator
from broker.transaction.state import TopicPartition, TxnMetadata, TxnState
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka_protocol.types import ProducerId, TopicName, TransactionalId
from metadata_log.image import ClusterImage

PRODUCER_FENCED_VERSION = 2  # KIP-588: older versions get INVALID_PRODUCER_EPOCH
BATCHED_ADD_VERSION = 4  # KIP-890: AddPartitionsToTxn carries several transactions
TRANSACTION_ABORTABLE_VERSION = 5  # KIP-890: verify_only answers TRANSACTION_ABORTABLE

_AddTopic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
_TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_PartitionResult = AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult


def fenced_as(error: ErrorCode, version: int, fenced_version: int) -> ErrorCode:
    """PRODUCER_FENCED as a request of ``version`` understands it."""
    if error is ErrorCode.PRODUCER_FENCED and version < fenced_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def _not_in_transaction(error: ErrorCode) -> ErrorCode:
    return ErrorCode.TRANSACTION_ABORTABLE if error is ErrorCode.INVALID_TXN_STATE else error


def _partitions(topics: Sequence[_AddTopic]) -> list[TopicPartition]:
    return [(str(t.name), p) for t in topics for p in t.partitions]


def _by_topic(errors: dict[TopicPartition, ErrorCode]) -> list[_TopicResult]:
    grouped: dict[str, list[_PartitionResult]] = defaultdict(list)
    for (topic, index), error in errors.items():
        grouped[topic].append(_PartitionResult(partition_index=index, partition_error_code=error))
    return [_TopicResult(name=TopicName(t), results_by_partition=ps) for t, ps in grouped.items()]


class TransactionHandlers:
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        image: Callable[[], ClusterImage],
        offsets_partitions: int,
    ) -> None:
        self.coordinator = coordinator
        self.image = image
        self.offsets_partitions = offsets_partitions  # offsets.topic.num.partitions

    def specs(self) -> list[ApiHandler]:
        return [
            ApiHandler(24, 0, 5, self.add_partitions, "AddPartitionsToTxn"),
            ApiHandler(25, 0, 4, self.add_offsets, "AddOffsetsToTxn"),
            ApiHandler(26, 0, 4, self.end_txn, "EndTxn"),
            ApiHandler(65, 0, 0, self.describe_transactions, "DescribeTransactions"),
            ApiHandler(66, 0, 1, self.list_transactions, "ListTransactions"),
        ]

    def offsets_partition_of(self, group_id: str) -> int:
        """The group's ``__consumer_offsets`` partition (as the group coordinator computes it:
        from the topic's partition count, ``offsets.topic.num.partitions`` before it exists)."""
        topic = self.image().topics.get(OFFSETS_TOPIC)
        count = len(topic.partitions) if topic is not None and topic.partitions else None
        return partition_for(group_id, count or self.offsets_partitions)

    # --- AddPartitionsToTxn -------------------------------------------------------------------

    async def add_partitions(
        self, ctx: RequestContext, req: AddPartitionsToTxnRequest
    ) -> AddPartitionsToTxnResponse:
        version = ctx.api_version
        if version < BATCHED_ADD_VERSION:
            errors = await self._add_one(
                req.v3_and_below_transactional_id,
                req.v3_and_below_producer_id,
                req.v3_and_below_producer_epoch,
                _partitions(req.v3_and_below_topics),
                verify_only=False,
            )
            errors = {
                tp: fenced_as(e, version, PRODUCER_FENCED_VERSION) for tp, e in errors.items()
            }
            return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_by_topic(errors))
        results = []
        for t in req.transactions:
            errors = await self._add_one(
                t.transactional_id,
                t.producer_id,
                t.producer_epoch,
                _partitions(t.topics),
                verify_only=t.verify_only,
            )
            if t.verify_only and version >= TRANSACTION_ABORTABLE_VERSION:
                # a partition not in the transaction: TRANSACTION_ABORTABLE to v5 (KIP-890)
                errors = {tp: _not_in_transaction(e) for tp, e in errors.items()}
            results.append(
                AddPartitionsToTxnResponse.AddPartitionsToTxnResult(
                    transactional_id=t.transactional_id, topic_results=_by_topic(errors)
                )
            )
        return AddPartitionsToTxnResponse(results_by_transaction=results)

    async def _add_one(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        verify_only: bool,
    ) -> dict[TopicPartition, ErrorCode]:
        if not transactional_id:
            return dict.fromkeys(partitions, ErrorCode.INVALID_REQUEST)
        if not partitions:
            return {}  # nothing to add, nothing answered (no transaction begins)
        if verify_only:
            return self.coordinator.verify_local(
                transactional_id, producer_id, producer_epoch, partitions
            )
        topics = self.image().topics
        unknown = {
            tp
            for tp in partitions
            if (topic := topics.get(tp[0])) is None or tp[1] not in topic.partitions
        }
        if unknown:
            return {
                tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if tp in unknown
                else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in partitions
            }
        error = await self.coordinator.add_partitions(
            transactional_id, producer_id, producer_epoch, partitions
        )
        return dict.fromkeys(partitions, error)

    # --- AddOffsetsToTxn and EndTxn -----------------------------------------------------------

    async def add_offsets(
        self, ctx: RequestContext, req: AddOffsetsToTxnRequest
    ) -> AddOffsetsToTxnResponse:
        if not req.transactional_id:
            return AddOffsetsToTxnResponse(error_code=ErrorCode.INVALID_REQUEST)
        offsets_partition = (OFFSETS_TOPIC, self.offsets_partition_of(req.group_id))
        error = await self.coordinator.add_partitions(
            req.transactional_id, req.producer_id, req.producer_epoch, [offsets_partition]
        )
        return AddOffsetsToTxnResponse(
            error_code=fenced_as(error, ctx.api_version, PRODUCER_FENCED_VERSION)
        )

    async def end_txn(self, ctx: RequestContext, req: EndTxnRequest) -> EndTxnResponse:
        if not req.transactional_id:
            return EndTxnResponse(error_code=ErrorCode.INVALID_REQUEST)
        error = await self.coordinator.end_transaction(
            req.transactional_id, req.producer_id, req.producer_epoch, req.committed
        )
        return EndTxnResponse(error_code=fenced_as(error, ctx.api_version, PRODUCER_FENCED_VERSION))

    # --- DescribeTransactions and ListTransactions --------------------------------------------

    def describe_transactions(
        self, ctx: RequestContext, req: DescribeTransactionsRequest
    ) -> DescribeTransactionsResponse:
        return DescribeTransactionsResponse(
            transaction_states=[self._describe(tid) for tid in req.transactional_ids]
        )

    def _describe(self, transactional_id: str) -> DescribeTransactionsResponse.TransactionState:
        found = (
            self.coordinator.describe(transactional_id)
            if transactional_id
            else ErrorCode.INVALID_REQUEST
        )
        if isinstance(found, ErrorCode):
            return DescribeTransactionsResponse.TransactionState(
                error_code=found, transactional_id=TransactionalId(transactional_id)
            )
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, index in sorted(found.partitions):
            by_topic[topic].append(index)
        return DescribeTransactionsResponse.TransactionState(
            transactional_id=TransactionalId(transactional_id),
            transaction_state=found.state.kafka_name,
            transaction_timeout_ms=found.timeout_ms,
            transaction_start_time_ms=found.start_ms,
            producer_id=ProducerId(found.producer_id),
            producer_epoch=found.producer_epoch,
            topics=[
                DescribeTransactionsResponse.TopicData(topic=TopicName(t), partitions=ps)
                for t, ps in by_topic.items()
            ],
        )

    def list_transactions(
        self, ctx: RequestContext, req: ListTransactionsRequest
    ) -> ListTransactionsResponse:
        found = self.coordinator.list_transactions()
        if isinstance(found, ErrorCode):
            return ListTransactionsResponse(error_code=found)
        unknown = [s for s in req.state_filters if TxnState.from_kafka_name(s) is None]
        states = set(req.state_filters)
        producer_ids = set(req.producer_id_filters)
        duration = req.duration_filter if ctx.api_version >= 1 else -1
        now = self.coordinator.clock_ms()

        def listed(m: TxnMetadata) -> bool:
            if m.state is TxnState.DEAD:
                return False
            if producer_ids and m.producer_id not in producer_ids:
                return False
            if states and m.state.kafka_name not in states:
                return False
            return duration < 0 or now - m.start_ms > duration

        return ListTransactionsResponse(
            unknown_state_filters=unknown,
            transaction_states=[
                ListTransactionsResponse.TransactionState(
                    transactional_id=TransactionalId(m.transactional_id),
                    producer_id=ProducerId(m.producer_id),
                    transaction_state=m.state.kafka_name,
                )
                for m in sorted(found, key=lambda m: m.transactional_id)
                if listed(m)
            ],
        )
