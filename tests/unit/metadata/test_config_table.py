"""One table of config definitions (``metadata_log.configs``): the log's ``LogConfig`` and the
node's startup checks read their defaults and ranges from it instead of stating them again."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import kraft.node.run
from broker.log.config import STORAGE_MINIMUMS, TOPIC_CONFIG_KEYS, LogConfig
from kraft.node.config import ConfigError, load_config
from metadata_log.configs import BROKER_CONFIGS, INT_MAX, LONG_MAX, TOPIC_CONFIGS, Range


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


def _at_least_calls() -> list[tuple[str, int, int]]:
    """``_at_least(cfg, KEY, DEFAULT, MINIMUM)`` as kraft/node/run.py states them today."""
    tree = ast.parse(Path(kraft.node.run.__file__).read_text())
    calls = []
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "_at_least":
            key, default, minimum = (ast.unparse(a) for a in call.args[1:])
            calls.append((ast.literal_eval(key), eval(default, {}), eval(minimum, {})))
    return calls


def test_the_node_startup_checks_agree_with_the_table() -> None:
    """Until run.py reads them with ``get_bounded_int``, its stated defaults and minimums must be
    the table's (the table is what DescribeConfigs reports)."""
    calls = _at_least_calls()
    for key, default, minimum in calls:
        definition = BROKER_CONFIGS[key]
        assert (definition.default_value, definition.bounds[0]) == (default, minimum), key
