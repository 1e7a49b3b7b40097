"""TLS benchmark: produce and consume 1 KiB records over SSL and SASL_SSL vs PLAINTEXT.

    python scripts/bench_tls.py [--count N] [--repeat R] [--json PATH]

Three broker processes run at once (one listener each, so that Metadata advertises the port
the client came in on): the project's broker (``broker.broker.Broker``, file storage, one
partition per topic, uvloop when installed) behind a PLAINTEXT, an SSL and a SASL_SSL (PLAIN)
listener (a self-signed certificate made with ``cryptography``, TLS 1.3, no client
authentication).  Each repeat produces ``--count`` x 1 KiB records (confluent-kafka, acks=1,
``linger.ms=10``, no compression) to a fresh topic on each broker, then consumes them back,
the order of the brokers alternating between repeats; every client runs in its own
spawned process.  Figures: MB/s (10^6 payload bytes) per phase, the median of the repeats
with the range (min-max), the SSL/PLAINTEXT and SASL_SSL/PLAINTEXT ratios of the medians, and
the broker's CPU-seconds per GB (from /proc/PID/stat: 10 ms clock ticks, coarse for short
phases), less sensitive than MB/s to a shared 2-core machine where the client competes with
the broker.  Issue 17's targets: produce >= 0.6x, consume >= 0.4x (over TLS a fetch cannot
use ``sendfile``: the broker reads the segment with ``pread`` and encrypts it, which is what
the consume ratio measures).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import ipaddress
import json
import multiprocessing as mp
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

SIZE = 1024
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
SASL_USER, SASL_PASSWORD = "bench", "bench-secret"  # PLAIN on SASL_SSL
PRODUCER = {
    "linger.ms": 10,
    "batch.size": 1_000_000,
    "compression.type": "none",
    "enable.idempotence": False,
    "acks": "1",
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 2_000_000,
    "delivery.report.only.error": True,
}
CONSUMER = {
    "enable.auto.commit": False,
    "enable.partition.eof": False,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "queued.min.messages": 10_000_000,
    "queued.max.messages.kbytes": 2_000_000,
}


# --- the broker process ---------------------------------------------------------------------


def make_certificate(directory: Path) -> Path:
    """A self-signed certificate for 127.0.0.1 (key and certificate in one PEM file)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench-tls")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = directory / "bench-tls.pem"
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.write_bytes(key_pem + cert.public_bytes(serialization.Encoding.PEM))
    return path


async def serve(protocol: str, log_dir: Path, cert: Path, topics: list[str]) -> None:
    from broker.broker import Broker, BrokerConfig
    from broker.security.session import ListenerSecurity, SecurityProtocol
    from broker.server import KafkaListener
    from broker.storage import FileStorage
    from kafka_protocol.metadata import PartitionRecord, TopicRecord
    from kafka_protocol.sasl import PlainServer
    from kafka_protocol.types import BrokerId
    from metadata_log.delta import MetadataDelta
    from metadata_log.image import ClusterImage

    security = ListenerSecurity()
    if protocol != "PLAINTEXT":
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert)
        security = ListenerSecurity(
            protocol,
            SecurityProtocol[protocol],
            ssl_context=context,
            sasl_mechanisms=("PLAIN",),
            sasl_servers={"PLAIN": lambda: PlainServer({SASL_USER: SASL_PASSWORD}.get)},
        )
    with socket.socket() as probe:  # the port to advertise, known before the broker exists
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = BrokerConfig(1, "127.0.0.1", 0, "127.0.0.1", port, log_dir, auto_topic_creation=False)
    broker = Broker(config, FileStorage(), _Nothing(), ClusterImage.EMPTY, "bench")  # type: ignore[arg-type]
    records: list[Any] = []
    for topic in topics:
        topic_id = uuid.uuid4()
        one = [BrokerId(1)]
        records += [
            TopicRecord(name=topic, topic_id=topic_id),
            PartitionRecord(
                partition_id=0,
                topic_id=topic_id,
                replicas=one,
                isr=one,
                leader=BrokerId(1),
                leader_epoch=0,
                partition_epoch=0,
            ),
        ]
    delta = MetadataDelta(broker.image).replay_all(records)
    broker.on_metadata(delta, delta.apply())
    listener = KafkaListener(broker.dispatcher, "127.0.0.1", port, security=security)
    print(f"READY port={listener.port}", flush=True)
    await asyncio.Event().wait()


class _Nothing:
    """No controller: the broker here only produces and fetches on partitions it leads."""


def serve_main(args: argparse.Namespace) -> None:
    coroutine = serve(args.serve, Path(args.log_dir), Path(args.cert), args.topics.split(","))
    try:
        import uvloop
    except ImportError:
        asyncio.run(coroutine)
    else:
        uvloop.run(coroutine)


# --- clients (each in its own spawned process) ----------------------------------------------


def client_config(protocol: str, port: int, cert: str) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{port}"}
    if protocol != "PLAINTEXT":
        config |= {"security.protocol": protocol, "ssl.ca.location": cert}
    if protocol == "SASL_SSL":
        config |= {"sasl.mechanism": "PLAIN", "sasl.username": SASL_USER}
        config |= {"sasl.password": SASL_PASSWORD}
    return config


