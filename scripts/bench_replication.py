"""Partition replication benchmark: acks=all RF 3 against acks=1 RF 1, produce latency at a
paced rate, and the producer's view of a leader failover, on a real local cluster.

    python scripts/bench_replication.py [--quick] [--json PATH] [--data-dir DIR]
        [--count N] [--size BYTES] [--partitions N] [--repeat N] [--rate-mb-s X]
        [--latency-s S] [--failovers N] [--session-timeout-ms MS] [--heartbeat-ms MS]
        [--log-level LEVEL]

The cluster is 1 controller + 3 brokers, each a ``python -m kraft.cli server --config FILE``
process on free 127.0.0.1 ports, configured by ``kraft.node.dev_cluster`` with
``broker.session.timeout.ms`` and ``broker.heartbeat.interval.ms`` from the flags (default
3000 and 500).  ``--data-dir DIR`` (new or empty) keeps each node's files, with its stderr in
``DIR/node-<id>/stderr.log``.  The client is confluent-kafka (librdkafka), non-idempotent in
steps 1-2 so that the two settings differ only in acks and replication.

Steps (progress on stderr, a results table on stdout, everything in ``--json PATH``):

1. Throughput: N records of ``--size`` bytes, as fast as the producer can, to a topic of
   ``--partitions`` partitions RF 1 all on one broker with acks=1, and to one of RF 3
   (``min.insync.replicas=2``, leaders spread over the three brokers) with acks=all; the two
   alternate ``--repeat`` times.  Figure: the median MB/s of RF 3 / the median of RF 1.
2. Latency: records paced at ``--rate-mb-s`` (10 MB/s) for ``--latency-s`` seconds, acks=all
   RF 3, then acks=1 RF 1 for reference; the latency of each record from ``produce()`` to its
   delivery report (librdkafka's ``Message.latency()``), after a 1 s warm-up: p50/p99/max.
3. Failover, R times: two producers (acks=all, idempotent, 500 records/s each; one with
   librdkafka's defaults, one with ``topic.metadata.refresh.interval.ms=500``) write to a new
   1-partition RF 3 topic; ``kill -9`` of its leader; for each producer, the time from the
   kill until the first acknowledgement of a record sent after the kill (producing again),
   and the time until Metadata shows a new leader.  The victim is restarted and the ISRs are
   full again before the next run.

Figures over several runs are their median with the range (min-max); each figure with an
acceptance target is printed with PASS/MISS, decided from that median (the failover target,
a worst case, from the slowest run), never from the best run.  A step whose records fail
(e.g. NOT_ENOUGH_REPLICAS while followers do not fetch) is reported as an error with the
first delivery errors; every wait has a deadline, and every node is stopped on exit or Ctrl-C.
``--quick`` (about 30 s): 50,000 records, one repeat, 5 s of latency, one failover; the full
run (about 2 minutes): 300,000 records, 3 repeats, 20 s of latency, 3 failovers.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_cluster
from bench_cluster import (
    READY_TIMEOUT_S,
    Cluster,
    Report,
    StepError,
    Target,
    latency_summary,
    latency_text,
    log,
)
from bench_stats import Spread, ratio_of_medians, spread, target_row
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

RF1_TOPIC = "bench-rf1"
RF3_TOPIC = "bench-rf3"
MIN_INSYNC = 2
ISR_TIMEOUT_S = 30.0
STEP_DEADLINE_S = 300.0
FLUSH_TIMEOUT_S = 60.0
MESSAGE_TIMEOUT_MS = 30_000
WARMUP_S = 1.0
FAILOVER_RATE = 500  # records/s during a failover run
FAILOVER_SIZE = 100
FAILOVER_WAIT_S = 30.0  # beyond the session timeout, for the first ack after the kill

FULL = {"count": 300_000, "repeat": 3, "latency_s": 20.0, "failovers": 3}
QUICK = {"count": 50_000, "repeat": 1, "latency_s": 5.0, "failovers": 1}
DEFAULTS = {"size": 1024, "partitions": 3, "rate_mb_s": 10.0}

TARGET_RATIO = 0.4
TARGET_P99_MS = 25.0
FAILOVER_SLACK_S = 1.0


STEP_FAILURES = (StepError, KafkaException, OSError, AssertionError)  # a step's, reported


# --- the cluster --------------------------------------------------------------------------------


def wait_until(what: str, check: Callable[[], Any], timeout_s: float) -> Any:
    return bench_cluster.wait_until(
        what, check, timeout_s, poll_s=0.05, errors=(OSError, ValueError, KeyError, KafkaException)
    )


def partitions(admin: AdminClient, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) from Metadata."""
    md = admin.list_topics(topic, timeout=5)
    t = md.topics[topic]
    if t.error is not None:
        raise KafkaException(t.error)
    return {p.id: (p.leader, p.replicas, p.isrs) for p in t.partitions.values()}


