"""The admin API's security settings from a node's config (kraft/rest/admin_security.py):
when a login is required, where TLS keys and PLAIN users come from."""

from __future__ import annotations

import pytest

from kraft.node.config import ConfigError, NodeConfig, load_config
from kraft.rest.admin_security import (
    admin_ssl_context,
    admin_ssl_props,
    authentication_required,
    node_plain_users,
)

BASE = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "listeners": "PLAINTEXT://127.0.0.1:0",
    "admin.listener": "http://127.0.0.1:0",
}
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def config(**overrides: str) -> NodeConfig:
    return load_config(overrides={**BASE, **overrides}, environ={})


@pytest.mark.parametrize(
    ("overrides", "required"),
    [
        ({}, False),  # kraft dev: open, as before
        ({"authorizer.class.name": STANDARD}, True),
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, True),
        (
            {
                "listeners": "EXTERNAL://127.0.0.1:0",
                "listener.security.protocol.map": "EXTERNAL:SASL_SSL",
            },
            True,
        ),
        ({"listeners": "SSL://127.0.0.1:0"}, False),
        ({"authorizer.class.name": STANDARD, "admin.authentication": "none"}, False),
        ({"admin.authentication": "BASIC"}, True),
    ],
)
def test_when_a_login_is_required(overrides: dict[str, str], required: bool) -> None:
    assert authentication_required(config(**overrides)) is required


def test_an_unknown_authentication_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"admin\.authentication"):
        authentication_required(config(**{"admin.authentication": "digest"}))


def test_admin_ssl_keys_fall_back_to_the_node_s() -> None:
    cfg = config(
        **{
            "ssl.keystore.location": "/node.pem",
            "ssl.truststore.location": "/ca.pem",
            "admin.ssl.keystore.location": "/admin.pem",
            "admin.ssl.client.auth": "required",
        }
    )
    assert admin_ssl_props(cfg) == {
        "ssl.keystore.location": "/admin.pem",
        "ssl.truststore.location": "/ca.pem",
        "ssl.client.auth": "required",
    }


def test_https_without_a_keystore_or_with_a_missing_one_does_not_start() -> None:
    with pytest.raises(ConfigError, match="no keystore is configured"):
        admin_ssl_context(config(**{"admin.listener": "https://127.0.0.1:0"}))
    https = {"admin.listener": "https://127.0.0.1:0", "ssl.keystore.location": "/no/such.pem"}
    with pytest.raises(ConfigError, match=r"admin\.listener TLS"):
        admin_ssl_context(config(**https))
    assert admin_ssl_context(config()) is None


def test_plain_users_of_every_plain_jaas_config() -> None:
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule required"
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required"
    cfg = config(
        **{
            "sasl.jaas.config": f'{plain} user_admin="a";',
            "listener.name.sasl_ssl.plain.sasl.jaas.config": f'{plain} user_bob="b";',
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": f'{scram} user_eve="e";',
        }
    )
    assert node_plain_users(cfg) == {"admin": "a", "bob": "b"}
    with pytest.raises(ConfigError, match=r"sasl\.jaas\.config"):
        node_plain_users(config(**{"sasl.jaas.config": "nonsense"}))
