"""KIP-848 consumer group benchmark: how long a group of 10 members takes to rebalance after an
11th joins, with confluent-kafka consumers (``group.protocol=consumer``) on a real cluster.

    python scripts/bench_consumer_group_rebalance.py [--quick] [--json PATH] [--data-dir DIR]
        [--runs N] [--members N] [--partitions N] [--heartbeat-ms MS] [--log-level LEVEL]

The cluster is 1 controller + 3 brokers (``python -m kraft.cli server`` processes on free
127.0.0.1 ports, ``kraft.node.dev_cluster``'s configs) with ``offsets.topic.num.partitions=10``
and ``group.consumer.heartbeat.interval.ms`` from ``--heartbeat-ms`` (200; its minimum key
lowered to allow it).  The consumers are threads of this process, each calling ``consume()``
in a loop and noting when its assignment (``assignment()``) changes.

Each run (``--runs``, 5; 3 with ``--quick``) uses a new group on a ``--partitions`` (20)
partition topic: ``--members`` (10) consumers subscribe and the group settles (every
partition held by exactly one member, balanced within one); then one more consumer subscribes,
and the rebalance is timed from that ``subscribe()`` until all members hold a full, disjoint,
balanced assignment, at the last member's last change.  In KIP-848 the coordinator cannot call
a member: the others learn of the new target at their next heartbeat, revoke, acknowledge at
once (librdkafka expedites that heartbeat), and the newcomer gets the released partitions at
its next heartbeat: about two heartbeat intervals, whatever the broker does.

Figures: the median of the runs with the range (min-max).  Target: median <= 0.5 s.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_cluster
from bench_cluster import Cluster, Report, StepError, Target, log
from bench_stats import Spread, spread, target_row
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "bench-kip848"
OFFSETS_PARTITIONS = 10
SETTLE_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 20.0
POLL_S = 0.01
FULL = {"runs": 5}
QUICK = {"runs": 3}
DEFAULTS = {"members": 10, "partitions": 20, "heartbeat_ms": 200}
TARGET_S = 0.5


class Member(threading.Thread):
    """One consumer of the group, consumed by this thread; notes each change of its
    assignment with its time."""

    def __init__(self, bootstrap: str, group: str, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "client.id": name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.lock = threading.Lock()
        self.changes: list[tuple[float, frozenset[int]]] = []
        self.stopping = threading.Event()
        self.subscribed_at = 0.0
        self.error: BaseException | None = None

    def subscribe(self) -> None:
        self.subscribed_at = time.perf_counter()
        self.consumer.subscribe([TOPIC])
        self.start()

    def latest(self) -> tuple[float, frozenset[int]]:
        with self.lock:
            return self.changes[-1] if self.changes else (0.0, frozenset())

    def run(self) -> None:
        try:
            held: frozenset[int] = frozenset()
            while not self.stopping.is_set():
                self.consumer.consume(100, timeout=POLL_S)
                now = frozenset(tp.partition for tp in self.consumer.assignment())
                if now != held:
                    held = now
                    with self.lock:
                        self.changes.append((time.perf_counter(), now))
        except BaseException as exc:  # reported by the run in the main thread
            self.error = exc
        finally:
            self.consumer.close()


def settled(members: list[Member], partitions: int) -> float | None:
    """When the members' assignments last changed, if they now split the topic exactly and
    within one partition of each other; None while not so."""
    latest = [m.latest() for m in members]
    sizes = [len(held) for _, held in latest]
    owned = sorted(p for _, held in latest for p in held)
    if owned != list(range(partitions)) or max(sizes) - min(sizes) > 1:
        return None
    return max(at for at, _ in latest)


def wait_settled(members: list[Member], partitions: int, what: str) -> float:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        if errors := [m for m in members if m.error is not None]:
            raise StepError(f"{errors[0].name}: {errors[0].error!r}")
        if (at := settled(members, partitions)) is not None:
            return at
        time.sleep(0.005)
    state = ", ".join(f"{m.name}: {sorted(m.latest()[1])}" for m in members)
    raise StepError(f"timed out waiting for {what}; assignments: {state}")


def stop_all(members: list[Member]) -> None:
    for m in members:
        m.stopping.set()
    for m in members:
        if m.is_alive():
            m.join(CLOSE_TIMEOUT_S)


def one_run(bootstrap: str, run: int, cfg: dict[str, Any]) -> dict[str, float]:
    group = f"bench-kip848-{run}"
    members = [Member(bootstrap, group, f"r{run}-m{i}") for i in range(cfg["members"])]
    try:
        for m in members:
            m.subscribe()
        formed_at = wait_settled(members, cfg["partitions"], "the group to form")
        formed_s = formed_at - members[0].subscribed_at
        time.sleep(2 * cfg["heartbeat_ms"] / 1000)  # a few quiet heartbeats
        late = Member(bootstrap, group, f"r{run}-late")
        members.append(late)
        late.subscribe()
        settled_at = wait_settled(members, cfg["partitions"], "the rebalance after a join")
        join_s = settled_at - late.subscribed_at
    finally:
        stop_all(members)
    log(f"  run {run}: formed in {formed_s:.3f} s; after a join rebalanced in {join_s:.3f} s")
    return {"formed_s": formed_s, "join_s": join_s}


def run_all(cluster: Cluster, cfg: dict[str, Any], report: Report) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(TOPIC, cfg["partitions"], 3)
    admin.create_topics([topic], request_timeout=30)[TOPIC].result(timeout=40)

    def rebalance() -> dict[str, Any]:
        runs = [one_run(cluster.bootstrap, run, cfg) for run in range(cfg["runs"])]
        return {
            "runs": runs,
            "formed_s": spread(r["formed_s"] for r in runs).as_dict(),
            "join_s": spread(r["join_s"] for r in runs).as_dict(),
        }

    bench_cluster.run_step(report, cluster, "rebalance", rebalance, (StepError, KafkaException))


def bench(root: Path, cfg: dict[str, Any], log_level: str) -> Report:
    report: Report = {"machine": bench_cluster.machine_info(), "config": cfg}
    report.update(results={}, errors={})
    overrides = {
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        "group.consumer.heartbeat.interval.ms": str(cfg["heartbeat_ms"]),
        "group.consumer.min.heartbeat.interval.ms": str(min(cfg["heartbeat_ms"], 5000)),
        "broker.session.timeout.ms": "3000",
        "broker.heartbeat.interval.ms": "500",
    }
    cluster = Cluster(root, log_level, controllers=1, brokers=3, overrides=overrides)
    return bench_cluster.bench_on(
        cluster,
        report,
        root,
        lambda: run_all(cluster, cfg, report),
        failures=(StepError, KafkaException, ValueError),
    )


def targets(report: Report) -> list[Target]:
    rebalance = report["results"].get("rebalance")
    runs = Spread(tuple(r["join_s"] for r in rebalance["runs"])) if rebalance else None
    n = report["config"]["members"]
    return [
        target_row(
            f"{n} members rebalance after one joins, median s <= {TARGET_S:g}",
            runs,
            TARGET_S,
            higher_is_better=False,
        )
    ]


def render(report: Report) -> str:
    rows: list[tuple[str, str]] = []
    cfg = report["config"]
    if r := report["results"].get("rebalance"):
        n, heartbeat = cfg["members"], cfg["heartbeat_ms"]
        for key, label in (
            ("formed_s", f"{n} members form the group"),
            ("join_s", f"one joins: {n} -> {n + 1} members rebalanced"),
        ):
            s = r[key]
            rows.append(
                (
                    label,
                    f"median {s['median']:.3f} s  range {s['min']:.3f}-{s['max']:.3f}"
                    f" ({len(s['runs'])} runs, heartbeat {heartbeat} ms)",
                )
            )
    return bench_cluster.render(report, rows, target_width=50)


def parse_args() -> argparse.Namespace:
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--runs", type=int, help="rebalance runs (5)")
        parser.add_argument("--members", type=int, help="members before the join (10)")
        parser.add_argument("--partitions", type=int, help="partitions of the topic (20)")
        parser.add_argument(
            "--heartbeat-ms", type=int, help="group.consumer.heartbeat.interval.ms (200)"
        )

    return bench_cluster.parse_args(__doc__, "3 runs", add_arguments)


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    return bench_cluster.config_of(args, FULL, QUICK, DEFAULTS)


def main() -> int:
    return bench_cluster.main("bench-kip848", parse_args, config_of, bench, targets, render)


if __name__ == "__main__":
    raise SystemExit(main())
