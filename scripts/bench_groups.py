"""Consumer group benchmark: rebalance time of 4 members after the initial delay, and a
group's catch-up rate on a backlog as a ratio to the live produce rate, on a real cluster.

    python scripts/bench_groups.py [--quick] [--json PATH] [--data-dir DIR]
        [--rebalances N] [--members N] [--initial-delay-ms MS] [--heartbeat-ms MS]
        [--count N] [--size BYTES] [--partitions N] [--consumers N]
        [--log-level LEVEL]

The cluster is 1 controller + 3 brokers, each a ``python -m kraft.cli server --config FILE``
process on free 127.0.0.1 ports, configured by ``kraft.node.dev_cluster`` with
``group.initial.rebalance.delay.ms`` from the flag (default 3000, Kafka's),
``offsets.topic.num.partitions=10`` and a 3000/500 ms broker session/heartbeat.
``--data-dir DIR`` (new or empty) keeps each node's files, with its stderr in
``DIR/node-<id>/stderr.log``.  The clients are confluent-kafka (librdkafka): the rebalance
members are threads of this process, the catch-up members are processes of their own (the
Python work per record would otherwise share one GIL and be the limit).

Steps (progress on stderr, a results table on stdout, everything in ``--json PATH``):

1. Rebalance, R times, each on a new group over an 8-partition topic (``range``):
   ``--members`` (4) consumers subscribe one after the other (within a few ms), and the
   initial rebalance is timed from the first ``subscribe()`` until every member holds its
   part of a full, disjoint assignment (its latest ``on_assign``).  The coordinator waits as
   Kafka's ``InitialDelayedJoin`` does: ``group.initial.rebalance.delay.ms`` after the first
   join, then, because members joined meanwhile, one more delay with no new member; so the
   figure is that time minus 2 x the delay.  (Also shown: the time from the last
   ``subscribe()`` minus one delay, which counts the second delay's remainder.)  Then one
   member closes (LeaveGroup) and, once the others are rebalanced, a new one joins the Stable
   group: each timed until every member holds the new assignment; the members learn of these
   rebalances from a heartbeat (``--heartbeat-ms``, 500).
2. Catch-up: ``--count`` records of ``--size`` bytes produced as fast as one producer can
   (librdkafka's defaults, acks=all, linger 5 ms) to a ``--partitions`` (6) partition topic
   with replication factor 3: the live produce rate is records / (first ``produce()`` to the
   last delivery report).  Then two new groups of ``--consumers`` (3) read the backlog from
   the beginning, one with librdkafka's defaults and one with ``fetch.queue.backoff.ms=10``
   (see ``CATCH_UP_GROUPS``): the catch-up rate is records / (first member's assignment to
   the last record read).  Figure: catch-up rate / live produce rate.  Each member reads with
   ``consume(1000)`` and notes how long it got nothing between its first and its last
   record: with the defaults that is librdkafka's fetch backoff, a 1 s wait each time
   ``queued.min.messages`` records are queued, whatever the brokers do (shown as "the bound").

Figures over the rebalance runs are shown as their median with the range (min-max).
Targets: the initial rebalance beyond the delays and a join to a Stable group, max over the
runs <= 1 s (a worst case, judged on the slowest run, never on the best); catch-up ratio >= 3
(on the second group, one run).  Every wait has a deadline, a failing
step is reported with the nodes' last stderr lines, and every node is stopped on exit or
Ctrl-C.  ``--quick`` (about 50 s): 3 rebalances, 500,000 records; the full run (about 75 s): 5
rebalances, 1,000,000 records.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
import multiprocessing.synchronize
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_cluster
from bench_cluster import (
    Cluster,
    Report,
    StepError,
    Target,
    log,
)
from bench_stats import Spread, spread, target_row
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

REBALANCE_TOPIC = "bench-rebalance"
REBALANCE_PARTITIONS = 8
BACKLOG_TOPIC = "bench-backlog"
OFFSETS_PARTITIONS = 10
SESSION_TIMEOUT_MS = 10_000
BALANCE_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 120.0
CATCH_UP_TIMEOUT_S = 300.0
CLOSE_TIMEOUT_S = 20.0
POLL_S = 0.05
REPORT_S = 0.05  # a catch-up member process's progress reports
STALL_S = 0.2  # a member that gets no record for this long, mid-backlog, has stalled

FULL = {"rebalances": 5, "count": 1_000_000}
QUICK = {"rebalances": 3, "count": 500_000}
DEFAULTS = {
    "members": 4,
    "initial_delay_ms": 3000,
    "heartbeat_ms": 500,
    "size": 100,
    "partitions": 6,
    "consumers": 3,
}

TARGET_REBALANCE_S = 1.0
TARGET_RATIO = 3.0


def wait_until(what: str, check: Callable[[], Any], timeout_s: float) -> Any:
    return bench_cluster.wait_until(
        what, check, timeout_s, poll_s=0.02, errors=(OSError, ValueError, KeyError, KafkaException)
    )


def create_topic(admin: AdminClient, name: str, partitions: int, rf: int) -> None:
    topic = NewTopic(name, partitions, rf)
    admin.create_topics([topic], request_timeout=30)[name].result(timeout=40)

    def led() -> bool:
        t = admin.list_topics(name, timeout=5).topics[name]
        return len(t.partitions) == partitions and all(
            p.leader >= 0 and len(p.isrs) == rf for p in t.partitions.values()
        )

    wait_until(f"{name}: every partition led, full ISRs", led, 30)


# --- group members ------------------------------------------------------------------------------


class Member(threading.Thread):
    """One librdkafka consumer in a group, consumed in batches (``consume(1000)``, as a
    high-throughput application does) by this thread until ``stop``; notes each assignment
    (``on_assign``, eager protocol: the whole assignment) with its time, the records it reads
    (count, and per partition the next offset), and how long it waited for records between
    its first and its last (``idle_s``; ``stalls``: waits of ``STALL_S`` or more)."""

    def __init__(self, bootstrap: str, group: str, name: str, **conf: Any) -> None:
        super().__init__(name=f"member-{name}", daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "partition.assignment.strategy": "range",
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "auto.offset.reset": "earliest",
                "socket.timeout.ms": 10_000,
                **conf,
            }
        )
        self.lock = threading.Lock()
        self.assigned: list[tuple[float, frozenset[int]]] = []
        self.subscribed_at = 0.0
        self.stopping = threading.Event()
        self.read = 0
        self.positions: dict[int, int] = {}
        self.first_read_at = 0.0
        self.last_read_at = 0.0
        self.idle_s = 0.0
        self.stalls = 0
        self._waiting_s = 0.0  # empty consume() calls since the last record
        self.error: BaseException | None = None

    def subscribe(self, topic: str) -> None:
        self.subscribed_at = time.perf_counter()
        self.consumer.subscribe([topic], on_assign=self._on_assign)
        self.start()

    def _on_assign(self, _consumer: Consumer, partitions: list[Any]) -> None:
        with self.lock:
            self.assigned.append((time.perf_counter(), frozenset(p.partition for p in partitions)))

    def assignment(self) -> tuple[float, frozenset[int]] | None:
        with self.lock:
            return self.assigned[-1] if self.assigned else None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                started = time.perf_counter()
                msgs = self.consumer.consume(1000, timeout=POLL_S)
                if msgs:
                    self._count(msgs)
                elif self.read:
                    self._waiting_s += time.perf_counter() - started
        except BaseException as exc:  # reported by the step in the main thread
            self.error = exc
        finally:
            self.consumer.close()

    def _count(self, msgs: list[Message]) -> None:
        # Comprehensions, not a loop with a body: the Python work per record is most of what
        # a catch-up member spends its time on.
        now = time.perf_counter()
        errors = [e for e in (m.error() for m in msgs) if e is not None]
        if real := [e for e in errors if e.code() != KafkaError._PARTITION_EOF]:
            raise KafkaException(real[0])
        last = {m.partition(): m.offset() for m in msgs if m.error() is None}
        for partition, offset in last.items():
            assert partition is not None and offset is not None
            self.positions[partition] = max(self.positions.get(partition, 0), offset + 1)
        if not self.read:
            self.first_read_at = now
        elif self._waiting_s:
            self.idle_s += self._waiting_s
            if self._waiting_s >= STALL_S:
                self.stalls += 1
        self._waiting_s = 0.0
        self.read += len(msgs) - len(errors)
        self.last_read_at = now

    def stop(self) -> None:
        self.stopping.set()


def stop_all(members: list[Member]) -> None:
    for m in members:
        m.stop()
    for m in members:
        if m.is_alive():
            m.join(CLOSE_TIMEOUT_S)
    errors = [f"{m.name}: {m.error!r}" for m in members if m.error is not None]
    if errors:
        raise StepError(f"consumer thread failed: {errors}")


def balanced(members: list[Member], partitions: int, after: float) -> float | None:
    """When every member got, after ``after``, the assignment it now holds, and these split
    the topic's partitions exactly; None while not so."""
    latest = [m.assignment() for m in members]
    if any(a is None or a[0] < after for a in latest):
        return None
    owned = sorted(p for a in latest if a is not None for p in a[1])
    if owned != list(range(partitions)):
        return None
    return max(a[0] for a in latest if a is not None)


