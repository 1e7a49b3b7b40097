"""SASL on a Kafka listener: the gate before authentication, SaslHandshake and
SaslAuthenticate (v0 raw tokens too), the failed-authentication delay and KIP-368 expiry, on a
real RequestDispatcher + KafkaListener, with raw clients and confluent-kafka."""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from secure_listener import RawClient, free_port, serving, topic_broker

from broker.dispatcher import ApiHandler, RequestContext, RequestDispatcher
from broker.handlers.basics import ApiVersionsHandler
from broker.handlers.sasl import SaslHandlers
from broker.metrics import BrokerMetrics
from broker.security.session import ListenerSecurity, SecurityProtocol, Session
from kafka_protocol.errors import ErrorCode
from kafka_protocol.framing import decode_response
from kafka_protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    MetadataResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)
from kafka_protocol.sasl import PlainServer, ScramClient, ScramServer, scram_credential

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
TOPIC = "sasl-topic"


def plain_token(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()


def sasl_security(delay_ms: int = 0, max_reauth_ms: int = 0) -> ListenerSecurity:
    return ListenerSecurity(
        name="SASL_PLAINTEXT",
        protocol=SecurityProtocol.SASL_PLAINTEXT,
        sasl_mechanisms=("PLAIN",),
        sasl_servers={"PLAIN": lambda: PlainServer(USERS.get)},
        failed_authentication_delay_ms=delay_ms,
        max_reauth_ms=max_reauth_ms,
    )


class Node:
    """ApiVersions, Metadata (records the principal) and the SASL APIs."""

    def __init__(self) -> None:
        self.principals: list[str] = []
        handlers = [
            ApiVersionsHandler(lambda: self.dispatcher.api_versions()).spec(),
            ApiHandler(3, 0, 12, self.metadata, "Metadata"),
            *SaslHandlers().specs(),
        ]
        self.dispatcher = RequestDispatcher(handlers, BrokerMetrics())

    def metadata(self, ctx: RequestContext, req: MetadataRequest) -> MetadataResponse:
        self.principals.append(ctx.session.principal)
        return MetadataResponse()

    def dispatch(self, frame: bytes | bytearray, session: Session) -> Any:
        return self.dispatcher.dispatch(frame, session)


@contextmanager
def sasl_node(security: ListenerSecurity) -> Iterator[tuple[Node, int]]:
    node = Node()
    with serving(node.dispatcher, security) as (_, listener):
        yield node, listener.port


def metadata_served(client: RawClient) -> bool:
    try:
        client.request(MetadataRequest(topics=[]), 9)
    except (ConnectionError, OSError, struct.error):
        return False
    return True


def login(client: RawClient, user: str, password: str, version: int = 2) -> Any:
    handshake = client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    assert handshake.error_code == 0 and "PLAIN" in handshake.mechanisms
    return client.request(SaslAuthenticateRequest(auth_bytes=plain_token(user, password)), version)


def test_only_api_versions_and_sasl_before_authentication(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "broker.server")
    with sasl_node(sasl_security()) as (node, port):
        client = RawClient(port)
        versions = client.request(ApiVersionsRequest(), 3)
        keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert keys[17] == (0, 1) and keys[36] == (0, 2)
        assert not metadata_served(client)
        assert client.is_closed()
        assert node.principals == []
    assert any("before SASL authentication" in r.getMessage() for r in caplog.records)


def test_plain_login_then_requests_are_served_as_the_user() -> None:
    with sasl_node(sasl_security(max_reauth_ms=60_000)) as (node, port):
        client = RawClient(port)
        answer = login(client, "alice", "alice-secret")
        assert answer.error_code == 0 and answer.session_lifetime_ms == 60_000
        assert metadata_served(client)
        assert node.principals == ["User:alice"]
        again = client.request(SaslAuthenticateRequest(auth_bytes=b"x"), 1)
        assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_unsupported_mechanism_is_answered_then_closed() -> None:
    with sasl_node(sasl_security()) as (_, port):
        client = RawClient(port)
        answer = client.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer.mechanisms == ["PLAIN"]
        assert client.is_closed()


def test_repeated_handshake_is_an_illegal_state() -> None:
    with sasl_node(sasl_security()) as (_, port):
        client = RawClient(port)
        assert client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        answer = client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        assert answer.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert client.is_closed()


def test_authenticate_before_handshake_is_an_illegal_state() -> None:
    with sasl_node(sasl_security()) as (_, port):
        client = RawClient(port)
        answer = client.request(SaslAuthenticateRequest(auth_bytes=b"\0a\0b"), 1)
        assert answer.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert client.is_closed()


def test_wrong_password_is_answered_after_the_delay_while_others_are_served() -> None:
    with sasl_node(sasl_security(delay_ms=600)) as (node, port):
        bad = RawClient(port)
        assert bad.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        start = time.monotonic()
        bad.send(SaslAuthenticateRequest(auth_bytes=plain_token("alice", "wrong")), 2)
        good = RawClient(port)  # served while the failure is held
        assert login(good, "bob", "bob-secret").error_code == 0
        assert metadata_served(good)
        assert time.monotonic() - start < 0.5
        _, answer = decode_response(36, 2, bad.recv_frame())
        assert isinstance(answer, SaslAuthenticateResponse)
        assert time.monotonic() - start >= 0.55
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer.error_message == "Authentication failed: Invalid username or password"
        assert bad.is_closed()
        assert node.principals == ["User:bob"]


def test_handshake_v0_raw_tokens() -> None:
    with sasl_node(sasl_security()) as (node, port):
        client = RawClient(port)
        assert client.request(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
        token = plain_token("alice", "alice-secret")
        client.sock.sendall(struct.pack(">i", len(token)) + token)
        assert client.recv_frame() == b""  # PLAIN's empty server token, size-prefixed
        assert metadata_served(client)
        assert node.principals == ["User:alice"]
        failing = RawClient(port)
        assert failing.request(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
        token = plain_token("alice", "nope")
        failing.sock.sendall(struct.pack(">i", len(token)) + token)
        assert failing.is_closed()


def test_sessions_of_old_clients_do_not_expire() -> None:
    """SaslAuthenticate v0 (and raw v0 tokens) cannot re-authenticate: no lifetime (Kafka)."""
    with sasl_node(sasl_security(max_reauth_ms=200)) as (node, port):
        client = RawClient(port)
        assert login(client, "alice", "alice-secret", version=0).error_code == 0
        time.sleep(0.3)
        assert metadata_served(client)
        assert node.principals == ["User:alice"]


def test_expired_session_is_closed_unless_it_reauthenticates() -> None:
    with sasl_node(sasl_security(max_reauth_ms=300)) as (node, port):
        lapsed = RawClient(port)
        renewed = RawClient(port)
        assert login(lapsed, "alice", "alice-secret").session_lifetime_ms == 300
        assert login(renewed, "alice", "alice-secret").error_code == 0
        time.sleep(0.4)
        assert login(renewed, "alice", "alice-secret").error_code == 0  # KIP-368
        assert metadata_served(renewed)
        assert not metadata_served(lapsed)
        assert lapsed.is_closed()
        switch = RawClient(port)
        assert login(switch, "alice", "alice-secret").error_code == 0
        changed = login(switch, "bob", "bob-secret")
        assert changed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert switch.is_closed()
        assert node.principals == ["User:alice"]


def test_sasl_apis_on_a_plaintext_listener_answer_illegal_state() -> None:
    with sasl_node(ListenerSecurity()) as (node, port):
        client = RawClient(port)
        assert client.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == (
            ErrorCode.ILLEGAL_SASL_STATE
        )
        assert metadata_served(client)
        assert node.principals == ["User:ANONYMOUS"]


@pytest.mark.parametrize("password,ok", [("alice-secret", True), ("wrong", False)])
def test_confluent_kafka_over_sasl_plaintext(tmp_path: Path, password: str, ok: bool) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    port = free_port()
    broker = topic_broker(tmp_path / "log", port, TOPIC)
    errors: list[Any] = []
    seen = threading.Event()

    def on_error(err: Any) -> None:
        errors.append(err)
        seen.set()

    with serving(broker.dispatcher, sasl_security(delay_ms=50), port=port):
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "alice",
                "sasl.password": password,
                "error_cb": on_error,
                "message.timeout.ms": 5000,
            }
        )
        producer.produce(TOPIC, b"hello")
        remaining = producer.flush(8)
        if ok:
            assert remaining == 0 and not errors
            assert broker.replicas.partitions[(TOPIC, 0)].log_end_offset == 1
        else:
            assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), (
                errors
            )
            assert broker.replicas.partitions[(TOPIC, 0)].log_end_offset == 0


