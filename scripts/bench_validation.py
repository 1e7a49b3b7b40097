"""Record validation benchmark: broker CPU with the record walk (this tree) and without it (the
commit before it), side by side in one run.

    python scripts/bench_validation.py [--repeat N] [--count-100b N] [--count-1k N]
        [--count-lz4 N] [--baseline-ref REF] [--json PATH]

"Off" is this repository at ``--baseline-ref`` (default: the parent of the first commit that
added ``kafka_protocol/_record_walk.c``), exported by ``git archive`` to a temporary directory:
the same broker without record validation, with no switch in the product.  Both run at once
as ``kraft dev`` (uvloop when installed; page cache, no fsync per append) on loopback ports,
each with its own data directory.  Before measuring, one malformed batch (a record count
above the records present, valid CRC) is sent to each: "on" must refuse it and "off" accept
it, or the comparison is void.

Each workload runs on each broker in turn, the order alternating between repeats, from a
confluent-kafka producer in this process (one partition, acks=1, ``linger.ms=100``,
``batch.size=1MB`` and no message-count limit, so that batches are full whatever the load on
the machine; no idempotence), to a new topic each time; the broker's CPU (all threads,
from /proc/PID/task/*/schedstat) is read before the first ``produce()`` and after ``flush()``:

1. 100 B values, uncompressed: broker CPU-s per million messages (target <= 0.35);
2. 1 KiB values, uncompressed: broker CPU-s per GB of values (target <= 1.0);
3. 1 KiB values of text, lz4: the validation's CPU (on minus off, per repeat) against the CPU
   of decompressing the same batches alone (the median of the per-repeat differences, each
   pair run back to back, against the median time to decompress the batches read back from
   the "on" broker's segment with the product's bounded decompression, in this process;
   target <= 1.5x).  As a cross-check without broker noise: the
   in-process ``walk_batch`` (decompress + walk) of those batches against decompressing them.

Last, the validator alone (``validate_records``) in this process on 1 MB batches of 100 B and
1 KiB records: its own CPU per million messages and per GB, free of the broker's noise.

Every figure is the median of the repeats with its range (min-max); the targets are judged
on the medians (``bench_stats``).  A default run (7 repeats) takes about
a minute.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_machine import threads_cpu_s  # noqa: E402
from bench_stats import Spread, Target, seconds_per_call, spread, target_row  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafka_protocol.compression import decompress_buffer  # noqa: E402
from kafka_protocol.record_batch import ATTR_COMPRESSION_MASK, HEADER_BYTES, iter_batches  # noqa: E402
from kafka_protocol.record_walk import walk_batch  # noqa: E402

READY_TIMEOUT_S = 60.0
GB = 1_000_000_000
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india")


@dataclass
class Broker:
    name: str  # "on" or "off"
    proc: subprocess.Popen[bytes]
    bootstrap: str
    data_dir: Path


def baseline_ref() -> str:
    first = subprocess.run(
        ["git", "rev-list", "--reverse", "HEAD", "--", "kafka_protocol/_record_walk.c"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not first:
        raise SystemExit("no commit adds kafka_protocol/_record_walk.c: pass --baseline-ref")
    return first[0] + "^"


def export_tree(ref: str, into: Path) -> Path:
    into.mkdir()
    archive = subprocess.run(["git", "archive", ref], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def start_broker(name: str, root: Path, tmp: Path) -> Broker:
    """``kraft dev`` run from ``root`` (``-m`` puts the working directory first on the path,
    so the packages of ``root`` are the ones imported)."""
    data = tmp / f"data-{name}"
    log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - written until the broker stops
    env = {**os.environ, "KRAFT_LOG_LEVEL": "WARNING", "PYTHONPATH": str(root)}
    cmd = [sys.executable, "-m", "kraft.cli", "dev", "--data-dir", str(data), "--port", "0"]
    cmd += ["--admin-port", "0"]
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=log)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_S)
    line = proc.stdout.readline().decode() if ready else ""
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"{name} did not start: {line!r} {(tmp / f'{name}.log').read_text()}")
    threading.Thread(target=shutil.copyfileobj, args=(proc.stdout, log), daemon=True).start()
    words = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
    return Broker(name, proc, words["bootstrap"], data)


def create_topic(broker: Broker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def delete_topic(broker: Broker, topic: str) -> None:
    """Delete a measured topic, so that its files leave the page cache. Left to accumulate
    (several GB per run), they put this machine's kernel in a state where every broker's
    writes cost up to 5x more CPU (seen on both brokers alike, and gone after
    ``echo 3 > /proc/sys/vm/drop_caches``), and later repeats measured that instead."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 30
    while any(broker.data_dir.rglob(f"{topic}-0")) and time.monotonic() < deadline:
        time.sleep(0.05)


