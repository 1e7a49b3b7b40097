"""Controller quorum benchmark: topic creates, batched partitions, metadata propagation,
controller failover and a large metadata image, on a real local cluster.

    python scripts/bench_controller.py [--quick] [--json PATH] [--data-dir DIR]
        [--creates N] [--confluent-creates N] [--visibility N] [--failovers N]
        [--metadata-requests N] [--batches TxPxRF,...] [--log-level LEVEL]

The cluster is 3 controllers + 3 brokers, each a ``python -m kraft.cli server --config FILE``
process on free 127.0.0.1 ports, configured by ``kraft.node.dev_cluster`` (``plan_cluster``,
``write_node_configs``) in a temporary directory; ``--data-dir DIR`` (new or empty) keeps it, with
each node's stderr in ``DIR/node-<id>/stderr.log`` (``--log-level``, default INFO, timestamps
every line).  Requests go to the brokers, which forward admin requests to the active
controller.  The client is this repo's asyncio ``KafkaConnection``, which sends a request the
moment it is asked to: it measures the platform, not a client's batching.

Steps (progress on stderr, a results table on stdout, everything in ``--json PATH``):

0. Idle: each node's CPU (cores, utime + stime from /proc) and RSS while nobody asks anything.
1. Sequential creates: N CreateTopics v7 (one topic, 1 partition, RF 3), one at a time to one
   broker: creates/s and p50/p99 latency; then M more through confluent-kafka's AdminClient.
2. Visibility: for each of K new topics, the time from its CreateTopics response until
   Metadata v12 on every broker shows it with a leader (the three brokers polled concurrently,
   back to back, each on its own connection).
3. Batched partitions: one CreateTopics of 1 topic x 10,000 partitions RF 1, then one of
   10 topics x 1,000 partitions RF 3 (``--batches``): partitions/s from the response, the
   time until every broker's image holds the batch (``metadata_offset`` of ``/v1/cluster``),
   and until every broker answers ApiVersions within 50 ms again (it opens the new partition
   logs on its event loop).
   A broker keeps three files open per partition replica, as Kafka does, so a batch that
   would take a broker past ``RLIMIT_NOFILE`` (raised to the hard limit first) is skipped and
   said so: 10 x 1,000 RF 3 puts 10,000 replicas (30,000 files) on each of 3 brokers.
4. Large image, after each batch: full Metadata v12 requests (all topics) to one broker, timed
   to the last byte of the response without decoding it (p50/p99), the client's decode timed
   separately; the RSS of every node (VmRSS).
5. Failover, R times: ``kill -9`` of the active controller (``leader_id`` of ``/v1/cluster``),
   then the time until a CreateTopics through a broker succeeds, and until the survivors report
   a new leader; the killed controller is restarted and caught up before the next run.

Each figure with an acceptance target is printed with PASS/MISS.  The failovers are repeated:
their figures are the median with the range (min-max), and the target is judged on the
median, never on the best run; the other steps are one measurement each (a distribution of
N requests, or one batch).  ``--quick`` (under a minute)
cuts the counts, runs 3 failovers and makes one batch of 1 x 1,000 RF 1 (so the 10,000-partition
targets show n/a).  The step that fails is named, with the last stderr lines of the nodes
involved; every node is stopped on exit or Ctrl-C (SIGTERM, then SIGKILL after 10 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import math
import resource
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_cluster
from bench_cluster import (
    READY_TIMEOUT_S,
    Cluster,
    Node,
    Report,
    StepError,
    Target,
    latency_summary,
    latency_text,
    log,
    step_failed,
)
from bench_machine import process_cpu_s
from bench_stats import Spread, spread, target_row

from broker.kafka_client import KafkaConnection
from kafka_protocol._codec import FileRegion
from kafka_protocol.errors import ErrorCode
from kafka_protocol.framing import decode_response, encode_request
from kafka_protocol.messages import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    RequestHeader,
)
from kafka_protocol.types import TopicName

CREATE_TOPICS_VERSION = 7
API_VERSIONS_VERSION = 3
METADATA_VERSION = 12
METADATA_KEY = 3
STEP_TIMEOUT_S = 600.0
VISIBLE_TIMEOUT_S = 10.0
BATCH_VISIBLE_S = 300.0
FAILOVER_TIMEOUT_S = 30.0
CREATE_TIMEOUT_MS = 30_000
CLIENT_ID = "bench-controller"
FDS_PER_REPLICA = 3  # a partition log holds its .log, .index and .timeindex open
FD_MARGIN = 1000

FULL = {
    "creates": 300,
    "confluent_creates": 100,
    "visibility": 100,
    "failovers": 5,
    "metadata_requests": 20,
    "batches": [(1, 10_000, 1), (10, 1000, 3)],
    "idle_s": 3.0,
}
QUICK = {
    "creates": 100,
    "confluent_creates": 30,
    "visibility": 50,
    "failovers": 3,
    "metadata_requests": 10,
    "batches": [(1, 1000, 1)],
    "idle_s": 2.0,
}

IMAGE_10K = "image_10k"  # the first image_* result with >= 10,000 partitions
# (result key, metric, label, higher is better, bound)
TARGETS = [
    ("sequential", "creates_s", "sequential creates/s", True, 100.0),
    ("sequential", "p99_ms", "sequential create p99 ms", False, 20.0),
    ("batch_10x1000_rf3", "partitions_s", "batched partitions/s (10 x 1,000 RF 3)", True, 1000.0),
    ("batch_1x10000_rf1", "partitions_s", "batched partitions/s (1 x 10,000 RF 1)", True, 1000.0),
    ("visibility", "p99_ms", "visible on all brokers p99 ms", False, 100.0),
    ("failover", "create_ok_s", "failover median s", False, 2.0),
    (IMAGE_10K, "p99_ms", "full Metadata p99 ms, >= 10,000 partitions", False, 200.0),
]


def nofile_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def raise_nofile_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit, for the nodes (they inherit it): a broker
    holds files open for every partition replica, as Kafka does."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def cpu_seconds(node: Node) -> float:
    """utime + stime of the node's process (all threads)."""
    assert node.proc is not None
    return process_cpu_s(node.proc.pid)


