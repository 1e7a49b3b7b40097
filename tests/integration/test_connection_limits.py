"""Bounded connections on the Kafka listener, against a real node process: what idle connections
cost, ``connections.max.idle.ms``, ``max.connections.per.ip`` (and its overrides) and
``queued.max.request.bytes``; a real client (confluent-kafka) keeps working throughout."""

from __future__ import annotations

import resource
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from integration.cluster_process import LocalCluster
from integration.node_process import NodeProcess
from integration.raw_client import RawConnection
from kafka_protocol.messages import MetadataRequest

pytestmark = pytest.mark.integration

IDLE_CONNECTIONS = 2000
IDLE_RSS_BUDGET_BYTES = 64 * 1024 * 1024  # issue 16's acceptance bound for 2000 connections
WAIT_S = 30.0


@pytest.fixture
def many_files() -> Iterator[None]:
    """Room for thousands of sockets here and in the node (children inherit the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * IDLE_CONNECTIONS + 1024
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {want}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def start_node(tmp_path: Path, *overrides: str) -> NodeProcess:
    return NodeProcess(tmp_path / "node", overrides=overrides).start()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def open_connections(node: NodeProcess) -> int:
    """The broker's own count of open Kafka connections (``kafka_connections`` in /metrics)."""
    with urllib.request.urlopen(node.admin + "/metrics", timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("kafka_connections "):
            return int(float(line.split()[1]))
    raise AssertionError("no kafka_connections gauge in /metrics")


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def connect(node: NodeProcess) -> socket.socket:
    return socket.create_connection((node.host, node.port), timeout=10)


def metadata_works(node: NodeProcess) -> bool:
    conn = RawConnection(node.bootstrap)
    try:
        return bool(conn.request(MetadataRequest(topics=None), 12).brokers)
    finally:
        conn.close()


def closed_by_peer(sock: socket.socket, timeout_s: float) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


# --- idle connections ---------------------------------------------------------------------------


def test_idle_connections_cost_little_memory(tmp_path: Path, many_files: None) -> None:
    node = start_node(tmp_path)
    assert node.proc is not None
    socks: list[socket.socket] = []
    try:
        assert metadata_works(node)  # warm: the listener's shared buffers exist
        baseline = open_connections(node)
        before = rss_bytes(node.proc.pid)
        for _ in range(IDLE_CONNECTIONS):
            socks.append(connect(node))
        wait_for(
            lambda: open_connections(node) >= baseline + IDLE_CONNECTIONS,
            f"the broker to accept {IDLE_CONNECTIONS} connections",
        )
        time.sleep(0.5)  # anything allocated per connection after accept is allocated by now
        added = rss_bytes(node.proc.pid) - before
        print(f"{IDLE_CONNECTIONS} idle connections added {added / 2**20:.1f} MiB RSS")
        assert added <= IDLE_RSS_BUDGET_BYTES, f"{added / 2**20:.1f} MiB"
        assert metadata_works(node)
    finally:
        for s in socks:
            s.close()
        assert node.stop() == 0, node.log_tail()


def test_idle_connections_are_closed_and_busy_ones_kept(tmp_path: Path) -> None:
    node = start_node(tmp_path, "connections.max.idle.ms=800")
    try:
        idle = connect(node)
        busy = RawConnection(node.bootstrap)
        started = time.monotonic()
        while time.monotonic() - started < 2.5:  # three idle periods
            assert busy.request(MetadataRequest(topics=None), 12).brokers
            time.sleep(0.2)
        assert closed_by_peer(idle, timeout_s=0.1), "an idle connection was kept past 800 ms"
        assert not closed_by_peer(busy.sock, timeout_s=0.1), "a connection in use was closed"
        busy.close()
        # a closed connection frees its place: the node still accepts and serves
        assert metadata_works(node)
    finally:
        assert node.stop() == 0, node.log_tail()


def connect_from(node: NodeProcess, source_ip: str) -> socket.socket:
    sock = socket.socket()
    sock.bind((source_ip, 0))
    sock.settimeout(10)
    sock.connect((node.host, node.port))
    return sock


def test_connections_over_the_per_ip_limit_are_refused_while_clients_work(
    tmp_path: Path,
) -> None:
    """127.0.0.2 (also loopback) may hold 5 connections; 127.0.0.1 (the client's) the default."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    node = start_node(
        tmp_path,
        "max.connections.per.ip=50",
        "max.connections.per.ip.overrides=127.0.0.2:5",
    )
    held: list[socket.socket] = []
    try:
        held = [connect_from(node, "127.0.0.2") for _ in range(5)]
        refused = [connect_from(node, "127.0.0.2") for _ in range(30)]
        assert all(closed_by_peer(s, timeout_s=5) for s in refused)
        for s in refused:
            s.close()
        assert not any(closed_by_peer(s, timeout_s=0.05) for s in held)

        producer = confluent_kafka.Producer({"bootstrap.servers": node.bootstrap})
        for i in range(100):
            producer.produce("per-ip", value=b"%d" % i)
        assert producer.flush(30) == 0
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": node.bootstrap,
                "group.id": "per-ip",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe(["per-ip"])
        values: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while len(values) < 100 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        consumer.close()
        assert values == [b"%d" % i for i in range(100)]

        lines = [line for line in node.log_tail(400).splitlines() if "connection refused" in line]
        assert len(lines) == 1, lines  # a flood of refusals is one line per 10 s
        assert "listener=PLAINTEXT peer=127.0.0.2:" in lines[0]
        assert "reason=max.connections.per.ip limit=5" in lines[0]
    finally:
        for s in held:
            s.close()
        assert node.stop() == 0, node.log_tail()


def test_reading_pauses_while_queued_request_bytes_are_exhausted(tmp_path: Path) -> None:
    """Two connections that have sent all but the last bytes of a 1 MiB request each hold
    the whole budget: other connections' requests wait, and are answered once it is
    released. (Only bytes received count: a size prefix alone earns 16 KiB, see
    FrameReader.)"""
    limit = 1 << 20
    node = start_node(
        tmp_path, f"socket.request.max.bytes={limit}", f"queued.max.request.bytes={limit}"
    )
    try:
        hogs = [connect(node) for _ in range(2)]
        for hog in hogs:
            hog.sendall(limit.to_bytes(4, "big") + b"\0" * (limit - 1000))
        time.sleep(0.5)  # the broker has read it
        waiting = RawConnection(node.bootstrap, timeout_s=10)
        sent = waiting.send(MetadataRequest(topics=None), 12)
        waiting.sock.settimeout(1.5)
        with pytest.raises(TimeoutError):
            waiting.sock.recv(1, socket.MSG_PEEK)
        for hog in hogs:
            hog.close()  # releases what it held
        waiting.sock.settimeout(10)
        correlation, response = waiting.recv(MetadataRequest.API_KEY, 12)
        assert correlation == sent and response.brokers
        waiting.close()
        assert metadata_works(node)
    finally:
        assert node.stop() == 0, node.log_tail()


def test_the_controller_listener_applies_the_same_limits(tmp_path: Path) -> None:
    """A controller's CONTROLLER listener (its own process, with a broker registered at it)
    refuses over max.connections.per.ip.overrides and closes idle connections as well."""
    extra = {
        "max.connections.per.ip.overrides": "127.0.0.2:2",
        "connections.max.idle.ms": "3000",
        "broker.heartbeat.interval.ms": "500",  # the broker's own connection is never idle
    }
    cluster = LocalCluster.create(tmp_path, 1, 1, extra).start()
    try:
        controller = cluster.controllers[1]
        port = int(controller.properties["listeners"].rsplit(":", 1)[1])

        def connect_to_controller() -> socket.socket:
            sock = socket.socket()
            sock.bind(("127.0.0.2", 0))
            sock.settimeout(10)
            sock.connect(("127.0.0.1", port))
            return sock

        kept = [connect_to_controller() for _ in range(2)]
        refused = connect_to_controller()
        assert closed_by_peer(refused, timeout_s=5)
        refused.close()
        assert not closed_by_peer(kept[0], timeout_s=0.05)
        assert all(closed_by_peer(s, timeout_s=6) for s in kept), "idle connections were kept"
        for s in kept:
            s.close()
        log_text = controller.log_tail(400)
        assert "connection refused listener=CONTROLLER peer=127.0.0.2:" in log_text
        broker = cluster.any_broker()
        assert not any(b["fenced"] for b in broker.get("/v1/cluster")["brokers"])
    finally:
        cluster.stop()
