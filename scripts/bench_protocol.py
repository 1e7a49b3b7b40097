"""Micro-benchmarks of the protocol layer, each figure beside its baseline from the same run.

    python scripts/bench_protocol.py [--json]

1. Decode + encode of a Produce request (v9) and a Fetch response (v12) carrying one batch of
   N x 1 KiB records, for N = 10, 100, 1000: the cost must not grow with N (records are
   zero-copy slices; nothing parses them).
2. Batch validation (header parse + CRC32C) against the raw ``crc32c`` call on the same bytes
   (target ratio >= 0.8).
3. Compression and decompression throughput per codec, at our default levels.

Each figure is the median of several timed loops (7; 3 for compression), with the range
(min-max) beside it: never the fastest loop alone.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stats import Spread, seconds_per_call
from crc32c import crc32c

from kafka_protocol.compression import Compression, compress, decompress
from kafka_protocol.messages import FetchResponse, ProduceRequest
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch


def timed(fn: Callable[[], object], *, repeat: int = 7) -> Spread:
    """Seconds per call in each of ``repeat`` timed loops of at least 50 ms."""
    return seconds_per_call(fn, repeat=repeat, min_time_s=0.05)


def us_range(t: Spread) -> str:
    """The range of a timing in microseconds per call: ``min-max``."""
    return f"{t.low * 1e6:.2f}-{t.high * 1e6:.2f}"


def mb_s_range(nbytes: int, t: Spread) -> str:
    """The range of a throughput: the slowest loop's MB/s to the fastest's."""
    return f"{nbytes / t.high / 1e6:.0f}-{nbytes / t.low / 1e6:.0f}"


def payload(n: int, size: int = 1024) -> list[SimpleRecord]:
    """Clickstream-like JSON values of ``size`` bytes: repeated keys, varied values."""
    rng = random.Random(42)
    words = [rng.randbytes(6).hex() for _ in range(500)]
    out = []
    for i in range(n):
        event = {"user": f"u{rng.randrange(10**6)}", "ts": 1_700_000_000_000 + i, "tags": []}
        while len(value := json.dumps(event).encode()) < size:
            event["tags"].append(rng.choice(words))  # type: ignore[attr-defined]
        out.append(SimpleRecord(value=value[:size], key=f"k{i}".encode()))
    return out


def produce_request(batch: bytes) -> ProduceRequest:
    return ProduceRequest(
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="events",
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)],
            )
        ],
    )


def fetch_response(batch: bytes) -> FetchResponse:
    part = FetchResponse.PartitionData(
        partition_index=0, high_watermark=1000, last_stable_offset=1000, records=batch
    )
    return FetchResponse(
        responses=[FetchResponse.FetchableTopicResponse(topic="events", partitions=[part])]
    )


def bench_codecs() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for n in (10, 100, 1000):
        batch = build_batch(payload(n))
        for name, msg, version in (
            ("produce_v9", produce_request(batch), 9),
            ("fetch_v12", fetch_response(batch), 12),
        ):
            encoded = msg.encode(version)
            cls = type(msg)
            t_dec = timed(lambda cls=cls, e=encoded, v=version: cls.decode(e, v))
            t_enc = timed(lambda m=msg, v=version: m.encode_chunks(v))
            rows.append(
                {
                    "message": name,
                    "records": n,
                    "bytes": len(encoded),
                    "decode_us": round(t_dec.median * 1e6, 2),
                    "decode_range_us": us_range(t_dec),
                    "encode_chunks_us": round(t_enc.median * 1e6, 2),
                    "encode_range_us": us_range(t_enc),
                }
            )
    return rows


def bench_validation() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    # 1 MiB (librdkafka's batch.size), 256 and 64 KiB, 16 KiB (the Java producer's default):
    # a fixed ~1 us of Python per batch weighs on the small ones
    for n, size in ((1000, 1024), (250, 1024), (64, 1024), (16, 1024)):
        batch = build_batch(payload(n, size))
        view = memoryview(batch)
        t_crc = timed(lambda v=view: crc32c(v[21:]))
        t_val = timed(lambda v=view: RecordBatch(v).validate())
        rows.append(
            {
                "batch_bytes": len(batch),
                "crc32c_MBps": round(len(batch) / t_crc.median / 1e6),
                "validate_MBps": round(len(batch) / t_val.median / 1e6),
                "validate_range_MBps": mb_s_range(len(batch), t_val),
                "ratio": round(t_crc.median / t_val.median, 3),
            }
        )
    return rows


def bench_compression() -> list[dict[str, object]]:
    raw = b"".join(r.value or b"" for r in payload(1000))
    rows: list[dict[str, object]] = []
    for codec in Compression:
        if codec is Compression.NONE:
            continue
        packed = compress(codec, raw)
        t_c = timed(lambda c=codec: compress(c, raw), repeat=3)
        t_d = timed(lambda c=codec, p=packed: decompress(c, p), repeat=3)
        rows.append(
            {
                "codec": codec.name.lower(),
                "ratio": round(len(raw) / len(packed), 2),
                "compress_MBps": round(len(raw) / t_c.median / 1e6),
                "compress_range_MBps": mb_s_range(len(raw), t_c),
                "decompress_MBps": round(len(raw) / t_d.median / 1e6),
                "decompress_range_MBps": mb_s_range(len(raw), t_d),
            }
        )
    return rows


def table(title: str, rows: list[dict[str, object]]) -> str:
    cols = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    lines = [title, "  ".join(c.rjust(w) for c, w in zip(cols, widths, strict=True))]
    lines += [
        "  ".join(str(r[c]).rjust(w) for c, w in zip(cols, widths, strict=True)) for r in rows
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args()
    results = {
        "codecs": bench_codecs(),
        "validation": bench_validation(),
        "compression": bench_compression(),
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        table("decode/encode per request (us), one batch of N x 1 KiB records", results["codecs"])
    )
    print()
    print(table("batch validation vs raw crc32c (same bytes, same run)", results["validation"]))
    print()
    print(table("compression, 1000 x 1 KiB JSON-ish values", results["compression"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
