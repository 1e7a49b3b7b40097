"""A transactional producer (KIP-98, KIP-447) on the Spark client, for the sink's exactly-once
mode: the records and the offsets of one transaction become visible together, or never.

Theory of operation
-------------------
A transactional id names one logical producer across processes.  Its *transaction
coordinator* is the leader of the id's ``__transaction_state`` partition, found with
FindCoordinator (key type 1) and cached; every transactional request goes there, except the
offset commit, which goes to the group's coordinator::

    init_transactions()      InitProducerId(transactional id, transaction.timeout.ms): the
                             id's producer id at a new epoch.  The coordinator first ends the
                             transaction an earlier producer with this id left open (aborts
                             it; answering CONCURRENT_TRANSACTIONS meanwhile, retried here),
                             and from then on refuses that producer (PRODUCER_FENCED /
                             INVALID_PRODUCER_EPOCH): a zombie cannot write or commit.
    begin_transaction()      local only
    send() ... flush         as :class:`~spark_source.producer.Producer` (idempotent, acks=all),
                             the batches marked transactional; before any batch of a partition
                             leaves, AddPartitionsToTxn adds the partition to the transaction
    send_offsets_to_transaction(offsets, group)
                             AddOffsetsToTxn (the group's offsets partition joins), then
                             TxnOffsetCommit at the group's coordinator: pending until the
                             transaction's marker reaches it
    commit_transaction()     flush, then EndTxn(commit): the coordinator writes COMMIT markers
    abort_transaction()      drop what is buffered, EndTxn(abort)

Retriable answers (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, a
lost connection, ...) are retried with backoff, after looking the coordinator up again when it
moved, until ``default.api.timeout.ms``.  Anything else (fenced, INVALID_TXN_STATE,
authorization, a transaction timed out by the coordinator) raises :class:`TransactionError`;
the producer is then unusable and its open transaction is left to the coordinator (aborted by
the next producer with the id, or when ``transaction.timeout.ms`` passes).

Config, beyond the producer's: ``transaction.timeout.ms`` (60000, Java's default; the broker
caps it at ``transaction.max.timeout.ms``).  ``enable.idempotence`` must stay true and ``acks``
all, as Java requires of a transactional producer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from kafka_protocol._codec import Request, Response
from kafka_protocol.client.error_policy import STALE_COORDINATOR_ERRORS, is_retriable
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka_protocol.record_batch import NO_PRODUCER_ID
from kafka_protocol.types import GroupId, ProducerId, TopicName, TransactionalId
from spark_source._client_config import int_option
from spark_source._client_conn import Attempts, Versions
from spark_source._client_groups import GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE
from spark_source._client_types import (
    ConfigError,
    KafkaClientError,
    TopicPartition,
    TransactionError,
)
from spark_source.client import NO_CONFIG, KafkaClient
from spark_source.producer import Producer

__all__ = ["TransactionError", "TransactionalProducer"]

log = logging.getLogger(__name__)

INIT_PRODUCER_ID: Final = Versions(22, 0, 4)
ADD_PARTITIONS_TO_TXN: Final = Versions(24, 0, 3)  # v4+ is the brokers' (KIP-890)
ADD_OFFSETS_TO_TXN: Final = Versions(25, 0, 3)
END_TXN: Final = Versions(26, 0, 3)
TXN_OFFSET_COMMIT: Final = Versions(28, 0, 3)
DEFAULT_TRANSACTION_TIMEOUT_MS: Final = 60_000
_INT32_MAX: Final = 2**31 - 1


class TransactionalProducer(Producer):
    """The producer of one transactional id (see the module docstring)."""

    def __init__(
        self,
        client: KafkaClient,
        transactional_id: str,
        config: Mapping[str, str] = NO_CONFIG,
    ) -> None:
        if not transactional_id:
            raise ConfigError("a transactional producer needs a transactional id")
        super().__init__(client, config)
        if not self.config.idempotent:
            raise ConfigError("a transactional producer needs enable.idempotence=true, acks=all")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = int_option(
            config, "transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS, 1, _INT32_MAX
        )
        self._transactional = True
        self._transactional_id = TransactionalId(transactional_id)
        self._in_transaction = False
        self._added: set[TopicPartition] = set()  # partitions in the open transaction
        self._offsets_added = False  # and whether a group's offsets are in it

    @property
    def producer_id(self) -> int:
        return self._producer_id

    @property
    def producer_epoch(self) -> int:
        return self._producer_epoch

    # --- the transaction's steps ----------------------------------------------------------------

    def init_transactions(self) -> None:
        """Get the id's producer id at a new epoch, fencing every earlier producer with it."""
        self._check_usable()
        request = InitProducerIdRequest(
            transactional_id=TransactionalId(self.transactional_id),
            transaction_timeout_ms=self.transaction_timeout_ms,
        )
        response = self._to_transaction_coordinator(request, INIT_PRODUCER_ID, "InitProducerId")
        assert isinstance(response, InitProducerIdResponse)
        self._producer_id = response.producer_id
        self._producer_epoch = response.producer_epoch
        self._sequences.clear()  # a new epoch numbers from 0
        log.debug(
            "transactional id %s: producer id %d, epoch %d",
            self.transactional_id,
            self._producer_id,
            self._producer_epoch,
        )

    def begin_transaction(self) -> None:
        self._check_usable()
        if self._producer_id == NO_PRODUCER_ID:
            raise KafkaClientError("call init_transactions() before begin_transaction()")
        if self._in_transaction:
            raise KafkaClientError("a transaction is already open")
        self._in_transaction = True
        self._added.clear()
        self._offsets_added = False

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, tuple[int, str]], group_id: str
    ) -> None:
        """Commit ``offsets`` ((offset, metadata) per partition) for ``group_id`` as part of
        the transaction: visible when it commits, discarded if it aborts."""
        self._check_in_transaction()
        add = AddOffsetsToTxnRequest(
            transactional_id=TransactionalId(self.transactional_id),
            producer_id=ProducerId(self._producer_id),
            producer_epoch=self._producer_epoch,
            group_id=GroupId(group_id),
        )
        self._to_transaction_coordinator(add, ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn")
        self._offsets_added = True
        self._txn_offset_commit(offsets, group_id)

    def commit_transaction(self) -> None:
        """Write everything buffered, then commit."""
        self._check_in_transaction()
        self.flush()
        self._end(commit=True)

    def abort_transaction(self) -> None:
        """Drop what is buffered and abort what was written."""
        self._check_usable()
        if not self._in_transaction:
            raise KafkaClientError("no transaction is open")
        self._open.clear()
        self._ready.clear()
        self._ready_bytes = self._open_bytes = 0
        self._end(commit=False)

    # --- the producer's hooks -------------------------------------------------------------------

    def _init_producer_id(self) -> None:
        raise KafkaClientError("call init_transactions() before sending")

    def _drain(self) -> None:
        """Add the partitions of the queued batches to the transaction, then send them."""
        new = sorted(tp for tp in self._ready if tp not in self._added)
        if new:
            self._check_in_transaction()
            self._add_partitions(new)
        super()._drain()

    # --- requests -------------------------------------------------------------------------------

    def _check_in_transaction(self) -> None:
        self._check_usable()
        if not self._in_transaction:
            raise KafkaClientError("begin_transaction() first")

    def _add_partitions(self, tps: Iterable[TopicPartition]) -> None:
        pending = set(tps)
        attempts = Attempts(self.client.config, f"AddPartitionsToTxn of {self.transactional_id}")
        while pending:
            request = _add_partitions_request(
                self.transactional_id, self._producer_id, self._producer_epoch, pending
            )
            response = self.client.coordinators.to_coordinator(
                self.transactional_id,
                TRANSACTION_KEY_TYPE,
                request,
                ADD_PARTITIONS_TO_TXN,
                attempts,
            )
            if response is not None:
                assert isinstance(response, AddPartitionsToTxnResponse)
                for tp, error in _add_partitions_errors(response).items():
                    if error is ErrorCode.NONE:
                        self._added.add(tp)
                        pending.discard(tp)
                    elif error is not ErrorCode.OPERATION_NOT_ATTEMPTED:  # another's fault
                        self._failed_or_retry(error, "AddPartitionsToTxn", TRANSACTION_KEY_TYPE)
                        attempts.note(error)
            if pending:
                attempts.retry()

    def _txn_offset_commit(
        self, offsets: Mapping[TopicPartition, tuple[int, str]], group_id: str
    ) -> None:
        pending = dict(offsets)
        attempts = Attempts(self.client.config, f"TxnOffsetCommit of group {group_id!r}")
        while pending:
            request = _txn_offset_commit_request(
                self.transactional_id, group_id, self._producer_id, self._producer_epoch, pending
            )
            response = self.client.coordinators.to_coordinator(
                group_id, GROUP_KEY_TYPE, request, TXN_OFFSET_COMMIT, attempts
            )
            if response is not None:
                assert isinstance(response, TxnOffsetCommitResponse)
                for topic in response.topics:
                    for p in topic.partitions:
                        tp = TopicPartition(str(topic.name), p.partition_index)
                        error = ErrorCode.from_code(p.error_code)
                        if error is ErrorCode.NONE:
                            pending.pop(tp, None)
                        else:
                            self._failed_or_retry(
                                error, "TxnOffsetCommit", GROUP_KEY_TYPE, group_id
                            )
                            attempts.note(error)
            if pending:
                attempts.retry()

    def _end(self, *, commit: bool) -> None:
        """EndTxn, unless nothing joined the transaction (the coordinator knows of none then:
        Java's producer ends such a transaction locally too)."""
        if not self._added and not self._offsets_added:
            self._in_transaction = False
            return
        request = EndTxnRequest(
            transactional_id=TransactionalId(self.transactional_id),
            producer_id=ProducerId(self._producer_id),
            producer_epoch=self._producer_epoch,
            committed=commit,
        )
        self._to_transaction_coordinator(request, END_TXN, "EndTxn")
        self._in_transaction = False
        self._added.clear()
        self._offsets_added = False

    def _to_transaction_coordinator(
        self, request: Request, versions: Versions, what: str
    ) -> Response:
        """``request`` (answered with one top-level error code) at the transaction
        coordinator, retried until it succeeds or fails for good."""
        attempts = Attempts(self.client.config, f"{what} of {self.transactional_id}")
        while True:
            response = self.client.coordinators.to_coordinator(
                self.transactional_id, TRANSACTION_KEY_TYPE, request, versions, attempts
            )
            if response is not None:
                error = ErrorCode.from_code(_top_level_error(response))
                if error is ErrorCode.NONE:
                    return response
                self._failed_or_retry(error, what, TRANSACTION_KEY_TYPE)
                attempts.note(error)
            attempts.retry()

    def _failed_or_retry(
        self, error: ErrorCode, what: str, key_type: int, key: str | None = None
    ) -> None:
        """Forget a coordinator that moved; raise (and make the producer unusable) for an
        answer that retrying cannot cure."""
        if error in STALE_COORDINATOR_ERRORS:
            self.client.coordinators.forget_coordinator(key or self.transactional_id, key_type)
        if is_retriable(error):
            return
        self._failure = TransactionError(
            error, f"{what} of transactional id {self.transactional_id!r}"
        )
        raise self._failure


_ERROR_OF: Final[dict[type, Callable[[Response], int]]] = {
    InitProducerIdResponse: lambda r: r.error_code,  # type: ignore[attr-defined]
    AddOffsetsToTxnResponse: lambda r: r.error_code,  # type: ignore[attr-defined]
    EndTxnResponse: lambda r: r.error_code,  # type: ignore[attr-defined]
}


def _top_level_error(response: Response) -> int:
    return _ERROR_OF[type(response)](response)


def _add_partitions_request(
    transactional_id: str, producer_id: int, epoch: int, tps: Iterable[TopicPartition]
) -> AddPartitionsToTxnRequest:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(tps):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TransactionalId(transactional_id),
        v3_and_below_producer_id=ProducerId(producer_id),
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=TopicName(t), partitions=ps)
            for t, ps in by_topic.items()
        ],
    )


def _add_partitions_errors(response: AddPartitionsToTxnResponse) -> dict[TopicPartition, ErrorCode]:
    out = {}
    for topic in response.results_by_topic_v3_and_below:
        for p in topic.results_by_partition:
            tp = TopicPartition(str(topic.name), p.partition_index)
            out[tp] = ErrorCode.from_code(p.partition_error_code)
    return out


def _txn_offset_commit_request(
    transactional_id: str,
    group_id: str,
    producer_id: int,
    epoch: int,
    offsets: Mapping[TopicPartition, tuple[int, str]],
) -> TxnOffsetCommitRequest:
    by_topic: dict[str, list[TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition]] = {}
    for tp, (offset, metadata) in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=offset, committed_metadata=metadata
            )
        )
    return TxnOffsetCommitRequest(
        transactional_id=TransactionalId(transactional_id),
        group_id=GroupId(group_id),
        producer_id=ProducerId(producer_id),
        producer_epoch=epoch,
        topics=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=TopicName(t), partitions=ps)
            for t, ps in by_topic.items()
        ],
    )
