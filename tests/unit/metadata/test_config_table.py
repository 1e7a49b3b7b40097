"""One table of config definitions (``metadata_log.configs``): the log's ``LogConfig`` and the
node's startup checks read their defaults and ranges from it instead of stating them again."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import kraft.node.config
import kraft.node.run
from broker.log.config import STORAGE_MINIMUMS, TOPIC_CONFIG_KEYS, LogConfig
from kraft.node.config import ConfigError, load_config
from metadata_log.configs import INT_MAX, LONG_MAX, TOPIC_CONFIGS, Range


def test_the_log_defaults_are_the_topic_config_defaults() -> None:
    defaults = LogConfig()
    for key, (name, _, _) in TOPIC_CONFIG_KEYS.items():
        assert getattr(defaults, name) == TOPIC_CONFIGS[key].default_value, key
    assert defaults.cleanup_policy == ("delete",)
    assert defaults.min_cleanable_dirty_ratio == 0.5


def test_the_log_ranges_are_the_topic_config_ranges_but_for_storage_floors() -> None:
    for key, (_, low, high) in TOPIC_CONFIG_KEYS.items():
        table_low, table_high = TOPIC_CONFIGS[key].bounds
        assert high == table_high, key
        assert low == STORAGE_MINIMUMS.get(key, table_low), key
    assert TOPIC_CONFIG_KEYS["segment.bytes"][1:] == (61, INT_MAX)
    assert TOPIC_CONFIG_KEYS["retention.ms"][1:] == (-1, LONG_MAX)


def test_a_range_is_data_and_a_validator() -> None:
    validator = TOPIC_CONFIGS["min.cleanable.dirty.ratio"].validator
    assert validator == Range(0, 1)
    assert validator(1.5) == "Value must be no more than 1"
    assert TOPIC_CONFIGS["segment.bytes"].bounds == (1024 * 1024, INT_MAX)
    with pytest.raises(ValueError, match=r"min.cleanable.dirty.ratio=1.5 is outside \[0, 1\]"):
        dataclasses.replace(LogConfig(), min_cleanable_dirty_ratio=1.5)


def test_bounded_node_keys_come_from_the_table() -> None:
    cfg = load_config(
        overrides={"node.id": "1", "process.roles": "broker", "replica.lag.time.max.ms": "25"},
        environ={},
    )
    assert cfg.get_bounded_int("replica.lag.time.max.ms") == 25
    assert cfg.get_bounded_int("socket.request.max.bytes") == 100 << 20
    low = load_config(
        overrides={"node.id": "1", "process.roles": "broker", "replica.fetch.max.bytes": "9"},
        environ={},
    )
    with pytest.raises(ConfigError, match=r"^replica.fetch.max.bytes=9 must be at least 1024$"):
        low.get_bounded_int("replica.fetch.max.bytes")


# What kraft/node/run.py enforced before it read these keys from the table (issue 15): each
# key's default and minimum, which the node must keep.
NODE_STARTUP_BOUNDS = [
    ("group.min.session.timeout.ms", 6_000, 1),
    ("group.max.session.timeout.ms", 1_800_000, 1),
    ("group.initial.rebalance.delay.ms", 3_000, 0),
    ("group.max.size", 2**31 - 1, 1),
    ("socket.request.max.bytes", 100 << 20, 1024),
    ("log.retention.check.interval.ms", 300_000, 100),
    ("replica.lag.time.max.ms", 30_000, 20),
    ("producer.id.expiration.ms", 86_400_000, 1),
    ("producer.id.expiration.check.interval.ms", 600_000, 1),
    ("log.cleaner.backoff.ms", 15_000, 10),
    ("replica.fetch.wait.max.ms", 500, 0),
    ("replica.fetch.max.bytes", 1 << 20, 1024),
    ("replica.fetch.response.max.bytes", 10 << 20, 1024),
    ("replica.high.watermark.checkpoint.interval.ms", 5_000, 10),
    ("offsets.topic.num.partitions", 50, 1),
    ("offsets.topic.replication.factor", 3, 1),
    ("offsets.topic.segment.bytes", 100 << 20, 1024),
    ("offsets.retention.minutes", 10_080, 1),
    ("offsets.retention.check.interval.ms", 600_000, 10),
    ("offsets.commit.timeout.ms", 5_000, 1),
    ("offset.metadata.max.bytes", 4096, 0),
    # issue 16: the Kafka listeners' connection limits (kraft/node/config.py's listener_limits)
    ("max.connections", 2**31 - 1, 0),
    ("max.connections.per.ip", 2**31 - 1, 0),
    ("queued.max.request.bytes", 256 << 20, -1),
    # issue 18: the transaction coordinator (kraft/node/run.py's _transaction_config)
    ("transaction.state.log.num.partitions", 50, 1),
    ("transaction.state.log.replication.factor", 3, 1),
    ("transaction.state.log.min.isr", 2, 1),
    ("transaction.state.log.segment.bytes", 100 << 20, 1024),
    ("transaction.max.timeout.ms", 900_000, 1),
    ("transactional.id.expiration.ms", 604_800_000, 1),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10_000, 1),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", 3_600_000, 1),
    ("group.consumer.session.timeout.ms", 45_000, 1),
    ("group.consumer.min.session.timeout.ms", 45_000, 1),
    ("group.consumer.max.session.timeout.ms", 60_000, 1),
    ("group.consumer.heartbeat.interval.ms", 5_000, 1),
    ("group.consumer.min.heartbeat.interval.ms", 5_000, 1),
    ("group.consumer.max.heartbeat.interval.ms", 15_000, 1),
    ("group.consumer.max.size", 2_147_483_647, 1),
    ("max.request.partition.size.limit", 2000, 1),
]


def _bounded_keys_read_by_the_node() -> set[str]:
    return {
        ast.literal_eval(call.args[0])
        for module in (kraft.node.run, kraft.node.config)
        for call in ast.walk(ast.parse(Path(module.__file__ or "").read_text()))
        if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "get_bounded_int"
    }


@pytest.mark.parametrize(("key", "default", "minimum"), NODE_STARTUP_BOUNDS)
def test_the_node_keeps_its_startup_defaults_and_minimums(
    key: str, default: int, minimum: int
) -> None:
    base = {"node.id": "1", "process.roles": "broker"}
    assert load_config(overrides=base, environ={}).get_bounded_int(key) == default
    at_minimum = load_config(overrides={**base, key: str(minimum)}, environ={})
    assert at_minimum.get_bounded_int(key) == minimum
    below = load_config(overrides={**base, key: str(minimum - 1)}, environ={})
    with pytest.raises(ConfigError, match=rf"^{key}={minimum - 1} must be at least {minimum}$"):
        below.get_bounded_int(key)


def test_the_node_reads_every_bounded_key_from_the_table() -> None:
    """run.py and config.py state no default or minimum of their own for these keys."""
    assert _bounded_keys_read_by_the_node() == {key for key, _, _ in NODE_STARTUP_BOUNDS} | {
        "connections.max.idle.ms"
    }


def test_the_idle_timeout_is_off_at_minus_one_and_otherwise_at_least_10_ms() -> None:
    def idle_ms(value: str) -> int:
        base = {"node.id": "1", "process.roles": "broker", "connections.max.idle.ms": value}
        return load_config(overrides=base, environ={}).get_bounded_int("connections.max.idle.ms")

    assert idle_ms("600000") == 600_000 and idle_ms("-1") == -1 and idle_ms("10") == 10
    for bad in ("0", "9", "-2"):
        with pytest.raises(ConfigError, match="at least 10 or equal to -1"):
            idle_ms(bad)
