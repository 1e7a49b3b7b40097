"""Spark source benchmark: rows/s from a broker into a Spark no-op sink, as a ratio to a
synthetic in-memory Arrow source measured in the same run, and in absolute rows/s.

    python scripts/bench_spark.py [--quick] [--json PATH] [--data-dir DIR]
        [--count N] [--size BYTES] [--partitions N] [--rounds N] [--kafka KEY=VALUE ...]
        [--log-level LEVEL]

The cluster is 1 controller + 1 broker (``python -m kraft.cli server`` processes on free
127.0.0.1 ports, planned by ``kraft.node.dev_cluster``); Spark runs in this process, ``local[2]``.

Steps (progress on stderr, a results table on stdout, everything in ``--json PATH``):

1. ``--count`` records with ``--size`` (1024) byte values and 16-byte keys are produced
   uncompressed to a ``--partitions`` (2) partition topic with confluent-kafka (acks=1,
   linger 20 ms, 1 MB batches).
2. Both sources run as ``availableNow`` streaming queries into Spark's ``noop`` sink, each
   reading ``--count`` rows in ``--partitions`` tasks, alternately, ``--rounds`` (3) times
   after one warm-up round each:

   * ``kraft``: the topic from the earliest offset (a new checkpoint and group every round),
     with the source's defaults, or ``kafka.KEY`` options given by ``--kafka KEY=VALUE``
     (``--kafka check.crcs=false`` measures the source without CRC checks);
   * ``synthetic``: a Python data source whose tasks yield Arrow batches, built in memory
     before timing, of the same schema, the same value and key sizes and the same row count:
     what Spark's side of a Python source costs with no broker at all.

   A round's figure is rows / the batches' ``triggerExecution`` time (what Spark reports as
   ``processedRowsPerSecond``); each source's figure is the median of its rounds, shown with
   the range, and the ratio is that of the medians (the targets are judged on them, never on
   the best round).
   Rows / wall time from ``start()`` to termination (query start-up included) is shown too.
3. Where the CPU went, per million rows (median of the rounds), by role: Spark's JVM, the
   Python workers of its tasks (which run ``read()``; a worker that exits counts through its
   daemon's cutime + cstime) and the cluster's nodes, from /proc around each query.  On 2
   cores these allow at most 2 / (their CPU-s per row) rows/s; the synthetic source's JVM and
   worker figures are what Spark itself costs.

Targets: kraft / synthetic >= 0.7, and kraft >= 1,000,000 rows/s.  ``--quick`` (about 90 s)
reads 1,000,000 rows; the full run 3,000,000.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_cluster
from bench_cluster import Cluster, Report, StepError, Target, log
from bench_machine import CLK_TCK, proc_stat
from bench_stats import Spread, median, ratio_of_medians, spread, target_row

from kraft.node.config import ConfigError, parse_overrides

TOPIC = "bench-spark"
TARGET_RATIO = 0.7
TARGET_ROWS_S = 1_000_000
SYNTHETIC_BATCH_ROWS = 8192

DEFAULTS: dict[str, Any] = {"size": 1024, "partitions": 2, "rounds": 3, "kafka": []}
FULL: dict[str, Any] = {"count": 3_000_000}
QUICK: dict[str, Any] = {"count": 1_000_000}


def produce(bootstrap: str, cfg: dict[str, Any]) -> float:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    value = b"v" * cfg["size"]
    started = time.monotonic()
    for i in range(cfg["count"]):
        while True:
            try:
                producer.produce(TOPIC, value, key=b"%016d" % i, partition=i % cfg["partitions"])
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
            if i and i % 500_000 == 0:
                log(f"produced {i:,} records")
    if producer.flush(120) != 0:
        raise StepError("records still unacknowledged 120 s after the last produce()")
    return time.monotonic() - started


def synthetic_source(rows: int, partitions: int, size: int) -> Any:
    """A streaming Python data source of ``rows`` in-memory rows shaped like the topic's."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from spark_source.source import SCHEMA

    @dataclass
    class Slice(InputPartition):  # type: ignore[misc]
        index: int
        rows: int

    class Reader(DataSourceStreamReader):  # type: ignore[misc]
        def initialOffset(self) -> dict[str, int]:
            return {"rows": 0}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            return {"rows": rows}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Slice]:
            n = end["rows"] - start["rows"]
            return [Slice(i, n // partitions + (i < n % partitions)) for i in range(partitions)]

        def read(self, partition: Slice) -> Iterator[Any]:
            import pyarrow as pa

            def batch(n: int) -> pa.RecordBatch:
                from spark_source.arrow_records import kafka_schema

                schema = kafka_schema(False)
                return pa.RecordBatch.from_arrays(
                    [
                        pa.array([b"%016d" % i for i in range(n)], pa.binary()),
                        pa.array([b"v" * size] * n, pa.binary()),
                        pa.array([TOPIC] * n, pa.string()),
                        pa.array([partition.index] * n, pa.int32()),
                        pa.array(range(n), pa.int64()),
                        pa.array([0] * n, schema.field("timestamp").type),
                        pa.array([0] * n, pa.int32()),
                    ],
                    schema=schema,
                )

            full = batch(SYNTHETIC_BATCH_ROWS)
            left = partition.rows
            while left > 0:
                take = min(left, SYNTHETIC_BATCH_ROWS)
                yield full if take == SYNTHETIC_BATCH_ROWS else full.slice(0, take)
                left -= take

    class Synthetic(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "synthetic_kafka"

        def schema(self) -> str:
            return SCHEMA

        def streamReader(self, schema: Any) -> Reader:
            return Reader()

    return Synthetic


ROLES = ("spark JVM", "task workers", "cluster nodes")
TASK_DAEMON = b"pyspark.daemon\0pyspark.worker"  # forks the workers that run read()


def cpu_by_role() -> dict[str, float]:
    """CPU seconds so far of this process's descendants in each of :data:`ROLES` (Spark's JVM
    and the cluster's nodes are its children).  Not counted: the Python processes Spark starts
    for each query (the source's runner, data source lookup and planning; ~1-2 CPU-s a query,
    the same for both sources, mostly before the first batch)."""
    procs: dict[int, tuple[int, bytes, int, int]] = {}  # pid: ppid, cmdline, own, reaped ticks
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            fields = proc_stat(int(pid))
        except OSError:  # exited meanwhile
            continue
        own, reaped = int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
        procs[int(pid)] = (int(fields[1]), cmd, own, reaped)
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_) in procs.items():
        children.setdefault(ppid, []).append(pid)
    ticks = dict.fromkeys(ROLES, 0)
    todo = list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        _, cmd, own, reaped = procs[pid]
        if b"java" in cmd:
            ticks["spark JVM"] += own
        elif TASK_DAEMON in cmd:  # the daemon and the workers it forked
            ticks["task workers"] += own + reaped
        elif b"kraft" in cmd and b"server" in cmd:
            ticks["cluster nodes"] += own
    return {role: t / CLK_TCK for role, t in ticks.items()}


def timed_query(
    spark: Any, fmt_name: str, options: dict[str, str], checkpoint: Path
) -> tuple[float, float, dict[str, float]]:
    """(rows / the batches' trigger execution time, as Spark's processedRowsPerSecond counts
    it; rows / wall time from start() to termination, query start-up included; CPU seconds
    per million rows by role)."""
    reader = spark.readStream.format(fmt_name)
    for key, value in options.items():
        reader = reader.option(key, value)
    cpu_before = cpu_by_role()
    started = time.monotonic()
    query = (
        reader.load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    if not query.awaitTermination(600):
        query.stop()
        raise StepError(f"the {fmt_name} query did not finish in 600 s")
    if query.exception() is not None:
        raise StepError(f"the {fmt_name} query failed: {query.exception()}")
    elapsed = time.monotonic() - started
    cpu_after = cpu_by_role()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    busy_s = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    per_mrow = {r: (cpu_after[r] - cpu_before[r]) * 1e6 / max(rows, 1) for r in ROLES}
    return (rows / busy_s if busy_s else 0.0), rows / elapsed, per_mrow


def kafka_options(pairs: list[str]) -> dict[str, str]:
    """``--kafka KEY=VALUE`` arguments as the source's ``kafka.KEY`` options."""
    try:
        return {f"kafka.{k}": v for k, v in parse_overrides(pairs, "--kafka").items()}
    except ConfigError as exc:
        raise SystemExit(f"{exc}, e.g. check.crcs=false") from None


def step_read(cluster: Cluster, root: Path, cfg: dict[str, Any], report: Report) -> None:
    from pyspark.sql import SparkSession

    from spark_source import KraftSource

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KraftSource)
    spark.dataSource.register(synthetic_source(cfg["count"], cfg["partitions"], cfg["size"]))
    results: dict[str, list[float]] = {"kraft": [], "synthetic": []}
    wall: dict[str, list[float]] = {"kraft": [], "synthetic": []}
    cpu: dict[str, list[dict[str, float]]] = {"kraft": [], "synthetic": []}
    try:
        for round_ in range(cfg["rounds"] + 1):
            for name in ("kraft", "synthetic"):
                ck = root / f"checkpoint-{name}-{round_}"
                if name == "kraft":
                    options = {
                        "kafka.bootstrap.servers": cluster.bootstrap,
                        "subscribe": TOPIC,
                        "startingOffsets": "earliest",
                        "kafka.group.id": f"bench-{round_}",
                        **kafka_options(cfg["kafka"]),
                    }
                    rate, wall_rate, used = timed_query(spark, "kraft", options, ck)
                else:
                    rate, wall_rate, used = timed_query(spark, "synthetic_kafka", {}, ck)
                label = "warm-up" if round_ == 0 else f"round {round_}"
                log(f"{label}: {name} {rate:,.0f} rows/s ({wall_rate:,.0f} by wall time)")
                if round_ > 0:
                    results[name].append(rate)
                    wall[name].append(wall_rate)
                    cpu[name].append(used)
    finally:
        spark.stop()
    kraft = median(results["kraft"])
    report["results"]["read"] = {
        "kraft_rows_s": spread(results["kraft"]).as_dict(),
        "synthetic_rows_s": spread(results["synthetic"]).as_dict(),
        "ratio": ratio_of_medians(results["kraft"], results["synthetic"]),
        "rounds": results,
        "wall_rounds": wall,
        "wall_ratio": ratio_of_medians(wall["kraft"], wall["synthetic"]),
        "mb_s": kraft * cfg["size"] / 1e6,
        "cpu_s_per_million_rows": {
            name: {r: median(c[r] for c in cpu[name]) for r in ROLES}
            for name in ("kraft", "synthetic")
        },
    }


def bench(root: Path, cfg: dict[str, Any], log_level: str) -> Report:
    report: Report = {"machine": bench_cluster.machine_info(), "config": cfg}
    report.update(results={}, errors={})
    cluster = Cluster(root, log_level, controllers=1, brokers=1)

    def body() -> None:
        bench_cluster.wait_formed(cluster)
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, cfg["partitions"], 1)])[TOPIC].result(30)
        log(f"producing {cfg['count']:,} records of {cfg['size']} B")
        wall = produce(cluster.bootstrap, cfg)
        report["results"]["produce"] = {"wall_s": wall, "msg_s": cfg["count"] / wall}
        log(f"produced in {wall:.1f} s; reading with Spark")
        try:
            step_read(cluster, root, cfg, report)
        except StepError as exc:
            bench_cluster.step_failed(report, cluster, "read", exc)

    return bench_cluster.bench_on(cluster, report, root, body)


