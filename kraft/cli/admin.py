"""The ``kraft`` admin commands: thin clients of the REST admin API (standard library only;
``elect-leaders`` uses the project's own Kafka client).

    kraft topics create NAME [--partitions N] [--replication-factor N] [--config k=v ...]
    kraft topics list | describe NAME | delete NAME
    kraft topics alter NAME [--set k=v ...] [--delete k ...] [--partitions N]
    kraft groups list | describe GROUP [--members | --state] | delete GROUP
    kraft groups reset-offsets GROUP (--topic T ... | --all-topics)
                 (--to-earliest | --to-latest | --to-datetime ISO | --to-offset N) [--execute]
    kraft produce TOPIC [--key-separator SEP] [--partition P] [--header k=v ...]   (stdin lines)
    kraft consume TOPIC [--from-beginning] [--partition P] [--max-messages N] [--timeout-ms T]
                  [--group G [--bootstrap-server HOST:PORT] [--consumer-property k=v ...]]
    kraft cluster status
    kraft elect-leaders --bootstrap-server HOST:PORT --election-type preferred|unclean
                        (--all-topic-partitions | --topic T [--partition P ...])

Every command but ``elect-leaders`` takes ``--admin URL`` (default ``$KRAFT_ADMIN`` or
``http://127.0.0.1:8080``); every command takes ``--json``.  ``elect-leaders`` speaks the Kafka
protocol to a broker instead (ElectLeaders, as Kafka's ``kafka-leader-election.sh`` does), which
forwards it to the active controller; so does ``consume --group`` (kraft/cli/consume_group.py), a
member of the consumer group like Kafka's ``kafka-console-consumer.sh --group``.  Output is a
table (or the records) by default.  A failure prints one line, ``kraft: <ERROR>: <message>``,
on stderr and exits with status 1; ``<ERROR>`` is the API's error name (a Kafka error such as
``TOPIC_ALREADY_EXISTS``), ``ADMIN_UNREACHABLE``, ``BROKER_UNREACHABLE`` or ``ELECTION_FAILED``.

Keys, values and headers travel base64-encoded, so ``produce`` and ``consume`` pass arbitrary
bytes through unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime
import json
import os
import select
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Final, NamedTuple

if TYPE_CHECKING:
    from broker.kafka_client import KafkaConnection

DEFAULT_ADMIN: Final = "http://127.0.0.1:8080"
REQUEST_TIMEOUT_S: Final = 30.0
PRODUCE_BATCH_RECORDS: Final = 500
PRODUCE_BATCH_BYTES: Final = 256 * 1024
CONSUME_BATCH_RECORDS: Final = 500
IDLE_POLL_MS: Final = 1000  # long-poll of a single-partition consume with nothing new
IDLE_POLL_MANY_MS: Final = 100  # per partition, when several share the polling
STDIN_CHUNK_BYTES: Final = 64 * 1024
MAX_LINE_BYTES: Final = 4 * 1024 * 1024  # one record; base64 of it fits the API's body limit


class AdminError(Exception):
    """A failed admin call: the error name and message the command prints."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(f"{error}: {message}")
        self.error = error
        self.message = message


class Reply(NamedTuple):
    status: int
    body: Any


