"""A ``transactional.id``'s state and the coordinator's decisions, sans I/O (Kafka's
``TransactionMetadata`` and the decision half of ``TransactionCoordinator``).

Every function here takes the id's current :class:`TxnMetadata` (None: unknown) and a
request's fields, and returns either an :class:`ErrorCode` (answer it, change nothing) or a
:class:`Transit`: the metadata to persist in ``__transaction_state`` and what to answer once it
is committed.  The runtime (``coordinator.py``) appends the new metadata with acks=all and
applies it only when the append succeeded, so what it answers is what a new coordinator loads.

States and Kafka's valid transitions (``TransactionState.validPreviousStates``, KIP-98 with the
KIP-360 epoch fence)::

    Empty              <- Empty, CompleteCommit, CompleteAbort          (InitProducerId)
    Ongoing            <- Ongoing, Empty, CompleteCommit, CompleteAbort (AddPartitionsToTxn)
    PrepareCommit      <- Ongoing                                       (EndTxn commit)
    PrepareAbort       <- Ongoing, PrepareEpochFence                    (EndTxn abort, fence)
    CompleteCommit     <- PrepareCommit                                 (markers written)
    CompleteAbort      <- PrepareAbort                                  (markers written)
    Dead               <- Empty, CompleteCommit, CompleteAbort          (id expired)
    PrepareEpochFence  <- Ongoing                                       (never persisted)

An ongoing transaction that must be aborted by the coordinator (a new producer with the same id,
or the transaction's timeout) goes Ongoing -> PrepareEpochFence -> PrepareAbort with the epoch
bumped, so that the markers fence the old producer (its next request gets PRODUCER_FENCED); in
Kafka PrepareEpochFence is an in-memory pending state, here the two steps are one
:class:`Transit` whose persisted state is PrepareAbort.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace

from kafka_protocol.errors import ErrorCode

TopicPartition = tuple[str, int]
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue


class TxnState(enum.IntEnum):
    """Kafka's ``TransactionState`` ids (the ``TransactionStatus`` field of the log value)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions answer (``Empty``, ...)."""
        return _NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

_S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
COMPLETED = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
PREPARED = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT})


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``TransactionMetadata.isEpochExhausted``: one bump left is kept for the fence."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One id's state as persisted (``last_producer_epoch`` is memory only, as in Kafka: the
    epoch before the last bump, so a retried InitProducerId gets the same answer)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int  # the transaction's first AddPartitionsToTxn (-1: none ongoing)
    last_update_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class Transit:
    """Persist ``new``, then answer ``answer``; with ``send_markers``, the new state is
    PrepareCommit/PrepareAbort and the markers of ``new.partitions`` go out next."""

    new: TxnMetadata
    answer: ErrorCode = ErrorCode.NONE

    @property
    def send_markers(self) -> bool:
        return self.new.state in PREPARED


Decision = Transit | ErrorCode


def check_transition(old: TxnMetadata | None, new: TxnMetadata) -> None:
    """Raise ``AssertionError`` unless ``old -> new`` is one of Kafka's valid transitions (a
    bug in this module: the runtime crash-stops)."""
    if old is None:
        assert new.state is TxnState.EMPTY, new
        return
    if new.state is TxnState.PREPARE_ABORT and old.state is TxnState.ONGOING:
        return  # through PrepareEpochFence or from the client
    assert old.state in VALID_PREVIOUS[new.state], f"{old.state.name} -> {new.state.name}"


def needs_new_producer_id(current: TxnMetadata | None) -> bool:
    """Whether InitProducerId would hand out a fresh producer id (a new id, or the epoch
    cannot be bumped again): the runtime allocates one before deciding."""
    return current is None or (
        current.state in COMPLETED and is_epoch_exhausted(current.producer_epoch)
    )