async def idle_usage(cluster: Cluster, seconds: float) -> dict[str, Any]:
    """CPU (cores) of each node while nobody sends requests, and RSS."""
    before = {n.spec.name: cpu_seconds(n) for n in cluster.nodes}
    await asyncio.sleep(seconds)
    cores = {n.spec.name: (cpu_seconds(n) - before[n.spec.name]) / seconds for n in cluster.nodes}
    return {
        "cores": {
            "controllers": {n.spec.name: cores[n.spec.name] for n in cluster.controllers},
            "brokers": {n.spec.name: cores[n.spec.name] for n in cluster.brokers},
        },
        "rss_mib": cluster.rss(),
    }


async def http_get(node: Node, path: str) -> Any:
    return await asyncio.to_thread(node.get, path)


async def wait_until(what: str, check: Callable[[], Awaitable[Any]], timeout_s: float) -> Any:
    """Poll ``check`` every 10 ms until it returns a truthy value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError):
            if value := await check():
                return value
        await asyncio.sleep(0.01)
    raise StepError(f"timed out after {timeout_s:g} s waiting for {what}")


async def wait_cluster_formed(cluster: Cluster) -> None:
    async def formed() -> bool:
        return cluster.formed(await http_get(cluster.brokers[0], "/v1/cluster"))

    await wait_until("3 unfenced brokers and a leader", formed, READY_TIMEOUT_S)
    cluster.leader()


# --- requests -----------------------------------------------------------------------------------


async def connect(node: Node) -> KafkaConnection:
    host, port = node.address
    return await KafkaConnection.open(host, port, CLIENT_ID)


def create_request(topics: list[tuple[str, int, int]]) -> CreateTopicsRequest:
    return CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=TopicName(name), num_partitions=partitions, replication_factor=rf
            )
            for name, partitions, rf in topics
        ],
        timeout_ms=CREATE_TIMEOUT_MS,
    )


async def create_topics(conn: KafkaConnection, topics: list[tuple[str, int, int]]) -> list[str]:
    """Create ``(name, partitions, rf)`` topics in one request; the error names (none: ok)."""
    response = await conn.send(create_request(topics), CREATE_TOPICS_VERSION)
    assert isinstance(response, CreateTopicsResponse)
    return [
        ErrorCode.from_code(t.error_code).name
        for t in response.topics
        if t.error_code != ErrorCode.NONE
    ]


async def create_one(conn: KafkaConnection, name: str) -> float:
    """Seconds for one CreateTopics (1 partition, RF 3); raises StepError on an error."""
    start = time.perf_counter()
    errors = await create_topics(conn, [(name, 1, 3)])
    elapsed = time.perf_counter() - start
    if errors:
        raise StepError(f"creating {name}: {', '.join(errors)}")
    return elapsed


def metadata_request(topics: list[str] | None) -> MetadataRequest:
    wanted = (
        None
        if topics is None
        else [MetadataRequest.MetadataRequestTopic(name=TopicName(t)) for t in topics]
    )
    return MetadataRequest(topics=wanted, allow_auto_topic_creation=False)


def has_leader(response: MetadataResponse, topic: str) -> bool:
    for t in response.topics:
        if t.name == topic and t.error_code == ErrorCode.NONE and t.partitions:
            return all(p.leader_id >= 0 for p in t.partitions)
    return False


# --- step 1: sequential creates -----------------------------------------------------------------


async def bench_sequential(cluster: Cluster, count: int) -> dict[str, Any]:
    conn = await connect(cluster.brokers[0])
    try:
        for i in range(10):  # warm-up: connections from the broker to the controller
            await create_one(conn, f"warmup-{i}")
        latencies = []
        start = time.perf_counter()
        for i in range(count):
            latencies.append(await create_one(conn, f"seq-{i}"))
        wall = time.perf_counter() - start
    finally:
        conn.close()
    samples = [round(1000 * t, 2) for t in latencies]
    return {
        "creates_s": count / wall,
        "wall_s": wall,
        **latency_summary(latencies),
        "samples_ms": samples,
    }


def confluent_sequential(bootstrap: str, count: int) -> dict[str, Any]:
    """The same creates through librdkafka's AdminClient, one future at a time."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": CLIENT_ID})

    def create(name: str) -> float:
        start = time.perf_counter()
        future = admin.create_topics([NewTopic(name, 1, 3)], request_timeout=30)[name]
        future.result(timeout=30)
        return time.perf_counter() - start

    for i in range(3):
        create(f"ck-warmup-{i}")
    start = time.perf_counter()
    latencies = [create(f"ck-seq-{i}") for i in range(count)]
    wall = time.perf_counter() - start
    return {"creates_s": count / wall, "wall_s": wall, **latency_summary(latencies)}


