"""The CLI's side of the secured admin API: where the user and password come from (options,
environment, a kafka-*.sh --command-config file), and the ACLs ``kraft acls`` builds from
kafka-acls.sh's flags."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kraft.cli.acls import bindings, operation_name
from kraft.cli.admin_auth import LoginError, admin_login
from kraft.cli.main import build_parser


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def who(args: argparse.Namespace) -> tuple[str | None, str | None]:
    login = admin_login(args)
    return login.user, login.password


def test_options_beat_the_environment_which_beats_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '    username="file-user" password="file-pw";\n'
    )
    args = parse("topics", "list", "--command-config", str(config))
    assert who(args) == ("file-user", "file-pw")
    monkeypatch.setenv("KRAFT_ADMIN_USER", "env-user")
    monkeypatch.setenv("KRAFT_ADMIN_PASSWORD", "env-pw")
    assert who(args) == ("env-user", "env-pw")
    args = parse("topics", "list", "--command-config", str(config), "--user", "u", "--password", "")
    assert who(args) == ("u", "")


def test_admin_user_keys_and_a_ca_for_https(tmp_path: Path) -> None:
    config = tmp_path / "admin.properties"
    config.write_text("admin.user=ops\nadmin.password=pw\nssl.ca.location=/no/such/ca.pem\n")
    args = parse("cluster", "status", "--command-config", str(config))
    login = admin_login(args)
    assert (login.user, login.password, login.ssl_context) == ("ops", "pw", None)
    https = parse("cluster", "status", "--command-config", str(config), "--admin", "https://h:1")
    with pytest.raises(LoginError, match="TLS settings"):
        admin_login(https)


def test_a_user_without_a_password_or_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LoginError, match="needs a password"):
        admin_login(parse("topics", "list", "--user", "u"))
    with pytest.raises(LoginError, match="cannot read"):
        admin_login(parse("topics", "list", "--command-config", str(tmp_path / "missing")))


def test_no_login_means_no_credentials() -> None:
    login = admin_login(parse("topics", "list"))
    assert (login.user, login.password, login.ssl_context) == (None, None, None)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("Read", "READ"),
        ("DescribeConfigs", "DESCRIBE_CONFIGS"),
        ("ALTER_CONFIGS", "ALTER_CONFIGS"),
        ("IdempotentWrite", "IDEMPOTENT_WRITE"),
        ("all", "ALL"),
    ],
)
def test_operations_as_kafka_acls_spells_them(given: str, expected: str) -> None:
    assert operation_name(given) == expected


def test_one_acl_per_principal_host_operation_and_resource() -> None:
    args = parse(
        "acls",
        "create",
        "--allow-principal",
        "User:alice",
        "--allow-principal",
        "User:bob",
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--topic",
        "orders",
        "--group",
        "billing",
        "--resource-pattern-type",
        "PREFIXED",
    )
    acls = bindings(args, filters=False)
    assert len(acls) == 2 * 2 * 2
    assert {
        "principal": "User:alice",
        "permission_type": "ALLOW",
        "operation": "READ",
        "host": "*",
        "resource_type": "GROUP",
        "resource_name": "billing",
        "pattern_type": "PREFIXED",
    } in acls


def test_deny_hosts_and_filters_leave_unset_fields_out() -> None:
    args = parse(
        "acls", "create", "--deny-principal", "User:eve", "--deny-host", "10.0.0.1", "--cluster"
    )
    assert bindings(args, filters=False) == [
        {
            "principal": "User:eve",
            "permission_type": "DENY",
            "operation": "ALL",
            "host": "10.0.0.1",
            "resource_type": "CLUSTER",
            "resource_name": "kafka-cluster",
            "pattern_type": "LITERAL",
        }
    ]
    delete = parse("acls", "delete", "--topic", "orders")
    assert bindings(delete, filters=True) == [{"resource_type": "TOPIC", "resource_name": "orders"}]
