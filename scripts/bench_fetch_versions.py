"""Fetch v17 (topics by id, KIP-516) against Fetch v12 (topics by name): consumer throughput of
one broker, side by side.

```sh
python scripts/bench_fetch_versions.py            # ~1-2 min: 100k x 1 KiB, 5 runs per version
python scripts/bench_fetch_versions.py --records 50000 --runs 3 --json out.json
```

One ``kraft dev`` node (``bench_broker.start_ours``), one topic of one partition filled with
``--records`` records of 1 KiB (confluent-kafka, acks=1, batches of 16 KiB).  Each run reads
the whole partition from offset 0 with a raw client on one connection: requests encoded by the
project's codec, responses decoded by it (records stay bytes, never decoded), the next offset
taken from the batch headers, as ``bench_broker.consume_raw_worker`` does.  Two workloads:

* **16 MiB responses** (``partition_max_bytes`` = ``max_bytes`` = 16 MiB): a few large
  sendfile responses, the broker's bulk path;
* **64 KiB responses**: thousands of small requests, where a per-request cost of the newer
  version (the topic-id lookup, the bigger header) would show.

Runs alternate v12, v17, v17, v12, ... so that drift of the shared machine hits both alike.
Each figure is the median MB/s of its runs with the range; the verdict is the ratio of the
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
from pathlib import Path

from bench_broker import _recv_frame, create_topic, start_ours
from bench_machine import machine_info
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
    offset, nbytes = 0, 0
    t0 = time.perf_counter()
    while offset < count:
        answer = client.request(fetch_request(version, topic_id, offset, max_bytes), version)
        assert isinstance(answer, FetchResponse)
        (topic,) = answer.responses
        (data,) = topic.partitions
        if data.error_code:
            raise RuntimeError(f"Fetch v{version} error {data.error_code} at offset {offset}")
        records = data.records or b""
        assert not isinstance(records, int | str)
        nbytes += len(records)
        offset = next_offset(records, offset)
    return time.perf_counter() - t0, nbytes


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


def measure(bootstrap: str, count: int, runs: int) -> dict[str, dict[int, Spread]]:
    client = RawClient(bootstrap)
    try:
        topic_id = topic_id_of(client)
        out: dict[str, dict[int, Spread]] = {}
        for workload, max_bytes in WORKLOADS.items():
            read_all(client, 17, topic_id, count, max_bytes)  # warm the page cache and paths
            mb_s: dict[int, list[float]] = {v: [] for v in VERSIONS}
            for i in range(runs):
                order = VERSIONS if i % 2 == 0 else VERSIONS[::-1]
                for version in order:
                    seconds, nbytes = read_all(client, version, topic_id, count, max_bytes)
                    mb_s[version].append(nbytes / seconds / 1e6)
            out[workload] = {v: spread(values) for v, values in mb_s.items()}
        return out
    finally:
        client.close()


def render(figures: dict[str, dict[int, Spread]], count: int) -> str:
    lines = [
        f"Fetch v17 vs v12, {count:,} x {RECORD_BYTES} B, one partition, one connection",
        "",
        f"| workload | Fetch v12 MB/s | Fetch v17 MB/s | v17 / v12 | target {1 - TOLERANCE:.2f}-"
        f"{1 + TOLERANCE:.2f} |",
        "|---|---|---|---|---|",
    ]
    for workload, by_version in figures.items():
        ratio = ratio_of_medians(by_version[17].runs, by_version[12].runs)
        ok = "PASS" if abs(ratio - 1) <= TOLERANCE else "MISS"
        lines.append(
            f"| {workload} | {by_version[12].text('.0f')} | {by_version[17].text('.0f')} "
            f"| {fmt(ratio)} | {ok} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    info = machine_info()
    print(json.dumps(info), file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-fetch-versions-") as tmp:
        broker = start_ours(Path(tmp), "ours", use_uvloop=True, extra_env={})
        try:
            create_topic(broker.bootstrap, TOPIC, 1)
            fill(broker.bootstrap, args.records)
            figures = measure(broker.bootstrap, args.records, args.runs)
        finally:
            broker.stop()
    print(render(figures, args.records))
    if args.json:
        report = {
            "machine": info,
            "records": args.records,
            "figures": {
                w: {f"v{v}": s.as_dict() for v, s in by.items()} for w, by in figures.items()
            },
        }
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
