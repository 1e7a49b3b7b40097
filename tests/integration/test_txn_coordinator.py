"""The transaction coordinator against a real node: real transactional clients, and Kafka's
error codes for bad requests over the project's own protocol client.

A single ``kraft dev`` node coordinates every transactional id (it leads all 50
``__transaction_state`` partitions, created on the first FindCoordinator or InitProducerId).
Timed-out transactions are aborted every 200 ms here (Kafka's default is 10 s).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.coordinator.records import OFFSETS_TOPIC, partition_for
from integration.node_process import NodeProcess
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
)

pytestmark = pytest.mark.integration

TOPIC = "txn-orders"
_ids = itertools.count()
AddTopic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(
        Path(tmp_path_factory.mktemp("txn")),
        overrides=("transaction.abort.timed.out.transaction.cleanup.interval.ms=200",),
    ).start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(timeout=10)
        yield proc
    finally:
        if proc.alive():
            assert proc.stop() == 0, proc.log_tail()


@pytest.fixture
def raw(node: NodeProcess) -> Iterator[RawConnection]:
    conn = RawConnection(node.bootstrap)
    yield conn
    conn.close()


def _txn_id() -> str:
    return f"coordinator-test-{next(_ids)}"


def _wait(what: str, condition: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _init(
    raw: RawConnection, tid: str, timeout_ms: int = 60_000, version: int = 4, **kw: Any
) -> Any:
    """InitProducerId, retried while the coordinator loads or aborts (as clients do)."""

    def attempt() -> Any:
        r = raw.request(
            InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms, **kw),
            version,
        )
        retriable = (
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ErrorCode.CONCURRENT_TRANSACTIONS,
        )
        return None if r.error_code in retriable else r

    return _wait(f"InitProducerId of {tid}", attempt)


def _add(
    raw: RawConnection,
    tid: str,
    pid: int,
    epoch: int,
    parts: list[int],
    version: int = 3,
    topic: str = TOPIC,
) -> dict[tuple[str, int], int]:
    r = raw.request(
        AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddTopic(name=topic, partitions=parts)],
        ),
        version,
    )
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in r.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def _end(raw: RawConnection, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    r = raw.request(
        EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
        ),
        version,
    )
    return int(r.error_code)


def _describe(raw: RawConnection, tid: str) -> Any:
    r = raw.request(DescribeTransactionsRequest(transactional_ids=[tid]), 0)
    (state,) = r.transaction_states
    return state


# --- real clients ---------------------------------------------------------------------------


def test_confluent_kafka_transactions_begin_commit_and_abort(
    node: NodeProcess, raw: RawConnection
) -> None:
    tid = _txn_id()
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.commit_transaction(10)
    producer.begin_transaction()
    producer.abort_transaction(10)
    described = _describe(raw, tid)
    assert described.error_code == ErrorCode.NONE
    assert described.transaction_state == "Empty"  # nothing was added: no EndTxn was needed
    assert described.producer_epoch == 0


def test_a_second_producer_with_the_same_id_fences_the_first(
    node: NodeProcess, raw: RawConnection
) -> None:
    tid = _txn_id()
    conf = {"bootstrap.servers": node.bootstrap, "transactional.id": tid}
    zombie = Producer(conf)
    zombie.init_transactions(30)
    successor = Producer(conf)
    successor.init_transactions(30)
    assert _describe(raw, tid).producer_epoch == 1
    group = Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"g-{tid}"})
    zombie.begin_transaction()
    with pytest.raises(KafkaException) as fenced:
        zombie.send_offsets_to_transaction(
            [TopicPartition(TOPIC, 0, 5)], group.consumer_group_metadata(), 10
        )
    error = fenced.value.args[0]
    assert error.fatal()
    assert "fenced" in error.str()
    group.close()


# --- Kafka's answers to bad requests --------------------------------------------------------


def test_find_coordinator_names_this_node_for_a_transactional_id(
    node: NodeProcess, raw: RawConnection
) -> None:
    def found() -> Any:
        r = raw.request(FindCoordinatorRequest(key=_txn_id(), key_type=1), 3)
        return r if r.error_code == ErrorCode.NONE else None

    r = _wait("the transaction coordinator", found)
    assert (r.host, r.port) == (node.host, node.port)
    v4 = raw.request(FindCoordinatorRequest(key_type=1, coordinator_keys=["a", "b"]), 4)
    assert [(c.key, c.error_code, c.port) for c in v4.coordinators] == [
        ("a", 0, node.port),
        ("b", 0, node.port),
    ]


def test_transaction_timeout_above_the_maximum_is_refused(raw: RawConnection) -> None:
    r = raw.request(
        InitProducerIdRequest(transactional_id=_txn_id(), transaction_timeout_ms=900_001), 4
    )
    assert r.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    r = raw.request(InitProducerIdRequest(transactional_id=_txn_id(), transaction_timeout_ms=0), 4)
    assert r.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_kip_360_epoch_bumps_and_fencing(raw: RawConnection) -> None:
    tid = _txn_id()
    first = _init(raw, tid)
    assert first.error_code == ErrorCode.NONE and first.producer_epoch == 0
    pid = first.producer_id
    bumped = _init(raw, tid, producer_id=pid, producer_epoch=0)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, pid, 1)
    # the same request again (its answer lost): the same answer
    retried = _init(raw, tid, producer_id=pid, producer_epoch=0)
    assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (0, pid, 1)
    stale = _init(raw, tid, producer_id=pid + 1000, producer_epoch=1)
    assert stale.error_code == ErrorCode.PRODUCER_FENCED
    old_version = _init(raw, tid, version=3, producer_id=pid + 1000, producer_epoch=1)
    assert old_version.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    half = raw.request(
        InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=1000, producer_id=pid),
        4,
    )
    assert half.error_code == ErrorCode.INVALID_REQUEST


def test_add_partitions_refuses_unknown_producers_old_epochs_and_missing_topics(
    raw: RawConnection,
) -> None:
    tid = _txn_id()
    r = _init(raw, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert set(_add(raw, tid, pid + 1, epoch, [0]).values()) == {
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    }
    assert set(_add(raw, _txn_id(), pid, epoch, [0]).values()) == {
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    }
    _init(raw, tid)  # epoch + 1: the old epoch is fenced
    assert set(_add(raw, tid, pid, epoch, [0]).values()) == {ErrorCode.PRODUCER_FENCED}
    assert set(_add(raw, tid, pid, epoch, [0], version=1).values()) == {
        ErrorCode.INVALID_PRODUCER_EPOCH
    }
    errors = _add(raw, tid, pid, epoch + 1, [0, 7])
    assert errors == {
        (TOPIC, 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
        (TOPIC, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert set(_add(raw, tid, pid, epoch + 1, [0], topic="no-such-topic").values()) == {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    }
    assert _describe(raw, tid).transaction_state == "Empty"  # nothing was added


def test_end_txn_without_a_transaction_and_with_wrong_producers(raw: RawConnection) -> None:
    tid = _txn_id()
    r = _init(raw, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert _end(raw, tid, pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
    assert _end(raw, tid, pid + 1, epoch, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert _end(raw, tid, pid, epoch + 1, False) == ErrorCode.PRODUCER_FENCED
    assert _end(raw, tid, pid, epoch + 1, False, version=1) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert _end(raw, _txn_id(), pid, epoch, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_describe_and_list_transactions(raw: RawConnection) -> None:
    tid = _txn_id()
    r = _init(raw, tid, timeout_ms=45_000)
    pid, epoch = r.producer_id, r.producer_epoch
    before = int(time.time() * 1000)
    assert set(_add(raw, tid, pid, epoch, [1, 0]).values()) == {ErrorCode.NONE}
    offsets = raw.request(
        AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id="g"
        ),
        3,
    )
    assert offsets.error_code == ErrorCode.NONE
    d = _describe(raw, tid)
    assert (d.error_code, d.transaction_state, d.producer_id, d.producer_epoch) == (
        0,
        "Ongoing",
        pid,
        epoch,
    )
    assert d.transaction_timeout_ms == 45_000
    assert before - 1000 <= d.transaction_start_time_ms <= before + 5000
    # the group's __consumer_offsets partition (offsets.topic.num.partitions: 50)
    assert {(t.topic, tuple(t.partitions)) for t in d.topics} == {
        (TOPIC, (0, 1)),
        (OFFSETS_TOPIC, (partition_for("g", 50),)),
    }
    unknown = _describe(raw, _txn_id())
    assert unknown.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    def listed(version: int = 0, **filters: Any) -> Any:
        return raw.request(ListTransactionsRequest(**filters), version)

    everything = listed()
    assert everything.error_code == ErrorCode.NONE
    states = {
        s.transactional_id: (s.producer_id, s.transaction_state)
        for s in everything.transaction_states
    }
    assert states[tid] == (pid, "Ongoing")
    ongoing = listed(state_filters=["Ongoing", "Bogus"])
    assert ongoing.unknown_state_filters == ["Bogus"]
    assert {s.transaction_state for s in ongoing.transaction_states} == {"Ongoing"}
    by_pid = listed(producer_id_filters=[pid])
    assert [s.transactional_id for s in by_pid.transaction_states] == [tid]
    assert [
        s.transactional_id
        for s in listed(1, producer_id_filters=[pid], duration_filter=3_600_000).transaction_states
    ] == []
    assert [
        s.transactional_id
        for s in listed(1, producer_id_filters=[pid], duration_filter=0).transaction_states
    ] == [tid]
    assert _end(raw, tid, pid, epoch, False) == ErrorCode.NONE
    assert _describe(raw, tid).transaction_state in ("PrepareAbort", "CompleteAbort")


def test_verify_only_says_which_partitions_are_in_the_transaction(raw: RawConnection) -> None:
    tid = _txn_id()
    r = _init(raw, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert set(_add(raw, tid, pid, epoch, [0]).values()) == {ErrorCode.NONE}
    Txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
    answer = raw.request(
        AddPartitionsToTxnRequest(
            transactions=[
                Txn(
                    transactional_id=tid,
                    producer_id=pid,
                    producer_epoch=epoch,
                    verify_only=True,
                    topics=[AddTopic(name=TOPIC, partitions=[0, 1])],
                ),
                Txn(
                    transactional_id=tid,
                    producer_id=pid,
                    producer_epoch=epoch + 1,
                    verify_only=True,
                    topics=[AddTopic(name=TOPIC, partitions=[0])],
                ),
            ]
        ),
        4,
    )
    results = [
        {
            (t.name, p.partition_index): p.partition_error_code
            for t in r.topic_results
            for p in t.results_by_partition
        }
        for r in answer.results_by_transaction
    ]
    assert results == [
        {(TOPIC, 0): ErrorCode.NONE, (TOPIC, 1): ErrorCode.INVALID_TXN_STATE},
        {(TOPIC, 0): ErrorCode.PRODUCER_FENCED},
    ]
    assert _describe(raw, tid).topics[0].partitions == [0]  # verification added nothing


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(raw: RawConnection) -> None:
    tid = _txn_id()
    r = _init(raw, tid, timeout_ms=500)
    pid, epoch = r.producer_id, r.producer_epoch
    assert set(_add(raw, tid, pid, epoch, [0]).values()) == {ErrorCode.NONE}
    aborted = _wait(
        "the timed-out transaction aborted",
        lambda: (
            (d := _describe(raw, tid)).transaction_state in ("PrepareAbort", "CompleteAbort") and d
        ),
    )
    assert aborted.producer_epoch == epoch + 1
    assert _end(raw, tid, pid, epoch, True) == ErrorCode.PRODUCER_FENCED
    assert set(_add(raw, tid, pid, epoch, [1]).values()) == {ErrorCode.PRODUCER_FENCED}
