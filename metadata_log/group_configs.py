"""Group configs (KIP-848's dynamic per-group settings, Kafka 4.0's ``GroupConfig``): the
schema, the controller's validation and the effective values DescribeConfigs reports.

A GROUP config resource is named by a group id; its overrides are ConfigRecords of resource
type GROUP (32) in the metadata log, kept by the image like any other resource's configs.  A
group need not exist to be configured or described.  Each key overrides one broker key for that
group alone::

    consumer.session.timeout.ms      <- group.consumer.session.timeout.ms
    consumer.heartbeat.interval.ms   <- group.consumer.heartbeat.interval.ms

An override is accepted within the broker's ``group.consumer.min.*`` / ``group.consumer.max.*``
bounds (those of the controller that validates it, as in Kafka), and the session timeout must
stay above the heartbeat interval, a key not given counting at its table default (Kafka
validates the parsed set likewise).  DescribeConfigs reports each key with source GROUP_CONFIG
when overridden, else the broker's value with source DEFAULT_CONFIG (Kafka's ``ConfigHelper``).
Kafka's share-group keys (``share.*``) are not here: there are no share groups.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from metadata_log.configs import (
    BROKER_CONFIGS,
    ConfigDef,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    at_least,
)

SESSION_TIMEOUT: Final = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL: Final = "consumer.heartbeat.interval.ms"

# group key -> the broker key it overrides (whose value is also its default)
BROKER_KEY: Final[Mapping[str, str]] = {
    SESSION_TIMEOUT: "group.consumer.session.timeout.ms",
    HEARTBEAT_INTERVAL: "group.consumer.heartbeat.interval.ms",
}

GROUP_CONFIGS: Final[Mapping[str, ConfigDef]] = {
    name: ConfigDef(name, ConfigType.INT, BROKER_CONFIGS[broker_key].default, at_least(1))
    for name, broker_key in sorted(BROKER_KEY.items())
}


def _broker_int(broker: Mapping[str, str], key: str) -> int:
    """A ``group.consumer.*`` key of the node's static config, else (unset or invalid) its
    table default."""
    config = BROKER_CONFIGS[key]
    raw = broker.get(key)
    if raw is None or config.validate(raw) is not None:
        return config.int_default
    return int(raw.strip())


def validate_group_configs(configs: Mapping[str, str], broker: Mapping[str, str]) -> str | None:
    """Kafka's message for the first problem of a group's new config set, or None: unknown key,
    unparsable or out-of-range value, a value outside the broker's min/max, a session timeout
    not above the heartbeat interval.  ``broker``: the validating node's static config."""
    for key, raw in configs.items():
        config = GROUP_CONFIGS.get(key)
        if config is None:
            return f"Unknown group config name: {key}"
        error = config.validate(raw)
        if error is not None:
            return error
    values = {
        key: int((configs.get(key) or config.default or "0").strip())
        for key, config in GROUP_CONFIGS.items()
    }
    for key, what in (
        (HEARTBEAT_INTERVAL, "heartbeat.interval"),
        (SESSION_TIMEOUT, "session.timeout"),
    ):
        low_key, high_key = f"group.consumer.min.{what}.ms", f"group.consumer.max.{what}.ms"
        if values[key] < _broker_int(broker, low_key):
            return f"{key} must be greater than or equal to {low_key}"
        if values[key] > _broker_int(broker, high_key):
            return f"{key} must be less than or equal to {high_key}"
    if values[SESSION_TIMEOUT] <= values[HEARTBEAT_INTERVAL]:
        return f"{SESSION_TIMEOUT} must be greater than {HEARTBEAT_INTERVAL}"
    return None


def effective_group_config(
    overrides: Mapping[str, str], broker: Mapping[str, str]
) -> dict[str, ConfigEntry]:
    """Every group config as DescribeConfigs on a GROUP reports it: the group's override
    (GROUP_CONFIG), else the broker's ``group.consumer.*`` value (DEFAULT_CONFIG)."""
    out: dict[str, ConfigEntry] = {}
    for name, config in GROUP_CONFIGS.items():
        if name in overrides:
            value, source = overrides[name], ConfigSource.GROUP_CONFIG
        else:
            value = str(_broker_int(broker, BROKER_KEY[name]))
            source = ConfigSource.DEFAULT_CONFIG
        out[name] = ConfigEntry(
            name=name,
            value=value,
            source=source,
            is_default=source is ConfigSource.DEFAULT_CONFIG,
            sensitive=False,
            read_only=False,
            config_type=config.type,
            synonyms=(ConfigSynonym(name, value, source),),
        )
    return out


def group_int(key: str, overrides: Mapping[str, str], fallback: int) -> int:
    """The coordinator's value of an integer group config: the group's override when it is a
    valid value of ``key``, else ``fallback`` (the broker's setting)."""
    raw = overrides.get(key)
    if raw is None or GROUP_CONFIGS[key].validate(raw) is not None:
        return fallback
    return int(raw.strip())