def new_transactional_id(
    transactional_id: str, producer_id: int, timeout_ms: int, now: int
) -> TxnMetadata:
    """What Kafka puts in its cache for an unknown id before the first InitProducerId transit:
    epoch -1, Empty (never persisted as such: the transit bumps it to epoch 0)."""
    return TxnMetadata(
        transactional_id,
        producer_id,
        NO_PRODUCER_EPOCH,
        timeout_ms,
        TxnState.EMPTY,
        frozenset(),
        -1,
        now,
    )


def init_producer_id(
    current: TxnMetadata,
    timeout_ms: int,
    expected: tuple[int, int] | None,
    fresh_producer_id: int | None,
    now: int,
) -> Decision:
    """InitProducerId with a transactional id (``handleInitProducerId``); ``expected``: the
    request's (producer id, epoch) when it carries one (KIP-360); ``fresh_producer_id``: an id
    allocated beforehand when :func:`needs_new_producer_id` said so."""
    if expected is not None and not _is_valid_producer_id(current, *expected):
        return ErrorCode.PRODUCER_FENCED
    state = current.state
    if state in PREPARED or state is TxnState.PREPARE_EPOCH_FENCE:
        return ErrorCode.CONCURRENT_TRANSACTIONS
    if state is TxnState.ONGOING:
        # abort the ongoing transaction first, fencing its producer; the client retries
        return Transit(fence_and_abort(current, now), ErrorCode.CONCURRENT_TRANSACTIONS)
    if state is TxnState.DEAD:
        return ErrorCode.CONCURRENT_TRANSACTIONS  # being removed: ask again
    if is_epoch_exhausted(current.producer_epoch):
        if expected is not None and expected[1] != current.producer_epoch:
            return ErrorCode.PRODUCER_FENCED  # Kafka rotates only for the exhausted epoch
        assert fresh_producer_id is not None, "allocate a producer id first"
        new = replace(
            current,
            producer_id=fresh_producer_id,
            producer_epoch=0,
            previous_producer_id=current.producer_id,
            last_producer_epoch=current.producer_epoch if expected is not None else -1,
        )
    else:
        bumped = current.producer_epoch + 1
        if expected is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif current.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == current.producer_epoch:
            epoch, last = bumped, current.producer_epoch
        elif expected[1] == current.last_producer_epoch:
            epoch, last = current.producer_epoch, current.last_producer_epoch  # a retry
        else:
            return ErrorCode.PRODUCER_FENCED
        new = replace(current, producer_epoch=epoch, last_producer_epoch=last)
    return Transit(
        replace(
            new,
            timeout_ms=timeout_ms,
            state=TxnState.EMPTY,
            partitions=frozenset(),
            start_ms=-1,
            last_update_ms=now,
        )
    )


def _is_valid_producer_id(current: TxnMetadata, producer_id: int, epoch: int) -> bool:
    """Kafka's ``isValidProducerId``: the current producer id, or (after an id rotation) the
    previous one at its exhausted epoch."""
    if current.producer_epoch == NO_PRODUCER_EPOCH:
        return True
    return producer_id == current.producer_id or (
        producer_id == current.previous_producer_id and is_epoch_exhausted(epoch)
    )


def fence_and_abort(current: TxnMetadata, now: int) -> TxnMetadata:
    """Ongoing -> PrepareEpochFence -> PrepareAbort, the epoch bumped (unless exhausted:
    Kafka's ``prepareFenceProducerEpoch`` then aborts with the same epoch)."""
    assert current.state is TxnState.ONGOING, current
    epoch = current.producer_epoch
    if not is_epoch_exhausted(epoch):
        epoch += 1
    return replace(
        current,
        producer_epoch=epoch,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        state=TxnState.PREPARE_ABORT,
        last_update_ms=now,
    )


def check_producer(current: TxnMetadata | None, producer_id: int, epoch: int) -> ErrorCode | None:
    """INVALID_PRODUCER_ID_MAPPING or PRODUCER_FENCED unless the request is of the id's
    current producer and epoch (checked before anything else, as Kafka does)."""
    if current is None or current.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if current.producer_epoch != epoch:
        return ErrorCode.PRODUCER_FENCED
    return None


