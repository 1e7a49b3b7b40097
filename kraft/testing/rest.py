"""A test cluster's helpers over its REST admin API: topics, records, ISR.

Calls go to the first running broker's API (:class:`kraft.cli.rest_client.AdminClient`, with the
cluster's login when it is secure), so they work while another broker is down.  Records travel
base64-encoded: any bytes pass through unchanged.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kafka_protocol.clock import monotonic_s
from kraft.cli.admin_auth import AdminLogin
from kraft.cli.records import b64, unb64
from kraft.cli.rest_client import AdminClient, AdminError, Reply, topic_path

Value = bytes | str | None
T = TypeVar("T")

PRODUCE_CHUNK = 500  # records per request (the API takes up to 10 000)
READ_CHUNK = 500
POLL_S = 0.05
LONG_POLL_MS = 200
RETRIED = ("ADMIN_UNREACHABLE", "NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE")


@dataclass(frozen=True)
class Record:
    """A record to produce (``partition`` None: the default partitioner places it by key) or
    one consumed (``offset`` and ``timestamp`` set)."""

    value: bytes | None
    key: bytes | None = None
    headers: Mapping[str, bytes | None] = field(default_factory=dict)
    partition: int | None = None
    offset: int | None = None
    timestamp: int | None = None


def as_bytes(value: Value) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def record_body(item: Value | Record, key: Value, partition: int | None) -> dict[str, Any]:
    if not isinstance(item, Record):
        item = Record(as_bytes(item), as_bytes(key), partition=partition)
    body: dict[str, Any] = {"value": b64(item.value), "key": b64(item.key)}
    if item.headers:
        body["headers"] = {k: b64(v) for k, v in item.headers.items()}
    if item.partition is not None:
        body["partition"] = item.partition
    return body


def parse_record(partition: int, raw: Mapping[str, Any]) -> Record:
    return Record(
        value=unb64(raw["value"]),
        key=unb64(raw["key"]),
        headers={k: unb64(v) for k, v in (raw.get("headers") or {}).items()},
        partition=partition,
        offset=raw["offset"],
        timestamp=raw["timestamp"],
    )


def isr_reached(
    isr: Sequence[int], assigned: Sequence[int], size: int | None, replicas: Iterable[int] | None
) -> bool:
    """Whether ``isr`` is what :meth:`ClusterRest.wait_for_isr` waits for."""
    if replicas is not None:
        return sorted(isr) == sorted(replicas)
    if size is not None:
        return len(isr) == size
    return sorted(isr) == sorted(assigned)


class ClusterRest:
    """REST calls to whichever broker of the cluster answers first."""

    def __init__(self, admin_urls: Callable[[], list[str]], login: AdminLogin) -> None:
        self.admin_urls = admin_urls
        self.login = login

    def call(self, method: str, path: str, body: object = None, **query: Any) -> Reply:
        error: AdminError | None = None
        for url in self.admin_urls():
            try:
                return AdminClient(url, login=self.login).call(method, path, body, query or None)
            except AdminError as exc:
                if exc.error != "ADMIN_UNREACHABLE":
                    raise
                error = exc
        raise error or AdminError("ADMIN_UNREACHABLE", "no broker of the cluster is running")

    def wait(self, what: str, check: Callable[[], T | None], timeout_s: float) -> T:
        """Poll ``check`` until it returns a value (an AdminError in :data:`RETRIED` counts as
        not yet); TimeoutError naming ``what`` after ``timeout_s``."""
        deadline = monotonic_s() + timeout_s
        last = ""
        while True:
            try:
                value = check()
            except AdminError as exc:
                if exc.error not in RETRIED and exc.error != "UNKNOWN_TOPIC_OR_PARTITION":
                    raise
                value, last = None, f" (last: {exc})"
            if value is not None:
                return value
            if monotonic_s() > deadline:
                raise TimeoutError(f"kraft.testing: {what} not reached in {timeout_s:g} s{last}")
            time.sleep(POLL_S)

    # --- topics ---------------------------------------------------------------------------

    def describe_topic(self, name: str) -> dict[str, Any]:
        body = self.call("GET", topic_path(name)).body
        assert isinstance(body, dict)
        return body

    def create_topic(
        self,
        name: str,
        partitions: int | None,
        replication_factor: int | None,
        configs: Mapping[str, str] | None,
        timeout_s: float,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"name": name}
        if partitions is not None:
            body["partitions"] = partitions
        if replication_factor is not None:
            body["replication_factor"] = replication_factor
        if configs:
            body["configs"] = dict(configs)
        created = self.call("POST", "/v1/topics", body).body
        expected = created.get("partitions") if isinstance(created, dict) else None

        def led() -> dict[str, Any] | None:
            topic = self.describe_topic(name)
            parts = topic.get("partitions") or []
            count_ok = not isinstance(expected, int) or len(parts) == expected
            leaders = all(p.get("leader") not in (None, -1) for p in parts)
            return topic if parts and count_ok and leaders else None

        return self.wait(f"a leader for every partition of {name!r}", led, timeout_s)

    def partitions(self, topic: str) -> list[int]:
        return [p["partition"] for p in self.describe_topic(topic)["partitions"]]

    def wait_for_isr(
        self,
        topic: str,
        partition: int,
        size: int | None,
        replicas: Iterable[int] | None,
        timeout_s: float,
    ) -> list[int]:
        wanted = None if replicas is None else list(replicas)

        def isr() -> list[int] | None:
            for p in self.describe_topic(topic)["partitions"]:
                if p["partition"] == partition:
                    current = list(p["isr"])
                    return current if isr_reached(current, p["replicas"], size, wanted) else None
            raise AdminError("UNKNOWN_TOPIC_OR_PARTITION", f"{topic}-{partition} does not exist")

        goal = f"size {size}" if size is not None else f"replicas {wanted or 'all'}"
        return self.wait(f"the ISR of {topic}-{partition} at {goal}", isr, timeout_s)

    # --- records --------------------------------------------------------------------------

    def produce(
        self, topic: str, values: Iterable[Value | Record], key: Value, partition: int | None
    ) -> list[tuple[int, int]]:
        bodies = [record_body(v, key, partition) for v in values]
        out: list[tuple[int, int]] = []
        path = topic_path(topic, "records")
        for i in range(0, len(bodies), PRODUCE_CHUNK):
            request = {"records": bodies[i : i + PRODUCE_CHUNK], "encoding": "base64"}
            reply = self.call("POST", path, request).body
            out += [(o["partition"], o["offset"]) for o in reply["offsets"]]
        return out

    def read(
        self, topic: str, partition: int, offset: int | str, timeout_ms: int = 0
    ) -> dict[str, Any]:
        path = topic_path(topic, "partitions", urllib.parse.quote(str(partition)), "records")
        body = self.call(
            "GET",
            path,
            offset=offset,
            max_records=READ_CHUNK,
            timeout_ms=timeout_ms,
            encoding="base64",
        ).body
        assert isinstance(body, dict)
        return body

    def consume(
        self,
        topic: str,
        count: int | None,
        partitions: Iterable[int] | None,
        timeout_s: float,
    ) -> list[Record]:
        indexes = list(partitions) if partitions is not None else self.partitions(topic)
        got: dict[int, list[Record]] = {p: [] for p in indexes}
        position: dict[int, int | str] = dict.fromkeys(indexes, "earliest")
        deadline = monotonic_s() + timeout_s
        while True:
            for p in indexes:
                self._drain(topic, p, position, got[p], 0 if count is None else LONG_POLL_MS)
            total = sum(len(r) for r in got.values())
            if count is None or total >= count:
                return [r for p in indexes for r in got[p]]
            if monotonic_s() > deadline:
                raise TimeoutError(
                    f"kraft.testing: {total} of {count} records of {topic!r} after {timeout_s:g} s"
                )

    def _drain(
        self,
        topic: str,
        partition: int,
        position: dict[int, int | str],
        into: list[Record],
        timeout_ms: int,
    ) -> None:
        """Read ``partition`` from its position up to the high watermark of the first read."""
        while True:
            body = self.read(topic, partition, position[partition], timeout_ms)
            into += [parse_record(partition, r) for r in body["records"]]
            position[partition] = body["next_offset"]
            if not body["records"] or body["next_offset"] >= body["high_watermark"]:
                return
            timeout_ms = 0
