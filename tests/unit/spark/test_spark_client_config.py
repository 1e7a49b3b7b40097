"""The client and producer keys: defaults, parsing, refusals."""

from __future__ import annotations

import pytest

from kafka_protocol.compression import Compression
from spark_source._client_config import ClientConfig
from spark_source.client import ConfigError, KafkaClient, parse_bootstrap
from spark_source.producer import ProducerConfig


def test_defaults_are_kafkas_except_the_socket_buffers() -> None:
    c = ClientConfig.from_mapping({})
    assert (c.request_timeout_ms, c.default_api_timeout_ms) == (30_000, 60_000)
    assert (c.fetch_max_bytes, c.max_partition_fetch_bytes) == (50 << 20, 1 << 20)
    assert (c.fetch_max_wait_ms, c.retry_backoff_ms, c.retry_backoff_max_ms) == (500, 100, 1000)
    assert c.receive_buffer_bytes == -1 and c.client_id == "kraft-spark"
    assert c.max_frame_bytes >= c.fetch_max_bytes


def test_keys_are_read_and_unknown_ones_ignored() -> None:
    c = ClientConfig.from_mapping(
        {"client.id": "me", "fetch.max.bytes": "200000000", "ssl.whatever": "x", "acks": "1"}
    )
    assert c.client_id == "me"
    assert c.fetch_max_bytes == 200_000_000
    assert c.max_frame_bytes > 200_000_000  # a fetch's worth always fits a frame


def test_check_crcs_is_kafkas_boolean() -> None:
    assert ClientConfig.from_mapping({}).check_crcs
    assert not ClientConfig.from_mapping({"check.crcs": " False"}).check_crcs
    assert ClientConfig.from_mapping({"check.crcs": "TRUE"}).check_crcs
    with pytest.raises(ConfigError, match=r"check\.crcs='maybe' is not true or false"):
        ClientConfig.from_mapping({"check.crcs": "maybe"})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("request.timeout.ms", "soon", "not an integer"),
        ("request.timeout.ms", "0", "outside"),
        ("fetch.max.wait.ms", "-5", "outside"),
    ],
)
def test_malformed_values_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"{key}.*{message}"):
        ClientConfig.from_mapping({key: value})
    with pytest.raises(ValueError):  # a ConfigError is a ValueError too
        KafkaClient("127.0.0.1:9092", {key: value})


def test_bootstrap_lists() -> None:
    assert parse_bootstrap("a:1, b:2,,[::1]:3") == [("a", 1), ("b", 2), ("::1", 3)]
    for bad in ("", " , ", "host", "host:port", ":9092"):
        with pytest.raises(ConfigError, match="bootstrap"):
            parse_bootstrap(bad)


def test_producer_defaults_are_idempotent_acks_all() -> None:
    p = ProducerConfig.from_mapping({})
    assert (p.acks, p.idempotent, p.compression) == (-1, True, Compression.NONE)
    assert (p.batch_size, p.max_request_size, p.delivery_timeout_ms) == (16384, 1 << 20, 120_000)


def test_producer_acks_and_idempotence_follow_java() -> None:
    assert ProducerConfig.from_mapping({"acks": "-1"}).idempotent
    leader_only = ProducerConfig.from_mapping({"acks": "1"})
    assert (leader_only.acks, leader_only.idempotent) == (1, False)
    with pytest.raises(ConfigError, match="needs acks=all"):
        ProducerConfig.from_mapping({"acks": "1", "enable.idempotence": "true"})
    with pytest.raises(ConfigError, match="acks=0"):
        ProducerConfig.from_mapping({"acks": "0"})
    assert not ProducerConfig.from_mapping({"enable.idempotence": "false"}).idempotent


@pytest.mark.parametrize("name", ["none", "gzip", "snappy", "lz4", "zstd", "ZSTD"])
def test_every_codec_by_name(name: str) -> None:
    assert ProducerConfig.from_mapping({"compression.type": name}).compression.name == name.upper()


def test_compression_levels_and_unknown_codecs() -> None:
    p = ProducerConfig.from_mapping({"compression.type": "zstd", "compression.zstd.level": "7"})
    assert p.compression_level == 7
    gzip = {"compression.type": "gzip", "compression.zstd.level": "7"}
    assert ProducerConfig.from_mapping(gzip).compression_level is None
    with pytest.raises(ConfigError, match=r"compression\.type"):
        ProducerConfig.from_mapping({"compression.type": "brotli"})