SCRAM = {
    m: {"carol": scram_credential(m, "carol-secret")} for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
}


def scram_security(tls: Any = None) -> ListenerSecurity:
    def server(mechanism: str) -> Any:
        return lambda: ScramServer(mechanism, SCRAM[mechanism].get)

    return ListenerSecurity(
        name="SASL_SSL" if tls else "SASL_PLAINTEXT",
        protocol=SecurityProtocol.SASL_SSL if tls else SecurityProtocol.SASL_PLAINTEXT,
        ssl_context=tls,
        sasl_mechanisms=("PLAIN", *SCRAM),
        sasl_servers={"PLAIN": lambda: PlainServer(USERS.get)} | {m: server(m) for m in SCRAM},
        failed_authentication_delay_ms=0,
    )


@pytest.mark.parametrize("mechanism", sorted(SCRAM))
def test_scram_exchange_with_the_reference_client(mechanism: str) -> None:
    with sasl_node(scram_security()) as (node, port):
        client = RawClient(port)
        handshake = client.request(SaslHandshakeRequest(mechanism=mechanism), 1)
        assert handshake.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        scram = ScramClient(mechanism, "carol", "carol-secret")
        token: bytes | None = scram.first()
        while token is not None:
            answer = client.request(SaslAuthenticateRequest(auth_bytes=token), 2)
            assert answer.error_code == 0
            token = scram.step(answer.auth_bytes)
        assert scram.complete and metadata_served(client)
        assert node.principals == ["User:carol"]
        wrong = RawClient(port)
        wrong.request(SaslHandshakeRequest(mechanism=mechanism), 1)
        bad = ScramClient(mechanism, "carol", "not-her-password")
        answer = wrong.request(SaslAuthenticateRequest(auth_bytes=bad.first()), 2)
        assert answer.error_code == 0  # the server-first message
        proof = bad.step(answer.auth_bytes)  # the client-final message, a wrong proof
        assert proof is not None
        final = wrong.request(SaslAuthenticateRequest(auth_bytes=proof), 2)
        assert final.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert wrong.is_closed()


