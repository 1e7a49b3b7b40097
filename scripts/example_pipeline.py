"""The example pipeline: clickstream events into a topic, a streaming windowed aggregation of
them with Spark, written to Parquet, with progress on the terminal.

    kraft dev &                                  # or any cluster: --bootstrap HOST:PORT,...
    python scripts/example_pipeline.py --seconds 60

Three parts run side by side:

1. a generator thread produces JSON click events (``user``, ``page``, ``ts``) into ``clicks``
   with the source's own idempotent producer (``spark_source.producer``);
2. a Spark structured-streaming query reads the committed clicks with the ``kraft`` source,
   counts clicks per page in 10-second event-time windows (with a 10-second watermark, so
   each window is written once, when it closes) and appends the windows to Parquet;
3. every trigger prints one progress line: batch, rows read, rows/s, and the query's lag
   (high watermark minus the committed offsets of its consumer group, which any Kafka lag tool
   sees too).

At the end it reads the Parquet back and prints the busiest pages of the last windows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_source import KraftSource
from spark_source.client import KafkaClient, TopicPartition
from spark_source.producer import Producer

PAGES = ["/", "/search", "/product", "/cart", "/checkout", "/help", "/account"]
EVENT_SCHEMA = "user string, page string, ts timestamp"


def generate(bootstrap: str, topic: str, rate: int, stop: threading.Event) -> None:
    """About ``rate`` events a second until ``stop``; popular pages are popular."""
    rng = random.Random(7)
    weights = [30, 20, 25, 10, 5, 3, 7]
    with KafkaClient(bootstrap) as client:
        producer = Producer(client, {"compression.type": "lz4"})
        tick = 0.1
        while not stop.is_set():
            started = time.monotonic()
            now = time.time()
            for _ in range(max(1, int(rate * tick))):
                user = f"user-{rng.randrange(1000)}"
                event = {
                    "user": user,
                    "page": rng.choices(PAGES, weights)[0],
                    "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
                    + f".{int(now * 1000) % 1000:03d}Z",
                }
                producer.send(topic, json.dumps(event).encode(), key=user.encode())
            producer.flush()
            stop.wait(max(0.0, tick - (time.monotonic() - started)))
        producer.close()


def create_topic(admin: str, topic: str, partitions: int) -> None:
    """Through the REST admin API; an existing topic is fine."""
    body = json.dumps({"name": topic, "partitions": partitions, "replication_factor": 1})
    request = urllib.request.Request(
        f"{admin}/v1/topics", body.encode(), {"Content-Type": "application/json"}, method="POST"
    )
    try:
        urllib.request.urlopen(request, timeout=30).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # 409: it exists
            raise SystemExit(f"creating {topic} failed: {exc.code} {exc.read().decode()}") from None
    except OSError as exc:
        raise SystemExit(
            f"cannot reach the REST admin API at {admin} ({exc}); is kraft dev up?"
        ) from None


def lag(bootstrap: str, group: str, topic: str) -> int | None:
    with KafkaClient(bootstrap) as client:
        partitions = client.partition_counts([topic]).get(topic, 0)
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        high = client.list_offsets(dict.fromkeys(tps, -1))
        committed = client.committed_offsets(group, tps)
    if not committed:
        return None
    return sum(high[tp] - committed.get(tp, (0, ""))[0] for tp in tps)


def progress_line(p: dict[str, Any], lag_records: int | None) -> str:
    rate = p.get("processedRowsPerSecond") or 0.0
    return (
        f"batch {p['batchId']:>4}  read {p['numInputRows']:>7} rows  {rate:>9.0f} rows/s"
        f"  lag {'-' if lag_records is None else lag_records}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument(
        "--admin", default=os.environ.get("KRAFT_ADMIN", "http://127.0.0.1:8080"), help="REST API"
    )
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--out", default="clickstream-out", help="Parquet and checkpoint dir")
    parser.add_argument("--seconds", type=float, default=60, help="run time (0: until Ctrl-C)")
    parser.add_argument("--rate", type=int, default=2000, help="events per second")
    args = parser.parse_args()

    out = Path(args.out)
    group = f"example-{args.topic}"
    create_topic(args.admin, args.topic, 3)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kraft-example-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KraftSource)

    stop = threading.Event()
    generator = threading.Thread(
        target=generate, args=(args.bootstrap, args.topic, args.rate, stop), daemon=True
    )
    generator.start()

    clicks = (
        spark.readStream.format("kraft")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("kafka.group.id", group)
        .load()
        .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
        .select("e.*")
    )
    windows = (
        clicks.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "10 seconds").alias("window"), "page")
        .agg(F.count("*").alias("clicks"), F.approx_count_distinct("user").alias("users"))
    )
    query = (
        windows.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(out / "windows"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(processingTime="2 seconds")
        .start()
    )
    print(f"pipeline running: {args.topic} -> {out / 'windows'} (Ctrl-C stops)", flush=True)
    deadline = time.monotonic() + args.seconds if args.seconds > 0 else None
    last_batch = -1
    try:
        while query.isActive and (deadline is None or time.monotonic() < deadline):
            query.awaitTermination(1)
            p = query.lastProgress
            if p and p["batchId"] != last_batch:
                last_batch = p["batchId"]
                print(progress_line(p, lag(args.bootstrap, group, args.topic)), flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        generator.join(10)
        query.stop()
    if query.exception() is not None:
        print(f"the query failed: {query.exception()}", file=sys.stderr)
        return 1
    path = out / "windows"
    written = spark.read.parquet(str(path)) if any(path.glob("*.parquet")) else None
    total = 0 if written is None else written.agg(F.sum("clicks")).first()[0]
    if written is None or not total:
        print("no window has closed yet; run longer than 20 s to see results")
        return 0
    print(f"{written.count()} page-windows written, {total} clicks counted; latest windows:")
    for row in written.orderBy(F.col("window.start").desc(), F.col("clicks").desc()).take(7):
        print(
            f"  {row.window.start:%H:%M:%S}  {row.page:<10} {row.clicks:>6} clicks"
            f"  {row.users:>5} users"
        )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
