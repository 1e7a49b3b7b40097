"""Fuzz: garbage SaslHandshake / SaslAuthenticate frames and raw SASL tokens on a SASL
listener, and random bytes on a TLS listener, never crash the listener, never authenticate,
and never keep the next good client from being served."""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from secure_listener import (
    RawClient,
    client_context,
    make_pki,
    server_context,
    serving,
)
from test_sasl_listener import SCRAM, Node, login, metadata_served, scram_security

from broker.security.session import ListenerSecurity, SecurityProtocol
from kafka_protocol.messages import (
    ApiVersionsRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def sasl_port() -> Iterator[tuple[Node, int]]:
    node = Node()
    with serving(node.dispatcher, scram_security()) as (_, listener):
        yield node, listener.port


def closed_or_unauthenticated(client: RawClient) -> bool:
    """The connection may not serve Metadata: it is closed, or the request closes it."""
    client.sock.settimeout(2)
    return not metadata_served(client)


def good_client_served(port: int) -> bool:
    client = RawClient(port)
    try:
        return login(client, "alice", "alice-secret").error_code == 0 and metadata_served(client)
    finally:
        client.close()


@FUZZ
@given(mechanism=st.text(max_size=40), version=st.integers(0, 1))
def test_random_handshake_mechanisms(
    sasl_port: tuple[Node, int], mechanism: str, version: int
) -> None:
    node, port = sasl_port
    before = len(node.principals)
    client = RawClient(port)
    answer = client.request(SaslHandshakeRequest(mechanism=mechanism), version)
    if mechanism in ("PLAIN", *SCRAM):
        assert answer.error_code == 0
    else:
        assert answer.error_code != 0
    assert closed_or_unauthenticated(client)
    client.close()
    assert len(node.principals) == before
    assert good_client_served(port)


SCRAM_TOKENS = st.one_of(
    st.binary(max_size=300),
    st.builds(  # shaped like SCRAM messages, with random attributes
        lambda parts: ",".join(parts).encode(),
        st.lists(
            st.sampled_from(["n", "y", "p=x", "a=carol", "n=carol", "r=abc", "c=biws"])
            | st.text(max_size=20),
            max_size=6,
        ),
    ),
)


@FUZZ
@given(
    mechanism=st.sampled_from(["PLAIN", *SCRAM]),
    tokens=st.lists(SCRAM_TOKENS, min_size=1, max_size=3),
    version=st.integers(0, 2),
)
def test_random_authenticate_tokens(
    sasl_port: tuple[Node, int], mechanism: str, tokens: list[bytes], version: int
) -> None:
    node, port = sasl_port
    before = len(node.principals)
    client = RawClient(port)
    client.request(SaslHandshakeRequest(mechanism=mechanism), 1)
    for step, token in enumerate(tokens):
        try:
            answer = client.request(SaslAuthenticateRequest(auth_bytes=token), version)
        except (ConnectionError, OSError, struct.error):
            break
        if mechanism == "PLAIN" or step > 0:  # a SCRAM client-first may well be answered
            assert answer.error_code != 0, "garbage never authenticates"
    assert closed_or_unauthenticated(client)
    client.close()
    assert len(node.principals) == before
    assert good_client_served(port)


@FUZZ
@given(
    handshake_version=st.sampled_from([None, 0, 1]),
    frames=st.lists(st.binary(max_size=200), min_size=1, max_size=4),
)
def test_random_frames_before_authentication(
    sasl_port: tuple[Node, int], handshake_version: int | None, frames: list[bytes]
) -> None:
    """Garbage Kafka frames (or raw tokens after a v0 handshake) on a fresh connection."""
    node, port = sasl_port
    before = len(node.principals)
    client = RawClient(port)
    if handshake_version is not None:
        client.request(SaslHandshakeRequest(mechanism="PLAIN"), handshake_version)
    try:
        for frame in frames:
            client.sock.sendall(struct.pack(">i", len(frame)) + frame)
    except OSError:
        pass
    assert closed_or_unauthenticated(client)
    client.close()
    assert len(node.principals) == before
    assert good_client_served(port)


@pytest.fixture(scope="module")
def tls_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, ssl.SSLContext]]:
    pki = make_pki(Path(tmp_path_factory.mktemp("fuzz-pki")))
    security = ListenerSecurity(
        name="SSL", protocol=SecurityProtocol.SSL, ssl_context=server_context(pki)
    )
    with serving(Node().dispatcher, security) as (_, listener):
        yield listener.port, client_context(pki)


@FUZZ
@given(data=st.binary(min_size=1, max_size=2000), tls_prefix=st.booleans())
def test_random_bytes_on_a_tls_listener(
    tls_port: tuple[int, ssl.SSLContext], data: bytes, tls_prefix: bool
) -> None:
    port, context = tls_port
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        with contextlib.suppress(OSError):  # the listener may have closed already
            raw.sendall((b"\x16\x03\x01" if tls_prefix else b"") + data)
            raw.shutdown(socket.SHUT_WR)
        raw.settimeout(5)
        while True:  # whatever the listener answers (an alert), it then closes
            try:
                if not raw.recv(4096):
                    break
            except ConnectionError:
                break
    finally:
        raw.close()
    good = RawClient(port, context)
    assert good.request(ApiVersionsRequest(), 3).error_code == 0
    good.close()