def wait_balanced(members: list[Member], partitions: int, after: float, what: str) -> float:
    def state() -> str:
        return ", ".join(f"{m.name}: {m.assignment()}" for m in members)

    try:
        at: float = wait_until(
            what, lambda: balanced(members, partitions, after), BALANCE_TIMEOUT_S
        )
    except StepError as exc:
        raise StepError(f"{exc}; assignments (time, partitions): {state()}") from None
    return at


# --- step 1: rebalance --------------------------------------------------------------------------


def rebalance_run(bootstrap: str, run: int, cfg: dict[str, Any]) -> dict[str, float]:
    """``members`` subscribe to a new group together (the initial rebalance); then one leaves
    (LeaveGroup) and, once the rest are rebalanced, a new one joins."""
    group = f"bench-rebalance-{run}"
    conf = {"heartbeat.interval.ms": cfg["heartbeat_ms"], "enable.auto.commit": False}
    members = [Member(bootstrap, group, f"r{run}-m{i}", **conf) for i in range(cfg["members"])]
    delay_s = cfg["initial_delay_ms"] / 1000
    try:
        for m in members:
            m.subscribe(REBALANCE_TOPIC)
        first, last = members[0].subscribed_at, members[-1].subscribed_at
        if last - first > delay_s / 2:
            raise StepError(f"the members subscribed over {last - first:.3f} s: not together")
        initial_at = wait_balanced(members, REBALANCE_PARTITIONS, last, "the initial rebalance")
        initial_s = initial_at - first
        time.sleep(1.0)  # the group is Stable; its members heartbeat
        leaver = members.pop(0)
        left_at = time.perf_counter()
        stop_all([leaver])  # close(): LeaveGroup
        at = wait_balanced(members, REBALANCE_PARTITIONS, left_at, "a member left")
        leave_s = at - left_at
        time.sleep(1.0)
        late = Member(bootstrap, group, f"r{run}-late", **conf)
        members.append(late)
        late.subscribe(REBALANCE_TOPIC)
        at = wait_balanced(members, REBALANCE_PARTITIONS, late.subscribed_at, "a member joined")
        join_s = at - late.subscribed_at
    finally:
        stop_all(members)
    out = {
        "initial_s": initial_s,
        "subscribe_spread_s": last - first,
        "after_delay_s": initial_s - 2 * delay_s,
        "literal_s": initial_at - last - delay_s,
        "leave_s": leave_s,
        "join_s": join_s,
    }
    log(
        f"  run {run}: initial rebalance {initial_s:.3f} s from the first subscribe"
        f" ({out['after_delay_s']:.3f} s beyond two delays); a member left: {leave_s:.3f} s;"
        f" a member joined: {join_s:.3f} s"
    )
    return out


