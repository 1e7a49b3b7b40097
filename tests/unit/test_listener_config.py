"""Named listeners' security settings from Kafka's keys (broker/security/listener_config.py,
broker/security/client_security.py, kraft/node/security_config.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.security.client_security import client_security_for
from broker.security.listener_config import (
    ListenerConfigError,
    enabled_mechanisms,
    inter_broker_listener_name,
    jaas_config,
    listener_security,
    node_security,
    protocol_map,
    scram_credential_of,
)
from broker.security.session import SecurityProtocol
from kafka_protocol.sasl import PlainServer, SaslAuthenticationError, scram_credential
from kraft.node.config import ConfigError, load_config
from kraft.node.run import broker_config
from kraft.node.security_config import check_quorum_password, controller_client

P = SecurityProtocol
ADMIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    ' username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-pw";'
)


def test_default_map_names_each_protocol_and_controller() -> None:
    names = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", "CONTROLLER"]
    assert protocol_map({}, names) == {
        "PLAINTEXT": P.PLAINTEXT,
        "SSL": P.SSL,
        "SASL_PLAINTEXT": P.SASL_PLAINTEXT,
        "SASL_SSL": P.SASL_SSL,
        "CONTROLLER": P.PLAINTEXT,
    }


def test_explicit_map_and_unmapped_names() -> None:
    values = {"listener.security.protocol.map": "INTERNAL:SASL_SSL, external:ssl"}
    mapped = protocol_map(values, ["INTERNAL", "EXTERNAL", "PLAINTEXT"])
    assert mapped == {"INTERNAL": P.SASL_SSL, "EXTERNAL": P.SSL, "PLAINTEXT": P.PLAINTEXT}
    with pytest.raises(ListenerConfigError, match=r"listener.security.protocol.map.*CONTROLLER"):
        protocol_map(values, ["CONTROLLER"])  # not mapped explicitly and no protocol name
    with pytest.raises(ListenerConfigError, match=r"listener.security.protocol.map"):
        protocol_map({"listener.security.protocol.map": "A:TLS"}, ["A"])
    with pytest.raises(ListenerConfigError, match="mapped twice"):
        protocol_map({"listener.security.protocol.map": "A:SSL,A:SASL_SSL"}, ["A"])


def test_inter_broker_listener_keys_are_exclusive() -> None:
    assert inter_broker_listener_name({}) == "PLAINTEXT"
    assert inter_broker_listener_name({"security.inter.broker.protocol": "sasl_ssl"}) == "SASL_SSL"
    assert inter_broker_listener_name({"inter.broker.listener.name": "internal"}) == "INTERNAL"
    both = {"inter.broker.listener.name": "INTERNAL", "security.inter.broker.protocol": "SSL"}
    with pytest.raises(ListenerConfigError, match="should not both be set"):
        inter_broker_listener_name(both)


def test_inter_broker_listener_must_be_served() -> None:
    values = {"inter.broker.listener.name": "INTERNAL"}
    with pytest.raises(ListenerConfigError, match=r"inter.broker.listener.name: INTERNAL"):
        node_security(values, ["PLAINTEXT"], is_broker=True)
    assert node_security(values, ["PLAINTEXT"], is_broker=False).inter_broker_listener == (
        "INTERNAL"
    )
    with pytest.raises(ListenerConfigError, match=r"sasl.mechanism.inter.broker.protocol"):
        node_security(
            {"sasl.mechanism.inter.broker.protocol": "GSSAPI"}, ["PLAINTEXT"], is_broker=True
        )


def test_jaas_precedence() -> None:
    values = {
        "sasl.jaas.config": "global",
        "listener.name.sasl_ssl.sasl.jaas.config": "listener",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": "mechanism",
    }
    assert jaas_config(values, "SASL_SSL", "SCRAM-SHA-256") == "mechanism"
    assert jaas_config(values, "SASL_SSL", "PLAIN") == "listener"
    assert jaas_config(values, "SASL_PLAINTEXT", "PLAIN") == "global"
    assert jaas_config({}, "SASL_PLAINTEXT", "PLAIN") is None


def test_enabled_mechanisms_per_listener() -> None:
    values = {
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "scram-sha-512",
    }
    assert enabled_mechanisms(values, "SASL_SSL") == ("SCRAM-SHA-512",)
    assert enabled_mechanisms(values, "SASL_PLAINTEXT") == ("PLAIN",)
    assert enabled_mechanisms({}, "X") == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    with pytest.raises(ListenerConfigError, match="GSSAPI is not supported"):
        enabled_mechanisms({"sasl.enabled.mechanisms": "GSSAPI"}, "X")


def test_sasl_listener_servers() -> None:
    values = {"listener.name.sasl_plaintext.plain.sasl.jaas.config": ADMIN_JAAS}
    settings = node_security(values, ["PLAINTEXT", "SASL_PLAINTEXT"], is_broker=True)
    credential = scram_credential("SCRAM-SHA-256", "pw", iterations=4096)

    def lookup(user: str, mechanism: str) -> object:
        return credential if (user, mechanism) == ("bob", "SCRAM-SHA-256") else None

    security = listener_security(values, "SASL_PLAINTEXT", settings, lookup)  # type: ignore[arg-type]
    assert security.protocol == P.SASL_PLAINTEXT and security.ssl_context is None
    assert security.sasl_mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    plain = security.sasl_servers["PLAIN"]()
    assert isinstance(plain, PlainServer)
    plain.step(b"\0alice\0alice-pw")
    assert plain.complete and plain.authorization_id == "alice"
    with pytest.raises(SaslAuthenticationError):
        security.sasl_servers["PLAIN"]().step(b"\0alice\0wrong")
    # PLAIN is enabled only where the JAAS config lists users; SCRAM users live in metadata
    bare = listener_security({}, "SASL_PLAINTEXT", settings, lookup)  # type: ignore[arg-type]
    assert bare.sasl_mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    only_plain = {"sasl.enabled.mechanisms": "PLAIN"}
    with pytest.raises(ListenerConfigError, match="no usable SASL mechanism"):
        listener_security(only_plain, "SASL_PLAINTEXT", settings, lookup)  # type: ignore[arg-type]


def test_scram_credential_of_image_record_shapes() -> None:
    credential = scram_credential("SCRAM-SHA-512", "pw", iterations=4096)

    class Image:
        scram = {("bob", 2): credential}  # keyed by Kafka's mechanism id

    assert scram_credential_of(Image(), "bob", "SCRAM-SHA-512") == credential
    assert scram_credential_of(Image(), "bob", "SCRAM-SHA-256") is None
    assert scram_credential_of(object(), "bob", "SCRAM-SHA-512") is None  # no SCRAM yet


def test_client_security_logs_in_with_the_jaas_username() -> None:
    values = {
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT",
        "listener.name.controller.plain.sasl.jaas.config": ADMIN_JAAS,
    }
    client = client_security_for(values, "CONTROLLER", "sasl.mechanism.controller.protocol")
    assert (client.protocol, client.sasl_mechanism) == (P.SASL_PLAINTEXT, "PLAIN")
    assert (client.username, client.password) == ("admin", "admin-secret")
    assert "admin-secret" not in repr(client)
    no_login = {**values, "listener.name.controller.plain.sasl.jaas.config": "x required;"}
    with pytest.raises(ListenerConfigError, match="username"):
        client_security_for(no_login, "CONTROLLER", "sasl.mechanism.controller.protocol")
    with pytest.raises(ListenerConfigError, match=r"listener.name.controller.plain.sasl.jaas"):
        client_security_for(
            {"listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT"},
            "CONTROLLER",
            "sasl.mechanism.controller.protocol",
        )
    plain = client_security_for({}, "PLAINTEXT", "sasl.mechanism.inter.broker.protocol")
    assert plain.protocol == P.PLAINTEXT and plain.ssl_context is None


def _node(tmp_path: Path, **overrides: str) -> dict[str, str]:
    return {
        "node.id": "1",
        "process.roles": "broker,controller",
        "log.dirs": str(tmp_path / "data"),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        **overrides,
    }


def test_broker_config_serves_every_broker_listener(tmp_path: Path) -> None:
    cfg = load_config(
        overrides=_node(
            tmp_path,
            **{
                "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://0.0.0.0:9095,"
                "CONTROLLER://127.0.0.1:0",
                "advertised.listeners": "EXTERNAL://kafka.example:19095",
                "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT,"
                "CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name": "INTERNAL",
                "listener.name.external.plain.sasl.jaas.config": ADMIN_JAAS,
            },
        ),
        environ={},
    )
    bcfg = broker_config(cfg)
    names = [(x.name, x.advertised_host, x.advertised_port) for x in bcfg.served_listeners]
    assert names == [("INTERNAL", "127.0.0.1", 0), ("EXTERNAL", "kafka.example", 19095)]
    assert bcfg.inter_broker_listener == "INTERNAL"
    assert bcfg.primary_listener.name == "INTERNAL"
    assert bcfg.listeners[1].security.protocol == P.SASL_PLAINTEXT
    assert bcfg.inter_broker_security is not None
    assert bcfg.inter_broker_security.protocol == P.PLAINTEXT


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"inter.broker.listener.name": "INTERNAL"}, "inter.broker.listener.name: INTERNAL"),
        ({"listeners": "FOO://127.0.0.1:0"}, "listener FOO has no security protocol"),
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "inter.broker.listener.name"),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "PLAIN",
            },
            "no usable SASL mechanism",
        ),
    ],
)
def test_broker_config_errors(tmp_path: Path, change: dict[str, str], needle: str) -> None:
    cfg = load_config(overrides=_node(tmp_path, **change), environ={})
    with pytest.raises(ConfigError, match=needle):
        broker_config(cfg)


def test_controller_client_uses_the_controller_listener(tmp_path: Path) -> None:
    cfg = load_config(
        overrides=_node(
            tmp_path,
            **{
                "process.roles": "broker",
                "controller.listener.names": "CTL",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CTL:SASL_PLAINTEXT",
                "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
                "listener.name.ctl.scram-sha-512.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required"
                    ' username="broker" password="broker-secret";'
                ),
            },
        ),
        environ={},
    )
    client = controller_client(cfg)
    assert (client.protocol, client.sasl_mechanism) == (P.SASL_PLAINTEXT, "SCRAM-SHA-512")
    assert (client.username, client.password) == ("broker", "broker-secret")


def test_quorum_password_length() -> None:
    check_quorum_password("s", 1)  # one voter: no peer to authenticate
    check_quorum_password("a" * 16, 3)
    with pytest.raises(ConfigError, match="at least 16"):
        check_quorum_password("secret", 3)
    with pytest.raises(ConfigError, match="required"):
        check_quorum_password("", 1)
