"""``kraft dev --controllers M --brokers N``: a local cluster of separate node processes.

Each node is ``python -m kraft.cli server --config <file>``, exactly what a container runs. The
launcher writes the nodes' property files, starts the controllers, waits for their ``READY``
lines, starts the brokers, waits for theirs, and then prints one line for the whole cluster::

    READY bootstrap=127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094 admin=http://127.0.0.1:8080

(the brokers' Kafka listeners and the first broker's REST API). Each child's stderr, and any
stdout line other than its ``READY``, goes to the launcher's stderr as ``[node-<id>] ...``.

Node ids and ports are planned in :mod:`kraft.node.dev_cluster_plan`, the cluster's identity and
each node's ``server.properties`` written by :mod:`kraft.node.dev_cluster_files`; this module
starts, watches and stops the processes.

Failures and stopping
---------------------
A child that exits before it is ready, or while the cluster runs, is reported (node, exit code,
its last stderr lines); the others are stopped and the launcher exits 1. Startup has a 60 s
deadline. SIGTERM, SIGINT or SIGHUP stops the brokers, then the controllers (SIGTERM, then
SIGKILL after 10 s each), and the launcher exits 0: brokers stopping first can still reach a
controller for their controlled shutdown. So each child runs in its own process group, which a
terminal's Ctrl-C does not reach, and is started with ``--parent-pid`` so that it stops itself
should the launcher die without stopping it (SIGKILL).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import select
import signal
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from kraft.node.dev_cluster_files import load_or_create_identity, write_node_configs
from kraft.node.dev_cluster_plan import (
    HOST,
    ClusterPlan,
    NodeSpec,
    default_admin_port,
    describe_plan,
    plan_cluster,
)
from kraft.node.dev_secure import prepare_secure_cluster

STARTUP_DEADLINE_S = 60.0
STOP_GRACE_S = 10.0
STDERR_TAIL_LINES = 20
LINE_LIMIT_BYTES = 1 << 20
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # a closed terminal stops it too
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def child_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The launcher's environment minus ``KRAFT_*`` settings, which would win over the
    generated files (a stray ``KRAFT_LISTENERS`` would give every node the same port); like
    the single dev node, ``kraft dev`` ignores them. ``KRAFT_LOG_LEVEL`` is kept."""
    env = {k: v for k, v in environ.items() if not k.startswith("KRAFT_")}
    if "KRAFT_LOG_LEVEL" in environ:
        env["KRAFT_LOG_LEVEL"] = environ["KRAFT_LOG_LEVEL"]
    env["PYTHONUNBUFFERED"] = "1"
    return env


READY_FIELD = re.compile(r"\b(bootstrap|admin)=(\S+)")


def cluster_ready_line(plan: ClusterPlan, broker_ready_lines: Sequence[str]) -> str:
    """The launcher's READY line from its brokers' own (what they bound and advertise); the
    plan fills in whatever a broker's line leaves out."""
    bootstrap, admin = [], plan.brokers[0].admin_url
    for i, (spec, line) in enumerate(zip(plan.brokers, broker_ready_lines, strict=True)):
        fields = dict(READY_FIELD.findall(line))
        bootstrap.append(fields.get("bootstrap", f"{HOST}:{spec.port}"))
        if i == 0:
            admin = fields.get("admin", admin)
    return f"READY bootstrap={','.join(bootstrap)} admin={admin}"


# --- the launcher: child processes (I/O) ----------------------------------------------------


@dataclass
class Child:
    spec: NodeSpec
    proc: asyncio.subprocess.Process
    ready_line: str = ""
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_LINES))


def server_command(spec: NodeSpec, config: Path) -> list[str]:
    """``kraft server`` with the node's generated file, as a container runs it, stopping
    itself should this launcher die without stopping it (``--parent-pid``)."""
    return [
        sys.executable,
        "-m",
        "kraft.cli",
        "server",
        "--config",
        str(config),
        "--parent-pid",
        str(os.getpid()),
    ]


def exit_with_parent(parent_pid: int) -> None:
    """Have this process sent SIGTERM when ``parent_pid``, its parent, dies, even by SIGKILL;
    at once if it is gone already.

    A daemon thread waits on a pidfd of the parent (Linux >= 5.3), which is readable once that
    *process* has exited.  ``PR_SET_PDEATHSIG``, the fallback where pidfds are missing, fires
    when the parent's *thread* that started this process exits: a test that starts a node from
    a short-lived thread would see it stop at once.  Elsewhere (not Linux), nothing."""
    if os.getppid() != parent_pid:  # died already: adopted
        os.kill(os.getpid(), signal.SIGTERM)
        return
    try:
        pidfd = os.pidfd_open(parent_pid)
    except ProcessLookupError:
        os.kill(os.getpid(), signal.SIGTERM)
        return
    except (AttributeError, OSError):  # no pidfds (old kernel, not Linux)
        _parent_death_signal(parent_pid)
        return
    if os.getppid() != parent_pid:  # died before pidfd_open: the pid may be another's now
        os.close(pidfd)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    threading.Thread(
        target=_terminate_when_exited, args=(pidfd,), name="parent-watch", daemon=True
    ).start()