def step_rebalance(cluster: Cluster, cfg: dict[str, Any]) -> dict[str, Any]:
    runs = [rebalance_run(cluster.bootstrap, run, cfg) for run in range(cfg["rebalances"])]
    out: dict[str, Any] = {"runs": runs, "initial_delay_s": cfg["initial_delay_ms"] / 1000}
    for key in ("after_delay_s", "literal_s", "leave_s", "join_s"):
        out[key] = spread(r[key] for r in runs).as_dict()
    return out


# --- step 2: catch-up ---------------------------------------------------------------------------


def produce_backlog(bootstrap: str, count: int, size: int, partitions: int) -> dict[str, Any]:
    """``count`` records as fast as one producer can, round-robin over the partitions."""
    errors: list[str] = []
    acked = [0]

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err.name())
        else:
            acked[0] += 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "queue.buffering.max.kbytes": 256 * 1024,
            "message.timeout.ms": 60_000,
            "on_delivery": delivered,
        }
    )
    value = b"x" * size
    deadline = time.monotonic() + FLUSH_TIMEOUT_S
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(BACKLOG_TOPIC, value, partition=i % partitions)
                break
            except BufferError:
                if time.monotonic() > deadline:
                    raise StepError("the producer's queue stayed full until the deadline") from None
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    unflushed = producer.flush(FLUSH_TIMEOUT_S)
    wall = time.perf_counter() - start
    if unflushed or errors:
        raise StepError(
            f"backlog: {acked[0]:,} of {count:,} acknowledged, {len(errors):,} failed"
            f" ({sorted(set(errors))[:3]}), {unflushed:,} still queued"
        )
    return {"n": count, "wall_s": wall, "msg_s": count / wall, "mb_s": count * size / wall / 1e6}


