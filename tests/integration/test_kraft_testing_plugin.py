"""kraft.testing's pytest plugin as a user runs it: pytest subprocesses on test files that use
``kraft_cluster``, under xdist, interrupted by Ctrl-C (SIGINT to the whole process group, as a
terminal sends it) and killed by SIGKILL; afterwards no node process may run and no node port
may be listening."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "test_with_kraft_cluster.py"

# A user's test file: the cluster is up, its pids and ports are written down, then the test
# waits for the signal the outer test sends.
INTERRUPTED = textwrap.dedent(
    """
    import json, os, time
    import pytest

    @pytest.mark.parametrize("kraft_cluster", [{"brokers": 2}], indirect=True)
    def test_waits_to_be_interrupted(kraft_cluster):
        state = {"pids": list(kraft_cluster.pids.values()), "ports": kraft_cluster.ports}
        path = os.environ["KRAFT_TEST_STATE"]
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)
        time.sleep(120)
    """
)

# Two tests recording the pids of the cluster they were given.
RECORDS_PIDS = textwrap.dedent(
    """
    import json, os

    def record(cluster):
        with open(os.environ["KRAFT_TEST_STATE"], "a") as f:
            f.write(json.dumps(sorted(cluster.pids.values())) + "\\n")

    def test_one(kraft_cluster):
        record(kraft_cluster)

    def test_two(kraft_cluster):
        record(kraft_cluster)
    """
)


def user_project(tmp_path: Path, name: str, text: str) -> Path:
    """A directory holding one test file and an empty pytest.ini: a user's project, not
    this repository's configuration and conftest."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / name).write_text(text)
    return project


def pytest_command(*args: str) -> list[str]:
    # -p: the entry point loads it once the package is installed; the name matches it
    return [sys.executable, "-m", "pytest", "-p", "kraft.testing.plugin", "-q", *args]


