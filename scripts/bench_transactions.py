"""Transactions benchmark: transactional produce against idempotent produce, and read_committed
consume against read_uncommitted consume of the same data, on one broker.

    python scripts/bench_transactions.py [--quick] [--repeat N] [--count N] [--txn-size N]
        [--json [PATH]]

One ``kraft dev`` node (Kafka's transaction settings; ``__transaction_state`` created on the
first FindCoordinator, before the measurement).  The load client is confluent-kafka
(librdkafka), each phase in its own process, with the producer and consumer settings of
``bench_broker.py``; 1 KiB records, one partition, ``acks=all``:

1. produce ``--count`` records idempotently (``enable.idempotence``), and the same count with a
   ``transactional.id`` in transactions of ``--txn-size`` records (1,000: begin, produce,
   commit; the commit flushes and waits for the markers), in alternating order;
2. consume the transactional topic back from the beginning (``assign``), with
   ``isolation.level=read_uncommitted`` and ``read_committed`` in alternating order: the same
   records (every transaction committed), read up to the high watermark or the last stable
   offset, the COMMIT markers skipped by the client either way.

Targets on the ratio of the medians (``--repeat``, 3): transactional produce >= 0.7x the
idempotent throughput; read_committed consume >= 0.9x read_uncommitted.  Every figure is the
median of the repeats with its range (``bench_stats``).  ``--quick`` (~1 minute): 50,000
records a phase; the default (200,000) takes ~2-3 minutes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import uuid
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_machine
from bench_broker import (
    PHASE_TIMEOUT_S,
    PRODUCER,
    BrokerProc,
    consume_worker,
    create_topic,
    delete_topics,
    start_ours,
    throughput_phase,
)
from bench_stats import Spread, Target, fmt, ratio_of_medians, spread, target_row

KIB = 1024
PRODUCE_RATIO, CONSUME_RATIO = 0.7, 0.9
PRODUCES = ("idempotent", "transactional")
CONSUMES = ("read_uncommitted", "read_committed")


def produce_worker(
    conn: Connection, bootstrap: str, topic: str, count: int, size: int, txn_size: int
) -> None:
    """``count`` records of ``size`` bytes, idempotent (``txn_size`` 0) or in transactions of
    ``txn_size``, each committed.  Either way the producer has its producer id before the clock
    starts (librdkafka asks for it in the background: the idempotent producer writes one
    record first, not counted)."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        errors.append(str(err))

    config = {
        **PRODUCER,
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "on_delivery": on_delivery,
    }
    if txn_size:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    producer = Producer(config)
    producer.list_topics(topic, timeout=10)
    if txn_size:
        producer.init_transactions(60)
    else:
        producer.produce(topic, b"warm")
        producer.flush(60)
    value = os.urandom(size)
    produce, poll = producer.produce, producer.poll
    conn.send("ready")
    conn.recv()
    cpu0, t0 = bench_machine.own_cpu_s(), time.perf_counter()
    left = count
    while left > 0:
        if txn_size:
            producer.begin_transaction()
        for _ in range(min(txn_size or count, left)):
            try:
                produce(topic, value)
            except BufferError:
                poll(0.005)
                produce(topic, value)
        if txn_size:
            producer.commit_transaction(PHASE_TIMEOUT_S)
        left -= txn_size or count
    unflushed = producer.flush(PHASE_TIMEOUT_S)
    elapsed = time.perf_counter() - t0
    if unflushed:
        errors.append(f"{unflushed} records not delivered")
    conn.send(
        {"wall_s": elapsed, "client_cpu_s": bench_machine.own_cpu_s() - cpu0, "errors": errors[:5]}
    )


def warm_up(broker: BrokerProc) -> None:
    """One transaction before any measurement: ``__transaction_state`` created and loaded."""
    from confluent_kafka import Producer

    topic = f"txn-warm-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"warm")
    producer.commit_transaction(60)
    delete_topics(broker.bootstrap, [topic])


def show(what: str, r: dict[str, Any]) -> None:
    if r.get("errors"):
        raise RuntimeError(f"{what}: {r['errors']}")
    print(
        f"  {what:<17} {r['mb_s']:8.1f} MB/s  broker {r['broker_cores']:.2f} cores"
        f"  client {r['client_cores']:.2f}  other {r['other_cores']:.2f}",
        flush=True,
    )


