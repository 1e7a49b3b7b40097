"""Named listeners on one ``kraft dev`` node: every client on every listener, Metadata answering
with the listener asked, wrong credentials refused."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError as AioKafkaError
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from integration.node_process import NodeProcess
from integration.raw_client import RawConnection
from integration.secure_clients import ROUNDTRIPS, Login
from kafka_protocol.messages import DescribeConfigsRequest
from kraft.node.certificates import make_ca, make_certificate

pytestmark = pytest.mark.integration

ALICE_PASSWORD = "alice-secret-pw"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    ' username="admin" password="admin-secret-pw" user_admin="admin-secret-pw"'
    f' user_alice="{ALICE_PASSWORD}";'
)
# listener name -> its security protocol (the map's default: each name is its protocol)
LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
CA_FILES: dict[str, str] = {}  # the node's data directory -> its CA (the truststore)
CLIENT_CERTS: dict[str, str] = {}  # the node's data directory -> alice's client certificate


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = Path(tmp_path_factory.mktemp("listeners"))
    ca = make_ca(root / "ca")
    keystore = make_certificate(ca, root / "certs", "node", ["127.0.0.1", "localhost"])
    alice = make_certificate(ca, root / "certs", "alice", client=True)
    listeners = ",".join(f"{n}://127.0.0.1:0" for n in (*LISTENERS, "EXTERNAL", "MTLS"))
    overrides = (
        f"listeners={listeners}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
        "SSL:SSL,SASL_SSL:SASL_SSL,EXTERNAL:PLAINTEXT,MTLS:SSL",
        # SSL with client certificates, on one listener only
        "listener.name.mtls.ssl.client.auth=required",
        f"listener.name.mtls.ssl.truststore.location={ca.certificate_path}",
        # advertised under another name: Metadata on EXTERNAL must say "localhost"
        "advertised.listeners=EXTERNAL://localhost:0",
        # the per-listener form on one listener, the global one on the other
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        f"sasl.jaas.config={JAAS}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={keystore}",
    )
    proc = NodeProcess(root / "node", overrides).start()
    CA_FILES[str(proc.data_dir)] = str(ca.certificate_path)
    CLIENT_CERTS[str(proc.data_dir)] = str(alice)
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


def login(node: NodeProcess, listener: str, password: str = ALICE_PASSWORD) -> Login:
    address = node.listeners[listener]
    ca_file = CA_FILES[str(node.data_dir)] if "SSL" in listener else None
    if listener.startswith("SASL_"):
        return Login(address, listener, "PLAIN", "alice", password, ca_file)
    return Login(address, "PLAINTEXT" if listener == "EXTERNAL" else listener, ca_file=ca_file)


def test_ready_line_lists_every_listener(node: NodeProcess) -> None:
    assert set(node.listeners) == {*LISTENERS, "EXTERNAL", "MTLS"}
    assert node.bootstrap == node.listeners["PLAINTEXT"]  # the first PLAINTEXT one
    assert node.listeners["EXTERNAL"].startswith("localhost:")
    ports = {address.rsplit(":", 1)[1] for address in node.listeners.values()}
    assert len(ports) == len(LISTENERS) + 2  # a port each


@pytest.mark.parametrize("listener", [*LISTENERS, "EXTERNAL"])
def test_metadata_answers_with_the_listener_asked(node: NodeProcess, listener: str) -> None:
    metadata = AdminClient(login(node, listener).librdkafka()).list_topics(timeout=10)
    [broker] = metadata.brokers.values()
    assert f"{broker.host}:{broker.port}" == node.listeners[listener]


@pytest.mark.parametrize("client", sorted(ROUNDTRIPS))
@pytest.mark.parametrize("listener", LISTENERS)
def test_each_client_produces_and_consumes(
    node: NodeProcess, listener: str, client: str, topic_name: str
) -> None:
    values = [f"{client}-{listener}-{i}".encode() for i in range(5)]
    got = ROUNDTRIPS[client](login(node, listener), topic_name, values)
    assert got == values, node.log_tail(20)


@pytest.mark.parametrize("client", sorted(ROUNDTRIPS))
def test_each_client_produces_and_consumes_with_a_client_certificate(
    node: NodeProcess, client: str, topic_name: str
) -> None:
    """SSL with ssl.client.auth=required: each client presents alice's certificate."""
    data_dir = str(node.data_dir)
    mtls = Login(node.listeners["MTLS"], "SSL", ca_file=CA_FILES[data_dir])
    values = [f"{client}-mtls-{i}".encode() for i in range(5)]
    with_certificate = dataclasses.replace(mtls, cert_file=CLIENT_CERTS[data_dir])
    assert ROUNDTRIPS[client](with_certificate, topic_name, values) == values


