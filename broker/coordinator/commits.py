"""What an OffsetCommit or TxnOffsetCommit asks of the group coordinator, and how a failed
append to ``__consumer_offsets`` is answered (Kafka's ``GroupMetadataManager`` and
``CoordinatorOperationExceptionHelper``)."""

from __future__ import annotations

from dataclasses import dataclass

from broker.coordinator_partitions import APPEND_ERRORS
from kafka_protocol.errors import ErrorCode

# Kafka's mapping of append errors to what group requests answer: the coordinators' common
# ones and these
_APPEND_ERRORS = {
    **APPEND_ERRORS,
    # a verification with the transaction coordinator that failed: a retriable error older
    # clients retry without looking the coordinator up again (``maybeConvertOffsetCommitError``)
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def coordinator_error(error: ErrorCode, transactional: bool) -> ErrorCode:
    """What a commit answers for an append (or, transactional, a verification) that failed
    with ``error``: a transactional commit passes the producer-state and transaction errors on
    (INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, ...), a plain one has no use for them."""
    mapped = _APPEND_ERRORS.get(error)
    if mapped is not None:
        return mapped
    return error if transactional else ErrorCode.UNKNOWN_SERVER_ERROR


@dataclass(frozen=True, slots=True)
class Producer:
    """The transactional producer a TxnOffsetCommit's records are appended for."""

    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None