class AdminClient:
    """JSON over HTTP to one node's REST admin API."""

    def __init__(self, base_url: str, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise AdminError("INVALID_ADMIN_URL", f"--admin {base_url!r} is not http://host:port")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def call(
        self,
        method: str,
        path: str,
        body: object = None,
        query: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> Reply:
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as response:
                return Reply(response.status, _json_or_none(response.read()))
        except urllib.error.HTTPError as exc:
            raise _http_error(exc) from None
        except urllib.error.URLError as exc:
            raise self._unreachable(exc.reason) from None
        except (OSError, TimeoutError) as exc:
            raise self._unreachable(exc) from None

    def _unreachable(self, reason: object) -> AdminError:
        if isinstance(reason, ConnectionRefusedError):
            reason = "connection refused"
        return AdminError(
            "ADMIN_UNREACHABLE",
            f"the admin API is not reachable at {self.base_url} ({reason}); start a node with"
            " `kraft dev`, or point --admin (or KRAFT_ADMIN) at a running node",
        )


def _json_or_none(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise AdminError("INVALID_RESPONSE", "the admin API answered something not JSON") from None


def _http_error(exc: urllib.error.HTTPError) -> AdminError:
    raw = exc.read()
    with contextlib.suppress(ValueError):
        body = json.loads(raw)
        if isinstance(body, dict) and "error" in body:
            return AdminError(str(body["error"]), str(body.get("message", "")))
    text = raw.decode(errors="replace").strip() or exc.reason
    return AdminError(f"HTTP_{exc.code}", str(text))


def topic_path(topic: str, *rest: str) -> str:
    return "/".join(["/v1/topics", urllib.parse.quote(topic, safe=""), *rest])


# --- output -----------------------------------------------------------------------------------


def print_json(value: object) -> None:
    print(json.dumps(value, indent=2))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = [headers, *cells]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def fail(error: str, message: str) -> int:
    print(f"kraft: {error}: {message}", file=sys.stderr)
    return 1


Command = Callable[[argparse.Namespace, AdminClient], int]


def command(fn: Command) -> Callable[[argparse.Namespace], int]:
    """Run ``fn`` with a client for ``--admin``; an AdminError becomes one line and status 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args, AdminClient(args.admin))
        except AdminError as exc:
            return fail(exc.error, exc.message)

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


# --- topics -----------------------------------------------------------------------------------


@command
def topics_create(args: argparse.Namespace, client: AdminClient) -> int:
    body: dict[str, Any] = {"name": args.name, "configs": dict(args.config or [])}
    if args.partitions is not None:
        body["partitions"] = args.partitions
    if args.replication_factor is not None:
        body["replication_factor"] = args.replication_factor
    topic = client.call("POST", "/v1/topics", body).body
    if args.json:
        print_json(topic)
    else:
        print(f"Created topic {args.name}.")
    return 0


@command
def topics_list(args: argparse.Namespace, client: AdminClient) -> int:
    topics = client.call("GET", "/v1/topics").body
    if args.json:
        print_json(topics)
        return 0
    rows = [(t["name"], t["partitions"], t["replication_factor"]) for t in topics]
    print(format_table(("NAME", "PARTITIONS", "REPLICATION_FACTOR"), rows))
    return 0


@command
def topics_describe(args: argparse.Namespace, client: AdminClient) -> int:
    topic = client.call("GET", topic_path(args.name)).body
    if args.json:
        print_json(topic)
    else:
        print(describe_text(topic))
    return 0


PARTITION_COLUMNS: Final = (
    "partition",
    "leader",
    "leader_epoch",
    "replicas",
    "isr",
    "log_start_offset",
    "high_watermark",
)


def describe_text(topic: dict[str, Any]) -> str:
    configs = ",".join(f"{k}={v}" for k, v in topic["configs"].items()) or "-"
    header = (
        f"Topic: {topic['name']}  TopicId: {topic.get('topic_id', '-')}"
        f"  PartitionCount: {len(topic['partitions'])}"
        f"  ReplicationFactor: {topic.get('replication_factor', '-')}  Configs: {configs}"
    )
    rows = [[p[column] for column in PARTITION_COLUMNS] for p in topic["partitions"]]
    headers = [column.upper() for column in PARTITION_COLUMNS]
    return header + "\n" + format_table(headers, rows)


@command
def topics_delete(args: argparse.Namespace, client: AdminClient) -> int:
    reply = client.call("DELETE", topic_path(args.name))
    if args.json:
        print_json({"name": args.name, "deleted": reply.status == 204})
    elif reply.status == 204:
        print(f"Deleted topic {args.name}.")
    else:
        print(f"Topic {args.name} is marked for deletion.")
    return 0


@command
def topics_alter(args: argparse.Namespace, client: AdminClient) -> int:
    if not (args.set or args.delete or args.partitions is not None):
        return fail("INVALID_REQUEST", "nothing to alter: give --set, --delete or --partitions")
    topic: Any = None
    if args.set or args.delete:
        changes = {"set": dict(args.set or []), "delete": args.delete or []}
        topic = client.call("PATCH", topic_path(args.name, "configs"), changes).body
    if args.partitions is not None:
        count = {"count": args.partitions}
        topic = client.call("POST", topic_path(args.name, "partitions"), count).body
    if args.json:
        print_json(topic)
    else:
        print(f"Altered topic {args.name}.")
    return 0


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


class Consumed(NamedTuple):
    """A record to print, however it was read (REST here, Kafka Fetch with --group)."""

    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]


@dataclass
class Printer:
    out: IO[bytes]
    json_lines: bool
    print_key: bool
    key_separator: bytes
    count: int = 0

    def write(self, record: Consumed) -> None:
        if self.json_lines:
            line = json.dumps(_decoded(record)).encode()
        else:
            line = b"null" if record.value is None else record.value
            if self.print_key:
                line = (b"null" if record.key is None else record.key) + self.key_separator + line
        self.out.write(line + b"\n")
        self.count += 1


def _decoded(record: Consumed) -> dict[str, Any]:
    def text(data: bytes | None) -> str | None:
        return None if data is None else data.decode(errors="replace")

    return {
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": text(record.key),
        "value": text(record.value),
        "headers": {k: text(v) for k, v in record.headers},
    }


def consume_loop(
    consumer: Consumer, printer: Printer, max_messages: int | None, timeout_ms: int | None
) -> None:
    """Poll until ``max_messages`` are printed or nothing arrived for ``timeout_ms``.  A pass
    over the partitions that found records is followed by one that does not wait; after an
    empty pass, each poll long-polls (``idle_poll_ms``, capped by what is left of the timeout)."""
    last_record = time.monotonic()
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
                last_record, found = time.monotonic(), True
        if timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= timeout_ms:
            return
        idle = not found


def _wait_ms(idle: bool, idle_poll_ms: int, timeout_ms: int | None, last_record: float) -> int:
    if not idle:
        return 0
    if timeout_ms is None:
        return idle_poll_ms
    left = timeout_ms - (time.monotonic() - last_record) * 1000
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


# --- consumer groups ----------------------------------------------------------------------------

OFFSET_COLUMNS: Final = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
)
REBALANCING: Final = ("PreparingRebalance", "CompletingRebalance")


def group_path(group: str, *rest: str) -> str:
    return "/".join(["/v1/groups", urllib.parse.quote(group, safe=""), *rest])


def group_of(args: argparse.Namespace) -> str:
    """The group, given as the argument or with ``--group`` (Kafka's spelling)."""
    given = {g for g in (args.group, args.group_option) if g is not None}
    if len(given) != 1:
        problem = "give the group once" if given else "no group given"
        raise AdminError(
            "INVALID_ARGUMENTS", f"{problem}: kraft groups {args.groups_command} GROUP"
        )
    return str(given.pop())


@command
def groups_list(args: argparse.Namespace, client: AdminClient) -> int:
    groups = client.call("GET", "/v1/groups").body
    if args.json:
        print_json(groups)
        return 0
    rows = [(g["group_id"], g["state"], g["protocol_type"], g["coordinator"]) for g in groups]
    print(format_table(("GROUP", "STATE", "PROTOCOL-TYPE", "COORDINATOR"), rows))
    return 0


@command
def groups_describe(args: argparse.Namespace, client: AdminClient) -> int:
    group = client.call("GET", group_path(group_of(args))).body
    if args.json:
        print_json(group)
    elif args.state:
        print(group_state_text(group))
    else:
        print(
            group_notes(group)
            + (group_members_text(group) if args.members else offsets_text(group))
        )
    return 0


def group_notes(group: dict[str, Any]) -> str:
    """Kafka's remarks above the table (an empty group, a rebalance), each on its own line."""
    notes = ""
    if group["state"] in REBALANCING:
        notes += f"Warning: Consumer group '{group['group_id']}' is rebalancing.\n"
    if not group["members"]:
        notes += f"Consumer group '{group['group_id']}' has no active members.\n"
    return notes


def offsets_text(group: dict[str, Any]) -> str:
    """``kafka-consumer-groups.sh --describe``: a row per partition (assigned or with a
    committed offset), then members without partitions; ``-`` where there is no value."""
    members = {m["member_id"]: m for m in group["members"]}
    rows: list[list[object]] = []
    for p in group["partitions"]:
        member = members.get(p["member_id"]) or {}
        rows.append(
            [
                group["group_id"],
                p["topic"],
                p["partition"],
                p["committed"],
                p["high_watermark"],
                p["lag"],
                member.get("member_id"),
                member.get("host"),
                member.get("client_id"),
            ]
        )
    assigned = {p["member_id"] for p in group["partitions"]}
    for m in group["members"]:
        if m["member_id"] not in assigned:
            idle = [group["group_id"], None, None, None, None, None]
            rows.append([*idle, m["member_id"], m["host"], m["client_id"]])
    return format_table(OFFSET_COLUMNS, rows)


def group_members_text(group: dict[str, Any]) -> str:
    """``--describe --members``: each member and its partitions, ``topic(0,1)``."""
    rows = []
    for m in group["members"]:
        assignment = m["assignment"] or []
        count = sum(len(a["partitions"]) for a in assignment)
        text = " ".join(f"{a['topic']}({','.join(map(str, a['partitions']))})" for a in assignment)
        rows.append(
            [
                group["group_id"],
                m["member_id"],
                m["group_instance_id"],
                m["host"],
                m["client_id"],
                count,
                text or None,
            ]
        )
    headers = ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
    return format_table((*headers, "ASSIGNMENT"), rows)


def group_state_text(group: dict[str, Any]) -> str:
    """``--describe --state``: coordinator, assignor, state and member count."""
    c = group["coordinator"]
    row = [
        group["group_id"],
        f"{c['host']}:{c['port']} ({c['id']})",
        group["protocol"] or None,
        group["state"],
        len(group["members"]),
    ]
    headers = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
    return format_table(headers, [row])


@command
def groups_delete(args: argparse.Namespace, client: AdminClient) -> int:
    group = group_of(args)
    client.call("DELETE", group_path(group))
    if args.json:
        print_json({"group_id": group, "deleted": True})
    else:
        print(f"Deletion of requested consumer groups ('{group}') was successful.")
    return 0


@command
def groups_reset_offsets(args: argparse.Namespace, client: AdminClient) -> int:
    group = group_of(args)
    body: dict[str, Any] = {"to": reset_target(args), "execute": args.execute}
    if args.all_topics:
        body["all_topics"] = True
    else:
        body["topics"] = args.topic
    result = client.call("POST", group_path(group, "offsets"), body).body
    if args.json:
        print_json(result)
        return 0
    rows = [(group, p["topic"], p["partition"], p["new_offset"]) for p in result["partitions"]]
    print(format_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows))
    if not result["executed"]:
        print("Dry run: no offsets were changed; add --execute to apply.", file=sys.stderr)
    return 0


def reset_target(args: argparse.Namespace) -> object:
    if args.to_earliest:
        return "earliest"
    if args.to_latest:
        return "latest"
    if args.to_datetime is not None:
        return {"timestamp": args.to_datetime}
    assert args.to_offset is not None, "argparse requires one target"
    return {"offset": args.to_offset}


def datetime_ms(text: str) -> int:
    """``--to-datetime``: ISO 8601 (``2024-05-01T12:00:00.000``, with an optional ``Z`` or
    ``+02:00``; local time without one, as Kafka's tool) as epoch milliseconds."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a date and time like 2024-05-01T12:00:00.000[+02:00], got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()  # the local time zone
    ms = (when - EPOCH) // datetime.timedelta(milliseconds=1)
    if ms < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is before 1970")
    return ms


EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


# --- cluster ----------------------------------------------------------------------------------


@command
def cluster_status(args: argparse.Namespace, client: AdminClient) -> int:
    cluster = client.call("GET", "/v1/cluster").body
    if args.json:
        print_json(cluster)
        return 0
    controller = cluster["controller"]
    voters = ", ".join(
        f"{v['id']}" + (f"@{v['address']}" if v.get("address") else "") + f" (lag {v['lag']})"
        for v in controller["voters"]
    )
    print(f"Cluster: {cluster['cluster_id']}")
    print(f"Controller: leader {controller['leader_id']}, epoch {controller['epoch']}")
    print(f"Voters: {voters}")
    columns = ("id", "host", "port", "rack", "fenced", "epoch")
    rows = [[b[column] for column in columns] for b in cluster["brokers"]]
    print(format_table(("BROKER", "HOST", "PORT", "RACK", "FENCED", "EPOCH"), rows))
    return 0


# --- leader elections (Kafka protocol) ---------------------------------------------------------

DEFAULT_BOOTSTRAP: Final = "127.0.0.1:9092"
ELECTION_TYPES: Final = {"preferred": 0, "unclean": 1}  # Kafka's ElectionType
ELECT_LEADERS_KEY, ELECT_LEADERS_MAX_VERSION = 43, 2
METADATA_KEY, METADATA_MAX_VERSION = 3, 12
NOT_NEEDED: Final = "ELECTION_NOT_NEEDED"


class ElectionOutcome(NamedTuple):
    topic: str
    partition: int
    error: str  # the Kafka error name; NONE: a leader was elected
    message: str | None

    @property
    def failed(self) -> bool:
        return self.error not in ("NONE", NOT_NEEDED)

    def line(self) -> str:
        what = "leader elected" if self.error == "NONE" else self.error
        return f"{self.topic}-{self.partition}: {what}" + (
            f": {self.message}" if self.message and self.error != "NONE" else ""
        )


def bootstrap_addresses(text: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (IPv6 hosts in brackets)."""
    out = []
    for item in text.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {item.strip()!r}")
        out.append((host.strip("[]"), int(port)))
    return out


def elect_leaders(args: argparse.Namespace) -> int:
    """``kraft elect-leaders``: one line per partition result; status 1 if any partition failed
    for a reason other than ELECTION_NOT_NEEDED."""
    if args.partition and not args.topic:
        return fail("INVALID_ARGUMENTS", "--partition needs --topic")
    try:
        outcomes = asyncio.run(_elect(args))
    except AdminError as exc:
        return fail(exc.error, exc.message)
    outcomes.sort(key=lambda o: (o.topic, o.partition))
    if args.json:
        print_json([o._asdict() for o in outcomes])
    elif outcomes:
        print("\n".join(o.line() for o in outcomes))
    else:
        print("No partition needed an election.")
    failed = [o for o in outcomes if o.failed]
    if failed:
        names = ", ".join(f"{o.topic}-{o.partition} ({o.error})" for o in failed[:10])
        more = f" and {len(failed) - 10} more" if len(failed) > 10 else ""
        return fail("ELECTION_FAILED", f"{len(failed)} partition(s) failed: {names}{more}")
    return 0


async def _elect(args: argparse.Namespace) -> list[ElectionOutcome]:
    from broker.kafka_client import KafkaClientError
    from kafka_protocol.errors import ErrorCode
    from kafka_protocol.exceptions import ProtocolError
    from kafka_protocol.messages import ElectLeadersRequest, ElectLeadersResponse

    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            conn = await _connect(args.bootstrap_server)
            try:
                version = conn.version_for(ELECT_LEADERS_KEY, ELECT_LEADERS_MAX_VERSION)
                if version is None or (version == 0 and args.election_type != "preferred"):
                    raise AdminError("UNSUPPORTED_VERSION", f"{conn.peer} cannot elect leaders")
                wanted = None
                if not args.all_topic_partitions:
                    partitions = args.partition or await _partitions_of(conn, args.topic)
                    wanted = [
                        ElectLeadersRequest.TopicPartitions(topic=args.topic, partitions=partitions)
                    ]
                request = ElectLeadersRequest(
                    election_type=ELECTION_TYPES[args.election_type],
                    topic_partitions=wanted,
                    timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
                )
                response = await conn.send(request, version)
            finally:
                conn.close()
                await conn.wait_closed()
    except TimeoutError:
        raise AdminError("REQUEST_TIMED_OUT", f"no answer within {REQUEST_TIMEOUT_S:g} s") from None
    except (KafkaClientError, ProtocolError) as exc:
        raise AdminError("BROKER_UNREACHABLE", str(exc)) from None
    assert isinstance(response, ElectLeadersResponse)
    if response.error_code != ErrorCode.NONE:
        error = ErrorCode.from_code(response.error_code)
        raise AdminError(error.name, error.message)
    return [
        ElectionOutcome(
            topic.topic,
            result.partition_id,
            ErrorCode.from_code(result.error_code).name,
            result.error_message,
        )
        for topic in response.replica_election_results
        for result in topic.partition_result
    ]


async def _connect(addresses: list[tuple[str, int]]) -> KafkaConnection:
    from broker.kafka_client import KafkaConnection, KafkaConnectionError

    reasons = []
    for host, port in addresses:
        try:
            return await KafkaConnection.open(host, port, client_id="kraft-cli")
        except KafkaConnectionError as exc:
            reasons.append(str(exc))
    raise AdminError("BROKER_UNREACHABLE", "; ".join(reasons))


async def _partitions_of(conn: KafkaConnection, topic: str) -> list[int]:
    """Every partition of ``topic``, from a Metadata request (never creating the topic)."""
    from kafka_protocol.errors import ErrorCode
    from kafka_protocol.messages import MetadataRequest, MetadataResponse
    from kafka_protocol.types import TopicName

    version = conn.version_for(METADATA_KEY, METADATA_MAX_VERSION)
    if version is None or version < 4:  # v4 added allow_auto_topic_creation
        raise AdminError("UNSUPPORTED_VERSION", f"{conn.peer} cannot describe topics")
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=TopicName(topic))],
        allow_auto_topic_creation=False,
    )
    response = await conn.send(request, version)
    assert isinstance(response, MetadataResponse)
    described = next((t for t in response.topics if t.name == topic), None)
    if described is None or described.error_code != ErrorCode.NONE:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if described is None else described.error_code
        error = ErrorCode.from_code(code)
        raise AdminError(error.name, f"topic {topic!r}: {error.message}")
    return sorted(p.partition_index for p in described.partitions)


