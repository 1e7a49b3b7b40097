"""Partition reassignment benchmark: moving a topic of ``--size-mib`` MiB between two brokers
with and without a replication throttle, and what a producer writing to it sees meanwhile.

    python scripts/bench_reassignment.py [--quick] [--json PATH] [--data-dir DIR]
        [--size-mib N] [--partitions N] [--repeat N] [--throttle-mb-s X] [--rate N]
        [--log-level LEVEL]

The cluster is 1 controller + 3 brokers (``kraft.node.dev_cluster``'s plan, each node a
``python -m kraft.cli server`` process). A topic of ``--partitions`` partitions, RF 1, all on
broker A, is filled with ``--size-mib`` MiB of incompressible 10 KiB records. Then the topic
moves A -> B, B -> A, ... (every partition's replicas become [B]; AlterPartitionReassignments
from kafka-python, the client that has the call), the moves alternating unthrottled and
throttled (``--throttle-mb-s``, set as
``kafka-reassign-partitions.sh --throttle`` sets it: both rates on both brokers and the
topic's throttled-replica lists, cleared after the move), ``--repeat`` times each.

Measured per move: the time from the request until every partition's replicas are [B] (polled
at 10 Hz on a broker's REST API), the rate that makes (size / time), and the latency of a
producer writing ``--rate`` records of 1 KiB a second to the same topic with acks=all the whole
time (librdkafka's delivery latency of the records produced during the move: p50, p99, max;
and of the 5 s before the first move, for reference). Figures: the median over the moves of
each kind, with the range. Full run: 1 GiB, 3 moves of each kind at 50 MB/s (about 3
minutes); ``--quick``: 128 MiB, one of each.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_cluster
from bench_cluster import Cluster, Report, StepError, Target, latency_summary, log
from bench_stats import Spread, target_row
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin import NewTopic as CkNewTopic
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from kraft.reassign.plan import (
    BROKER_THROTTLE_KEYS,
    TOPIC_THROTTLE_KEYS,
    Move,
    throttles,
)

TOPIC = "bench-move"
OTHER_TOPIC = "bench-other"  # RF 2 on the same two brokers, not moved
RECORD_BYTES = 10 * 1024
LIVE_RECORD_BYTES = 1024
MOVE_TIMEOUT_S = 240.0
BASELINE_S = 5.0
FULL = {"size_mib": 1024, "partitions": 6, "repeat": 3, "throttle_mb_s": 50.0, "rate": 200}
QUICK = {"size_mib": 128, "partitions": 6, "repeat": 1, "throttle_mb_s": 50.0, "rate": 200}


# --- the live producer ---------------------------------------------------------------------------


class LiveProducer(threading.Thread):
    """acks=all at ``rate`` records a second; (send time, latency) of every acknowledged one."""

    def __init__(self, bootstrap: str, rate: int, topic: str) -> None:
        super().__init__(name=f"live-producer-{topic}", daemon=True)
        self.rate = rate
        self.topic = topic
        self.stopping = threading.Event()
        self.samples: list[tuple[float, float]] = []
        self.errors: list[str] = []
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 1,
                "enable.idempotence": True,
            }
        )

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        latency = msg.latency()
        if err is not None:
            self.errors.append(str(err))
        elif latency is not None:
            self.samples.append((time.monotonic() - latency, latency))

    def run(self) -> None:
        value = os.urandom(LIVE_RECORD_BYTES)
        interval, next_send, i = 1.0 / self.rate, time.monotonic(), 0
        while not self.stopping.is_set():
            self.producer.produce(self.topic, value, str(i).encode(), on_delivery=self._delivered)
            i += 1
            self.producer.poll(0)
            next_send += interval
            time.sleep(max(0.0, next_send - time.monotonic()))
        self.producer.flush(60)

    def between(self, start: float, end: float) -> list[float]:
        return [lat for sent, lat in list(self.samples) if start <= sent <= end]


# --- steps ---------------------------------------------------------------------------------------


def preload(bootstrap: str, cfg: dict[str, Any], broker_a: int, broker_b: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assignment = [[broker_a]] * cfg["partitions"]
    topic = CkNewTopic(TOPIC, num_partitions=cfg["partitions"], replica_assignment=assignment)
    other = CkNewTopic(OTHER_TOPIC, num_partitions=1, replica_assignment=[[broker_a, broker_b]])
    for future in admin.create_topics([topic, other]).values():
        future.result(timeout=30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "batch.size": 1 << 20}
    )
    count = cfg["size_mib"] * (1 << 20) // RECORD_BYTES
    values = [os.urandom(RECORD_BYTES) for _ in range(16)]
    start = time.monotonic()
    for i in range(count):
        while True:
            try:
                producer.produce(TOPIC, values[i % 16], partition=i % cfg["partitions"])
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300) != 0:
        raise StepError("the preload did not complete")
    return time.monotonic() - start


def set_configs(admin: AdminClient, kind: str, changes: dict[str, dict[str, str | None]]) -> None:
    # librdkafka takes one BROKER resource per call: one call per resource.
    for name, values in changes.items():
        ops = [
            ConfigEntry(
                k,
                v,
                incremental_operation=AlterConfigOpType.DELETE
                if v is None
                else AlterConfigOpType.SET,
            )
            for k, v in values.items()
        ]
        resource = ConfigResource(kind, name, incremental_configs=ops)
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(timeout=30)


def move(
    cluster: Cluster, cfg: dict[str, Any], source: int, target: int, throttled: bool
) -> dict[str, Any]:
    """Every partition from [source] to [target]; seconds until the image says so."""
    partitions = range(cfg["partitions"])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    if throttled:
        rate = int(cfg["throttle_mb_s"] * 1_000_000)
        current = {(TOPIC, p): [source] for p in partitions}
        wanted = throttles(current, [Move(TOPIC, p, (target,)) for p in partitions], rate)
        set_configs(admin, "broker", {str(b): dict(v) for b, v in wanted.brokers.items()})
        set_configs(admin, "topic", {t: dict(v) for t, v in wanted.topics.items()})
    observer = cluster.broker(target)
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        start = time.monotonic()
        result = kp.alter_partition_reassignments(
            {TopicPartition(TOPIC, p): [target] for p in partitions}
        )
        if any(v is not None for v in result.values()):
            raise StepError(f"reassignment refused: {result}")

        def done() -> bool:
            described = observer.get(f"/v1/topics/{TOPIC}")["partitions"]
            return all(p["replicas"] == [target] for p in described)

        while not done():
            if time.monotonic() - start > MOVE_TIMEOUT_S:
                raise StepError(f"the move did not finish in {MOVE_TIMEOUT_S:g} s")
            time.sleep(0.1)
        took = time.monotonic() - start
    finally:
        kp.close()
    if throttled:
        cleared = dict.fromkeys(BROKER_THROTTLE_KEYS)
        set_configs(admin, "broker", {str(b): dict(cleared) for b in (source, target)})
        set_configs(admin, "topic", {TOPIC: dict.fromkeys(TOPIC_THROTTLE_KEYS)})
    return {"start": start, "seconds": took, "throttled": throttled}


def run_all(cluster: Cluster, cfg: dict[str, Any], report: Report) -> list[dict[str, Any]]:
    a, b = cluster.brokers[0].spec.node_id, cluster.brokers[1].spec.node_id
    size_mb = cfg["size_mib"] * (1 << 20) / 1e6
    log(f"preloading {cfg['size_mib']} MiB onto broker {a}")
    report["results"]["preload_s"] = preload(cluster.bootstrap, cfg, a, b)
    live = LiveProducer(cluster.bootstrap, cfg["rate"], TOPIC)
    other = LiveProducer(cluster.bootstrap, cfg["rate"], OTHER_TOPIC)
    live.start()
    other.start()
    moves: list[dict[str, Any]] = []
    try:
        time.sleep(BASELINE_S)
        now = time.monotonic()
        baseline = live.between(now - BASELINE_S + 1.0, now)
        source, target = a, b
        for i in range(2 * cfg["repeat"]):
            throttled = i % 2 == 1
            log(f"move {i + 1}: broker {source} -> {target}, throttled={throttled}")
            m = move(cluster, cfg, source, target, throttled)
            m["mb_s"] = size_mb / m["seconds"]
            window = (m["start"], m["start"] + m["seconds"])
            m["latency"] = latency_summary(live.between(*window))
            m["other_latency"] = latency_summary(other.between(*window))
            log(
                f"  {m['seconds']:.1f} s, {m['mb_s']:.1f} MB/s, producer p99"
                f" {m['latency']['p99_ms']:.1f} ms (other topic {m['other_latency']['p99_ms']:.1f})"
            )
            moves.append(m)
            source, target = target, source
    finally:
        for producer in (live, other):
            producer.stopping.set()
        for producer in (live, other):
            producer.join(90)
    report["results"]["baseline"] = latency_summary(baseline) if baseline else None
    report["results"]["producer_errors"] = (live.errors + other.errors)[:10]
    return moves


def bench(root: Path, cfg: dict[str, Any], log_level: str) -> Report:
    report: Report = {"machine": bench_cluster.machine_info(), "config": cfg}
    report.update(results={}, errors={})
    overrides = {"broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "1000"}
    cluster = Cluster(root, log_level, controllers=1, brokers=3, overrides=overrides)

    def body() -> None:
        bench_cluster.wait_formed(cluster)
        bench_cluster.run_step(report, cluster, "moves", lambda: run_all(cluster, cfg, report))

    return bench_cluster.bench_on(cluster, report, root, body)


# --- report --------------------------------------------------------------------------------------


def _spread(moves: list[dict[str, Any]], throttled: bool, key: str) -> Spread | None:
    """``key``: a move's own figure, or ``latency.p99_ms`` style for a latency figure."""
    values = []
    for m in moves:
        if m["throttled"] == throttled:
            which, _, figure = key.partition(".")
            values.append(m[which][figure] if figure else m[key])
    return Spread(tuple(values)) if values else None


