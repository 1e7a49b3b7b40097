"""``spark_source.arrow_records.to_arrow`` throughput, beside its baselines from the same run.

    python scripts/bench_arrow_records.py [--chunk-records N] [--batch-records N] [--json]

One fetched chunk (default 4,000 records of ~1 KiB in batches of 100, about 4 MiB, as one
Fetch of one partition) is decoded into Arrow again and again, on one core:

* ``to_arrow``: the decoder (compiled loops, numpy and Arrow).
* ``reference``: kafka_protocol's record iteration, one Python row per record, then
  ``pa.array`` per column (the obvious decoder; the tests' oracle).
* ``floor``: ``pa.array`` per column from lists already materialized: what any decoder that
  goes through Python objects costs at least, before parsing a single byte.
* ``crc+inflate``: CRC checks and decompression alone, which every decoder must do.

Record shapes: ``fixed`` (null keys, 1,024-byte values: every batch one record size),
``keyed`` (keys ``k0``, ``k1``, ...: sizes change where the key gains a digit), ``varied``
(value sizes spread over 900-1,150 bytes: every record its own size).
Values are JSON-ish text (lz4 ~2:1, zstd ~3:1).  The machine is shared: figures are the
median of 7 loops, in CPU time of this process (to_arrow's range of loops beside it), and the
ratios are those of the medians; compare ratios, not rows/s, across runs.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
from bench_stats import Spread, seconds_per_call

from kafka_protocol.compression import Compression
from kafka_protocol.record_batch import SimpleRecord, build_batch, iter_batches
from spark_source._arrow_reference import reference_batch, reference_rows
from spark_source.arrow_records import kafka_schema, to_arrow

TOPIC = "clicks"
T0 = 1_700_000_000_000
SHAPES = ("fixed", "keyed", "varied")
CODECS = (Compression.NONE, Compression.LZ4, Compression.ZSTD)


def cpu_seconds_per_call(fn: Callable[[], object]) -> Spread:
    """CPU seconds per call (this process's, so other load on a shared machine counts less)
    in each of 7 loops of at least 0.2 s."""
    return seconds_per_call(fn, repeat=7, min_time_s=0.2, clock=time.process_time)


def records(shape: str, count: int) -> list[SimpleRecord]:
    rng = random.Random(7)
    words = [rng.randbytes(rng.randint(2, 6)).hex() for _ in range(300)]
    out = []
    for i in range(count):
        size = rng.randint(900, 1150) if shape == "varied" else 1024
        text = f'{{"user":"u{rng.randrange(10**6):06d}","ts":{T0 + i},"path":"'
        while len(text) < size:
            text += rng.choice(words) + "/"
        key = None if shape == "fixed" else f"k{i}".encode()
        out.append(SimpleRecord(value=text[:size].encode(), key=key, timestamp=T0 + i))
    return out


def chunk(recs: list[SimpleRecord], per_batch: int, codec: Compression) -> bytes:
    return b"".join(
        build_batch(recs[i : i + per_batch], base_offset=i, compression=codec)
        for i in range(0, len(recs), per_batch)
    )


def floor_batch(columns: dict[str, list[object]]) -> pa.RecordBatch:
    """Arrow from lists already decoded: the least a Python-object decoder pays."""
    schema = kafka_schema(False)
    return pa.RecordBatch.from_arrays(
        [pa.array(columns[f.name], type=f.type) for f in schema], schema=schema
    )


def crc_and_inflate(data: bytes) -> None:
    for batch in iter_batches(data):
        batch.validate()
        batch.records_section()


def bench(shape: str, codec: Compression, rows: int, per_batch: int) -> dict[str, float]:
    data = chunk(records(shape, rows), per_batch, codec)
    got = pa.Table.from_batches(list(to_arrow(data, TOPIC, 0, 0, rows, False)))
    want = reference_batch(data, TOPIC, 0, 0, rows, False)
    assert got.equals(pa.Table.from_batches([want])), "to_arrow disagrees with the reference"
    table = reference_rows(data, TOPIC, 0, 0, rows, False)
    columns = {name: [row[name] for row in table] for name in kafka_schema(False).names}
    spreads = {
        "to_arrow": cpu_seconds_per_call(lambda: list(to_arrow(data, TOPIC, 0, 0, rows, False))),
        "reference": cpu_seconds_per_call(lambda: reference_batch(data, TOPIC, 0, 0, rows, False)),
        "floor": cpu_seconds_per_call(lambda: floor_batch(columns)),
        "crc+inflate": cpu_seconds_per_call(lambda: crc_and_inflate(data)),
    }
    timings = {name: t.median for name, t in spreads.items()}
    result = {f"{name} rows/s": rows / s for name, s in timings.items()}
    # the slowest and the fastest loop of to_arrow, as rows/s
    result["to_arrow rows/s min"] = rows / spreads["to_arrow"].high
    result["to_arrow rows/s max"] = rows / spreads["to_arrow"].low
    result["x reference"] = timings["reference"] / timings["to_arrow"]
    result["x floor"] = timings["floor"] / timings["to_arrow"]
    result["MiB"] = len(data) / 2**20
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunk-records", type=int, default=4000)
    parser.add_argument("--batch-records", type=int, default=100)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    results = {
        f"{shape} {codec.name.lower()}": bench(shape, codec, args.chunk_records, args.batch_records)
        for shape in SHAPES
        for codec in CODECS
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        f"to_arrow vs baselines: {args.chunk_records} records a chunk,"
        f" {args.batch_records} a batch, one core (rows/s in millions, median of 7 loops)"
    )
    head = f"{'':14}{'to_arrow':>10}{'(range)':>12}{'reference':>11}{'floor':>8}{'crc+inflate':>13}"
    print(head + f"{'x reference':>13}{'x floor':>9}{'chunk MiB':>11}")
    for name, r in results.items():
        print(
            f"{name:14}{r['to_arrow rows/s'] / 1e6:10.2f}"
            f"{r['to_arrow rows/s min'] / 1e6:7.2f}-{r['to_arrow rows/s max'] / 1e6:4.2f}"
            f"{r['reference rows/s'] / 1e6:11.2f}"
            f"{r['floor rows/s'] / 1e6:8.2f}{r['crc+inflate rows/s'] / 1e6:13.2f}"
            f"{r['x reference']:13.1f}{r['x floor']:9.1f}{r['MiB']:11.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