def wait_isr_full(admin: AdminClient, topics: list[str]) -> None:
    """Every partition of ``topics`` led, with every replica in its ISR."""
    state: dict[str, Any] = {}

    def full() -> bool:
        for topic in topics:
            state[topic] = partitions(admin, topic)
        return all(
            leader >= 0 and sorted(isr) == sorted(replicas)
            for parts in state.values()
            for leader, replicas, isr in parts.values()
        )

    try:
        wait_until(f"full ISRs of {', '.join(topics)}", full, ISR_TIMEOUT_S)
    except StepError as exc:
        raise StepError(f"{exc}; (leader, replicas, isr): {state}") from None


def create_topic(
    admin: AdminClient,
    name: str,
    count: int,
    rf: int,
    on_broker: int | None = None,
    configs: dict[str, str] | None = None,
) -> None:
    """``on_broker``: every partition's single replica there (RF 1)."""
    if on_broker is not None:
        assignment = [[on_broker]] * count
        topic = NewTopic(name, count, replica_assignment=assignment, config=configs or {})
    else:
        topic = NewTopic(name, count, rf, config=configs or {})
    admin.create_topics([topic], request_timeout=30)[name].result(timeout=40)
    wait_isr_full(admin, [name])


# --- producing ----------------------------------------------------------------------------------


def producer_config(bootstrap: str, acks: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "enable.idempotence": False,
        "linger.ms": 5,
        "message.timeout.ms": MESSAGE_TIMEOUT_MS,
        "queue.buffering.max.kbytes": 256 * 1024,
        **extra,
    }


class Deliveries:
    """Delivery reports of one producer: counts, the first errors, latencies after ``since``."""

    def __init__(self, since: float = 0.0) -> None:
        self.acked = 0
        self.errors: collections.Counter[str] = collections.Counter()
        self.latencies: list[float] = []
        self.since = since

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors[err.name()] += 1
            return
        self.acked += 1
        latency = msg.latency()
        if latency is not None and time.perf_counter() >= self.since:
            self.latencies.append(latency)

    def check(self, what: str, sent: int, unflushed: int) -> None:
        if unflushed or self.errors:
            errors = ", ".join(f"{name} x{n}" for name, n in self.errors.most_common(3))
            raise StepError(
                f"{what}: {self.acked:,} of {sent:,} records acknowledged,"
                f" {sum(self.errors.values()):,} failed ({errors or 'none'}),"
                f" {unflushed:,} still queued after a {FLUSH_TIMEOUT_S:g} s flush"
            )


def produce_one(producer: Producer, topic: str, value: bytes, deadline: float) -> None:
    while True:
        try:
            producer.produce(topic, value)
            return
        except BufferError:  # the local queue is full: wait for deliveries
            if time.monotonic() > deadline:
                raise StepError(
                    f"{topic}: the producer's queue stayed full until the deadline"
                ) from None
            producer.poll(0.01)


