"""The config schema: Kafka's topic and broker keys, defaults, validation, effective values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.log.config import LogConfig as BrokerLogConfig
from kafka_protocol.metadata import ConfigRecord
from metadata_log.configs import (
    BROKER_CONFIGS,
    LONG_MAX,
    TOPIC_CONFIG_SYNONYMS,
    TOPIC_CONFIGS,
    BrokerConfigSources,
    ConfigSource,
    ConfigType,
    effective_broker_config,
    effective_topic_config,
    effective_topic_value,
    is_list_config,
    parse_value,
    validate_broker_config,
    validate_topic_config,
    validate_topic_configs,
)
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage

KAFKA_TOPIC_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": str(LONG_MAX),
    "flush.ms": str(LONG_MAX),
    "index.interval.bytes": "4096",
    "max.compaction.lag.ms": str(LONG_MAX),
    "max.message.bytes": "1048588",
    "message.downconversion.enable": "true",
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": str(LONG_MAX),
    "message.timestamp.after.max.ms": "3600000",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}

INTERFACE_BROKER_DEFAULTS = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "auto.create.topics.enable": "true",
    "log.segment.bytes": "1073741824",
    "log.retention.hours": "168",
    "log.retention.bytes": "-1",
    "log.cleanup.policy": "delete",
    "message.max.bytes": "1048588",
    "socket.request.max.bytes": "104857600",
    "broker.heartbeat.interval.ms": "2000",
    "broker.session.timeout.ms": "9000",
    "unclean.leader.election.enable": "false",
    "offsets.topic.num.partitions": "50",
    "log.flush.interval.messages": str(LONG_MAX),
}


def test_kafka_topic_defaults() -> None:
    for key, default in KAFKA_TOPIC_DEFAULTS.items():
        assert TOPIC_CONFIGS[key].default == default, key


def test_broker_defaults() -> None:
    for key, default in INTERFACE_BROKER_DEFAULTS.items():
        assert BROKER_CONFIGS[key].default == default, key
    assert BROKER_CONFIGS["log.flush.interval.ms"].default is None


def test_every_default_is_valid_and_every_synonym_is_a_broker_key() -> None:
    for config in [*TOPIC_CONFIGS.values(), *BROKER_CONFIGS.values()]:
        if config.default is not None:
            assert config.validate(config.default) is None, config.name
    for topic_key, synonyms in TOPIC_CONFIG_SYNONYMS.items():
        assert topic_key in TOPIC_CONFIGS
        for broker_key, _ in synonyms:
            assert broker_key in BROKER_CONFIGS and BROKER_CONFIGS[broker_key].dynamic, broker_key


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("segment.bytes", "1048576", None),
        (
            "segment.bytes",
            "1024",
            "Invalid value 1024 for configuration segment.bytes: Value must be at least 1048576",
        ),
        ("segment.bytes", "2147483648", "Not a number of type INT"),
        ("retention.ms", "-1", None),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("retention.ms", " 100 ", None),
        ("retention.ms", "1e3", "Not a number of type LONG"),
        ("cleanup.policy", "compact,delete", None),
        ("cleanup.policy", "compact, delete", None),
        ("cleanup.policy", "", None),
        ("cleanup.policy", "keep", "String must be one of: compact, delete"),
        ("compression.type", "zstd", None),
        ("compression.type", "brotli", "String must be one of"),
        ("message.timestamp.type", "LogAppendTime", None),
        ("message.timestamp.type", "logappendtime", "String must be one of"),
        ("min.cleanable.dirty.ratio", "0.25", None),
        ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"),
        ("min.cleanable.dirty.ratio", "nan", "Not a number of type DOUBLE"),
        ("preallocate", "TRUE", None),
        ("preallocate", "yes", "Expected value to be either true or false"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("compression.gzip.level", "-1", None),
        ("compression.gzip.level", "0", "between 1 and 9 or equal to -1"),
        ("compression.zstd.level", "-5", None),
        ("leader.replication.throttled.replicas", "*", None),
        ("leader.replication.throttled.replicas", "0:1,1:2", None),
        ("leader.replication.throttled.replicas", "x", "must be the literal '*'"),
        ("internal.segment.bytes", "100", None),
        ("internal.segment.bytes", "10", "Value must be at least 14"),
        ("no.such.config", "1", "Unknown topic config name: no.such.config"),
    ],
)
def test_validate_topic_config(key: str, value: str, error: str | None) -> None:
    result = validate_topic_config(key, value)
    if error is None:
        assert result is None
    else:
        assert result is not None and error in result


def test_cross_key_validation() -> None:
    assert validate_topic_configs(
        {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}
    ) == ("conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)")
    assert (
        validate_topic_configs({"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "10"})
        is None
    )


@given(st.text(max_size=12))
def test_validation_never_raises(value: str) -> None:
    for key in TOPIC_CONFIGS:
        validate_topic_config(key, value)


def test_parse_value() -> None:
    assert parse_value(ConfigType.LIST, " a , b ") == ["a", "b"]
    assert parse_value(ConfigType.BOOLEAN, " False ") is False
    assert parse_value(ConfigType.LONG, "+7") == 7
    with pytest.raises(ValueError):
        parse_value(ConfigType.INT, "\u0661")  # ARABIC-INDIC DIGIT ONE: only ASCII digits
    with pytest.raises(ValueError):
        parse_value(ConfigType.INT, "1_000")


def test_effective_topic_config_precedence() -> None:
    sources = BrokerConfigSources(
        dynamic_broker={"log.retention.ms": "1"},
        dynamic_default={"log.retention.ms": "2", "log.segment.bytes": "2097152"},
        static={"log.retention.hours": "1", "log.segment.bytes": "3145728", "log.roll.hours": "2"},
    )
    entries = effective_topic_config({"cleanup.policy": "compact"}, sources)
    assert "internal.segment.bytes" not in entries
    assert set(entries) == {k for k, c in TOPIC_CONFIGS.items() if not c.internal}
    cleanup = entries["cleanup.policy"]
    assert (cleanup.value, cleanup.source, cleanup.is_default) == (
        "compact",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        False,
    )
    retention = entries["retention.ms"]
    assert (retention.value, retention.source) == ("1", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("log.retention.ms", "1", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "3600000", ConfigSource.STATIC_BROKER_CONFIG),
        ("retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG),
    ]
    assert entries["segment.bytes"].source is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert (entries["segment.ms"].value, entries["segment.ms"].source) == (
        "7200000",
        ConfigSource.STATIC_BROKER_CONFIG,
    )
    default = entries["flush.ms"]
    assert (default.value, default.source, default.is_default, default.read_only) == (
        str(LONG_MAX),
        ConfigSource.DEFAULT_CONFIG,
        True,
        False,
    )


def test_a_plain_mapping_is_the_static_broker_config() -> None:
    entries = effective_topic_config({}, {"log.retention.minutes": "2"})
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == (
        "120000",
        ConfigSource.STATIC_BROKER_CONFIG,
    )


def test_broker_config_sources_from_image() -> None:
    image = replay_records(
        ClusterImage.EMPTY,
        [
            ConfigRecord(resource_type=4, resource_name="", name="log.retention.ms", value="5"),
            ConfigRecord(resource_type=4, resource_name="1", name="log.retention.ms", value="6"),
        ],
    )
    assert (
        effective_topic_config({}, BrokerConfigSources.from_image(image, 1, {}))[
            "retention.ms"
        ].value
        == "6"
    )
    assert (
        effective_topic_config({}, BrokerConfigSources.from_image(image, 2, {}))[
            "retention.ms"
        ].value
        == "5"
    )
    assert (
        effective_topic_config({}, BrokerConfigSources.from_image(image, None, {}))[
            "retention.ms"
        ].value
        == "5"
    )


def test_log_config() -> None:
    # Was metadata_log.configs.LogConfig.resolve (unused, removed by issue 15); the same facts
    # through what the brokers use: effective_topic_value and broker.log.config.LogConfig.
    static = BrokerConfigSources(static={"log.retention.hours": "2"})
    overrides = {"cleanup.policy": "compact,delete", "retention.ms": "bogus"}

    def value(key: str, over: dict[str, str] = overrides) -> object:
        return effective_topic_value(key, over, static)

    log = BrokerLogConfig.from_topic_configs({"cleanup.policy": "compact,delete"})
    assert log.compact and log.delete
    assert value("retention.ms") == 604800000, "an invalid stored value reads as the default"
    assert value("segment.bytes") == 1073741824 and value("max.message.bytes") == 1048588
    assert value("retention.ms", {}) == 7_200_000
    assert (
        BrokerLogConfig.from_topic_configs({"internal.segment.bytes": "4096"}).segment_bytes == 4096
    )
    assert value("min.cleanable.dirty.ratio", {"min.cleanable.dirty.ratio": "0.1"}) == 0.1


def test_broker_configs() -> None:
    assert validate_broker_config("log.retention.ms", "5") is None
    assert validate_broker_config("message.max.bytes", "-1") is not None
    assert (
        validate_broker_config("node.id", "3")
        == "Cannot update these configs dynamically: [node.id]"
    )
    assert validate_broker_config("bogus", "3") == "Unknown broker config name: bogus"
    assert is_list_config(2, "cleanup.policy") and not is_list_config(2, "retention.ms")
    assert is_list_config(4, "log.cleanup.policy")
    entries = effective_broker_config(
        BrokerConfigSources(static={"controller.quorum.password": "s", "node.id": "1"})
    )
    password = entries["controller.quorum.password"]
    assert (password.value, password.sensitive, password.source) == (
        None,
        True,
        ConfigSource.STATIC_BROKER_CONFIG,
    )
    assert entries["node.id"].read_only and not entries["log.retention.ms"].read_only