def test_a_client_without_a_certificate_is_refused_where_one_is_required(
    node: NodeProcess,
) -> None:
    mtls = Login(node.listeners["MTLS"], "SSL", ca_file=CA_FILES[str(node.data_dir)])
    with pytest.raises(KafkaException):
        AdminClient({**mtls.librdkafka(), "socket.timeout.ms": 2000}).list_topics(timeout=3)


async def _start_aiokafka_producer(login: Login) -> None:
    producer = AIOKafkaProducer(**login.aiokafka())
    try:
        await producer.start()
    finally:
        await producer.stop()


SCRAM_USER, SCRAM_PASSWORD = "carol", "carol-scram-secret"


@pytest.fixture(scope="module")
def scram_user(node: NodeProcess) -> str:
    """A SCRAM user made with the admin API of a client, over the PLAINTEXT listener."""
    admin = AdminClient(login(node, "PLAINTEXT").librdkafka())
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        # one request per mechanism: a user twice in one request is DUPLICATE_RESOURCE
        upsert = UserScramCredentialUpsertion(
            SCRAM_USER, ScramCredentialInfo(mechanism, 4096), SCRAM_PASSWORD.encode()
        )
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=10)
    return SCRAM_USER


@pytest.mark.parametrize("client", sorted(ROUNDTRIPS))
@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_users_made_by_a_client_log_in(
    node: NodeProcess, scram_user: str, listener: str, mechanism: str, client: str, topic_name: str
) -> None:
    base = login(node, listener)
    scram = Login(base.address, listener, mechanism, scram_user, SCRAM_PASSWORD, base.ca_file)
    values = [f"{client}-{mechanism}-{i}".encode() for i in range(3)]
    assert ROUNDTRIPS[client](scram, topic_name, values) == values, node.log_tail(20)


def test_wrong_password_is_an_authentication_error(
    node: NodeProcess, caplog: pytest.LogCaptureFixture
) -> None:
    errors: list[KafkaError] = []
    bad = login(node, "SASL_PLAINTEXT", password="wrong-password")
    producer = Producer({**bad.librdkafka(), "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not errors:
        producer.poll(0.2)  # error callbacks are served by poll
    assert [e.code() for e in errors[:1]] == [KafkaError._AUTHENTICATION], errors
    # aiokafka raises a connection error and logs Kafka's error code
    with caplog.at_level(logging.ERROR, logger="aiokafka"), pytest.raises(AioKafkaError):
        asyncio.run(_start_aiokafka_producer(bad))
    assert "SaslAuthenticationFailed" in caplog.text, caplog.text
    # the listener and the node serve on
    good = AdminClient(login(node, "SASL_PLAINTEXT").librdkafka()).list_topics(timeout=10)
    assert good.brokers


def test_describe_configs_never_shows_the_jaas_passwords(node: NodeProcess) -> None:
    conn = RawConnection(node.listeners["PLAINTEXT"])
    try:
        resource = DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=4,
            resource_name="1",
            configuration_keys=None,  # BROKER 1, every key
        )
        response = conn.request(
            DescribeConfigsRequest(resources=[resource], include_synonyms=True), 4
        )
    finally:
        conn.close()
    [result] = response.results
    [jaas] = [c for c in result.configs if c.name == "sasl.jaas.config"]
    assert jaas.is_sensitive and jaas.value is None
    assert jaas.synonyms and all(s.value is None for s in jaas.synonyms)
    assert ALICE_PASSWORD.encode() not in repr(response).encode()