# --- step 2: visibility -------------------------------------------------------------------------


async def seen_after(conn: KafkaConnection, topic: str, start: float) -> float:
    """Seconds from ``start`` until Metadata on ``conn`` shows ``topic`` with a leader."""
    request = metadata_request([topic])
    async with asyncio.timeout(VISIBLE_TIMEOUT_S):
        while True:
            response = await conn.send(request, METADATA_VERSION)
            assert isinstance(response, MetadataResponse)
            if has_leader(response, topic):
                return time.perf_counter() - start


async def bench_visibility(cluster: Cluster, count: int) -> dict[str, Any]:
    creator = await connect(cluster.brokers[0])
    pollers = [await connect(b) for b in cluster.brokers]
    visible: list[float] = []
    per_broker: list[list[float]] = [[] for _ in pollers]
    try:
        for i in range(count):
            name = f"vis-{i}"
            await create_one(creator, name)
            start = time.perf_counter()
            try:
                seen = await asyncio.gather(*(seen_after(c, name, start) for c in pollers))
            except TimeoutError:
                raise StepError(
                    f"{name} not on every broker after {VISIBLE_TIMEOUT_S:g} s"
                ) from None
            visible.append(max(seen))
            for samples, s in zip(per_broker, seen, strict=True):
                samples.append(s)
    finally:
        for conn in [creator, *pollers]:
            conn.close()
    out: dict[str, Any] = latency_summary(visible)
    out["per_broker_p99_ms"] = {
        b.spec.name: latency_summary(s)["p99_ms"]
        for b, s in zip(cluster.brokers, per_broker, strict=True)
    }
    return out


# --- step 3: batched partitions -----------------------------------------------------------------


async def metadata_offset(node: Node) -> int:
    return int((await http_get(node, "/v1/cluster"))["metadata_offset"])


