"""Journal size and controller restart time after many metadata changes (issue 16, item 4).

    python scripts/bench_quorum_compaction.py [--changes 100000] [--topics 1000]
        [--restarts 3] [--journal-max-entries N] [--json PATH] [--data-dir DIR] [--quick]

One controller and one broker, ``python -m kraft.cli server`` processes planned by
``kraft.node.dev_cluster`` (``bench_cluster``). Steps, side by side in one run:

1. ``--topics`` topics (1 partition, RF 1) are created, then the controller is restarted
   ``--restarts`` times (SIGTERM, relaunch): the restart time of a controller whose image
   holds those topics and whose history is short (the baseline).
2. ``--changes`` metadata changes: IncrementalAlterConfigs requests, each setting
   ``retention.ms`` of ``--per-request`` topics (round robin), sent to the broker (which
   forwards them to the controller) by 16 clients at once: every change is one ConfigRecord,
   every request one controller command and one Raft entry (the controller runs commands
   one at a time, so one change per request would take ~10 minutes for 100,000). The image
   stays the same size; the history grows.
3. The controller is restarted ``--restarts`` times again.
4. The worst case: where the journal was compacted last depends on the history, so more
   commands (of ``--per-request`` changes) are sent until the journal holds
   ``--journal-max-entries`` minus
   ~2% (just below its next compaction: the most a restart replays), and the controller is
   restarted ``--restarts`` times once more.

Restart time: from the relaunch to the moment the controller's image (``metadata_offset`` of
its ``/v1/cluster``) is back at the offset it had before, Python's own start included. After
each restart the broker's image must reach the controller's (brokers tail the log and fetch
the snapshot when they are behind it). Journal bytes: the Raft journal file (apparent size
and allocated blocks), its compaction dump and the ``.meta`` file, measured at each restart.
Figures are medians with their range (min-max) over the restarts.

Figures (2026-11-26, 2 vCPU x86_64, Python 3.11.7; 1,000 topics, 100,000 config changes in
10,000 commands, 3 restarts each; the journal is replaced by a new file at each compaction):

===============================  ===============  ===============  ===============
                                 short history    100,000 changes  journal fullest
===============================  ===============  ===============  ===============
restart to the same image (s)    0.81             1.07             1.17
                                 (0.77-0.97)      (1.02-1.07)      (1.13-1.24)
raft.journal entries             18               28               4,904
raft.journal, apparent           218 KB           36 KB            4.6 MB
raft.journal, allocated          135 KB           20 KB            3.6 MB
raft.dump                        --               167 KB           167 KB
===============================  ===============  ===============  ===============

"Journal fullest" is the worst case of the default: 4,904 entries of 10 changes each, just
below the next compaction at 5,000. An earlier run with ``--journal-max-entries 1000000000``
(no compaction, ~10,000 entries, a 13.9 MB journal) restarted in 4.34 (3.90-4.49) s; before
the journal was replaced at compaction (pysyncobj rewrote it in place and never shrank it)
the file stayed at 6.96 MB after the 100,000 changes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cluster import Cluster, Node, StepError, log
from bench_stats import Spread, spread
from pysyncobj.journal import FileJournal  # type: ignore[import-untyped]

from broker.kafka_client import KafkaConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka_protocol.types import TopicName

CLIENTS = 16
TOPIC_BATCH = 100
RESTART_TIMEOUT_S = 120.0
TOPIC_RESOURCE = 2
SET = 0


def find_raft_dir(controller: Node) -> Path:
    for path in controller.config.parent.rglob("raft.journal"):
        return path.parent
    raise StepError("no raft.journal under the controller's directory", [controller])


def journal_bytes(controller: Node) -> dict[str, int]:
    raft_dir = find_raft_dir(controller)
    out: dict[str, int] = {}
    for path in sorted(raft_dir.iterdir()):
        if path.is_file():
            stat = path.stat()
            out[path.name] = stat.st_size
            out[f"{path.name} (allocated)"] = stat.st_blocks * 512
    return out


def journal_entries(controller: Node) -> int:
    """Entries in a stopped controller's Raft journal, read by pysyncobj on a copy."""
    raft_dir = find_raft_dir(controller)
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "raft.journal"
        shutil.copy(raft_dir / "raft.journal", copy)
        journal = FileJournal(str(copy))
        try:
            return len(journal)
        finally:
            journal._destroy()


