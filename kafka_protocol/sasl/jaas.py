"""Kafka's ``sasl.jaas.config`` values: one JAAS login module entry; pure.

    <LoginModule class> <flag> [<key>=<value> ...] ;

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="alice-secret";

Tokens as Kafka's JaasConfig reads them with Java's StreamTokenizer: words of letters, digits
and ``. _ - $``; double-quoted strings with backslash escapes; ``//`` and ``/* */`` comments;
any whitespace, newlines included, between tokens.  The flag is one of required, requisite,
sufficient, optional.  A broker's value holds exactly one entry ending with ``;``.
A PlainLoginModule's ``user_<name>`` options are the users a PLAIN listener accepts; its
``username``/``password`` (and a ScramLoginModule's) are what this node logs in with as a client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

CONTROL_FLAGS: Final = ("required", "requisite", "sufficient", "optional")
PLAIN_LOGIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"

_TOKEN = re.compile(
    r"""\s+|//[^\n]*|/\*.*?\*/          # skipped: whitespace and comments
    |(?P<word>[A-Za-z0-9._$-]+)
    |"(?P<quoted>(?:[^"\\]|\\.)*)"
    |(?P<punct>[=;])""",
    re.VERBOSE | re.DOTALL,
)
_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


@dataclass(frozen=True, slots=True)
class JaasEntry:
    login_module: str
    control_flag: str
    options: dict[str, str] = field(default_factory=dict)


def _unescape(quoted: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), quoted, flags=re.S)


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) pairs, kind one of word, quoted, '=', ';'."""
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            snippet = text[position : position + 20]
            raise ValueError(f"JAAS config: unexpected text at offset {position}: {snippet!r}")
        if match.group("word") is not None:
            tokens.append(("word", match.group("word")))
        elif match.group("quoted") is not None:
            tokens.append(("quoted", _unescape(match.group("quoted"))))
        elif match.group("punct") is not None:
            tokens.append((match.group("punct"), match.group("punct")))
        position = match.end()
    return tokens


def parse_jaas(text: str) -> JaasEntry:
    """The one login module entry of a ``sasl.jaas.config`` value (ValueError: what is wrong)."""
    tokens = _tokens(text)
    if len(tokens) < 3:
        raise ValueError("JAAS config: expected '<LoginModule> <flag> [key=value ...];'")
    (kind, module), (_, flag) = tokens[0], tokens[1]
    if kind != "word":
        raise ValueError(f"JAAS config: expected a login module class name, not {module!r}")
    if flag not in CONTROL_FLAGS:
        raise ValueError(f"JAAS config: control flag {flag!r} is not one of {CONTROL_FLAGS}")
    options: dict[str, str] = {}
    index = 2
    while True:
        if index >= len(tokens):
            raise ValueError("JAAS config: the entry must end with ';'")
        if tokens[index][0] == ";":
            break
        key_kind, key = tokens[index]
        equals = tokens[index + 1][0] if index + 1 < len(tokens) else ""
        value_kind, value = tokens[index + 2] if index + 2 < len(tokens) else ("", "")
        if key_kind != "word" or equals != "=" or value_kind not in ("word", "quoted"):
            raise ValueError(f"JAAS config: expected key=value in {module} options, at {key!r}")
        if key in options:
            raise ValueError(f"JAAS config: option {key!r} given twice")
        options[key] = value
        index += 3
    if index + 1 != len(tokens):
        raise ValueError("JAAS config: holds more than one login module (a listener takes one)")
    return JaasEntry(module, flag, options)


def plain_users(entry: JaasEntry) -> dict[str, str]:
    """The ``user_<name>="<password>"`` options: the users a PLAIN listener accepts."""
    return {
        key.removeprefix("user_"): value
        for key, value in entry.options.items()
        if key.startswith("user_") and len(key) > len("user_")
    }


def own_credentials(entry: JaasEntry) -> tuple[str, str] | None:
    """The ``username``/``password`` options: what this node logs in with, if both are set."""
    username, password = entry.options.get("username"), entry.options.get("password")
    if username is None or password is None:
        return None
    return username, password
