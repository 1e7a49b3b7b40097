"""``kraft dev --controllers M --brokers N``: a local cluster of separate node processes.

Each node is ``python -m kraft.cli server --config <file>``, exactly what a container runs. The
launcher writes the nodes' property files, starts the controllers, waits for their ``READY``
lines, starts the brokers, waits for theirs, and then prints one line for the whole cluster::

    READY bootstrap=127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094 admin=http://127.0.0.1:8080

(the brokers' Kafka listeners and the first broker's REST API). Each child's stderr, and any
stdout line other than its ``READY``, goes to the launcher's stderr as ``[node-<id>] ...``.

Node ids and ports
------------------
Controllers get node ids 1..M, brokers M+1..M+N; brokers get racks ``rack-1..rack-3`` in turn.
With ``--port P`` (default 9092) and ``--admin-port A`` (default P - 1012, so 8080), counting
brokers ``i`` and controllers ``j`` from 0::

    node            Kafka listener              Raft (pysyncobj)   REST admin API
    broker i        PLAINTEXT   P + i           -                  A + i
    controller j    CONTROLLER  P + 100 + j     P + 200 + j        A + 100 + j

With the defaults and 3 + 3 nodes: brokers 9092-9094 (admin 8080-8082), controllers' CONTROLLER
listeners 9192-9194, Raft 9292-9294, admin 8180-8182. ``--port 0`` picks free ports for every
Kafka, CONTROLLER and Raft port, ``--admin-port 0`` for every admin port. Everything binds to
127.0.0.1.

Files
-----
``<data-dir>/cluster.properties`` (mode 0600) holds the cluster id, the controllers' Raft
password and the number of controllers; they are generated once, so starting ``kraft dev``
again on the same directory restarts the same cluster with its data. Each node has
``<data-dir>/node-<id>/`` with ``server.properties`` (rewritten on every start; ``--override``
settings go to every node), ``metadata/`` and ``logs/``.

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
import base64
import contextlib
import ctypes
import os
import re
import secrets
import signal
import socket
import sys
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TextIO

from kraft.node.config import ConfigError, parse_properties

HOST = "127.0.0.1"
CONTROLLER_COUNTS = (1, 3, 5)
CONTROLLER_PORT_OFFSET = 100
RAFT_PORT_OFFSET = 200
MAX_BROKERS = CONTROLLER_PORT_OFFSET  # more would run into the controllers' ports
RACKS = ("rack-1", "rack-2", "rack-3")
IDENTITY_FILE = "cluster.properties"
IDENTITY_KEYS = ("cluster.id", "controller.quorum.password", "controllers")
_IDENTITY_HEADER = "kraft dev: this local cluster's identity; keep it with the node directories"
NODE_CONFIG_FILE = "server.properties"
STARTUP_DEADLINE_S = 60.0
STOP_GRACE_S = 10.0
STDERR_TAIL_LINES = 20
LINE_LIMIT_BYTES = 1 << 20
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # a closed terminal stops it too
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

Role = Literal["controller", "broker"]
FreePorts = Callable[[int], list[int]]


# --- the plan: node ids, ports, racks (pure) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node of the local cluster; ``port`` is its PLAINTEXT or CONTROLLER listener."""

    node_id: int
    role: Role
    port: int
    admin_port: int
    raft_port: int | None = None
    rack: str | None = None

    @property
    def name(self) -> str:
        return f"node-{self.node_id}"

    @property
    def admin_url(self) -> str:
        return f"http://{HOST}:{self.admin_port}"


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    controllers: tuple[NodeSpec, ...]
    brokers: tuple[NodeSpec, ...]

    @property
    def nodes(self) -> tuple[NodeSpec, ...]:
        return self.controllers + self.brokers

    @property
    def quorum_voters(self) -> str:
        """``controller.quorum.voters``: every controller's Raft endpoint."""
        return ",".join(f"{c.node_id}@{HOST}:{c.raft_port}" for c in self.controllers)

    @property
    def quorum_bootstrap_servers(self) -> str:
        """``controller.quorum.bootstrap.servers``: the controllers' CONTROLLER listeners."""
        return ",".join(f"{HOST}:{c.port}" for c in self.controllers)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{b.port}" for b in self.brokers)