def metadata_offset(node: Node) -> int:
    return int(node.get("/v1/cluster")["metadata_offset"])


async def create_topics(conn: KafkaConnection, names: list[str]) -> None:
    request = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=TopicName(n), num_partitions=1, replication_factor=1
            )
            for n in names
        ],
        timeout_ms=30_000,
    )
    response = await conn.send(request, 7)
    assert isinstance(response, CreateTopicsResponse)
    bad = [t for t in response.topics if t.error_code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS)]
    if bad:
        raise StepError(f"CreateTopics: {bad[0].name} {ErrorCode.from_code(bad[0].error_code)}")


async def change_configs(broker: Node, topics: list[str], changes: int, per_request: int) -> float:
    """``changes`` config changes, ``per_request`` per IncrementalAlterConfigs; returns
    changes per second."""
    counter = iter(range(0, changes, per_request))
    start = time.perf_counter()

    async def client(worker: int) -> None:
        conn = await KafkaConnection.open(*broker.address, f"bench-compaction-{worker}")
        try:
            for first in counter:
                resources = [
                    IncrementalAlterConfigsRequest.AlterConfigsResource(
                        resource_type=TOPIC_RESOURCE,
                        resource_name=topics[i % len(topics)],
                        configs=[
                            IncrementalAlterConfigsRequest.AlterableConfig(
                                name="retention.ms", config_operation=SET, value=str(3_600_000 + i)
                            )
                        ],
                    )
                    for i in range(first, min(changes, first + per_request))
                ]
                request = IncrementalAlterConfigsRequest(resources=resources)
                response = await conn.send(request, 1)
                assert isinstance(response, IncrementalAlterConfigsResponse)
                for answer in response.responses:
                    if answer.error_code != ErrorCode.NONE:
                        name = ErrorCode.from_code(answer.error_code).name
                        raise StepError(f"change of {answer.resource_name}: {name}")
                if first % 10_000 == 0 and first:
                    log(f"  {first} changes")
        finally:
            conn.close()

    await asyncio.gather(*(client(w) for w in range(CLIENTS)))
    return changes / (time.perf_counter() - start)


def restart(controller: Node, broker: Node) -> dict[str, Any]:
    """SIGTERM, relaunch, and time until the image is back where it was."""
    before = metadata_offset(controller)
    files = journal_bytes(controller)
    controller.terminate()
    controller.wait(30)
    entries = journal_entries(controller)
    start = time.perf_counter()
    controller.launch()
    controller.wait_ready(RESTART_TIMEOUT_S)
    ready_s = time.perf_counter() - start
    deadline = time.monotonic() + RESTART_TIMEOUT_S
    while True:
        try:
            if metadata_offset(controller) >= before:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise StepError(f"controller image not back at {before}", [controller])
        time.sleep(0.01)
    caught_up_s = time.perf_counter() - start
    target = metadata_offset(controller)
    while metadata_offset(broker) < target:
        if time.monotonic() > deadline:
            raise StepError(f"broker image not at {target} after the restart", [broker])
        time.sleep(0.05)
    return {
        "offset": before,
        "ready_s": ready_s,
        "restart_s": caught_up_s,
        "files": files,
        "journal_entries": entries,
    }


def restarts(cluster: Cluster, count: int) -> list[dict[str, Any]]:
    controller, broker = cluster.controllers[0], cluster.brokers[0]
    runs = []
    for run in range(count):
        result = restart(controller, broker)
        log(
            f"  restart {run + 1}: {result['restart_s']:.2f} s to the image at offset "
            f"{result['offset']}, journal {result['files'].get('raft.journal', 0)} bytes, "
            f"{result['journal_entries']} entries"
        )
        runs.append(result)
    return runs


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    journal = [r["files"].get("raft.journal", 0) for r in runs]
    allocated = [r["files"].get("raft.journal (allocated)", 0) for r in runs]
    dump = [r["files"].get("raft.dump", 0) for r in runs]
    return {
        "restart_s": spread(r["restart_s"] for r in runs),
        "ready_s": spread(r["ready_s"] for r in runs),
        "journal_bytes": spread(journal),
        "journal_entries": spread(r["journal_entries"] for r in runs),
        "journal_allocated_bytes": spread(allocated),
        "dump_bytes": spread(dump),
        "offset": runs[-1]["offset"],
        "runs": runs,
    }


