"""SCRAM-SHA-256/512 server and client: RFC 7677's vector, round trips, and every failure."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_protocol.sasl import (
    GENERIC_FAILURE,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SaslAuthenticationError,
    ScramClient,
    ScramCredential,
    ScramServer,
    credential_of_salted_password,
    scram_credential,
    verify_scram_password,
)
from kafka_protocol.sasl.scram import AUTHZID_MISMATCH

SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# RFC 7677 section 3: user "user", password "pencil"
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_NONCE = RFC_CLIENT_NONCE + RFC_SERVER_NONCE
RFC_EXCHANGE = (
    b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    f"r={RFC_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode(),
    f"c=biws,r={RFC_NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode(),
    b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
)
CREDENTIALS: dict[tuple[str, str], ScramCredential] = {}


def credential(mechanism: str, password: str) -> ScramCredential:
    """Cached per (mechanism, password): PBKDF2 at 4096 iterations is the slow part."""
    key = (mechanism, password)
    if key not in CREDENTIALS:
        CREDENTIALS[key] = scram_credential(mechanism, password)
    return CREDENTIALS[key]


def server(mechanism: str, users: dict[str, str]) -> ScramServer:
    return ScramServer(
        mechanism, lambda user: credential(mechanism, users[user]) if user in users else None
    )


def exchange(client: ScramClient, server: ScramServer) -> None:
    final = server.step(client.step(server.step(client.first())) or b"")
    assert client.step(final) is None


def rfc_server() -> ScramServer:
    stored = scram_credential("SCRAM-SHA-256", "pencil", salt=RFC_SALT, iterations=4096)
    return ScramServer("SCRAM-SHA-256", {"user": stored}.get, nonce=RFC_SERVER_NONCE)


def test_rfc7677_exchange_exact_bytes() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    srv = rfc_server()
    assert client.first() == RFC_EXCHANGE[0]
    assert srv.step(RFC_EXCHANGE[0]) == RFC_EXCHANGE[1]
    assert client.step(RFC_EXCHANGE[1]) == RFC_EXCHANGE[2]
    assert srv.step(RFC_EXCHANGE[2]) == RFC_EXCHANGE[3]
    assert client.step(RFC_EXCHANGE[3]) is None
    assert client.complete and srv.complete and srv.authorization_id == "user"


def test_rfc7677_client_refuses_a_forged_server_signature() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.first()
    client.step(RFC_EXCHANGE[1])
    forged = b"v=" + base64.b64encode(bytes(32))
    with pytest.raises(SaslAuthenticationError, match="signature"):
        client.step(forged)
    assert not client.complete


names = st.text(min_size=1, max_size=40).filter(lambda s: "\0" not in s)


@given(mechanism=st.sampled_from(SCRAM), user=names, password=st.text(max_size=40))
def test_round_trip_any_user_and_password(mechanism: str, user: str, password: str) -> None:
    srv = server(mechanism, {user: password})
    client = ScramClient(mechanism, user, password)
    exchange(client, srv)
    assert srv.complete and client.complete
    assert srv.authorization_id == user


@pytest.mark.parametrize("mechanism", SCRAM)
@pytest.mark.parametrize("user", ["a,b", "a=b", "=2C", ",=,", "ünï"])
def test_names_with_separators_are_escaped(mechanism: str, user: str) -> None:
    client = ScramClient(mechanism, user, "pw")
    first = client.first()
    assert b"n=" + user.replace("=", "=3D").replace(",", "=2C").encode() + b",r=" in first
    srv = server(mechanism, {user: "pw"})
    exchange(client, srv)
    assert srv.authorization_id == user


def fails_generically(srv: ScramServer, token: bytes) -> SaslAuthenticationError:
    with pytest.raises(SaslAuthenticationError) as raised:
        srv.step(token)
    assert str(raised.value) == GENERIC_FAILURE
    assert not srv.complete
    return raised.value


@pytest.mark.parametrize("mechanism", SCRAM)
def test_wrong_password_and_unknown_user_fail_alike(mechanism: str) -> None:
    outcomes = []
    for user, password in (("alice", "wrong"), ("mallory", "alice-pw")):
        srv = server(mechanism, {"alice": "alice-pw"})
        client = ScramClient(mechanism, user, password)
        server_first = srv.step(client.first())
        outcomes.append(fails_generically(srv, client.step(server_first) or b""))
    assert "wrong password" in outcomes[0].reason and "unknown user" in outcomes[1].reason


def test_unknown_user_gets_a_stable_plausible_salt() -> None:
    firsts = [
        server("SCRAM-SHA-256", {}).step(ScramClient("SCRAM-SHA-256", "ghost", "x").first())
        for _ in range(2)
    ]
    salts = [dict(a.split("=", 1) for a in f.decode().split(","))["s"] for f in firsts]
    assert salts[0] == salts[1] and len(base64.b64decode(salts[0])) == 32


@pytest.mark.parametrize("mechanism", SCRAM)
def test_tampered_proof_fails(mechanism: str) -> None:
    srv = server(mechanism, {"alice": "pw"})
    client = ScramClient(mechanism, "alice", "pw")
    final = client.step(srv.step(client.first())) or b""
    head, _, proof = final.rpartition(b",p=")
    raw = bytearray(base64.b64decode(proof))
    raw[0] ^= 1
    fails_generically(srv, head + b",p=" + base64.b64encode(bytes(raw)))
    # a failed exchange stays failed, even with the right proof
    fails_generically(srv, final)


def other_nonce(nonce: str) -> str:
    return nonce[:-1] + ("A" if nonce[-1] != "A" else "B")


@pytest.mark.parametrize(
    "rewrite",
    [
        lambda f, nonce: f.replace(nonce.encode(), other_nonce(nonce).encode()),  # mismatch
        lambda f, nonce: f.replace(b"c=biws", b"c=eSws"),  # channel binding "y,,"
        lambda f, nonce: f.replace(b",p=", b",x=", 1),  # no proof
        lambda f, nonce: f + b"A",  # proof of the wrong length / bad base64
        lambda f, nonce: f[: f.index(b",p=") + 3] + b"!!!!",  # not base64
        lambda f, nonce: b"r=" + f,  # attributes out of order
    ],
)
def test_malformed_client_final_fails(rewrite: object) -> None:
    srv = server("SCRAM-SHA-256", {"alice": "pw"})
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    server_first = srv.step(client.first())
    nonce = server_first.decode().split(",")[0][2:]
    final = client.step(server_first) or b""
    assert callable(rewrite)
    fails_generically(srv, rewrite(final, nonce))


@pytest.mark.parametrize(
    "token",
    [
        b"",
        b"p=tls-unique,,n=alice,r=abc",  # channel binding requested
        b"n,,r=abc,n=alice",  # attributes out of order
        b"n,,m=ext,n=alice,r=abc",  # reserved mandatory extension
        b"n,,n=al=ice,r=abc",  # bad escape
        b"n,,n=,r=abc",  # empty name
        b"n,,n=alice,r=a b",  # nonce with a space
        b"n,,n=alice,r=",  # empty nonce
        b"n,x=alice,n=alice,r=abc",  # not an authzid
        b"n,,n=alice",  # no nonce
        b"\xff\xfe",  # not UTF-8
        b"n,,n=alice,r=" + b"a" * 5000,  # oversized
    ],
)
def test_malformed_client_first_fails(token: bytes) -> None:
    fails_generically(server("SCRAM-SHA-256", {"alice": "pw"}), token)


def test_extensions_are_ignored() -> None:
    srv = server("SCRAM-SHA-512", {"alice": "pw"})
    client = ScramClient("SCRAM-SHA-512", "alice", "pw", extensions={"tokenauth": "true"})
    assert client.first().endswith(b",tokenauth=true")
    exchange(client, srv)
    assert srv.authorization_id == "alice"


def test_authzid_equal_to_the_user_is_accepted_and_another_refused() -> None:
    srv = server("SCRAM-SHA-256", {"alice": "pw"})
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    first = client.first().replace(b"n,,", b"n,a=alice,", 1)
    server_first = srv.step(first)
    assert server_first.startswith(b"r=")
    srv = server("SCRAM-SHA-256", {"alice": "pw", "admin": "x"})
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        srv.step(client.first().replace(b"n,,", b"n,a=admin,", 1))


@given(
    first=st.binary(max_size=300) | st.text(max_size=300).map(str.encode),
    final=st.binary(max_size=300) | st.text(max_size=300).map(str.encode),
)
def test_garbage_tokens_only_ever_raise_sasl_errors(first: bytes, final: bytes) -> None:
    lookup = {"alice": credential("SCRAM-SHA-256", "pw")}.get
    for tokens in ((first, final), (b"n,,n=alice,r=abc", final)):
        srv = ScramServer("SCRAM-SHA-256", lookup)
        with pytest.raises(SaslAuthenticationError) as raised:
            for token in tokens:
                srv.step(token)
        assert str(raised.value) in (GENERIC_FAILURE, AUTHZID_MISMATCH)
        assert not srv.complete


@given(token=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_garbage_server_tokens_only_ever_raise_sasl_errors(token: bytes) -> None:
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    client.first()
    with contextlib.suppress(SaslAuthenticationError):
        client.step(token)
    assert not client.complete


def test_client_refuses_too_few_or_too_many_iterations() -> None:
    for iterations in (MIN_ITERATIONS - 1, MAX_ITERATIONS + 1):
        client = ScramClient("SCRAM-SHA-256", "u", "p", nonce="abc")
        with pytest.raises(SaslAuthenticationError, match="iterations"):
            client.step(f"r=abcdef,s=QUJD,i={iterations}".encode())


def test_client_refuses_a_nonce_that_does_not_extend_its_own() -> None:
    client = ScramClient("SCRAM-SHA-256", "u", "p", nonce="abc")
    with pytest.raises(SaslAuthenticationError, match="nonce"):
        client.step(b"r=xyzdef,s=QUJD,i=4096")


@pytest.mark.parametrize("mechanism", SCRAM)
def test_credential_and_verify(mechanism: str) -> None:
    stored = scram_credential(mechanism, "secret", iterations=MIN_ITERATIONS)
    assert verify_scram_password(mechanism, stored, "secret")
    assert not verify_scram_password(mechanism, stored, "Secret")
    assert stored.iterations == MIN_ITERATIONS and len(stored.salt) == 32
    digest = 32 if mechanism == "SCRAM-SHA-256" else 64
    assert len(stored.stored_key) == len(stored.server_key) == digest
    assert scram_credential(mechanism, "secret").salt != stored.salt  # random salts


def test_credential_iteration_bounds_and_mechanism_names() -> None:
    with pytest.raises(ValueError, match="iterations"):
        scram_credential("SCRAM-SHA-256", "x", iterations=MIN_ITERATIONS - 1)
    with pytest.raises(ValueError, match="iterations"):
        scram_credential("SCRAM-SHA-256", "x", iterations=MAX_ITERATIONS + 1)
    with pytest.raises(ValueError, match="SCRAM mechanism"):
        scram_credential("SCRAM-MD5", "x")


def test_a_token_after_completion_is_refused() -> None:
    srv = server("SCRAM-SHA-256", {"alice": "pw"})
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    exchange(client, srv)
    with pytest.raises(SaslAuthenticationError):
        srv.step(client.first())
    with pytest.raises(SaslAuthenticationError):
        client.step(b"v=x")
    assert srv.complete and srv.authorization_id == "alice"  # the finished login stands


@pytest.mark.parametrize("mechanism", SCRAM)
def test_credential_of_an_alter_user_scram_credentials_upsertion(mechanism: str) -> None:
    # what a client's AdminClient sends: the salt and PBKDF2's output, never the password
    hash_ = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
    salt = b"0123456789abcdef"
    salted = hashlib.pbkdf2_hmac(hash_, b"s3cret", salt, 8192)
    stored = credential_of_salted_password(mechanism, salt, salted, 8192)
    assert stored == scram_credential(mechanism, "s3cret", salt=salt, iterations=8192)
    exchange(ScramClient(mechanism, "u", "s3cret"), ScramServer(mechanism, {"u": stored}.get))
    for bad in (
        (salt, salted, MIN_ITERATIONS - 1),
        (b"", salted, 8192),
        (salt, salted[:-1], 8192),
    ):
        with pytest.raises(ValueError):
            credential_of_salted_password(mechanism, *bad)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_librdkafkas_repeated_client_nonce_is_accepted_and_nothing_looser(mechanism: str) -> None:
    """librdkafka < 2.6.1 sends client nonce + server-first nonce in its client-final (and
    computes its proof over that message); Kafka 3.8.1-3.9 accept it.  Only that exact form."""
    credential = scram_credential(mechanism, "pencil")

    def exchange(final_nonce: Callable[[str, str], str]) -> bytes:
        server = ScramServer(mechanism, lambda user: credential if user == "user" else None)
        client_nonce = "fyko+d2lbbFgONRv9qkxdawL"
        server_first = server.step(f"n,,n=user,r={client_nonce}".encode()).decode()
        nonce = server_first.split(",")[0][2:]
        salt = base64.b64decode(server_first.split(",")[1][2:])
        without_proof = f"c=biws,r={final_nonce(client_nonce, nonce)}"
        hash_name = "sha256" if mechanism.endswith("256") else "sha512"
        salted = hashlib.pbkdf2_hmac(hash_name, b"pencil", salt, credential.iterations)
        client_key = hmac.digest(salted, b"Client Key", hash_name)
        stored = hashlib.new(hash_name, client_key).digest()
        auth = f"n=user,r={client_nonce},{server_first},{without_proof}".encode()
        signature = hmac.digest(stored, auth, hash_name)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return server.step(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())

    assert exchange(lambda c, n: n).startswith(b"v=")  # RFC 5802
    assert exchange(lambda c, n: c + n).startswith(b"v=")  # librdkafka < 2.6.1
    for wrong in (lambda c, n: "x" + n, lambda c, n: n + c, lambda c, n: c, lambda c, n: c + c):
        with pytest.raises(SaslAuthenticationError):
            exchange(wrong)
