"""Network faults: links between nodes are cut, cut one way, or narrowed, while an acks=all
idempotent producer writes, and no acknowledged record is lost, duplicated, reordered or
invented.

Three controllers and three brokers run as real processes, each in its own network namespace
(``netns.py``: a bridge, a veth each, a private /24); the producer, the consumer and the
probes below run in the test process and reach every node through the bridge.  A topic of 3
partitions, replication factor 3, ``min.insync.replicas=2``.  The producer of
``test_replication_chaos`` (confluent-kafka, ``acks=all``, ``enable.idempotence``) writes
unique values at a steady rate into a JSONL history; after the fault is healed and the cluster
is whole again, a fresh consumer reads everything and ``history.check`` must find nothing.

Scenarios
---------
* ``leader_isolated``: the leader of partition 0 is cut from the three controllers (both
  ways); it still reaches the other brokers, and clients still reach it.  The controller
  fences it after ``broker.session.timeout.ms`` and elects another leader.  A probe sends one
  acks=-1 record at a time straight to the isolated broker (a raw connection: a real client
  would follow metadata to the new leader), and the last acknowledgement it gets must come
  within the session timeout of the cut (the broker's session lease, ``broker/lifecycle.py``:
  without it, it acknowledged until its followers had learnt of the new leader, 3.17 s after
  the cut one way with a 3 s session timeout).
* ``leader_one_way_out`` / ``leader_one_way_in``: the same, with packets dropped only from the
  leader to the controllers, or only from the controllers to the leader (an asymmetric
  partition: each half-open direction must end the same way).
* ``controller_minority``: the active controller is cut from the other two controllers (the
  brokers reach all three).  The majority elects another active controller, a topic can be
  created meanwhile and every broker learns of it (none keeps long-polling the stale one for
  metadata), the old one stops acting as the active controller, no broker is fenced, and no
  acknowledged record is lost.
* ``follower_one_way``: packets from partition 0's leader to one follower are dropped (its
  fetches arrive, their answers do not); it leaves the ISR after ``replica.lag.time.max.ms``
  and acks=all writes go on with the other two.
* ``slow_leader_link``: the link of partition 0's leader is narrowed to
  ``SLOW_RATE_KBIT`` each way with up to ``SLOW_QUEUE_MS`` of queueing (a token bucket: this
  kernel has no netem for a fixed delay); acknowledgements keep coming, only later.

Each scenario takes 15-25 s (a fresh cluster each), the module about 2 minutes: CI runs it all
(marker ``network``).  Each appends its measured times to ``$NETWORK_FAULTS_RESULTS`` (JSON
lines) when that is set: ``scripts/network_faults.py`` runs the suite several times and prints
the medians and ranges.  Without root, ``ip``, ``tc`` or ``nft``, or where namespaces cannot be
made, every test fails saying which (``netns.preflight``); none is skipped.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from history import Ack, Fail, HistoryWriter, Send, check

from integration.cluster_process import LocalCluster, ServerProcess, http_json
from integration.netns import Host, NetworkSandbox, tool
from integration.raw_client import RawConnection
from integration.test_replication_chaos import (
    EXTRA,
    SESSION_TIMEOUT_MS,
    TOPIC,
    ProducerThread,
    create_topic,
    describe,
    read_everything,
    wait_for,
    wait_healed,
)
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ProduceRequest
from kafka_protocol.record_batch import SimpleRecord, build_batch
from kafka_protocol.types import TopicName

pytestmark = [pytest.mark.integration, pytest.mark.network]

SESSION_TIMEOUT_S = SESSION_TIMEOUT_MS / 1000
STEADY_S = 2.0  # healthy production before a fault and after the heal
FAULT_S = SESSION_TIMEOUT_S + 4.0  # a fault lasts this long after the cut
FIRST_ACK_TIMEOUT_S = 30.0
ELECTION_TIMEOUT_S = 20.0
METADATA_TIMEOUT_S = 3.0  # a committed metadata change reaches every broker within this
PROBE_INTERVAL_S = 0.05
PROBE_PRODUCE_TIMEOUT_MS = 1000  # the probe's Produce timeout_ms
PROBE_SOCKET_TIMEOUT_S = 3.0
PROBE_ID_BASE = 100_000_000  # history ids of probe records (the producer counts from 0)
SLOW_RATE_KBIT = 96
SLOW_QUEUE_MS = 1000
MIN_ACKED = 300


# --- the cluster in namespaces --------------------------------------------------------------


@dataclass
class Setup:
    cluster: LocalCluster
    net: NetworkSandbox
    hosts: dict[int, Host]  # node id -> its namespace
    history: HistoryWriter
    run_id: str
    started: float = field(default_factory=time.monotonic)

    @property
    def controller_hosts(self) -> list[Host]:
        return [self.hosts[i] for i in self.cluster.controllers]

    def controller_view(self) -> dict[str, Any]:
        """The topic as the first controller that answers has it in its metadata image."""
        for controller in self.cluster.controllers.values():
            try:
                topic: dict[str, Any] = controller.get(f"/v1/topics/{TOPIC}")
                return topic
            except (AssertionError, OSError):
                continue
        raise AssertionError("no controller described the topic")

    def leader(self, partition: int) -> tuple[int, int]:
        """(leader, leader epoch) of ``partition`` in a controller's image."""
        p = self.controller_view()["partitions"][partition]
        return int(p["leader"]), int(p["leader_epoch"])