@pytest.mark.parametrize(
    "mechanism,user,password,ok",
    [
        ("SCRAM-SHA-256", "carol", "carol-secret", True),
        ("SCRAM-SHA-512", "carol", "carol-secret", True),
        ("PLAIN", "alice", "alice-secret", True),
        ("SCRAM-SHA-512", "carol", "wrong", False),
    ],
)
def test_confluent_kafka_over_sasl_ssl(
    tmp_path: Path, mechanism: str, user: str, password: str, ok: bool
) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from secure_listener import make_pki, server_context

    pki = make_pki(tmp_path)
    port = free_port()
    broker = topic_broker(tmp_path / "log", port, TOPIC)
    errors: list[Any] = []
    with serving(broker.dispatcher, scram_security(server_context(pki)), port=port):
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(pki.ca),
                "sasl.mechanism": mechanism,
                "sasl.username": user,
                "sasl.password": password,
                "error_cb": errors.append,
                "message.timeout.ms": 5000,
            }
        )
        producer.produce(TOPIC, b"hello")
        remaining = producer.flush(8)
        end = broker.replicas.partitions[(TOPIC, 0)].log_end_offset
        if ok:
            assert remaining == 0 and not errors and end == 1
        else:
            codes = {e.code() for e in errors}
            assert confluent_kafka.KafkaError._AUTHENTICATION in codes, errors
            assert end == 0


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("client", ["kafka_python", "aiokafka"])
def test_python_clients_over_sasl_plaintext(tmp_path: Path, client: str, mechanism: str) -> None:
    """kafka-python and aiokafka log in (and fail to with a wrong password) and produce."""
    user, password = (
        ("alice", "alice-secret") if mechanism == "PLAIN" else ("carol", "carol-secret")
    )
    port = free_port()
    broker = topic_broker(tmp_path / "log", port, TOPIC)
    with serving(broker.dispatcher, scram_security(), port=port):
        assert produce_with(client, port, mechanism, user, password)
        assert not produce_with(client, port, mechanism, user, "wrong")
    assert broker.replicas.partitions[(TOPIC, 0)].log_end_offset == 1