def check_validation(broker: Broker, expect_refused: bool) -> None:
    """One batch whose header claims a record more than it holds (valid CRC)."""
    sys.path.insert(0, str(REPO / "tests"))
    from integration.raw_client import RawConnection
    from record_corruption import count_too_high, valid_batch

    from kafka_protocol.messages import ProduceRequest
    from kafka_protocol.types import TopicName

    topic = f"check-{broker.name}"
    create_topic(broker, topic)
    bad = count_too_high(valid_batch([(b"k", b"v", [], 0)], int(time.time() * 1000))).seal()
    part = ProduceRequest.PartitionProduceData(index=0, records=bad)
    request = ProduceRequest(
        acks=1,
        timeout_ms=5000,
        topic_data=[ProduceRequest.TopicProduceData(name=TopicName(topic), partition_data=[part])],
    )
    conn = RawConnection(broker.bootstrap)
    error = conn.request(request, 9).responses[0].partition_responses[0].error_code
    conn.close()
    if (error != 0) != expect_refused:
        raise SystemExit(f"broker {broker.name} answered a malformed batch with error {error}")


def values(kind: str, n: int = 1000) -> list[bytes]:
    rng = random.Random(kind)
    if kind == "100b":
        return [rng.randbytes(100) for _ in range(n)]
    if kind == "1k":
        return [rng.randbytes(1024) for _ in range(n)]
    text = (" ".join(rng.choices(WORDS, k=300)).encode() for _ in range(n))
    return [t[:1024].ljust(1024, b".") for t in text]  # lz4 halves it, about


def produce(broker: Broker, topic: str, count: int, pool: list[bytes], codec: str) -> float:
    """Broker CPU-seconds to take ``count`` messages (acks=1, confluent-kafka)."""
    create_topic(broker, topic)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "log_level": 3,
            "acks": 1,
            # Full batches whatever the machine's load: a producer slowed by other work would
            # otherwise send smaller ones, and per-request costs would swamp what is measured.
            "linger.ms": 100,
            "batch.size": 1_000_000,
            "batch.num.messages": 1_000_000,
            "compression.type": codec,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    before = threads_cpu_s(broker.proc.pid)
    for i in range(count):
        while True:
            try:
                producer.produce(topic, pool[i % len(pool)], partition=0)
                break
            except BufferError:
                producer.poll(0.005)
    if producer.flush(120) != 0:
        raise RuntimeError(f"{broker.name}: messages left undelivered")
    return threads_cpu_s(broker.proc.pid) - before


def segment_batches(broker: Broker, topic: str) -> list[memoryview]:
    paths = sorted(broker.data_dir.rglob(f"{topic}-0/*.log"))
    data = b"".join(p.read_bytes() for p in paths)
    return [b.buf for b in iter_batches(data)]


