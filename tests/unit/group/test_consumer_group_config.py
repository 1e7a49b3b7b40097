"""The ``group.consumer.*`` broker keys (Kafka's GroupCoordinatorConfig): Kafka's defaults, the
interval and the timeout within their min/max keys, assignors by class or short name."""

from __future__ import annotations

import pytest

from broker.group.consumer import ConsumerGroupConfig
from kraft.node.config import ConfigError, load_config
from kraft.node.run import _consumer_group_config


def config(**keys: str) -> ConsumerGroupConfig:
    overrides = {"node.id": "1", "process.roles": "broker", **keys}
    return _consumer_group_config(load_config(overrides=overrides, environ={}))


def test_kafkas_defaults() -> None:
    assert config() == ConsumerGroupConfig(
        session_timeout_ms=45_000,
        heartbeat_interval_ms=5_000,
        max_size=2**31 - 1,
        assignors=("uniform", "range"),
    )


def test_short_names_and_lowered_bounds() -> None:
    got = config(
        **{
            "group.consumer.assignors": "range",
            "group.consumer.heartbeat.interval.ms": "200",
            "group.consumer.min.heartbeat.interval.ms": "100",
        }
    )
    assert (got.assignors, got.heartbeat_interval_ms) == (("range",), 200)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"group.consumer.heartbeat.interval.ms": "200"},
            "group.consumer.heartbeat.interval.ms=200 must be within 5000-15000",
        ),
        (
            {"group.consumer.session.timeout.ms": "90000"},
            "group.consumer.session.timeout.ms=90000 must be within 45000-60000",
        ),
        ({"group.consumer.assignors": "sticky"}, "group.consumer.assignors"),
        ({"group.consumer.max.size": "0"}, "group.consumer.max.size=0 must be at least 1"),
    ],
)
def test_bad_values_stop_the_node_with_a_message(keys: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(**keys)