# --- argument parsing -------------------------------------------------------------------------


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--admin",
        metavar="URL",
        default=os.environ.get("KRAFT_ADMIN") or DEFAULT_ADMIN,
        help="REST admin API (default: $KRAFT_ADMIN or %(default)s)",
    )
    common.add_argument("--json", action="store_true", help="print JSON")
    return common


def _add_topics(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    topics = sub.add_parser("topics", help="create, list, describe, alter and delete topics")
    actions = topics.add_subparsers(dest="topics_command", metavar="ACTION", required=True)

    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("name")
    create.add_argument(
        "--partitions", type=positive_int, metavar="N", help="default: num.partitions"
    )
    create.add_argument(
        "--replication-factor",
        type=positive_int,
        metavar="N",
        help="default: default.replication.factor",
    )
    create.add_argument("--config", type=key_value, action="append", metavar="KEY=VALUE")
    create.set_defaults(func=topics_create)

    actions.add_parser("list", parents=[common], help="list topics").set_defaults(func=topics_list)
    for name, func, text in (
        ("describe", topics_describe, "partitions, leaders, offsets and configs"),
        ("delete", topics_delete, "delete a topic"),
    ):
        p = actions.add_parser(name, parents=[common], help=text)
        p.add_argument("name")
        p.set_defaults(func=func)

    alter = actions.add_parser("alter", parents=[common], help="change configs or partitions")
    alter.add_argument("name")
    alter.add_argument("--set", type=key_value, action="append", metavar="KEY=VALUE")
    alter.add_argument("--delete", action="append", metavar="KEY", help="back to the default")
    alter.add_argument(
        "--partitions", type=positive_int, metavar="N", help="the new, larger, count"
    )
    alter.set_defaults(func=topics_alter)


def _add_group_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("group", nargs="?", metavar="GROUP", help="the consumer group")
    parser.add_argument("--group", dest="group_option", metavar="GROUP", help="the same")


def _add_groups(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    groups = sub.add_parser(
        "groups", help="list, describe, delete consumer groups and reset their offsets"
    )
    actions = groups.add_subparsers(dest="groups_command", metavar="ACTION", required=True)
    actions.add_parser("list", parents=[common], help="list groups").set_defaults(func=groups_list)

    describe = actions.add_parser(
        "describe", parents=[common], help="members, committed offsets and lag per partition"
    )
    _add_group_argument(describe)
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="members and their partitions")
    view.add_argument("--state", action="store_true", help="coordinator, assignor and state")
    describe.set_defaults(func=groups_describe)

    delete = actions.add_parser("delete", parents=[common], help="delete an empty group")
    _add_group_argument(delete)
    delete.set_defaults(func=groups_delete)

    reset = actions.add_parser(
        "reset-offsets",
        parents=[common],
        help="move an inactive group's committed offsets (a dry run unless --execute)",
        description="Plan new committed offsets for a group with no active members, and "
        "commit them with --execute (without it, only print them, as Kafka's tool). Offsets "
        "outside a partition's [log start, high watermark] are moved to the nearest end.",
    )
    _add_group_argument(reset)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic", action="append", metavar="T", help="every partition of T (repeatable)"
    )
    scope.add_argument(
        "--all-topics", action="store_true", help="every partition the group has offsets for"
    )
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the high watermark")
    to.add_argument(
        "--to-datetime",
        type=datetime_ms,
        metavar="ISO",
        help="the first offset at or after YYYY-MM-DDTHH:mm:SS[.sss][Z|+HH:MM] (local time"
        " without a zone; the high watermark where no record is that recent)",
    )
    to.add_argument("--to-offset", type=non_negative_int, metavar="N", help="offset N")
    run = reset.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="commit the new offsets")
    run.add_argument("--dry-run", action="store_true", help="only print them (the default)")
    reset.set_defaults(func=groups_reset_offsets)


