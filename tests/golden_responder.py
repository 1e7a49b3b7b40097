"""A tiny Kafka responder for capturing real clients' request frames ("golden frames").

It listens on 127.0.0.1 (ephemeral port), records every raw request frame it receives, and
answers just enough for a producer to get to its Produce requests:

- ApiVersions: the ranges in :data:`API_RANGES`; a version above ours is answered as v0 with
  UNSUPPORTED_VERSION and the ranges (the client then retries lower, KIP-511);
- Metadata: one broker (the responder itself, also the controller), every asked-for topic with
  one partition led by it, topic id zero;
- InitProducerId: producer id 1000, epoch 0;
- Produce: success, base offsets counting up per partition (no answer when ``acks == 0``);
- FindCoordinator: this node (no producer here asks, but librdkafka wants it listed).

Anything else closes the connection (and is recorded in :attr:`GoldenResponder.errors`).

The client drivers (:func:`run_client`) make each real client produce :func:`messages_for`
over a real socket.  Used by ``tests/integration/test_golden_frames.py`` and
``scripts/capture_golden.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kafka_protocol._codec import Buffer, Request, Response
from kafka_protocol.framing import (
    FrameReader,
    api_classes,
    decode_request,
    encode_response,
    peek_request,
)
from kafka_protocol.messages import (
    ApiVersionsResponse,
    FindCoordinatorResponse,
    InitProducerIdResponse,
    MetadataResponse,
    ProduceResponse,
)
from kafka_protocol.record_batch import iter_batches

API_VERSIONS, METADATA, PRODUCE, INIT_PRODUCER_ID, FIND_COORDINATOR = 18, 3, 0, 22, 10
FETCH, LIST_OFFSETS = 1, 2
UNSUPPORTED_VERSION = 35

#: Advertised ranges.  librdkafka derives features from them: MsgVer2 needs Produce >= 3 and
#: Fetch >= 4, ZSTD Produce >= 7 and Fetch >= 10, and LZ4 needs FindCoordinator v0 to be
#: listed (its proxy for "broker >= 0.8.2"); without it librdkafka silently sends lz4 batches
#: uncompressed.  Fetch and ListOffsets are advertised but never asked for by a producer.
API_RANGES: dict[int, tuple[int, int]] = {
    PRODUCE: (0, 11),
    FETCH: (4, 12),
    LIST_OFFSETS: (1, 7),
    METADATA: (0, 12),
    FIND_COORDINATOR: (0, 4),
    API_VERSIONS: (0, 4),
    INIT_PRODUCER_ID: (0, 4),
}
PRODUCER_ID = 1000
NODE_ID = 1
CLUSTER_ID = "golden-frames-cluster"

CLIENTS = ("confluent_kafka", "kafka_python", "aiokafka", "kcat")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True, slots=True)
class CapturedFrame:
    """One request frame as received (without its 4-byte size prefix)."""

    connection: int
    api_key: int
    api_version: int
    correlation_id: int
    frame: bytes


class UnansweredRequestError(Exception):
    pass


class GoldenResponder:
    """Threaded responder; use as a context manager (``with GoldenResponder() as r: r.port``)."""

    def __init__(
        self, host: str = "127.0.0.1", api_ranges: dict[int, tuple[int, int]] = API_RANGES
    ):
        self.host = host
        self.api_ranges = dict(api_ranges)
        self.frames: list[CapturedFrame] = []
        self.errors: list[str] = []
        self.topics: dict[str, int] = {}  # topic -> next offset of partition 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server((host, 0))
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name="golden-accept", daemon=True
        )

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> GoldenResponder:
        self._accept_thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._accept_thread.is_alive():
            self._accept_thread.join(timeout=5)
        self._listener.close()
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        for t in threads:
            t.join(timeout=5)

    def __enter__(self) -> GoldenResponder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            n += 1
            t = threading.Thread(
                target=self._serve, args=(sock, n), name=f"golden-conn-{n}", daemon=True
            )
            with self._lock:
                self._conns.append(sock)
                self._threads.append(t)
            t.start()

    def _serve(self, sock: socket.socket, conn: int) -> None:
        reader = FrameReader()
        with sock:
            while not self._stop.is_set():
                try:
                    data = sock.recv(1 << 16)
                except OSError:
                    return
                if not data:
                    return
                reader.feed(data)
                while (frame := reader.next_frame()) is not None:
                    try:
                        out = self._record_and_answer(conn, frame)
                    except Exception as exc:
                        with self._lock:
                            self.errors.append(f"connection {conn}: {exc!r}")
                        return
                    if out is not None:
                        try:
                            sock.sendall(b"".join(out))
                        except OSError:
                            return

    def _record_and_answer(self, conn: int, frame: bytes) -> list[Buffer] | None:
        prefix = peek_request(frame)
        with self._lock:
            self.frames.append(
                CapturedFrame(
                    conn, prefix.api_key, prefix.api_version, prefix.correlation_id, frame
                )
            )
        return self._answer(frame)

    # --- answers ----------------------------------------------------------------------------

    def _api_versions(self, error_code: int = 0) -> ApiVersionsResponse:
        return ApiVersionsResponse(
            error_code=error_code,
            api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(self.api_ranges.items())
            ],
        )

    def _answer(self, frame: bytes) -> list[Buffer] | None:
        prefix = peek_request(frame)
        key, version, corr = prefix.api_key, prefix.api_version, prefix.correlation_id
        if key == API_VERSIONS and version > self.api_ranges[API_VERSIONS][1]:
            return encode_response(0, corr, self._api_versions(UNSUPPORTED_VERSION))
        _, body = decode_request(frame)
        handler = self._handlers().get(key)
        if handler is None:
            raise UnansweredRequestError(f"no answer for {type(body).__name__} v{version}")
        response = handler(version, body)
        if response is None:
            return None
        return encode_response(version, corr, response)

    def _handlers(self) -> dict[int, Callable[[int, Any], Response | None]]:
        return {
            API_VERSIONS: lambda _v, _b: self._api_versions(),
            METADATA: self._metadata,
            INIT_PRODUCER_ID: lambda _v, _b: InitProducerIdResponse(
                producer_id=PRODUCER_ID, producer_epoch=0
            ),
            PRODUCE: self._produce,
            FIND_COORDINATOR: self._find_coordinator,
        }

    def _find_coordinator(self, version: int, body: Any) -> FindCoordinatorResponse:
        """This node coordinates everything (v0-3: one key; v4+: a list of keys)."""
        keys = body.coordinator_keys if version >= 4 else [body.key]
        return FindCoordinatorResponse(
            error_message=None,
            node_id=NODE_ID,
            host=self.host,
            port=self.port,
            coordinators=[
                FindCoordinatorResponse.Coordinator(
                    key=k, node_id=NODE_ID, host=self.host, port=self.port, error_message=None
                )
                for k in keys
            ],
        )

    def _metadata(self, version: int, body: Any) -> MetadataResponse:
        with self._lock:
            # Null topics means all; so does an empty list in v0, which has no null array.
            if body.topics is None or (version == 0 and not body.topics):
                names = list(self.topics)
            else:
                names = [t.name for t in body.topics if t.name is not None]
                for n in names:
                    self.topics.setdefault(n, 0)
        return MetadataResponse(
            brokers=[
                MetadataResponse.MetadataResponseBroker(
                    node_id=NODE_ID, host=self.host, port=self.port
                )
            ],
            cluster_id=CLUSTER_ID,
            controller_id=NODE_ID,
            topics=[
                MetadataResponse.MetadataResponseTopic(
                    name=n,
                    partitions=[
                        MetadataResponse.MetadataResponsePartition(
                            partition_index=0,
                            leader_id=NODE_ID,
                            leader_epoch=0,
                            replica_nodes=[NODE_ID],
                            isr_nodes=[NODE_ID],
                        )
                    ],
                )
                for n in names
            ],
        )

    def _produce(self, _version: int, body: Any) -> ProduceResponse | None:
        responses = []
        with self._lock:
            for t in body.topic_data:
                parts = []
                for p in t.partition_data:  # every topic has only partition 0
                    base = self.topics.setdefault(t.name, 0)
                    self.topics[t.name] = base + count_records(p.records or b"")
                    parts.append(
                        ProduceResponse.PartitionProduceResponse(
                            index=p.index, base_offset=base, log_start_offset=0
                        )
                    )
                responses.append(
                    ProduceResponse.TopicProduceResponse(
                        name=t.name, topic_id=t.topic_id, partition_responses=parts
                    )
                )
        if body.acks == 0:
            return None
        return ProduceResponse(responses=responses)


def count_records(blob: Buffer) -> int:
    """Records in a records blob, from the batch headers alone."""
    return sum(batch.last_offset_delta + 1 for batch in iter_batches(blob))


# --- what the clients send ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "key": _text(self.key),
            "value": _text(self.value),
            "headers": [[k, _text(v)] for k, v in self.headers],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Message:
        return cls(
            key=_bytes(d["key"]),
            value=_bytes(d["value"]),
            headers=tuple((k, _bytes(v)) for k, v in d["headers"]),
        )


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode()


def _bytes(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


KCAT_HEADERS: tuple[tuple[str, bytes | None], ...] = (("h-a", b"alpha"), ("h-null", None))


def topic_for(client: str, codec: str) -> str:
    return f"golden-{client}-{codec}"


def messages_for(client: str, codec: str) -> list[Message]:
    """Known messages: keys, a null key, a tombstone, headers (one with a null value).

    Values repeat a word so that every codec shrinks them (librdkafka sends a batch
    uncompressed when compression would not pay).  kcat puts the same ``-H`` headers on every
    message, so its messages all carry :data:`KCAT_HEADERS`; kafka-python refuses a null header
    value ("All headers items must be (str, bytes) tuples"), so it sends an empty one instead.
    """
    tag = f"{client}/{codec}"
    filler = " ".join(["golden"] * 24)
    values = [f"{tag} value {i} {filler}".encode() for i in range(3)]
    if client == "kcat":
        return [
            Message(b"key-0", values[0], KCAT_HEADERS),
            Message(b"key-1", values[1], KCAT_HEADERS),
            Message(None, values[2], KCAT_HEADERS),
            Message(b"key-3", None, KCAT_HEADERS),
        ]
    odd_header = ("h-empty", b"") if client == "kafka_python" else ("h-null", None)
    return [
        Message(b"key-0", values[0], (("h-a", b"alpha"), ("h-b", b"beta"))),
        Message(b"key-1", values[1], (odd_header,)),
        Message(None, values[2]),
        Message(b"key-3", None),
    ]


# --- the client drivers -----------------------------------------------------------------------

TIMEOUT_S = 10.0


def run_client(
    client: str, codec: str, bootstrap: str, topic: str, messages: list[Message]
) -> None:
    """Make the real ``client`` produce ``messages`` to ``topic``; raise if any is not acked."""
    {
        "confluent_kafka": _run_confluent_kafka,
        "kafka_python": _run_kafka_python,
        "aiokafka": _run_aiokafka,
        "kcat": _run_kcat,
    }[client](codec, bootstrap, topic, messages)


def _run_confluent_kafka(codec: str, bootstrap: str, topic: str, messages: list[Message]) -> None:
    from confluent_kafka import Producer

    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "golden-confluent-kafka",
            "compression.type": codec,
            "linger.ms": 100,
            "message.timeout.ms": int(TIMEOUT_S * 1000),
            "socket.timeout.ms": 5000,
            "broker.address.family": "v4",
        }
    )
    for m in messages:
        producer.produce(
            topic,
            key=m.key,
            value=m.value,
            headers=list(m.headers) or None,
            on_delivery=on_delivery,
        )
    remaining = producer.flush(TIMEOUT_S)
    if remaining or failures:
        raise RuntimeError(f"confluent-kafka: {remaining} undelivered, failures {failures}")


def _run_kafka_python(codec: str, bootstrap: str, topic: str, messages: list[Message]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        client_id="golden-kafka-python",
        compression_type=None if codec == "none" else codec,
        linger_ms=1000,
        request_timeout_ms=5000,
        max_block_ms=int(TIMEOUT_S * 1000),
    )
    try:
        futures = [
            producer.send(topic, key=m.key, value=m.value, headers=list(m.headers))
            for m in messages
        ]
        producer.flush(timeout=TIMEOUT_S)
        for f in futures:
            f.get(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=5)


def _run_aiokafka(codec: str, bootstrap: str, topic: str, messages: list[Message]) -> None:
    from aiokafka import AIOKafkaProducer

    async def produce() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            client_id="golden-aiokafka",
            compression_type=None if codec == "none" else codec,
            linger_ms=100,
            request_timeout_ms=5000,
        )
        await producer.start()
        try:
            futures = [
                await producer.send(topic, key=m.key, value=m.value, headers=list(m.headers))
                for m in messages
            ]
            await producer.flush()
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    async def bounded() -> None:
        await asyncio.wait_for(produce(), TIMEOUT_S)

    asyncio.run(bounded())


def _run_kcat(codec: str, bootstrap: str, topic: str, messages: list[Message]) -> None:
    headers = {m.headers for m in messages}
    if len(headers) != 1:
        raise ValueError("kcat sends the same headers with every message")
    args = ["kcat", "-P", "-b", bootstrap, "-t", topic, "-z", codec, "-K", ":", "-Z"]
    for name, value in headers.pop():
        args += ["-H", name if value is None else f"{name}={value.decode()}"]
    for prop in (
        "client.id=golden-kcat",
        "linger.ms=100",
        f"message.timeout.ms={int(TIMEOUT_S * 1000)}",
        "socket.timeout.ms=5000",
        "broker.address.family=v4",
    ):
        args += ["-X", prop]
    lines = []
    for m in messages:
        # -Z: an empty key or value is sent as null.
        key, value = m.key or b"", m.value or b""
        if b":" in key or b"\n" in key + value:
            raise ValueError("kcat cannot send this message")
        lines.append(key + b":" + value + b"\n")
    proc = subprocess.run(
        args, input=b"".join(lines), capture_output=True, timeout=TIMEOUT_S + 10, check=False
    )
    if proc.returncode != 0 or re.search(rb"(?i)fail|error", proc.stderr):
        raise RuntimeError(f"kcat exited {proc.returncode}: {proc.stderr.decode(errors='replace')}")


# --- one run -------------------------------------------------------------------------------


@dataclass(slots=True)
class Capture:
    client: str
    codec: str
    topic: str
    messages: list[Message]
    frames: list[CapturedFrame]


def capture(
    client: str, codec: str, api_ranges: dict[int, tuple[int, int]] = API_RANGES
) -> Capture:
    """Start a responder, let ``client`` produce its messages with ``codec``, return the frames."""
    topic = topic_for(client, codec)
    messages = messages_for(client, codec)
    with GoldenResponder(api_ranges=api_ranges) as responder:
        run_client(client, codec, responder.bootstrap, topic, messages)
    if responder.errors:
        raise RuntimeError(f"responder errors: {responder.errors}")
    return Capture(client, codec, topic, messages, list(responder.frames))


def missing_prerequisite(client: str, codec: str) -> str | None:
    """Why ``client`` cannot send ``codec`` here (a precise skip reason), or None."""
    modules = {"confluent_kafka": "confluent_kafka", "kafka_python": "kafka"}
    modules["aiokafka"] = "aiokafka"
    if client == "kcat":
        return None if shutil.which("kcat") else "kcat is not installed (Debian package kcat)"
    if importlib.util.find_spec(modules[client]) is None:
        return f"{client} is not installed"
    # kafka-python's codecs import these optional PyPI packages (kafka/codec.py); aiokafka's
    # and librdkafka's need nothing extra (aiokafka uses cramjam, a dependency of its own).
    kafka_python_codecs = {"snappy": "snappy", "lz4": "lz4", "zstd": "zstandard"}
    pypi = {"snappy": "python-snappy", "lz4": "lz4", "zstandard": "zstandard"}
    if client == "kafka_python" and codec in kafka_python_codecs:
        module = kafka_python_codecs[codec]
        if importlib.util.find_spec(module) is None:
            return f"kafka-python needs the PyPI package {pypi[module]} for {codec}"
    return None


def client_versions() -> dict[str, str]:
    """Versions of the installed clients (for the fixture index)."""
    out: dict[str, str] = {}
    try:
        import confluent_kafka

        out["confluent_kafka"] = (
            f"confluent-kafka {confluent_kafka.__version__}, "
            f"librdkafka {confluent_kafka.libversion()[0]}"
        )
    except ImportError:
        pass
    for client, module in (("kafka_python", "kafka"), ("aiokafka", "aiokafka")):
        with contextlib.suppress(ImportError):
            out[client] = f"{module} {importlib.import_module(module).__version__}"
    if shutil.which("kcat"):
        v = subprocess.run(["kcat", "-V"], capture_output=True, text=True, check=False).stdout
        m = re.search(r"Version (\S+) \(.*?librdkafka (\S+)", v)
        out["kcat"] = f"kcat {m.group(1)}, librdkafka {m.group(2)}" if m else "kcat"
    return out


# --- reading captured frames -----------------------------------------------------------------


def api_name(api_key: int) -> str:
    """``ProduceRequest`` -> ``produce``, ``ApiVersionsRequest`` -> ``api_versions``."""
    request_cls: type[Request] = api_classes(api_key)[0]
    name = request_cls.NAME.removesuffix("Request")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def produce_blobs(
    frames: list[CapturedFrame], topic: str
) -> Iterator[tuple[CapturedFrame, Buffer]]:
    """Every records blob sent to ``topic``, in the order received."""
    for f in frames:
        if f.api_key != PRODUCE:
            continue
        _, body = decode_request(f.frame)
        for t in body.topic_data:
            if t.name == topic:
                for p in t.partition_data:
                    if p.records is not None:
                        yield f, p.records
