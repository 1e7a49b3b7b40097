"""The transaction coordinator against a real node: real transactional clients, and Kafka's
error codes for bad requests over the project's own protocol client.

A single ``kraft dev`` node coordinates every transactional id (it leads all 50
``__transaction_state`` partitions, created on the first FindCoordinator or InitProducerId).
Timed-out transactions are aborted every 200 ms here (Kafka's default is 10 s).
"""

from __future__ import annotations

import itertools
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.coordinator.records import OFFSETS_TOPIC, partition_for
from broker.transaction.coordinator import CONCURRENT_HOLD_MS
from integration.node_process import NodeProcess
from integration.raw_client import RawConnection
from integration.txn_requests import (
    add_partitions,
    describe,
    end_txn,
    init_producer_id,
    wait_until,
)
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
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
    described = describe(raw, tid)
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
    assert describe(raw, tid).producer_epoch == 1
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


def _read(
    bootstrap: str, topic: str, isolation: str, expect: int, timeout_s: float = 10.0
) -> list[str]:
    """Every record of ``topic`` a consumer with ``isolation`` reads (waits for ``expect``,
    then half a second more for records that should not be there)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{next(_ids)}",
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    got: list[str] = []
    deadline = time.monotonic() + timeout_s
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
            if len(got) >= expect:
                quiet_until = quiet_until or time.monotonic() + 0.5
                if time.monotonic() > quiet_until:
                    break
    finally:
        consumer.close()
    return got


def _topic(node: NodeProcess, partitions: int = 2) -> str:
    name = f"txn-data-{next(_ids)}"
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=10)
    return name


def test_confluent_kafka_commits_and_aborts_records(node: NodeProcess, raw: RawConnection) -> None:
    topic = _topic(node)
    tid = _txn_id()
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    for i in range(3):
        producer.begin_transaction()
        for j in range(10):
            producer.produce(topic, f"commit-{i}-{j}".encode(), partition=j % 2)
        producer.commit_transaction(10)
    producer.begin_transaction()
    for j in range(10):
        producer.produce(topic, f"abort-{j}".encode(), partition=j % 2)
    producer.flush(10)  # written, then aborted (unsent records would just be dropped)
    producer.abort_transaction(10)
    committed = _read(node.bootstrap, topic, "read_committed", 30)
    assert sorted(committed) == sorted(f"commit-{i}-{j}" for i in range(3) for j in range(10))
    everything = _read(node.bootstrap, topic, "read_uncommitted", 40)
    assert len(everything) == 40 and sum(v.startswith("abort-") for v in everything) == 10
    d = wait_until(
        "CompleteAbort",
        lambda: (x := describe(raw, tid)).transaction_state == "CompleteAbort" and x,
    )
    assert d.producer_epoch == 0 and d.topics == []
    gauges = _metrics(node)
    assert gauges['kafka_transaction_coordinator_ids{state="CompleteAbort"}'] >= 1
    assert gauges["kafka_transaction_coordinator_partitions"] == 50


def _metrics(node: NodeProcess) -> dict[str, float]:
    with urllib.request.urlopen(node.admin + "/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    return {
        name: float(value)
        for line in lines
        if line and not line.startswith("#")
        for name, value in [line.rsplit(" ", 1)]
    }


def test_a_zombie_with_records_in_flight_is_fenced_and_its_records_aborted(
    node: NodeProcess, raw: RawConnection
) -> None:
    topic = _topic(node, 1)
    tid = _txn_id()
    conf = {"bootstrap.servers": node.bootstrap, "transactional.id": tid}
    zombie = Producer(conf)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie-1")
    zombie.flush(10)
    successor = Producer(conf)
    successor.init_transactions(30)  # aborts the zombie's transaction first
    d = describe(raw, tid)
    assert (d.transaction_state, d.producer_epoch) == ("Empty", 2)
    zombie.produce(topic, b"zombie-2")
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(10)
    assert fenced.value.args[0].fatal()
    successor.begin_transaction()
    successor.produce(topic, b"successor")
    successor.commit_transaction(10)
    assert _read(node.bootstrap, topic, "read_committed", 1) == ["successor"]
    assert "zombie-2" not in _read(node.bootstrap, topic, "read_uncommitted", 2)


def test_kafka_python_and_aiokafka_transactional_producers_commit(node: NodeProcess) -> None:
    from kafka import KafkaProducer

    topic = _topic(node, 1)
    kp = KafkaProducer(bootstrap_servers=node.bootstrap, transactional_id=_txn_id())
    kp.init_transactions()
    kp.begin_transaction()
    for j in range(5):
        kp.send(topic, f"kafka-python-{j}".encode())
    kp.commit_transaction()
    kp.begin_transaction()
    kp.send(topic, b"kafka-python-aborted")
    kp.flush()
    kp.abort_transaction()
    kp.close()

    import asyncio

    from aiokafka import AIOKafkaProducer

    async def aiokafka_transactions() -> None:
        ap = AIOKafkaProducer(bootstrap_servers=node.bootstrap, transactional_id=_txn_id())
        await ap.start()
        try:
            async with ap.transaction():
                for j in range(5):
                    await ap.send(topic, f"aiokafka-{j}".encode())
            await ap.begin_transaction()
            await (await ap.send(topic, b"aiokafka-aborted"))
            await ap.abort_transaction()
        finally:
            await ap.stop()

    asyncio.run(aiokafka_transactions())
    committed = _read(node.bootstrap, topic, "read_committed", 10)
    assert sorted(committed) == sorted(
        [f"kafka-python-{j}" for j in range(5)] + [f"aiokafka-{j}" for j in range(5)]
    )


def test_a_producer_silent_past_its_timeout_is_aborted_and_fenced(
    node: NodeProcess, raw: RawConnection
) -> None:
    topic = _topic(node, 1)
    tid = _txn_id()
    producer = Producer(
        {
            "bootstrap.servers": node.bootstrap,
            "transactional.id": tid,
            "transaction.timeout.ms": 1000,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"never-committed")
    producer.flush(10)
    wait_until(
        "the coordinator aborting the transaction",
        lambda: describe(raw, tid).transaction_state == "CompleteAbort",
    )
    assert describe(raw, tid).producer_epoch == 1  # bumped: the producer is fenced
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)
    # read_committed readers move on past the aborted record
    later = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": _txn_id()})
    later.init_transactions(30)
    later.begin_transaction()
    later.produce(topic, b"after")
    later.commit_transaction(10)
    assert _read(node.bootstrap, topic, "read_committed", 1) == ["after"]


# --- Kafka's answers to bad requests --------------------------------------------------------


def test_find_coordinator_names_this_node_for_a_transactional_id(
    node: NodeProcess, raw: RawConnection
) -> None:
    def found() -> Any:
        r = raw.request(FindCoordinatorRequest(key=_txn_id(), key_type=1), 3)
        return r if r.error_code == ErrorCode.NONE else None

    r = wait_until("the transaction coordinator", found)
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
    first = init_producer_id(raw, tid)
    assert first.error_code == ErrorCode.NONE and first.producer_epoch == 0
    pid = first.producer_id
    bumped = init_producer_id(raw, tid, producer_id=pid, producer_epoch=0)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, pid, 1)
    # the same request again (its answer lost): the same answer
    retried = init_producer_id(raw, tid, producer_id=pid, producer_epoch=0)
    assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (0, pid, 1)
    stale = init_producer_id(raw, tid, producer_id=pid + 1000, producer_epoch=1)
    assert stale.error_code == ErrorCode.PRODUCER_FENCED
    old_version = init_producer_id(raw, tid, version=3, producer_id=pid + 1000, producer_epoch=1)
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
    r = init_producer_id(raw, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert set(add_partitions(raw, tid, pid + 1, epoch, [0], topic=TOPIC).values()) == {
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    }
    assert set(add_partitions(raw, _txn_id(), pid, epoch, [0], topic=TOPIC).values()) == {
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    }
    init_producer_id(raw, tid)  # epoch + 1: the old epoch is fenced
    assert set(add_partitions(raw, tid, pid, epoch, [0], topic=TOPIC).values()) == {
        ErrorCode.PRODUCER_FENCED
    }
    assert set(add_partitions(raw, tid, pid, epoch, [0], version=1, topic=TOPIC).values()) == {
        ErrorCode.INVALID_PRODUCER_EPOCH
    }
    errors = add_partitions(raw, tid, pid, epoch + 1, [0, 7], topic=TOPIC)
    assert errors == {
        (TOPIC, 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
        (TOPIC, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert set(add_partitions(raw, tid, pid, epoch + 1, [0], topic="no-such-topic").values()) == {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    }
    assert add_partitions(raw, tid, pid, epoch + 1, [], topic=TOPIC) == {}
    assert describe(raw, tid).transaction_state == "Empty"  # nothing was added


def test_end_txn_without_a_transaction_and_with_wrong_producers(raw: RawConnection) -> None:
    tid = _txn_id()
    r = init_producer_id(raw, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert end_txn(raw, tid, pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
    assert end_txn(raw, tid, pid + 1, epoch, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert end_txn(raw, tid, pid, epoch + 1, False) == ErrorCode.PRODUCER_FENCED
    assert end_txn(raw, tid, pid, epoch + 1, False, version=1) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert end_txn(raw, _txn_id(), pid, epoch, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_the_next_transaction_waits_for_the_last_ones_markers_instead_of_being_refused(
    node: NodeProcess, raw: RawConnection
) -> None:
    """AddPartitionsToTxn sent right after EndTxn finds the markers of the last transaction
    still in flight: it is held until they are written (CONCURRENT_TRANSACTIONS only after
    CONCURRENT_HOLD_MS), not refused at once to cost the client its retry backoff."""
    topic = _topic(node)
    tid = _txn_id()
    r = init_producer_id(raw, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert add_partitions(raw, tid, pid, epoch, [0, 1], topic=topic) == {
        (topic, 0): ErrorCode.NONE,
        (topic, 1): ErrorCode.NONE,
    }
    answers = []
    for commit in [True, False] * 5:
        assert end_txn(raw, tid, pid, epoch, commit) == ErrorCode.NONE
        started = time.monotonic()
        errors = add_partitions(raw, tid, pid, epoch, [0, 1], topic=topic)
        held_ms = (time.monotonic() - started) * 1000
        (error,) = set(errors.values())
        if error == ErrorCode.CONCURRENT_TRANSACTIONS:
            assert held_ms >= CONCURRENT_HOLD_MS * 0.9, f"refused after {held_ms:.0f} ms"
        else:
            assert error == ErrorCode.NONE
        answers.append(error)
    assert ErrorCode.NONE in answers
    assert describe(raw, tid).transaction_state in ("Ongoing", "CompleteCommit", "CompleteAbort")


def test_describe_and_list_transactions(raw: RawConnection) -> None:
    tid = _txn_id()
    r = init_producer_id(raw, tid, timeout_ms=45_000)
    pid, epoch = r.producer_id, r.producer_epoch
    before = int(time.time() * 1000)
    assert set(add_partitions(raw, tid, pid, epoch, [1, 0], topic=TOPIC).values()) == {
        ErrorCode.NONE
    }
    offsets = raw.request(
        AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id="g"
        ),
        3,
    )
    assert offsets.error_code == ErrorCode.NONE
    d = describe(raw, tid)
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
    unknown = describe(raw, _txn_id())
    assert unknown.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert describe(raw, "").error_code == ErrorCode.INVALID_REQUEST

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
    assert end_txn(raw, tid, pid, epoch, False) == ErrorCode.NONE
    assert describe(raw, tid).transaction_state in ("PrepareAbort", "CompleteAbort")


@pytest.mark.parametrize(
    ("version", "not_in_it"),
    [(4, ErrorCode.INVALID_TXN_STATE), (5, ErrorCode.TRANSACTION_ABORTABLE)],
)
def test_verify_only_says_which_partitions_are_in_the_transaction(
    raw: RawConnection, version: int, not_in_it: ErrorCode
) -> None:
    tid = _txn_id()
    r = init_producer_id(raw, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert set(add_partitions(raw, tid, pid, epoch, [0], topic=TOPIC).values()) == {ErrorCode.NONE}
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
        version,
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
        {(TOPIC, 0): ErrorCode.NONE, (TOPIC, 1): not_in_it},
        {(TOPIC, 0): ErrorCode.PRODUCER_FENCED},
    ]
    assert describe(raw, tid).topics[0].partitions == [0]  # verification added nothing


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(raw: RawConnection) -> None:
    tid = _txn_id()
    r = init_producer_id(raw, tid, timeout_ms=500)
    pid, epoch = r.producer_id, r.producer_epoch
    assert set(add_partitions(raw, tid, pid, epoch, [0], topic=TOPIC).values()) == {ErrorCode.NONE}
    aborted = wait_until(
        "the timed-out transaction aborted",
        lambda: (
            (d := describe(raw, tid)).transaction_state in ("PrepareAbort", "CompleteAbort") and d
        ),
    )
    assert aborted.producer_epoch == epoch + 1
    assert end_txn(raw, tid, pid, epoch, True) == ErrorCode.PRODUCER_FENCED
    assert set(add_partitions(raw, tid, pid, epoch, [1], topic=TOPIC).values()) == {
        ErrorCode.PRODUCER_FENCED
    }


@pytest.fixture
def short_lived_ids(tmp_path: Path) -> Iterator[NodeProcess]:
    """A node that removes ids idle for one second, checking every 200 ms."""
    proc = NodeProcess(
        tmp_path / "expiry",
        overrides=(
            "transactional.id.expiration.ms=1000",
            "transaction.remove.expired.transaction.cleanup.interval.ms=200",
        ),
    ).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


def test_idle_ids_expire_and_ids_survive_a_restart(short_lived_ids: NodeProcess) -> None:
    node = short_lived_ids
    conn = RawConnection(node.bootstrap)
    try:
        expiring, kept = _txn_id(), _txn_id()
        first = init_producer_id(conn, expiring)
        wait_until(
            "the idle id removed",
            lambda: describe(conn, expiring).error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
        )
        again = init_producer_id(conn, expiring)
        assert again.producer_id != first.producer_id and again.producer_epoch == 0
        # an id with a transaction open does not expire
        r = init_producer_id(conn, kept)
        assert set(add_partitions(conn, kept, r.producer_id, 0, [0], topic=TOPIC).values()) == {
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        }
        topic_admin = AdminClient({"bootstrap.servers": node.bootstrap})
        topic_admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=10)
        assert set(add_partitions(conn, kept, r.producer_id, 0, [0], topic=TOPIC).values()) == {0}
        time.sleep(1.5)
        assert describe(conn, kept).transaction_state == "Ongoing"
    finally:
        conn.close()
    # the states are in __transaction_state: a restarted node loads them
    assert node.stop() == 0, node.log_tail()
    node.start()
    conn = RawConnection(node.bootstrap)
    try:
        d = wait_until(
            "the ids loaded",
            lambda: (x := describe(conn, kept)).error_code == ErrorCode.NONE and x,
        )
        assert (d.producer_id, d.producer_epoch, d.transaction_state) == (
            r.producer_id,
            0,
            "Ongoing",
        )
        # idle again meanwhile: its tombstone is loaded too, the id stays removed
        assert describe(conn, expiring).error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    finally:
        conn.close()