def decompress_vs_walk(batches: list[memoryview], repeat: int) -> tuple[Spread, Spread]:
    """Seconds (process CPU) to decompress every batch, and to walk_batch every batch."""
    from kafka_protocol.record_batch import RecordBatch

    parsed = [RecordBatch(b) for b in batches]

    def decompress_all() -> None:
        for b in parsed:
            decompress_buffer(b.attributes & ATTR_COMPRESSION_MASK, b.buf[HEADER_BYTES:])

    def walk_all() -> None:
        for b in parsed:
            assert walk_batch(b).problem is None

    clock = time.process_time
    rounds = max(repeat, 5)
    return (
        seconds_per_call(decompress_all, repeat=rounds, min_time_s=0.2, clock=clock),
        seconds_per_call(walk_all, repeat=rounds, min_time_s=0.2, clock=clock),
    )


def validation_alone(pools: dict[str, list[bytes]], repeat: int) -> dict[str, Spread]:
    """The validator's own CPU in this process, on 1 MB batches like the producer's: CPU-s
    per million 100 B records and per GB of 1 KiB records (no broker, so no noise from it)."""
    from broker.log.config import LogConfig
    from broker.log.validator import validate_records
    from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch

    out = {}
    now = int(time.time() * 1000)
    for kind, per_batch, scale in (("100b", 9000, 1e6), ("1k", 900, GB / 1024)):
        records = [SimpleRecord(pools[kind][i % len(pools[kind])]) for i in range(per_batch)]
        batch = RecordBatch(memoryview(build_batch(records, now_ms=now)))
        config = LogConfig()

        def validate(batch: RecordBatch = batch, config: LogConfig = config) -> None:
            assert validate_records(batch, config, log_append_time=False, now_ms=now) is None

        per_call = seconds_per_call(validate, repeat=max(repeat, 5), clock=time.process_time)
        out[kind] = spread(s / per_batch * scale for s in per_call.runs)
    return out


@contextlib.contextmanager
def brokers(ref: str) -> Iterator[dict[str, Broker]]:
    with tempfile.TemporaryDirectory(prefix="bench-validation-") as tmp_name:
        tmp = Path(tmp_name)
        off_root = export_tree(ref, tmp / "baseline")
        started: dict[str, Broker] = {}
        try:
            started["on"] = start_broker("on", REPO, tmp)
            started["off"] = start_broker("off", off_root, tmp)
            yield started
        finally:
            for b in started.values():
                b.proc.terminate()
            for b in started.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    b.proc.wait(15)
                if b.proc.poll() is None:
                    b.proc.kill()


def run(args: argparse.Namespace) -> dict[str, Any]:
    ref = args.baseline_ref or baseline_ref()
    workloads = [
        ("100b", args.count_100b, "none"),
        ("1k", args.count_1k, "none"),
        ("lz4", args.count_lz4, "lz4"),
    ]
    pools = {kind: values(kind) for kind, _, _ in workloads}
    cpu: dict[tuple[str, str], list[float]] = {}
    with brokers(ref) as running:
        check_validation(running["on"], expect_refused=True)
        check_validation(running["off"], expect_refused=False)
        for r in range(args.repeat):
            order = ["on", "off"] if r % 2 == 0 else ["off", "on"]
            for kind, count, codec in workloads:
                for name in order:
                    topic = f"{kind}-{r}"
                    used = produce(running[name], topic, count, pools[kind], codec)
                    cpu.setdefault((kind, name), []).append(used)
                    print(f"repeat {r + 1} {kind:4} {name:3}: broker {used:.3f} CPU-s", flush=True)
                    if topic != "lz4-0":  # read back below
                        delete_topic(running[name], topic)
        lz4_batches = segment_batches(running["on"], "lz4-0")
    decompress_s, walk_s = decompress_vs_walk(lz4_batches, args.repeat)
    alone = validation_alone(pools, args.repeat)
    return report(args, ref, cpu, decompress_s, walk_s, len(lz4_batches), alone)


