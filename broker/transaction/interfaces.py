"""What the parts of a transaction ask of each other, as protocols, so that none imports another.

A transaction touches three parts of a broker, usually on different brokers:

- the **transaction coordinator** (:mod:`broker.transaction`) owns a ``transactional.id``'s
  state in ``__transaction_state`` and decides commit or abort;
- the **partition leaders** append the producer's transactional batches, then the coordinator's
  COMMIT or ABORT marker (WriteTxnMarkers), and track the last stable offset;
- the **group coordinator** holds offsets committed inside a transaction (TxnOffsetCommit)
  as pending until the marker reaches its ``__consumer_offsets`` partition.

Before a leader appends the first transactional batch of a producer to one of its partitions it
asks the coordinator whether the partition is in the producer's transaction (KIP-890 part 1,
:class:`TransactionVerifier`), so that a late write cannot open a transaction no coordinator
will ever end.  When a marker has been written and replicated to a ``__consumer_offsets``
partition, the WriteTxnMarkers handler tells the group coordinator
(:class:`TransactionMarkerListener`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kafka_protocol.errors import ErrorCode

TopicPartition = tuple[str, int]


class TransactionVerifier(Protocol):
    """KIP-890 part 1: is each partition in the ongoing transaction of ``transactional_id``
    with this producer id and epoch?  Answers per partition: NONE (it is, append),
    INVALID_PRODUCER_ID_MAPPING / INVALID_TXN_STATE (it is not: refuse the batch),
    PRODUCER_FENCED / INVALID_PRODUCER_EPOCH, or a retriable error
    (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, ...)
    which the produce answers as NOT_ENOUGH_REPLICAS so the client retries."""

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]: ...


class TransactionMarkerListener(Protocol):
    """The group coordinator, told that a COMMIT or ABORT marker of ``producer_id`` has been
    written and replicated to ``__consumer_offsets`` partition ``offsets_partition``: the
    producer's pending transactional offsets there become visible (commit) or are dropped
    (abort)."""

    def complete_transaction(
        self, offsets_partition: int, producer_id: int, producer_epoch: int, commit: bool
    ) -> None: ...