async def bench_batch(cluster: Cluster, topics: int, partitions: int, rf: int) -> dict[str, Any]:
    batch = [(f"batch-{topics}x{partitions}-{i}", partitions, rf) for i in range(topics)]
    total = topics * partitions
    conn = await connect(cluster.brokers[0])
    try:
        start = time.perf_counter()
        errors = await create_topics(conn, batch)
        created_s = time.perf_counter() - start
    finally:
        conn.close()
    if errors:
        await batch_failed(cluster, batch, errors, created_s)
    leader = cluster.controller(cluster.leader() or 0)
    committed = await metadata_offset(leader)

    async def on_all_brokers() -> bool:
        offsets = await asyncio.gather(*(metadata_offset(b) for b in cluster.brokers))
        return min(offsets) >= committed

    await wait_until(f"the {total} partitions on every broker", on_all_brokers, BATCH_VISIBLE_S)
    visible_s = time.perf_counter() - start
    await asyncio.gather(*(wait_responsive(b) for b in cluster.brokers))
    responsive_s = time.perf_counter() - start
    await wait_cluster_formed(cluster)  # a broker busy with the batch may have been fenced
    return {
        "partitions": total,
        "replicas": total * rf,
        "create_s": created_s,
        "partitions_s": total / created_s,
        "visible_on_all_brokers_s": visible_s,
        "brokers_responsive_s": responsive_s,
    }


async def batch_failed(
    cluster: Cluster, batch: list[tuple[str, int, int]], errors: list[str], after_s: float
) -> None:
    """Raise the batch's StepError, saying whether its topics exist all the same (a broker
    answers REQUEST_TIMED_OUT when the controller takes longer than its forward deadline)."""
    total = sum(partitions for _, partitions, _ in batch)
    message = (
        f"batched create of {total:,} partitions answered {', '.join(sorted(set(errors)))}"
        f" after {after_s:.1f} s"
    )
    await asyncio.gather(*(wait_responsive(b) for b in cluster.brokers))
    conn = await connect(cluster.brokers[0])
    try:
        response = await conn.send(metadata_request([n for n, _, _ in batch]), METADATA_VERSION)
    finally:
        conn.close()
    assert isinstance(response, MetadataResponse)
    if all(has_leader(response, name) for name, _, _ in batch):
        message += ", yet every topic of the batch exists"
    raise StepError(message)


async def wait_responsive(node: Node) -> None:
    """Until ``node`` answers ApiVersions within 50 ms five times in a row (100 ms apart):
    a broker may still be opening the batch's partition logs after its image has it."""
    conn = await connect(node)
    request = ApiVersionsRequest(client_software_name=CLIENT_ID, client_software_version="1")
    try:
        async with asyncio.timeout(BATCH_VISIBLE_S):
            quick = 0
            while quick < 5:
                start = time.perf_counter()
                await conn.send(request, API_VERSIONS_VERSION)
                quick = quick + 1 if time.perf_counter() - start < 0.05 else 0
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise StepError(f"{node.name} still slow {BATCH_VISIBLE_S:g} s after the batch") from None
    finally:
        conn.close()


# --- step 4: a large image ----------------------------------------------------------------------