def add_partitions(
    current: TxnMetadata | None,
    producer_id: int,
    epoch: int,
    partitions: Iterable[TopicPartition],
    now: int,
) -> Decision | None:
    """AddPartitionsToTxn and AddOffsetsToTxn (``handleAddPartitionsToTransaction``); None:
    every partition is in the ongoing transaction already (answer NONE, write nothing)."""
    error = check_producer(current, producer_id, epoch)
    if error is not None:
        return error
    assert current is not None
    if current.state in PREPARED or current.state is TxnState.PREPARE_EPOCH_FENCE:
        return ErrorCode.CONCURRENT_TRANSACTIONS
    if current.state is TxnState.DEAD:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    wanted = frozenset(partitions)
    if current.state is TxnState.ONGOING and wanted <= current.partitions:
        return None
    ongoing = current.state is TxnState.ONGOING
    return Transit(
        replace(
            current,
            state=TxnState.ONGOING,
            partitions=current.partitions | wanted if ongoing else wanted,
            start_ms=current.start_ms if ongoing else now,
            last_update_ms=now,
        )
    )


def verify_partitions(
    current: TxnMetadata | None, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, ErrorCode]:
    """KIP-890's verify-only AddPartitionsToTxn (``handleVerifyPartitionsInTransaction``)."""
    asked = list(partitions)
    error = check_producer(current, producer_id, epoch)
    if error is None and current is not None and current.state in PREPARED:
        error = ErrorCode.CONCURRENT_TRANSACTIONS
    if error is not None:
        return dict.fromkeys(asked, error)
    assert current is not None
    ongoing = current.state is TxnState.ONGOING
    return {
        tp: ErrorCode.NONE if ongoing and tp in current.partitions else ErrorCode.INVALID_TXN_STATE
        for tp in asked
    }


def end_transaction(
    current: TxnMetadata | None, producer_id: int, epoch: int, commit: bool, now: int
) -> Decision:
    """EndTxn from the client (``handleEndTransaction``): Ongoing -> PrepareCommit/Abort; a
    retry of a decided outcome answers NONE (completed) or CONCURRENT_TRANSACTIONS (markers
    still going out); anything else INVALID_TXN_STATE."""
    error = check_producer(current, producer_id, epoch)
    if error is not None:
        return error
    assert current is not None
    state = current.state
    if state is TxnState.ONGOING:
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        return Transit(replace(current, state=target, last_update_ms=now))
    if state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
        return ErrorCode.NONE
    if state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
        return ErrorCode.CONCURRENT_TRANSACTIONS
    return ErrorCode.INVALID_TXN_STATE


def complete(current: TxnMetadata, now: int) -> TxnMetadata:
    """Every marker is written: PrepareCommit/PrepareAbort -> CompleteCommit/CompleteAbort
    (Kafka's ``prepareComplete``: the partitions are cleared)."""
    assert current.state in PREPARED, current
    done = (
        TxnState.COMPLETE_COMMIT
        if current.state is TxnState.PREPARE_COMMIT
        else (TxnState.COMPLETE_ABORT)
    )
    return replace(current, state=done, partitions=frozenset(), last_update_ms=now)


def timed_out(current: TxnMetadata, now: int) -> bool:
    """An ongoing transaction past its timeout (``timedOutTransactions``)."""
    return current.state is TxnState.ONGOING and current.start_ms + current.timeout_ms < now


def expired(current: TxnMetadata, now: int, expiration_ms: int) -> bool:
    """An id idle for ``transactional.id.expiration.ms`` with no transaction in flight."""
    return current.state in COMPLETED and current.last_update_ms + expiration_ms <= now


def dead(current: TxnMetadata, now: int) -> TxnMetadata:
    assert current.state in COMPLETED, current
    return replace(current, state=TxnState.DEAD, partitions=frozenset(), last_update_ms=now)
