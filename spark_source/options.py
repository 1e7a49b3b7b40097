"""The source's and sink's options, parsed and checked once, with the names and meanings of
Spark's own Kafka connector (``assign``/``subscribe``/``subscribePattern``, ``startingOffsets``,
``endingOffsets``, ``maxOffsetsPerTrigger``, ``failOnDataLoss``, ``includeHeaders``, ``kafka.*``).

Pure: option strings in, frozen values out.  Every mistake is a :class:`OptionError` naming the
option and what it accepts, raised when the query is defined, not in a task.

Offsets are written as Spark writes them: ``{"topic": {"0": 23, "1": -1}}``, where -2 means
earliest and -1 latest.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from kafka_protocol.compression import Compression
from spark_source.read_committed import parse_isolation_level

EARLIEST: Final = -2
LATEST: Final = -1

# Spark refuses these for its Kafka source (offsets are tracked by the query, records are raw
# bytes); so do we, with the same reasons.
_REFUSED_KAFKA_KEYS: Final = {
    "auto.offset.reset": "set startingOffsets instead",
    "enable.auto.commit": "offsets are committed after each Spark batch commit",
    "key.deserializer": "keys are always returned as binary; cast them in the query",
    "value.deserializer": "values are always returned as binary; cast them in the query",
    "key.serializer": "write a binary or string key column",
    "value.serializer": "write a binary or string value column",
    "interceptor.classes": "Kafka client interceptors do not apply to this source",
}
_SUPPORTED_SECURITY: Final = ("PLAINTEXT",)
DEFAULT_GROUP_PREFIX: Final = "kraft-spark"
# A Spark task reads one partition range start to end, so it fetches far more per request than
# a consumer spread over many partitions: 8 MiB per fetch (Kafka's consumer default is 1 MiB)
# halves the per-record cost of turning batches into Arrow.  kafka.max.partition.fetch.bytes
# overrides it.
DEFAULT_READ_CONFIG: Final = {"max.partition.fetch.bytes": str(8 * 1024 * 1024)}
DEFAULT_MAX_TRIGGER_DELAY_MS: Final = 15 * 60 * 1000

Assignment = Literal["assign", "subscribe", "subscribePattern"]


class OptionError(ValueError):
    """An option is missing, unknown in this combination, or malformed."""


@dataclass(frozen=True)
class Subscription:
    """Which partitions the query reads: fixed ones, named topics, or a topic pattern."""

    kind: Assignment
    topics: tuple[str, ...] = ()  # subscribe: the topics; assign: the topics of `partitions`
    partitions: tuple[tuple[str, int], ...] = ()  # assign only
    pattern: str = ""  # subscribePattern only

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def describe(self) -> str:
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        if self.kind == "assign":
            return "assign=" + ",".join(f"{t}-{p}" for t, p in self.partitions)
        return "subscribe=" + ",".join(self.topics)


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends: ``earliest``/``latest`` for every partition, per-partition
    offsets (-2 earliest, -1 latest), or timestamps (one for all, or per partition).  Partitions
    a per-partition spec does not name take ``default``."""

    default: int  # EARLIEST or LATEST
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    timestamps: Mapping[tuple[str, int], int] = field(default_factory=dict)
    timestamp_for_all: int | None = None
    # startingOffsetsByTimestampStrategy: what a partition with no record at or after its
    # timestamp starts from ("error" fails the query, as Spark does by default)
    no_match: Literal["error", "latest"] = "error"

    def canonical(self) -> str:
        """A stable text of the spec, for deriving a group id."""
        return json.dumps(
            {
                "default": self.default,
                "offsets": sorted((t, p, o) for (t, p), o in self.offsets.items()),
                "timestamps": sorted((t, p, o) for (t, p), o in self.timestamps.items()),
                "all": self.timestamp_for_all,
            },
            separators=(",", ":"),
        )