def produce_with(client: str, port: int, mechanism: str, user: str, password: str) -> bool:
    settings = {
        "bootstrap_servers": f"127.0.0.1:{port}",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }
    if client == "kafka_python":
        import kafka
        import kafka.errors

        try:
            producer = kafka.KafkaProducer(
                **settings,
                enable_idempotence=False,  # no controller here to allocate producer ids
                request_timeout_ms=5000,
                bootstrap_timeout_ms=3000,  # it retries a failed login until then
            )
        except (kafka.errors.KafkaError, OSError):
            return False
        producer.send(TOPIC, b"hello").get(timeout=10)
        producer.close()
        return True
    import asyncio

    import aiokafka
    import aiokafka.errors

    async def run() -> bool:
        producer = aiokafka.AIOKafkaProducer(**settings, request_timeout_ms=5000)
        try:
            await producer.start()
        except (aiokafka.errors.KafkaError, OSError):
            await producer.stop()
            return False
        try:
            await producer.send_and_wait(TOPIC, b"hello")
        finally:
            await producer.stop()
        return True

    return asyncio.run(run())


def test_librdkafka_reauthenticates_before_its_session_expires(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """KIP-368 with a real client: sessions of 1 s, a producer sending for 3.5 s keeps its
    connection by re-authenticating (SaslHandshake + SaslAuthenticate on an authenticated
    session); no request reaches the broker on an expired session."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    port = free_port()
    broker = topic_broker(tmp_path / "log", port, TOPIC)
    security = replace(scram_security(), max_reauth_ms=1000)
    errors: list[Any] = []
    with serving(broker.dispatcher, security, port=port):
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "carol",
                "sasl.password": "carol-secret",
                "error_cb": errors.append,
                "linger.ms": 0,
            }
        )
        sent = 0
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            producer.produce(TOPIC, b"tick")
            sent += 1
            producer.poll(0.1)
        assert producer.flush(10) == 0
        assert not errors, errors
        assert broker.replicas.partitions[(TOPIC, 0)].log_end_offset == sent
    text = caplog.text
    assert "expired" not in text, "a request came on an expired session"
    logins = broker.metrics.request_counter("SaslAuthenticate", 0)
    assert logins._value.get() >= 2 * 3, "one SCRAM login (2 tokens) per second at least"


def test_the_controller_listener_serves_the_sasl_apis() -> None:
    from kraft.node.controller_apis import ControllerApis

    specs = {h.api_key: (h.min_version, h.max_version) for h in ControllerApis(None, 1, {}).specs()}  # type: ignore[arg-type]
    assert specs[17] == (0, 1) and specs[36] == (0, 2)