def throughput(bootstrap: str, topic: str, acks: str, count: int, size: int) -> dict[str, Any]:
    """``count`` records of ``size`` bytes as fast as possible, timed to the last delivery."""
    deliveries = Deliveries()
    producer = Producer(producer_config(bootstrap, acks, on_delivery=deliveries))
    value = os.urandom(size)
    deadline = time.monotonic() + STEP_DEADLINE_S
    start = time.perf_counter()
    for i in range(count):
        produce_one(producer, topic, value, deadline)
        if i % 1000 == 0:
            producer.poll(0)
    unflushed = producer.flush(FLUSH_TIMEOUT_S)
    wall = time.perf_counter() - start
    deliveries.check(f"{topic} acks={acks}", count, unflushed)
    return {"mb_s": count * size / wall / 1e6, "msg_s": count / wall, "wall_s": wall, "n": count}


def paced_latency(
    bootstrap: str, topic: str, acks: str, rate_mb_s: float, size: int, seconds: float
) -> dict[str, Any]:
    """Records at ``rate_mb_s`` for ``seconds``; delivery latency after ``WARMUP_S``."""
    start = time.perf_counter()
    deliveries = Deliveries(since=start + WARMUP_S)
    producer = Producer(
        producer_config(bootstrap, acks, on_delivery=deliveries, **{"linger.ms": 1})
    )
    value = os.urandom(size)
    per_s = rate_mb_s * 1e6 / size
    deadline = time.monotonic() + seconds + STEP_DEADLINE_S
    sent = 0
    while (elapsed := time.perf_counter() - start) < seconds:
        while sent < elapsed * per_s:
            produce_one(producer, topic, value, deadline)
            sent += 1
        producer.poll(0)
        time.sleep(0.0005)
    unflushed = producer.flush(FLUSH_TIMEOUT_S)
    deliveries.check(f"{topic} acks={acks} at {rate_mb_s:g} MB/s", sent, unflushed)
    if not deliveries.latencies:
        raise StepError(f"{topic}: no delivery after the {WARMUP_S:g} s warm-up")
    out: dict[str, Any] = latency_summary(deliveries.latencies)
    out["achieved_mb_s"] = sent * size / seconds / 1e6
    return out


# --- failover -----------------------------------------------------------------------------------


