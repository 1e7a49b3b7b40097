"""A private certificate authority for ``kraft dev --secure`` and tests, with ``cryptography``.

Files, all PEM, keys mode 0600:

    <dir>/ca.pem          the CA certificate: ssl.truststore.location (ssl.truststore.type=PEM)
    <dir>/ca-key.pem      the CA key (only for signing more certificates)
    <dir>/<name>.pem      a leaf: its private key (PKCS#8, encrypted if a password is given:
                          ssl.key.password), then its certificate, then the CA certificate:
                          ssl.keystore.location (ssl.keystore.type=PEM)

Keys are EC P-256 (fast to make and to handshake with).  A server certificate names its hosts
in subjectAltName (DNS names and IP addresses; its CN is ``name``) and may also be used as a
client certificate, since brokers connect to each other with it.  A client certificate's
subject is ``CN=<name>[,OU=<unit>]``: the principal ``ssl.principal.mapping.rules`` maps.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kafka_protocol.clock import wall_ms

CA_CERTIFICATE_FILE: Final = "ca.pem"
CA_KEY_FILE: Final = "ca-key.pem"
CA_VALID_DAYS: Final = 3650
LEAF_VALID_DAYS: Final = 825  # the longest validity browsers and macOS accept for a server
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    certificate_path: Path  # ssl.truststore.location
    key_path: Path


def _now() -> datetime.datetime:
    return datetime.datetime.fromtimestamp(wall_ms() / 1000, datetime.UTC)


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file readable by its owner only."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode("utf-8"))
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, days: int
) -> x509.CertificateBuilder:
    now = _now()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate clock skew
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def make_ca(directory: Path | str, name: str = "kraft dev CA") -> CertificateAuthority:
    """A new CA in ``directory`` (created if need be); overwrites an existing one there."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    certificate = (
        _builder(subject, subject, key, CA_VALID_DAYS)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    key_path, certificate_path = directory / CA_KEY_FILE, directory / CA_CERTIFICATE_FILE
    _write_private(key_path, _key_pem(key, None))
    certificate_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return CertificateAuthority(key, certificate, certificate_path, key_path)


def load_ca(directory: Path | str) -> CertificateAuthority:
    """The CA that :func:`make_ca` wrote in ``directory`` (FileNotFoundError if none)."""
    directory = Path(directory)
    key_path, certificate_path = directory / CA_KEY_FILE, directory / CA_CERTIFICATE_FILE
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{key_path}: not an EC private key")
    certificate = x509.load_pem_x509_certificate(certificate_path.read_bytes())
    return CertificateAuthority(key, certificate, certificate_path, key_path)


def _subject_alternative_names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def certificate_hosts(path: Path) -> set[str]:
    """The DNS names and IP addresses the first certificate in the PEM file ``path`` names."""
    certificate = x509.load_pem_x509_certificate(path.read_bytes())
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(n) for n in names.get_values_for_type(x509.DNSName)} | {
        str(a) for a in names.get_values_for_type(x509.IPAddress)
    }


def make_certificate(
    ca: CertificateAuthority,
    directory: Path | str,
    name: str,
    hosts: Iterable[str] = (),
    *,
    client: bool = False,
    organizational_unit: str | None = None,
    key_password: str | None = None,
) -> Path:
    """A leaf certificate signed by ``ca``: the path of ``<directory>/<name>.pem``.

    ``hosts``: a server certificate's DNS names and IP addresses; ``client``: a client-only
    certificate (``CN=<name>[,OU=<organizational_unit>]``); ``key_password``: encrypt the key.
    """
    if not _FILE_NAME.fullmatch(name):
        raise ValueError(f"certificate name {name!r} must be a plain file name")
    hosts = tuple(hosts)
    if not client and not hosts:
        raise ValueError("a server certificate needs at least one host name or address")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, name)]
    if organizational_unit:
        attributes.insert(
            0, x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, organizational_unit)
        )
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + (
        [] if client else [ExtendedKeyUsageOID.SERVER_AUTH]
    )
    builder = (
        _builder(x509.Name(attributes), ca.certificate.subject, key, LEAF_VALID_DAYS)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(_subject_alternative_names(hosts)), critical=False
        )
    certificate = builder.sign(ca.key, hashes.SHA256())
    path = directory / f"{name}.pem"
    _write_private(
        path,
        _key_pem(key, key_password)
        + certificate.public_bytes(serialization.Encoding.PEM)
        + ca.certificate.public_bytes(serialization.Encoding.PEM),
    )
    return path


make_cert = make_certificate  # the name the security brief uses
