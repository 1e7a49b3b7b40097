"""Fuzzing the SASL exchange of a real SASL_PLAINTEXT listener: random and mutated
SaslHandshake / SaslAuthenticate frames, pure garbage and truncated frames.

Each example opens a fresh connection, sends one to four frames and then a Metadata request,
and reads what comes back until the broker closes the connection or goes quiet.  Whatever
the frames were, the node must stay up and the Metadata request must never be answered: on a
SASL listener Kafka serves nothing but ApiVersions, SaslHandshake and SaslAuthenticate before
a successful authentication (KIP-43, KIP-152), and none of the frames carries a valid
credential (the seed tokens name user ``alice`` with wrong passwords or an incomplete SCRAM
exchange, so no byte-level mutation of them is a valid login).  After the examples a real
client (confluent-kafka, SASL PLAIN) still produces and reads back on the same listener.

``test_raw_login_then_metadata_is_answered`` is the control: the same harness with the right
password does see its Metadata answered, so the fuzz check can fail.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from integration.node_process import NodeProcess
from integration.raw_client import RawConnection
from kafka_protocol._codec import Request
from kafka_protocol.errors import ErrorCode
from kafka_protocol.framing import encode_request
from kafka_protocol.messages import (
    MetadataRequest,
    RequestHeader,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from kafka_protocol.sasl import ScramClient

pytestmark = pytest.mark.integration

USER, PASSWORD = "alice", "alice-secret"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'username="{USER}" password="{PASSWORD}" user_{USER}="{PASSWORD}";'
)
METADATA_CORRELATION_ID = 0x7EADBEEF
QUIET_S = 0.5  # no byte for this long after the Metadata request: the broker is waiting
MAX_FRAME_BYTES = 64 * 1024  # socket.request.max.bytes of the node under test


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(
        Path(tmp_path_factory.mktemp("sasl-fuzz")),
        overrides=(
            "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
            "connection.failed.authentication.delay.ms=20",
            f"socket.request.max.bytes={MAX_FRAME_BYTES}",
        ),
    ).start()
    if "SASL_PLAINTEXT" not in proc.listeners:
        proc.stop()
        pytest.fail(f"the READY line lists no SASL_PLAINTEXT listener: {proc.listeners}")
    add_scram_credentials(proc.listeners["SASL_PLAINTEXT"])
    yield proc
    assert proc.alive(), proc.log_tail()
    assert proc.stop() == 0, proc.log_tail()


def add_scram_credentials(address: str) -> None:
    """SCRAM-SHA-256/512 credentials for USER (AlterUserScramCredentials, logged in with PLAIN),
    so that fuzzed SCRAM exchanges get past the first message."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(
        {
            "bootstrap.servers": address,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
        }
    )
    # one request per mechanism: KRaft refuses a user twice in one request (DUPLICATE_RESOURCE)
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        upsert = UserScramCredentialUpsertion(
            USER, ScramCredentialInfo(mechanism, 4096), PASSWORD.encode()
        )
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)


# --- frames -------------------------------------------------------------------------------------


def request_frame(body: Request, version: int, correlation_id: int = 1) -> bytes:
    """A complete size-prefixed request built with the generated codecs."""
    assert body.API_KEY is not None
    header = RequestHeader(
        request_api_key=body.API_KEY,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id="sasl-fuzz",
    )
    return b"".join(bytes(c) for c in encode_request(header, body))  # type: ignore[arg-type]


