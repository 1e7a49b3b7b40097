"""Fetch v17 (topics by id, KIP-516) against Fetch v12 (topics by name): consumer throughput of
one broker, side by side.

```sh
python scripts/bench_fetch_versions.py    # ~1.5 min: 100k x 1 KiB, 7 runs of 2 s per version
python scripts/bench_fetch_versions.py --records 50000 --runs 3 --seconds 1 --json out.json
```

One ``kraft dev`` node (``bench_broker.start_ours``), one topic of one partition filled with
``--records`` records of 1 KiB (confluent-kafka, acks=1, batches of 16 KiB).  A raw client on
one connection reads the partition from offset 0, again and again: requests encoded by the
project's codec, responses decoded by it (records stay bytes, never decoded), the next offset
taken from the batch headers, as ``bench_broker.consume_raw_worker`` does.  Two workloads:

* **16 MiB responses** (``partition_max_bytes`` = ``max_bytes`` = 16 MiB): a few large
  sendfile responses, the broker's bulk path;
* **64 KiB responses**: thousands of small requests, where a per-request cost of the newer
  version (the topic-id lookup, the bigger header) would show.

Within each run the versions take turns request by request: every offset is fetched at v12
and at v17 (the order reversed at every step), so both serve the very same responses, until
each has spent ``--seconds`` in round trips; load from the rest of the shared machine falls on
both alike.  A version's MB/s is its bytes over
its round-trip time.  Each figure is the median of its runs with the range: MB/s, and the
broker's CPU seconds per GB served (all its threads, ``bench_machine.threads_cpu_s``, read
around one whole pass per version after each run).  The verdict is the ratio of the MB/s
medians (v17 / v12), which must lie within 5 % of 1 (see bench_README.md).
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench_broker import _recv_frame, create_topic, start_ours
from bench_machine import machine_info, threads_cpu_s
from bench_stats import Spread, fmt, ratio_of_medians, spread
from confluent_kafka import Producer

from kafka_protocol.framing import decode_response, encode_request
from kafka_protocol.messages import (
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    RequestHeader,
)
from kafka_protocol.types import TopicName

TOPIC = "fetch-versions"
RECORD_BYTES = 1024
BATCH_BYTES = 16 << 10  # batches of ~15 records: a 64 KiB response holds several
WORKLOADS = {"16 MiB responses": 16 << 20, "64 KiB responses": 64 << 10}
VERSIONS = (12, 17)
TOLERANCE = 0.05


class RawClient:
    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0

    def request(self, body: FetchRequest | MetadataRequest, version: int) -> object:
        self.correlation_id += 1
        header = RequestHeader(
            request_api_key=body.API_KEY,
            request_api_version=version,
            correlation_id=self.correlation_id,
            client_id="bench",
        )
        self.sock.sendall(b"".join(bytes(c) for c in encode_request(header, body)))
        frame = _recv_frame(self.sock)
        assert body.API_KEY is not None
        correlation_id, response = decode_response(body.API_KEY, version, memoryview(frame)[4:])
        assert correlation_id == self.correlation_id
        return response

    def close(self) -> None:
        self.sock.close()


def topic_id_of(client: RawClient) -> uuid.UUID:
    answer = client.request(
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TopicName(TOPIC))]), 12
    )
    assert isinstance(answer, MetadataResponse)
    (topic,) = answer.topics
    assert topic.error_code == 0, topic
    return topic.topic_id


def fetch_request(version: int, topic_id: uuid.UUID, offset: int, max_bytes: int) -> FetchRequest:
    by_id = version >= 13
    partition = FetchRequest.FetchPartition(
        partition=0, fetch_offset=offset, partition_max_bytes=max_bytes
    )
    return FetchRequest(
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=max_bytes,
        topics=[
            FetchRequest.FetchTopic(
                topic=TopicName("" if by_id else TOPIC),
                topic_id=topic_id if by_id else uuid.UUID(int=0),
                partitions=[partition],
            )
        ],
    )


def next_offset(records: bytes | memoryview, offset: int) -> int:
    """The offset after the last whole batch (a truncated tail is fetched again)."""
    view, pos = memoryview(records), 0
    while pos + 61 <= len(view):
        base, length = struct.unpack_from(">qi", view, pos)
        if pos + 12 + length > len(view):
            break
        (last_delta,) = struct.unpack_from(">i", view, pos + 23)
        offset = max(offset, base + last_delta + 1)
        pos += 12 + length
    return offset


def read_all(
    client: RawClient, version: int, topic_id: uuid.UUID, count: int, max_bytes: int
) -> tuple[float, int]:
    """(seconds, bytes) to read offsets [0, count) at ``version``."""
    t0 = time.perf_counter()
    totals = read_alternating(client, (version,), topic_id, count, max_bytes)
    return time.perf_counter() - t0, totals[version].nbytes


@dataclass
class Totals:
    seconds: float = 0.0  # round trips of this version's requests
    nbytes: int = 0


def read_alternating(
    client: RawClient,
    versions: tuple[int, ...],
    topic_id: uuid.UUID,
    count: int,
    max_bytes: int,
) -> dict[int, Totals]:
    """Read offsets [0, count) once per version, request by request: each offset is fetched
    at every version in turn (the order reversed at every step), so both serve the very same
    responses; each version's round trips and bytes."""
    totals = {v: Totals() for v in versions}
    offset, step = 0, 0
    while offset < count:
        order = versions if step % 2 == 0 else versions[::-1]
        step += 1
        ends = set()
        for version in order:
            t0 = time.perf_counter()
            answer = client.request(fetch_request(version, topic_id, offset, max_bytes), version)
            seconds = time.perf_counter() - t0
            assert isinstance(answer, FetchResponse)
            (topic,) = answer.responses
            (data,) = topic.partitions
            if data.error_code:
                raise RuntimeError(f"Fetch v{version} error {data.error_code} at {offset}")
            records = data.records or b""
            assert not isinstance(records, int | str)
            t = totals[version]
            t.seconds += seconds
            t.nbytes += len(records)
            ends.add(next_offset(records, offset))
        assert len(ends) == 1, f"the versions answered differently at offset {offset}: {ends}"
        offset = ends.pop()
    return totals