@contextmanager
def namespaced_cluster(tmp_path: Path) -> Iterator[Setup]:
    """3 controllers + 3 brokers, one namespace each, the topic created and healthy; every
    process killed, then the sandbox removed, on the way out."""
    with NetworkSandbox.create() as net:
        hosts = {i: net.add_host(f"c{i}") for i in (1, 2, 3)}
        hosts |= {i: net.add_host(f"b{i}") for i in (4, 5, 6)}
        cluster = LocalCluster.create(
            tmp_path / "cluster",
            3,
            3,
            EXTRA,
            hosts={i: h.address for i, h in hosts.items()},
            command_prefixes={i: net.exec_prefix(h) for i, h in hosts.items()},
        )
        history = HistoryWriter(tmp_path / "history.jsonl")
        try:
            cluster.start()
            create_topic(cluster)
            wait_healed(cluster)
            yield Setup(cluster, net, hosts, history, secrets.token_hex(4))
        finally:
            history.close()
            cluster.kill_all()


def start_producer(setup: Setup) -> ProducerThread:
    producer = ProducerThread(setup.cluster.bootstrap, setup.history, setup.run_id)
    producer.start()
    wait_for(
        "the first acknowledgement",
        producer.acked,
        FIRST_ACK_TIMEOUT_S,
        lambda: describe(setup.cluster),
    )
    return producer


def finish_and_check(setup: Setup, producer: ProducerThread) -> str:
    """Heal, let the cluster become whole, stop the producer, read everything, check."""
    setup.net.heal()
    wait_healed(setup.cluster)
    time.sleep(STEADY_S)
    producer.finish()
    producer.producer.close()  # else it reconnects to the removed nodes until collected
    read_everything(setup.cluster, setup.history)
    report = check(setup.history.events)
    summary = f"{report.describe()}\nhistory in {setup.history.path}"
    assert report.ok, f"{summary}\n{describe(setup.cluster)}"
    assert report.summary.acked >= MIN_ACKED, summary
    return summary


def record(scenario: str, **measured: float) -> None:
    """Print the measured times; append them to $NETWORK_FAULTS_RESULTS if set."""
    line = json.dumps({"scenario": scenario, **{k: round(v, 3) for k, v in measured.items()}})
    print(line)
    if path := os.environ.get("NETWORK_FAULTS_RESULTS"):
        with open(path, "a") as f:
            f.write(line + "\n")


# --- a probe pinned to one broker -----------------------------------------------------------


class LeaderProbe(threading.Thread):
    """Sends one acks=-1 record at a time to ``partition`` on one broker only, and records
    each send and answer in the history (producer ``probe``), so that what it was told is
    checked with the rest.  A raw connection: a real client would follow the metadata to
    another broker, and the point is to ask this one."""

    def __init__(self, broker: ServerProcess, partition: int, setup: Setup) -> None:
        super().__init__(name="leader-probe", daemon=True)
        self.address = broker.address
        self.partition = partition
        self.history = setup.history
        self.run_id = setup.run_id
        self.stopping = threading.Event()
        self.acked_at: list[float] = []
        self.errors: dict[str, int] = {}

    def run(self) -> None:
        conn: RawConnection | None = None
        i = 0
        while not self.stopping.is_set():
            value = f"{self.run_id}-probe-{i:06d}"
            send_id = PROBE_ID_BASE + i
            i += 1
            self.history.append(
                Send(send_id, "probe", value, None, self.partition, time.monotonic())
            )
            try:
                if conn is None:
                    conn = RawConnection(self.address, PROBE_SOCKET_TIMEOUT_S)
                response = conn.request(self._produce(value), 9)
                answer = response.responses[0].partition_responses[0]
                error = ErrorCode.from_code(answer.error_code)
            except OSError as exc:
                error_name = type(exc).__name__
                if conn is not None:
                    conn.close()
                conn = None
            else:
                error_name = error.name
            now = time.monotonic()
            if error_name == ErrorCode.NONE.name:
                self.history.append(Ack(send_id, self.partition, int(answer.base_offset), now))
                self.acked_at.append(now)
            else:
                self.history.append(Fail(send_id, error_name, now))
                self.errors[error_name] = self.errors.get(error_name, 0) + 1
            self.stopping.wait(PROBE_INTERVAL_S)
        if conn is not None:
            conn.close()

    def _produce(self, value: str) -> ProduceRequest:
        batch = build_batch([SimpleRecord(value.encode())])
        return ProduceRequest(
            acks=-1,
            timeout_ms=PROBE_PRODUCE_TIMEOUT_MS,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=TopicName(TOPIC),
                    partition_data=[
                        ProduceRequest.PartitionProduceData(index=self.partition, records=batch)
                    ],
                )
            ],
        )

    def stop(self) -> None:
        self.stopping.set()
        self.join(PROBE_SOCKET_TIMEOUT_S * 3)
        assert not self.is_alive(), "the leader probe did not stop"