class SteadyProducer(threading.Thread):
    """``FAILOVER_RATE`` records/s to ``topic`` until stopped; notes the first acknowledgement
    of a record sent after ``kill_at`` (perf_counter)."""

    def __init__(self, bootstrap: str, topic: str, name: str, **extra: Any) -> None:
        super().__init__(name=f"failover-producer-{name}", daemon=True)
        self.topic = topic
        config = {"enable.idempotence": True, "message.timeout.ms": 60_000, **extra}
        self.producer = Producer(producer_config(bootstrap, "all", **config))
        self.stopping = threading.Event()
        self.acked = threading.Event()
        self.acked_after_kill = threading.Event()
        self.kill_at: float | None = None
        self.first_ack_after_kill_s: float | None = None
        self.errors: collections.Counter[str] = collections.Counter()
        self.sent = 0
        self.unflushed = -1
        self.flush_timeout_s = FLUSH_TIMEOUT_S

    def _delivered(self, sent_at: float, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.errors[err.name()] += 1
            return
        self.acked.set()
        kill_at = self.kill_at
        if kill_at is not None and sent_at > kill_at and not self.acked_after_kill.is_set():
            self.first_ack_after_kill_s = time.perf_counter() - kill_at
            self.acked_after_kill.set()

    def run(self) -> None:
        value = b"x" * FAILOVER_SIZE
        start = time.perf_counter()
        while not self.stopping.is_set():
            while self.sent < (time.perf_counter() - start) * FAILOVER_RATE:
                sent_at = time.perf_counter()
                try:
                    self.producer.produce(
                        self.topic,
                        value,
                        on_delivery=functools.partial(self._delivered, sent_at),
                    )
                except BufferError:
                    break
                self.sent += 1
            self.producer.poll(0.002)
        self.unflushed = self.producer.flush(self.flush_timeout_s)


def failover_run(
    cluster: Cluster, admin: AdminClient, run: int, session_s: float
) -> dict[str, Any]:
    """Two producers side by side: librdkafka's defaults, and the same with a 500 ms
    ``topic.metadata.refresh.interval.ms``.  Until the victim is fenced, Metadata still names it
    leader, so librdkafka does not hurry to refresh: the default producer learns of the new
    leader on its own schedule (up to ~1.5 s later, measured), the other within 0.5 s."""
    topic = f"bench-failover-{run}"
    create_topic(admin, topic, 1, 3, configs={"min.insync.replicas": str(MIN_INSYNC)})
    producers = {
        "defaults": SteadyProducer(cluster.bootstrap, topic, "defaults"),
        "refresh_500ms": SteadyProducer(
            cluster.bootstrap, topic, "refresh", **{"topic.metadata.refresh.interval.ms": 500}
        ),
    }
    for p in producers.values():
        p.start()
    try:
        for name, p in producers.items():
            if not p.acked.wait(10):
                raise StepError(f"{topic}: nothing acknowledged in 10 s ({name}: {dict(p.errors)})")
        time.sleep(1.0)  # steady state
        victim_id = partitions(admin, topic)[0][0]
        victim = cluster.broker(victim_id)
        kill_at = time.perf_counter()
        for p in producers.values():
            p.kill_at = kill_at
        victim.kill()
        new_leader_s = wait_new_leader(admin, topic, victim_id, kill_at, session_s, producers)
    except BaseException:
        for p in producers.values():
            p.flush_timeout_s = 1.0  # failing already: do not wait for the queues
        raise
    finally:
        for p in producers.values():
            p.stopping.set()
        for p in producers.values():
            p.join(FLUSH_TIMEOUT_S + 10)
    back = {name: p.first_ack_after_kill_s for name, p in producers.items()}
    failed = {name: dict(p.errors) for name, p in producers.items() if p.errors}
    log(
        f"  run {run}: killed broker {victim_id}; new leader in Metadata after"
        f" {new_leader_s:.3f} s; producing again after "
        + ", ".join(f"{v:.3f} s ({k})" for k, v in back.items() if v is not None)
        + f"; failed {failed or 0}"
    )
    victim.launch()
    victim.wait_ready(READY_TIMEOUT_S)
    bench_cluster.wait_formed(cluster)
    wait_isr_full(admin, [RF3_TOPIC, topic])
    return {
        "victim": victim_id,
        "new_leader_s": new_leader_s,
        "producing_again_s": back,
        "sent": {name: p.sent for name, p in producers.items()},
        "failed": failed,
        "unflushed": {name: p.unflushed for name, p in producers.items()},
    }


def wait_new_leader(
    admin: AdminClient,
    topic: str,
    victim_id: int,
    kill_at: float,
    session_s: float,
    producers: dict[str, SteadyProducer],
) -> float:
    """Poll Metadata until a new leader shows, and the producers until each has an
    acknowledgement of a record sent after the kill; seconds from the kill to the new leader."""
    new_leader_s = None
    deadline = kill_at + session_s + FAILOVER_WAIT_S
    while new_leader_s is None or not all(p.acked_after_kill.is_set() for p in producers.values()):
        if new_leader_s is None and partitions(admin, topic)[0][0] not in (victim_id, -1):
            new_leader_s = time.perf_counter() - kill_at
        if time.perf_counter() > deadline:
            waiting = [n for n, p in producers.items() if not p.acked_after_kill.is_set()]
            errors = {n: dict(p.errors) for n, p in producers.items()}
            raise StepError(
                f"{deadline - kill_at:.0f} s after the kill of broker {victim_id} (leader of"
                f" {topic}): new leader seen after {new_leader_s} s; no record sent after the"
                f" kill acknowledged to {waiting or 'none'}; delivery errors {errors}"
            )
        time.sleep(0.02)
    return new_leader_s


# --- the run ------------------------------------------------------------------------------------


def step_throughput(cluster: Cluster, cfg: dict[str, Any]) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"rf1": [], "rf3": []}
    settings = [("rf1", RF1_TOPIC, "1"), ("rf3", RF3_TOPIC, "all")]
    for rep in range(cfg["repeat"]):
        for name, topic, acks in settings if rep % 2 == 0 else settings[::-1]:
            r = throughput(cluster.bootstrap, topic, acks, cfg["count"], cfg["size"])
            log(f"  {name} acks={acks}: {r['mb_s']:.1f} MB/s ({r['msg_s']:,.0f} msg/s)")
            runs[name].append(r)
    out: dict[str, Any] = {"runs": runs}
    for name, rs in runs.items():
        out[name] = {key: spread(r[key] for r in rs).as_dict() for key in ("mb_s", "msg_s")}
    out["ratio"] = ratio_of_medians(
        (r["mb_s"] for r in runs["rf3"]), (r["mb_s"] for r in runs["rf1"])
    )
    return out


