#!/usr/bin/env python
"""Capture golden request frames from real Kafka clients into tests/golden/.

For every client (confluent-kafka, kafka-python, aiokafka, kcat) and codec (none, gzip,
snappy, lz4, zstd) this runs the client against tests/golden_responder.py and stores the
first frame of each (api, version) as ``<client>-<api>-v<version>-<codec>.bin`` (the frame
without its 4-byte size prefix), plus ``index.json`` describing each file: api key and
version, client, codec, topic and, for Produce, the records the frame must hold.

    python scripts/capture_golden.py            # all clients and codecs
    python scripts/capture_golden.py --out DIR

Frames carry client timestamps (and Python's gzip mtime), so a new capture differs in bytes
but not in meaning.  tests/unit/test_golden_fixtures.py checks the stored files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from golden_responder import (  # noqa: E402
    CLIENTS,
    CODECS,
    PRODUCE,
    Capture,
    CapturedFrame,
    Message,
    api_name,
    capture,
    client_versions,
    missing_prerequisite,
    produce_blobs,
)

from kafka_protocol.compression import Compression  # noqa: E402
from kafka_protocol.framing import decode_request, encode_request  # noqa: E402
from kafka_protocol.record_batch import iter_batches  # noqa: E402


def _records_in(frame: CapturedFrame, topic: str) -> list[Message]:
    out = []
    for _, blob in produce_blobs([frame], topic):
        for batch in iter_batches(blob):
            batch.validate()
            out += [Message(r.key, r.value, tuple(r.headers)) for r in batch.records()]
    return out


def _entries(cap: Capture, out: Path) -> list[dict[str, object]]:
    entries: list[dict[str, object]] = []
    seen: set[tuple[int, int]] = set()
    sent = 0  # messages in the Produce frames before this one
    for frame in cap.frames:
        header, body = decode_request(frame.frame)
        if b"".join(encode_request(header, body))[4:] != frame.frame:
            raise SystemExit(f"{cap.client} {type(body).__name__}: re-encoding differs")
        records = _records_in(frame, cap.topic) if frame.api_key == PRODUCE else []
        expected = cap.messages[sent : sent + len(records)]
        if records != expected:
            raise SystemExit(f"{cap.client}/{cap.codec}: Produce records {records} != {expected}")
        sent += len(records)
        if (frame.api_key, frame.api_version) in seen:
            continue
        seen.add((frame.api_key, frame.api_version))
        api = api_name(frame.api_key)
        name = f"{cap.client}-{api}-v{frame.api_version}-{cap.codec}.bin"
        (out / name).write_bytes(frame.frame)
        entry: dict[str, object] = {
            "file": name,
            "client": cap.client,
            "codec": cap.codec,
            "api": api,
            "api_key": frame.api_key,
            "api_version": frame.api_version,
            "correlation_id": frame.correlation_id,
            "client_id": header.client_id,
            "topic": cap.topic,
        }
        if frame.api_key == PRODUCE:
            entry["compression"] = Compression.from_name(cap.codec).name.lower()
            entry["records"] = [m.to_json() for m in expected]
        entries.append(entry)
    if sent != len(cap.messages):
        raise SystemExit(f"{cap.client}/{cap.codec}: {sent} of {len(cap.messages)} records seen")
    return entries


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "golden")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    missing = [
        f"{client}/{codec}: {reason}"
        for client in CLIENTS
        for codec in CODECS
        if (reason := missing_prerequisite(client, codec))
    ]
    if missing:
        print("cannot capture:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 1
    entries = []
    for client in CLIENTS:
        for codec in CODECS:
            cap = capture(client, codec)
            new = _entries(cap, out)
            entries += new
            print(f"{client:16} {codec:7} " + " ".join(str(e["file"]) for e in new))
    keep = {e["file"] for e in entries}
    for stale in out.glob("*.bin"):
        if stale.name not in keep:
            stale.unlink()
    index = {
        "generator": "scripts/capture_golden.py",
        "format": "each .bin is one request frame without its 4-byte size prefix",
        "clients": client_versions(),
        "frames": sorted(entries, key=lambda e: str(e["file"])),
    }
    (out / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    print(f"{len(entries)} frames in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
