"""``kraft dev --controllers 3 --brokers 3`` as a user runs it: READY, a working cluster,
and a clean stop that leaves no process behind."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

READY = re.compile(r"READY bootstrap=(\S+) admin=(\S+)")


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` as ``pgrep -P`` lists them, read from /proc (a minimal
    machine has no procps)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[1]) == pid:  # the parent's pid follows the state
            children.append(int(stat.parent.name))
    return children


def test_a_three_by_three_dev_cluster(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "kraft.cli", "dev", "--controllers", "3", "--brokers", "3"]
    cmd += ["--port", "0", "--admin-port", "0", "--data-dir", str(tmp_path / "data")]
    stderr = (tmp_path / "stderr.log").open("w")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KRAFT_")}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = READY.search(line)
        assert m, f"no READY line: {line!r}\n{(tmp_path / 'stderr.log').read_text()[-3000:]}"
        bootstrap, admin = m.group(1), m.group(2)
        assert len(bootstrap.split(",")) == 3
        with urllib.request.urlopen(admin + "/v1/cluster", timeout=5) as response:
            view = json.load(response)
        assert len(view["controller"]["voters"]) == 3
        assert view["controller"]["leader_id"] in {1, 2, 3}
        assert sorted(b["id"] for b in view["brokers"]) == [4, 5, 6]
        subprocess.run(
            ["kcat", "-P", "-b", bootstrap, "-t", "dev-e2e"],
            input="a\nb\nc\n",
            text=True,
            timeout=30,
            check=True,
        )
        out = subprocess.run(
            ["kcat", "-C", "-b", bootstrap, "-t", "dev-e2e", "-e", "-o", "beginning", "-q"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert out.stdout.split() == ["a", "b", "c"]
        children = _children(proc.pid)
        assert len(children) == 6
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(Path(f"/proc/{c}").exists() for c in children):
            time.sleep(0.1)
        assert not [c for c in children if Path(f"/proc/{c}").exists()], "children left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _start_as_a_shell_job(tmp_path: Path, brokers: int) -> tuple[subprocess.Popen[str], Path]:
    """``kraft dev --brokers N`` in a process group of its own, as a shell runs a job, so that
    a signal to the group is what a terminal's Ctrl-C sends.  Returns once it is READY."""
    cmd = [sys.executable, "-m", "kraft.cli", "dev", "--brokers", str(brokers)]
    cmd += ["--port", "0", "--admin-port", "0", "--data-dir", str(tmp_path / "data")]
    log = tmp_path / "stderr.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KRAFT_")}
    env["KRAFT_LOG_LEVEL"] = "INFO"
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=log.open("w"), text=True, env=env, process_group=0
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert READY.search(line), f"no READY line: {line!r}\n{log.read_text()[-3000:]}"
    return proc, log


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.1)
    return [p for p in pids if Path(f"/proc/{p}").exists()]


def test_ctrl_c_stops_the_brokers_cleanly_before_the_controller(tmp_path: Path) -> None:
    proc, log = _start_as_a_shell_job(tmp_path, brokers=2)
    try:
        children = _children(proc.pid)
        assert len(children) == 3
        started = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: the whole foreground group
        assert proc.wait(30) == 0
        took = time.monotonic() - started
        stderr = log.read_text()
        # Had the controller stopped with them, each broker's controlled shutdown would wait
        # out its timeout and the launcher would SIGKILL it after 10 s.
        assert "controlled shutdown timed out" not in stderr, stderr[-3000:]
        assert "still runs" not in stderr, stderr[-3000:]
        assert took < 8, f"stopping took {took:.1f} s"
        assert not _gone_within(children, 5), "children left behind"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_nodes_stop_when_their_launcher_is_killed(tmp_path: Path) -> None:
    proc, _ = _start_as_a_shell_job(tmp_path, brokers=2)
    children = _children(proc.pid)
    try:
        assert len(children) == 3
        proc.kill()  # no chance to stop them
        proc.wait()
        assert not _gone_within(children, 20), "nodes outlived their launcher"
    finally:
        for pid in [proc.pid, *children]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