@dataclass
class Progress:
    """What a catch-up member process reports, every ``REPORT_S`` and once more at the end."""

    name: str
    positions: dict[int, int]
    read: int
    subscribed_at: float
    first_assigned_at: float | None
    first_read_at: float
    last_read_at: float
    idle_s: float
    stalls: int
    error: str | None = None
    done: bool = False


def catch_up_member(
    bootstrap: str,
    group: str,
    name: str,
    conf: dict[str, Any],
    stop: multiprocessing.synchronize.Event,
    reports: multiprocessing.Queue[Progress],
) -> None:
    """A catch-up member in its own process (a group's members do not share a GIL): a
    :class:`Member` thread reads, this reports its progress until ``stop``."""
    member = Member(bootstrap, group, name, **conf)
    member.subscribe(BACKLOG_TOPIC)

    def progress(done: bool = False) -> Progress:
        first = member.assigned[0][0] if member.assigned else None
        error = None if member.error is None else repr(member.error)
        return Progress(
            name,
            dict(member.positions),
            member.read,
            member.subscribed_at,
            first,
            member.first_read_at,
            member.last_read_at,
            member.idle_s,
            member.stalls,
            error,
            done,
        )

    while not stop.wait(REPORT_S) and member.error is None:
        reports.put(progress())
    member.stop()
    member.join(CLOSE_TIMEOUT_S)
    reports.put(progress(done=True))


