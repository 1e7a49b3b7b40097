"""The transaction coordinator survives a kill -9 of its broker.

One controller and three brokers; ``__transaction_state`` has 5 partitions here, replicated 3
times (min.insync.replicas 2).  Transactions are driven over the project's protocol client so
that their producer ids and epochs are known exactly; then the coordinator's broker is killed
with SIGKILL, and the new leader of the ids' partition must load the same ids with the same
producer ids, epochs and states, complete a transaction that was decided (PrepareCommit is
carried on to CompleteCommit), and keep fencing: the next InitProducerId bumps the epoch from
where the old coordinator left it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from broker.transaction.records import TRANSACTION_STATE_TOPIC, partition_for
from broker.transaction.remote import BrokerConnections, verify_remotely
from integration.cluster_process import LocalCluster, admin_client, wait_for
from integration.raw_client import RawConnection
from integration.txn_requests import (
    add_partitions,
    describe,
    end_txn,
    init_producer_id,
    wait_until,
)
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import FindCoordinatorRequest

pytestmark = pytest.mark.integration

TXN_PARTITIONS = 5
TOPIC = "failover-orders"
EXTRA = {
    "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(Path(tmp_path_factory.mktemp("txnfail")), 1, 3, EXTRA).start()
    try:
        admin = admin_client(cluster)
        admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(timeout=10)
        yield cluster
    finally:
        cluster.kill_all()


def _coordinator(cluster: LocalCluster, tid: str) -> tuple[int, RawConnection]:
    """The broker coordinating ``tid`` (FindCoordinator key type 1) and a connection to it."""

    def found() -> Any:
        conn = RawConnection(cluster.any_broker().address)
        try:
            r = conn.request(FindCoordinatorRequest(key=tid, key_type=1), 3)
        finally:
            conn.close()
        return r if r.error_code == ErrorCode.NONE else None

    r = wait_for(f"the coordinator of {tid}", found, 30, cluster)
    return r.node_id, RawConnection(f"{r.host}:{r.port}")


def _ids_on_one_partition(count: int) -> list[str]:
    """Transactional ids that all live on the same ``__transaction_state`` partition."""
    ids = [f"failover-{i}" for i in range(200)]
    target = partition_for(ids[0], TXN_PARTITIONS)
    return [i for i in ids if partition_for(i, TXN_PARTITIONS) == target][:count]


def test_a_new_coordinator_loads_and_serves_the_same_ids(cluster: LocalCluster) -> None:
    committed, ongoing, bumped = _ids_on_one_partition(3)
    broker_id, conn = _coordinator(cluster, committed)
    state: dict[str, Any] = {}
    try:
        # several committed transactions, then one decided and answered
        r = init_producer_id(conn, committed)
        pid, epoch = r.producer_id, r.producer_epoch
        for _ in range(3):
            parts = add_partitions(conn, committed, pid, epoch, [0, 1], topic=TOPIC)
            assert set(parts.values()) == {ErrorCode.NONE}
            assert end_txn(conn, committed, pid, epoch, True) == ErrorCode.NONE
            wait_until(
                "CompleteCommit",
                lambda: describe(conn, committed).transaction_state == "CompleteCommit",
            )
        assert set(add_partitions(conn, committed, pid, epoch, [2], topic=TOPIC).values()) == {0}
        assert end_txn(conn, committed, pid, epoch, True) == ErrorCode.NONE
        state[committed] = (pid, epoch)
        # one ongoing
        r = init_producer_id(conn, ongoing)
        assert set(add_partitions(conn, ongoing, r.producer_id, 0, [0], topic=TOPIC).values()) == {
            0
        }
        state[ongoing] = (r.producer_id, 0)
        # one bumped twice
        r = init_producer_id(conn, bumped)
        r = init_producer_id(conn, bumped, producer_id=r.producer_id, producer_epoch=0)
        r = init_producer_id(conn, bumped)
        assert r.producer_epoch == 2
        state[bumped] = (r.producer_id, 2)
    finally:
        conn.close()

    victim = cluster.brokers[broker_id]
    victim.kill()
    try:

        def moved() -> tuple[int, RawConnection] | None:
            found, c = _coordinator(cluster, committed)
            if found != broker_id:
                return found, c
            c.close()
            return None

        _, conn = wait_for("a new coordinator", moved, 30, cluster)
        try:

            def loaded(tid: str) -> Any:
                d = describe(conn, tid)
                return d if d.error_code == ErrorCode.NONE else None

            def completed() -> Any:
                d = loaded(committed)
                return d if d is not None and d.transaction_state == "CompleteCommit" else None

            d = wait_until("the decided commit completed", completed, 30)
            assert (d.producer_id, d.producer_epoch) == state[committed]
            d = wait_until("the ongoing transaction loaded", lambda: loaded(ongoing), 30)
            assert (d.producer_id, d.producer_epoch, d.transaction_state) == (
                *state[ongoing],
                "Ongoing",
            )
            assert [(t.topic, t.partitions) for t in d.topics] == [(TOPIC, [0])]
            d = wait_until("the bumped id loaded", lambda: loaded(bumped), 30)
            assert (d.producer_id, d.producer_epoch, d.transaction_state) == (
                *state[bumped],
                "Empty",
            )
            # fencing continues from the loaded epochs
            pid, epoch = state[bumped]
            assert end_txn(conn, bumped, pid, epoch - 1, True) == ErrorCode.PRODUCER_FENCED
            r = init_producer_id(conn, bumped, producer_id=pid, producer_epoch=epoch)
            assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, epoch + 1)
        finally:
            conn.close()
        # a real client takes over the ongoing id: its transaction is aborted, the epoch bumped
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": ongoing})
        producer.init_transactions(60)
        _, conn = _coordinator(cluster, ongoing)
        try:
            d = describe(conn, ongoing)
            assert d.transaction_state == "Empty"
            assert d.producer_id == state[ongoing][0]
            assert d.producer_epoch == state[ongoing][1] + 2  # fenced once, then bumped again
        finally:
            conn.close()
    finally:
        victim.launch()
        victim.wait_ready()
    md = admin_client(cluster).list_topics(TRANSACTION_STATE_TOPIC, timeout=10)
    assert len(md.topics[TRANSACTION_STATE_TOPIC].partitions) == TXN_PARTITIONS


def test_a_decided_commit_is_completed_by_the_next_coordinator(cluster: LocalCluster) -> None:
    """The markers of a PrepareCommit cannot be written (the only replica of one of its
    partitions is down) when the coordinator dies: the next coordinator loads PrepareCommit,
    writes the markers once the partition is back, and completes the commit."""
    (tid,) = _ids_on_one_partition(4)[3:]
    coordinator, conn = _coordinator(cluster, tid)
    conn.close()
    pinned_to = next(b for b in cluster.brokers if b != coordinator)
    admin = admin_client(cluster)
    admin.create_topics([NewTopic("pinned", 1, replica_assignment=[[pinned_to]])])["pinned"].result(
        timeout=10
    )
    down = cluster.brokers[pinned_to]
    down.kill()
    victim = cluster.brokers[coordinator]
    try:
        wait_for(
            "pinned-0 without a leader",
            lambda: (
                admin_client(cluster)
                .list_topics("pinned", timeout=5)
                .topics["pinned"]
                .partitions[0]
                .leader
                == -1
            ),
            30,
            cluster,
        )
        _, conn = _coordinator(cluster, tid)
        try:
            r = init_producer_id(conn, tid)
            pid, epoch = r.producer_id, r.producer_epoch
            assert set(add_partitions(conn, tid, pid, epoch, [0], topic="pinned").values()) == {0}
            assert set(add_partitions(conn, tid, pid, epoch, [1], topic=TOPIC).values()) == {0}
            assert end_txn(conn, tid, pid, epoch, True) == ErrorCode.NONE
            assert describe(conn, tid).transaction_state == "PrepareCommit"
            # a retried EndTxn while the markers go out: CONCURRENT_TRANSACTIONS, the client
            # retries; the other outcome: INVALID_TXN_STATE
            assert end_txn(conn, tid, pid, epoch, True) == ErrorCode.CONCURRENT_TRANSACTIONS
            assert end_txn(conn, tid, pid, epoch, False) == ErrorCode.INVALID_TXN_STATE
        finally:
            conn.close()
        victim.kill()
        down.launch()
        down.wait_ready()

        def completed() -> Any:
            found, c = _coordinator(cluster, tid)
            try:
                d = describe(c, tid)
            finally:
                c.close()
            ok = found != coordinator and d.transaction_state == "CompleteCommit"
            return d if ok else None

        d = wait_for("the next coordinator completing the commit", completed, 60, cluster)
        assert (d.producer_id, d.producer_epoch) == (pid, epoch)
        _, conn = _coordinator(cluster, tid)
        try:
            assert end_txn(conn, tid, pid, epoch, True) == ErrorCode.NONE  # a late retry
        finally:
            conn.close()
    finally:
        for proc in (down, victim):
            if not proc.alive():
                proc.launch()
                proc.wait_ready()


def test_partition_leaders_verify_with_the_coordinator_of_another_broker(
    cluster: LocalCluster,
) -> None:
    """KIP-890 verification as a partition leader on another broker asks for it
    (``verify_remotely``: AddPartitionsToTxn v4 verify_only over the inter-broker listener)."""
    (tid,) = _ids_on_one_partition(5)[4:]
    coordinator, conn = _coordinator(cluster, tid)
    try:
        r = init_producer_id(conn, tid)
        pid, epoch = r.producer_id, r.producer_epoch
        assert set(add_partitions(conn, tid, pid, epoch, [0], topic=TOPIC).values()) == {0}
    finally:
        conn.close()
    addresses = {
        i: (b.address.rsplit(":", 1)[0], int(b.address.rsplit(":", 1)[1]))
        for i, b in cluster.brokers.items()
    }
    other = next(b for b in cluster.brokers if b != coordinator)

    async def ask(broker: int, producer_epoch: int) -> dict[tuple[str, int], ErrorCode]:
        connections = BrokerConnections(addresses.get, None, "verification-test")
        try:
            return await verify_remotely(
                connections, broker, tid, pid, producer_epoch, [(TOPIC, 0), (TOPIC, 1)]
            )
        finally:
            await connections.close()

    assert asyncio.run(ask(coordinator, epoch)) == {
        (TOPIC, 0): ErrorCode.NONE,
        (TOPIC, 1): ErrorCode.INVALID_TXN_STATE,
    }
    assert set(asyncio.run(ask(coordinator, epoch + 1)).values()) == {ErrorCode.PRODUCER_FENCED}
    assert set(asyncio.run(ask(other, epoch)).values()) == {ErrorCode.NOT_COORDINATOR}
