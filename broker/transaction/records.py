"""The records of ``__transaction_state`` (Kafka's ``TransactionLog``), and where an id lives.

Each record's key and value start with an int16 version (``kafka_protocol/coordinator``,
generated from Kafka's transaction-coordinator specs)::

    key   TransactionLogKey v0 (transactional_id)
    value TransactionLogValue v0 (or v1, flexible, written by Kafka's transaction version 2)

This broker writes value v0, as Kafka does with transaction version 1 (no KIP-890 part 2), and
reads both.  The partitions of an Empty transaction are written as null, as Kafka writes them.
A null value is a tombstone: the id expired.  An id's coordinator is the leader of partition
``abs(java_hash(transactional_id)) % partitions`` (Kafka's ``partitionFor``), the same
arithmetic as for group ids.
"""

from __future__ import annotations

import struct
from collections import defaultdict

from broker.coordinator.records import partition_for as partition_for
from broker.transaction.state import TxnMetadata, TxnState
from kafka_protocol.coordinator import TransactionLogKey, TransactionLogValue

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0
_VERSION = struct.Struct(">h")


def encode(metadata: TxnMetadata, tombstone: bool = False) -> tuple[bytes, bytes | None]:
    """The record of ``metadata`` (its key, and its value or None for a tombstone)."""
    key = TransactionLogKey(transactional_id=metadata.transactional_id)
    encoded_key = _VERSION.pack(KEY_VERSION) + key.encode(KEY_VERSION)
    if tombstone:
        return encoded_key, None
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, index in sorted(metadata.partitions):
        by_topic[topic].append(index)
    partitions = (
        None
        if metadata.state is TxnState.EMPTY
        else [
            TransactionLogValue.PartitionsSchema(topic=t, partition_ids=ps)
            for t, ps in by_topic.items()
        ]
    )
    value = TransactionLogValue(
        producer_id=metadata.producer_id,
        previous_producer_id=metadata.previous_producer_id,
        producer_epoch=metadata.producer_epoch,
        transaction_timeout_ms=metadata.timeout_ms,
        transaction_status=int(metadata.state),
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=metadata.last_update_ms,
        transaction_start_timestamp_ms=metadata.start_ms,
    )
    return encoded_key, _VERSION.pack(VALUE_VERSION) + value.encode(VALUE_VERSION)


def decode(key: bytes, value: bytes | None) -> tuple[str, TxnMetadata | None]:
    """(transactional id, its metadata or None for a tombstone).  Raises ``ValueError`` (or the
    codec's ``ProtocolError``) for bytes that are not a record of this topic."""
    if len(key) < 2:
        raise ValueError(f"a {len(key)}-byte key has no version")
    (key_version,) = _VERSION.unpack_from(key)
    if key_version != KEY_VERSION:
        raise ValueError(f"TransactionLogKey version {key_version} is unknown")
    transactional_id = TransactionLogKey.decode(memoryview(key)[2:], key_version).transactional_id
    if value is None:
        return transactional_id, None
    if len(value) < 2:
        raise ValueError(f"a {len(value)}-byte value has no version")
    (version,) = _VERSION.unpack_from(value)
    if not TransactionLogValue.MIN_VERSION <= version <= TransactionLogValue.MAX_VERSION:
        raise ValueError(f"TransactionLogValue version {version} is unknown")
    v = TransactionLogValue.decode(memoryview(value)[2:], version)
    try:
        state = TxnState(v.transaction_status)
    except ValueError:
        raise ValueError(f"transaction status {v.transaction_status} is unknown") from None
    partitions = frozenset(
        (p.topic, index) for p in v.transaction_partitions or () for index in p.partition_ids
    )
    return transactional_id, TxnMetadata(
        transactional_id,
        v.producer_id,
        v.producer_epoch,
        v.transaction_timeout_ms,
        state,
        partitions,
        v.transaction_start_timestamp_ms,
        v.transaction_last_update_timestamp_ms,
        previous_producer_id=v.previous_producer_id,
    )
