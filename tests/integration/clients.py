"""Real Kafka clients driven the same way by the client compatibility tests.

Each producer helper sends a list of :class:`Msg` with one client and returns what the client
reported; each reader reads partitions from given offsets with one client, without a consumer
group, and returns :class:`Rec` in arrival order.  :func:`assert_same_records` compares two
record lists partition by partition and names the first difference.

Clients: ``confluent-kafka`` (librdkafka 2.x), ``kafka-python`` 3, ``aiokafka`` and Debian's
``kcat`` (librdkafka 2.0.2).  Timeouts are short so that a broker that does not answer fails a
test in seconds rather than hanging it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from integration.node_process import NodeProcess

TIMEOUT_S = 15.0
CLIENT_TIMEOUT_MS = 10_000
BASE_TS_MS = 1_700_000_000_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

Header = tuple[str, bytes | None]
CREATE_TIME, LOG_APPEND_TIME = "CREATE_TIME", "LOG_APPEND_TIME"
TS_TYPES = {0: CREATE_TIME, 1: LOG_APPEND_TIME}  # the batch attribute bit, as kafka-python says
CONFLUENT_TS_TYPES = {
    TIMESTAMP_CREATE_TIME: CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME: LOG_APPEND_TIME,
}


# --- records ------------------------------------------------------------------------------------


def _short(b: bytes | None) -> str:
    if b is None:
        return "None"
    if len(b) <= 40:
        return repr(b)
    return f"{b[:24]!r}...({len(b)} bytes)"


@dataclass(frozen=True)
class Msg:
    """One record to produce."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp: int | None = None


@dataclass(frozen=True)
class Rec:
    """One record as read back.  None in ``timestamp`` (the broker or the client chose it) or
    ``ts_type`` (kcat's ``-f`` cannot show it) is not compared."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int | None
    ts_type: str | None = None  # CREATE_TIME or LOG_APPEND_TIME

    def __repr__(self) -> str:
        headers = ", ".join(f"{k}={_short(v)}" for k, v in self.headers)
        return (
            f"Rec(p={self.partition} o={self.offset} ts={self.timestamp} {self.ts_type} "
            f"key={_short(self.key)} value={_short(self.value)} headers=[{headers}])"
        )


def make_msgs(tag: str, count: int, partitions: int, null_headers: bool = True) -> list[Msg]:
    """Varied records: null and empty keys and values, repeated and null headers, timestamps
    that are explicit and not monotonic.  Text without ``|``, ``,``, ``=`` or newlines, so that
    kcat's ``-f`` output parses unambiguously."""
    out = []
    for i in range(count):
        key: bytes | None = f"k-{tag}-{i}".encode()
        if i % 7 == 3:
            key = None
        elif i % 7 == 4:
            key = b""
        value: bytes | None = (f"v-{tag}-{i}-" + "abc" * (i * 13 % 120)).encode()
        if i % 11 == 5:
            value = None
        elif i % 11 == 6:
            value = b""
        if key is None and value is None:
            key = b"not-both-null"  # kafka-python refuses a record with neither
        headers: list[Header] = [("h1", f"a{i}".encode()), ("empty", b"")]
        if null_headers:
            headers.append(("null", None))
        headers.append(("h1", b"again"))  # a repeated key, order kept
        if i % 5 == 2:
            headers = []
        timestamp = BASE_TS_MS + (i * 7919) % 100_000
        out.append(Msg(i % partitions, key, value, tuple(headers), timestamp))
    return out


def expected(msgs: Iterable[Msg], first_offsets: dict[int, int] | None = None) -> list[Rec]:
    """The records ``msgs`` become when appended in order: dense offsets per partition."""
    next_offset = dict(first_offsets or {})
    out = []
    for m in msgs:
        offset = next_offset.get(m.partition, 0)
        next_offset[m.partition] = offset + 1
        out.append(Rec(m.partition, offset, m.key, m.value, m.headers, m.timestamp, CREATE_TIME))
    return out


def ends_of(records: Iterable[Rec]) -> dict[int, int]:
    """partition -> the offset after its last record."""
    ends: dict[int, int] = {}
    for r in records:
        ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
    return ends