async def raw_metadata(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """One full Metadata v12 round trip on a plain socket: the response frame, not decoded."""
    header = RequestHeader(
        request_api_key=METADATA_KEY,
        request_api_version=METADATA_VERSION,
        correlation_id=1,
        client_id=CLIENT_ID,
    )
    chunks = encode_request(header, metadata_request(None))
    writer.writelines(c for c in chunks if not isinstance(c, FileRegion))  # none in a request
    await writer.drain()
    size = int.from_bytes(await reader.readexactly(4), "big")
    return await reader.readexactly(size)


async def bench_image(cluster: Cluster, requests: int) -> dict[str, Any]:
    await asyncio.gather(*(wait_responsive(b) for b in cluster.brokers))  # steady state
    host, port = cluster.brokers[0].address
    reader, writer = await asyncio.open_connection(host, port)
    round_trips = []
    try:
        frame = await raw_metadata(reader, writer)  # warm-up
        for _ in range(requests):
            start = time.perf_counter()
            frame = await raw_metadata(reader, writer)
            round_trips.append(time.perf_counter() - start)
    finally:
        writer.close()
    start = time.perf_counter()
    response = decode_response(METADATA_KEY, METADATA_VERSION, frame)[1]
    decode_s = time.perf_counter() - start
    assert isinstance(response, MetadataResponse)
    out: dict[str, Any] = latency_summary(round_trips)
    out["topics"] = len(response.topics)
    out["partitions"] = sum(len(t.partitions) for t in response.topics)
    out["response_bytes"] = len(frame) + 4
    out["client_decode_ms"] = 1000 * decode_s
    out["samples_ms"] = [round(1000 * t, 2) for t in round_trips]
    out["rss_mib"] = cluster.rss()
    return out


# --- step 5: failover ---------------------------------------------------------------------------


async def create_until_ok(cluster: Cluster, name: str) -> int:
    """Send CreateTopics through a broker until one succeeds; the number of attempts."""
    attempts = 0
    conn: KafkaConnection | None = None
    while True:
        attempts += 1
        try:
            conn = (
                conn if conn is not None and not conn.closed else await connect(cluster.brokers[0])
            )
            errors = await create_topics(conn, [(name, 1, 3)])
        except OSError:
            errors = ["connection failed"]
        if not errors or errors == ["TOPIC_ALREADY_EXISTS"]:  # an earlier attempt committed
            if conn is not None:
                conn.close()
            return attempts
        await asyncio.sleep(0.005)


async def new_leader_after(cluster: Cluster, old: int, start: float) -> float:
    while await asyncio.to_thread(cluster.leader) in (None, old):
        await asyncio.sleep(0.01)
    return time.perf_counter() - start


async def failover_run(cluster: Cluster, run: int) -> dict[str, Any]:
    old = await wait_until("an active controller", lambda: asyncio.to_thread(cluster.leader), 30)
    victim = cluster.controller(old)
    start = time.perf_counter()
    victim.kill()
    election = asyncio.ensure_future(new_leader_after(cluster, old, start))
    try:
        async with asyncio.timeout(FAILOVER_TIMEOUT_S):
            attempts = await create_until_ok(cluster, f"failover-{run}")
            create_s = time.perf_counter() - start
            elected_s = await election
    except TimeoutError:
        message = f"no create succeeded {FAILOVER_TIMEOUT_S:g} s after killing controller {old}"
        raise StepError(message) from None
    finally:
        election.cancel()
    log(
        f"  run {run}: killed controller {old}; create ok after {create_s:.3f} s"
        f" ({attempts} attempts), new leader {cluster.leader_id} seen after {elected_s:.3f} s"
    )
    restart_s = await restart_controller(cluster, victim)
    return {
        "killed": old,
        "new_leader": cluster.leader_id,
        "create_ok_s": create_s,
        "elected_s": elected_s,
        "attempts": attempts,
        "restart_caught_up_s": restart_s,
    }


async def restart_controller(cluster: Cluster, node: Node) -> float:
    """Start ``node`` again; seconds until READY and its image reaches the leader's."""
    start = time.perf_counter()
    node.launch()
    await asyncio.to_thread(node.wait_ready)

    async def caught_up() -> bool:
        leader = cluster.leader()
        if leader is None or leader == node.spec.node_id:
            return False
        target = await metadata_offset(cluster.controller(leader))
        view = await http_get(node, "/v1/cluster")
        return bool(view["controller"]["leader_id"] == leader and view["metadata_offset"] >= target)

    await wait_until(f"{node.name} caught up", caught_up, READY_TIMEOUT_S)
    await wait_cluster_formed(cluster)
    return time.perf_counter() - start


async def bench_failover(cluster: Cluster, runs: int) -> dict[str, Any]:
    results = [await failover_run(cluster, run) for run in range(runs)]
    times = [r["create_ok_s"] for r in results]
    elected = [r["elected_s"] for r in results]
    return {
        "runs": results,
        "create_ok_s": spread(times).as_dict(),
        "elected_s": spread(elected).as_dict(),
        "restart_caught_up_s": spread(r["restart_caught_up_s"] for r in results).as_dict(),
    }


# --- the run ------------------------------------------------------------------------------------


async def run_step(
    report: dict[str, Any], cluster: Cluster, key: str, step: Callable[[], Awaitable[Any]]
) -> bool:
    """Run one step into ``report['results'][key]``; on failure say which, with stderr tails."""
    log(f"step {key} ...")
    start = time.monotonic()
    try:
        async with asyncio.timeout(STEP_TIMEOUT_S):
            report["results"][key] = await step()
    except (StepError, OSError, TimeoutError, AssertionError) as exc:
        return step_failed(report, cluster, key, exc)
    log(f"step {key} done in {time.monotonic() - start:.1f} s")
    return True


def batch_steps(
    cluster: Cluster, cfg: dict[str, Any], report: dict[str, Any]
) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    """A batch and its image step for each batch whose partition logs fit in the brokers'
    open-file limit (each replica holds ``FDS_PER_REPLICA`` files open); the rest skipped."""
    budget = (nofile_limit() - FD_MARGIN) // FDS_PER_REPLICA
    # every single-partition RF 3 topic made before the batches puts a replica on each broker
    replicas = cfg["creates"] + cfg["confluent_creates"] + cfg["visibility"] + 20
    steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = []
    for topics, partitions, rf in cfg["batches"]:
        tag = f"{topics}x{partitions}_rf{rf}"
        per_broker = math.ceil(topics * partitions * rf / len(cluster.brokers))
        if replicas + per_broker > budget:
            report["skipped"][f"batch_{tag}"] = (
                f"{replicas + per_broker:,} replicas per broker would need about"
                f" {FDS_PER_REPLICA * (replicas + per_broker) + FD_MARGIN:,} open files;"
                f" RLIMIT_NOFILE is {nofile_limit():,}"
            )
            continue
        replicas += per_broker
        steps.append(
            (f"batch_{tag}", functools.partial(bench_batch, cluster, topics, partitions, rf))
        )
        steps.append((f"image_{tag}", lambda: bench_image(cluster, cfg["metadata_requests"])))
    return steps


async def run_all(cluster: Cluster, cfg: dict[str, Any], report: dict[str, Any]) -> None:
    await wait_cluster_formed(cluster)
    report["results"]["idle"] = await idle_usage(cluster, cfg["idle_s"])
    steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("sequential", lambda: bench_sequential(cluster, cfg["creates"])),
        (
            "sequential_confluent",
            lambda: asyncio.to_thread(
                confluent_sequential, cluster.bootstrap, cfg["confluent_creates"]
            ),
        ),
        ("visibility", lambda: bench_visibility(cluster, cfg["visibility"])),
        *batch_steps(cluster, cfg, report),
        ("failover", lambda: bench_failover(cluster, cfg["failovers"])),
    ]
    if not cfg["confluent_creates"]:
        del steps[1]
    for key, reason in report["skipped"].items():
        log(f"skipping {key}: {reason}")
    for key, step in steps:
        if not await run_step(report, cluster, key, step):
            log("a node died: stopping")
            return


