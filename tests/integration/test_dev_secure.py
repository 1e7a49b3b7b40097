"""``kraft dev --secure``: a SASL_SSL listener with a generated CA and admin password; the admin
user exists (SCRAM-SHA-256/512 and PLAIN) before any client connects."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from integration.node_process import NodeProcess
from integration.secure_clients import ROUNDTRIPS, Login

pytestmark = pytest.mark.integration

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


def command_config(node: NodeProcess, path: Path) -> Path:
    """A client properties file as kafka-*.sh --command-config takes it."""
    password = (node.data_dir / PASSWORD_FILE).read_text().strip()
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required"
        f' username="admin" password="{password}";\n'
        f"ssl.truststore.location={node.data_dir / CA_FILE}\n"
    )
    return path


def kraft(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kraft.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("KRAFT_")},
    )


def test_the_cli_elects_leaders_over_sasl_ssl_with_a_command_config(
    node: NodeProcess, tmp_path: Path
) -> None:
    elect = ("elect-leaders", "--bootstrap-server", node.bootstrap, "--election-type", "preferred")
    config = command_config(node, tmp_path / "client.properties")
    done = kraft(*elect, "--all-topic-partitions", "--command-config", str(config))
    assert done.returncode == 0, done.stderr
    refused = kraft(*elect, "--all-topic-partitions")  # plaintext on the TLS listener
    assert refused.returncode == 1 and "BROKER_UNREACHABLE" in refused.stderr


def test_the_cli_consumes_in_a_group_over_sasl_ssl_with_a_command_config(
    node: NodeProcess, tmp_path: Path, topic_name: str
) -> None:
    values = [f"cli-{i}".encode() for i in range(3)]
    assert ROUNDTRIPS["confluent-kafka"](admin_login(node, "SCRAM-SHA-512"), topic_name, values)
    config = command_config(node, tmp_path / "client.properties")
    done = kraft(
        *("consume", topic_name, "--group", f"cli-{topic_name}", "--from-beginning"),
        *("--max-messages", "3", "--bootstrap-server", node.bootstrap),
        *("--admin", node.admin, "--command-config", str(config)),
        *("--ca-file", str(node.data_dir / CA_FILE)),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [v.decode() for v in values]


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


def test_a_secure_three_by_three_dev_cluster(tmp_path: Path) -> None:
    """SASL_SSL between every node and for clients: an RF 3 topic replicates."""
    data = tmp_path / "data"
    cmd = [sys.executable, "-m", "kraft.cli", "dev", "--secure", "--controllers", "3"]
    cmd += ["--brokers", "3", "--port", "0", "--admin-port", "0", "--data-dir", str(data)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KRAFT_")}
    with (tmp_path / "stderr.log").open("w") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        log = (tmp_path / "stderr.log").read_text()
        m = re.search(r"READY bootstrap=(\S+)", line)
        assert m, f"no READY line: {line!r}\n{log[-3000:]}"
        password = (data / PASSWORD_FILE).read_text().strip()
        assert f"admin password (shown once; kept in {data / PASSWORD_FILE}): {password}" in log
        login = Login(m.group(1), "SASL_SSL", "SCRAM-SHA-512", "admin", password)
        login = dataclasses.replace(login, ca_file=str(data / CA_FILE))
        admin = AdminClient(login.librdkafka())
        admin.create_topics([NewTopic("r3", 3, 3)])["r3"].result(timeout=15)
        values = [f"v{i}".encode() for i in range(20)]
        got = ROUNDTRIPS["confluent-kafka"](login, "r3", values)
        assert sorted(got) == sorted(values)  # three partitions: no order across them
        parts = admin.list_topics("r3", timeout=5).topics["r3"].partitions.values()
        assert all(len(p.isrs) == 3 for p in parts)  # followers fetch over SASL_SSL
        # every node's properties: SASL_SSL listeners only, no plaintext way in
        for config in data.glob("node-*/server.properties"):
            text = config.read_text()
            assert "PLAINTEXT://" not in text and "SASL_SSL" in text, text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
