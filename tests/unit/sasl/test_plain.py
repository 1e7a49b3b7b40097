"""SASL PLAIN (RFC 4616) server and client."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_protocol.sasl import (
    GENERIC_FAILURE,
    MECHANISMS,
    PlainClient,
    PlainServer,
    SaslAuthenticationError,
    ScramClient,
    ScramCredential,
    ScramServer,
    client_for,
    scram_credential,
    server_for,
)

USERS = {"admin": "admin-secret", "alice": "alice-secret"}


def test_client_server_round_trip() -> None:
    server, client = PlainServer(USERS.get), PlainClient("alice", "alice-secret")
    assert client.first() == b"\0alice\0alice-secret"
    assert server.step(client.first()) == b""
    assert client.step(b"") is None
    assert server.complete and client.complete and server.authorization_id == "alice"


@given(
    user=st.text(min_size=1).filter(lambda s: "\0" not in s),
    password=st.text(min_size=1).filter(lambda s: "\0" not in s),
)
def test_round_trip_any_user_and_password(user: str, password: str) -> None:
    server = PlainServer({user: password}.get)
    server.step(PlainClient(user, password).first())
    assert server.authorization_id == user


def test_authzid_equal_to_authcid_is_accepted() -> None:
    server = PlainServer(USERS.get)
    server.step(b"alice\0alice\0alice-secret")
    assert server.authorization_id == "alice"


def test_authzid_of_another_user_is_refused() -> None:
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        PlainServer(USERS.get).step(b"admin\0alice\0alice-secret")


@pytest.mark.parametrize(
    "token",
    [
        b"\0alice\0wrong",  # wrong password
        b"\0mallory\0alice-secret",  # unknown user
        b"\0alice\0",  # empty password
        b"\0\0alice-secret",  # empty user
        b"alice\0alice-secret",  # two fields
        b"\0alice\0alice-secret\0",  # four fields
        b"\0alice\0\xffsecret",  # not UTF-8
        b"\0alice\0" + b"x" * 5000,  # oversized
        b"",
    ],
)
def test_bad_tokens_fail_generically(token: bytes) -> None:
    server = PlainServer(USERS.get)
    with pytest.raises(SaslAuthenticationError) as raised:
        server.step(token)
    assert str(raised.value) == GENERIC_FAILURE and not server.complete


def test_a_second_token_is_refused_even_after_a_failure() -> None:
    server = PlainServer(USERS.get)
    with pytest.raises(SaslAuthenticationError):
        server.step(b"\0alice\0wrong")
    with pytest.raises(SaslAuthenticationError):
        server.step(b"\0alice\0alice-secret")
    assert not server.complete


@given(token=st.binary(max_size=200))
def test_garbage_only_ever_raises_sasl_errors(token: bytes) -> None:
    server = PlainServer(USERS.get)
    try:
        server.step(token)
    except SaslAuthenticationError:
        assert not server.complete
    else:
        assert server.authorization_id in USERS


def no_password(user: str) -> str | None:
    return None


def no_credential(user: str) -> ScramCredential | None:
    return None


def test_factories() -> None:
    assert MECHANISMS == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    cred = scram_credential("SCRAM-SHA-512", "pw")
    for mechanism in MECHANISMS:
        client = client_for(mechanism, "alice", "pw")
        server = server_for(mechanism, {"alice": "pw"}.get, {"alice": cred}.get)
        expected = (
            (PlainClient, PlainServer) if mechanism == "PLAIN" else (ScramClient, ScramServer)
        )
        assert isinstance(client, expected[0]) and isinstance(server, expected[1])
    client = client_for("SCRAM-SHA-512", "alice", "pw")
    server = server_for("SCRAM-SHA-512", no_password, {"alice": cred}.get)
    token: bytes | None = client.first()
    while token is not None:
        token = client.step(server.step(token))
    assert server.complete and client.complete
    for factory in (
        lambda: client_for("GSSAPI", "a", "b"),
        lambda: server_for("OAUTHBEARER", no_password, no_credential),
    ):
        with pytest.raises(ValueError, match="unsupported SASL mechanism"):
            factory()
