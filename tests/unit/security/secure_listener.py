"""A real RequestDispatcher + KafkaListener with a ListenerSecurity, in a background event
loop, for the security tests; a test CA and certificates made with ``cryptography``."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import socket
import ssl
import struct
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from broker.broker import Broker, BrokerConfig
from broker.connection import Dispatcher
from broker.security.session import ListenerSecurity
from broker.server import KafkaListener, ListenerLimits
from broker.storage import FileStorage
from kafka_protocol._codec import Request
from kafka_protocol.framing import decode_response, encode_request
from kafka_protocol.messages import RequestHeader
from kafka_protocol.metadata import PartitionRecord, TopicRecord
from kafka_protocol.types import BrokerId, TopicName
from metadata_log.delta import MetadataDelta
from metadata_log.image import ClusterImage


@dataclass(frozen=True)
class Pki:
    ca: Path  # CA certificate (truststore)
    server: Path  # key + chain of 127.0.0.1
    client: Path  # key + chain of CN=alice,O=test


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_pki(directory: Path) -> Pki:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(name: x509.Name, path: Path) -> Path:
        key = ec.generate_private_key(ec.SECP256R1())

        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        path.write_bytes(_key_pem(key) + cert.public_bytes(serialization.Encoding.PEM))
        return path

    ca_path = directory / "ca.pem"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    server = leaf(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]), directory / "server.pem"
    )
    client = leaf(
        x509.Name(
            [
                x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "test"),
            ]
        ),
        directory / "client.pem",
    )
    return Pki(ca_path, server, client)


def server_context(pki: Pki, client_auth: ssl.VerifyMode = ssl.CERT_NONE) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki.server)
    ctx.load_verify_locations(pki.ca)
    ctx.verify_mode = client_auth
    return ctx


def client_context(pki: Pki, with_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki.ca)
    if with_cert:
        ctx.load_cert_chain(pki.client)
    return ctx


class LoopThread:
    """An event loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@contextlib.contextmanager
def serving(
    dispatcher: Dispatcher,
    security: ListenerSecurity,
    limits: ListenerLimits | None = None,
    port: int = 0,
) -> Iterator[tuple[LoopThread, KafkaListener]]:
    """``dispatcher`` behind a listener with ``security`` on 127.0.0.1 (ephemeral port)."""
    runner = LoopThread()
    listener = runner.call(
        lambda: KafkaListener(dispatcher, "127.0.0.1", port, limits, security=security)
    )
    try:
        yield runner, listener
    finally:
        runner.call(listener.close)
        runner.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _NoController:
    pass


def topic_broker(log_dir: Path, port: int, topic: str, partitions: int = 1) -> Broker:
    """A real broker (file storage) leading ``topic``, advertising 127.0.0.1:``port``."""
    config = BrokerConfig(1, "127.0.0.1", 0, "127.0.0.1", port, log_dir, auto_topic_creation=False)
    broker = Broker(config, FileStorage(), _NoController(), ClusterImage.EMPTY, "tls-test")  # type: ignore[arg-type]
    topic_id = uuid.uuid4()
    records: list[Any] = [TopicRecord(name=TopicName(topic), topic_id=topic_id)]
    for index in range(partitions):
        records.append(
            PartitionRecord(
                partition_id=index,
                topic_id=topic_id,
                replicas=[BrokerId(1)],
                isr=[BrokerId(1)],
                leader=BrokerId(1),
                leader_epoch=0,
                partition_epoch=0,
            )
        )
    delta = MetadataDelta(broker.image).replay_all(records)
    broker.on_metadata(delta, delta.apply())
    return broker


class RawClient:
    """A blocking Kafka connection (optionally TLS) speaking the project's codecs."""

    def __init__(self, port: int, context: ssl.SSLContext | None = None) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = context.wrap_socket(sock, server_hostname="localhost") if context else sock
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, body: Request, version: int) -> int:
        self.correlation += 1
        assert body.API_KEY is not None
        header = RequestHeader(
            request_api_key=body.API_KEY,
            request_api_version=version,
            correlation_id=self.correlation,
            client_id="security-test",
        )
        self.sock.sendall(b"".join(bytes(c) for c in encode_request(header, body)))  # type: ignore[arg-type]
        return self.correlation

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exactly(4))
        return self.recv_exactly(size)

    def recv_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            data = self.sock.recv(n - len(out))
            if not data:
                raise ConnectionError("closed by the broker")
            out += data
        return bytes(out)

    def request(self, body: Request, version: int) -> Any:
        sent = self.send(body, version)
        assert body.API_KEY is not None
        correlation, response = decode_response(body.API_KEY, version, self.recv_frame())
        assert correlation == sent
        return response

    def is_closed(self) -> bool:
        """True once the broker has closed the connection (EOF, reset or TLS alert)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, ssl.SSLError):
            return True
        except TimeoutError:
            return False
