"""What the cluster benchmarks (``bench_controller.py``, ``bench_replication.py``,
``bench_groups.py``, ``bench_spark.py``) share: a local cluster of ``python -m kraft.cli
server --config FILE`` processes planned by ``kraft.node.dev_cluster``, latency statistics
(percentiles from ``bench_stats``), the command line every benchmark takes
(``--quick``, ``--json``, ``--data-dir``, ``--log-level``), step failures with the nodes'
stderr tails, and the run itself (a new data directory, the report, its table and its JSON).

Not a benchmark: it measures nothing itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_machine import machine_info
from bench_stats import Target, fmt, percentile

from kraft.node.dev_cluster import (
    NodeSpec,
    child_environment,
    load_or_create_identity,
    plan_cluster,
    server_command,
    write_node_configs,
)
from kraft.testing.ports import free_ports  # the tests' ports: no race with port-0 binds

REPO = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
TAIL_LINES = 25

Report = dict[str, Any]
__all__ = ["Target", "fmt", "machine_info", "percentile"]  # the benchmarks import them from here


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class StepError(Exception):
    """A step failed; ``nodes`` are the nodes whose stderr explains it."""

    def __init__(self, message: str, nodes: list[Node] | None = None) -> None:
        super().__init__(message)
        self.nodes = nodes or []


def wait_until(
    what: str,
    check: Callable[[], Any],
    timeout_s: float,
    *,
    poll_s: float = 0.05,
    errors: tuple[type[Exception], ...] = (OSError, ValueError, KeyError),
) -> Any:
    """Poll ``check`` every ``poll_s`` until truthy (an exception in ``errors`` counts as not
    yet); StepError naming ``what`` and the last error after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if value := check():
                return value
        except errors as exc:
            last = exc
        time.sleep(poll_s)
    raise StepError(f"timed out after {timeout_s:g} s waiting for {what} (last error: {last})")


def wait_formed(cluster: Cluster) -> None:
    """Every broker unfenced and an active controller, as the first broker's REST sees it."""

    def formed() -> bool:
        return cluster.formed(cluster.brokers[0].get("/v1/cluster"))

    wait_until("every broker unfenced and an active controller", formed, READY_TIMEOUT_S)


# --- statistics ---------------------------------------------------------------------------------


def latency_summary(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)
    return {
        "n": len(ordered),
        "p50_ms": 1000 * percentile(ordered, 0.50),
        "p99_ms": 1000 * percentile(ordered, 0.99),
        "max_ms": 1000 * ordered[-1],
        "mean_ms": 1000 * statistics.fmean(ordered),
    }


# --- node processes -----------------------------------------------------------------------------


