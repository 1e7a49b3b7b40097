"""Client quotas on a real cluster (1 controller, 3 brokers): AlterClientQuotas forwarded to the
controller, ClientQuotaRecord replayed into every broker's image, DescribeClientQuotas answered
by any broker, and the errors Kafka answers for bad input, with nothing changed.

Clients: none of confluent-kafka 2.16.1's ``AdminClient``, kafka-python 3.0.12's
``KafkaAdminClient`` or aiokafka 0.14's ``AIOKafkaAdminClient`` has a client-quota call, so
the requests go through kafka-python's own connection manager and its own protocol classes
(``kafka.protocol.admin.AlterClientQuotasRequest``): the client encodes and decodes every byte.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    DescribeClientQuotasRequest,
)

from integration.cluster_process import LocalCluster, ServerProcess, wait_for
from integration.raw_client import RawConnection
from kafka_protocol.messages import ApiVersionsRequest, ProduceRequest, ProduceResponse
from kafka_protocol.record_batch import SimpleRecord, build_batch
from kafka_protocol.types import TopicName

pytestmark = pytest.mark.integration

INVALID_REQUEST = 42
QUOTA_WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}
Entity = tuple[tuple[str, str | None], ...]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = Path(tmp_path_factory.mktemp("quotas"))
    # 2 windows of 1 s: a quota allows a burst of ~1 s of its rate before throttling starts
    # (with Kafka's 11 windows, 10 s of it, and another whenever that sample expires).
    cluster = LocalCluster.create(root, 1, 3, dict(QUOTA_WINDOWS)).start()
    try:
        yield cluster
    finally:
        cluster.kill_all()


def kp_admin(node: ServerProcess) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=node.address, request_timeout_ms=10000)


def send(admin: KafkaAdminClient, request: Any) -> Any:
    manager = admin._manager  # no public call for these APIs
    return manager.run(manager.send, request)


def alter(
    admin: KafkaAdminClient,
    changes: list[tuple[Entity, dict[str, float | None]]],
    validate_only: bool = False,
) -> dict[Entity, tuple[int, str | None]]:
    A = AlterClientQuotasRequest
    request = A(
        entries=[
            A.EntryData(
                entity=[A.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                ops=[
                    A.EntryData.OpData(key=k, value=v or 0.0, remove=v is None)
                    for k, v in ops.items()
                ],
            )
            for entity, ops in changes
        ],
        validate_only=validate_only,
    )
    response = send(admin, request)
    return {
        tuple((e.entity_type, e.entity_name) for e in x.entity): (x.error_code, x.error_message)
        for x in response.entries
    }


def describe(
    admin: KafkaAdminClient, components: list[tuple[str, int, str | None]], strict: bool = False
) -> tuple[int, dict[Entity, dict[str, float]]]:
    D = DescribeClientQuotasRequest
    response = send(
        admin,
        D(
            components=[
                D.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components
            ],
            strict=strict,
        ),
    )
    entries = {
        tuple(sorted((e.entity_type, e.entity_name) for e in x.entity)): {
            v.key: v.value for v in x.values
        }
        for x in response.entries or ()
    }
    return response.error_code, entries


EXACT, DEFAULT, ANY = 0, 1, 2
ALICE_APP: Entity = (("client-id", "app"), ("user", "alice"))
APP: Entity = (("client-id", "app"),)
DEFAULT_USER: Entity = (("user", None),)


def everything(admin: KafkaAdminClient) -> dict[Entity, dict[str, float]]:
    error, found = describe(admin, [])
    assert error == 0
    return found


def test_alter_then_describe_on_every_broker(cluster: LocalCluster) -> None:
    brokers = list(cluster.brokers.values())
    writer = kp_admin(brokers[0])
    assert alter(
        writer,
        [
            (ALICE_APP, {"producer_byte_rate": 1024.0, "request_percentage": 12.5}),
            (APP, {"consumer_byte_rate": 2048.0}),
            (DEFAULT_USER, {"producer_byte_rate": 4096.0}),
        ],
    ) == {ALICE_APP: (0, None), APP: (0, None), DEFAULT_USER: (0, None)}
    want = {
        ALICE_APP: {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
        APP: {"consumer_byte_rate": 2048.0},
        DEFAULT_USER: {"producer_byte_rate": 4096.0},
    }
    for broker in brokers:  # each broker answers from its own image
        reader = kp_admin(broker)
        wait_for("the quotas", lambda r=reader: everything(r) == want, 10, cluster)
        reader.close()
    reader = kp_admin(brokers[2])
    # match exact / default / any, strict or not
    assert describe(reader, [("client-id", EXACT, "app")])[1].keys() == {ALICE_APP, APP}
    assert describe(reader, [("client-id", EXACT, "app")], strict=True)[1].keys() == {APP}
    assert describe(reader, [("user", DEFAULT, None)])[1] == {DEFAULT_USER: want[DEFAULT_USER]}
    assert describe(reader, [("user", ANY, None)])[1].keys() == {ALICE_APP, DEFAULT_USER}
    assert describe(reader, [("user", ANY, None)], strict=True)[1].keys() == {DEFAULT_USER}
    assert describe(reader, [("user", EXACT, "bob")])[1] == {}
    # a removal and a change: only those keys move
    assert alter(writer, [(ALICE_APP, {"request_percentage": None, "producer_byte_rate": 512.0})])
    want[ALICE_APP] = {"producer_byte_rate": 512.0}
    wait_for("the change", lambda: everything(reader) == want, 10, cluster)
    # removing the last key removes the entity
    alter(
        writer, [(APP, {"consumer_byte_rate": None}), (DEFAULT_USER, {"producer_byte_rate": None})]
    )
    wait_for("the removal", lambda: everything(reader) == {ALICE_APP: want[ALICE_APP]}, 10, cluster)
    alter(writer, [(ALICE_APP, {"producer_byte_rate": None})])
    wait_for("nothing left", lambda: everything(reader) == {}, 10, cluster)
    writer.close()
    reader.close()


def test_bad_input_is_refused_with_nothing_changed(cluster: LocalCluster) -> None:
    admin = kp_admin(cluster.any_broker())
    good: Entity = (("client-id", "kept"),)
    assert alter(admin, [(good, {"producer_byte_rate": 100.0})]) == {good: (0, None)}
    wait_for(
        "the quota", lambda: everything(admin) == {good: {"producer_byte_rate": 100.0}}, 10, cluster
    )
    bad_key: Entity = (("client-id", "k"),)
    negative: Entity = (("user", "u"),)
    fractional: Entity = (("client-id", "f"),)
    unknown_type: Entity = (("group", "g"),)
    empty_name: Entity = (("user", ""),)
    ip_and_user: Entity = (("ip", "10.0.0.1"), ("user", "u2"))
    answers = alter(
        admin,
        [
            (good, {"producer_byte_rate": 1.0, "no_such_quota": 5.0}),  # one bad key: none set
            (bad_key, {"no_such_quota": 5.0}),
            (negative, {"consumer_byte_rate": -1.0}),
            (fractional, {"producer_byte_rate": 1.5}),
            (unknown_type, {"producer_byte_rate": 1.0}),
            (empty_name, {"producer_byte_rate": 1.0}),
            (ip_and_user, {"producer_byte_rate": 1.0}),
        ],
    )
    assert {e: code for e, (code, _) in answers.items()} == {
        e: INVALID_REQUEST
        for e in (good, bad_key, negative, fractional, unknown_type, empty_name, ip_and_user)
    }, answers
    assert "no_such_quota" in (answers[bad_key][1] or "")
    assert "greater than 0" in (answers[negative][1] or "")
    # validate_only: a valid change answered, not made
    assert alter(admin, [(good, {"producer_byte_rate": 7.0})], validate_only=True) == {
        good: (0, None)
    }
    # an ip quota is stored (connection_creation_rate), a bad ip refused
    ip: Entity = (("ip", "10.0.0.1"),)
    assert alter(admin, [(ip, {"connection_creation_rate": 10.0})]) == {ip: (0, None)}
    assert (
        alter(admin, [((("ip", "nope"),), {"connection_creation_rate": 1.0})])[(("ip", "nope"),)][0]
        == INVALID_REQUEST
    )
    want = {good: {"producer_byte_rate": 100.0}, ip: {"connection_creation_rate": 10.0}}
    wait_for("the ip quota", lambda: everything(admin) == want, 10, cluster)
    # bad filters
    assert describe(admin, [("user", EXACT, None)])[0] == INVALID_REQUEST
    assert describe(admin, [("user", ANY, None), ("user", DEFAULT, None)])[0] == INVALID_REQUEST
    assert describe(admin, [("ip", ANY, None), ("user", ANY, None)])[0] == INVALID_REQUEST
    assert describe(admin, [("user", 7, None)])[0] == INVALID_REQUEST
    alter(admin, [(good, {"producer_byte_rate": None}), (ip, {"connection_creation_rate": None})])
    wait_for("nothing left", lambda: everything(admin) == {}, 10, cluster)
    admin.close()


# --- enforcement ----------------------------------------------------------------------------------

QUOTA_BYTES_PER_S = 256 * 1024
VALUE = b"q" * 1024
RUN_S = 8.0
STEADY_FROM_S = 2.0


def produce_flat_out(
    bootstrap: str, topic: str, client_id: str, stop: threading.Event
) -> list[tuple[float, int]]:
    """Produce as fast as the producer is let; the (time, bytes) of each acknowledged message."""
    acked: list[tuple[float, int]] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            # requests small beside a window's worth of the quota: a throttle per request
            "queue.buffering.max.messages": 64,
            "batch.size": 16384,
            "acks": "all",
        }
    )

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))

    while not stop.is_set():
        try:
            producer.produce(topic, value=VALUE, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(30)
    return acked


def rate_between(acked: list[tuple[float, int]], start: float, end: float) -> float:
    return sum(n for t, n in acked if start <= t < end) / (end - start)


def test_a_throttled_producer_keeps_to_its_quota_and_the_other_is_unaffected(
    cluster: LocalCluster,
) -> None:
    broker = cluster.any_broker()
    admin = AdminClient({"bootstrap.servers": broker.address})
    topic = "quota-side-by-side"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    kp = kp_admin(broker)
    noisy: Entity = (("client-id", "noisy"),)
    assert alter(kp, [(noisy, {"producer_byte_rate": float(QUOTA_BYTES_PER_S)})])[noisy][0] == 0
    for b in cluster.brokers.values():  # the quota reached every broker's image
        reader = kp_admin(b)
        wait_for("the quota", lambda r=reader: noisy in everything(r), 10, cluster)
        reader.close()
    stop = threading.Event()
    results: dict[str, list[tuple[float, int]]] = {}

    def run(client_id: str) -> None:
        results[client_id] = produce_flat_out(cluster.bootstrap, topic, client_id, stop)

    threads = [threading.Thread(target=run, args=(c,)) for c in ("noisy", "quiet")]
    started = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(RUN_S)
    stop.set()
    for t in threads:
        t.join(60)
    window = (started + STEADY_FROM_S, started + RUN_S)
    noisy_rate = rate_between(results["noisy"], *window)
    quiet_rate = rate_between(results["quiet"], *window)
    print(
        f"noisy {noisy_rate / 1024:.0f} KiB/s (quota {QUOTA_BYTES_PER_S / 1024:.0f}), "
        f"quiet {quiet_rate / 1024:.0f} KiB/s"
    )
    assert 0.8 * QUOTA_BYTES_PER_S <= noisy_rate <= 1.2 * QUOTA_BYTES_PER_S, noisy_rate
    assert quiet_rate >= 4 * QUOTA_BYTES_PER_S, (quiet_rate, noisy_rate)
    alter(kp, [(noisy, {"producer_byte_rate": None})])
    kp.close()


def produce_request(topic: str, value: bytes) -> ProduceRequest:
    Data = ProduceRequest.PartitionProduceData
    return ProduceRequest(
        acks=1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TopicName(topic),
                partition_data=[Data(index=0, records=build_batch([SimpleRecord(value)]))],
            )
        ],
    )


def test_the_broker_mutes_a_throttled_connection(cluster: LocalCluster) -> None:
    """A produce above the quota is answered with throttle_time_ms, and the broker reads
    nothing more from the connection for that long: an ApiVersions sent right after it (never
    throttled itself) is answered only once the throttle is over."""
    broker = cluster.brokers[min(cluster.brokers)]
    admin = AdminClient({"bootstrap.servers": broker.address})
    topic = "quota-muting"
    created = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replica_assignment=[[broker.node_id]])]
    )
    created[topic].result(30)
    kp = kp_admin(broker)
    raw_client: Entity = (("client-id", "raw-test"),)  # RawConnection's client id
    quota = 10_000.0
    assert alter(kp, [(raw_client, {"producer_byte_rate": quota})])[raw_client][0] == 0
    wait_for("the quota", lambda: raw_client in everything(kp), 10, cluster)
    windows = int(QUOTA_WINDOWS["quota.window.num"])
    # (n - 1) windows of the quota are allowed; one second more of it owes about 1 s
    request = produce_request(topic, b"m" * int(quota * windows))
    conn = RawConnection(broker.address)
    try:
        response = conn.request(request, 7)
        assert isinstance(response, ProduceResponse)
        assert response.responses[0].partition_responses[0].error_code == 0
        throttle_ms = response.throttle_time_ms
        assert 500 <= throttle_ms <= 2500, throttle_ms
        sent = time.monotonic()
        conn.request(ApiVersionsRequest(), 3)
        waited_ms = (time.monotonic() - sent) * 1000
        assert waited_ms >= 0.8 * throttle_ms, (waited_ms, throttle_ms)
    finally:
        conn.close()
        alter(kp, [(raw_client, {"producer_byte_rate": None})])
        kp.close()