def user_env(state: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "KRAFT_TEST_STATE": str(state)}


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a zombie holds no socket)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_for_file(path: Path, proc: subprocess.Popen[str], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        if proc.poll() is not None:
            out, _ = proc.communicate()
            raise AssertionError(f"pytest exited with {proc.returncode} early:\n{out}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"no {path} after {timeout_s} s:\n{proc.communicate()[0]}")


def node_processes(base: Path) -> list[int]:
    """The running ``kraft.cli`` processes whose command line names a path under ``base``
    (a node's config file is in its data directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        mentions_base = any(str(base).encode() in a for a in argv)
        if b"kraft.cli" in argv and mentions_base and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def leftovers(state: dict[str, Any], base: Path) -> list[str]:
    return (
        [f"pid {p} runs" for p in state["pids"] if alive(p)]
        + [f"port {p} listens" for p in state["ports"] if listening(p)]
        + [f"node process {p} runs" for p in node_processes(base)]
    )


def launch_interrupted_run(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], Path]:
    """pytest on :data:`INTERRUPTED` in its own process group (so our signals reach it and its
    xdist workers, as a terminal's would, and not this test run), its data under the base
    directory returned."""
    project = user_project(tmp_path, "test_interrupted.py", INTERRUPTED)
    base = tmp_path / "base"
    proc = subprocess.Popen(
        pytest_command("--basetemp", str(base), *extra),
        cwd=project,
        env=user_env(tmp_path / "state.json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        process_group=0,
    )
    return proc, base


def start_interrupted_run(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], Any, Path]:
    """:func:`launch_interrupted_run` once its cluster runs: the cluster's pids and ports."""
    proc, base = launch_interrupted_run(tmp_path, *extra)
    state = wait_for_file(tmp_path / "state.json", proc, timeout_s=60)
    assert len(state["pids"]) == 3 and all(alive(p) for p in state["pids"]), state
    assert all(listening(p) for p in state["ports"][:2]), state
    assert sorted(node_processes(base)) == sorted(state["pids"])
    return proc, state, base


def test_the_example_passes_under_xdist(tmp_path: Path) -> None:
    """The README's example (only kraft_cluster and confluent-kafka) under ``pytest -n 4``."""
    project = user_project(tmp_path, EXAMPLE.name, EXAMPLE.read_text())
    done = subprocess.run(
        pytest_command("-n", "4", "-p", "no:cacheprovider"),
        cwd=project,
        env=user_env(tmp_path / "unused"),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout, done.stdout


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["plain", "xdist"])
def test_ctrl_c_leaves_no_process_or_port(tmp_path: Path, xdist: tuple[str, ...]) -> None:
    proc, state, base = start_interrupted_run(tmp_path, *xdist)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0, out
    # pytest has stopped the cluster before exiting: nothing to wait for
    assert leftovers(state, base) == [], out


def test_ctrl_c_while_the_cluster_starts_leaves_no_process(tmp_path: Path) -> None:
    proc, base = launch_interrupted_run(tmp_path)
    deadline = time.monotonic() + 60
    while not node_processes(base):  # a node has started; the cluster is not ready yet
        assert time.monotonic() < deadline and proc.poll() is None, "no node started"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0, out
    assert not (tmp_path / "state.json").exists(), "interrupted after the cluster was ready"
    # a node whose start the interrupt cut short is not in the teardown's hands: it stops itself
    # once it sees its parent gone (the pidfd watch), a moment after pytest exits
    deadline = time.monotonic() + 15
    while node_processes(base) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert node_processes(base) == [], out


def test_sigkill_of_pytest_leaves_no_process_or_port(tmp_path: Path) -> None:
    proc, state, base = start_interrupted_run(tmp_path)
    os.killpg(proc.pid, signal.SIGKILL)  # no teardown at all: the nodes stop themselves
    proc.communicate(timeout=10)
    deadline = time.monotonic() + 15  # their SIGTERM, brokers and controllers together
    while leftovers(state, base) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers(state, base) == []


@pytest.mark.parametrize(
    ("option", "distinct"),
    [((), 1), (("--kraft-cluster-scope=function",), 2)],
    ids=["session", "function"],
)
def test_the_cluster_scope_is_selectable(
    tmp_path: Path, option: tuple[str, ...], distinct: int
) -> None:
    project = user_project(tmp_path, "test_scope.py", RECORDS_PIDS)
    state_file = tmp_path / "pids.jsonl"
    done = subprocess.run(
        pytest_command(*option),
        cwd=project,
        env=user_env(state_file),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = {tuple(json.loads(line)) for line in state_file.read_text().splitlines()}
    assert len(seen) == distinct, seen


def test_a_failing_start_names_the_node_and_shows_its_log() -> None:
    from kraft.testing import ClusterStartError, cluster

    with (
        pytest.raises(ClusterStartError) as failed,
        cluster(overrides={"log.retention.ms": "forever"}) as _,
    ):
        pass
    message = str(failed.value)
    assert "node-1 (broker,controller)" in message, message
    assert "before it was ready" in message, message
    assert "retention.ms='forever'" in message, message  # the node's own error, from its log


def test_a_broker_restarts_on_its_ports_with_its_data(tmp_path: Path) -> None:
    from kraft.testing import cluster

    data = tmp_path / "cluster"
    with cluster(brokers=3, partitions=1, data_dir=data) as c:
        c.create_topic("kept", replication_factor=3)
        c.produce("kept", [b"one", b"two"])
        leader = c.describe_topic("kept")["partitions"][0]["leader"]
        port = c.broker(leader).spec.port
        c.stop_broker(leader)
        assert not listening(port)
        assert c.wait_for_isr("kept", 0, size=2, timeout_s=30)
        c.restart_broker(leader)
        assert listening(port)
        assert sorted(c.wait_for_isr("kept", 0, timeout_s=30)) == c.broker_ids
        assert [r.value for r in c.consume("kept")] == [b"one", b"two"]
        c.pause_broker(leader)  # hung: fenced after the session timeout, out of the ISR
        assert leader not in c.wait_for_isr("kept", 0, size=2, timeout_s=30)
        c.resume_broker(leader)
        assert sorted(c.wait_for_isr("kept", 0, timeout_s=30)) == c.broker_ids
    assert data.exists()  # a given directory is left to its owner
    shutil.rmtree(data)


def test_a_secure_cluster_serves_its_client_settings_only(kraft_cluster_factory: Any) -> None:
    from confluent_kafka import KafkaError, Producer

    from kraft.cli.admin_auth import AdminLogin
    from kraft.cli.rest_client import AdminClient, AdminError

    c = kraft_cluster_factory(secure=True)
    assert c.client_config()["security.protocol"] == "SASL_SSL"
    c.create_topic("secret")
    producer = Producer(c.client_config())
    producer.produce("secret", b"by a client")
    assert producer.flush(10) == 0
    assert [r.value for r in c.consume("secret", count=1)] == [b"by a client"]

    errors: list[KafkaError] = []
    intruder = Producer({**c.client_config(), "sasl.password": "wrong", "error_cb": errors.append})
    intruder.produce("secret", b"x")
    intruder.flush(3)
    intruder.purge()  # the refused record: dropped, not reported at exit
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    trusting = AdminLogin(ssl_context=ssl.create_default_context(cafile=str(c.ca_file)))
    with pytest.raises(AdminError) as refused:  # the REST API (https) without the admin's login
        AdminClient(c.admin_url, login=trusting).call("GET", "/v1/topics")
    assert "authentication failed" in refused.value.message, refused.value


def test_nodes_outlive_the_thread_that_started_them() -> None:
    """A node stops when the test *process* dies, not when the thread that started it exits
    (PR_SET_PDEATHSIG alone would stop it then)."""
    import threading

    from kraft.testing import ClusterSpec, KraftCluster, start_cluster

    started: list[KraftCluster] = []
    thread = threading.Thread(target=lambda: started.append(start_cluster(ClusterSpec())))
    thread.start()
    thread.join()
    [c] = started
    try:
        c.create_topic("after-the-thread")  # a REST round trip: the node still serves
        assert all(alive(pid) for pid in c.pids.values()) and c.pids
    finally:
        c.close()


def test_a_failing_tests_report_shows_the_nodes_logs(tmp_path: Path) -> None:
    failing = "def test_fails(kraft_cluster):\n    assert kraft_cluster.pids == {}\n"
    project = user_project(tmp_path, "test_failing.py", failing)
    done = subprocess.run(
        pytest_command("-p", "no:cacheprovider"),
        cwd=project,
        env={**user_env(tmp_path / "unused"), "KRAFT_LOG_LEVEL": "INFO"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "kraft cluster combined logs" in done.stdout, done.stdout
    assert "--- node-1 (broker,controller): last lines of" in done.stdout, done.stdout