def targets(report: Report) -> list[Target]:
    moves = report["results"].get("moves", [])
    bound = report["config"]["throttle_mb_s"]
    rate = _spread(moves, True, "mb_s")
    return [
        target_row(
            f"throttled move rate <= 1.2 x {bound:g} MB/s",
            rate,
            1.2 * bound,
            higher_is_better=False,
        ),
        target_row(
            f"throttled move rate >= 0.8 x {bound:g} MB/s",
            rate,
            0.8 * bound,
            higher_is_better=True,
        ),
    ]


def render(report: Report) -> str:
    results, cfg = report["results"], report["config"]
    rows: list[tuple[str, str]] = []
    if "preload_s" in results:
        rows.append(("preload", f"{cfg['size_mib']} MiB in {results['preload_s']:.1f} s"))
    if baseline := results.get("baseline"):
        rows.append(("producer, no move (reference)", bench_cluster.latency_text(baseline, 1)))
    moves = results.get("moves", [])
    for throttled, label in (
        (False, "unthrottled"),
        (True, f"throttled {cfg['throttle_mb_s']:g} MB/s"),
    ):
        seconds = _spread(moves, throttled, "seconds")
        if seconds is None:
            continue
        rate = _spread(moves, throttled, "mb_s")
        assert rate is not None
        rows.append((f"move {cfg['size_mib']} MiB, {label}", f"{seconds.text('.1f', 's')}"))
        rows.append(("  rate", rate.text(".1f", "MB/s")))
        for key, what in (
            ("latency.p50_ms", "p50, producer to the moving topic"),
            ("latency.p99_ms", "p99, producer to the moving topic"),
            ("other_latency.p50_ms", "p50, producer to another topic (A, B)"),
            ("other_latency.p99_ms", "p99, producer to another topic (A, B)"),
        ):
            figure = _spread(moves, throttled, key)
            assert figure is not None
            rows.append((f"  {what}", figure.text(".1f", "ms")))
    if results.get("producer_errors"):
        rows.append(("producer errors", "; ".join(results["producer_errors"])))
    return bench_cluster.render(report, rows, target_width=40)


def parse_args() -> argparse.Namespace:
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--size-mib", type=int, help="MiB to move (1024)")
        parser.add_argument("--partitions", type=int, help="partitions of the topic (6)")
        parser.add_argument("--repeat", type=int, help="moves of each kind (3)")
        parser.add_argument("--throttle-mb-s", type=float, help="the throttle, MB/s (50)")
        parser.add_argument("--rate", type=int, help="live producer records/s (200)")

    return bench_cluster.parse_args(__doc__, "128 MiB, one move of each kind", add_arguments)


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    return bench_cluster.config_of(args, FULL, QUICK)


def main() -> int:
    return bench_cluster.main("bench-reassignment", parse_args, config_of, bench, targets, render)


if __name__ == "__main__":
    raise SystemExit(main())