def targets(report: Report) -> list[Target]:
    r = report["results"].get("read")
    if r is None:
        return [("kraft / synthetic rows/s", "-", "n/a"), ("kraft rows/s", "-", "n/a")]
    return [
        target_row(
            f"kraft / synthetic Arrow source (ratio of medians) >= {TARGET_RATIO:g}",
            r["ratio"],
            TARGET_RATIO,
            higher_is_better=True,
        ),
        target_row(
            f"kraft rows/s >= {TARGET_ROWS_S:,}",
            Spread(tuple(r["kraft_rows_s"]["runs"])),
            TARGET_ROWS_S,
            higher_is_better=True,
            shown=lambda v: f"{v:,.0f}",
        ),
    ]


def render(report: Report) -> str:
    cfg = report["config"]
    rows: list[tuple[str, str]] = []
    if p := report["results"].get("produce"):
        rows.append(
            ("backlog produced", f"{cfg['count']:,} x {cfg['size']} B in {p['wall_s']:.1f} s")
        )
    if cfg["kafka"]:
        rows.append(("kraft source options", "  ".join(f"kafka.{kv}" for kv in cfg["kafka"])))
    if r := report["results"].get("read"):
        for name in ("kraft", "synthetic"):
            runs = "  ".join(f"{v:,.0f}" for v in r["rounds"][name])
            rows.append((f"{name} -> noop, rows/s (rounds)", runs))
        kraft, synthetic = (Spread(tuple(r["rounds"][n])) for n in ("kraft", "synthetic"))
        rows.append(("kraft, median", f"{kraft.text(',.0f', 'rows/s')}  {r['mb_s']:,.0f} MB/s"))
        rows.append(("synthetic, median", synthetic.text(",.0f", "rows/s")))
        rows.append(("  ratio of the medians", f"{r['ratio']:.3f}"))
        for name in ("kraft", "synthetic"):
            used = r["cpu_s_per_million_rows"][name]
            parts = "  ".join(f"{role} {used[role]:.2f}" for role in ROLES)
            total = sum(used.values())
            rows.append((f"CPU-s per million rows, {name}", f"{total:.2f}: {parts}"))
        for name in ("kraft", "synthetic"):
            runs = "  ".join(f"{v:,.0f}" for v in r["wall_rounds"][name])
            rows.append((f"  by wall time incl. query start, {name}", runs))
        rows.append(("  ratio of the medians by wall time", f"{r['wall_ratio']:.3f}"))
    return bench_cluster.render(report, rows, target_width=58)


def parse_args() -> argparse.Namespace:
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--count", type=int, help="rows in the topic")
        parser.add_argument("--size", type=int, help="value size in bytes (1024)")
        parser.add_argument("--partitions", type=int, help="partitions = Spark tasks (2)")
        parser.add_argument("--rounds", type=int, help="timed rounds per source (3)")
        parser.add_argument(
            "--kafka",
            action="append",
            metavar="KEY=VALUE",
            help="a kafka.KEY option of the kraft source (repeatable)",
        )

    return bench_cluster.parse_args(__doc__, "1,000,000 rows, about 90 s", add_arguments)


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    cfg = bench_cluster.config_of(args, FULL, QUICK, DEFAULTS)
    kafka_options(cfg["kafka"])  # a malformed one stops the run before the cluster starts
    return cfg


def main() -> int:
    return bench_cluster.main("bench-spark", parse_args, config_of, bench, targets, render)


if __name__ == "__main__":
    raise SystemExit(main())