def step_latency(cluster: Cluster, cfg: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, topic, acks in (("rf3", RF3_TOPIC, "all"), ("rf1", RF1_TOPIC, "1")):
        out[name] = paced_latency(
            cluster.bootstrap, topic, acks, cfg["rate_mb_s"], cfg["size"], cfg["latency_s"]
        )
        r = out[name]
        log(f"  {name} acks={acks}: p50 {r['p50_ms']:.2f}  p99 {r['p99_ms']:.2f} ms")
    return out


def step_failover(cluster: Cluster, admin: AdminClient, cfg: dict[str, Any]) -> dict[str, Any]:
    session_s = cfg["session_timeout_ms"] / 1000
    runs = [failover_run(cluster, admin, run, session_s) for run in range(cfg["failovers"])]
    out: dict[str, Any] = {"runs": runs, "session_timeout_s": session_s}
    for name in runs[0]["producing_again_s"]:
        out[name] = spread(r["producing_again_s"][name] for r in runs).as_dict()
    out["new_leader_s"] = spread(r["new_leader_s"] for r in runs).as_dict()
    return out


def run_all(cluster: Cluster, cfg: dict[str, Any], report: dict[str, Any]) -> None:
    bench_cluster.wait_formed(cluster)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 5000})
    create_topic(admin, RF1_TOPIC, cfg["partitions"], 1, on_broker=cluster.brokers[0].spec.node_id)
    create_topic(
        admin, RF3_TOPIC, cfg["partitions"], 3, configs={"min.insync.replicas": str(MIN_INSYNC)}
    )
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("throughput", lambda: step_throughput(cluster, cfg)),
        ("latency", lambda: step_latency(cluster, cfg)),
        ("failover", lambda: step_failover(cluster, admin, cfg)),
    ]
    for key, step in steps:
        if not bench_cluster.run_step(report, cluster, key, step, STEP_FAILURES):
            log("a node died: stopping")
            return


