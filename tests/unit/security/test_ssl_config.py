"""Kafka's ssl.* keys to SSL contexts, checked with real TLS handshakes on 127.0.0.1."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from broker.security.principal import PrincipalMapper
from broker.security.ssl_config import (
    client_ssl_context,
    resolve_listener_props,
    server_ssl_context,
)
from kraft.node.certificates import CertificateAuthority, load_ca, make_ca, make_certificate


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("pki")
    ca = make_ca(directory)
    return {
        "dir": directory,
        "ca": ca,
        "server": make_certificate(ca, directory, "broker", ["localhost", "127.0.0.1"]),
        "alice": make_certificate(ca, directory, "alice", client=True, organizational_unit="eng"),
        "locked": make_certificate(ca, directory, "locked", ["localhost"], key_password="s3cret"),
    }


def handshake(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext, host: str = "localhost"
) -> dict[str, Any]:
    """One TLS handshake over 127.0.0.1: the server's view of the client certificate.

    Raises the client's or the server's SSL error if the handshake fails.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    outcome: dict[str, Any] = {}

    def serve() -> None:
        connection, _ = listener.accept()
        try:
            with server_context.wrap_socket(connection, server_side=True) as tls:
                outcome["peercert"] = tls.getpeercert()
                outcome["version"] = tls.version()
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError) as error:
            outcome["error"] = error

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            client_context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            outcome["cipher"] = tls.cipher()
            tls.recv(2)  # TLS 1.3: the server's verdict on our certificate arrives here
    finally:
        thread.join(10)
        listener.close()
    if "error" in outcome:
        raise outcome["error"]
    return outcome


def server_props(pki: Mapping[str, Any], **extra: str) -> dict[str, str]:
    props = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["server"])}
    return props | {key.replace("_", "."): value for key, value in extra.items()}


def client_props(pki: Mapping[str, Any], cert: str | None = None) -> dict[str, str]:
    props = {
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki["ca"].certificate_path),
    }
    if cert:
        props["ssl.keystore.location"] = str(pki[cert])
    return props


def test_server_only_tls(pki: dict[str, Any]) -> None:
    outcome = handshake(
        server_ssl_context(server_props(pki)), client_ssl_context(client_props(pki))
    )
    assert outcome["peercert"] is None
    assert PrincipalMapper().principal_of(outcome["peercert"]) == "User:ANONYMOUS"


def test_client_certificate_required_and_its_principal(pki: dict[str, Any]) -> None:
    server = server_ssl_context(
        server_props(pki, ssl_client_auth="required")
        | {"ssl.truststore.location": str(pki["ca"].certificate_path)}
    )
    outcome = handshake(server, client_ssl_context(client_props(pki, "alice")))
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L,DEFAULT")
    assert mapper.principal_of(outcome["peercert"]) == "User:alice@eng"
    assert PrincipalMapper().principal_of(outcome["peercert"]) == "User:CN=alice,OU=eng"


def test_client_certificate_required_but_missing_fails(pki: dict[str, Any]) -> None:
    server = server_ssl_context(
        server_props(pki, ssl_client_auth="required")
        | {"ssl.truststore.location": str(pki["ca"].certificate_path)}
    )
    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(server, client_ssl_context(client_props(pki)))


def test_client_certificate_requested_is_optional(pki: dict[str, Any]) -> None:
    props = server_props(pki, ssl_client_auth="requested") | {
        "ssl.truststore.location": str(pki["ca"].certificate_path)
    }
    assert (
        handshake(server_ssl_context(props), client_ssl_context(client_props(pki)))["peercert"]
        is None
    )
    with_cert = handshake(server_ssl_context(props), client_ssl_context(client_props(pki, "alice")))
    assert with_cert["peercert"]["subject"][-1] == (("commonName", "alice"),)


def test_host_name_checked_unless_identification_is_off(pki: dict[str, Any]) -> None:
    server = server_ssl_context(server_props(pki))
    with pytest.raises(ssl.SSLCertVerificationError, match=r"mismatch|match"):
        handshake(server, client_ssl_context(client_props(pki)), host="elsewhere.example")
    off = client_props(pki) | {"ssl.endpoint.identification.algorithm": ""}
    handshake(server, client_ssl_context(off), host="elsewhere.example")


def test_untrusted_server_is_refused(pki: dict[str, Any], tmp_path: Path) -> None:
    other_ca = make_ca(tmp_path / "other")
    props = {"ssl.truststore.location": str(other_ca.certificate_path)}
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server_ssl_context(server_props(pki)), client_ssl_context(props))


def test_inline_pem_and_encrypted_key(pki: dict[str, Any]) -> None:
    text = Path(pki["locked"]).read_text()
    key_end = text.index("-----END ENCRYPTED PRIVATE KEY-----") + len(
        "-----END ENCRYPTED PRIVATE KEY-----"
    )
    props = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.key": text[:key_end],
        "ssl.keystore.certificate.chain": text[key_end:],
        "ssl.key.password": "s3cret",
    }
    client = {"ssl.truststore.certificates": pki["ca"].certificate_path.read_text()}
    handshake(server_ssl_context(props), client_ssl_context(client))
    file_props = {"ssl.keystore.location": str(pki["locked"]), "ssl.key.password": "s3cret"}
    handshake(server_ssl_context(file_props), client_ssl_context(client))