@dataclass(frozen=True)
class ReadOptions:
    """Everything a reader needs, picklable (it travels to executors inside each partition)."""

    bootstrap_servers: str
    client_config: Mapping[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool
    include_headers: bool
    group_id: str
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    max_records_per_partition: int | None
    commit_offsets: bool


@dataclass(frozen=True)
class WriteOptions:
    bootstrap_servers: str
    client_config: Mapping[str, str]
    topic: str | None  # overrides a `topic` column
    compression: Compression
    # kafka.transactional.id.prefix: exactly-once mode (spark_source.exactly_once)
    transactional_id_prefix: str | None = None


def _get(options: Mapping[str, str], name: str) -> str | None:
    # Spark hands the options case-insensitively; plain dicts in tests are matched the same way.
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return value
    return None


def kafka_config(options: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """``kafka.bootstrap.servers`` and the other ``kafka.*`` options without their prefix."""
    # Kafka's client keys are all lower case, and Spark matches option names case-insensitively
    config = {
        k[len("kafka.") :].lower(): v for k, v in options.items() if k.lower().startswith("kafka.")
    }
    bootstrap = config.pop("bootstrap.servers", None)
    if not bootstrap:
        raise OptionError(
            "option kafka.bootstrap.servers is required, e.g. .option('kafka.bootstrap.servers',"
            " '127.0.0.1:9092')"
        )
    for key, why in _REFUSED_KAFKA_KEYS.items():
        if key in config:
            raise OptionError(f"option kafka.{key} is not supported: {why}")
    protocol = config.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in _SUPPORTED_SECURITY:
        raise OptionError(
            f"kafka.security.protocol={protocol} is not supported; the brokers speak PLAINTEXT"
        )
    return bootstrap, config


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(f"option {name} must be true or false, not {raw!r}")


def _positive(options: Mapping[str, str], name: str) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name} must be a positive integer, not {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {name} must be a positive integer, not {raw!r}")
    return value


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def _duration_ms(options: Mapping[str, str], name: str, default: int) -> int:
    """Spark's ``maxTriggerDelay`` takes ``"15m"``, ``"30s"``, ``"500ms"`` or plain ms."""
    raw = _get(options, name)
    if raw is None:
        return default
    match = _DURATION.match(raw)
    if match is None:
        raise OptionError(f"option {name} must be a duration such as 30s, 15m or 500ms: {raw!r}")
    unit = (match.group(2) or "ms").lower()
    return int(match.group(1)) * _DURATION_MS.get(unit, 86_400_000)


def _json_object(options: Mapping[str, str], name: str) -> dict[str, object]:
    raw = _get(options, name) or ""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name} is not valid JSON ({exc}): {raw!r}") from None
    if not isinstance(value, dict):
        raise OptionError(f"option {name} must be a JSON object: {raw!r}")
    return value


def _per_partition(options: Mapping[str, str], name: str) -> dict[tuple[str, int], int]:
    """``{"topic": {"0": 23}}`` -> {("topic", 0): 23}."""
    result: dict[tuple[str, int], int] = {}
    for topic, parts in _json_object(options, name).items():
        if not isinstance(parts, dict):
            raise OptionError(f"option {name}: {topic!r} must map partitions to numbers")
        for part, value in parts.items():
            try:
                partition = int(part)
            except ValueError:
                raise OptionError(f"option {name}: partition {part!r} is not a number") from None
            if not isinstance(value, int) or isinstance(value, bool):
                raise OptionError(f"option {name}: {topic}-{partition} must be an integer")
            result[(topic, partition)] = value
    return result


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    given = [n for n in ("assign", "subscribe", "subscribePattern") if _get(options, n)]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options assign, subscribe or subscribePattern must be set"
            + (f" (got {', '.join(given)})" if given else "")
        )
    kind: Assignment = given[0]  # type: ignore[assignment]
    raw = _get(options, kind) or ""
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError("option subscribe must name at least one topic: 'a,b'")
        return Subscription(kind, topics=topics)
    if kind == "subscribePattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(f"option subscribePattern is not a valid regex ({exc})") from None
        return Subscription(kind, pattern=raw)
    partitions: list[tuple[str, int]] = []
    for topic, parts in _json_object(options, "assign").items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise OptionError(
                f'option assign: {topic!r} must map to a list of partitions, e.g. {{"t": [0, 1]}}'
            )
        partitions.extend((topic, p) for p in parts)
    if not partitions:
        raise OptionError('option assign must name partitions, e.g. {"events": [0, 1]}')
    topics = tuple(sorted({t for t, _ in partitions}))
    return Subscription(kind, topics=topics, partitions=tuple(sorted(set(partitions))))


def _named_spec(raw: str, name: str, allowed: tuple[str, ...]) -> int | None:
    word = raw.strip().lower()
    if word in allowed:
        return EARLIEST if word == "earliest" else LATEST
    if raw.strip().startswith("{"):
        return None
    raise OptionError(f"option {name} must be {' or '.join(allowed)} or a JSON object: {raw!r}")


