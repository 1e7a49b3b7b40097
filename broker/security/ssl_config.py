"""Kafka's ``ssl.*`` keys to an ``ssl.SSLContext``, for a listener (server) or a client.

Supported keys (the values already resolved for one listener: :func:`resolve_listener_props`
overlays ``listener.name.<name>.ssl.*`` on the global ``ssl.*``):

    ssl.keystore.type               PEM only (also the default here; Kafka's JKS/PKCS12 are not
                                    read: convert them with openssl or keytool)
    ssl.keystore.location           a PEM file: the private key, then the certificate chain
    ssl.keystore.certificate.chain  or the chain and the key as PEM text in the values
    ssl.keystore.key
    ssl.key.password                the password of an encrypted (PKCS#8) key
    ssl.truststore.type             PEM only
    ssl.truststore.location         a PEM file of CA certificates,
    ssl.truststore.certificates     or the CA certificates as PEM text
    ssl.client.auth                 required | requested | none (servers; default none)
    ssl.enabled.protocols           e.g. TLSv1.2,TLSv1.3: the lowest and the highest become the
                                    context's minimum and maximum version
    ssl.cipher.suites               OpenSSL cipher names (ECDHE-ECDSA-AES128-GCM-SHA256...), for
                                    TLS 1.2 and below; Java/IANA names are not mapped, and TLS 1.3
                                    suites (TLS_AES_128_GCM_SHA256...) are always on, so listing
                                    them is accepted and changes nothing
    ssl.endpoint.identification.algorithm   https (default): a client checks the server's host
                                    name against its certificate; empty: it does not

The key and certificates are checked with ``cryptography`` first, so a mistake is a ValueError
naming the key and what is wrong (no such file, no certificate, wrong password, a key that does
not match the certificate) rather than an OpenSSL error code.
"""

from __future__ import annotations

import re
import ssl
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

LISTENER_PREFIX: Final = "listener.name."
CLIENT_AUTH_MODES: Final = {
    "required": ssl.CERT_REQUIRED,
    "requested": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}
TLS_VERSIONS: Final = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
DEFAULT_PROTOCOLS: Final = "TLSv1.2,TLSv1.3"
TLS13_SUITES: Final = frozenset(
    {
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_AES_128_CCM_SHA256",
        "TLS_AES_128_CCM_8_SHA256",
    }
)
_PEM_KEY = re.compile(
    rb"-----BEGIN ((?:ENCRYPTED |RSA |EC )?PRIVATE KEY)-----.+?-----END \1-----", re.DOTALL
)
_PEM_CERTIFICATE = re.compile(
    rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL
)


def resolve_listener_props(values: Mapping[str, str], listener_name: str) -> dict[str, str]:
    """The global keys overlaid with ``listener.name.<listener lower-case>.`` ones, unprefixed.

    Other listeners' prefixed keys are left out.
    """
    prefix = f"{LISTENER_PREFIX}{listener_name.lower()}."
    resolved = {k: v for k, v in values.items() if not k.startswith(LISTENER_PREFIX)}
    resolved.update({k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)})
    return resolved


def _list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _require_pem(props: Mapping[str, str], key: str) -> None:
    kind = props.get(key, "").strip() or "PEM"
    if kind.upper() != "PEM":
        raise ValueError(f"{key}={kind} is not supported: only PEM (convert the store to PEM)")


def _read(props: Mapping[str, str], key: str) -> bytes:
    path = Path(props[key])
    try:
        return path.read_bytes()
    except OSError as error:
        raise ValueError(f"{key}: cannot read {path}: {error.strerror}") from None


def _keystore(props: Mapping[str, str]) -> tuple[bytes, bytes, str] | None:
    """(key PEM, chain PEM, what to name in errors), or None if no keystore is configured."""
    location = props.get("ssl.keystore.location", "").strip()
    chain = props.get("ssl.keystore.certificate.chain", "").strip()
    key = props.get("ssl.keystore.key", "").strip()
    if location and (chain or key):
        raise ValueError(
            "ssl.keystore.location and ssl.keystore.certificate.chain/ssl.keystore.key "
            "are alternatives: give one"
        )
    if location:
        text = _read(props, "ssl.keystore.location")
        return text, text, "ssl.keystore.location"
    if chain and key:
        return key.encode(), chain.encode(), "ssl.keystore.key"
    if chain or key:
        raise ValueError("ssl.keystore.certificate.chain and ssl.keystore.key go together")
    return None


def _private_key(pem: bytes, name: str, password: str | None) -> PrivateKeyTypes:
    secret = password.encode("utf-8") if password else None
    try:
        return serialization.load_pem_private_key(pem, secret)
    except TypeError:  # encrypted and no password given, or a password for a clear key
        if secret is None:
            raise ValueError(
                f"{name}: the private key is encrypted and ssl.key.password is not set"
            ) from None
        return serialization.load_pem_private_key(pem, None)
    except ValueError as error:
        if secret is not None:
            raise ValueError(
                "ssl.key.password: cannot decrypt the private key (wrong password?)"
            ) from None
        raise ValueError(f"{name}: unreadable private key: {error}") from None


