"""``advertised.address`` (the image's ``KRAFT_ADVERTISED_ADDRESS``): one variable says where
clients reach a node published on another port, and the generated certificate follows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft.node.certificates import certificate_hosts
from kraft.node.config import ConfigError, NodeConfig, load_config
from kraft.node.dev_secure import prepare_secure_dev

NODE = {"node.id": "1", "process.roles": "broker,controller"}


def config(**values: str) -> NodeConfig:
    return load_config(overrides={**NODE, **values}, environ={})


def advertised(cfg: NodeConfig) -> dict[str, str]:
    return {x.name: f"{x.host}:{x.port}" for x in cfg.advertised_listeners}


def test_the_address_is_advertised_for_the_client_listener() -> None:
    cfg = config(**{"listeners": "SASL_SSL://0.0.0.0:9092", "advertised.address": "kafka:19092"})
    assert advertised(cfg) == {"SASL_SSL": "kafka:19092"}
    assert cfg.listener("SASL_SSL") is not None and cfg.listener("SASL_SSL").port == 9092


def test_from_the_environment_as_the_image_sets_it() -> None:
    cfg = load_config(
        environ={
            "KRAFT_NODE_ID": "1",
            "KRAFT_PROCESS_ROLES": "broker,controller",
            "KRAFT_LISTENERS": "SASL_SSL://0.0.0.0:9092",
            "KRAFT_ADVERTISED_ADDRESS": "localhost:19092",
        }
    )
    assert advertised(cfg) == {"SASL_SSL": "localhost:19092"}


def test_advertised_listeners_win_for_the_listeners_they_name() -> None:
    cfg = config(
        **{
            "listeners": "INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "advertised.listeners": "INTERNAL://broker-1:19092",
            "advertised.address": "127.0.0.1:9094",
        }
    )
    assert advertised(cfg) == {"INTERNAL": "broker-1:19092", "EXTERNAL": "127.0.0.1:9094"}


def test_a_controller_listener_is_never_given_the_address() -> None:
    cfg = config(
        **{
            "process.roles": "controller",
            "listeners": "CONTROLLER://0.0.0.0:9093",
            "advertised.address": "localhost:9092",  # inherited from the image: ignored
        }
    )
    assert advertised(cfg) == {"CONTROLLER": "127.0.0.1:9093"}


@pytest.mark.parametrize("bad", ["localhost", "localhost:", "localhost:0", ":9092", "a:99999"])
def test_not_host_port_is_refused_with_an_example(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"advertised.address"):
        config(**{"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.address": bad})


def test_the_kept_certificate_is_reissued_for_a_new_host(tmp_path: Path) -> None:
    first = prepare_secure_dev(tmp_path, tmp_path / "metadata", ["localhost", "kafka-a"])
    assert certificate_hosts(first.keystore) == {"localhost", "kafka-a"}
    again = prepare_secure_dev(tmp_path, tmp_path / "metadata", ["localhost"])
    assert again.keystore.read_bytes() == first.keystore.read_bytes()  # covered: kept
    moved = prepare_secure_dev(tmp_path, tmp_path / "metadata", ["localhost", "kafka-b"])
    assert certificate_hosts(moved.keystore) == {"localhost", "kafka-b"}
    assert moved.ca_file.read_bytes() == first.ca_file.read_bytes()  # the same CA
    assert moved.password == first.password