@dataclass
class Node:
    """One ``kraft server`` process; its stdout after READY and its stderr go to files."""

    spec: NodeSpec
    config: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    killed: bool = False  # by this benchmark: its exit is not a failure

    @property
    def name(self) -> str:
        return f"{self.spec.name} ({self.spec.role})"

    @property
    def stderr_path(self) -> Path:
        return self.config.parent / "stderr.log"

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.spec.port)

    def launch(self) -> None:
        cmd = server_command(self.spec, self.config)
        with self.stderr_path.open("ab") as err:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                cmd, cwd=REPO, env=self.env, stdout=subprocess.PIPE, stderr=err, bufsize=0
            )
        self.killed = False

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Block until the READY line; then copy the rest of stdout to a file in a thread."""
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StepError(f"{self.name} not READY after {timeout_s:g} s", [self])
            if not select.select([stdout], [], [], left)[0]:
                continue
            line = stdout.readline()  # unbuffered: select stays truthful
            if not line:
                raise StepError(f"{self.name} exited ({self.proc.wait()}) before READY", [self])
            if line.startswith(b"READY"):
                break
        sink = (self.config.parent / "stdout.log").open("ab")
        threading.Thread(target=_copy_and_close, args=(stdout, sink), daemon=True).start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def died(self) -> bool:
        """Exited without being killed or stopped by us."""
        return self.proc is not None and not self.killed and self.proc.poll() is not None

    def terminate(self) -> None:
        self.killed = True
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()

    def wait(self, timeout_s: float) -> None:
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout_s)

    def kill(self) -> None:
        self.killed = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def rss_mib(self) -> float | None:
        if not self.alive():
            return None
        assert self.proc is not None
        with contextlib.suppress(OSError), open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return None

    def tail(self, lines: int = TAIL_LINES) -> list[str]:
        try:
            return self.stderr_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ["(no stderr file)"]

    def get(self, path: str, timeout_s: float = 2.0) -> Any:
        url = self.spec.admin_url + path
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return json.loads(response.read())


def _copy_and_close(src: BinaryIO, dst: BinaryIO) -> None:
    with dst:
        shutil.copyfileobj(src, dst)


class Cluster:
    """Controllers and brokers from ``kraft.node.dev_cluster``'s plan, as child processes, with
    ``overrides`` in every node's ``server.properties``."""

    def __init__(
        self,
        root: Path,
        log_level: str,
        controllers: int = 3,
        brokers: int = 3,
        overrides: Mapping[str, str] | None = None,
    ) -> None:
        plan = plan_cluster(controllers, brokers, port=0, admin_port=0, free_ports=free_ports)
        identity = load_or_create_identity(root, controllers)
        configs = write_node_configs(plan, identity, root, overrides=overrides or {})
        env = child_environment(os.environ)
        env["KRAFT_LOG_LEVEL"] = log_level
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        self.controllers = [Node(s, configs[s.node_id], env) for s in plan.controllers]
        self.brokers = [Node(s, configs[s.node_id], env) for s in plan.brokers]
        self.bootstrap = plan.bootstrap
        self.leader_id: int | None = None  # last known active controller

    @property
    def nodes(self) -> list[Node]:
        return self.controllers + self.brokers

    def start(self) -> None:
        for node in self.nodes:
            node.launch()
        for node in self.nodes:
            node.wait_ready()

    def stop(self) -> None:
        """SIGTERM to the brokers, then the controllers; SIGKILL whatever is left."""
        for group in (self.brokers, self.controllers):
            live = [n for n in group if n.alive()]
            for node in live:
                node.terminate()
            deadline = time.monotonic() + STOP_GRACE_S
            for node in live:
                node.wait(max(0.0, deadline - time.monotonic()))
        for node in self.nodes:
            if node.alive():
                log(f"{node.name} still running {STOP_GRACE_S:g} s after SIGTERM: kill -9")
                node.kill()

    def controller(self, node_id: int) -> Node:
        return next(c for c in self.controllers if c.spec.node_id == node_id)

    def broker(self, node_id: int) -> Node:
        return next(b for b in self.brokers if b.spec.node_id == node_id)

    def leader(self) -> int | None:
        """The active controller as reported by a live controller (None: not known)."""
        for node in self.controllers:
            if not node.alive():
                continue
            with contextlib.suppress(OSError, ValueError, KeyError):
                leader = node.get("/v1/cluster")["controller"]["leader_id"]
                if leader is not None and leader >= 0:
                    self.leader_id = int(leader)
                    return self.leader_id
        return None

    def formed(self, view: dict[str, Any]) -> bool:
        """``view`` (a broker's ``/v1/cluster``) has every broker unfenced and a leader."""
        unfenced = sum(not b["fenced"] for b in view["brokers"])
        return unfenced == len(self.brokers) and view["controller"]["leader_id"] is not None

    def suspects(self) -> list[Node]:
        """The nodes whose stderr to show when a step fails."""
        dead = [n for n in self.nodes if n.died()]
        if dead:
            return dead
        leader = [c for c in self.controllers if c.spec.node_id == self.leader_id]
        return [self.brokers[0], *leader]

    def rss(self) -> dict[str, dict[str, float | None]]:
        return {
            "controllers": {n.spec.name: n.rss_mib() for n in self.controllers},
            "brokers": {n.spec.name: n.rss_mib() for n in self.brokers},
        }


# --- failures -----------------------------------------------------------------------------------


def print_tails(nodes: list[Node]) -> None:
    for node in nodes:
        log(f"last stderr lines of {node.name} ({node.stderr_path}):")
        for line in node.tail():
            print(f"    {line}", file=sys.stderr)


def culprits(exc: BaseException, cluster: Cluster) -> list[Node]:
    """The nodes a failure names, else the cluster's suspects."""
    return exc.nodes if isinstance(exc, StepError) and exc.nodes else cluster.suspects()


def step_failed(report: Report, cluster: Cluster, key: str, exc: BaseException) -> bool:
    """Record step ``key``'s failure in the report and say which, with stderr tails.  False
    when a node died on its own (the rest would measure a broken cluster)."""
    message = str(exc) or type(exc).__name__
    report["errors"][key] = message
    log(f"step {key} FAILED: {message}")
    print_tails(culprits(exc, cluster))
    return not any(n.died() for n in cluster.nodes)


def run_step(
    report: Report,
    cluster: Cluster,
    key: str,
    step: Callable[[], Any],
    failures: tuple[type[BaseException], ...] = (StepError,),
) -> bool:
    """Run one step into ``report['results'][key]``; a failure in ``failures`` is reported
    with stderr tails.  False when a node died on its own (the rest would measure a broken
    cluster)."""
    log(f"step {key} ...")
    start = time.monotonic()
    try:
        report["results"][key] = step()
    except failures as exc:
        return step_failed(report, cluster, key, exc)
    log(f"step {key} done in {time.monotonic() - start:.1f} s")
    return True


