"""Start and stop real ``kraft`` node processes for end-to-end tests, and pick their ports.

A node is the same entry point a user or a container runs (``python -m kraft.cli dev`` or
``server``), with its data in a test directory.  ``start`` waits for the READY line; stderr
goes to a file whose tail is shown when something fails.

Ports come from :mod:`kraft.testing.ports` (re-exported here for the test modules): outside
the kernel's ephemeral range, from slices this process holds with ``flock``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kraft.testing.ports import HOST, bindable, free_port, free_ports

__all__ = ["HOST", "NodeProcess", "ProcessControl", "bindable", "free_port", "free_ports"]

READY = re.compile(r"READY bootstrap=(\S+)(?: admin=(\S+))?(?: listeners=(\S+))?")
START_TIMEOUT_S = 30.0


class ProcessControl:
    """Stop, kill and inspect a node process (``proc`` and ``log_path`` set by the owner)."""

    proc: subprocess.Popen[str] | None
    log_path: Path

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM and wait: the clean shutdown path."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            message = f"{self.log_path.parent.name} ignored SIGTERM:\n{self.log_tail()}"
            raise AssertionError(message) from None

    def kill(self) -> None:
        """kill -9: no cleanup at all."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class NodeProcess(ProcessControl):
    data_dir: Path
    overrides: tuple[str, ...] = ()
    proc: subprocess.Popen[str] | None = None
    dev_flags: tuple[str, ...] = ()  # more `kraft dev` options, e.g. --secure
    bootstrap: str = ""
    admin: str = ""
    # every Kafka listener's "host:port" by name, from the READY line's listeners=NAME://h:p,...
    listeners: dict[str, str] = field(default_factory=dict)
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / "node.stderr.log"

    @property
    def host(self) -> str:
        return self.bootstrap.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    def start(self, port: int = 0, admin_port: int = 0) -> NodeProcess:
        cmd = [
            sys.executable,
            "-m",
            "kraft.cli",
            "dev",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(port),
            "--admin-port",
            str(admin_port),
        ]
        cmd += ["--parent-pid", str(os.getpid())]  # stops if this test process is killed
        cmd += self.dev_flags
        for o in self.overrides:
            cmd += ["--override", o]
        env = {**os.environ, "KRAFT_LOG_LEVEL": os.environ.get("KRAFT_LOG_LEVEL", "INFO")}
        stderr = self.log_path.open("a")
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, bufsize=1
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if m := READY.search(line):
                self.bootstrap, self.admin = m.group(1), m.group(2) or ""
                self.listeners = dict(
                    item.split("://", 1) for item in (m.group(3) or "").split(",") if item
                )
                return self
        self.kill()
        raise AssertionError(f"node did not become ready:\n{self.log_tail()}")
