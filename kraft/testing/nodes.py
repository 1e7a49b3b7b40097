"""The node processes of a test cluster: a synchronous launcher beside ``kraft dev``'s asyncio one.

Each node is ``python -m kraft.cli server --config FILE --parent-pid <this process>``
(:func:`kraft.node.dev_cluster.server_command`): exactly what a container runs, in its own
process group (a terminal's Ctrl-C reaches only the test process, which stops the brokers
before the controllers) and stopping itself should the test process die without stopping it,
even by SIGKILL.  Its stdout and stderr go to ``stdout.log`` / ``stderr.log`` in its directory;
the READY line is read from the first.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kafka_protocol.clock import monotonic_s
from kraft.node.dev_cluster import child_environment, server_command
from kraft.node.dev_cluster_plan import NodeSpec

POLL_S = 0.01
LOG_TAIL_LINES = 30
READY_LINE = re.compile(r"^READY (?:bootstrap|controller)=(\S+)(?: admin=(\S+))?", re.MULTILINE)


class ClusterStartError(RuntimeError):
    """A node did not start: the message names it and shows its last log lines."""


@dataclass
class NodeProcess:
    """One node: its plan, its config file and (while it runs) its process."""

    spec: NodeSpec
    role: str  # "broker", "controller" or "broker,controller"
    config: Path
    directory: Path
    proc: subprocess.Popen[bytes] | None = None
    address: str = ""  # host:port from its READY line
    paused: bool = False  # SIGSTOPped
    _stdout_seen: int = field(default=0, repr=False)

    @property
    def node_id(self) -> int:
        return self.spec.node_id

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def is_broker(self) -> bool:
        return "broker" in self.role

    @property
    def stdout_log(self) -> Path:
        return self.directory / "stdout.log"

    @property
    def stderr_log(self) -> Path:
        return self.directory / "stderr.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self) -> None:
        """Start the process; :meth:`ready` tells when it serves."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.address = ""
        self.paused = False
        with self.stdout_log.open("ab") as out, self.stderr_log.open("ab") as err:
            self._stdout_seen = out.tell()
            self.proc = subprocess.Popen(
                server_command(self.spec, self.config),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=child_environment(os.environ),
                process_group=0,
            )

    def ready(self) -> bool:
        """Whether this start has printed its READY line (raises if the process has exited)."""
        if self.address:
            return True
        with self.stdout_log.open("rb") as out:
            out.seek(self._stdout_seen)
            text = out.read().decode(errors="replace")
        if match := READY_LINE.search(text):
            self.address = match.group(1)
            return True
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise ClusterStartError(
                f"{self.describe()} {exit_status(self.proc.returncode)} before it was ready\n"
                f"{self.log_tail()}"
            )
        return False

    def describe(self) -> str:
        return f"{self.name} ({self.role})"

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            tail = self.stderr_log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            tail = []
        if not tail:
            return f"(nothing in {self.stderr_log})"
        return f"last lines of {self.stderr_log}:\n" + "\n".join(f"    {t}" for t in tail)

    def serving(self) -> bool:
        """Running and not paused: its APIs answer."""
        return self.alive() and not self.paused

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if sig in (signal.SIGKILL, signal.SIGTERM):
                    os.kill(self.proc.pid, signal.SIGCONT)  # a paused node must see it too
                self.proc.send_signal(sig)
            self.paused = sig == signal.SIGSTOP


def exit_status(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def wait_ready(nodes: Sequence[NodeProcess], timeout_s: float) -> None:
    """Until every node of ``nodes`` has printed READY; a node that exits first, or the
    deadline, raises :class:`ClusterStartError` naming the node and showing its log."""
    deadline = monotonic_s() + timeout_s
    waiting = list(nodes)
    while waiting:
        waiting = [n for n in waiting if not n.ready()]
        if not waiting:
            return
        if monotonic_s() > deadline:
            first = waiting[0]
            raise ClusterStartError(
                f"{', '.join(n.describe() for n in waiting)} not ready after {timeout_s:g} s\n"
                f"{first.log_tail()}"
            )
        time.sleep(POLL_S)


def stop_nodes(nodes: Sequence[NodeProcess], grace_s: float) -> list[str]:
    """SIGTERM ``nodes`` together, SIGKILL those still running after ``grace_s``; wait for all.
    Returns a line for each node that had to be killed."""
    for node in nodes:
        node.signal(signal.SIGTERM)
    deadline = monotonic_s() + grace_s
    killed = []
    for node in nodes:
        if node.proc is None:
            continue
        try:
            node.proc.wait(max(0.0, deadline - monotonic_s()))
        except subprocess.TimeoutExpired:
            killed.append(f"{node.describe()} still ran {grace_s:g} s after SIGTERM: killed")
            node.signal(signal.SIGKILL)
            node.proc.wait()
    return killed
