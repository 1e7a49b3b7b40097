"""Kafka's sasl.jaas.config values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_protocol.sasl.jaas import (
    PLAIN_LOGIN_MODULE,
    JaasEntry,
    own_credentials,
    parse_jaas,
    plain_users,
)

# The broker example of Kafka's documentation (security.html, "Using SASL/PLAIN")
PLAIN_BROKER = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
# Kafka's documentation, "Configuring Kafka Clients" for SCRAM
SCRAM_CLIENT = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
    '    username="alice" \\\n    password="alice-secret";'
).replace(" \\\n", "\n")  # a properties file joins the continuation lines


def test_plain_broker_example() -> None:
    entry = parse_jaas(PLAIN_BROKER)
    assert entry == JaasEntry(
        "org.apache.kafka.common.security.plain.PlainLoginModule",
        "required",
        {
            "username": "admin",
            "password": "admin-secret",
            "user_admin": "admin-secret",
            "user_alice": "alice-secret",
        },
    )
    assert plain_users(entry) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert own_credentials(entry) == ("admin", "admin-secret")


def test_scram_client_example_multi_line() -> None:
    entry = parse_jaas(SCRAM_CLIENT)
    assert entry.login_module == "org.apache.kafka.common.security.scram.ScramLoginModule"
    assert own_credentials(entry) == ("alice", "alice-secret")
    assert plain_users(entry) == {}


def test_escaped_quotes_unquoted_values_and_comments() -> None:
    entry = parse_jaas(
        "com.example.Login optional /* a comment */\n"
        '  username=bob password="p\\"w\\\\d;=x" // trailing comment\n'
        "  tokenauth=true\n  ;  "
    )
    assert entry.control_flag == "optional"
    assert entry.options == {"username": "bob", "password": 'p"w\\d;=x', "tokenauth": "true"}


def test_no_options_and_no_credentials() -> None:
    entry = parse_jaas("org.apache.kafka.common.security.plain.PlainLoginModule sufficient;")
    assert entry.options == {} and own_credentials(entry) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected '<LoginModule>"),
        ('org.Login required username="a"', "must end with ';'"),
        ("org.Login mandatory;", "control flag 'mandatory'"),
        ('"org.Login" required;', "login module class name"),
        ('org.Login required username "a";', "expected key=value"),
        ("org.Login required username=;", "expected key=value"),
        ('org.Login required username="a;', "unexpected text"),
        ('org.Login required user#name="a";', "unexpected text"),
        ('org.Login required a="1" a="2";', "given twice"),
        ("org.A required; org.B required;", "more than one login module"),
    ],
)
def test_malformed_text_is_a_clear_value_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_jaas(text)


@given(
    users=st.dictionaries(
        st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True),
        st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=30),
        max_size=5,
    ),
    separator=st.sampled_from([" ", "\n  ", "\t", " /* c */ "]),
)
def test_quoted_values_round_trip(users: dict[str, str], separator: str) -> None:
    def quote(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    options = separator.join(f"user_{name}={quote(pw)}" for name, pw in users.items())
    entry = parse_jaas(f"{PLAIN_LOGIN_MODULE} required{separator}{options};")
    assert plain_users(entry) == users
