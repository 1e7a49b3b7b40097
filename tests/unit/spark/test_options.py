"""The source's options: Spark's Kafka connector names, precedence and errors."""

from __future__ import annotations

import pytest

from kafka_protocol.compression import Compression
from spark_source.options import (
    EARLIEST,
    LATEST,
    OptionError,
    derived_group_id,
    parse_read_options,
    parse_write_options,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "events"}


def read(streaming: bool = True, **extra: str) -> object:
    return parse_read_options({**BASE, **extra}, streaming=streaming)


def test_defaults_follow_spark() -> None:
    stream = parse_read_options(BASE, streaming=True)
    batch = parse_read_options(BASE, streaming=False)
    assert stream.starting.default == LATEST and batch.starting.default == EARLIEST
    assert batch.ending.default == LATEST
    assert stream.fail_on_data_loss and not stream.include_headers
    assert stream.max_offsets_per_trigger is None and stream.commit_offsets
    assert stream.max_trigger_delay_ms == 15 * 60 * 1000


def test_exactly_one_subscription() -> None:
    with pytest.raises(OptionError, match="exactly one"):
        parse_read_options({"kafka.bootstrap.servers": "h:1"}, streaming=True)
    with pytest.raises(OptionError, match="exactly one"):
        read(subscribePattern="e.*")


def test_assign_and_pattern() -> None:
    opts = parse_read_options(
        {"kafka.bootstrap.servers": "h:1", "assign": '{"b": [1, 0], "a": [2]}'}, streaming=True
    )
    assert opts.subscription.partitions == (("a", 2), ("b", 0), ("b", 1))
    pattern = parse_read_options(
        {"kafka.bootstrap.servers": "h:1", "subscribePattern": "ev.*"}, streaming=True
    ).subscription
    assert pattern.matches("events") and not pattern.matches("xevents")
    with pytest.raises(OptionError, match="list of partitions"):
        parse_read_options({"kafka.bootstrap.servers": "h:1", "assign": '{"a": 1}'}, streaming=True)
    with pytest.raises(OptionError, match="regex"):
        parse_read_options(
            {"kafka.bootstrap.servers": "h:1", "subscribePattern": "("}, streaming=True
        )


def test_starting_offsets_json_and_timestamp_precedence() -> None:
    opts = read(startingOffsets='{"events": {"0": 23, "1": -2}}')
    assert opts.starting.offsets == {("events", 0): 23, ("events", 1): EARLIEST}
    opts = read(startingOffsets="earliest", startingTimestamp="1000")
    assert opts.starting.timestamp_for_all == 1000
    opts = read(startingOffsetsByTimestamp='{"events": {"0": 5}}')
    assert opts.starting.timestamps == {("events", 0): 5} and opts.starting.no_match == "error"
    with pytest.raises(OptionError, match="JSON"):
        read(startingOffsets="{nope")
    with pytest.raises(OptionError, match="earliest or latest"):
        read(startingOffsets="middle")


def test_ending_offsets_are_for_batch_queries() -> None:
    with pytest.raises(OptionError, match="batch"):
        read(endingOffsets="latest")
    opts = read(False, endingOffsets='{"events": {"0": 10}}')
    assert opts.ending.offsets == {("events", 0): 10}
    with pytest.raises(OptionError, match="latest"):
        read(False, endingOffsets="earliest")


def test_kafka_options_pass_through_and_refusals() -> None:
    opts = read(**{"kafka.client.id": "x", "kafka.Fetch.Max.Bytes": "1000"})
    assert opts.client_config == {
        "client.id": "x",
        "fetch.max.bytes": "1000",
        "max.partition.fetch.bytes": str(8 << 20),  # the source's larger default
    }
    mine = read(**{"kafka.max.partition.fetch.bytes": "1048576"})
    assert mine.client_config["max.partition.fetch.bytes"] == "1048576"
    with pytest.raises(OptionError, match="startingOffsets"):
        read(**{"kafka.auto.offset.reset": "earliest"})
    with pytest.raises(OptionError, match="PLAINTEXT"):
        read(**{"kafka.security.protocol": "SASL_SSL"})
    with pytest.raises(OptionError, match="bootstrap"):
        parse_read_options({"subscribe": "t"}, streaming=True)


def test_group_id_given_or_derived_stably() -> None:
    assert read(**{"kafka.group.id": "mine"}).group_id == "mine"
    first, again = read(), read()
    assert first.group_id == again.group_id and first.group_id.startswith("kraft-spark-")
    assert read(startingOffsets="earliest").group_id != first.group_id
    assert read(subscribe="other").group_id != first.group_id
    assert read(groupIdPrefix="etl").group_id.startswith("etl-")
    assert derived_group_id("p", first.subscription, first.starting) == derived_group_id(
        "p", again.subscription, again.starting
    )


def test_numbers_and_durations() -> None:
    opts = read(maxOffsetsPerTrigger="1000", minOffsetsPerTrigger="10", maxTriggerDelay="30s")
    assert (opts.max_offsets_per_trigger, opts.min_offsets_per_trigger) == (1000, 10)
    assert opts.max_trigger_delay_ms == 30_000
    assert read(maxTriggerDelay="2m").max_trigger_delay_ms == 120_000
    with pytest.raises(OptionError, match="positive"):
        read(maxOffsetsPerTrigger="0")
    with pytest.raises(OptionError, match="true or false"):
        read(failOnDataLoss="maybe")
    assert read(failOnDataLoss="FALSE").fail_on_data_loss is False


def test_write_options() -> None:
    opts = parse_write_options({**BASE, "topic": "out", "kafka.compression.type": "zstd"})
    assert opts.topic == "out" and opts.compression is Compression.ZSTD
    with pytest.raises(OptionError, match="compression"):
        parse_write_options({**BASE, "kafka.compression.type": "brotli"})


def test_isolation_level_is_checked_when_the_query_is_defined() -> None:
    committed = parse_read_options(
        {**BASE, "kafka.isolation.level": "read_committed"}, streaming=True
    )
    assert committed.client_config["isolation.level"] == "read_committed"
    assert "isolation.level" not in parse_read_options(BASE, streaming=True).client_config
    with pytest.raises(OptionError, match=r"kafka\.isolation\.level must be read_uncommitted or"):
        read(**{"kafka.isolation.level": "snapshot"})


def test_exactly_once_write_options() -> None:
    opts = parse_write_options({**BASE, "topic": "out", "kafka.transactional.id.prefix": " q1 "})
    assert opts.transactional_id_prefix == "q1"
    assert "transactional.id.prefix" not in opts.client_config  # not a producer key
    assert parse_write_options({**BASE, "topic": "out"}).transactional_id_prefix is None
    with pytest.raises(OptionError, match="every task needs an id of its own"):
        parse_write_options({**BASE, "topic": "out", "kafka.transactional.id": "t"})
    with pytest.raises(OptionError, match="must not be empty"):
        parse_write_options({**BASE, "topic": "out", "kafka.transactional.id.prefix": " "})
    for key, value in (("kafka.acks", "1"), ("kafka.enable.idempotence", "false")):
        with pytest.raises(OptionError, match=r"needs kafka\.acks=all"):
            parse_write_options(
                {**BASE, "topic": "o", "kafka.transactional.id.prefix": "p", key: value}
            )