def bench_on(
    cluster: Cluster,
    report: Report,
    root: Path,
    body: Callable[[], None],
    failures: tuple[type[BaseException], ...] = (StepError,),
) -> Report:
    """Start ``cluster``, run ``body`` (its steps fill ``report``), stop every node; a failure
    outside the steps (``failures``) is reported as the ``startup`` error."""
    try:
        controllers, brokers = len(cluster.controllers), len(cluster.brokers)
        log(
            f"starting {controllers} controller{'s' * (controllers != 1)} and"
            f" {brokers} broker{'s' * (brokers != 1)} in {root}"
        )
        start = time.monotonic()
        cluster.start()
        log(f"cluster up in {time.monotonic() - start:.1f} s")
        body()
    except failures as exc:
        report["errors"]["startup"] = str(exc)
        log(f"FAILED: {exc}")
        print_tails(culprits(exc, cluster))
    finally:
        cluster.stop()
    return report


# --- the report ---------------------------------------------------------------------------------


def latency_text(r: dict[str, Any], digits: int = 2) -> str:
    return (
        f"p50 {r['p50_ms']:.{digits}f}  p99 {r['p99_ms']:.{digits}f}"
        f"  max {r['max_ms']:.{digits}f} ms"
    )


def render(report: Report, rows: list[tuple[str, str]], target_width: int) -> str:
    """The results table, the targets, then what was skipped and what failed."""
    width = max((len(label) for label, _ in rows), default=20) + 2
    lines = [f"{label:{width}}{value}" for label, value in rows]
    lines.append("\ntargets:")
    for name, value, verdict in report["targets"]:
        lines.append(f"  {verdict:7} {name:{target_width}} {value}")
    for key, message in report.get("skipped", {}).items():
        lines.append(f"  skipped {key}: {message}")
    for key, message in report["errors"].items():
        lines.append(f"  ERROR in step {key}: {message}")
    return "\n".join(lines)


# --- the command line ---------------------------------------------------------------------------


def parse_args(
    doc: str | None, quick_help: str, add_arguments: Callable[[argparse.ArgumentParser], None]
) -> argparse.Namespace:
    """``--quick``, ``--json``, ``--data-dir``, the benchmark's own, then ``--log-level``."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON")
    parser.add_argument("--data-dir", type=Path, help="keep the nodes' files and logs here")
    add_arguments(parser)
    parser.add_argument("--log-level", default="INFO", help="KRAFT_LOG_LEVEL of the nodes")
    return parser.parse_args()


def config_of(
    args: argparse.Namespace,
    full: Mapping[str, Any],
    quick: Mapping[str, Any],
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``defaults``, then ``quick`` or ``full``, then every such key given on the command line."""
    cfg: dict[str, Any] = {**(defaults or {}), **(quick if args.quick else full)}
    for key in (*(defaults or {}), *full):
        if (value := getattr(args, key, None)) is not None:
            cfg[key] = value
    return cfg


def run(
    args: argparse.Namespace,
    name: str,
    bench: Callable[[Path, dict[str, Any], str], Report],
    cfg: dict[str, Any],
    targets: Callable[[Report], list[Target]],
    render_report: Callable[[Report], str],
) -> int:
    """``bench(root, cfg, log_level)`` in ``--data-dir`` (new or empty) or a temporary
    directory; print the report, write its JSON; exit status 1 when a step failed."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finally blocks stop the nodes
    started = time.monotonic()
    if args.data_dir is not None:
        if args.data_dir.exists() and any(args.data_dir.iterdir()):
            log(f"--data-dir {args.data_dir} is not empty: the benchmark needs a new cluster")
            return 2
        args.data_dir.mkdir(parents=True, exist_ok=True)
        report = bench(args.data_dir.resolve(), cfg, args.log_level)
    else:
        with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
            report = bench(Path(tmp), cfg, args.log_level)
    report["targets"] = targets(report)
    report["elapsed_s"] = time.monotonic() - started
    print(render_report(report))
    print(
        f"\n{report['elapsed_s']:.0f} s; loadavg at start {report['machine']['loadavg_at_start']}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    return 1 if report["errors"] else 0


def main(
    name: str,
    parse_args: Callable[[], argparse.Namespace],
    config_of: Callable[[argparse.Namespace], dict[str, Any]],
    bench: Callable[[Path, dict[str, Any], str], Report],
    targets: Callable[[Report], list[Target]],
    render_report: Callable[[Report], str],
) -> int:
    """A benchmark's entry point: its arguments, its config, ``run``; 130 on Ctrl-C."""
    try:
        args = parse_args()
        return run(args, name, bench, config_of(args), targets, render_report)
    except KeyboardInterrupt:  # the nodes are stopped by then (finally blocks)
        log("interrupted")
        return 130