def bench(root: Path, cfg: dict[str, Any], log_level: str) -> Report:
    report: Report = {"machine": bench_cluster.machine_info(), "config": cfg}
    report.update(results={}, errors={})
    overrides = {
        "broker.session.timeout.ms": str(cfg["session_timeout_ms"]),
        "broker.heartbeat.interval.ms": str(cfg["heartbeat_ms"]),
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
    session_s = report["config"]["session_timeout_ms"] / 1000
    failover = results.get("failover", {}).get("refresh_500ms")
    return [
        target_row(
            f"throughput acks=all RF 3 / acks=1 RF 1 (ratio of medians) >= {TARGET_RATIO:g}",
            results.get("throughput", {}).get("ratio"),
            TARGET_RATIO,
            higher_is_better=True,
        ),
        target_row(
            f"p99 ms acks=all RF 3 at {report['config']['rate_mb_s']:g} MB/s <= {TARGET_P99_MS:g}",
            results.get("latency", {}).get("rf3", {}).get("p99_ms"),
            TARGET_P99_MS,
            higher_is_better=False,
        ),
        target_row(  # a worst case: judged on the slowest run, stricter than the median
            f"failover: producing again (refresh 500 ms), max s"
            f" <= {session_s + FAILOVER_SLACK_S:g}",
            None if failover is None else Spread(tuple(failover["runs"])),
            session_s + FAILOVER_SLACK_S,
            higher_is_better=False,
            statistic="max",
        ),
    ]


def result_rows(results: dict[str, Any], cfg: dict[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    size = cfg["size"]
    if r := results.get("throughput"):
        for name, label in (
            ("rf1", "acks=1 RF 1 (1 broker)"),
            ("rf3", "acks=all RF 3 (3 brokers)"),
        ):
            mb_s, msg_s = Spread(tuple(r[name]["mb_s"]["runs"])), r[name]["msg_s"]["median"]
            rows.append(
                (
                    f"throughput {label}, median",
                    f"{mb_s.text('.1f', 'MB/s')}  {msg_s:,.0f} msg/s"
                    f"  ({cfg['count']:,} x {size:,} B a run)",
                )
            )
        rows.append(("  ratio RF 3 / RF 1 of the medians", f"{r['ratio']:.2f}"))
    if r := results.get("latency"):
        for name, label in (("rf3", "acks=all RF 3"), ("rf1", "acks=1 RF 1")):
            x = r[name]
            rows.append(
                (
                    f"latency {label} at {cfg['rate_mb_s']:g} MB/s",
                    latency_text(x) + f"  ({x['n']:,} records, {x['achieved_mb_s']:.1f} MB/s sent)",
                )
            )
    if r := results.get("failover"):
        rows.append(
            (
                f"failover: kill -9 of the leader ({len(r['runs'])} runs)",
                f"new leader in Metadata: median {r['new_leader_s']['median']:.3f} s"
                f"  (broker.session.timeout.ms {r['session_timeout_s'] * 1000:.0f})",
            )
        )
        for name, label in (("refresh_500ms", "metadata refresh 500 ms"), ("defaults", "defaults")):
            x = Spread(tuple(r[name]["runs"]))
            times = "  ".join(f"{t:.2f}" for t in x.runs)
            rows.append(
                (
                    f"  producing again, librdkafka {label}",
                    f"median {x.median:.3f}  max {x.high:.3f} s  ({times})",
                )
            )
    return rows


def render(report: Report) -> str:
    rows = result_rows(report["results"], report["config"])
    return bench_cluster.render(report, rows, target_width=72)


def parse_args() -> argparse.Namespace:
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--count", type=int, help="records per throughput run")
        parser.add_argument("--size", type=int, help="record value size in bytes (default 1024)")
        parser.add_argument("--partitions", type=int, help="partitions of the two topics (3)")
        parser.add_argument("--repeat", type=int, help="throughput runs of each setting")
        parser.add_argument("--rate-mb-s", type=float, help="paced rate of the latency step (10)")
        parser.add_argument("--latency-s", type=float, help="seconds of each latency run")
        parser.add_argument("--failovers", type=int, help="kill -9 runs of a partition leader")
        parser.add_argument("--session-timeout-ms", type=int, default=3000)
        parser.add_argument("--heartbeat-ms", type=int, default=500)

    return bench_cluster.parse_args(__doc__, "smaller counts, about 30 s", add_arguments)


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    cfg = bench_cluster.config_of(args, FULL, QUICK, DEFAULTS)
    cfg["session_timeout_ms"] = args.session_timeout_ms
    cfg["heartbeat_ms"] = args.heartbeat_ms
    return cfg


def main() -> int:
    return bench_cluster.main("bench-replication", parse_args, config_of, bench, targets, render)


if __name__ == "__main__":
    raise SystemExit(main())
