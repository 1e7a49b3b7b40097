"""``kraft healthcheck`` (the image's HEALTHCHECK) against a real ``kraft server``: it reads the
configuration as the server does, so it finds the REST API where ``admin.listener`` puts it
(https, checked against the CA ``security.autoconfigure`` generated), says why when nothing
answers there, and does not take another process's 200 on that port for this node's health."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.node_process import free_ports
from integration.test_autoconfigure import Server, settings_of

pytestmark = pytest.mark.integration


def healthcheck(settings: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "kraft.cli", "healthcheck", *options]
    for key, value in settings.items():
        cmd += ["--override", f"{key}={value}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KRAFT_")}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=30, check=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A secured node with its REST API over https on a port of its own."""
    data_dir = Path(tmp_path_factory.mktemp("healthcheck"))
    (admin,) = free_ports(1)
    settings = settings_of(data_dir, "SASL_SSL", **{"admin.listener": f"https://0.0.0.0:{admin}"})
    node = Server(data_dir, settings).start()
    yield node
    node.stop()


def test_healthy_and_ready_at_the_configured_https_listener(server: Server) -> None:
    assert (server.secure_dir / "ca" / "ca.pem").exists()  # what the probe checks against
    for options in ((), ("--ready",)):
        done = healthcheck(server.settings, *options)
        assert (done.returncode, done.stderr) == (0, "")


def test_without_options_it_reads_those_the_node_was_started_with(server: Server) -> None:
    """As in a container, where the node is PID 1 and may have been given --override."""
    assert server.proc is not None
    done = healthcheck({}, "--ready", "--pid", str(server.proc.pid))
    assert (done.returncode, done.stderr) == (0, "")


def test_nothing_at_the_configured_port_is_unhealthy_and_says_where(server: Server) -> None:
    (moved,) = free_ports(1)
    settings = {**server.settings, "admin.listener": f"https://0.0.0.0:{moved}"}
    done = healthcheck(settings)
    assert done.returncode == 1
    assert f"https://127.0.0.1:{moved}" in done.stderr and "refused" in done.stderr


def test_another_process_answering_on_the_port_is_not_this_nodes_health(
    tmp_path: Path,
) -> None:
    (port,) = free_ports(1)
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "health").write_text(json.dumps({"status": "ok", "node_id": 7}))
    other = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        settings = {
            "node.id": "1",
            "process.roles": "broker",
            "admin.listener": f"http://0.0.0.0:{port}",
        }
        deadline = time.monotonic() + 10
        while (done := healthcheck(settings)).returncode == 1 and "refused" in done.stderr:
            assert time.monotonic() < deadline, "http.server did not start"
        assert done.returncode == 1
        assert "answers for node 7, not for this node (1)" in done.stderr
        assert healthcheck({**settings, "node.id": "7"}).returncode == 0  # it is node 7's
    finally:
        other.kill()
        other.wait()


def test_a_configuration_error_is_unhealthy_not_dockers_reserved_status() -> None:
    done = healthcheck({"node.id": "1", "process.roles": "broker"})  # no admin.listener
    assert done.returncode == 1
    assert "admin.listener is not set" in done.stderr