def default_admin_port(port: int, admin_port: int | None) -> int:
    """As for the single dev node: 9092 -> 8080, N -> N - 1012, and free ports for --port 0."""
    if admin_port is not None:
        return admin_port
    return port - 1012 if port > 1012 else 0


def pick_free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free a moment ago (bound together, then closed)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in socks]


def plan_cluster(
    controllers: int,
    brokers: int,
    port: int,
    admin_port: int,
    free_ports: FreePorts = pick_free_ports,
) -> ClusterPlan:
    """Node ids, ports and racks by the scheme in the module docstring."""
    if controllers not in CONTROLLER_COUNTS:
        raise ConfigError(f"--controllers {controllers}: use 1, 3 or 5 (a Raft majority)")
    if not 1 <= brokers <= MAX_BROKERS:
        raise ConfigError(f"--brokers {brokers}: use 1 to {MAX_BROKERS}")
    kafka_offsets = [
        *range(brokers),
        *(CONTROLLER_PORT_OFFSET + j for j in range(controllers)),
        *(RAFT_PORT_OFFSET + j for j in range(controllers)),
    ]
    admin_offsets = [*range(brokers), *(CONTROLLER_PORT_OFFSET + j for j in range(controllers))]
    free = iter(
        free_ports((0 if port else len(kafka_offsets)) + (0 if admin_port else len(admin_offsets)))
    )
    kafka = _port_family("--port", port, kafka_offsets, free)
    admin = _port_family("--admin-port", admin_port, admin_offsets, free)
    _check_distinct(kafka + admin)
    raft = kafka[brokers + controllers :]
    return ClusterPlan(
        controllers=tuple(
            NodeSpec(j + 1, "controller", kafka[brokers + j], admin[brokers + j], raft[j])
            for j in range(controllers)
        ),
        brokers=tuple(
            NodeSpec(controllers + 1 + i, "broker", kafka[i], admin[i], rack=RACKS[i % len(RACKS)])
            for i in range(brokers)
        ),
    )


def _port_family(flag: str, base: int, offsets: list[int], free: Iterator[int]) -> list[int]:
    if base == 0:
        return [next(free) for _ in offsets]
    if not 0 < base <= 65535:
        raise ConfigError(f"{flag} {base} is outside 0-65535")
    if base + max(offsets) > 65535:
        raise ConfigError(
            f"{flag} {base}: this cluster needs ports {base}-{base + max(offsets)}, past 65535"
        )
    return [base + offset for offset in offsets]


def _check_distinct(ports: list[int]) -> None:
    seen: set[int] = set()
    for port in ports:
        if port in seen:
            raise ConfigError(
                f"port {port} would serve two nodes: keep --admin-port at least"
                f" {RAFT_PORT_OFFSET + 100} away from --port"
            )
        seen.add(port)


def describe_plan(plan: ClusterPlan) -> list[str]:
    """One line per node, for the launcher's stderr."""
    lines = []
    for c in plan.controllers:
        lines.append(
            f"{c.name} controller  CONTROLLER {HOST}:{c.port}  Raft {HOST}:{c.raft_port}"
            f"  admin {c.admin_url}"
        )
    for b in plan.brokers:
        lines.append(f"{b.name} broker  PLAINTEXT {HOST}:{b.port}  admin {b.admin_url}  {b.rack}")
    return lines


# --- files: cluster identity and per-node properties ----------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterIdentity:
    """What must stay the same across restarts of one local cluster."""

    cluster_id: str
    quorum_password: str
    controllers: int


