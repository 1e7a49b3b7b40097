"""Client quotas: a producer throttled by ``producer_byte_rate`` beside one without a quota,
side by side, and the unthrottled one alone for comparison.

```sh
python scripts/bench_quotas.py                 # ~1 min: 3 runs of 2 x 8 s
python scripts/bench_quotas.py --runs 5 --quota-kib 512 --windows 11 --seconds 30
```

One ``kraft dev`` node (``bench_broker.start_ours``) with ``quota.window.num`` = ``--windows``
(default 2: Kafka's 11 lets a client burst 10 s of its quota at first, and again whenever the
sample holding that burst expires, so short measurements of it swing; see README "Client
quotas").  A ``producer_byte_rate`` quota on client id ``noisy`` is set through the REST API
(``POST /v1/quotas``).  Each run: ``quiet`` (no quota) produces alone for ``--seconds``, then
``noisy`` and ``quiet`` produce side by side for as long; each producer (confluent-kafka,
acks=all, 1 KiB values, batches of 16 KiB) sends as fast as it is let.  A rate is the bytes
acknowledged between ``--windows`` seconds after the start (past the first burst) and the end.
Figures: median of the runs (range).  Targets: ``noisy`` within 20 % of its quota; ``quiet``
beside it at least half its rate alone (a throttled client is muted, so it costs the broker
little; on 2 shared cores the two producers' own CPU share is most of the difference).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench_broker import create_topic, start_ours
from bench_machine import machine_info
from bench_stats import Spread, spread
from confluent_kafka import Producer

TOPIC = "quota-bench"
VALUE = b"q" * 1024


def produce_for(bootstrap: str, client_id: str, seconds: float, skip_s: float) -> float:
    """Bytes/s acknowledged between ``skip_s`` and ``seconds`` after the start."""
    acked: list[tuple[float, int]] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "batch.size": 16384,
            "queue.buffering.max.messages": 64,
            "acks": "all",
        }
    )

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))

    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            producer.produce(TOPIC, value=VALUE, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.005)
        producer.poll(0)
    producer.flush(60)
    begin, end = start + skip_s, start + seconds
    return sum(n for t, n in acked if begin <= t < end) / (end - begin)


def side_by_side(bootstrap: str, seconds: float, skip_s: float) -> dict[str, float]:
    rates: dict[str, float] = {}

    def run(client_id: str) -> None:
        rates[client_id] = produce_for(bootstrap, client_id, seconds, skip_s)

    threads = [threading.Thread(target=run, args=(c,)) for c in ("noisy", "quiet")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rates


def set_quota(admin_url: str, bytes_per_s: float) -> None:
    body = {"entity": {"client-id": "noisy"}, "set": {"producer_byte_rate": bytes_per_s}}
    request = urllib.request.Request(
        admin_url + "/v1/quotas",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--quota-kib", type=float, default=256.0)
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    quota = args.quota_kib * 1024
    skip_s = float(args.windows)
    with tempfile.TemporaryDirectory() as tmp:
        broker = start_ours(
            Path(tmp), "quotas", True, {}, overrides=(f"quota.window.num={args.windows}",)
        )
        try:
            assert broker.admin_url is not None
            create_topic(broker.bootstrap, TOPIC, 1)
            set_quota(broker.admin_url, quota)
            alone: list[float] = []
            noisy: list[float] = []
            quiet: list[float] = []
            for _ in range(args.runs):
                alone.append(produce_for(broker.bootstrap, "quiet", args.seconds, skip_s))
                rates = side_by_side(broker.bootstrap, args.seconds, skip_s)
                noisy.append(rates["noisy"])
                quiet.append(rates["quiet"])
        finally:
            broker.proc.kill()
    figures = {"quiet alone": spread(alone), "quiet beside noisy": spread(quiet)}
    throttled = spread(noisy)
    print(render(figures, throttled, quota, args))
    if args.json:
        report = {k: v.as_dict() for k, v in {**figures, "noisy": throttled}.items()}
        args.json.write_text(json.dumps({"machine": machine_info(), **report}, indent=2))
    within = abs(throttled.median / quota - 1) <= 0.2
    return 0 if within else 1


def render(figures: dict[str, Spread], noisy: Spread, quota: float, args: Any) -> str:
    kib = [x / 1024 for x in noisy.runs]
    ratio = noisy.median / quota
    lines = [
        f"producer_byte_rate {args.quota_kib:.0f} KiB/s on client id noisy,"
        f" quota.window.num={args.windows}, {args.runs} runs of {args.seconds:.0f} s",
        "",
        "| producer | rate | vs quota / alone |",
        "|---|---|---|",
        f"| noisy (throttled), beside quiet | {spread(kib).text('.0f', 'KiB/s')} |"
        f" {ratio:.2f} x quota ({'PASS' if abs(ratio - 1) <= 0.2 else 'MISS'} within 20 %) |",
    ]
    alone = figures["quiet alone"]
    for name, figure in figures.items():
        mib = spread(x / 2**20 for x in figure.runs)
        lines.append(
            f"| {name} | {mib.text('.1f', 'MiB/s')} | {figure.median / alone.median:.2f} x alone |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
