"""The node's own Kafka client (KafkaConnection.open(security=...)) against a real broker's
SASL_SSL and SASL_PLAINTEXT listeners on 127.0.0.1: TLS, ApiVersions, SaslHandshake and
SaslAuthenticate; refused logins are AuthenticationErrors naming the peer and mechanism."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from broker.broker import Broker, BrokerConfig
from broker.broker_config import BrokerListener
from broker.kafka_client import AuthenticationError, ControllerClient, KafkaConnection
from broker.security.client_security import client_security_for
from broker.security.listener_config import listener_security, node_security
from broker.storage import FileStorage
from kafka_protocol.messages import MetadataRequest, MetadataResponse
from kafka_protocol.sasl import ScramCredential, scram_credential
from kraft.node.certificates import make_ca, make_certificate
from metadata_log.image import ClusterImage

PASSWORD = "broker-password-1"
SCRAM = {("carol", "SCRAM-SHA-512"): scram_credential("SCRAM-SHA-512", "carol-pw")}


def jaas(password: str) -> str:
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
        f' username="broker" password="{password}" user_broker="{PASSWORD}";'
    )


def scram_lookup(user: str, mechanism: str) -> ScramCredential | None:
    return SCRAM.get((user, mechanism))


def node_values(tmp: Path) -> dict[str, str]:
    ca = make_ca(tmp / "ca")
    keystore = make_certificate(ca, tmp, "node", ["127.0.0.1"])
    return {
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.location": str(ca.certificate_path),
        "sasl.jaas.config": jaas(PASSWORD),
    }


class _NoController:
    pass


Body = Callable[[Broker, dict[str, str]], Awaitable[None]]


def with_broker(tmp_path: Path, body: Body) -> None:
    """Run ``body`` against a broker serving SASL_SSL and SASL_PLAINTEXT on 127.0.0.1."""
    values = node_values(tmp_path)
    names = ["SASL_SSL", "SASL_PLAINTEXT"]
    settings = node_security(values, names, is_broker=False)

    async def run() -> None:
        listeners = tuple(
            BrokerListener(
                name,
                "127.0.0.1",
                0,
                "127.0.0.1",
                0,
                listener_security(values, name, settings, scram_lookup),
            )
            for name in names
        )
        config = BrokerConfig(
            1, "127.0.0.1", 0, "127.0.0.1", 0, tmp_path / "logs", listeners=listeners
        )
        node = Broker(config, FileStorage(), _NoController(), ClusterImage.EMPTY, "c")  # type: ignore[arg-type]
        await node.start()
        try:
            await body(node, values)
        finally:
            await node.stop()

    asyncio.run(run())


async def _metadata(conn: KafkaConnection) -> MetadataResponse:
    response = await conn.request(MetadataRequest(topics=[]), 12)
    assert isinstance(response, MetadataResponse)
    return response


@pytest.mark.parametrize("listener", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_logs_in_and_is_answered_with_that_listener(tmp_path: Path, listener: str) -> None:
    async def body(node: Broker, values: dict[str, str]) -> None:
        security = client_security_for(values, listener, "sasl.mechanism.inter.broker.protocol")
        port = node.listeners[listener].port
        conn = await KafkaConnection.open("127.0.0.1", port, "t", security)
        try:
            [entry] = (await _metadata(conn)).brokers
            assert (entry.host, entry.port) == ("127.0.0.1", port)
        finally:
            conn.close()

    with_broker(tmp_path, body)


def test_scram_login(tmp_path: Path) -> None:
    async def body(node: Broker, values: dict[str, str]) -> None:
        carol = {
            **values,
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                'x required username="carol" password="carol-pw";'
            ),
        }
        security = client_security_for(carol, "SASL_SSL", "sasl.mechanism.inter.broker.protocol")
        port = node.listeners["SASL_SSL"].port
        conn = await KafkaConnection.open("127.0.0.1", port, "t", security)
        assert len((await _metadata(conn)).brokers) == 1
        conn.close()

    with_broker(tmp_path, body)


def test_a_wrong_password_is_an_authentication_error(tmp_path: Path) -> None:
    async def body(node: Broker, values: dict[str, str]) -> None:
        wrong = {**values, "sasl.jaas.config": jaas("wrong")}
        key = "sasl.mechanism.controller.protocol"
        security = client_security_for(wrong, "SASL_PLAINTEXT", key)
        port = node.listeners["SASL_PLAINTEXT"].port
        expected = rf"127\.0\.0\.1:{port} refused PLAIN login of user 'broker'"
        with pytest.raises(AuthenticationError, match=expected):
            await KafkaConnection.open("127.0.0.1", port, "t", security)

    with_broker(tmp_path, body)


def test_an_untrusted_certificate_is_an_authentication_error(tmp_path: Path) -> None:
    async def body(node: Broker, values: dict[str, str]) -> None:
        other_ca = make_ca(tmp_path / "other-ca")
        untrusting = {**values, "ssl.truststore.location": str(other_ca.certificate_path)}
        key = "sasl.mechanism.controller.protocol"
        security = client_security_for(untrusting, "SASL_SSL", key)
        port = node.listeners["SASL_SSL"].port
        with pytest.raises(AuthenticationError, match=r"TLS handshake with 127\.0\.0\.1"):
            await KafkaConnection.open("127.0.0.1", port, "t", security)

    with_broker(tmp_path, body)


def test_the_controller_client_retries_a_refused_login_without_spinning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(node: Broker, values: dict[str, str]) -> None:
        wrong = {**values, "sasl.jaas.config": jaas("wrong")}
        key = "sasl.mechanism.controller.protocol"
        security = client_security_for(wrong, "SASL_PLAINTEXT", key)
        port = node.listeners["SASL_PLAINTEXT"].port
        client = ControllerClient([("127.0.0.1", port)], "t", security=security)
        try:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(2.5):
                    await client.request(MetadataRequest(topics=[]), 12)
        finally:
            client.close()

    with_broker(tmp_path, body)
    refused = [r for r in caplog.records if "cannot authenticate to the controller" in r.message]
    assert len(refused) == 1  # logged once, retried about once a second
    assert "PLAIN" in refused[0].getMessage() and "'broker'" in refused[0].getMessage()
    failed = [r for r in caplog.records if "SASL authentication failed" in r.getMessage()]
    assert 2 <= len(failed) <= 4, len(failed)  # about one login a second in 2.5 s