def produce_worker(conn: Connection, config: dict[str, Any], topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({**PRODUCER, **config})
    producer.list_topics(topic, timeout=10)
    value = os.urandom(SIZE)
    t0 = time.perf_counter()
    for _ in range(count):
        try:
            producer.produce(topic, value)
        except BufferError:
            producer.poll(0.005)
            producer.produce(topic, value)
    left = producer.flush(120)
    conn.send({"wall_s": time.perf_counter() - t0, "left": left})


def consume_worker(conn: Connection, config: dict[str, Any], topic: str, count: int) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({**CONSUMER, **config, "group.id": f"bench-{uuid.uuid4().hex[:8]}"})
    consumer.list_topics(topic, timeout=10)
    t0 = time.perf_counter()
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = nbytes = 0
    deadline = time.monotonic() + 120
    while got < count and time.monotonic() < deadline:
        msgs = consumer.consume(min(10_000, count - got), 0.5)
        got += len(msgs)
        nbytes += sum(len(m) for m in msgs)
    conn.send({"wall_s": time.perf_counter() - t0, "left": count - got})
    consumer.close()


def run_client(target: Any, *args: Any) -> float:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=target, args=(child, *args))
    proc.start()
    result = parent.recv()
    proc.join(30)
    if result["left"]:
        raise RuntimeError(f"{target.__name__}: {result['left']} records missing")
    return float(result["wall_s"])


# --- the run --------------------------------------------------------------------------------


def start_broker(protocol: str, tmp: Path, cert: Path, topics: list[str]) -> tuple[Any, int]:
    log_dir = tmp / protocol
    log_dir.mkdir()
    proc = subprocess.Popen(
        [
            *(sys.executable, __file__, "--serve", protocol, "--log-dir", str(log_dir)),
            *("--cert", str(cert), "--topics", ",".join(topics)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY port="):
        proc.kill()
        raise RuntimeError(f"{protocol} broker did not start: {line!r}")
    return proc, int(line.split("=")[1])


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=None)
    parser.add_argument("--serve", choices=PROTOCOLS, help=argparse.SUPPRESS)
    parser.add_argument("--log-dir", help=argparse.SUPPRESS)
    parser.add_argument("--cert", help=argparse.SUPPRESS)
    parser.add_argument("--topics", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_main(args)
        return
    topics = [f"bench-{r}" for r in range(args.repeat)]
    mb = args.count * SIZE / 1e6
    results: dict[str, dict[str, list[float]]] = {
        p: {"produce": [], "consume": [], "produce_cpu": [], "consume_cpu": []} for p in PROTOCOLS
    }
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp_name:
        tmp = Path(tmp_name)
        cert = make_certificate(tmp)
        brokers = {p: start_broker(p, tmp, cert, topics) for p in PROTOCOLS}
        try:
            for repeat, topic in enumerate(topics):
                order = PROTOCOLS if repeat % 2 == 0 else PROTOCOLS[::-1]
                for protocol in order:
                    config = client_config(protocol, brokers[protocol][1], str(cert))
                    pid = brokers[protocol][0].pid
                    for phase, worker in (("produce", produce_worker), ("consume", consume_worker)):
                        cpu0 = cpu_s(pid)
                        wall = run_client(worker, config, topic, args.count)
                        results[protocol][phase].append(mb / wall)
                        results[protocol][f"{phase}_cpu"].append((cpu_s(pid) - cpu0) / mb * 1e3)
                    r = results[protocol]
                    print(
                        f"repeat {repeat} {protocol:9s} produce {r['produce'][-1]:7.1f} MB/s"
                        f" ({r['produce_cpu'][-1]:5.2f} broker CPU-s/GB)  consume"
                        f" {r['consume'][-1]:7.1f} MB/s ({r['consume_cpu'][-1]:5.2f} CPU-s/GB)",
                        flush=True,
                    )
        finally:
            for proc, _ in brokers.values():
                proc.kill()
                proc.wait()
    summary: dict[str, Any] = {"count": args.count, "size": SIZE, "repeat": args.repeat}
    targets = {"produce": 0.6, "consume": 0.4}
    print(f"\n{args.count} x {SIZE} B, median of {args.repeat} (range), MB/s")
    for phase, target in targets.items():
        plain = spread(results["PLAINTEXT"][phase])
        cpu = {p: spread(results[p][f"{phase}_cpu"]) for p in PROTOCOLS}
        summary[phase] = {"PLAINTEXT": plain, "target": target, "broker_cpu_s_per_gb": cpu}
        line = (
            f"{phase:8s} PLAINTEXT {plain['median']:6.1f} ({plain['min']:.1f}-{plain['max']:.1f})"
        )
        for protocol in PROTOCOLS[1:]:
            secure = spread(results[protocol][phase])
            ratio = secure["median"] / plain["median"]
            summary[phase][protocol] = secure | {"ratio": ratio}
            line += (
                f"  {protocol} {secure['median']:6.1f} ({secure['min']:.1f}-{secure['max']:.1f})"
                f" {ratio:.2f}x ({'met' if ratio >= target else 'NOT met'})"
            )
        print(line + f"  [target >= {target}x]")
        print(
            f"{'':8s} broker CPU-s/GB "
            + "  ".join(
                f"{p} {c['median']:.2f} ({c['min']:.2f}-{c['max']:.2f})" for p, c in cpu.items()
            )
        )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
