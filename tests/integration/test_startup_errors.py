"""A node that cannot start says why in one line and exits non-zero (no traceback)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def run_dev(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "kraft.cli", "dev", "--data-dir", str(tmp_path), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("log.dirs=", "log.dirs"),
        ("log.segment.bytes=abc", "segment.bytes"),
        ("log.retention.check.interval.ms=0", "log.retention.check.interval.ms"),
        ("socket.request.max.bytes=-5", "socket.request.max.bytes"),
        ("num.partitions=many", "num.partitions"),
        ("admin.listener=https://127.0.0.1:0", "no keystore is configured"),
        ("queued.max.request.bytes=1000", "at least socket.request.max.bytes"),
        ("connections.max.idle.ms=0", "connections.max.idle.ms"),
        ("max.connections=-1", "max.connections"),
        ("max.connections.per.ip=0", "max.connections.per.ip.overrides"),
        ("max.connections.per.ip.overrides=127.0.0.1", "max.connections.per.ip.overrides"),
        # named listeners and their security
        ("listeners=FOO://127.0.0.1:0", "listener FOO has no security protocol"),
        ("advertised.listeners=SSL://x:1", "advertised.listeners: SSL not among"),
        ("listener.security.protocol.map=PLAINTEXT:TLS", "listener.security.protocol.map"),
        ("listeners=SSL://127.0.0.1:0", "inter.broker.listener.name"),
        ("inter.broker.listener.name=INTERNAL", "inter.broker.listener.name: INTERNAL"),
        ("security.inter.broker.protocol=SSL", "not one of the broker's listeners"),
        ("sasl.mechanism.inter.broker.protocol=OAUTHBEARER", "sasl.mechanism.inter.broker"),
    ],
)
def test_bad_configuration(tmp_path: Path, override: str, needle: str) -> None:
    result = run_dev(tmp_path, "--port", "0", "--admin-port", "0", "--override", override)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and needle in result.stderr, result.stderr
    assert "READY" not in result.stdout


def test_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_dev(tmp_path, "--port", str(port), "--admin-port", "0")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "cannot start" in result.stderr, result.stderr


def run_server(tmp_path: Path, props: dict[str, str]) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    cmd = [sys.executable, "-m", "kraft.cli", "server", "--config", str(config)]
    env = {"PATH": "/usr/bin:/bin"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False, env=env)


CONTROLLER = {
    "node.id": "1",
    "process.roles": "controller",
    "cluster.id": "MkU3OEVBNTcwNTJENDM2Qk",
    "controller.quorum.voters": "1@127.0.0.1:1",
    "controller.quorum.password": "secret",
    "listeners": "CONTROLLER://127.0.0.1:0",
}


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (("listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",), "ssl.keystore.location"),
        (
            (
                "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms=PLAIN",
            ),
            "no usable SASL mechanism",
        ),
        (
            (
                "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms=GSSAPI",
            ),
            "GSSAPI is not supported",
        ),
        (
            (
                "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                "ssl.keystore.location=/nonexistent/keystore.pem",
            ),
            "listener SASL_SSL: TLS settings",
        ),
    ],
)
def test_bad_listener_security(tmp_path: Path, overrides: tuple[str, ...], needle: str) -> None:
    args = [arg for override in overrides for arg in ("--override", override)]
    result = run_dev(tmp_path, "--port", "0", "--admin-port", "0", *args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and needle in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            {
                "controller.quorum.voters": "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3",
                "controller.quorum.password": "short-secret",
            },
            "at least 16",
        ),
        ({"controller.quorum.voters": "1@nohostport"}, "controller.quorum.voters"),
        ({"controller.quorum.voters": "2@127.0.0.1:1"}, "does not list this controller"),
        ({"controller.quorum.voters": "1@127.0.0.1:1,1@127.0.0.1:2"}, "listed twice"),
        ({"controller.quorum.password": ""}, "controller.quorum.password"),
        ({"listeners": "PLAINTEXT://127.0.0.1:0"}, "CONTROLLER listener"),
        ({"cluster.id": ""}, "cluster.id"),
        (
            {"process.roles": "broker", "controller.quorum.bootstrap.servers": "nowhere"},
            "controller.quorum.bootstrap.servers",
        ),
    ],
)
def test_bad_quorum_configuration(tmp_path: Path, change: dict[str, str], needle: str) -> None:
    props = {**CONTROLLER, "metadata.log.dir": str(tmp_path / "meta"), **change}
    props["log.dirs"] = str(tmp_path / "logs")
    if props["process.roles"] == "broker":
        props["listeners"] = "PLAINTEXT://127.0.0.1:0"
    result = run_server(tmp_path, props)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and needle in result.stderr, result.stderr
    assert "READY" not in result.stdout