def fill(bootstrap: str, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": BATCH_BYTES}
    )
    value = b"x" * RECORD_BYTES
    for _ in range(count):
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("records not delivered")


@dataclass
class Figures:
    mb_s: dict[int, Spread]  # throughput of each run, by version
    cpu_s_per_gb: dict[int, Spread]  # the broker's CPU time per GB served, by version


def measure(bootstrap: str, pid: int, count: int, runs: int, run_s: float) -> dict[str, Figures]:
    """Request by request the two versions take turns on one connection (each offset fetched
    at both) until each has spent ``run_s`` in round trips: load from the rest of the shared
    machine falls on both alike."""
    client = RawClient(bootstrap)
    try:
        topic_id = topic_id_of(client)
        out: dict[str, Figures] = {}
        for workload, max_bytes in WORKLOADS.items():
            read_all(client, 17, topic_id, count, max_bytes)  # warm the page cache and paths
            mb_s: dict[int, list[float]] = {v: [] for v in VERSIONS}
            cpu_gb: dict[int, list[float]] = {v: [] for v in VERSIONS}
            for i in range(runs):
                run = {v: Totals() for v in VERSIONS}
                while min(t.seconds for t in run.values()) < run_s:
                    order = VERSIONS if i % 2 == 0 else VERSIONS[::-1]
                    one = read_alternating(client, order, topic_id, count, max_bytes)
                    for v, t in one.items():
                        run[v].seconds += t.seconds
                        run[v].nbytes += t.nbytes
                for v, t in run.items():
                    mb_s[v].append(t.nbytes / t.seconds / 1e6)
                # the broker's CPU: one whole pass per version (alternating), read around it
                for v in order:
                    cpu0 = threads_cpu_s(pid)
                    _, nbytes = read_all(client, v, topic_id, count, max_bytes)
                    cpu_gb[v].append((threads_cpu_s(pid) - cpu0) / (nbytes / 1e9))
            out[workload] = Figures(
                {v: spread(x) for v, x in mb_s.items()},
                {v: spread(x) for v, x in cpu_gb.items()},
            )
        return out
    finally:
        client.close()


def render(figures: dict[str, Figures], count: int) -> str:
    lines = [
        f"Fetch v17 vs v12, {count:,} x {RECORD_BYTES} B, one partition, one connection",
        "",
        "| workload | Fetch v12 MB/s | Fetch v17 MB/s | v17 / v12 | broker CPU-s/GB v12 "
        f"| v17 | target v17/v12 {1 - TOLERANCE:.2f}-{1 + TOLERANCE:.2f} |",
        "|---|---|---|---|---|---|---|",
    ]
    for workload, f in figures.items():
        ratio = ratio_of_medians(f.mb_s[17].runs, f.mb_s[12].runs)
        ok = "PASS" if abs(ratio - 1) <= TOLERANCE else "MISS"
        paired = [b / a for a, b in zip(f.mb_s[12].runs, f.mb_s[17].runs, strict=True)]
        lines.append(
            f"| {workload} | {f.mb_s[12].text('.0f')} | {f.mb_s[17].text('.0f')} "
            f"| {fmt(ratio)} (per run {min(paired):.2f}-{max(paired):.2f}) "
            f"| {f.cpu_s_per_gb[12].text('.2f')} "
            f"| {f.cpu_s_per_gb[17].text('.2f')} | {ok} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=2.0, help="of reading per run")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    info = machine_info()
    print(json.dumps(info), file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-fetch-versions-") as tmp:
        broker = start_ours(Path(tmp), "ours", use_uvloop=True, extra_env={})
        try:
            create_topic(broker.bootstrap, TOPIC, 1)
            fill(broker.bootstrap, args.records)
            figures = measure(broker.bootstrap, broker.pid, args.records, args.runs, args.seconds)
        finally:
            broker.stop()
    print(render(figures, args.records))
    if args.json:
        report = {
            "machine": info,
            "records": args.records,
            "figures": {
                w: {
                    f"v{v}": {
                        "mb_s": f.mb_s[v].as_dict(),
                        "broker_cpu_s_per_gb": f.cpu_s_per_gb[v].as_dict(),
                    }
                    for v in VERSIONS
                }
                for w, f in figures.items()
            },
        }
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
