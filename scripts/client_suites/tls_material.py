"""The certificates ``run_client_suites.py`` gives the broker and the clients' suites: a CA,
the broker's certificate and a client certificate made by ``kraft.node.certificates``, and the
client key in every encoding librdkafka's 0097-ssl_verify reads (its ``SSL_*`` variables)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

KEY_PASSWORD = "abcdefgh"  # aiokafka's tests load the client key with this password


@dataclass(frozen=True)
class TlsFiles:
    ca_pem: Path
    broker_keystore: Path  # key + chain, ssl.keystore.location
    client_cert_pem: Path
    client_key_pem: Path  # encrypted with KEY_PASSWORD
    extra_env: dict[str, str]  # librdkafka's SSL_* variables


def make_tls(directory: Path) -> TlsFiles:
    """A CA, the broker's certificate and a client certificate (kraft.node.certificates), and
    the client key in the encodings librdkafka's 0097-ssl_verify reads (PEM, DER, PKCS#12)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    from kraft.node.certificates import make_ca, make_certificate

    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca(directory)
    broker = make_certificate(ca, directory, "broker", ["127.0.0.1", "localhost"])
    client = make_certificate(ca, directory, "client", client=True)
    ca_pem = ca.certificate_path
    pem = client.read_bytes()
    key = serialization.load_pem_private_key(pem, password=None)
    certs = x509.load_pem_x509_certificates(pem)
    ca_cert = ca.certificate
    encrypt = serialization.BestAvailableEncryption(KEY_PASSWORD.encode())
    files = {
        "pub_pem": certs[0].public_bytes(serialization.Encoding.PEM),
        "pub_der": certs[0].public_bytes(serialization.Encoding.DER),
        "priv_pem": key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encrypt
        ),
        "priv_der": key.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, encrypt
        ),
        "pkcs": pkcs12.serialize_key_and_certificates(
            b"client",
            key,
            certs[0],
            [ca_cert],
            encrypt,  # type: ignore[arg-type]
        ),
        "ca_der": ca_cert.public_bytes(serialization.Encoding.DER),
    }
    env = {"SSL_password": KEY_PASSWORD, "SSL_ca_pem": str(ca_pem), "SSL_all_cas_pem": str(ca_pem)}
    for name, data in files.items():
        path = directory / f"client.{name}"
        path.write_bytes(data)
        env[f"SSL_{name}"] = str(path)
    return TlsFiles(
        ca_pem,
        broker,
        directory / "client.pub_pem",
        directory / "client.priv_pem",
        env,
    )