MECHANISMS = st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "plain", ""])
WRONG_TOKENS = st.one_of(
    st.sampled_from(
        [
            f"\0{USER}\0wrong-password".encode(),
            f"{USER}\0{USER}\0{PASSWORD}x".encode(),
            f"\0{USER}\0".encode(),
            f"\0\0{PASSWORD}".encode(),
            f"n,,n={USER},r=fyko+d2lbbFgONRv9qkxdawL".encode(),
            f"n,a=admin,n={USER},r=".encode(),
            b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
            b"\xff\xfe\x00\xc3\x28",
            b"",
        ]
    ),
    st.binary(max_size=512),
    st.builds(lambda n: b"A" * n, st.integers(1024, 48 * 1024)),
)
HANDSHAKES = st.builds(
    lambda mech, v: request_frame(SaslHandshakeRequest(mechanism=mech), v),
    st.one_of(MECHANISMS, st.text(max_size=40)),
    st.integers(0, 1),
)
AUTHENTICATES = st.builds(
    lambda token, v: request_frame(SaslAuthenticateRequest(auth_bytes=token), v),
    WRONG_TOKENS,
    st.integers(0, 2),
)
WELL_FORMED = st.one_of(HANDSHAKES, AUTHENTICATES)


def mutate(draw: st.DrawFn, data: bytearray) -> None:
    """Flips, inserts, deletions and overwrites of ``data``, in place."""
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "set"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete" and data:
            del data[at : at + draw(st.integers(1, 8))]
        elif op == "set" and data:
            data[at] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A well-formed frame changed at the byte level; the size prefix is recomputed unless
    ``raw`` says otherwise."""
    frame = bytearray(draw(WELL_FORMED))
    raw = draw(st.booleans())
    data = frame if raw else frame[4:]
    mutate(draw, data)
    return bytes(data) if raw else struct.pack(">i", len(data)) + bytes(data)


GARBAGE = st.one_of(
    st.binary(min_size=1, max_size=256),  # no framing at all
    st.builds(lambda b: struct.pack(">i", len(b)) + b, st.binary(max_size=256)),
    st.sampled_from(
        [
            struct.pack(">i", -1),
            struct.pack(">i", 0),
            struct.pack(">i", 0x7FFFFFFF),
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello's first bytes
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        ]
    ),
)
ANY_FRAME = st.one_of(WELL_FORMED, mutated(), GARBAGE)


GOOD_HANDSHAKES = st.builds(
    lambda mech, v: request_frame(SaslHandshakeRequest(mechanism=mech), v),
    st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
    st.integers(0, 1),
)


@st.composite
def exchanges(draw: st.DrawFn) -> list[bytes]:
    """One to four frames, half the time after a valid SaslHandshake (so the mutated tokens
    reach the mechanism's server); the last frame may be cut short (the broker then waits)."""
    frames = draw(st.lists(GOOD_HANDSHAKES, max_size=1))
    frames += draw(st.lists(st.one_of(AUTHENTICATES, ANY_FRAME), min_size=1, max_size=3))
    if draw(st.integers(0, 4)) == 0:
        last = frames[-1]
        frames[-1] = last[: draw(st.integers(0, max(0, len(last) - 1)))]
    return frames


# --- the harness --------------------------------------------------------------------------------


def metadata_frame() -> bytes:
    return request_frame(MetadataRequest(topics=None), 1, METADATA_CORRELATION_ID)


def correlation_ids_until_closed(sock: socket.socket) -> list[int]:
    """Correlation ids of every response frame read until the broker closes the connection
    or stays quiet for ``QUIET_S`` (a frame cut short leaves it waiting for the rest)."""
    sock.settimeout(QUIET_S)
    buffer = bytearray()
    ids: list[int] = []
    while True:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError, BrokenPipeError):
            chunk = b""
        if not chunk:
            break
        buffer += chunk
        while len(buffer) >= 8:
            (size,) = struct.unpack_from(">i", buffer)
            if len(buffer) < 4 + size:
                break
            ids.append(struct.unpack_from(">i", buffer, 4)[0])
            del buffer[: 4 + size]
    return ids