def report(
    args: argparse.Namespace,
    ref: str,
    cpu: dict[tuple[str, str], list[float]],
    decompress_s: Spread,
    walk_s: Spread,
    lz4_batch_count: int,
    alone: dict[str, Spread],
) -> dict[str, Any]:
    per_m = {n: spread(c / args.count_100b * 1e6 for c in cpu[("100b", n)]) for n in ("on", "off")}
    gb_1k = args.count_1k * 1024 / GB
    per_gb = {n: spread(c / gb_1k for c in cpu[("1k", n)]) for n in ("on", "off")}
    lz4 = {n: spread(cpu[("lz4", n)]) for n in ("on", "off")}
    pairs = zip(cpu[("lz4", "on")], cpu[("lz4", "off")], strict=True)
    paired = spread(on - off for on, off in pairs)
    # Judged on the median of the per-repeat differences: each pair ran back to back under the
    # same load, where a difference of medians mixes repeats from quiet and busy moments.
    lz4_validation_s = paired.median
    lz4_ratio = lz4_validation_s / decompress_s.median
    rows: list[Target] = [
        target_row(
            "100 B acks=1: broker CPU-s per million (on)", per_m["on"], 0.35, higher_is_better=False
        ),
        target_row(
            "1 KiB acks=1: broker CPU-s per GB (on)", per_gb["on"], 1.0, higher_is_better=False
        ),
        target_row(
            "lz4 1 KiB: validation CPU / decompress alone", lz4_ratio, 1.5, higher_is_better=False
        ),
    ]
    figures = {
        "100b_cpu_s_per_million": {n: s.as_dict() for n, s in per_m.items()},
        "1k_cpu_s_per_gb": {n: s.as_dict() for n, s in per_gb.items()},
        "lz4_broker_cpu_s": {n: s.as_dict() for n, s in lz4.items()},
        "lz4_validation_cpu_s": paired.as_dict(),
        "lz4_median_on_minus_median_off_cpu_s": lz4["on"].median - lz4["off"].median,
        "lz4_decompress_alone_cpu_s": decompress_s.as_dict(),
        "lz4_walk_batch_in_process_cpu_s": walk_s.as_dict(),
        "lz4_batches": lz4_batch_count,
        "validation_alone_cpu_s_per_million_100b": alone["100b"].as_dict(),
        "validation_alone_cpu_s_per_gb_1k": alone["1k"].as_dict(),
    }
    print(
        f"\nbaseline (off): {ref}; counts 100 B {args.count_100b:,}, 1 KiB {args.count_1k:,},"
        f" lz4 1 KiB {args.count_lz4:,}; {args.repeat} repeats"
    )
    print(f"100 B, CPU-s per million: on {per_m['on'].text()}  off {per_m['off'].text()}")
    print(f"1 KiB, CPU-s per GB:      on {per_gb['on'].text()}  off {per_gb['off'].text()}")
    print(f"lz4 1 KiB, broker CPU-s:  on {lz4['on'].text()}  off {lz4['off'].text()}")
    print(
        f"lz4 validation = on - off per repeat: {paired.text()} CPU-s (median(on) -"
        f" median(off): {lz4['on'].median - lz4['off'].median:.3f}); decompressing the"
        f" {lz4_batch_count} batches alone: {decompress_s.text(spec='.4f')} CPU-s"
    )
    print(
        f"in process: walk_batch {walk_s.text(spec='.4f')} s vs decompress"
        f" {decompress_s.text(spec='.4f')} s = {walk_s.median / decompress_s.median:.2f}x"
    )
    print(
        f"validation alone, in process: {alone['100b'].text(spec='.4f')} CPU-s per million"
        f" 100 B; {alone['1k'].text(spec='.4f')} CPU-s per GB of 1 KiB"
    )
    width = max(len(r[0]) for r in rows)
    print()
    for name, measured, verdict in rows:
        print(f"{name:{width}}  {measured:40}  {verdict}")
    return {"baseline_ref": ref, "figures": figures, "targets": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--count-100b", type=int, default=1_000_000)
    parser.add_argument("--count-1k", type=int, default=200_000)
    parser.add_argument("--count-lz4", type=int, default=200_000)
    parser.add_argument("--baseline-ref", help="the broker without validation (a git ref)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    result = run(args)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