def _checked_key_and_chain(
    key_pem: bytes, chain_pem: bytes, name: str, password: str | None
) -> bytes:
    """The key and chain as one PEM, after checking they are what they should be."""
    key_match = _PEM_KEY.search(key_pem)
    certificates = _PEM_CERTIFICATE.findall(chain_pem)
    if key_match is None:
        raise ValueError(f"{name}: no PEM private key found")
    if not certificates:
        raise ValueError(f"{name}: no PEM certificate found")
    key = _private_key(key_match.group(0), name, password)
    try:
        leaf = x509.load_pem_x509_certificate(certificates[0])
    except ValueError as error:
        raise ValueError(f"{name}: unreadable certificate: {error}") from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != leaf.public_key().public_bytes(*spki):
        raise ValueError(
            f"{name}: the private key does not match the certificate "
            f"({leaf.subject.rfc4514_string()}, the first of the chain)"
        )
    return key_match.group(0) + b"\n" + b"\n".join(certificates) + b"\n"


def _load_keystore(context: ssl.SSLContext, props: Mapping[str, str], *, required: bool) -> None:
    _require_pem(props, "ssl.keystore.type")
    store = _keystore(props)
    if store is None:
        if required:
            raise ValueError(
                "a TLS listener needs ssl.keystore.location "
                "(or ssl.keystore.certificate.chain and ssl.keystore.key)"
            )
        return
    password = props.get("ssl.key.password") or None
    pem = _checked_key_and_chain(store[0], store[1], store[2], password)
    # ssl loads a certificate chain only from a file: a private temporary one
    with tempfile.TemporaryDirectory(prefix="kraft-keystore-") as directory:
        path = Path(directory) / "keystore.pem"
        path.touch(mode=0o600)
        path.write_bytes(pem)
        try:
            context.load_cert_chain(path, password=password)
        except ssl.SSLError as error:
            raise ValueError(f"{store[2]}: OpenSSL refused the key or chain: {error}") from None


def _load_truststore(context: ssl.SSLContext, props: Mapping[str, str]) -> bool:
    """Load the configured CA certificates; False if none are configured."""
    _require_pem(props, "ssl.truststore.type")
    location = props.get("ssl.truststore.location", "").strip()
    inline = props.get("ssl.truststore.certificates", "").strip()
    if location and inline:
        raise ValueError(
            "ssl.truststore.location and ssl.truststore.certificates are alternatives: give one"
        )
    if not (location or inline):
        return False
    name = "ssl.truststore.location" if location else "ssl.truststore.certificates"
    pem = _read(props, name) if location else inline.encode()
    certificates = _PEM_CERTIFICATE.findall(pem)
    if not certificates:
        raise ValueError(f"{name}: no PEM certificate found")
    try:
        context.load_verify_locations(cadata=b"\n".join(certificates).decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError) as error:
        raise ValueError(f"{name}: unreadable certificate: {error}") from None
    return True


def _protocols_and_ciphers(context: ssl.SSLContext, props: Mapping[str, str]) -> None:
    names = _list(props.get("ssl.enabled.protocols", "") or DEFAULT_PROTOCOLS)
    unknown = [name for name in names if name not in TLS_VERSIONS]
    if unknown or not names:
        raise ValueError(
            f"ssl.enabled.protocols: {', '.join(unknown) or 'empty'} "
            f"(known: {', '.join(TLS_VERSIONS)})"
        )
    versions = [TLS_VERSIONS[name] for name in names]
    context.minimum_version, context.maximum_version = min(versions), max(versions)
    suites = [s for s in _list(props.get("ssl.cipher.suites", "")) if s not in TLS13_SUITES]
    if suites:
        try:
            context.set_ciphers(":".join(suites))
        except ssl.SSLError:
            raise ValueError(
                f"ssl.cipher.suites: OpenSSL knows none of {', '.join(suites)} "
                "(use OpenSSL names, e.g. ECDHE-ECDSA-AES128-GCM-SHA256)"
            ) from None


def server_ssl_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """The context a TLS listener wraps its connections with."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols_and_ciphers(context, props)
    _load_keystore(context, props, required=True)
    has_trust = _load_truststore(context, props)
    mode = props.get("ssl.client.auth", "").strip().lower() or "none"
    if mode not in CLIENT_AUTH_MODES:
        raise ValueError(f"ssl.client.auth={mode} (expected one of {', '.join(CLIENT_AUTH_MODES)})")
    if mode != "none" and not has_trust:
        raise ValueError(
            f"ssl.client.auth={mode} needs ssl.truststore.location or ssl.truststore.certificates "
            "(the CAs client certificates are checked against)"
        )
    context.verify_mode = CLIENT_AUTH_MODES[mode]
    return context


def client_ssl_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """The context a client (the node itself, or a test) connects to a TLS listener with."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols_and_ciphers(context, props)
    if not _load_truststore(context, props):
        context.load_default_certs()  # as Kafka falls back to the JVM's trust store
    _load_keystore(context, props, required=False)
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", ""):
        raise ValueError(
            f"ssl.endpoint.identification.algorithm={algorithm} (expected https or empty)"
        )
    context.check_hostname = algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    return context