def new_cluster_id() -> str:
    """Kafka's format: a random UUID, URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def load_or_create_identity(data_dir: Path, controllers: int) -> ClusterIdentity:
    """Read ``<data-dir>/cluster.properties``, or create it on the first start."""
    path = data_dir / IDENTITY_FILE
    if not path.exists():
        identity = ClusterIdentity(new_cluster_id(), secrets.token_urlsafe(24), controllers)
        _write_private(path, render_properties(_identity_properties(identity), _IDENTITY_HEADER))
        return identity
    try:
        props = parse_properties(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    missing = [k for k in IDENTITY_KEYS if not props.get(k)]
    if missing:
        raise ConfigError(
            f"{path} lacks {', '.join(missing)}; restore it or use another --data-dir"
        )
    if props["controllers"] != str(controllers):
        raise ConfigError(
            f"{path}: this cluster has {props['controllers']} controllers; run with"
            f" --controllers {props['controllers']} or use another --data-dir"
        )
    return ClusterIdentity(props["cluster.id"], props["controller.quorum.password"], controllers)


def _identity_properties(identity: ClusterIdentity) -> dict[str, str]:
    return {
        "cluster.id": identity.cluster_id,
        "controller.quorum.password": identity.quorum_password,
        "controllers": str(identity.controllers),
    }


def node_properties(
    spec: NodeSpec,
    plan: ClusterPlan,
    identity: ClusterIdentity,
    data_dir: Path,
    overrides: Mapping[str, str],
) -> dict[str, str]:
    """The ``server.properties`` of one node; ``overrides`` win over generated values."""
    node_dir = data_dir / spec.name
    props = {
        "node.id": str(spec.node_id),
        "process.roles": spec.role,
        "cluster.id": identity.cluster_id,
    }
    if spec.role == "controller":
        props["controller.quorum.voters"] = plan.quorum_voters
        props["controller.quorum.password"] = identity.quorum_password
        props["controller.listener.names"] = "CONTROLLER"
        props["listeners"] = f"CONTROLLER://{HOST}:{spec.port}"
        # a standby controller's REST API forwards writes to the active one through these
        props["controller.quorum.bootstrap.servers"] = plan.quorum_bootstrap_servers
    else:
        props["controller.quorum.bootstrap.servers"] = plan.quorum_bootstrap_servers
        props["listeners"] = f"PLAINTEXT://{HOST}:{spec.port}"
        if spec.rack is not None:
            props["broker.rack"] = spec.rack
    props["admin.listener"] = spec.admin_url
    props["log.dirs"] = str(node_dir / "logs")
    props["metadata.log.dir"] = str(node_dir / "metadata")
    return {**props, **overrides}


def render_properties(props: Mapping[str, str], header: str) -> str:
    """Java properties text that :func:`kraft.node.config.parse_properties` reads back exactly."""
    lines = [f"# {header}"]
    lines += [f"{_escape(k, key=True)}={_escape(v, key=False)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}
_UNWRITABLE = re.compile("[\v\x1c-\x1e\x85\u2028\u2029]")  # line breaks with no escape


def _escape(text: str, *, key: bool) -> str:
    if _UNWRITABLE.search(text):
        raise ConfigError(f"{text!r}: this line-break character cannot go in a properties file")
    out = "".join(_ESCAPES.get(ch, ch) for ch in text)
    if key:
        return re.sub(r"([=:\s#!])", r"\\\1", out)
    return "\\" + out if out[:1] == " " else out


def write_node_configs(
    plan: ClusterPlan,
    identity: ClusterIdentity,
    data_dir: Path,
    overrides: Mapping[str, str],
) -> dict[int, Path]:
    """Write every node's ``server.properties`` (mode 0600: controllers' hold the password)."""
    paths = {}
    for spec in plan.nodes:
        path = data_dir / spec.name / NODE_CONFIG_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        props = node_properties(spec, plan, identity, data_dir, overrides)
        header = f"generated by kraft dev for {spec.name} ({spec.role}); rewritten on every start"
        _write_private(path, render_properties(props, header))
        paths[spec.node_id] = path
    return paths


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    tmp.replace(path)


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
    """Have this process sent SIGTERM when ``parent_pid``, its parent, dies, even by SIGKILL
    (Linux's ``PR_SET_PDEATHSIG``); at once if it is gone already.  Elsewhere, nothing."""
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
) -> int:
    """``kraft dev`` with separate processes; returns the exit status."""
    data_dir = data_dir.expanduser().resolve()  # the children must find it from anywhere
    plan = plan_cluster(controllers, brokers, port, default_admin_port(port, admin_port))
    identity = load_or_create_identity(data_dir, controllers)
    configs = write_node_configs(plan, identity, data_dir, overrides)
    launcher = Launcher(plan, configs, announce, sys.stderr)
    launcher.log(f"{_count(controllers, 'controller')}, {_count(brokers, 'broker')} in {data_dir}")
    for line in describe_plan(plan):
        launcher.log(line)
    return asyncio.run(_supervise(launcher))
