"""A multi-node cluster of real ``kraft server`` processes on 127.0.0.1, for end-to-end tests.

Each node is the container entry point (``python -m kraft.cli server --config FILE``) with a
generated properties file and its own data directory, so a test can ``kill -9``, SIGSTOP,
restart or stop any one of them; it stops itself should the test process die (``--parent-pid``,
as :mod:`kraft.testing` starts its nodes). Ports are picked once (``free_port``, from
:mod:`kraft.testing.ports`: outside the kernel's ephemeral range, from slices this process
holds) and kept across restarts.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka.admin import AdminClient

from integration.node_process import ProcessControl, free_port

READY = re.compile(r"READY (?:bootstrap|controller)=(\S+)(?: admin=(\S+))?")
START_TIMEOUT_S = 30.0


def http_json(url: str, method: str = "GET", body: Any = None, timeout_s: float = 5.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            payload = response.read()
    except urllib.error.HTTPError as exc:
        payload = exc.read()
        raise AssertionError(f"{method} {url} -> {exc.code}: {payload!r}") from None
    return json.loads(payload) if payload else None


def rest_call(node: ServerProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """``(status, body)`` of a REST call to ``node``, errors included: the body is JSON when it
    looks like JSON, else text (``/metrics``)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(node.admin + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            payload, status = response.read(), response.status
    except urllib.error.HTTPError as exc:
        payload, status = exc.read(), exc.code
    text = payload.decode()
    return status, json.loads(text) if text and text[0] in "[{" else text


@dataclass
class ServerProcess(ProcessControl):
    node_id: int
    data_dir: Path
    properties: dict[str, str]
    proc: subprocess.Popen[str] | None = None
    address: str = ""
    admin: str = ""
    # runs the node elsewhere, e.g. ``ip netns exec NS`` (in a network namespace: netns.py)
    command_prefix: tuple[str, ...] = ()
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / "node.stderr.log"
        self.admin = self.properties["admin.listener"]

    @property
    def config_path(self) -> Path:
        return self.data_dir / "server.properties"

    def launch(self) -> ServerProcess:
        """Start the process without waiting for READY."""
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        cmd = [
            *self.command_prefix,
            *(sys.executable, "-m", "kraft.cli", "server", "--config", str(self.config_path)),
        ]
        if not self.command_prefix:  # stops if this test process is killed (no kill -9 leaks)
            cmd += ["--parent-pid", str(os.getpid())]
        env = {**os.environ, "KRAFT_LOG_LEVEL": os.environ.get("KRAFT_LOG_LEVEL", "INFO")}
        stderr = self.log_path.open("a")
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, bufsize=1
        )
        return self

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> ServerProcess:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if m := READY.search(line):
                self.address = m.group(1)
                return self
        self.kill()
        raise AssertionError(f"node {self.node_id} did not become ready:\n{self.log_tail()}")

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def get(self, path: str) -> Any:
        return http_json(self.admin + path)


