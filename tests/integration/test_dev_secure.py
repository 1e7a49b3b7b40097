"""``kraft dev --secure``: a SASL_SSL listener with a generated CA and admin password; the admin
user exists (SCRAM-SHA-256/512 and PLAIN) before any client connects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from integration.node_process import NodeProcess
from integration.secure_clients import ROUNDTRIPS, Login

PASSWORD_FILE = Path("secure") / "admin.password"
CA_FILE = Path("secure") / "ca" / "ca.pem"
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(Path(tmp_path_factory.mktemp("dev-secure")), dev_flags=("--secure",))
    proc.start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


def admin_login(node: NodeProcess, mechanism: str, password: str | None = None) -> Login:
    secret = password or (node.data_dir / PASSWORD_FILE).read_text().strip()
    ca = str(node.data_dir / CA_FILE)
    return Login(node.bootstrap, "SASL_SSL", mechanism, "admin", secret, ca)


def test_one_sasl_ssl_listener_and_the_password_printed_once(node: NodeProcess) -> None:
    assert list(node.listeners) == ["SASL_SSL"]
    assert node.listeners["SASL_SSL"] == node.bootstrap
    password = (node.data_dir / PASSWORD_FILE).read_text().strip()
    assert len(password) >= 20
    assert (node.data_dir / PASSWORD_FILE).stat().st_mode & 0o077 == 0  # owner only
    log = node.log_path.read_text()
    assert log.count(password) >= 1 and "shown once" in log
    assert f"ssl.ca.location={node.data_dir / CA_FILE}" in log


@pytest.mark.parametrize(
    ("client", "mechanism"),
    [(client, m) for client in sorted(ROUNDTRIPS) for m in MECHANISMS],
)
def test_the_admin_produces_and_consumes(
    node: NodeProcess, client: str, mechanism: str, topic_name: str
) -> None:
    values = [f"{client}-{mechanism}-{i}".encode() for i in range(3)]
    assert ROUNDTRIPS[client](admin_login(node, mechanism), topic_name, values) == values


def test_plaintext_and_wrong_passwords_get_nothing(node: NodeProcess) -> None:
    for conf in (
        {"bootstrap.servers": node.bootstrap},  # plaintext on the TLS port
        admin_login(node, "SCRAM-SHA-512", password="wrong-password-x").librdkafka(),
    ):
        with pytest.raises(Exception, match=r"Failed to get metadata|transport"):
            AdminClient({**conf, "socket.timeout.ms": 2000}).list_topics(timeout=3)


def test_a_restart_keeps_the_password_and_does_not_print_it(node: NodeProcess) -> None:
    password = (node.data_dir / PASSWORD_FILE).read_text().strip()
    assert node.stop() == 0
    node.log_path.write_text("")
    node.start()
    assert password not in node.log_path.read_text()
    assert str(node.data_dir / PASSWORD_FILE) in node.log_path.read_text()
    values = [b"after-restart"]
    got = ROUNDTRIPS["confluent-kafka"](admin_login(node, "SCRAM-SHA-512"), "restart", values)
    assert got == values
