"""``security.autoconfigure=true`` (the container image's default): a single `kraft server`
node with a SASL_SSL listener and nothing else configured generates its CA, certificate and
admin user on the first start, prints the password once, and serves only authenticated TLS
clients; a node whose listeners need nothing of it (PLAINTEXT on loopback) is left as it is."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from integration.node_process import READY, START_TIMEOUT_S, free_ports
from integration.secure_clients import ROUNDTRIPS, Login

pytestmark = pytest.mark.integration

PASSWORD = re.compile(r"security\.autoconfigure: generated the user 'admin' .*: (\S+)$", re.M)


@dataclass
class Server:
    data_dir: Path
    settings: dict[str, str]
    proc: subprocess.Popen[str] | None = None
    bootstrap: str = ""

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.stderr.log"

    @property
    def secure_dir(self) -> Path:
        return self.data_dir / "metadata" / "secure"

    def start(self) -> Server:
        cmd = [sys.executable, "-m", "kraft.cli", "server"]
        for key, value in self.settings.items():
            cmd += ["--override", f"{key}={value}"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KRAFT_")}
        with self.log_path.open("a") as stderr:
            self.proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env
            )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if m := READY.search(line):
                self.bootstrap = m.group(1)
                return self
        self.proc.kill()
        raise AssertionError(f"no READY line:\n{self.log_path.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(30) == 0, self.log_path.read_text()[-3000:]


def settings_of(data_dir: Path, listener: str, **more: str) -> dict[str, str]:
    kafka, admin = free_ports(2)
    return {
        "node.id": "1",
        "process.roles": "broker,controller",
        "listeners": f"{listener}://127.0.0.1:{kafka}",
        "admin.listener": f"http://127.0.0.1:{admin}",
        "log.dirs": str(data_dir / "data"),
        "metadata.log.dir": str(data_dir / "metadata"),
        "security.autoconfigure": "true",
        **more,
    }


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = Path(tmp_path_factory.mktemp("autoconfigure"))
    server = Server(data_dir, settings_of(data_dir, "SASL_SSL")).start()
    yield server
    server.stop()


def login(server: Server, mechanism: str, password: str) -> Login:
    ca = str(server.secure_dir / "ca" / "ca.pem")
    return Login(server.bootstrap, "SASL_SSL", mechanism, "admin", password, ca)


def printed_password(server: Server) -> str:
    (password,) = PASSWORD.findall(server.log_path.read_text())
    return password


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_the_generated_admin_produces_and_consumes_over_tls(
    secured: Server, mechanism: str, topic_name: str
) -> None:
    values = [f"{mechanism}-{i}".encode() for i in range(3)]
    got = ROUNDTRIPS["confluent-kafka"](
        login(secured, mechanism, printed_password(secured)), topic_name, values
    )
    assert got == values


def test_anonymous_and_wrong_passwords_get_nothing(secured: Server) -> None:
    for conf in (
        {"bootstrap.servers": secured.bootstrap},
        login(secured, "SCRAM-SHA-512", "not-the-password").librdkafka(),
    ):
        with pytest.raises(Exception, match=r"Failed to get metadata|transport"):
            AdminClient({**conf, "socket.timeout.ms": 2000}).list_topics(timeout=3)


def test_a_restart_reuses_everything_and_prints_no_password(secured: Server) -> None:
    password = printed_password(secured)
    certificate = (secured.secure_dir / "node.pem").read_bytes()
    secured.stop()
    secured.log_path.write_text("")
    secured.start()
    assert password not in secured.log_path.read_text()
    assert (secured.secure_dir / "node.pem").read_bytes() == certificate
    values = [b"after-restart"]
    got = ROUNDTRIPS["confluent-kafka"](login(secured, "SCRAM-SHA-512", password), "again", values)
    assert got == values


def test_a_plaintext_loopback_node_is_left_as_it_is(tmp_path: Path, topic_name: str) -> None:
    server = Server(tmp_path, settings_of(tmp_path, "PLAINTEXT")).start()
    try:
        assert not server.secure_dir.exists()
        assert "security.autoconfigure" not in server.log_path.read_text()
        values = [b"anonymous"]
        got = ROUNDTRIPS["confluent-kafka"](
            Login(server.bootstrap, "PLAINTEXT"), topic_name, values
        )
        assert got == values
    finally:
        server.stop()


def test_a_cluster_node_refuses_it(tmp_path: Path) -> None:
    settings = settings_of(
        tmp_path, "SASL_SSL", **{"controller.quorum.bootstrap.servers": "127.0.0.1:1"}
    )
    settings["process.roles"] = "broker"
    cmd = [sys.executable, "-m", "kraft.cli", "server"]
    for key, value in settings.items():
        cmd += ["--override", f"{key}={value}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "security.autoconfigure=true is for a single combined node" in done.stderr


def test_a_tls_only_node_gets_a_certificate_and_no_user(tmp_path: Path, topic_name: str) -> None:
    server = Server(tmp_path, settings_of(tmp_path, "SSL")).start()
    try:
        assert (server.secure_dir / "node.pem").exists()
        assert not (server.secure_dir / "admin.password").exists()  # no SASL: no user made
        assert "generated the user" not in server.log_path.read_text()
        tls = Login(server.bootstrap, "SSL", ca_file=str(server.secure_dir / "ca" / "ca.pem"))
        values = [b"over-tls"]
        assert ROUNDTRIPS["confluent-kafka"](tls, topic_name, values) == values
    finally:
        server.stop()
