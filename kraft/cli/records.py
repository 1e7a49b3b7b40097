"""``kraft produce`` and ``kraft consume``: records through the REST API, keys, values and
headers base64-encoded so that arbitrary bytes pass through unchanged.

    kraft produce TOPIC [--key-separator SEP] [--partition P] [--header k=v ...]   (stdin lines)
    kraft consume TOPIC [--from-beginning] [--partition P] [--max-messages N] [--timeout-ms T]
                  [--group G [--bootstrap-server HOST:PORT] [--consumer-property k=v ...]]

``consume --group`` is a member of the consumer group, as Kafka's
``kafka-console-consumer.sh --group`` is: it speaks the Kafka protocol to the brokers
(:mod:`kraft.cli.consume_group`, imported only then).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import select
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from kafka_protocol.clock import monotonic_s
from kraft.cli.arguments import bootstrap_addresses, key_value, non_negative_int, positive_int
from kraft.cli.output import fail, print_json
from kraft.cli.record_printer import Consumed, Printer
from kraft.cli.rest_client import REQUEST_TIMEOUT_S, AdminClient, AdminError, command, topic_path

PRODUCE_BATCH_RECORDS: Final = 500
PRODUCE_BATCH_BYTES: Final = 256 * 1024
CONSUME_BATCH_RECORDS: Final = 500
IDLE_POLL_MS: Final = 1000  # long-poll of a single-partition consume with nothing new
IDLE_POLL_MANY_MS: Final = 100  # per partition, when several share the polling
STDIN_CHUNK_BYTES: Final = 64 * 1024
MAX_LINE_BYTES: Final = 4 * 1024 * 1024  # one record; base64 of it fits the API's body limit


# --- produce ----------------------------------------------------------------------------------


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def read_bursts(fd: int) -> Iterator[tuple[list[bytes], bool]]:
    """Complete lines of ``fd`` as they arrive, and whether more input is waiting already (so a
    burst is batched while a line typed alone is sent at once).  Line ends (LF, CRLF) are
    dropped; a last line without one counts."""
    pending = b""
    while True:
        chunk = os.read(fd, STDIN_CHUNK_BYTES)
        if not chunk:
            if pending:
                yield [pending.removesuffix(b"\r")], False
            return
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        if len(pending) > MAX_LINE_BYTES:
            raise AdminError("INVALID_INPUT", f"a line is longer than {MAX_LINE_BYTES} bytes")
        yield [line.removesuffix(b"\r") for line in lines], _readable(fd)


def _readable(fd: int) -> bool:
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):  # not selectable (e.g. Windows console): send now
        return False


@dataclass
class Producer:
    """Batches records into ``POST /v1/topics/{name}/records`` requests."""

    client: AdminClient
    topic: str
    partition: int | None
    headers: dict[str, str]
    records: list[dict[str, Any]] = field(default_factory=list)
    size_bytes: int = 0
    sent: int = 0

    def add(self, key: bytes | None, value: bytes) -> None:
        record: dict[str, Any] = {"key": b64(key), "value": b64(value)}
        if self.headers:
            record["headers"] = {k: b64(v.encode()) for k, v in self.headers.items()}
        if self.partition is not None:
            record["partition"] = self.partition
        self.records.append(record)
        self.size_bytes += len(value) + len(key or b"")
        if len(self.records) >= PRODUCE_BATCH_RECORDS or self.size_bytes >= PRODUCE_BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Send the batch; records are never sent twice (a failed batch is not retried)."""
        records, self.records, self.size_bytes = self.records, [], 0
        if records:
            body = {"records": records, "encoding": "base64"}
            self.client.call("POST", topic_path(self.topic, "records"), body)
            self.sent += len(records)


def split_key(line: bytes, separator: bytes | None, number: int) -> tuple[bytes | None, bytes]:
    if separator is None:
        return None, line
    key, found, value = line.partition(separator)
    if not found:
        raise AdminError(
            "INVALID_INPUT", f"no key separator {separator.decode()!r} on line {number}"
        )
    return key, value


@command
def produce(args: argparse.Namespace, client: AdminClient) -> int:
    producer = Producer(client, args.topic, args.partition, dict(args.header or []))
    separator = None if args.key_separator is None else args.key_separator.encode()
    number = 0
    try:
        for lines, more_waiting in read_bursts(args.stdin_fd):
            for line in lines:
                number += 1
                producer.add(*split_key(line, separator, number))
            if not more_waiting:
                producer.flush()
    except BaseException:  # a bad line, Ctrl-C: send the lines before it, report the cause
        with contextlib.suppress(AdminError):
            producer.flush()
        raise
    producer.flush()
    if args.json:
        print_json({"topic": args.topic, "records": producer.sent})
    return 0


# --- consume ----------------------------------------------------------------------------------


@dataclass
class Consumer:
    """Reads committed records of some partitions, round robin, long-polling when idle."""

    client: AdminClient
    topic: str
    positions: dict[int, int | str]  # partition -> offset, or "earliest" / "latest"
    idle_poll_ms: int

    def poll(self, partition: int, max_records: int, wait_ms: int) -> list[Consumed]:
        query = {
            "offset": self.positions[partition],
            "max_records": max_records,
            "timeout_ms": wait_ms,
            "encoding": "base64",
        }
        path = topic_path(self.topic, "partitions", str(partition), "records")
        timeout_s = REQUEST_TIMEOUT_S + wait_ms / 1000
        data = self.client.call("GET", path, query=query, timeout_s=timeout_s).body
        self.positions[partition] = data["next_offset"]
        return [
            Consumed(
                partition,
                r["offset"],
                r["timestamp"],
                unb64(r["key"]),
                unb64(r["value"]),
                [(k, unb64(v)) for k, v in r["headers"].items()],
            )
            for r in data["records"]
        ]


