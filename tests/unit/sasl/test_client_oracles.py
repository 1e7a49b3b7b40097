"""Our SASL servers against the SASL code of real Kafka clients (kafka-python, aiokafka).

The clients' own mechanism classes produce the tokens and check our ServerSignature, so a
login here is the exchange those clients make against a broker, minus the socket.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from aiokafka.conn import SaslPlainAuthenticator, ScramAuthenticator
from kafka.net.sasl.plain import SaslMechanismPlain
from kafka.net.sasl.scram import SaslMechanismScram

from kafka_protocol.sasl import (
    PlainServer,
    SaslAuthenticationError,
    ScramCredential,
    ScramServer,
    scram_credential,
)

SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
PASSWORDS = {"alice": "alice-secret", "bob=,x": "p,=ä"}


def scram_lookup(mechanism: str) -> Any:
    credentials = {user: scram_credential(mechanism, pw) for user, pw in PASSWORDS.items()}

    def lookup(user: str) -> ScramCredential | None:
        return credentials.get(user)

    return lookup


def kafka_python_login(mechanism: Any, server: PlainServer | ScramServer) -> None:
    while not mechanism.is_done():
        mechanism.receive(server.step(mechanism.auth_bytes()))


def aiokafka_login(authenticator: Any, server: PlainServer | ScramServer) -> None:
    steps: Generator[tuple[bytes, bool], bytes, None] = authenticator._authenticator
    payload, _ = next(steps)
    with pytest.raises(StopIteration):
        while True:
            payload, _ = steps.send(server.step(payload))


@pytest.mark.parametrize("mechanism", SCRAM)
def test_kafka_python_scram(mechanism: str) -> None:
    server = ScramServer(mechanism, scram_lookup(mechanism))
    client = SaslMechanismScram(
        sasl_plain_username="alice", sasl_plain_password="alice-secret", sasl_mechanism=mechanism
    )
    kafka_python_login(client, server)  # kafka-python raises if our signature is wrong
    assert client.is_authenticated() and server.authorization_id == "alice"


@pytest.mark.parametrize("mechanism", SCRAM)
@pytest.mark.parametrize("user", list(PASSWORDS))
def test_aiokafka_scram(mechanism: str, user: str) -> None:
    server = ScramServer(mechanism, scram_lookup(mechanism))
    client = ScramAuthenticator(
        loop=None,
        sasl_plain_username=user,
        sasl_plain_password=PASSWORDS[user],
        sasl_mechanism=mechanism,
    )
    aiokafka_login(client, server)
    assert server.complete and server.authorization_id == user


@pytest.mark.parametrize("mechanism", SCRAM)
def test_real_clients_with_a_wrong_password_are_refused(mechanism: str) -> None:
    client = SaslMechanismScram(
        sasl_plain_username="alice", sasl_plain_password="guess", sasl_mechanism=mechanism
    )
    server = ScramServer(mechanism, scram_lookup(mechanism))
    with pytest.raises(SaslAuthenticationError):
        kafka_python_login(client, server)
    assert not server.complete


def test_plain_from_both_clients() -> None:
    server = PlainServer(PASSWORDS.get)
    kafka_python_login(
        SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="alice-secret"),
        server,
    )
    assert server.authorization_id == "alice"
    server = PlainServer(PASSWORDS.get)
    aiokafka_login(
        SaslPlainAuthenticator(loop=None, sasl_plain_username="bob=,x", sasl_plain_password="p,=ä"),
        server,
    )
    assert server.authorization_id == "bob=,x"
    with pytest.raises(SaslAuthenticationError):
        PlainServer(PASSWORDS.get).step(
            SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="x").auth_bytes()
        )