# --- report -------------------------------------------------------------------------------------


def image_at_10k(results: dict[str, Any]) -> dict[str, Any]:
    """The first large-image result with at least 10,000 partitions (the target's size)."""
    images = [v for k, v in results.items() if k.startswith("image_")]
    return next((r for r in images if r["partitions"] >= 10_000), {})


def targets(report: Report) -> list[Target]:
    """(target, measured, PASS/MISS/n/a/skipped)."""
    results = report["results"]
    out = []
    for key, metric, label, higher, bound in TARGETS:
        name = f"{label} {'>=' if higher else '<='} {bound:g}"
        found = image_at_10k(results) if key == IMAGE_10K else results.get(key, {})
        value = found.get(metric)
        if value is None:
            out.append((name, "-", "skipped" if key in report["skipped"] else "n/a"))
            continue
        if isinstance(value, dict):  # over runs: judged on the median
            value = Spread(tuple(value["runs"]))
        out.append(target_row(name, value, bound, higher_is_better=higher))
    return out


def by_role(values: dict[str, dict[str, float | None]], spec: str) -> str:
    """``controllers a b c / brokers d e f`` with ``spec`` formatting each value."""
    return " / ".join(
        f"{role} " + " ".join("-" if v is None else format(v, spec) for v in nodes.values())
        for role, nodes in values.items()
    )