def _add_clients(
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


def add_admin_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``topics``, ``groups``, ``produce``, ``consume``, ``cluster`` and ``elect-leaders``
    to the ``kraft`` parser."""
    common = _common()
    _add_topics(sub, common)
    _add_groups(sub, common)
    _add_clients(sub, common)
    cluster = sub.add_parser("cluster", help="cluster status")
    actions = cluster.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    status = actions.add_parser("status", parents=[common], help="controller and brokers")
    status.set_defaults(func=cluster_status)
    _add_elect_leaders(sub)


def _add_elect_leaders(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    elect = sub.add_parser(
        "elect-leaders",
        help="run preferred or unclean leader elections (Kafka protocol, via a broker)",
        description="Ask the active controller, through a broker, to elect partition leaders: "
        "the preferred replica (the first of the replicas, if it is in the ISR), or, when no "
        "in-sync replica is alive, any live replica (unclean: committed records may be lost).",
    )
    elect.add_argument(
        "--bootstrap-server",
        type=bootstrap_addresses,
        default=bootstrap_addresses(DEFAULT_BOOTSTRAP),
        metavar="HOST:PORT",
        help=f"a broker (or a comma-separated list; default: {DEFAULT_BOOTSTRAP})",
    )
    elect.add_argument(
        "--election-type",
        type=str.lower,
        choices=tuple(ELECTION_TYPES),
        required=True,
        help="preferred or unclean",
    )
    which = elect.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--all-topic-partitions",
        action="store_true",
        help="every partition (only those needing an election are reported)",
    )
    which.add_argument("--topic", metavar="T", help="one topic (all its partitions by default)")
    elect.add_argument(
        "--partition",
        type=non_negative_int,
        action="append",
        metavar="P",
        help="a partition of --topic (repeatable)",
    )
    elect.add_argument("--json", action="store_true", help="print JSON")
    elect.set_defaults(func=elect_leaders)
