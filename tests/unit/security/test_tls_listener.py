"""TLS on a Kafka listener: a real broker's dispatcher behind a KafkaListener with an SSL
ListenerSecurity, a raw ``ssl`` client and confluent-kafka (librdkafka) as clients."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from secure_listener import (
    Pki,
    RawClient,
    client_context,
    free_port,
    make_pki,
    server_context,
    serving,
    topic_broker,
)

from broker.connection import ListenerLimits, Reply
from broker.security.principal import PrincipalMapper
from broker.security.session import ListenerSecurity, SecurityProtocol, Session
from kafka_protocol._codec import Chunk, FileRegion
from kafka_protocol.framing import encode_response
from kafka_protocol.messages import ApiVersionsRequest, ApiVersionsResponse

TOPIC = "secure"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def ssl_security(pki: Pki, client_auth: ssl.VerifyMode = ssl.CERT_NONE) -> ListenerSecurity:
    return ListenerSecurity(
        name="SSL",
        protocol=SecurityProtocol.SSL,
        ssl_context=server_context(pki, client_auth),
        principal_of_certificate=PrincipalMapper().principal_of,
    )


class Recorder:
    """A dispatcher answering ApiVersions (api key 18) and remembering each session."""

    def __init__(self, region: tuple[str, int] | None = None) -> None:
        self.sessions: list[Session] = []
        self.region = region  # api key 1 answers (size, file bytes) from this file

    def dispatch(self, frame: bytes | bytearray, session: Session) -> Reply:
        self.sessions.append(session)
        correlation = frame[4:8]
        if self.region is not None and frame[:2] == b"\x00\x01":
            path, size = self.region
            fd = os.open(path, os.O_RDONLY)
            return [struct.pack(">i", 4 + size) + correlation, FileRegion(fd, 0, size)]
        (correlation_id,) = struct.unpack(">i", correlation)
        return encode_response(0, correlation_id, ApiVersionsResponse())


def api_versions_ok(client: RawClient) -> bool:
    return bool(client.request(ApiVersionsRequest(), 0).error_code == 0)


@pytest.fixture
def ssl_broker(pki: Pki, tmp_path: Path) -> Iterator[int]:
    port = free_port()
    broker = topic_broker(tmp_path / "log", port, TOPIC)
    with serving(broker.dispatcher, ssl_security(pki), port=port):
        yield port


def test_confluent_kafka_produces_and_consumes_over_ssl(ssl_broker: int, pki: Pki) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    common = {
        "bootstrap.servers": f"127.0.0.1:{ssl_broker}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
    }
    producer = confluent_kafka.Producer({**common, "linger.ms": 5})
    values = [f"value-{i}".encode() * 50 for i in range(500)]
    for v in values:
        producer.produce(TOPIC, v)
    assert producer.flush(20) == 0
    consumer = confluent_kafka.Consumer({**common, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < len(values) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert got == values


def test_large_file_region_over_tls_is_exact(pki: Pki, tmp_path: Path) -> None:
    size = 5 * 1024 * 1024 + 12345  # many pread pieces, not a multiple of one
    data = os.urandom(size)
    path = tmp_path / "segment"
    path.write_bytes(data)
    with serving(Recorder((str(path), size)), ssl_security(pki)) as (_, listener):
        client = RawClient(listener.port, client_context(pki))
        client.sock.sendall(struct.pack(">ihhi", 8, 1, 0, 77))  # "api key 1", correlation 77
        frame = client.recv_frame()
        assert frame[:4] == struct.pack(">i", 77)
        assert frame[4:] == data
        assert api_versions_ok(client), "the connection serves the next request"
        client.close()


def test_client_certificate_becomes_the_principal(pki: Pki) -> None:
    """ssl.principal.mapping.rules=DEFAULT: the distinguished name as Java prints it."""
    recorder = Recorder()
    security = ssl_security(pki, ssl.CERT_REQUIRED)
    with serving(recorder, security) as (_, listener):
        client = RawClient(listener.port, client_context(pki, with_cert=True))
        assert api_versions_ok(client)
        # RFC 2253 order (last RDN first): the test certificate's subject is CN=alice, O=test
        assert recorder.sessions[-1].principal == "User:O=test,CN=alice"
        client.close()


def test_missing_client_certificate_is_refused_and_logged(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "broker.server")
    security = ssl_security(pki, ssl.CERT_REQUIRED)
    with serving(Recorder(), security) as (_, listener):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            client = RawClient(listener.port, client_context(pki))
            client.request(ApiVersionsRequest(), 0)  # TLS 1.3: the alert comes after
        good = RawClient(listener.port, client_context(pki, with_cert=True))
        assert api_versions_ok(good)
        good.close()
    failures = [r.getMessage() for r in caplog.records if "TLS handshake failed" in r.getMessage()]
    assert len(failures) == 1 and "certificate" in failures[0].lower()


def refused_client_sees(port: int, context: ssl.SSLContext, follow_bytes: int) -> str:
    """A TLS 1.3 client without a certificate finishes its side of the handshake and, in the
    same write as its Finished, sends ``follow_bytes`` of application data; then reads.  What
    it sees: the alert's reason, or the socket error that replaced it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                sock.sendall(outgoing.read())
                incoming.write(sock.recv(65536))
        tls.write(b"\0" * follow_bytes)
        sock.sendall(outgoing.read())  # Finished and the data: more than the broker reads at once
        while True:
            data = sock.recv(65536)
            if not data:
                return "closed without an alert"
            incoming.write(data)
            with contextlib.suppress(ssl.SSLWantReadError):
                tls.read(65536)
    except ssl.SSLError as exc:
        return str(exc.reason)
    except OSError as exc:
        return type(exc).__name__
    finally:
        sock.close()