@dataclass
class LocalCluster:
    root: Path
    controllers: dict[int, ServerProcess] = field(default_factory=dict)
    brokers: dict[int, ServerProcess] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        root: Path,
        n_controllers: int = 3,
        n_brokers: int = 3,
        extra: dict[str, str] | None = None,
        *,
        controllers_know_controllers: bool = True,
        hosts: Mapping[int, str] | None = None,
        command_prefixes: Mapping[int, Sequence[str]] | None = None,
    ) -> LocalCluster:
        """Node ``i`` listens on and advertises ``hosts[i]`` (default 127.0.0.1) and runs
        behind ``command_prefixes[i]`` (default none)."""
        cluster = cls(root)
        cluster_id = secrets.token_urlsafe(16)[:22]
        password = secrets.token_hex(16)
        controller_ids = range(1, n_controllers + 1)

        def host(i: int) -> str:
            return (hosts or {}).get(i, "127.0.0.1")

        raft = {i: f"{host(i)}:{free_port()}" for i in controller_ids}
        kafka = {i: free_port() for i in controller_ids}
        voters = ",".join(f"{i}@{a}" for i, a in raft.items())
        bootstrap = ",".join(f"{host(i)}:{p}" for i, p in kafka.items())
        common = {"cluster.id": cluster_id, **(extra or {})}
        for i in controller_ids:
            cluster.controllers[i] = ServerProcess(
                i,
                root / f"controller-{i}",
                {
                    **common,
                    "node.id": str(i),
                    "process.roles": "controller",
                    "controller.quorum.voters": voters,
                    "controller.quorum.password": password,
                    # lets a standby controller's REST API forward writes to the active one
                    # directly (without it, they go through a broker)
                    **(
                        {"controller.quorum.bootstrap.servers": bootstrap}
                        if controllers_know_controllers
                        else {}
                    ),
                    "listeners": f"CONTROLLER://{host(i)}:{kafka[i]}",
                    "metadata.log.dir": str(root / f"controller-{i}" / "metadata"),
                    "log.dirs": str(root / f"controller-{i}" / "logs"),
                    "admin.listener": f"http://{host(i)}:{free_port()}",
                },
                command_prefix=tuple((command_prefixes or {}).get(i, ())),
            )
        for j in range(n_brokers):
            i = n_controllers + 1 + j
            cluster.brokers[i] = ServerProcess(
                i,
                root / f"broker-{i}",
                {
                    **common,
                    "node.id": str(i),
                    "process.roles": "broker",
                    "controller.quorum.bootstrap.servers": bootstrap,
                    "listeners": f"PLAINTEXT://{host(i)}:{free_port()}",
                    "broker.rack": f"rack-{j % 3 + 1}",
                    "metadata.log.dir": str(root / f"broker-{i}" / "metadata"),
                    "log.dirs": str(root / f"broker-{i}" / "logs"),
                    "admin.listener": f"http://{host(i)}:{free_port()}",
                },
                command_prefix=tuple((command_prefixes or {}).get(i, ())),
            )
        return cluster

    @property
    def nodes(self) -> list[ServerProcess]:
        return [*self.controllers.values(), *self.brokers.values()]

    def start(self) -> LocalCluster:
        for node in self.nodes:
            node.launch()
        for node in self.nodes:
            node.wait_ready()
        return self

    def stop(self) -> None:
        for node in [*self.brokers.values(), *self.controllers.values()]:
            if node.alive():
                node.stop()

    def kill_all(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.alive():
                node.resume()
                node.kill()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers.values() if b.alive())

    def any_broker(self) -> ServerProcess:
        return next(b for b in self.brokers.values() if b.alive())

    def active_controller(self) -> int | None:
        """The leader id reported by a live controller (None if none is known)."""
        for c in self.controllers.values():
            if c.alive():
                try:
                    leader = c.get("/v1/cluster")["controller"]["leader_id"]
                except (AssertionError, OSError):
                    continue
                if leader is not None:
                    return int(leader)
        return None

    def logs(self) -> str:
        return "\n\n".join(f"--- node {n.node_id}\n{n.log_tail(25)}" for n in self.nodes)


# --- helpers shared by the tests of a running cluster ---------------------------------------


@contextmanager
def running_cluster(root: Path, extra: dict[str, str]) -> Iterator[LocalCluster]:
    """Three controllers and three brokers with ``extra`` properties, started; every node
    killed on the way out."""
    cluster = LocalCluster.create(root, 3, 3, extra).start()
    try:
        yield cluster
    finally:
        cluster.kill_all()


def admin_client(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 10000})


class HasLogs(Protocol):
    """A cluster whose nodes' logs a failure shows: LocalCluster or kraft.testing's."""

    def logs(self) -> str: ...


def wait_for(
    what: str,
    condition: Callable[[], Any],
    timeout_s: float,
    cluster: HasLogs,
    *,
    poll_s: float = 0.02,
    ignore: tuple[type[Exception], ...] = (AssertionError, OSError),
) -> Any:
    """Poll ``condition`` every ``poll_s`` until it returns a truthy value (an exception in
    ``ignore`` counts as not yet); on timeout fail naming ``what``, with the nodes' logs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = condition()
        except ignore:
            value = None
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}\n{cluster.logs()}")