def _terminate_when_exited(pidfd: int) -> None:
    select.select([pidfd], [], [])  # readable once the process has exited
    os.kill(os.getpid(), signal.SIGTERM)


def _parent_death_signal(parent_pid: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM)) != 0:
            return
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != parent_pid:  # died before prctl: adopted already
        os.kill(os.getpid(), signal.SIGTERM)


class Launcher:
    """Starts, watches and stops the node processes of one :class:`ClusterPlan`."""

    def __init__(
        self,
        plan: ClusterPlan,
        configs: Mapping[int, Path],
        announce: Callable[[str], None],
        err: TextIO,
        *,
        command: Callable[[NodeSpec, Path], Sequence[str]] = server_command,
        startup_deadline_s: float = STARTUP_DEADLINE_S,
        stop_grace_s: float = STOP_GRACE_S,
    ) -> None:
        self.plan = plan
        self.configs = configs
        self.announce = announce
        self.err = err
        self.command = command
        self.startup_deadline_s = startup_deadline_s
        self.stop_grace_s = stop_grace_s
        self.stopping = asyncio.Event()  # set by SIGTERM / SIGINT
        self.children: list[Child] = []
        self._exited = asyncio.Event()
        self._first_exit: Child | None = None
        self._stopping_children = False
        self._tasks: asyncio.TaskGroup | None = None

    def log(self, message: str) -> None:
        print(f"kraft dev: {message}", file=self.err, flush=True)

    async def run(self) -> int:
        """Run the cluster until a signal (exit status 0) or a failure (1)."""
        async with asyncio.TaskGroup() as tasks:
            self._tasks = tasks
            try:
                return await self._run()
            finally:
                await self._stop_all()

    async def _run(self) -> int:
        try:
            async with asyncio.timeout(self.startup_deadline_s):
                for group in (self.plan.controllers, self.plan.brokers):
                    if (status := await self._start_group(group)) is not None:
                        return status
        except TimeoutError:
            return self._startup_timed_out()
        self.announce(cluster_ready_line(self.plan, [c.ready_line for c in self._brokers()]))
        status = await self._until(asyncio.Event().wait())  # until a signal or an exit
        assert status is not None
        return status

    async def _start_group(self, group: Sequence[NodeSpec]) -> int | None:
        started = []
        for spec in group:
            child = await self._spawn(spec)
            if child is None:
                return 1
            started.append(child)
        status = await self._until(asyncio.gather(*(c.ready.wait() for c in started)))
        if status is None and group[0].role == "controller":
            self.log(f"controllers ready (quorum voters {self.plan.quorum_voters})")
        return status

    async def _spawn(self, spec: NodeSpec) -> Child | None:
        assert self._tasks is not None
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.command(spec, self.configs[spec.node_id]),
                # Its own process group: a terminal's Ctrl-C (SIGINT to the foreground group)
                # reaches only the launcher, which stops the brokers before the controllers.
                process_group=0,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=child_environment(os.environ),
                limit=LINE_LIMIT_BYTES,
            )
        except OSError as exc:
            self.log(f"cannot start {spec.name}: {exc}")
            return None
        child = Child(spec, proc)
        self.children.append(child)
        self._tasks.create_task(self._watch(child))
        return child

    async def _until(self, awaitable: Awaitable[object]) -> int | None:
        """Wait for ``awaitable``; None when it completes, 0 on a signal, 1 (after a report)
        when a child exits first."""
        waiters = [
            asyncio.ensure_future(awaitable),
            asyncio.ensure_future(self.stopping.wait()),
            asyncio.ensure_future(self._exited.wait()),
        ]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
        if self.stopping.is_set():
            return 0
        if self._first_exit is not None:
            self._report_exit(self._first_exit)
            return 1
        return None

    async def _watch(self, child: Child) -> None:
        proc = child.proc
        assert proc.stdout is not None and proc.stderr is not None
        await asyncio.gather(self._pump_stdout(child, proc.stdout), self._pump_stderr(child))
        await proc.wait()
        if self._first_exit is None and not self._stopping_children:
            self._first_exit = child
            self._exited.set()

    async def _pump_stdout(self, child: Child, stream: asyncio.StreamReader) -> None:
        async for line in _lines(stream):
            if line.startswith("READY") and not child.ready.is_set():
                child.ready_line = line
                child.ready.set()
            self._relay(child, line)

    async def _pump_stderr(self, child: Child) -> None:
        assert child.proc.stderr is not None
        async for line in _lines(child.proc.stderr):
            child.tail.append(line)
            self._relay(child, line)

    def _relay(self, child: Child, line: str) -> None:
        self.err.write(f"[{child.spec.name}] {line}\n")
        self.err.flush()

    def _report_exit(self, child: Child) -> None:
        when = "while the cluster was running" if child.ready.is_set() else "before it was ready"
        self.log(f"{child.spec.name} ({child.spec.role}) {_exit_status(child.proc)} {when}")
        if child.tail:
            self.log(f"last stderr lines of {child.spec.name}:")
            for line in child.tail:
                self.err.write(f"    {line}\n")
        self.log("stopping the other nodes")

    def _startup_timed_out(self) -> int:
        waiting = [f"{c.spec.name} ({c.spec.role})" for c in self.children if not c.ready.is_set()]
        self.log(
            f"the cluster was not ready after {self.startup_deadline_s:g} s; still waiting for"
            f" {', '.join(waiting) or 'nodes that were not started yet'}. Check the [node-N]"
            " lines above: are the ports free, did the controllers elect a leader"
            f" (kraft cluster status --admin {self.plan.controllers[0].admin_url}), and does"
            " the data directory belong to this cluster?"
        )
        return 1

    def _brokers(self) -> list[Child]:
        return [c for c in self.children if c.spec.role == "broker"]

    async def _stop_all(self) -> None:
        """Brokers first, so that they can still reach the controllers while stopping."""
        self._stopping_children = True
        for role in ("broker", "controller"):
            alive = [c for c in self.children if c.spec.role == role and c.proc.returncode is None]
            await self._stop(alive)
            for child in alive:
                if (child.proc.returncode or 0) > 0:
                    self.log(f"{child.spec.name} {_exit_status(child.proc)} while stopping")

    async def _stop(self, children: list[Child]) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                child.proc.terminate()
        try:
            async with asyncio.timeout(self.stop_grace_s):
                await asyncio.gather(*(c.proc.wait() for c in children))
        except TimeoutError:
            for child in children:
                if child.proc.returncode is None:
                    self.log(f"{child.spec.name} still runs {self.stop_grace_s:g} s after SIGTERM")
                    with contextlib.suppress(ProcessLookupError):
                        child.proc.kill()
            await asyncio.gather(*(c.proc.wait() for c in children))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _exit_status(proc: asyncio.subprocess.Process) -> str:
    code = proc.returncode
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