async def run(cluster: Cluster, args: argparse.Namespace) -> dict[str, Any]:
    broker = cluster.brokers[0]
    names = [f"bench-compaction-{i:05d}" for i in range(args.topics)]
    conn = await KafkaConnection.open(*broker.address, "bench-compaction")
    try:
        for start in range(0, len(names), TOPIC_BATCH):
            await create_topics(conn, names[start : start + TOPIC_BATCH])
    finally:
        conn.close()
    log(f"{args.topics} topics created; baseline restarts")
    baseline = await asyncio.to_thread(restarts, cluster, args.restarts)
    log(f"{args.changes} metadata changes")
    rate = await change_configs(broker, names, args.changes, args.per_request)
    log(f"  {rate:.0f} changes/s; restarts after them")
    after = await asyncio.to_thread(restarts, cluster, args.restarts)
    entries = after[-1]["journal_entries"]
    fill = max(0, args.journal_max_entries - args.journal_max_entries // 50 - entries)
    log(f"{fill} more commands: the journal just below its next compaction")
    await change_configs(broker, names, fill * args.per_request, args.per_request)
    fullest = await asyncio.to_thread(restarts, cluster, args.restarts)
    return {
        "topics": args.topics,
        "changes": args.changes,
        "changes_per_s": round(rate),
        "changes_per_request": args.per_request,
        "journal_max_entries": args.journal_max_entries,
        "baseline": summary(baseline),
        "after_changes": summary(after),
        "fullest_journal": summary(fullest),
        "fill_commands": fill,
    }


def render(result: dict[str, Any]) -> str:
    rows = [
        ("", "after topic creation", f"after {result['changes']:,} changes", "journal fullest"),
        (
            "metadata offset",
            str(result["baseline"]["offset"]),
            str(result["after_changes"]["offset"]),
            str(result["fullest_journal"]["offset"]),
        ),
    ]
    for key, label, spec in (
        ("restart_s", "restart to the same image (s)", ".2f"),
        ("ready_s", "restart to READY (s)", ".2f"),
        ("journal_entries", "raft.journal (entries)", ",.0f"),
        ("journal_bytes", "raft.journal (bytes)", ",.0f"),
        ("journal_allocated_bytes", "raft.journal allocated (bytes)", ",.0f"),
        ("dump_bytes", "raft.dump (bytes)", ",.0f"),
    ):
        rows.append(
            (
                label,
                *(
                    result[column][key].text(spec)
                    for column in ("baseline", "after_changes", "fullest_journal")
                ),
            )
        )
    width = max(len(r[0]) for r in rows)
    lines = [
        f"{result['topics']} topics, {result['changes']:,} config changes "
        f"({result['changes_per_request']} per request) at "
        f"{result['changes_per_s']}/s, journal compacted above "
        f"{result['journal_max_entries']} entries; medians (min-max) of the restarts",
    ]
    lines += [f"{a:<{width}}  {b:<34}  {c:<34}  {d}" for a, b, c, d in rows]
    return "\n".join(lines)


def _as_json(value: object) -> object:
    return value.as_dict() if isinstance(value, Spread) else str(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--per-request", type=int, default=10)
    parser.add_argument("--journal-max-entries", type=int, default=5_000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--quick", action="store_true", help="10,000 changes, 100 topics")
    args = parser.parse_args()
    if args.quick:
        args.changes, args.topics = 10_000, 100
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    root.mkdir(parents=True, exist_ok=True)
    overrides = {"controller.quorum.journal.max.entries": str(args.journal_max_entries)}
    cluster = Cluster(root, os.environ.get("KRAFT_LOG_LEVEL", "INFO"), 1, 1, overrides)
    try:
        cluster.start()
        result = asyncio.run(run(cluster, args))
    except StepError as exc:
        log(f"FAILED: {exc}")
        for node in exc.nodes or cluster.nodes:
            log(f"--- {node.name}\n" + "\n".join(node.tail()))
        return 1
    finally:
        cluster.stop()
    print(render(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=_as_json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