def catch_up(
    bootstrap: str, cfg: dict[str, Any], group: str, conf: dict[str, Any]
) -> dict[str, Any]:
    """A new group of ``consumers`` processes reads the backlog from the beginning to its end."""
    ends = {p: cfg["count"] // cfg["partitions"] for p in range(cfg["partitions"])}
    for i in range(cfg["count"] % cfg["partitions"]):
        ends[i] += 1
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    reports: multiprocessing.Queue[Progress] = ctx.Queue()
    names = [f"{group}-{i}" for i in range(cfg["consumers"])]
    procs = [
        ctx.Process(target=catch_up_member, args=(bootstrap, group, n, conf, stop, reports))
        for n in names
    ]
    latest: dict[str, Progress] = {}

    def drain() -> None:
        with contextlib.suppress(queue.Empty):
            while True:
                report = reports.get_nowait()
                latest[report.name] = report
                if report.error is not None:
                    raise StepError(f"consumer {report.name} failed: {report.error}")

    def caught_up() -> bool:
        drain()
        if dead := [p.name for p in procs if not p.is_alive()]:
            raise StepError(f"consumer processes exited: {dead}")
        positions: dict[int, int] = {}
        for report in latest.values():
            for p, o in report.positions.items():
                positions[p] = max(positions.get(p, 0), o)
        return positions == ends

    try:
        for proc in procs:
            proc.start()
        try:
            wait_until(f"{group} to read the whole backlog", caught_up, CATCH_UP_TIMEOUT_S)
        except StepError as exc:
            read = sum(r.read for r in latest.values())
            raise StepError(f"{exc}; read {read:,} of {cfg['count']:,}") from None
    finally:
        stop.set()
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        while time.monotonic() < deadline and not all(
            n in latest and latest[n].done for n in names
        ):
            with contextlib.suppress(StepError):
                drain()
            time.sleep(0.02)
        for proc in procs:
            if proc.pid is None:  # never started
                continue
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
    final = [latest[n] for n in names]
    first_assigned = min(r.first_assigned_at for r in final if r.first_assigned_at is not None)
    wall = max(r.last_read_at for r in final) - first_assigned
    reading = sum(r.last_read_at - r.first_read_at for r in final)
    return {
        "n": cfg["count"],
        "read": sum(r.read for r in final),
        "wall_s": wall,
        "msg_s": cfg["count"] / wall,
        "mb_s": cfg["count"] * cfg["size"] / wall / 1e6,
        "join_s": first_assigned - min(r.subscribed_at for r in final),
        "per_member": [r.read for r in final],
        "idle_share": sum(r.idle_s for r in final) / reading if reading > 0 else 0.0,
        "stalls": sum(r.stalls for r in final),
        "conf": conf,
    }


# Two groups read the same backlog: one with librdkafka's defaults, and one that re-checks a
# paused partition after 10 ms instead of 1 s.  librdkafka stops fetching a partition once
# ``queued.min.messages`` (100,000) records wait in the consumer's queue (all its partitions
# together: their fetch queues forward to one), and looks again only after
# ``fetch.queue.backoff.ms`` (1,000): when the brokers serve faster than the application
# drains, a consumer idles up to a second at a time (seen with ``debug=fetch``: "(102812/100000
# msgs, 10039/65536 kb queued) is not fetchable: queued.min.messages exceeded", "Fetch backoff
# for 1000ms: Local: Queue full", then no fetch for 1.0 s).  With the defaults a member reads
# at most about ``queued.min.messages`` records per backoff, whatever the brokers do.
CATCH_UP_GROUPS = {
    "defaults": {},
    "backoff_10ms": {"fetch.queue.backoff.ms": 10},
}
LIBRDKAFKA_QUEUED_MIN_MESSAGES = 100_000
LIBRDKAFKA_FETCH_QUEUE_BACKOFF_S = 1.0


def default_backoff_bound(count: int, consumers: int) -> tuple[int, float | None]:
    """A member of a group with librdkafka's defaults that is fed faster than it drains waits
    out a backoff each time ``queued.min.messages`` records are queued: (backoffs per member,
    the group's records/s at most; None: no backoff needed)."""
    per_member = math.ceil(count / consumers)
    backoffs = math.ceil(per_member / LIBRDKAFKA_QUEUED_MIN_MESSAGES) - 1
    if backoffs <= 0:
        return 0, None
    return backoffs, count / (backoffs * LIBRDKAFKA_FETCH_QUEUE_BACKOFF_S)


def step_catch_up(cluster: Cluster, cfg: dict[str, Any]) -> dict[str, Any]:
    live = produce_backlog(cluster.bootstrap, cfg["count"], cfg["size"], cfg["partitions"])
    log(f"  live produce: {live['msg_s']:,.0f} records/s ({live['mb_s']:.1f} MB/s)")
    out: dict[str, Any] = {"live": live}
    for name, conf in CATCH_UP_GROUPS.items():
        group = catch_up(cluster.bootstrap, cfg, f"bench-catch-up-{name}", conf)
        group["ratio"] = group["msg_s"] / live["msg_s"]
        log(
            f"  catch-up by {cfg['consumers']} consumers ({name}): {group['msg_s']:,.0f}"
            f" records/s, ratio {group['ratio']:.2f} (read {group['read']:,}:"
            f" {group['per_member']}; idle {group['idle_share']:.0%} of their reading time,"
            f" {group['stalls']} stalls)"
        )
        out[name] = group
    backoffs, bound = default_backoff_bound(cfg["count"], cfg["consumers"])
    out["default_backoffs"] = backoffs
    out["default_bound_ratio"] = None if bound is None else bound / live["msg_s"]
    return out


# --- the run ------------------------------------------------------------------------------------

STEP_FAILURES = (StepError, KafkaException, OSError, AssertionError)  # a step's, reported


def wait_coordinator(admin: AdminClient) -> None:
    """The first FindCoordinator creates ``__consumer_offsets``; a group's coordinator is
    available once that is done and its partition loaded: not part of any rebalance timed."""

    def described() -> bool:
        found = admin.describe_consumer_groups(["bench-warm-up"], request_timeout=5)
        return found["bench-warm-up"].result(timeout=10).coordinator is not None

    wait_until("a group coordinator (__consumer_offsets created)", described, 60)


def run_all(cluster: Cluster, cfg: dict[str, Any], report: dict[str, Any]) -> None:
    bench_cluster.wait_formed(cluster)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 5000})
    create_topic(admin, REBALANCE_TOPIC, REBALANCE_PARTITIONS, 3)
    create_topic(admin, BACKLOG_TOPIC, cfg["partitions"], 3)
    wait_coordinator(admin)
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("rebalance", lambda: step_rebalance(cluster, cfg)),
        ("catch_up", lambda: step_catch_up(cluster, cfg)),
    ]
    for key, step in steps:
        if not bench_cluster.run_step(report, cluster, key, step, STEP_FAILURES):
            log("a node died: stopping")
            return


