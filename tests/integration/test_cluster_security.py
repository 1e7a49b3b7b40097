"""Three controllers and three brokers that authenticate to each other: the controller listener
and the brokers' INTERNAL listener (``inter.broker.listener.name``) are SASL_SSL (TLS with the
node certificates of a test CA, then PLAIN), clients use an EXTERNAL PLAINTEXT listener.
Replication and registration go over the authenticated listeners; a broker with a wrong
password cannot register, and says why."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic

from broker.kafka_client import KafkaConnection, KafkaConnectionError
from broker.security.client_security import ClientSecurity
from broker.security.session import SecurityProtocol
from integration.cluster_process import (
    LocalCluster,
    ServerProcess,
    admin_client,
    rest_call,
    wait_for,
)
from integration.node_process import free_port
from integration.raw_client import RawConnection
from kafka_protocol.messages import BrokerRegistrationRequest, MetadataRequest
from kafka_protocol.types import BrokerId
from kraft.node.certificates import CertificateAuthority, load_ca, make_ca, make_certificate

pytestmark = pytest.mark.integration

BROKER_PASSWORD = "broker-secret-password"
PROTOCOL = "SASL_SSL"


def jaas(password: str) -> str:
    """Who may log in (user_broker) and who this node logs in as (username/password)."""
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
        f' username="broker" password="{password}" user_broker="{BROKER_PASSWORD}";'
    )


def secure(node: ServerProcess, ca: CertificateAuthority, password: str = BROKER_PASSWORD) -> None:
    """Move ``node`` onto authenticated listeners (before it is launched)."""
    props = node.properties
    keystore = make_certificate(ca, node.data_dir, f"node-{node.node_id}", ["127.0.0.1"])
    props["ssl.keystore.type"] = props["ssl.truststore.type"] = "PEM"
    props["ssl.keystore.location"] = str(keystore)
    props["ssl.truststore.location"] = str(ca.certificate_path)
    props["listener.security.protocol.map"] = (
        f"CONTROLLER:{PROTOCOL},INTERNAL:{PROTOCOL},EXTERNAL:PLAINTEXT"
    )
    props["listener.name.controller.plain.sasl.jaas.config"] = jaas(password)
    props["sasl.mechanism.controller.protocol"] = "PLAIN"
    if props["process.roles"] == "broker":
        internal = f"127.0.0.1:{free_port()}"
        props["listeners"] = f"EXTERNAL://127.0.0.1:{free_port()},INTERNAL://{internal}"
        props["inter.broker.listener.name"] = "INTERNAL"
        props["sasl.mechanism.inter.broker.protocol"] = "PLAIN"
        props["listener.name.internal.plain.sasl.jaas.config"] = jaas(password)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = Path(tmp_path_factory.mktemp("secure-quorum"))
    extra = {
        "broker.session.timeout.ms": "3000",
        "broker.heartbeat.interval.ms": "500",
        # the REST API (checked here only as a client of the brokers) stays open to the test
        "admin.authentication": "none",
    }
    cluster = LocalCluster.create(root, 3, 3, extra)
    ca = make_ca(root / "ca")
    for node in cluster.nodes:
        secure(node, ca)
    try:
        yield cluster.start()
    finally:
        cluster.kill_all()


def test_brokers_register_every_listener_with_its_protocol(cluster: LocalCluster) -> None:
    broker = cluster.any_broker()
    view = wait_for(
        "three unfenced brokers",
        lambda: (
            (v := broker.get("/v1/cluster"))
            and sum(not b["fenced"] for b in v["brokers"]) == 3
            and v
        ),
        15,
        cluster,
    )
    assert {b["id"] for b in view["brokers"]} == set(cluster.brokers)
    # Metadata over EXTERNAL names every broker's EXTERNAL address
    metadata = admin_client(cluster).list_topics(timeout=10)
    addresses = {f"{b.host}:{b.port}" for b in metadata.brokers.values()}
    assert addresses == {b.address for b in cluster.brokers.values()}
    # INTERNAL is TLS with the node's certificate (checked against the CA and the address)
    ca = str(next(iter(cluster.brokers.values())).properties["ssl.truststore.location"])
    context = ssl.create_default_context(cafile=ca)
    for node in cluster.brokers.values():
        internal = node.properties["listeners"].split("INTERNAL://")[1]
        host, port = internal.rsplit(":", 1)
        with (
            socket.create_connection((host, int(port)), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_replication_over_the_authenticated_listener_survives_a_kill(
    cluster: LocalCluster,
) -> None:
    topic = "replicated"
    admin = admin_client(cluster)
    admin.create_topics([NewTopic(topic, 3, 3)], request_timeout=10)[topic].result(timeout=15)

    def fully_replicated() -> bool:
        md = admin_client(cluster).list_topics(topic, timeout=5)
        parts = md.topics[topic].partitions.values()
        return len(parts) == 3 and all(len(p.isrs) == 3 for p in parts)

    wait_for("an ISR of 3", fully_replicated, 20, cluster)
    # replicas are online on the listener asked (EXTERNAL) and on REST's (INTERNAL)
    conn = RawConnection(cluster.any_broker().address)
    try:
        metadata = conn.request(
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12
        )
    finally:
        conn.close()
    [described_topic] = metadata.topics
    assert all(not p.offline_replicas for p in described_topic.partitions)
    status, described = rest_call(cluster.any_broker(), "GET", f"/v1/topics/{topic}")
    assert status == 200 and all(not p["offline_replicas"] for p in described["partitions"])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    values = [f"v{i}".encode() for i in range(300)]
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(20) == 0
    # acks=all with an ISR of 3: every broker has every record, fetched over INTERNAL
    victim = next(iter(cluster.brokers.values()))
    victim.kill()
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "after-kill",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        for message in consumer.consume(500, 1.0):
            if message.error() is None:
                got.append(message.value())
    consumer.close()
    assert sorted(got) == sorted(values)


def test_a_broker_with_a_wrong_password_cannot_register(cluster: LocalCluster) -> None:
    intruder_id = max(cluster.brokers) + 1
    template = next(iter(cluster.brokers.values()))
    root = template.data_dir.parent / f"broker-{intruder_id}"
    props = {
        **template.properties,
        "node.id": str(intruder_id),
        "metadata.log.dir": str(root / "metadata"),
        "log.dirs": str(root / "logs"),
        "admin.listener": f"http://127.0.0.1:{free_port()}",
    }
    intruder = ServerProcess(intruder_id, root, props)
    secure(intruder, load_ca(template.data_dir.parent / "ca"), password="not-the-password")
    intruder.launch()
    try:
        wait_for(
            "the intruder's log saying why",
            lambda: "cannot authenticate to the controller" in intruder.log_path.read_text(),
            15,
            cluster,
        )
        log = intruder.log_path.read_text()
        assert "PLAIN" in log and "broker" in log and "not-the-password" not in log
        view = cluster.any_broker().get("/v1/cluster")
        assert intruder_id not in {b["id"] for b in view["brokers"]}
        assert intruder.alive()  # it keeps retrying (an operator may fix the password)
        # without spinning: one log line, not one per attempt
        assert log.count("cannot authenticate to the controller") <= 2, log
    finally:
        intruder.kill()


def test_rest_records_reach_leaders_over_the_authenticated_listener(
    cluster: LocalCluster,
) -> None:
    topic = "via-rest"
    admin = admin_client(cluster)
    admin.create_topics([NewTopic(topic, 3, 1)], request_timeout=10)[topic].result(timeout=15)
    via = next(b for b in cluster.brokers.values() if b.alive())
    records = [{"partition": p, "value": f"v{p}"} for p in range(3)]
    # partitions led by other brokers are written over their INTERNAL (SASL_SSL) listener
    status, body = wait_for(
        "the REST produce",
        lambda: (
            (r := rest_call(via, "POST", f"/v1/topics/{topic}/records", {"records": records}))
            and r[0] == 200
            and r
        ),
        15,
        cluster,
    )
    assert all(o["offset"] == 0 for o in body["offsets"]), body
    for p in range(3):
        status, read = rest_call(via, "GET", f"/v1/topics/{topic}/partitions/{p}/records")
        assert status == 200 and [r["value"] for r in read["records"]] == [f"v{p}"], read


def test_an_unauthenticated_registration_is_refused(cluster: LocalCluster) -> None:
    """TLS to the controller listener without SASL: the registration of a fake broker is not
    served (the connection is closed), and no broker 99 appears."""
    ca = next(iter(cluster.controllers.values())).properties["ssl.truststore.location"]
    tls_only = ClientSecurity(SecurityProtocol.SSL, ssl.create_default_context(cafile=ca))

    async def register(host: str, port: int) -> None:
        conn = await KafkaConnection.open(host, port, "fake-broker", tls_only)
        try:
            request = BrokerRegistrationRequest(
                broker_id=BrokerId(99),
                cluster_id=cluster.controllers[1].properties["cluster.id"],
                incarnation_id=uuid.uuid4(),
                listeners=[
                    BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="127.0.0.1", port=1)
                ],
            )
            with pytest.raises(KafkaConnectionError):
                await conn.request(request, 4)
        finally:
            conn.close()

    for controller in cluster.controllers.values():
        if controller.alive():
            address = controller.properties["listeners"].split("://", 1)[1]
            host, port = address.rsplit(":", 1)
            asyncio.run(register(host, int(port)))
    view = cluster.any_broker().get("/v1/cluster")
    assert 99 not in {b["id"] for b in view["brokers"]}