def consume_loop(
    consumer: Consumer, printer: Printer, max_messages: int | None, timeout_ms: int | None
) -> None:
    """Poll until ``max_messages`` are printed or nothing arrived for ``timeout_ms``.  A pass
    over the partitions that found records is followed by one that does not wait; after an
    empty pass, each poll long-polls (``idle_poll_ms``, capped by what is left of the timeout)."""
    last_record = monotonic_s()
    idle = False
    while True:
        found = False
        for partition in list(consumer.positions):
            left = CONSUME_BATCH_RECORDS
            if max_messages is not None:
                left = min(left, max_messages - printer.count)
                if left <= 0:
                    return
            wait_ms = _wait_ms(idle, consumer.idle_poll_ms, timeout_ms, last_record)
            records = consumer.poll(partition, left, wait_ms)
            for record in records[:left]:
                printer.write(record)
            printer.out.flush()
            if records:
                last_record, found = monotonic_s(), True
        if timeout_ms is not None and (monotonic_s() - last_record) * 1000 >= timeout_ms:
            return
        idle = not found


def _wait_ms(idle: bool, idle_poll_ms: int, timeout_ms: int | None, last_record: float) -> int:
    if not idle:
        return 0
    if timeout_ms is None:
        return idle_poll_ms
    left = timeout_ms - (monotonic_s() - last_record) * 1000
    return max(0, min(idle_poll_ms, int(left)))


@command
def consume(args: argparse.Namespace, client: AdminClient) -> int:
    out = sys.stdout.buffer
    printer = Printer(out, args.json, args.print_key, args.key_separator.encode())
    if args.group is not None:
        if args.partition is not None:
            return fail(
                "INVALID_ARGUMENTS",
                "--partition cannot be combined with --group: a group member consumes the"
                " partitions the group assigns it",
            )
        from kraft.cli.consume_group import consume_in_group

        return _printing(printer, lambda: consume_in_group(args, client, printer))
    for option in ("bootstrap_server", "consumer_property"):
        if getattr(args, option):
            return fail("INVALID_ARGUMENTS", f"--{option.replace('_', '-')} needs --group")
    topic = client.call("GET", topic_path(args.topic)).body
    partitions = [p["partition"] for p in topic["partitions"]]
    if args.partition is not None:
        if args.partition not in partitions:
            return fail(
                "UNKNOWN_TOPIC_OR_PARTITION", f"{args.topic}-{args.partition} does not exist"
            )
        partitions = [args.partition]
    start: int | str = "earliest" if args.from_beginning else "latest"
    idle_poll = IDLE_POLL_MS if len(partitions) == 1 else IDLE_POLL_MANY_MS
    consumer = Consumer(client, args.topic, dict.fromkeys(partitions, start), idle_poll)

    def run() -> None:
        with contextlib.suppress(KeyboardInterrupt):
            consume_loop(consumer, printer, args.max_messages, args.timeout_ms)

    return _printing(printer, run)


def _printing(printer: Printer, run: Callable[[], None]) -> int:
    """Run a consume loop; then Kafka's closing line, or nothing once stdout is closed (the
    reader, e.g. `head`, has all it wanted)."""
    try:
        run()
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    print(f"Processed a total of {printer.count} messages", file=sys.stderr)
    return 0


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    prod = sub.add_parser("produce", parents=[common], help="send stdin lines as records")
    prod.add_argument("topic")
    prod.add_argument("--key-separator", metavar="SEP", help="lines are KEY SEP VALUE")
    prod.add_argument(
        "--partition", type=non_negative_int, metavar="P", help="default: by key, or spread"
    )
    prod.add_argument("--header", type=key_value, action="append", metavar="KEY=VALUE")
    prod.set_defaults(func=produce, stdin_fd=0)  # a test may read another descriptor

    cons = sub.add_parser("consume", parents=[common], help="print records of a topic")
    cons.add_argument("topic")
    cons.add_argument("--from-beginning", action="store_true", help="default: new records only")
    cons.add_argument(
        "--partition", type=non_negative_int, metavar="P", help="default: every partition"
    )
    cons.add_argument("--max-messages", type=positive_int, metavar="N")
    cons.add_argument(
        "--timeout-ms",
        type=non_negative_int,
        metavar="T",
        help="exit when no record arrived for T ms",
    )
    cons.add_argument("--print-key", action="store_true", help="print KEY<TAB>VALUE")
    cons.add_argument("--key-separator", default="\t", metavar="SEP", help="with --print-key")
    cons.add_argument(
        "--group",
        metavar="G",
        help="consume as a member of consumer group G: its partitions, from its committed"
        " offsets, committing what was printed (Kafka protocol, to the brokers)",
    )
    cons.add_argument(
        "--bootstrap-server",
        type=bootstrap_addresses,
        metavar="HOST:PORT",
        help="with --group: a broker (or a comma-separated list; default: the brokers the"
        " admin API lists)",
    )
    cons.add_argument(
        "--consumer-property",
        type=key_value,
        action="append",
        metavar="KEY=VALUE",
        help="with --group: session.timeout.ms, heartbeat.interval.ms, max.poll.interval.ms,"
        " partition.assignment.strategy, auto.offset.reset or client.id (repeatable)",
    )
    cons.set_defaults(func=consume)