def parse_starting(options: Mapping[str, str], default: int) -> OffsetSpec:
    """Where a query starts; ``startingOffsetsByTimestampStrategy`` says what a timestamp
    that matches no record gives."""
    strategy = (_get(options, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError("option startingOffsetsByTimestampStrategy must be error or latest")
    no_match: Literal["error", "latest"] = "latest" if strategy == "latest" else "error"
    named = ("earliest", "latest")
    allowed = ">= 0, -2 (earliest) or -1 (latest)"
    return _parse_spec(options, "starting", default, no_match, named, allowed)


def parse_ending(options: Mapping[str, str]) -> OffsetSpec:
    """Where a batch query ends: a timestamp that matches no record gives the latest offset."""
    return _parse_spec(options, "ending", LATEST, "latest", ("latest",), ">= 0 or -1 (latest)")


def _parse_spec(
    options: Mapping[str, str],
    side: str,
    default: int,
    no_match: Literal["error", "latest"],
    named: tuple[str, ...],
    allowed: str,
) -> OffsetSpec:
    """Either end of a query: ``{side}Timestamp`` > ``{side}OffsetsByTimestamp`` >
    ``{side}Offsets`` (Spark's precedence); per-partition offsets are at least the lowest
    ``named`` offset (``allowed`` says so in the error)."""
    if (raw := _get(options, f"{side}Timestamp")) is not None:
        try:
            stamp = int(raw)
        except ValueError:
            raise OptionError(f"option {side}Timestamp must be epoch ms: {raw!r}") from None
        return OffsetSpec(default, timestamp_for_all=stamp, no_match=no_match)
    if _get(options, f"{side}OffsetsByTimestamp") is not None:
        stamps = _per_partition(options, f"{side}OffsetsByTimestamp")
        return OffsetSpec(default, timestamps=stamps, no_match=no_match)
    raw = _get(options, f"{side}Offsets")
    if raw is None:
        return OffsetSpec(default)
    spec = _named_spec(raw, f"{side}Offsets", named)
    if spec is not None:
        return OffsetSpec(spec)
    offsets = _per_partition(options, f"{side}Offsets")
    lowest = EARLIEST if "earliest" in named else LATEST
    if any(o < lowest for o in offsets.values()):
        raise OptionError(f"option {side}Offsets: offsets are {allowed}")
    return OffsetSpec(default, offsets=offsets)


def derived_group_id(prefix: str, subscription: Subscription, starting: OffsetSpec) -> str:
    """A group id that is the same every time the same query definition starts, so a restarted
    query finds the start offsets it resolved and the offsets it committed.  Queries that differ
    in what they read or where they start get different groups."""
    text = subscription.describe() + "|" + starting.canonical()
    return f"{prefix}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    bootstrap, config = kafka_config(options)
    subscription = parse_subscription(options)
    starting = parse_starting(options, LATEST if streaming else EARLIEST)
    if streaming and any(
        _get(options, n) is not None
        for n in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")
    ):
        raise OptionError("endingOffsets options apply to batch queries (spark.read) only")
    ending = parse_ending(options)
    if subscription.kind == "assign":
        named = set(starting.offsets) | set(starting.timestamps) | set(ending.offsets)
        stray = named - set(subscription.partitions)
        if stray:
            raise OptionError(
                "offsets given for partitions that are not assigned: "
                + ", ".join(f"{t}-{p}" for t, p in sorted(stray))
            )
    if "isolation.level" in config:  # Spark's name: kafka.isolation.level
        try:
            parse_isolation_level(config["isolation.level"])
        except ValueError as exc:
            raise OptionError(f"option kafka.{exc}") from None
    prefix = _get(options, "groupIdPrefix") or DEFAULT_GROUP_PREFIX
    group_id = config.pop("group.id", None) or derived_group_id(prefix, subscription, starting)
    return ReadOptions(
        bootstrap_servers=bootstrap,
        client_config={**DEFAULT_READ_CONFIG, **config},
        subscription=subscription,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        group_id=group_id,
        max_offsets_per_trigger=_positive(options, "maxOffsetsPerTrigger"),
        min_offsets_per_trigger=_positive(options, "minOffsetsPerTrigger"),
        max_trigger_delay_ms=_duration_ms(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
        min_partitions=_positive(options, "minPartitions"),
        max_records_per_partition=_positive(options, "maxRecordsPerPartition"),
        commit_offsets=_bool(options, "commitOffsets", True),
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    bootstrap, config = kafka_config(options)
    try:
        compression = Compression.from_name(config.get("compression.type", "none").strip())
    except ValueError as exc:
        raise OptionError(f"option kafka.compression.type: {exc}") from None
    if "transactional.id" in config:
        raise OptionError(
            "option kafka.transactional.id is not supported: every task needs an id of its own;"
            " set kafka.transactional.id.prefix for exactly-once writes"
        )
    prefix = config.pop("transactional.id.prefix", None)
    if prefix is not None:
        prefix = prefix.strip()
        if not prefix:
            raise OptionError("option kafka.transactional.id.prefix must not be empty")
        if config.get("acks", "all").strip().lower() not in ("all", "-1") or (
            config.get("enable.idempotence", "true").strip().lower() != "true"
        ):
            raise OptionError(
                "kafka.transactional.id.prefix needs kafka.acks=all and"
                " kafka.enable.idempotence=true (a transactional producer is idempotent)"
            )
    return WriteOptions(bootstrap, config, _get(options, "topic"), compression, prefix)
