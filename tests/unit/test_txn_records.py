"""``__transaction_state`` records (broker/transaction/records.py): Kafka's byte layout of
TransactionLogKey v0 / TransactionLogValue v0, round trips, v1 values read, and the partition of
an id (Kafka's ``Utils.abs(transactionalId.hashCode) % partitions``)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.transaction.records import decode, encode, partition_for
from broker.transaction.state import TxnMetadata, TxnState
from kafka_protocol.coordinator import TransactionLogValue


def _meta(state: TxnState, partitions: frozenset[tuple[str, int]]) -> TxnMetadata:
    return TxnMetadata(
        "my-txn", 4242, 7, 60_000, state, partitions, 1_700_000_000_000, 1_700_000_000_500
    )


def test_value_v0_is_kafkas_layout() -> None:
    key, value = encode(_meta(TxnState.ONGOING, frozenset({("t", 1), ("t", 0)})))
    assert key == struct.pack(">hh", 0, 6) + b"my-txn"
    assert value is not None
    expected = (
        struct.pack(">hqhib", 0, 4242, 7, 60_000, 1)  # version, pid, epoch, timeout, status
        + struct.pack(">i", 1)  # one topic
        + struct.pack(">h", 1)
        + b"t"
        + struct.pack(">iii", 2, 0, 1)  # its partitions, sorted
        + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000)  # last update, start
    )
    assert value == expected


def test_an_empty_transaction_writes_null_partitions() -> None:
    _, value = encode(_meta(TxnState.EMPTY, frozenset()))
    assert value is not None
    assert value[2 + 8 + 2 + 4 + 1 : 2 + 8 + 2 + 4 + 1 + 4] == struct.pack(">i", -1)


def test_a_tombstone_has_no_value() -> None:
    key, value = encode(_meta(TxnState.DEAD, frozenset()), tombstone=True)
    assert value is None
    assert decode(key, None) == ("my-txn", None)


_states = st.sampled_from([s for s in TxnState if s is not TxnState.DEAD])
_partitions = st.frozensets(st.tuples(st.sampled_from(["a", "b", "c-c"]), st.integers(0, 99)))


@given(_states, _partitions, st.integers(0, 2**63 - 1), st.integers(0, 32767))
def test_round_trip(
    state: TxnState, partitions: frozenset[tuple[str, int]], pid: int, epoch: int
) -> None:
    if state is TxnState.EMPTY:
        partitions = frozenset()
    meta = TxnMetadata("id", pid, epoch, 1000, state, partitions, -1, 5)
    assert decode(*encode(meta)) == ("id", meta)


def test_value_v1_written_by_kafka_4_is_read() -> None:
    v1 = TransactionLogValue(
        producer_id=9,
        previous_producer_id=8,
        next_producer_id=-1,
        producer_epoch=3,
        transaction_timeout_ms=100,
        transaction_status=2,
        transaction_partitions=[TransactionLogValue.PartitionsSchema(topic="x", partition_ids=[4])],
        transaction_last_update_timestamp_ms=10,
        transaction_start_timestamp_ms=9,
        client_transaction_version=2,
    )
    key, _ = encode(_meta(TxnState.EMPTY, frozenset()))
    _, meta = decode(key, struct.pack(">h", 1) + v1.encode(1))
    assert meta is not None
    assert (meta.producer_id, meta.previous_producer_id, meta.state, meta.partitions) == (
        9,
        8,
        TxnState.PREPARE_COMMIT,
        frozenset({("x", 4)}),
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"\x00", None),
        (struct.pack(">h", 3) + b"\x00\x01x", None),
        (struct.pack(">hh", 0, 1) + b"x", b"\x00\x09"),
    ],
)
def test_undecodable_records_raise_value_error(key: bytes, value: bytes | None) -> None:
    with pytest.raises(ValueError):
        decode(key, value)


@pytest.mark.parametrize(
    ("transactional_id", "partitions", "expected"),
    [
        # Java: "my-txn".hashCode() == -1061187895
        ("my-txn", 50, 45),
        ("", 50, 0),
        # "polygenelubricants".hashCode() == Integer.MIN_VALUE: Utils.abs maps it to 0
        ("polygenelubricants", 50, 0),
    ],
)
def test_partition_of_an_id_is_kafkas(
    transactional_id: str, partitions: int, expected: int
) -> None:
    assert partition_for(transactional_id, partitions) == expected
