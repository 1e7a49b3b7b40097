"""The config schema: Kafka's topic configs, the broker configs they default from, validation,
and the effective values DescribeConfigs reports.

One module although about 600 lines: a third is the table itself (data), and the rest is what
reads it (parsing, validation, effective values), which the brokers, the controller and the
REST API import together.

Theory of operation
-------------------
A topic config's value comes from the first layer that sets it (Kafka's
``KafkaConfigSchema.resolveEffectiveTopicConfig``)::

    topic override (ConfigRecord TOPIC <name>)       DYNAMIC_TOPIC_CONFIG           1
    broker synonym, per broker (BROKER "<id>")       DYNAMIC_BROKER_CONFIG          2
    broker synonym, cluster default (BROKER "")      DYNAMIC_DEFAULT_BROKER_CONFIG  3
    broker synonym in server.properties / env        STATIC_BROKER_CONFIG           4
    the topic config's own default                   DEFAULT_CONFIG                 5

Each topic key has an ordered list of broker synonyms (``retention.ms`` <- ``log.retention.ms``,
``log.retention.minutes``, ``log.retention.hours``); unit synonyms are converted to the topic's
unit. Values are stored as the strings the user gave; :func:`validate_topic_config` parses them
as Kafka's ``ConfigDef`` does (trimmed; INT/LONG/SHORT ranges; ``true``/``false`` in any case;
LIST comma-separated) and checks the validator.

Defaults follow Kafka 4.x (``LogConfig``/``ServerLogConfigs``): ``message.timestamp.after.max.ms``
is one hour and ``segment.bytes`` is at least 1 MiB. Like Kafka 4.x, tests that need tiny
segments set the internal, undescribed ``internal.segment.bytes`` (we accept >= 14 bytes, Kafka
3.9's old minimum); the log (``broker.log.config.LogConfig``) honours it. The three topic configs
Kafka 4.0 removed (``message.downconversion.enable``, ``message.format.version``,
``message.timestamp.difference.max.ms``) are still accepted and described, as Kafka 3.9 did, so
that older tools that set them keep working; nothing acts on them.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from metadata_log.image import ClusterImage, ConfigResource, ConfigResourceType

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1
_INT_RANGES: Final = {"INT": (-(2**31), INT_MAX), "SHORT": (-(2**15), 2**15 - 1)}
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DOUBLE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_THROTTLED_REPLICA = re.compile(r"[0-9]+:[0-9]+")


class ConfigType(enum.IntEnum):
    """DescribeConfigs ``config_type`` (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ``config_source`` (Kafka's ``DescribeConfigsResponse.ConfigSource``)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


Validator = Callable[[object], str | None]  # parsed value -> error message
ConfigValue = bool | int | float | str | list[str]


# --- parsing and validators -------------------------------------------------------------------


def integer_range(config_type: ConfigType) -> tuple[int, int]:
    """The values a SHORT, INT or LONG key can hold at all (Java's ``short``/``int``/``long``)."""
    return _INT_RANGES.get(config_type.name, (-(2**63), LONG_MAX))


def parse_value(config_type: ConfigType, raw: str) -> ConfigValue:
    """Parse ``raw`` as Kafka's ``ConfigDef.parseType``; ValueError names what was expected."""
    value = raw.strip()
    if config_type is ConfigType.BOOLEAN:
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ValueError("Expected value to be either true or false")
    if config_type in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        lo, hi = integer_range(config_type)
        if not _INTEGER.fullmatch(value) or not lo <= int(value) <= hi:
            raise ValueError(f"Not a number of type {config_type.name}")
        return int(value)
    if config_type is ConfigType.DOUBLE:
        if not _DOUBLE.fullmatch(value):
            raise ValueError("Not a number of type DOUBLE")
        return float(value)
    if config_type is ConfigType.LIST:
        return [] if not value else [part.strip() for part in value.split(",")]
    return value


@dataclass(frozen=True, slots=True)
class Range:
    """A numeric range as data (Kafka's ``ConfigDef.Range``): the validator of a numeric key,
    and the bounds the storage layer reads instead of stating them again."""

    minimum: int | float
    maximum: int | float | None = None

    def __call__(self, v: object) -> str | None:
        assert isinstance(v, int | float)
        if v < self.minimum:
            return f"Value must be at least {self.minimum}"
        if self.maximum is not None and v > self.maximum:
            return f"Value must be no more than {self.maximum}"
        return None


def at_least(minimum: int | float) -> Range:
    return Range(minimum)


def between(minimum: int | float, maximum: int | float) -> Range:
    return Range(minimum, maximum)


def one_of(*allowed: str) -> Validator:
    def check(v: object) -> str | None:
        return None if v in allowed else f"String must be one of: {', '.join(allowed)}"

    return check


@dataclass(frozen=True, slots=True)
class EachOneOf:
    """A LIST key whose every item is one of ``allowed`` (Kafka's ``ValidList.in``)."""

    allowed: tuple[str, ...]

    def __call__(self, v: object) -> str | None:
        assert isinstance(v, list)
        bad = [item for item in v if item not in self.allowed]
        return f"String must be one of: {', '.join(self.allowed)}" if bad else None


def each_one_of(*allowed: str) -> EachOneOf:
    return EachOneOf(allowed)


def level(minimum: int, maximum: int, default: int) -> Validator:
    def check(v: object) -> str | None:
        assert isinstance(v, int)
        if v == default or minimum <= v <= maximum:
            return None
        return f"Value must be between {minimum} and {maximum} or equal to {default}"

    return check


def at_least_or(minimum: int, special: int) -> Validator:
    """At least ``minimum``, or exactly ``special`` (a value that switches the limit off)."""

    def check(v: object) -> str | None:
        assert isinstance(v, int)
        if v == special or v >= minimum:
            return None
        return f"Value must be at least {minimum} or equal to {special}"

    return check


def throttled_replicas(v: object) -> str | None:
    assert isinstance(v, list)
    if v == ["*"] or all(_THROTTLED_REPLICA.fullmatch(item) for item in v):
        return None
    return (
        "must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


# --- the schema -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One config key: type, default (as DescribeConfigs shows it) and validator."""

    name: str
    type: ConfigType
    default: str | None
    validator: Validator | None = None
    doc: str = ""
    sensitive: bool = False
    internal: bool = False  # accepted, never described (Kafka's defineInternal)
    dynamic: bool = False  # broker configs: alterable with IncrementalAlterConfigs

    @property
    def default_value(self) -> ConfigValue:
        """The default, parsed (for code that needs the value rather than the string)."""
        assert self.default is not None, f"{self.name} has no default"
        return parse_value(self.type, self.default)

    @property
    def int_default(self) -> int:
        """The default of an integer key, for a setting that mirrors it (``LogConfig``)."""
        value = self.default_value
        assert isinstance(value, int) and not isinstance(value, bool), f"{self.name} is no int"
        return value

    @property
    def bounds(self) -> tuple[int, int]:
        """The valid range of an integer key: its validator's :class:`Range` within what its
        type can hold."""
        assert self.type in (ConfigType.SHORT, ConfigType.INT, ConfigType.LONG), self.name
        low, high = integer_range(self.type)
        if isinstance(self.validator, Range):
            low = int(self.validator.minimum)
            high = high if self.validator.maximum is None else int(self.validator.maximum)
        return low, high

    def validate(self, raw: str) -> str | None:
        """The error message for ``raw``, or None when it is a valid value of this config."""
        try:
            value = parse_value(self.type, raw)
        except ValueError as exc:
            return f"Invalid value {raw} for configuration {self.name}: {exc}"
        reason = None if self.validator is None else self.validator(value)
        return (
            None
            if reason is None
            else f"Invalid value {raw} for configuration {self.name}: {reason}"
        )


def _defs(*defs: ConfigDef) -> Mapping[str, ConfigDef]:
    return {d.name: d for d in defs}


_T = ConfigType
STANDARD_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

TOPIC_CONFIGS: Final[Mapping[str, ConfigDef]] = _defs(
    ConfigDef("cleanup.policy", _T.LIST, "delete", each_one_of("compact", "delete")),
    ConfigDef("compression.gzip.level", _T.INT, "-1", level(1, 9, -1)),
    ConfigDef("compression.lz4.level", _T.INT, "9", between(1, 17)),
    ConfigDef("compression.type", _T.STRING, "producer", one_of(*_COMPRESSION_TYPES)),
    ConfigDef("compression.zstd.level", _T.INT, "3", between(-131072, 22)),
    ConfigDef("delete.retention.ms", _T.LONG, "86400000", at_least(0)),
    ConfigDef("file.delete.delay.ms", _T.LONG, "60000", at_least(0)),
    ConfigDef("flush.messages", _T.LONG, str(LONG_MAX), at_least(1)),
    ConfigDef("flush.ms", _T.LONG, str(LONG_MAX), at_least(0)),
    ConfigDef("follower.replication.throttled.replicas", _T.LIST, "", throttled_replicas),
    ConfigDef("index.interval.bytes", _T.INT, "4096", at_least(0)),
    ConfigDef("leader.replication.throttled.replicas", _T.LIST, "", throttled_replicas),
    ConfigDef("local.retention.bytes", _T.LONG, "-2", at_least(-2)),
    ConfigDef("local.retention.ms", _T.LONG, "-2", at_least(-2)),
    ConfigDef("max.compaction.lag.ms", _T.LONG, str(LONG_MAX), at_least(1)),
    ConfigDef("max.message.bytes", _T.INT, "1048588", at_least(0)),
    ConfigDef("message.downconversion.enable", _T.BOOLEAN, "true"),  # Kafka <= 3.9
    ConfigDef("message.format.version", _T.STRING, "3.0-IV1"),  # Kafka <= 3.9
    ConfigDef("message.timestamp.after.max.ms", _T.LONG, "3600000", at_least(0)),
    ConfigDef("message.timestamp.before.max.ms", _T.LONG, str(LONG_MAX), at_least(0)),
    ConfigDef("message.timestamp.difference.max.ms", _T.LONG, str(LONG_MAX), at_least(0)),
    ConfigDef(
        "message.timestamp.type", _T.STRING, "CreateTime", one_of("CreateTime", "LogAppendTime")
    ),
    ConfigDef("min.cleanable.dirty.ratio", _T.DOUBLE, "0.5", between(0, 1)),
    ConfigDef("min.compaction.lag.ms", _T.LONG, "0", at_least(0)),
    ConfigDef("min.insync.replicas", _T.INT, "1", at_least(1)),
    ConfigDef("preallocate", _T.BOOLEAN, "false"),
    ConfigDef("remote.log.copy.disable", _T.BOOLEAN, "false"),
    ConfigDef("remote.log.delete.on.disable", _T.BOOLEAN, "false"),
    ConfigDef("remote.storage.enable", _T.BOOLEAN, "false"),
    ConfigDef("retention.bytes", _T.LONG, "-1"),
    ConfigDef("retention.ms", _T.LONG, "604800000", at_least(-1)),
    ConfigDef("segment.bytes", _T.INT, "1073741824", at_least(1024 * 1024)),
    ConfigDef("segment.index.bytes", _T.INT, "10485760", at_least(4)),
    ConfigDef("segment.jitter.ms", _T.LONG, "0", at_least(0)),
    ConfigDef("segment.ms", _T.LONG, "604800000", at_least(1)),
    ConfigDef("unclean.leader.election.enable", _T.BOOLEAN, "false"),
    ConfigDef("internal.segment.bytes", _T.INT, None, at_least(14), internal=True),
)

_HOURS, _MINUTES = 3_600_000, 60_000

# topic key -> (broker key, multiplier to the topic's unit), in precedence order
# (Kafka's ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS).
TOPIC_CONFIG_SYNONYMS: Final[Mapping[str, tuple[tuple[str, int], ...]]] = {
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", _HOURS)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _HOURS)),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "retention.bytes": (("log.retention.bytes", 1),),
    "retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", _MINUTES),
        ("log.retention.hours", _HOURS),
    ),
    "max.message.bytes": (("message.max.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "unclean.leader.election.enable": (("unclean.leader.election.enable", 1),),
    "min.insync.replicas": (("min.insync.replicas", 1),),
    "compression.type": (("compression.type", 1),),
    "compression.gzip.level": (("compression.gzip.level", 1),),
    "compression.lz4.level": (("compression.lz4.level", 1),),
    "compression.zstd.level": (("compression.zstd.level", 1),),
    "preallocate": (("log.preallocate", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "message.timestamp.before.max.ms": (("log.message.timestamp.before.max.ms", 1),),
    "message.timestamp.after.max.ms": (("log.message.timestamp.after.max.ms", 1),),
    "local.retention.ms": (("log.local.retention.ms", 1),),
    "local.retention.bytes": (("log.local.retention.bytes", 1),),
}


def _broker_topic_defaults() -> Iterator[ConfigDef]:
    """Broker keys that are synonyms of topic keys: same type and validator, dynamic."""
    special = {"log.retention.ms", "log.roll.ms", "log.roll.jitter.ms", "log.flush.interval.ms"}
    for topic_key, synonyms in TOPIC_CONFIG_SYNONYMS.items():
        topic_def = TOPIC_CONFIGS[topic_key]
        for broker_key, multiplier in synonyms:
            if multiplier != 1 or broker_key in special:
                continue  # the unit variants and the no-default *.ms keys are listed below
            yield ConfigDef(
                broker_key, topic_def.type, topic_def.default, topic_def.validator, dynamic=True
            )


# Static keys (not ``dynamic``) are validated where the node starts, from this table
# (``kraft.node.config.NodeConfig.get_bounded_int``); where our minimum is above Kafka's
# (socket.request.max.bytes, the two *.retention.check.interval.ms) it is the one we enforce.
BROKER_CONFIGS: Final[Mapping[str, ConfigDef]] = _defs(
    ConfigDef("node.id", _T.INT, None, at_least(0)),
    ConfigDef("process.roles", _T.LIST, None, each_one_of("broker", "controller")),
    ConfigDef("controller.quorum.voters", _T.LIST, ""),
    ConfigDef("controller.quorum.bootstrap.servers", _T.LIST, ""),
    ConfigDef("controller.quorum.password", _T.PASSWORD, None, sensitive=True),
    ConfigDef("controller.listener.names", _T.LIST, "CONTROLLER"),
    ConfigDef("listeners", _T.LIST, "PLAINTEXT://:9092"),
    ConfigDef("advertised.listeners", _T.LIST, None),
    # Ours (kraft/node/config.py): host:port advertised for the first client listener that
    # advertised.listeners does not name (the image's KRAFT_ADVERTISED_ADDRESS).
    ConfigDef("advertised.address", _T.STRING, None),
    # Named listeners and how they authenticate (broker/security/listener_config.py).
    ConfigDef(
        "listener.security.protocol.map",
        _T.STRING,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    ),
    ConfigDef("inter.broker.listener.name", _T.STRING, None),
    ConfigDef(
        "security.inter.broker.protocol",
        _T.STRING,
        "PLAINTEXT",
        one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    ),
    ConfigDef("sasl.enabled.mechanisms", _T.LIST, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"),
    ConfigDef("sasl.mechanism.inter.broker.protocol", _T.STRING, "PLAIN"),
    ConfigDef("sasl.mechanism.controller.protocol", _T.STRING, "PLAIN"),
    ConfigDef("sasl.jaas.config", _T.PASSWORD, None, sensitive=True),
    # Kerberos (GSSAPI): not offered here (sasl.enabled.mechanisms refuses it), but Kafka
    # lists these among the dynamic listener configs, so admin tools that set them per broker
    # (librdkafka's 0081-admin does) get them stored and described, as Kafka answers.
    ConfigDef("sasl.kerberos.service.name", _T.STRING, None, dynamic=True),
    ConfigDef("sasl.kerberos.kinit.cmd", _T.STRING, "/usr/bin/kinit", dynamic=True),
    ConfigDef("sasl.kerberos.ticket.renew.window.factor", _T.DOUBLE, "0.8", dynamic=True),
    ConfigDef("sasl.kerberos.ticket.renew.jitter", _T.DOUBLE, "0.05", dynamic=True),
    ConfigDef("sasl.kerberos.min.time.before.relogin", _T.LONG, "60000", dynamic=True),
    ConfigDef("sasl.kerberos.principal.to.local.rules", _T.LIST, "DEFAULT", dynamic=True),
    ConfigDef("connections.max.reauth.ms", _T.LONG, "0", at_least(0)),
    ConfigDef("connection.failed.authentication.delay.ms", _T.INT, "100", at_least(0)),
    # TLS of SSL and SASL_SSL listeners (broker/security/ssl_config.py; PEM stores only).
    ConfigDef("ssl.keystore.type", _T.STRING, "PEM", one_of("PEM")),
    ConfigDef("ssl.keystore.location", _T.STRING, None),
    ConfigDef("ssl.keystore.certificate.chain", _T.PASSWORD, None, sensitive=True),
    ConfigDef("ssl.keystore.key", _T.PASSWORD, None, sensitive=True),
    ConfigDef("ssl.key.password", _T.PASSWORD, None, sensitive=True),
    ConfigDef("ssl.truststore.type", _T.STRING, "PEM", one_of("PEM")),
    ConfigDef("ssl.truststore.location", _T.STRING, None),
    ConfigDef("ssl.truststore.certificates", _T.PASSWORD, None, sensitive=True),
    ConfigDef("ssl.client.auth", _T.STRING, "none", one_of("required", "requested", "none")),
    ConfigDef("ssl.enabled.protocols", _T.LIST, "TLSv1.2,TLSv1.3"),
    ConfigDef("ssl.cipher.suites", _T.LIST, ""),
    ConfigDef("ssl.endpoint.identification.algorithm", _T.STRING, "https"),
    ConfigDef("ssl.principal.mapping.rules", _T.STRING, "DEFAULT"),
    ConfigDef("admin.listener", _T.STRING, None),
    # The REST admin API (kraft.rest): who may call it, and its TLS when admin.listener is
    # https://.  Each admin.ssl.* key falls back to the node's ssl.* key of the same name.
    ConfigDef("admin.authentication", _T.STRING, None, one_of("basic", "none")),
    ConfigDef("admin.ssl.keystore.type", _T.STRING, "PEM"),
    ConfigDef("admin.ssl.keystore.location", _T.STRING, None),
    ConfigDef("admin.ssl.keystore.certificate.chain", _T.PASSWORD, None, sensitive=True),
    ConfigDef("admin.ssl.keystore.key", _T.PASSWORD, None, sensitive=True),
    ConfigDef("admin.ssl.key.password", _T.PASSWORD, None, sensitive=True),
    ConfigDef("admin.ssl.truststore.type", _T.STRING, "PEM"),
    ConfigDef("admin.ssl.truststore.location", _T.STRING, None),
    ConfigDef("admin.ssl.truststore.certificates", _T.PASSWORD, None, sensitive=True),
    ConfigDef("admin.ssl.client.auth", _T.STRING, "none", one_of("required", "requested", "none")),
    ConfigDef("admin.ssl.enabled.protocols", _T.LIST, "TLSv1.2,TLSv1.3"),
    ConfigDef("admin.ssl.cipher.suites", _T.LIST, ""),
    ConfigDef("log.dirs", _T.LIST, None),
    ConfigDef("log.dir", _T.STRING, "/tmp/kafka-logs"),
    ConfigDef("metadata.log.dir", _T.STRING, None),
    ConfigDef("metadata.log.max.record.bytes.between.snapshots", _T.LONG, "20971520", at_least(1)),
    ConfigDef("metadata.log.max.snapshot.interval.ms", _T.LONG, "3600000", at_least(1000)),
    # The Raft journal is compacted once it holds more entries than this (kraft.quorum.raft).
    ConfigDef("controller.quorum.journal.max.entries", _T.INT, "5000", at_least(10)),
    ConfigDef("num.partitions", _T.INT, "1", at_least(1), dynamic=True),
    ConfigDef("default.replication.factor", _T.INT, "1", at_least(1), dynamic=True),
    ConfigDef("auto.create.topics.enable", _T.BOOLEAN, "true"),
    ConfigDef("delete.topic.enable", _T.BOOLEAN, "true"),
    ConfigDef("socket.request.max.bytes", _T.INT, "104857600", at_least(1024)),
    # Connections of every Kafka listener (Kafka's SocketServerConfigs); -1 idle: never closed.
    ConfigDef("connections.max.idle.ms", _T.LONG, "600000", at_least_or(10, -1)),
    ConfigDef("max.connections", _T.INT, str(INT_MAX), at_least(0)),
    ConfigDef("max.connections.per.ip", _T.INT, str(INT_MAX), at_least(0)),
    ConfigDef("max.connections.per.ip.overrides", _T.STRING, ""),
    # Kafka's default is -1 (no limit; 0 or less is none); ours bounds what a flood of
    # requests can hold, at 2.5 maximum-size requests (socket.request.max.bytes).
    ConfigDef("queued.max.request.bytes", _T.LONG, "268435456", at_least(-1)),
    ConfigDef("broker.heartbeat.interval.ms", _T.INT, "2000", at_least(1)),
    ConfigDef("broker.session.timeout.ms", _T.INT, "9000", at_least(1)),
    ConfigDef("offsets.topic.replication.factor", _T.SHORT, "3", at_least(1)),
    ConfigDef("offsets.topic.num.partitions", _T.INT, "50", at_least(1)),
    ConfigDef("offsets.topic.segment.bytes", _T.INT, "104857600", at_least(1024)),
    ConfigDef("offsets.retention.minutes", _T.INT, "10080", at_least(1)),
    ConfigDef("offsets.retention.check.interval.ms", _T.LONG, "600000", at_least(10)),
    ConfigDef("offsets.commit.timeout.ms", _T.INT, "5000", at_least(1)),
    ConfigDef("offset.metadata.max.bytes", _T.INT, "4096", at_least(0)),
    ConfigDef("group.min.session.timeout.ms", _T.INT, "6000", at_least(1)),
    ConfigDef("group.max.session.timeout.ms", _T.INT, "1800000", at_least(1)),
    ConfigDef("group.initial.rebalance.delay.ms", _T.INT, "3000", at_least(0)),
    ConfigDef("group.max.size", _T.INT, "2147483647", at_least(1)),
    # KIP-848 consumer groups (Kafka's GroupCoordinatorConfig); assignors by class or short name
    ConfigDef("group.consumer.session.timeout.ms", _T.INT, "45000", at_least(1)),
    ConfigDef("group.consumer.min.session.timeout.ms", _T.INT, "45000", at_least(1)),
    ConfigDef("group.consumer.max.session.timeout.ms", _T.INT, "60000", at_least(1)),
    ConfigDef("group.consumer.heartbeat.interval.ms", _T.INT, "5000", at_least(1)),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", _T.INT, "5000", at_least(1)),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", _T.INT, "15000", at_least(1)),
    ConfigDef("group.consumer.max.size", _T.INT, "2147483647", at_least(1)),
    ConfigDef(
        "group.consumer.assignors",
        _T.LIST,
        "org.apache.kafka.coordinator.group.assignor.UniformAssignor,"
        "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
        each_one_of(
            "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
            "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
            "uniform",
            "range",
        ),
    ),
    ConfigDef("log.retention.check.interval.ms", _T.LONG, "300000", at_least(100)),
    ConfigDef("log.retention.ms", _T.LONG, None, dynamic=True),
    ConfigDef("log.retention.minutes", _T.INT, None, dynamic=True),
    ConfigDef("log.retention.hours", _T.INT, "168", dynamic=True),
    ConfigDef("log.roll.ms", _T.LONG, None, dynamic=True),
    ConfigDef("log.roll.hours", _T.INT, "168", at_least(1), dynamic=True),
    ConfigDef("log.roll.jitter.ms", _T.LONG, None, dynamic=True),
    ConfigDef("log.roll.jitter.hours", _T.INT, "0", at_least(0), dynamic=True),
    ConfigDef("log.flush.interval.ms", _T.LONG, None, dynamic=True),
    # Leader balance, read by the active controller (Kafka's ReplicationConfigs; static there).
    ConfigDef("auto.leader.rebalance.enable", _T.BOOLEAN, "true"),
    ConfigDef("leader.imbalance.check.interval.seconds", _T.LONG, "300", at_least(1)),
    ConfigDef("leader.imbalance.per.broker.percentage", _T.INT, "10", at_least(0)),
    # Partition replication, read by brokers (Kafka's ReplicationConfigs).
    ConfigDef("replica.lag.time.max.ms", _T.LONG, "30000", at_least(20)),
    ConfigDef("log.cleaner.backoff.ms", _T.LONG, "15000", at_least(10)),
    ConfigDef("replica.fetch.wait.max.ms", _T.INT, "500", at_least(0)),
    ConfigDef("replica.fetch.max.bytes", _T.INT, "1048576", at_least(1024)),
    ConfigDef("replica.fetch.response.max.bytes", _T.INT, "10485760", at_least(1024)),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", _T.LONG, "5000", at_least(10)),
    # Idempotent producers' state (Kafka's TransactionLogConfigs, KIP-854).
    ConfigDef("producer.id.expiration.ms", _T.INT, "86400000", at_least(1)),
    ConfigDef("producer.id.expiration.check.interval.ms", _T.INT, "600000", at_least(1)),
    # The transaction coordinator (Kafka's TransactionLogConfigs / TransactionStateManagerConfigs).
    ConfigDef("transaction.state.log.num.partitions", _T.INT, "50", at_least(1)),
    ConfigDef("transaction.state.log.replication.factor", _T.SHORT, "3", at_least(1)),
    ConfigDef("transaction.state.log.min.isr", _T.INT, "2", at_least(1)),
    ConfigDef("transaction.state.log.segment.bytes", _T.INT, "104857600", at_least(1024)),
    ConfigDef("transaction.max.timeout.ms", _T.INT, "900000", at_least(1)),
    ConfigDef("transactional.id.expiration.ms", _T.INT, "604800000", at_least(1)),
    ConfigDef(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        _T.INT,
        "10000",
        at_least(1),
    ),
    ConfigDef(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        _T.INT,
        "3600000",
        at_least(1),
    ),
    ConfigDef("transaction.partition.verification.enable", _T.BOOLEAN, "true"),
    # Authorization (broker/security/authorization.py): Kafka's StandardAuthorizer or none.
    ConfigDef("authorizer.class.name", _T.STRING, "", one_of("", STANDARD_AUTHORIZER)),
    ConfigDef("super.users", _T.STRING, ""),  # "User:admin;User:broker"
    ConfigDef("allow.everyone.if.no.acl.found", _T.BOOLEAN, "false"),
    # Ours (kraft/node/autoconfigure.py): a single node generates its certificate and admin user.
    ConfigDef("security.autoconfigure", _T.BOOLEAN, "false"),
    # Follower fetching (KIP-392, broker/replica_selector.py): the rack of this broker, and the
    # selector a leader asks for a consumer's preferred read replica (unset: the leader).
    ConfigDef("broker.rack", _T.STRING, None),
    ConfigDef(
        "replica.selector.class",
        _T.CLASS,
        None,
        one_of("org.apache.kafka.common.replica.RackAwareReplicaSelector"),
    ),
    # DescribeTopicPartitions (KIP-966): the most partitions one response describes.
    ConfigDef("max.request.partition.size.limit", _T.INT, "2000", at_least(1)),
    # Client quotas (broker/quotas): the rate is measured over num windows of size seconds.
    ConfigDef("quota.window.num", _T.INT, "11", at_least(1)),
    ConfigDef("quota.window.size.seconds", _T.INT, "1", at_least(1)),
    *_broker_topic_defaults(),
    # Replication throttles (KIP-73, broker/replication/throttle.py): bytes per second, dynamic
    # per broker or cluster-wide; the rate is measured over window.num windows.
    ConfigDef(
        "leader.replication.throttled.rate", _T.LONG, str(LONG_MAX), at_least(0), dynamic=True
    ),
    ConfigDef(
        "follower.replication.throttled.rate", _T.LONG, str(LONG_MAX), at_least(0), dynamic=True
    ),
    ConfigDef("replication.quota.window.num", _T.INT, "11", at_least(1)),
    ConfigDef("replication.quota.window.size.seconds", _T.INT, "1", at_least(1)),
)


@dataclass(frozen=True, slots=True)
class BrokerConfigSources:
    """The broker-side layers a topic config falls back to, highest precedence first."""

    dynamic_broker: Mapping[str, str] = field(default_factory=dict)  # BROKER "<id>"
    dynamic_default: Mapping[str, str] = field(default_factory=dict)  # BROKER ""
    static: Mapping[str, str] = field(default_factory=dict)  # server.properties, env, overrides

    @classmethod
    def from_image(
        cls, image: ClusterImage, broker_id: int | None, static: Mapping[str, str]
    ) -> BrokerConfigSources:
        broker = ConfigResourceType.BROKER
        node = (
            {}
            if broker_id is None
            else image.configs.get(ConfigResource(broker, str(broker_id)), {})
        )
        return cls(
            dynamic_broker=node,
            dynamic_default=image.configs.get(ConfigResource(broker, ""), {}),
            static=static,
        )

    def layers(self) -> tuple[tuple[Mapping[str, str], ConfigSource], ...]:
        return (
            (self.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.static, ConfigSource.STATIC_BROKER_CONFIG),
        )


# --- validation -------------------------------------------------------------------------------


def validate_topic_config(key: str, value: str) -> str | None:
    """Kafka's message for an unknown key or an invalid value, or None when valid."""
    config = TOPIC_CONFIGS.get(key)
    if config is None:
        return f"Unknown topic config name: {key}"
    return config.validate(value)


def validate_topic_configs(configs: Mapping[str, str]) -> str | None:
    """Every key and value, then the cross-key rules (Kafka's ``LogConfig.validateValues``)."""
    for key, value in configs.items():
        error = validate_topic_config(key, value)
        if error is not None:
            return error
    min_lag = _given_or_default(configs, "min.compaction.lag.ms")
    max_lag = _given_or_default(configs, "max.compaction.lag.ms")
    if min_lag > max_lag:
        return (
            "conflict topic config setting min.compaction.lag.ms "
            f"({min_lag}) > max.compaction.lag.ms ({max_lag})"
        )
    return None


def _given_or_default(configs: Mapping[str, str], key: str) -> int:
    raw = configs.get(key, TOPIC_CONFIGS[key].default)
    assert raw is not None, f"{key} has a default"
    return int(raw.strip())


def validate_broker_config(key: str, value: str) -> str | None:
    """For dynamic broker configs (IncrementalAlterConfigs on a BROKER resource)."""
    config = BROKER_CONFIGS.get(key)
    if config is None:
        return f"Unknown broker config name: {key}"
    if not config.dynamic:
        return f"Cannot update these configs dynamically: [{key}]"
    return config.validate(value)


def is_list_config(resource_type: int, key: str) -> bool:
    """Whether APPEND/SUBTRACT apply (Kafka's ``KafkaConfigSchema.isSplittable``)."""
    schema = TOPIC_CONFIGS if resource_type == ConfigResourceType.TOPIC else BROKER_CONFIGS
    config = schema.get(key)
    return config is not None and config.type is ConfigType.LIST


def config_default(resource_type: int, key: str) -> str | None:
    schema = TOPIC_CONFIGS if resource_type == ConfigResourceType.TOPIC else BROKER_CONFIGS
    config = schema.get(key)
    return None if config is None else config.default


# --- effective configs (DescribeConfigs) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One row of DescribeConfigs: the value, where it came from, and its synonyms."""

    name: str
    value: str | None  # None for sensitive values and for keys without a default
    source: ConfigSource
    is_default: bool
    sensitive: bool
    read_only: bool
    config_type: ConfigType
    synonyms: tuple[ConfigSynonym, ...] = ()
    documentation: str | None = None


def _convert(value: str, multiplier: int) -> str:
    if multiplier == 1:
        return value
    try:
        return str(int(value.strip()) * multiplier)
    except ValueError:
        return value  # reported as given; validation happens where the value is set


def _topic_entry(
    config: ConfigDef, overrides: Mapping[str, str], sources: BrokerConfigSources
) -> ConfigEntry:
    synonyms: list[ConfigSynonym] = []
    if config.name in overrides:
        synonyms.append(
            ConfigSynonym(config.name, overrides[config.name], ConfigSource.DYNAMIC_TOPIC_CONFIG)
        )
    for layer, source in sources.layers():
        for broker_key, multiplier in TOPIC_CONFIG_SYNONYMS.get(config.name, ()):
            if broker_key in layer:
                synonyms.append(
                    ConfigSynonym(broker_key, _convert(layer[broker_key], multiplier), source)
                )
    synonyms.append(ConfigSynonym(config.name, config.default, ConfigSource.DEFAULT_CONFIG))
    winner = synonyms[0]
    return ConfigEntry(
        name=config.name,
        value=winner.value,
        source=winner.source,
        is_default=winner.source is ConfigSource.DEFAULT_CONFIG,
        sensitive=config.sensitive,
        read_only=False,
        config_type=config.type,
        synonyms=tuple(synonyms),
        documentation=config.doc or None,
    )


def effective_topic_config(
    overrides: Mapping[str, str],
    broker_defaults: BrokerConfigSources | Mapping[str, str] | None = None,
) -> dict[str, ConfigEntry]:
    """Every (non-internal) topic config with its effective value and source, sorted by name.

    ``broker_defaults`` is either the full :class:`BrokerConfigSources` or just the static broker
    config (``server.properties`` keys such as ``log.retention.hours``).
    """
    if broker_defaults is None:
        sources = BrokerConfigSources()
    elif isinstance(broker_defaults, BrokerConfigSources):
        sources = broker_defaults
    else:
        sources = BrokerConfigSources(static=broker_defaults)
    return {
        name: _topic_entry(config, overrides, sources)
        for name, config in sorted(TOPIC_CONFIGS.items())
        if not config.internal
    }


def effective_topic_value(
    key: str, overrides: Mapping[str, str], sources: BrokerConfigSources
) -> ConfigValue:
    """The parsed effective value of one topic config (what :func:`effective_topic_config`
    reports for ``key``, without resolving every other key); an invalid stored value reads as
    the default."""
    config = TOPIC_CONFIGS[key]
    raw = _topic_entry(config, overrides, sources).value
    if raw is None or config.validate(raw) is not None:
        assert config.default is not None, f"{key} has a default"
        raw = config.default
    return parse_value(config.type, raw)


def effective_broker_config(sources: BrokerConfigSources) -> dict[str, ConfigEntry]:
    """Every broker config of :data:`BROKER_CONFIGS` as DescribeConfigs on a BROKER reports it."""
    out: dict[str, ConfigEntry] = {}
    for name, config in sorted(BROKER_CONFIGS.items()):
        synonyms = [
            ConfigSynonym(name, layer[name], src)
            for layer, src in sources.layers()
            if name in layer
        ]
        synonyms.append(ConfigSynonym(name, config.default, ConfigSource.DEFAULT_CONFIG))
        winner = synonyms[0]
        out[name] = ConfigEntry(
            name=name,
            value=None if config.sensitive else winner.value,
            source=winner.source,
            is_default=winner.source is ConfigSource.DEFAULT_CONFIG,
            sensitive=config.sensitive,
            read_only=not config.dynamic,
            config_type=config.type,
            synonyms=tuple(synonyms),
        )
    return out