def result_rows(results: dict[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    if r := results.get("idle"):
        rows.append(("idle CPU (cores)", by_role(r["cores"], ".2f")))
        rows.append(("idle RSS (MiB)", by_role(r["rss_mib"], ".0f")))
    for key, label in (("sequential", "ours"), ("sequential_confluent", "confluent-kafka")):
        if r := results.get(key):
            rows.append(
                (
                    f"sequential creates ({label}, {r['n']})",
                    f"{r['creates_s']:.1f}/s  " + latency_text(r),
                )
            )
    if r := results.get("visibility"):
        per = "  ".join(f"{k} {v:.1f}" for k, v in r["per_broker_p99_ms"].items())
        rows.append((f"visible on all brokers ({r['n']} topics)", latency_text(r)))
        rows.append(("  p99 per broker (ms)", per))
    rows += batch_rows(results)
    if r := results.get("failover"):
        rows.append(
            (
                "failover: kill -9 to a create, median",
                Spread(tuple(r["create_ok_s"]["runs"])).text(".3f", "s"),
            )
        )
        elected, restart = r["elected_s"]["runs"], r["restart_caught_up_s"]["runs"]
        rows.append(("  new leader reported, median", Spread(tuple(elected)).text(".3f", "s")))
        rows.append(("  restart to caught up, median", Spread(tuple(restart)).text(".2f", "s")))
    return rows


def batch_rows(results: dict[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    keys = [k for k in results if k.startswith(("batch_", "image_"))]
    for tag in dict.fromkeys(k.split("_", 1)[1] for k in keys):
        if r := results.get(f"batch_{tag}"):
            rows.append(
                (
                    f"batched create {tag} ({r['partitions']:,} partitions)",
                    f"{r['partitions_s']:,.0f} partitions/s  ({r['create_s']:.3f} s; in every"
                    f" broker's image after {r['visible_on_all_brokers_s']:.1f} s, brokers"
                    f" responsive after {r['brokers_responsive_s']:.1f} s)",
                )
            )
        if image := results.get(f"image_{tag}"):
            rows.append(
                (
                    f"  full Metadata v12, {image['partitions']:,} partitions ({image['n']})",
                    latency_text(image, 1) + f"  ({image['response_bytes'] / 1e6:.2f} MB;"
                    f" client decode {image['client_decode_ms']:.0f} ms)",
                )
            )
            rows.append(("  RSS (MiB)", by_role(image["rss_mib"], ".0f")))
    return rows


def render(report: Report) -> str:
    return bench_cluster.render(report, result_rows(report["results"]), target_width=52)


def parse_batches(text: str) -> list[tuple[int, int, int]]:
    batches = []
    for item in filter(None, text.split(",")):
        parts = item.strip().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"{item!r}: use TOPICSxPARTITIONSxRF, e.g. 10x1000x3")
        topics, partitions, rf = map(int, parts)
        batches.append((topics, partitions, rf))
    return batches


def parse_args() -> argparse.Namespace:
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--creates", type=int, help="sequential creates (our client)")
        parser.add_argument("--confluent-creates", type=int, help="sequential creates (0: skip)")
        parser.add_argument("--visibility", type=int, help="topics timed until on every broker")
        parser.add_argument("--failovers", type=int, help="kill -9 runs of the active controller")
        parser.add_argument(
            "--metadata-requests", type=int, help="full Metadata requests per image"
        )
        parser.add_argument(
            "--batches",
            type=parse_batches,
            help="batched creates as TOPICSxPARTITIONSxRF,... (default 1x10000x1,10x1000x3)",
        )

    return bench_cluster.parse_args(__doc__, "smaller counts, about 20 s", add_arguments)


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    return bench_cluster.config_of(args, FULL, QUICK)


def bench(root: Path, cfg: dict[str, Any], log_level: str) -> Report:
    report: Report = {"machine": bench_cluster.machine_info(), "config": cfg}
    report.update(results={}, errors={}, skipped={})
    raise_nofile_limit()
    cluster = Cluster(root, log_level)
    return bench_cluster.bench_on(
        cluster, report, root, lambda: asyncio.run(run_all(cluster, cfg, report))
    )


def main() -> int:
    return bench_cluster.main("bench-controller", parse_args, config_of, bench, targets, render)


if __name__ == "__main__":
    raise SystemExit(main())