def send_exchange(address: str, frames: list[bytes]) -> list[int]:
    """Send the frames and a Metadata request on a fresh connection; the correlation ids of
    the responses that came back."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            for frame in frames:
                sock.sendall(frame)
            sock.sendall(metadata_frame())
        return correlation_ids_until_closed(sock)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(frames=exchanges())
def test_fuzzed_sasl_frames_never_authenticate(node: NodeProcess, frames: list[bytes]) -> None:
    answered = send_exchange(node.listeners["SASL_PLAINTEXT"], frames)
    assert METADATA_CORRELATION_ID not in answered, "Metadata answered before authentication"
    assert node.alive(), node.log_tail()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    mechanism=st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
    password=st.sampled_from(["wrong-password", PASSWORD + "x", "", PASSWORD[:-1]]),
    change=st.booleans(),
    data=st.data(),
)
def test_fuzzed_scram_client_final_never_authenticates(
    node: NodeProcess, mechanism: str, password: str, change: bool, data: st.DataObject
) -> None:
    """A real SCRAM exchange up to the server-first message (so the nonce and salt are the
    server's), then a client-final message computed from a wrong password, changed at the
    byte level or not: the proof check, the attribute parsing and the nonce check are hit."""
    conn = RawConnection(node.listeners["SASL_PLAINTEXT"])
    try:
        handshake = conn.request(SaslHandshakeRequest(mechanism=mechanism), 1)
        assert handshake.error_code == ErrorCode.NONE
        client = ScramClient(mechanism, USER, password)
        first = conn.request(SaslAuthenticateRequest(auth_bytes=client.first()), 2)
        assert first.error_code == ErrorCode.NONE, first
        final = bytearray(client.step(bytes(first.auth_bytes)) or b"")
        if change:
            mutate(data.draw, final)
        frames = [request_frame(SaslAuthenticateRequest(auth_bytes=bytes(final)), 2)]
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            for frame in [*frames, metadata_frame()]:
                conn.sock.sendall(frame)
        answered = correlation_ids_until_closed(conn.sock)
    finally:
        conn.close()
    assert METADATA_CORRELATION_ID not in answered, "Metadata answered after a wrong proof"
    assert node.alive(), node.log_tail()


def test_raw_login_then_metadata_is_answered(node: NodeProcess) -> None:
    """The control: SaslHandshake v1 + SaslAuthenticate with the right password, then the same
    Metadata request is answered."""
    handshake = request_frame(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    token = f"\0{USER}\0{PASSWORD}".encode()
    authenticate = request_frame(SaslAuthenticateRequest(auth_bytes=token), 2)
    answered = send_exchange(node.listeners["SASL_PLAINTEXT"], [handshake, authenticate])
    assert METADATA_CORRELATION_ID in answered


def test_wrong_password_is_an_authentication_error(node: NodeProcess) -> None:
    host, port = node.listeners["SASL_PLAINTEXT"].rsplit(":", 1)
    conn = RawConnection(f"{host}:{port}")
    try:
        handshake = conn.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        assert handshake.error_code == ErrorCode.NONE
        assert "PLAIN" in handshake.mechanisms
        token = f"\0{USER}\0wrong-password".encode()
        response = conn.request(SaslAuthenticateRequest(auth_bytes=token), 2)
        assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert conn.is_closed_by_peer()
    finally:
        conn.close()


def test_good_client_produces_after_the_fuzzing(node: NodeProcess) -> None:
    """Runs after the fuzz test in file order: the listener still serves a real client."""
    from confluent_kafka import Consumer, Producer

    config = {
        "bootstrap.servers": node.listeners["SASL_PLAINTEXT"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
    }
    topic = "after-fuzz"
    producer = Producer({**config, "allow.auto.create.topics": True})
    delivered: list[str | None] = []
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, _m: delivered.append(e))
    assert producer.flush(30) == 0
    assert delivered == [None] * 10
    consumer = Consumer({**config, "group.id": "after-fuzz", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values = []
    try:
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            if len(values) == 10:
                break
    finally:
        consumer.close()
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(10))
    assert node.alive()
