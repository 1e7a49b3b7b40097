"""``kraft certs create``: the CA once, a certificate per name, kept across runs (compose's
one-shot ``certs`` service runs it at every ``up``)."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from kraft.cli.main import main


def certificate(path: Path) -> x509.Certificate:
    """The first certificate of a PEM file (a leaf file holds key, certificate, CA)."""
    return x509.load_pem_x509_certificates(path.read_bytes())[0]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_ca_and_server_and_client_certificates(tmp_path: Path) -> None:
    made = ["broker-1=broker-1,localhost,127.0.0.1", "controller-1", "--client", "alice"]
    assert main(["certs", "create", "--dir", str(tmp_path), *made]) == 0
    ca = certificate(tmp_path / "ca.pem")
    broker = certificate(tmp_path / "broker-1.pem")
    assert broker.issuer == ca.subject
    names = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {"broker-1", "localhost"}
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    controller = certificate(tmp_path / "controller-1.pem")  # hosts default to the name
    sans = controller.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["controller-1"]
    alice = certificate(tmp_path / "alice.pem")
    assert alice.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    for key_file in ("ca-key.pem", "broker-1.pem", "alice.pem"):
        assert mode(tmp_path / key_file) == 0o600, key_file


def test_a_second_run_keeps_the_ca_and_the_certificates(tmp_path: Path) -> None:
    assert main(["certs", "create", "--dir", str(tmp_path), "broker-1"]) == 0
    first = {p.name: p.read_bytes() for p in tmp_path.glob("*.pem")}
    assert main(["certs", "create", "--dir", str(tmp_path), "broker-1", "broker-2"]) == 0
    for name, data in first.items():
        assert (tmp_path / name).read_bytes() == data, name  # what peers trust is unchanged
    ca = certificate(tmp_path / "ca.pem")
    assert certificate(tmp_path / "broker-2.pem").issuer == ca.subject
    assert main(["certs", "create", "--dir", str(tmp_path), "--force", "broker-1"]) == 0
    assert (tmp_path / "broker-1.pem").read_bytes() != first["broker-1.pem"]
    assert (tmp_path / "ca.pem").read_bytes() == first["ca.pem"]


def test_readable_by_group_leaves_the_ca_key_private(tmp_path: Path) -> None:
    args = ["certs", "create", "--dir", str(tmp_path), "--readable-by-group", "broker-1"]
    assert main(args) == 0
    assert mode(tmp_path / "broker-1.pem") == 0o640
    assert mode(tmp_path / "ca-key.pem") == 0o600
    assert mode(tmp_path / "ca.pem") == 0o644


def test_an_empty_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["certs", "create", "--dir", str(tmp_path), "=host"])
