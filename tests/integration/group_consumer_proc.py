"""One consumer-group member, run as its own process so that a test can ``kill -9`` it.

    python tests/integration/group_consumer_proc.py --client confluent|kafka-python|aiokafka
        --bootstrap HOST:PORT,... --group G --topic T [--client-id ID] [--assignor NAME]
        [--session-timeout-ms MS] [--heartbeat-ms MS] [--commit sync|auto|none]
        [--max-batch N] [--stop-after N]

It subscribes to ``T`` in group ``G`` (``auto.offset.reset=earliest``) and polls until SIGTERM
(or until it has consumed ``--stop-after`` records), then closes the consumer cleanly: a
LeaveGroup, and with ``--commit auto`` a final commit.  With ``--commit sync`` every polled
batch is committed synchronously after it has been reported (at-least-once).

What it sees goes to stdout as JSON lines, each flushed at once, so a test reads the member's
state as it changes and still has everything reported before a SIGKILL:

    {"ev": "started", "client": ..., "pid": ...}
    {"ev": "assignment", "partitions": [0, 3]}          whenever the full assignment changes
    {"ev": "revoked", "partitions": [...]}              from the client's rebalance callback
    {"ev": "records", "recs": [[partition, offset, value], ...]}
    {"ev": "committed", "offsets": {"0": 17, ...}}      after a successful synchronous commit
    {"ev": "commit_failed", "error": "..."}             e.g. during a rebalance: retried later
    {"ev": "closed"}                                    after the clean close

Only the client libraries are imported: it runs by path, outside the test package.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from typing import Any

POLL_S = 0.2
REQUEST_TIMEOUT_MS = 10_000
MAX_POLL_INTERVAL_MS = 20_000  # the rebalance timeout of librdkafka and kafka-python members


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"ev": event, **fields}), flush=True)


class Reporter:
    """Turns what a client returned into events; remembers the last assignment reported."""

    def __init__(self, stop_after: int) -> None:
        self.assignment: list[int] | None = None
        self.consumed = 0
        self.stop_after = stop_after

    def assignment_now(self, partitions: list[int]) -> None:
        partitions = sorted(partitions)
        if partitions != self.assignment:
            self.assignment = partitions
            emit("assignment", partitions=partitions)

    def records(self, recs: list[tuple[int, int, str]]) -> dict[int, int]:
        """Report a batch; the offsets to commit after it (partition -> next offset)."""
        if not recs:
            return {}
        emit("records", recs=recs)
        self.consumed += len(recs)
        ends: dict[int, int] = {}
        for partition, offset, _ in recs:
            ends[partition] = max(ends.get(partition, 0), offset + 1)
        return ends

    def done(self) -> bool:
        return 0 < self.stop_after <= self.consumed


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode(errors="replace")


# --- confluent-kafka (librdkafka) ---------------------------------------------------------------


def run_confluent(args: argparse.Namespace, stopping: list[bool], reporter: Reporter) -> None:
    from confluent_kafka import Consumer, KafkaException

    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.client_id,
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": args.heartbeat_ms,
        "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": args.commit == "auto",
        "auto.commit.interval.ms": 500,
        "fetch.wait.max.ms": 100,
        "socket.timeout.ms": REQUEST_TIMEOUT_MS,
        "reconnect.backoff.max.ms": 500,
        "topic.metadata.refresh.interval.ms": 2000,
    }
    if args.assignor:
        conf["partition.assignment.strategy"] = args.assignor
    consumer = Consumer(conf)

    def on_revoke(_consumer: Any, partitions: list[Any]) -> None:
        emit("revoked", partitions=sorted(tp.partition for tp in partitions))

    def on_lost(_consumer: Any, partitions: list[Any]) -> None:
        emit("lost", partitions=sorted(tp.partition for tp in partitions))

    consumer.subscribe([args.topic], on_revoke=on_revoke, on_lost=on_lost)
    while not stopping[0] and not reporter.done():
        msgs = consumer.consume(args.max_batch, timeout=POLL_S)
        recs = []
        for msg in msgs:
            if msg.error() is not None:
                emit("error", error=str(msg.error()))
                continue
            recs.append((msg.partition(), msg.offset(), _text(msg.value())))
        reporter.assignment_now([tp.partition for tp in consumer.assignment()])
        ends = reporter.records(recs)
        if ends and args.commit == "sync":
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                emit("commit_failed", error=str(exc))
            else:
                emit("committed", offsets=ends)
    consumer.close()


# --- kafka-python -------------------------------------------------------------------------------


def run_kafka_python(args: argparse.Namespace, stopping: list[bool], reporter: Reporter) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.errors import KafkaError

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    conf: dict[str, Any] = {}
    if args.assignor:
        conf["partition_assignment_strategy"] = [assignors[a] for a in args.assignor.split(",")]

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            pass

    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap.split(","),
        group_id=args.group,
        client_id=args.client_id,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_ms,
        max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
        max_poll_records=args.max_batch,
        auto_offset_reset="earliest",
        enable_auto_commit=args.commit == "auto",
        auto_commit_interval_ms=500,
        fetch_max_wait_ms=100,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        reconnect_backoff_max_ms=500,
        metadata_max_age_ms=2000,
        **conf,
    )
    consumer.subscribe([args.topic], listener=Listener())
    while not stopping[0] and not reporter.done():
        batches = consumer.poll(timeout_ms=int(POLL_S * 1000))
        recs = [
            (r.partition, r.offset, _text(r.value)) for records in batches.values() for r in records
        ]
        reporter.assignment_now([tp.partition for tp in consumer.assignment()])
        ends = reporter.records(recs)
        if ends and args.commit == "sync":
            try:
                consumer.commit()
            except KafkaError as exc:
                emit("commit_failed", error=repr(exc))
            else:
                emit("committed", offsets=ends)
    consumer.close()


# --- aiokafka -----------------------------------------------------------------------------------


async def _aiokafka(args: argparse.Namespace, stopping: list[bool], reporter: Reporter) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.errors import KafkaError

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    conf: dict[str, Any] = {}
    if args.assignor:
        conf["partition_assignment_strategy"] = [assignors[a] for a in args.assignor.split(",")]

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        async def on_partitions_assigned(self, assigned: Any) -> None:
            pass

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, lambda: stopping.__setitem__(0, True))
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.client_id,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_ms,
        max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
        auto_offset_reset="earliest",
        enable_auto_commit=args.commit == "auto",
        auto_commit_interval_ms=500,
        fetch_max_wait_ms=100,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        metadata_max_age_ms=2000,
        **conf,
    )
    await consumer.start()
    consumer.subscribe([args.topic], listener=Listener())
    try:
        while not stopping[0] and not reporter.done():
            batches = await consumer.getmany(
                timeout_ms=int(POLL_S * 1000), max_records=args.max_batch
            )
            recs = [
                (r.partition, r.offset, _text(r.value))
                for records in batches.values()
                for r in records
            ]
            reporter.assignment_now([tp.partition for tp in consumer.assignment()])
            ends = reporter.records(recs)
            if ends and args.commit == "sync":
                try:
                    await consumer.commit()
                except KafkaError as exc:
                    emit("commit_failed", error=repr(exc))
                else:
                    emit("committed", offsets=ends)
    finally:
        await consumer.stop()


def run_aiokafka(args: argparse.Namespace, stopping: list[bool], reporter: Reporter) -> None:
    asyncio.run(_aiokafka(args, stopping, reporter))


# --- main ---------------------------------------------------------------------------------------

CLIENTS = {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--client", choices=sorted(CLIENTS), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--client-id", default="")
    parser.add_argument("--assignor", default="", help="a client's strategy name(s), comma-sep")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-ms", type=int, default=500)
    parser.add_argument("--commit", choices=("sync", "auto", "none"), default="sync")
    parser.add_argument("--max-batch", type=int, default=500)
    parser.add_argument("--stop-after", type=int, default=0, help="records; 0: until SIGTERM")
    args = parser.parse_args()
    args.client_id = args.client_id or f"{args.client}-{os.getpid()}"
    stopping = [False]
    signal.signal(signal.SIGTERM, lambda *_: stopping.__setitem__(0, True))
    emit("started", client=args.client, pid=os.getpid(), client_id=args.client_id)
    CLIENTS[args.client](args, stopping, Reporter(args.stop_after))
    emit("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