def test_protocol_bounds(pki: dict[str, Any]) -> None:
    server = server_ssl_context(server_props(pki, ssl_enabled_protocols="TLSv1.2"))
    assert server.maximum_version == ssl.TLSVersion.TLSv1_2
    assert handshake(server, client_ssl_context(client_props(pki)))["version"] == "TLSv1.2"
    only13 = client_ssl_context(client_props(pki) | {"ssl.enabled.protocols": "TLSv1.3"})
    with pytest.raises(ssl.SSLError):
        handshake(server, only13)
    default = server_ssl_context(server_props(pki))
    assert (default.minimum_version, default.maximum_version) == (
        ssl.TLSVersion.TLSv1_2,
        ssl.TLSVersion.TLSv1_3,
    )


def test_cipher_suites(pki: dict[str, Any]) -> None:
    suites = "ECDHE-ECDSA-AES256-GCM-SHA384,TLS_AES_128_GCM_SHA256"
    server = server_ssl_context(
        server_props(pki, ssl_enabled_protocols="TLSv1.2", ssl_cipher_suites=suites)
    )
    tls12 = [c["name"] for c in server.get_ciphers() if c["protocol"] != "TLSv1.3"]
    assert tls12 == ["ECDHE-ECDSA-AES256-GCM-SHA384"]
    outcome = handshake(server, client_ssl_context(client_props(pki)))
    assert outcome["cipher"][0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
    with pytest.raises(ValueError, match=r"ssl.cipher.suites: OpenSSL knows none"):
        server_ssl_context(
            server_props(pki, ssl_cipher_suites="TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
        )


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "x.jks"}, "ssl.keystore.type=JKS"),
        ({"ssl.keystore.location": "/nonexistent/k.pem"}, "ssl.keystore.location: cannot read"),
        ({}, "needs ssl.keystore.location"),
        ({"ssl.keystore.key": "x"}, "go together"),
        ({"ssl.client.auth": "always"}, "ssl.client.auth=always"),
        ({"ssl.client.auth": "required"}, "needs ssl.truststore"),
        ({"ssl.enabled.protocols": "SSLv3"}, "ssl.enabled.protocols: SSLv3"),
        ({"ssl.truststore.location": "/nonexistent/ca.pem"}, "ssl.truststore.location: cannot"),
        ({"ssl.truststore.type": "PKCS12"}, "ssl.truststore.type=PKCS12"),
    ],
)
def test_configuration_errors_name_the_key(
    pki: dict[str, Any], props: dict[str, str], message: str
) -> None:
    base = {} if "ssl.keystore.location" in props or not props else server_props(pki)
    if props.get("ssl.keystore.key") or props.get("ssl.keystore.type") == "JKS":
        base = {}
    with pytest.raises(ValueError, match=message):
        server_ssl_context(base | props)


def test_key_problems_are_explained(pki: dict[str, Any], tmp_path: Path) -> None:
    locked = {"ssl.keystore.location": str(pki["locked"])}
    with pytest.raises(ValueError, match=r"encrypted and ssl.key.password is not set"):
        server_ssl_context(locked)
    with pytest.raises(ValueError, match=r"ssl.key.password: cannot decrypt"):
        server_ssl_context(locked | {"ssl.key.password": "wrong"})
    server_text, alice_text = Path(pki["server"]).read_text(), Path(pki["alice"]).read_text()
    mixed = tmp_path / "mixed.pem"
    mixed.write_text(
        alice_text.split("-----BEGIN CERTIFICATE-----")[0]
        + server_text[server_text.index("-----BEGIN CERTIFICATE-----") :]
    )
    with pytest.raises(ValueError, match="does not match the certificate"):
        server_ssl_context({"ssl.keystore.location": str(mixed)})
    no_cert = tmp_path / "key-only.pem"
    no_cert.write_text(server_text.split("-----BEGIN CERTIFICATE-----")[0])
    with pytest.raises(ValueError, match="no PEM certificate"):
        server_ssl_context({"ssl.keystore.location": str(no_cert)})


def test_resolve_listener_props() -> None:
    values = {
        "ssl.keystore.location": "/global.pem",
        "ssl.client.auth": "none",
        "listener.name.sasl_ssl.ssl.keystore.location": "/sasl.pem",
        "listener.name.internal.ssl.client.auth": "required",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": "x",
    }
    assert resolve_listener_props(values, "SASL_SSL") == {
        "ssl.keystore.location": "/sasl.pem",
        "ssl.client.auth": "none",
        "scram-sha-256.sasl.jaas.config": "x",
    }
    assert resolve_listener_props(values, "INTERNAL")["ssl.client.auth"] == "required"
    assert resolve_listener_props(values, "OTHER") == {
        "ssl.keystore.location": "/global.pem",
        "ssl.client.auth": "none",
    }


def test_certificate_files(pki: dict[str, Any]) -> None:
    ca: CertificateAuthority = pki["ca"]
    text = Path(pki["server"]).read_text()
    assert text.count("-----BEGIN CERTIFICATE-----") == 2 and "PRIVATE KEY" in text
    assert (
        Path(pki["server"]).stat().st_mode & 0o077 == 0 and ca.key_path.stat().st_mode & 0o077 == 0
    )
    again = load_ca(pki["dir"])  # kraft dev --secure reuses the CA of its data directory
    assert again.certificate == ca.certificate and again.key_path == ca.key_path
    with pytest.raises(ValueError, match="plain file name"):
        make_certificate(ca, pki["dir"], "../evil", ["x"])
    with pytest.raises(ValueError, match="at least one host"):
        make_certificate(ca, pki["dir"], "nohost")