def bench(root: Path, cfg: dict[str, Any], log_level: str) -> Report:
    report: Report = {"machine": bench_cluster.machine_info(), "config": cfg}
    report.update(results={}, errors={})
    overrides = {
        "group.initial.rebalance.delay.ms": str(cfg["initial_delay_ms"]),
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
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


# --- report -------------------------------------------------------------------------------------


def targets(report: Report) -> list[Target]:
    """(target, measured, PASS/MISS/n/a)."""
    results = report["results"]
    members = report["config"]["members"]
    rebalance = results.get("rebalance", {})

    def runs(key: str) -> Spread | None:
        return Spread(tuple(rebalance[key]["runs"])) if key in rebalance else None

    # The rebalance targets are worst cases ("max over the runs"): judged on the slowest run,
    # which is stricter than the median; the catch-up is one run.
    return [
        target_row(
            f"initial rebalance of {members} members beyond the delays, max s"
            f" <= {TARGET_REBALANCE_S:g}",
            runs("after_delay_s"),
            TARGET_REBALANCE_S,
            higher_is_better=False,
            statistic="max",
        ),
        target_row(
            f"a member joins a Stable group (to {members}), max s <= {TARGET_REBALANCE_S:g}",
            runs("join_s"),
            TARGET_REBALANCE_S,
            higher_is_better=False,
            statistic="max",
        ),
        target_row(
            f"catch-up / live produce (fetch.queue.backoff.ms 10) >= {TARGET_RATIO:g}",
            results.get("catch_up", {}).get("backoff_10ms", {}).get("ratio"),
            TARGET_RATIO,
            higher_is_better=True,
        ),
    ]


def result_rows(results: dict[str, Any], cfg: dict[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    if r := results.get("rebalance"):
        delay_ms = r["initial_delay_s"] * 1000
        n = cfg["members"]
        for key, label in (
            ("after_delay_s", f"initial rebalance of {n} members - 2 x delay"),
            ("literal_s", f"  (from the {n}th subscribe - 1 x delay)"),
            ("leave_s", f"a member leaves ({n} -> {n - 1})"),
            ("join_s", f"a member joins ({n - 1} -> {n})"),
        ):
            x = Spread(tuple(r[key]["runs"]))
            times = "  ".join(f"{t:.3f}" for t in x.runs)
            rows.append((label, f"median {x.text('.3f', 's')}  ({times})"))
        rows.append(
            (
                f"  {len(r['runs'])} runs; group.initial.rebalance.delay.ms",
                f"{delay_ms:.0f}; members' heartbeat.interval.ms {cfg['heartbeat_ms']}",
            )
        )
    if r := results.get("catch_up"):
        live = r["live"]
        rows.append(
            (
                "live produce rate (1 producer, acks=all, RF 3)",
                f"{live['msg_s']:,.0f} records/s  {live['mb_s']:.1f} MB/s"
                f"  ({live['n']:,} x {cfg['size']} B in {live['wall_s']:.2f} s)",
            )
        )
        for name, label in (
            ("defaults", "librdkafka defaults"),
            ("backoff_10ms", "fetch.queue.backoff.ms 10"),
        ):
            if (group := r.get(name)) is None:
                continue
            rows.append(
                (
                    f"catch-up, group of {cfg['consumers']} ({label})",
                    f"{group['msg_s']:,.0f} records/s  {group['mb_s']:.1f} MB/s  ratio"
                    f" {group['ratio']:.2f}  ({group['n']:,} in {group['wall_s']:.2f} s after a"
                    f" {group['join_s']:.2f} s join)",
                )
            )
            rows.append(
                (
                    "  members waiting for records (stalls >= 0.2 s)",
                    f"{group['idle_share']:.0%} of their reading time ({group['stalls']})",
                )
            )
        if r.get("default_bound_ratio") is not None:
            backoffs = r["default_backoffs"]
            rows.append(
                (
                    "  bound of the defaults: fetch backoffs",
                    f"{backoffs} x 1 s per member (one per 100,000 queued records): ratio"
                    f" <= {r['default_bound_ratio']:.2f}",
                )
            )
    return rows


def render(report: Report) -> str:
    rows = result_rows(report["results"], report["config"])
    return bench_cluster.render(report, rows, target_width=60)


def parse_args() -> argparse.Namespace:
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--rebalances", type=int, help="rebalance runs (5)")
        parser.add_argument("--members", type=int, help="members of the initial rebalance (4)")
        parser.add_argument("--initial-delay-ms", type=int, help="group.initial.rebalance.delay.ms")
        parser.add_argument("--heartbeat-ms", type=int, help="members' heartbeat.interval.ms")
        parser.add_argument("--count", type=int, help="records in the backlog")
        parser.add_argument("--size", type=int, help="record value size in bytes (100)")
        parser.add_argument("--partitions", type=int, help="partitions of the backlog topic (6)")
        parser.add_argument("--consumers", type=int, help="members of the catch-up group (3)")

    return bench_cluster.parse_args(__doc__, "fewer runs and records, about 50 s", add_arguments)


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    return bench_cluster.config_of(args, FULL, QUICK, DEFAULTS)


def main() -> int:
    return bench_cluster.main("bench-groups", parse_args, config_of, bench, targets, render)


if __name__ == "__main__":
    raise SystemExit(main())