async def _lines(stream: asyncio.StreamReader) -> AsyncIterator[str]:
    while True:
        try:
            raw = await stream.readline()
        except ValueError:  # longer than LINE_LIMIT_BYTES: asyncio has dropped it
            yield "(an over-long line was dropped)"
            continue
        if not raw:
            return
        yield raw.decode(errors="replace").rstrip("\r\n")


async def _supervise(launcher: Launcher) -> int:
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, launcher.stopping.set)
    try:
        return await launcher.run()
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


def run_dev_cluster(
    data_dir: Path,
    controllers: int,
    brokers: int,
    port: int,
    admin_port: int | None,
    overrides: Mapping[str, str],
    announce: Callable[[str], None],
    *,
    secure: bool = False,
) -> int:
    """``kraft dev`` with separate processes; returns the exit status.  ``secure``: SASL_SSL
    between every node and for clients (:func:`kraft.node.dev_secure.prepare_secure_cluster`),
    the admin's password and client settings printed before READY."""
    data_dir = data_dir.expanduser().resolve()  # the children must find it from anywhere
    plan = plan_cluster(controllers, brokers, port, default_admin_port(port, admin_port))
    identity = load_or_create_identity(data_dir, controllers)
    node_settings = None
    if secure:
        nodes = [(s.node_id, s.role, data_dir / s.name / "metadata") for s in plan.nodes]
        secured, node_settings = prepare_secure_cluster(data_dir, nodes)
        plain_announce = announce

        def announce(line: str) -> None:
            bootstrap = line.split("bootstrap=", 1)[1].split()[0]
            print(secured.client_settings(bootstrap), file=sys.stderr, flush=True)
            plain_announce(line)

    configs = write_node_configs(plan, identity, data_dir, overrides, node_settings)
    launcher = Launcher(plan, configs, announce, sys.stderr)
    launcher.log(f"{_count(controllers, 'controller')}, {_count(brokers, 'broker')} in {data_dir}")
    for line in describe_plan(plan, "SASL_SSL" if secure else "PLAINTEXT"):
        launcher.log(line)
    return asyncio.run(_supervise(launcher))