# --- measures from the history ---------------------------------------------------------------


def producer_acks(setup: Setup, partition: int | None = None) -> list[tuple[float, float]]:
    """(send time, ack time) of the producer's acknowledged records, by ack time."""
    sends = {e.id: e for e in setup.history.events if isinstance(e, Send) and e.id < PROBE_ID_BASE}
    return sorted(
        (sends[e.id].time, e.time)
        for e in list(setup.history.events)
        if isinstance(e, Ack) and e.id in sends and (partition is None or e.partition == partition)
    )


def longest_ack_gap(acks: list[tuple[float, float]], start: float, end: float) -> float:
    """The longest time without an acknowledgement between ``start`` and ``end``."""
    times = [start] + [t for _, t in acks if start < t < end] + [end]
    return max(b - a for a, b in itertools.pairwise(times))


# --- the sandbox itself ---------------------------------------------------------------------

LISTEN = "import socket, sys; s = socket.create_server((sys.argv[1], 9000)); print(1, flush=True)"
ACCEPT = "; [s.accept() for _ in iter(int, 1)]"
CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], 9000), timeout=1).close()"


def test_the_sandbox_cuts_links_one_way_or_both_and_leaves_nothing_behind() -> None:
    """A listener in namespace b: reached from the root namespace always, from namespace a
    unless a cut or a one-way drop (either direction: TCP needs both) is in force; after the
    sandbox is closed no namespace, link or nft table of it is left."""
    with NetworkSandbox.create() as net:
        a, b = net.add_host("a"), net.add_host("b")
        server = subprocess.Popen(
            [*net.exec_prefix(b), sys.executable, "-c", LISTEN + ACCEPT, b.address],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "1"

            def from_a() -> bool:
                connect = [*net.exec_prefix(a), sys.executable, "-c", CONNECT, b.address]
                return subprocess.run(connect, capture_output=True, timeout=10).returncode == 0

            def from_root() -> bool:
                try:
                    socket.create_connection((b.address, 9000), timeout=1).close()
                except OSError:
                    return False
                return True

            assert from_a() and from_root()
            for fault in (net.cut, net.drop_one_way, lambda x, y: net.drop_one_way(y, x)):
                fault(a, b)
                assert not from_a(), net.rules()
                assert from_root(), "a cut between two nodes must not cut clients"
                net.heal()
                assert from_a()
        finally:
            server.kill()
            server.wait()
        sandbox_id = net.sandbox_id
    assert (
        sandbox_id
        not in subprocess.run([tool("ip"), "netns", "list"], capture_output=True, text=True).stdout
    )
    assert (
        sandbox_id
        not in subprocess.run([tool("ip"), "-o", "link"], capture_output=True, text=True).stdout
    )
    assert (
        sandbox_id
        not in subprocess.run(
            [tool("nft"), "list", "tables"], capture_output=True, text=True
        ).stdout
    )


# --- the scenarios --------------------------------------------------------------------------

LinkFault = Callable[[NetworkSandbox, Host, list[Host]], None]


def cut_both_ways(net: NetworkSandbox, leader: Host, controllers: list[Host]) -> None:
    net.isolate(leader, controllers)


def drop_leader_to_controllers(net: NetworkSandbox, leader: Host, controllers: list[Host]) -> None:
    net.drop((leader, c) for c in controllers)


def drop_controllers_to_leader(net: NetworkSandbox, leader: Host, controllers: list[Host]) -> None:
    net.drop((c, leader) for c in controllers)


LEADER_FAULTS = {
    "leader_isolated": cut_both_ways,
    "leader_one_way_out": drop_leader_to_controllers,
    "leader_one_way_in": drop_controllers_to_leader,
}


@pytest.mark.parametrize("scenario", list(LEADER_FAULTS))
def test_leader_cut_from_the_controllers_stops_acknowledging(tmp_path: Path, scenario: str) -> None:
    fault = LEADER_FAULTS[scenario]
    with namespaced_cluster(tmp_path) as setup:
        producer = start_producer(setup)
        old_leader, old_epoch = setup.leader(0)
        probe = LeaderProbe(setup.cluster.brokers[old_leader], 0, setup)
        probe.start()
        wait_for("the probe's first acknowledgement", lambda: probe.acked_at, 20.0, str)
        time.sleep(STEADY_S)
        cut_at = time.monotonic()
        fault(setup.net, setup.hosts[old_leader], setup.controller_hosts)

        def moved() -> tuple[int, int] | None:
            leader, epoch = setup.leader(0)
            return (leader, epoch) if leader != old_leader and epoch > old_epoch else None

        wait_for(
            f"a leader of partition 0 other than the cut-off broker {old_leader}",
            moved,
            ELECTION_TIMEOUT_S,
            lambda: f"{setup.net.rules()}\n{describe(setup.cluster)}",
        )
        elected_at = time.monotonic()
        time.sleep(max(0.0, cut_at + FAULT_S - time.monotonic()))
        probe.stop()
        healed_at = time.monotonic()
        summary = finish_and_check(setup, producer)
    last_old_ack = max((t for t in probe.acked_at if t >= cut_at), default=cut_at) - cut_at
    gap = longest_ack_gap(producer_acks(setup, 0), cut_at, healed_at)
    print(summary, f"probe errors after the cut: {probe.errors}", sep="\n")
    assert last_old_ack <= SESSION_TIMEOUT_S, (
        f"broker {old_leader}, cut from the controllers, acknowledged an acks=-1 write"
        f" {last_old_ack:.2f} s after the cut (session timeout {SESSION_TIMEOUT_S:g} s)"
    )
    record(
        scenario,
        last_ack_by_cut_off_leader_s=last_old_ack,
        new_leader_elected_s=elected_at - cut_at,
        longest_ack_gap_p0_s=gap,
    )


def test_follower_cut_one_way_leaves_the_isr(tmp_path: Path) -> None:
    """Packets from partition 0's leader to one of its followers are dropped: the follower's
    fetches arrive but their answers never do, so it stops catching up; the leader takes it
    out of the ISR after ``replica.lag.time.max.ms`` and acks=all writes go on with the
    other two; healed, it catches up and joins again."""
    with namespaced_cluster(tmp_path) as setup:
        producer = start_producer(setup)
        time.sleep(STEADY_S)
        p0 = setup.controller_view()["partitions"][0]
        leader = int(p0["leader"])
        follower = next(int(r) for r in p0["replicas"] if int(r) != leader)
        cut_at = time.monotonic()
        setup.net.drop_one_way(setup.hosts[leader], setup.hosts[follower])
        wait_for(
            f"broker {follower} to leave the ISR of partition 0",
            lambda: follower not in setup.controller_view()["partitions"][0]["isr"],
            ELECTION_TIMEOUT_S,
            lambda: describe(setup.cluster),
        )
        shrunk_at = time.monotonic()
        time.sleep(STEADY_S)
        healed_at = time.monotonic()
        summary = finish_and_check(setup, producer)
    acks = producer_acks(setup, 0)
    resumed = [a for _, a in acks if shrunk_at < a < healed_at]
    print(summary)
    assert resumed, f"no acknowledgement of partition 0 after the ISR shrank\n{summary}"
    record(
        "follower_one_way",
        isr_shrunk_s=shrunk_at - cut_at,
        longest_ack_gap_p0_s=longest_ack_gap(acks, cut_at, healed_at),
        acks_after_shrink_to_heal=len(resumed),
    )


def test_controller_minority(tmp_path: Path) -> None:
    with namespaced_cluster(tmp_path) as setup:
        producer = start_producer(setup)
        time.sleep(STEADY_S)
        old_active = wait_for(
            "an active controller",
            setup.cluster.active_controller,
            ELECTION_TIMEOUT_S,
            lambda: describe(setup.cluster),
        )
        others = [i for i in setup.cluster.controllers if i != old_active]
        cut_at = time.monotonic()
        setup.net.isolate(setup.hosts[old_active], [setup.hosts[i] for i in others])

        def majority_leader() -> int | None:
            views = [controller_leader(setup.cluster.controllers[i]) for i in others]
            leader = views[0]
            return leader if leader not in (None, old_active) and len(set(views)) == 1 else None

        new_active = wait_for(
            "the majority's own active controller",
            majority_leader,
            ELECTION_TIMEOUT_S,
            lambda: describe(setup.cluster),
        )
        elected_at = time.monotonic()
        wait_for(
            f"controller {old_active} to stop acting as the active controller",
            lambda: controller_leader(setup.cluster.controllers[old_active]) != old_active,
            ELECTION_TIMEOUT_S,
            lambda: describe(setup.cluster),
        )
        stepped_down_at = time.monotonic()
        created = create_topic_via(setup.cluster.brokers[min(setup.cluster.brokers)], "during")
        wait_for(
            "every broker to learn of the topic created during the cut",
            lambda: all(topic_led(b, "during") for b in setup.cluster.brokers.values()),
            METADATA_TIMEOUT_S,
            lambda: describe(setup.cluster),
        )
        created_at = time.monotonic()
        fenced = fenced_until(setup.cluster.controllers[new_active], cut_at + FAULT_S)
        healed_at = time.monotonic()
        summary = finish_and_check(setup, producer)
        wait_for(
            "every controller to agree on one active controller",
            lambda: len({controller_leader(c) for c in setup.cluster.controllers.values()}) == 1,
            ELECTION_TIMEOUT_S,
            lambda: describe(setup.cluster),
        )
    gap = longest_ack_gap(producer_acks(setup), cut_at, healed_at)
    record(
        "controller_minority",
        new_active_elected_s=elected_at - cut_at,
        old_active_stepped_down_s=stepped_down_at - cut_at,
        topic_created_and_known_s=created_at - cut_at,
        longest_ack_gap_s=gap,
    )
    print(summary, f"active controller {old_active} -> {new_active}; {created}", sep="\n")
    assert not fenced, f"brokers {fenced} were fenced while only a controller was cut off"


def fenced_until(controller: ServerProcess, until: float) -> set[int]:
    """The brokers ``controller``'s image shows fenced at some point until ``until``."""
    fenced: set[int] = set()
    while time.monotonic() < until:
        with contextlib.suppress(AssertionError, OSError):
            brokers = controller.get("/v1/cluster")["brokers"]
            fenced |= {int(b["id"]) for b in brokers if b["fenced"]}
        time.sleep(0.05)
    return fenced


def controller_leader(controller: ServerProcess) -> int | None:
    leader = controller.get("/v1/cluster")["controller"]["leader_id"]
    return None if leader is None else int(leader)


def topic_led(node: ServerProcess, name: str) -> bool:
    """``node``'s metadata has topic ``name`` with a leader for each partition."""
    partitions = node.get(f"/v1/topics/{name}")["partitions"]
    return bool(partitions) and all(p["leader"] >= 0 for p in partitions)


def create_topic_via(broker: ServerProcess, name: str) -> str:
    """Create a topic through a broker's REST API (forwarded to the active controller)."""
    body = {"name": name, "partitions": 1, "replication_factor": 3}
    answer = http_json(broker.admin + "/v1/topics", "POST", body, timeout_s=30.0)
    return f"created {answer}"


def test_slow_leader_link(tmp_path: Path) -> None:
    with namespaced_cluster(tmp_path) as setup:
        producer = start_producer(setup)
        time.sleep(STEADY_S)
        leader, _ = setup.leader(0)
        slowed_at = time.monotonic()
        setup.net.slow(setup.hosts[leader], SLOW_RATE_KBIT, SLOW_QUEUE_MS)
        time.sleep(FAULT_S)
        healed_at = time.monotonic()
        summary = finish_and_check(setup, producer)
    acks = producer_acks(setup, 0)
    before = [a - s for s, a in acks if setup.started <= s and a < slowed_at]
    during = [a - s for s, a in acks if slowed_at <= s and a < healed_at]
    print(summary)
    assert during, (
        f"no record sent to partition 0 was acknowledged while its leader was slow\n{summary}"
    )
    assert statistics.median(during) > statistics.median(before), "the link was not slower"
    record(
        "slow_leader_link",
        ack_latency_before_median_s=statistics.median(before),
        ack_latency_slow_median_s=statistics.median(during),
        acks_while_slow=len(during),
        longest_ack_gap_p0_s=longest_ack_gap(acks, slowed_at, healed_at),
    )