def by_partition(records: Iterable[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {}
    for r in records:
        out.setdefault(r.partition, []).append(r)
    return out


def without_timestamps(records: Iterable[Rec]) -> list[Rec]:
    return [dataclasses.replace(r, timestamp=None) for r in records]


def assert_same_records(want: Sequence[Rec], got: Sequence[Rec], who: str) -> None:
    """Equal per partition, in order; a record whose expected timestamp is None matches any."""
    want_p, got_p = by_partition(want), by_partition(got)
    if sorted(got_p) != sorted(want_p):
        pytest.fail(f"{who}: records in partitions {sorted(got_p)}, expected {sorted(want_p)}")
    for p in sorted(want_p):
        w, g = want_p[p], got_p[p]
        for i, (a, b) in enumerate(zip(w, g, strict=False)):
            if a.timestamp is None:
                b = dataclasses.replace(b, timestamp=None)
            if a.ts_type is None or b.ts_type is None:
                a, b = dataclasses.replace(a, ts_type=None), dataclasses.replace(b, ts_type=None)
            if a != b:
                pytest.fail(
                    f"{who}: partition {p}, record #{i} differs\n  expected {a}\n  got      {b}"
                )
        if len(w) != len(g):
            extra = g[len(w)] if len(g) > len(w) else w[len(g)]
            pytest.fail(
                f"{who}: partition {p}: {len(g)} records, expected {len(w)}; "
                f"first {'extra' if len(g) > len(w) else 'missing'}: {extra}"
            )


# --- confluent-kafka ----------------------------------------------------------------------------


def confluent_conf(node: NodeProcess, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": node.bootstrap,
        "socket.timeout.ms": CLIENT_TIMEOUT_MS,
        "reconnect.backoff.max.ms": 1000,
    }
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    return conf


@dataclass
class Delivery:
    partition: int
    offset: int
    error: KafkaError | None
    timestamp: tuple[int, int]  # (confluent timestamp type, ms)


def produce_confluent(
    node: NodeProcess, topic: str, msgs: Sequence[Msg], **conf: Any
) -> list[Delivery]:
    """Produce in order with one Producer; the delivery reports in produce order."""
    timeouts = {"message_timeout_ms": CLIENT_TIMEOUT_MS, "request_timeout_ms": CLIENT_TIMEOUT_MS}
    producer = Producer(confluent_conf(node, **{**timeouts, **conf}))
    reports: list[Delivery | None] = [None] * len(msgs)

    def reporter(i: int) -> Any:
        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            reports[i] = Delivery(msg.partition(), msg.offset(), err, msg.timestamp())

        return on_delivery

    for i, m in enumerate(msgs):
        kwargs: dict[str, Any] = {"partition": m.partition, "headers": list(m.headers)}
        if m.timestamp is not None:
            kwargs["timestamp"] = m.timestamp
        producer.produce(topic, value=m.value, key=m.key, on_delivery=reporter(i), **kwargs)
        producer.poll(0)
    left = producer.flush(TIMEOUT_S)
    assert left == 0, f"confluent producer: {left} messages not delivered in {TIMEOUT_S}s"
    assert all(r is not None for r in reports)
    return [r for r in reports if r is not None]


def assert_delivered(reports: Sequence[Delivery], want: Sequence[Rec], node: NodeProcess) -> None:
    errors = [r.error for r in reports if r.error is not None]
    assert not errors, f"delivery failed: {errors[:3]}\nnode log:\n{node.log_tail(15)}"
    got = [(r.partition, r.offset) for r in reports]
    assert got == [(r.partition, r.offset) for r in want], "delivery reports' offsets"


def confluent_consumer(node: NodeProcess, **conf: Any) -> Consumer:
    # confluent-kafka insists on a group.id; assign() alone never joins the group, and with
    # auto commit off nothing is committed.
    return Consumer(
        confluent_conf(
            node,
            group_id="assign-only",
            enable_auto_commit=False,
            enable_auto_offset_store=False,
            fetch_wait_max_ms=100,
            **conf,
        )
    )


def watermarks(
    node: NodeProcess, topic: str, partitions: Iterable[int]
) -> dict[int, tuple[int, int]]:
    """partition -> (log start offset, high watermark), by ListOffsets."""
    consumer = confluent_consumer(node)
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S)
            for p in partitions
        }
    finally:
        consumer.close()