def one_repeat(broker: BrokerProc, count: int, txn_size: int, flip: bool) -> dict[str, Any]:
    topics = {kind: f"bench-{kind}-{uuid.uuid4().hex[:8]}" for kind in PRODUCES}
    for topic in topics.values():
        create_topic(broker.bootstrap, topic, 1)
    run: dict[str, Any] = {}
    for kind in PRODUCES[:: -1 if flip else 1]:
        produce_args = (topics[kind], count, KIB, txn_size if kind == "transactional" else 0)
        r = throughput_phase(broker, produce_worker, produce_args, count, KIB)
        show(f"{kind} produce", r)
        run[kind] = r
    for isolation in CONSUMES[:: -1 if flip else 1]:
        conf = {"isolation.level": isolation}
        consume_args = (topics["transactional"], 1, count, KIB, conf)
        r = throughput_phase(broker, consume_worker, consume_args, count, KIB)
        show(f"{isolation}", r)
        run[isolation] = r
    delete_topics(broker.bootstrap, list(topics.values()))
    return run


def report(runs: list[dict[str, Any]], txn_size: int) -> tuple[str, list[Target]]:
    figures: dict[str, Spread] = {
        kind: spread(r[kind]["mb_s"] for r in runs) for kind in (*PRODUCES, *CONSUMES)
    }
    lines = ["", f"{'figure (1 KiB records)':<42} median (range, runs)"]
    names = {
        "idempotent": "produce, idempotent",
        "transactional": f"produce, transactions of {txn_size:,}",
        "read_uncommitted": "consume, read_uncommitted",
        "read_committed": "consume, read_committed",
    }
    for kind, name in names.items():
        lines.append(f"{name:<42} {figures[kind].text('.1f', 'MB/s')}")
        cpu = spread(r[kind]["cpu_s_per_gb"] for r in runs)
        lines.append(f"{'  broker CPU':<42} {cpu.text('.2f', 'CPU-s/GB')}")
    targets: list[Target] = []
    for name, num, den, bound in (
        ("transactional / idempotent produce", "transactional", "idempotent", PRODUCE_RATIO),
        ("read_committed / read_uncommitted", "read_committed", "read_uncommitted", CONSUME_RATIO),
    ):
        ratio = ratio_of_medians(figures[num].runs, figures[den].runs)
        per_run = spread(r[num]["mb_s"] / r[den]["mb_s"] for r in runs)
        row = target_row(f"{name} >= {bound}x", ratio, bound, higher_is_better=True)
        measured = f"{fmt(ratio)}x (per-run {per_run.low:.2f}-{per_run.high:.2f})"
        targets.append((row[0], measured, row[2]))
    lines += ["", f"{'target':<46} {'measured':<32} verdict"]
    lines += [f"{name:<46} {value:<32} {v}" for name, value, v in targets]
    return "\n".join(lines), targets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="50,000 records a phase")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--count", type=int, help="1 KiB records per phase (200,000)")
    parser.add_argument("--txn-size", type=int, default=1000, help="records per transaction")
    parser.add_argument("--json", nargs="?", const="-", help="write every run as JSON")
    args = parser.parse_args()
    count = args.count or (50_000 if args.quick else 200_000)
    print(f"machine: {bench_machine.machine_info()}", flush=True)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-transactions-") as tmp_name:
        broker = start_ours(Path(tmp_name), "ours", True, {})
        try:
            print(f"broker: {broker.version}", flush=True)
            warm_up(broker)
            for i in range(args.repeat):
                flip = i % 2 == 1
                print(f"repeat {i + 1}/{args.repeat}: {count:,} x 1 KiB", flush=True)
                runs.append(one_repeat(broker, count, args.txn_size, flip))
        finally:
            broker.stop()
    text, targets = report(runs, args.txn_size)
    print(text)
    if args.json:
        payload = json.dumps({"runs": runs, "targets": targets}, indent=1, default=str)
        if args.json == "-":
            print(payload)
        else:
            Path(args.json).write_text(payload)
    return 0


if __name__ == "__main__":
    mp.set_start_method("spawn")
    sys.exit(main())