def test_the_refusal_reaches_the_client_as_a_tls_alert_not_a_reset(pki: Pki) -> None:
    """Closed at once with the client's data unread, the connection would be reset, and a
    reset makes the client's kernel drop the alert (librdkafka then reports a transport
    failure instead of the TLS error).  The broker drains and closes after
    connection.failed.authentication.delay.ms: the alert arrives."""
    security = ssl_security(pki, ssl.CERT_REQUIRED)
    with serving(Recorder(), security) as (_, listener):
        seen = {refused_client_sees(listener.port, client_context(pki), 1 << 20) for _ in range(5)}
    assert seen == {"TLSV13_ALERT_CERTIFICATE_REQUIRED"}


def test_plaintext_on_a_tls_listener_is_closed_with_a_clear_line(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "broker.server")
    with serving(Recorder(), ssl_security(pki)) as (_, listener):
        plain = RawClient(listener.port)
        plain.send(ApiVersionsRequest(), 0)
        assert plain.is_closed()
        good = RawClient(listener.port, client_context(pki))
        assert api_versions_ok(good)
        good.close()
    assert any("looks like plaintext on a TLS listener" in r.getMessage() for r in caplog.records)


def test_tls_on_a_plaintext_listener_is_closed_with_a_clear_line(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "broker.server")
    with serving(Recorder(), ListenerSecurity()) as (_, listener):
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            RawClient(listener.port, client_context(pki))
        plain = RawClient(listener.port)
        assert api_versions_ok(plain)
        plain.close()
    assert any("looks like TLS on a plaintext listener" in r.getMessage() for r in caplog.records)


def test_a_stalled_handshake_is_closed_after_the_bound(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "broker.server")
    limits = ListenerLimits(tls_handshake_timeout_ms=300)
    with serving(Recorder(), ssl_security(pki), limits) as (runner, listener):
        stalled = socket.create_connection(("127.0.0.1", listener.port), timeout=5)
        stalled.sendall(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
        start = time.monotonic()
        assert stalled.recv(1) == b""
        assert 0.2 < time.monotonic() - start < 4
        assert runner.call(lambda: listener.connection_count) == 0
        stalled.close()
    assert any("not completed within 300 ms" in r.getMessage() for r in caplog.records)


def test_tls_pending_bytes_are_read_without_new_readability(pki: Pki) -> None:
    """Many pipelined requests in one TLS write: all are answered, though OpenSSL holds the
    decrypted bytes beyond the first read (the socket shows no more readability)."""
    with serving(Recorder(), ssl_security(pki)) as (_, listener):
        client = RawClient(listener.port, client_context(pki))
        frames: list[Chunk] = []
        for correlation in range(2000):
            frames.append(struct.pack(">ihhih", 10, 18, 0, correlation, -1))
        client.sock.sendall(b"".join(bytes(f) for f in frames))  # type: ignore[arg-type]
        for correlation in range(2000):
            assert client.recv_frame()[:4] == struct.pack(">i", correlation)
        client.close()