def wait_for_high_watermarks(node: NodeProcess, topic: str, ends: dict[int, int]) -> None:
    """acks=0 gets no answer: wait until the broker shows the records appended."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        marks = {p: high for p, (_, high) in watermarks(node, topic, ends).items()}
        if marks == ends or time.monotonic() > deadline:
            assert marks == ends, f"high watermarks {marks}, expected {ends}"
            return
        time.sleep(0.1)


def read_confluent(
    node: NodeProcess,
    topic: str,
    ends: dict[int, int],
    start: dict[int, int] | None = None,
    **conf: Any,
) -> list[Rec]:
    """assign() each partition at its start offset (no group) and read up to ``ends``."""
    start = start or {}
    consumer = confluent_consumer(node, **conf)
    out: list[Rec] = []
    try:
        consumer.assign([TopicPartition(topic, p, start.get(p, 0)) for p in ends])
        position = {p: start.get(p, 0) for p in ends}
        deadline = time.monotonic() + TIMEOUT_S
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                assert msg.error() is None, f"confluent consumer: {msg.error()}"
                ts_type, ts = msg.timestamp()
                out.append(
                    Rec(
                        msg.partition(),
                        msg.offset(),
                        msg.key(),
                        msg.value(),
                        tuple(msg.headers() or ()),
                        ts,
                        CONFLUENT_TS_TYPES[ts_type],
                    )
                )
                position[msg.partition()] = msg.offset() + 1
    finally:
        consumer.close()
    return out


# --- kafka-python -------------------------------------------------------------------------------


def kafka_python_producer(node: NodeProcess, **conf: Any) -> KafkaProducer:
    return KafkaProducer(
        bootstrap_servers=node.bootstrap,
        request_timeout_ms=CLIENT_TIMEOUT_MS,
        max_block_ms=CLIENT_TIMEOUT_MS,
        **conf,
    )


def produce_kafka_python(
    node: NodeProcess, topic: str, msgs: Sequence[Msg], **conf: Any
) -> list[tuple[int, int]]:
    """Produce in order with a KafkaProducer (its defaults: idempotent, acks=all)."""
    producer = kafka_python_producer(node, **conf)
    try:
        futures = [
            producer.send(
                topic,
                value=m.value,
                key=m.key,
                partition=m.partition,
                headers=list(m.headers),
                timestamp_ms=m.timestamp,
            )
            for m in msgs
        ]
        producer.flush(TIMEOUT_S)
        metas = [f.get(TIMEOUT_S) for f in futures]
    finally:
        producer.close(TIMEOUT_S)
    return [(md.partition, md.offset) for md in metas]


def read_kafka_python(
    node: NodeProcess,
    topic: str,
    ends: dict[int, int],
    start: dict[int, int] | None = None,
    **conf: Any,
) -> list[Rec]:
    """KafkaConsumer(group_id=None): assign + seek, read up to ``ends``."""
    start = start or {}
    consumer = KafkaConsumer(
        bootstrap_servers=node.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=CLIENT_TIMEOUT_MS,
        fetch_max_wait_ms=100,
        **conf,
    )
    out: list[Rec] = []
    try:
        tps = {p: KpTopicPartition(topic, p) for p in ends}
        consumer.assign(list(tps.values()))
        for p, tp in tps.items():
            consumer.seek(tp, start.get(p, 0))
        position = {p: start.get(p, 0) for p in ends}
        deadline = time.monotonic() + TIMEOUT_S
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    headers = tuple((k, v) for k, v in r.headers)
                    ts_type = TS_TYPES[r.timestamp_type]
                    out.append(
                        Rec(r.partition, r.offset, r.key, r.value, headers, r.timestamp, ts_type)
                    )
                    position[r.partition] = r.offset + 1
    finally:
        consumer.close()
    return out


# --- aiokafka -----------------------------------------------------------------------------------


async def _aio_produce(
    node: NodeProcess, topic: str, msgs: Sequence[Msg], conf: dict[str, Any]
) -> list[tuple[int, int]]:
    producer = AIOKafkaProducer(
        bootstrap_servers=node.bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS, **conf
    )
    async with asyncio.timeout(TIMEOUT_S):
        await producer.start()
        try:
            futures = [
                await producer.send(
                    topic,
                    value=m.value,
                    key=m.key,
                    partition=m.partition,
                    headers=list(m.headers),
                    timestamp_ms=m.timestamp,
                )
                for m in msgs
            ]
            metas = [await f for f in futures]
        finally:
            await producer.stop()
    return [(md.partition, md.offset) for md in metas]


def produce_aiokafka(
    node: NodeProcess, topic: str, msgs: Sequence[Msg], **conf: Any
) -> list[tuple[int, int]]:
    return asyncio.run(_aio_produce(node, topic, msgs, conf))


async def _aio_read(
    node: NodeProcess, topic: str, ends: dict[int, int], start: dict[int, int], conf: Any
) -> list[Rec]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=node.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=CLIENT_TIMEOUT_MS,
        fetch_max_wait_ms=100,
        **conf,
    )
    out: list[Rec] = []
    async with asyncio.timeout(TIMEOUT_S + 5):
        await consumer.start()
        try:
            tps = {p: AioTopicPartition(topic, p) for p in ends}
            consumer.assign(list(tps.values()))
            for p, tp in tps.items():
                consumer.seek(tp, start.get(p, 0))
            position = {p: start.get(p, 0) for p in ends}
            deadline = time.monotonic() + TIMEOUT_S
            while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for r in records:
                        headers = tuple((k, v) for k, v in r.headers)
                        ts, ts_type = r.timestamp, TS_TYPES[r.timestamp_type]
                        out.append(Rec(r.partition, r.offset, r.key, r.value, headers, ts, ts_type))
                        position[r.partition] = r.offset + 1
        finally:
            await consumer.stop()
    return out


def read_aiokafka(
    node: NodeProcess,
    topic: str,
    ends: dict[int, int],
    start: dict[int, int] | None = None,
    **conf: Any,
) -> list[Rec]:
    """AIOKafkaConsumer without a group: assign + seek, read up to ``ends``."""
    return asyncio.run(_aio_read(node, topic, ends, start or {}, conf))


# --- kcat ---------------------------------------------------------------------------------------

KCAT_FORMAT = "%p|%o|%T|%K|%k|%S|%s|%h\\n"


def kcat(
    node: NodeProcess, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("kcat") or shutil.which("kafkacat")
    assert exe is not None, "kcat is not installed (CI installs the Debian package)"
    result = subprocess.run(
        [exe, "-b", node.bootstrap, "-X", f"socket.timeout.ms={CLIENT_TIMEOUT_MS}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S + 10,
    )
    assert result.returncode == 0, (
        f"kcat {' '.join(args)} exited {result.returncode}:\n{result.stderr}\n"
        f"node log:\n{node.log_tail(15)}"
    )
    return result


def _kcat_bytes(length: str, text: str) -> bytes | None:
    if int(length) < 0:
        return None
    return b"" if int(length) == 0 else text.encode()


def _kcat_headers(text: str) -> tuple[Header, ...]:
    # -Z prints a null header value as NULL; an empty one as nothing.
    if not text:
        return ()
    pairs = (h.split("=", 1) for h in text.split(","))
    return tuple((k, None if v == "NULL" else v.encode()) for k, v in pairs)


def read_kcat(node: NodeProcess, topic: str, partition: int | None = None) -> list[Rec]:
    """``kcat -C -e`` from the beginning of every partition (or one), parsed from ``-f``."""
    args = ["-C", "-t", topic, "-o", "beginning", "-e", "-q", "-Z", "-f", KCAT_FORMAT]
    if partition is not None:
        args += ["-p", str(partition)]
    out = []
    for line in kcat(node, *args).stdout.splitlines():
        p, o, ts, klen, key, vlen, value, headers = line.split("|")
        out.append(
            Rec(
                int(p),
                int(o),
                _kcat_bytes(klen, key),
                _kcat_bytes(vlen, value),
                _kcat_headers(headers),
                int(ts),
            )
        )
    return out


# --- topics and the node ------------------------------------------------------------------------


def create_topic(
    node: NodeProcess, name: str, partitions: int, configs: dict[str, str] | None = None
) -> None:
    """Create a topic with confluent's AdminClient (CreateTopics) and wait for the result."""
    admin = AdminClient(confluent_conf(node))
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1, config=configs or {})], operation_timeout=TIMEOUT_S
    )
    futures[name].result(TIMEOUT_S)


def request_count(node: NodeProcess, api: str) -> float:
    """Requests of ``api`` the broker answered without a top-level error (``GET /metrics``)."""
    with urllib.request.urlopen(node.admin + "/metrics", timeout=TIMEOUT_S) as response:
        text = response.read().decode()
    pattern = re.compile(r'^kafka_requests_total\{(?=[^}]*api="' + api + r'")(?=[^}]*error="NONE")')
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if pattern.match(line))


def log_size(node: NodeProcess) -> int:
    try:
        return node.log_path.stat().st_size
    except OSError:
        return 0


def log_since(node: NodeProcess, offset: int, max_lines: int = 40) -> str:
    """What the node wrote to stderr after ``offset`` (its last ``max_lines`` lines)."""
    try:
        with node.log_path.open("rb") as f:
            f.seek(offset)
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-max_lines:]) or "(nothing)"
