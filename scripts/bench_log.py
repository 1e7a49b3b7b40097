"""Partition-log benchmark: append throughput against raw ``os.write``, and read lookups.

    python scripts/bench_log.py [--total-mib N] [--rounds N] [--json]

1. Append: ``PartitionLog.append`` of 16 KiB and 1 MiB batches (one batch per call, and 8
   batches per call for 16 KiB) to ``FileStorage`` in a temporary directory, against
   ``os.write`` of the same bytes, call for call, in the same run (the ratio is the log's
   cost: offset assignment, the 17-byte prefixes, writev, index upkeep).  No fsync in
   either (``flush.messages`` at its default), so this measures the CPU path to the page
   cache, where the log's fixed Python cost per call (~7 us) shows most.  Each case runs
   ``--rounds`` times, the two alternating; figures are the medians (the log's range beside
   them) and the ratio is that of the medians.
2. Read: ``PartitionLog.read(offset, 1 MiB)`` at random offsets of the 16 KiB log (several
   segments): the segment bisect, the index lookups and the header walks, per call.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_stats import median, ratio_of_medians

from broker.log import LogConfig, PartitionLog
from broker.storage import FileStorage
from kafka_protocol.record_batch import SimpleRecord, build_batch

T0 = 1_700_000_000_000
KIB = 1024
MIB = 1024 * KIB


def batch_of(size_bytes: int) -> bytes:
    """A batch of about ``size_bytes``: 1 KiB records of random (incompressible) bytes."""
    rng = random.Random(size_bytes)
    count = max(1, size_bytes // (KIB + 16))
    records = [SimpleRecord(value=rng.randbytes(KIB), key=b"k%d" % i) for i in range(count)]
    return build_batch(records, now_ms=T0)


def raw_write(path: Path, batch: bytes, calls: int, per_call: int) -> float:
    """Seconds to ``os.write`` the same bytes, one call per append."""
    data = batch * per_call
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(calls):
            os.write(fd, data)
        return time.perf_counter() - start
    finally:
        os.close(fd)


def log_append(directory: Path, batch: bytes, calls: int, per_call: int) -> float:
    config = LogConfig(segment_bytes=256 * MIB)
    log = PartitionLog.open(FileStorage(), str(directory), config, T0)
    views = [memoryview(batch)] * per_call
    start = time.perf_counter()
    for i in range(calls):
        log.append(views, leader_epoch=0, now_ms=T0 + i)
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed


def bench_append(tmp: Path, size: int, per_call: int, total: int, rounds: int) -> dict[str, float]:
    batch = batch_of(size)
    calls = max(1, total // (len(batch) * per_call))
    raw_s, log_s = [], []
    for r in range(rounds):  # interleaved: page-cache writeback hits both alike
        raw_path, log_dir = tmp / f"raw-{size}-{per_call}-{r}", tmp / f"log-{size}-{per_call}-{r}"
        if r % 2:  # alternate which goes first
            log_s.append(log_append(log_dir, batch, calls, per_call))
            raw_s.append(raw_write(raw_path, batch, calls, per_call))
        else:
            raw_s.append(raw_write(raw_path, batch, calls, per_call))
            log_s.append(log_append(log_dir, batch, calls, per_call))
        raw_path.unlink()
        for f in log_dir.iterdir():
            f.unlink()
    nbytes = len(batch) * per_call * calls
    raw, log = median(raw_s), median(log_s)
    return {
        "batch_bytes": len(batch),
        "batches_per_call": per_call,
        "log_mb_s": nbytes / log / 1e6,
        "log_mb_s_range": (nbytes / max(log_s) / 1e6, nbytes / min(log_s) / 1e6),
        "log_batches_s": calls * per_call / log,
        "raw_mb_s": nbytes / raw / 1e6,
        "ratio": ratio_of_medians(raw_s, log_s),
    }


def bench_read(tmp: Path, total: int) -> dict[str, float]:
    batch = batch_of(16 * KIB)
    directory = tmp / "read"
    config = LogConfig(segment_bytes=max(total // 4, 4 * len(batch)))
    log = PartitionLog.open(FileStorage(), str(directory), config, T0)
    for i in range(max(1, total // len(batch))):
        log.append([memoryview(batch)], leader_epoch=0, now_ms=T0 + i)
    rng = random.Random(7)
    offsets = [rng.randrange(log.log_end_offset) for _ in range(20_000)]
    samples = []
    for offset in offsets:
        start = time.perf_counter()
        log.read(offset, MIB, max_offset=log.log_end_offset)
        samples.append(time.perf_counter() - start)
    result = {
        "segments": float(log.segments),
        "offsets": float(log.log_end_offset),
        "mean_us": statistics.fmean(samples) * 1e6,
        "p50_us": statistics.median(samples) * 1e6,
        "p99_us": statistics.quantiles(samples, n=100)[98] * 1e6,
    }
    log.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--total-mib", type=int, default=256, help="bytes written per case")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    total = args.total_mib * MIB
    with tempfile.TemporaryDirectory(prefix="bench-log-") as name:
        tmp = Path(name)
        appends = [
            bench_append(tmp, size, per_call, total, args.rounds)
            for size, per_call in ((16 * KIB, 1), (16 * KIB, 8), (MIB, 1))
        ]
        read = bench_read(tmp, total)
    if args.json:
        print(json.dumps({"append": appends, "read": read}, indent=2))
        return
    print(
        f"append, {args.total_mib} MiB per case, median of {args.rounds} rounds"
        " (log MB/s range beside it; ratio of the medians; no fsync)"
    )
    header = (
        ("batch", 9),
        ("per call", 8),
        ("log MB/s", 9),
        ("(range)", 11),
        ("batches/s", 10),
        ("raw MB/s", 9),
    )
    print(" ".join(f"{name:>{width}}" for name, width in header), f"{'ratio':>6}")
    for a in appends:
        print(
            f"{a['batch_bytes']:>9} {a['batches_per_call']:>8} {a['log_mb_s']:>9.0f}"
            f" {a['log_mb_s_range'][0]:>5.0f}-{a['log_mb_s_range'][1]:<5.0f}"
            f" {a['log_batches_s']:>10.0f} {a['raw_mb_s']:>9.0f} {a['ratio']:>6.2f}"
        )
    print(
        f"\nread(offset, 1 MiB) over {read['offsets']:.0f} offsets in {read['segments']:.0f}"
        f" segments: mean {read['mean_us']:.1f} us, p50 {read['p50_us']:.1f} us,"
        f" p99 {read['p99_us']:.1f} us"
    )


if __name__ == "__main__":
    main()
