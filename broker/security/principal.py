"""The principal of a TLS client: its certificate's distinguished name, mapped by Kafka's rules.

``distinguished_name`` prints the subject of ``SSLSocket.getpeercert()`` as Java's
``X500Principal.getName()`` does (RFC 2253): the most specific RDN first
("CN=alice,OU=eng,O=acme,C=US"), the RFC 2253 keywords CN C L ST O OU STREET DC UID and the
dotted OID with the DER value in hex for other attributes ("1.2.840.113549.1.9.1=#16..."),
``, = + < > # ; " \\`` escaped with a backslash anywhere, leading and trailing spaces escaped.
getpeercert() does not keep an attribute's ASN.1 string type, so the hex form assumes the usual
one (IA5String for emailAddress, PrintableString for serialNumber and dnQualifier,
UTF8String otherwise).

``ssl.principal.mapping.rules`` (Kafka's SslPrincipalMapper), comma separated, any whitespace:

    RULE:<pattern>/<replacement>/[L|U]   if <pattern> matches the whole DN, the DN with every
                                         match replaced (Java's $1 group references; "\\/" is a
                                         slash), then lower- or upper-cased
    DEFAULT                              the DN itself

The first rule that matches gives the name; if none does the client is refused
(:class:`NoMatchingRule`), exactly as Kafka does, so a list that should fall back must end with
DEFAULT.  A client without a certificate is ``User:ANONYMOUS``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from broker.security.session import ANONYMOUS, user_principal

DEFAULT_RULES: Final = "DEFAULT"
RFC2253_KEYWORDS: Final = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
# other attributes getpeercert() names: (OID, DER string tag)
OTHER_ATTRIBUTES: Final = {
    "emailAddress": ("1.2.840.113549.1.9.1", 0x16),
    "serialNumber": ("2.5.4.5", 0x13),
    "dnQualifier": ("2.5.4.46", 0x13),
    "surname": ("2.5.4.4", 0x0C),
    "givenName": ("2.5.4.42", 0x0C),
    "initials": ("2.5.4.43", 0x0C),
    "generationQualifier": ("2.5.4.44", 0x0C),
    "title": ("2.5.4.12", 0x0C),
    "pseudonym": ("2.5.4.65", 0x0C),
    "businessCategory": ("2.5.4.15", 0x0C),
    "postalCode": ("2.5.4.17", 0x0C),
    "name": ("2.5.4.41", 0x0C),
}
_ESCAPED: Final = ',=+<>#;"\\'
_DOTTED_OID = re.compile(r"\d+(?:\.\d+)+")
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)


class NoMatchingRule(ValueError):
    """No ``ssl.principal.mapping.rules`` rule applies to a client's DN: refuse the client."""


def _der_hex(value: str, tag: int) -> str:
    data = value.encode("utf-8")
    length = len(data)
    if length < 0x80:
        header = bytes([tag, length])
    else:
        size = length.to_bytes((length.bit_length() + 7) // 8, "big")
        header = bytes([tag, 0x80 | len(size)]) + size
    return "#" + (header + data).hex()


def _escape(value: str) -> str:
    escaped = "".join("\\00" if c == "\0" else ("\\" + c if c in _ESCAPED else c) for c in value)
    body = escaped.strip(" \r")
    if not body:
        return "".join("\\" + c for c in escaped)
    lead = escaped[: len(escaped) - len(escaped.lstrip(" \r"))]
    trail = escaped[len(escaped.rstrip(" \r")) :]
    return "".join("\\" + c for c in lead) + body + "".join("\\" + c for c in trail)


def _attribute(name: str, value: str) -> str:
    if name in RFC2253_KEYWORDS:
        return f"{RFC2253_KEYWORDS[name]}={_escape(value)}"
    if name in OTHER_ATTRIBUTES:
        oid, tag = OTHER_ATTRIBUTES[name]
        return f"{oid}={_der_hex(value, tag)}"
    if _DOTTED_OID.fullmatch(name):
        return f"{name}={_der_hex(value, 0x0C)}"
    return f"{name}={_escape(value)}"  # an OpenSSL long name we do not know the OID of


def distinguished_name(peercert: Mapping[str, Any]) -> str:
    """The subject of ``getpeercert()`` in RFC 2253, as Java's X500Principal.getName() prints it."""
    rdns = peercert.get("subject", ())
    return ",".join(
        "+".join(_attribute(name, value) for name, value in rdn) for rdn in reversed(rdns)
    )


def _java_replacement(replacement: str, match: re.Match[str]) -> str:
    """Java's Matcher replacement syntax: ``$n``, ``${name}``, ``\\x`` for a literal x.

    As Kafka does, a ``$n`` naming a group the pattern lacks is literal text.
    """
    groups = match.re.groups
    out: list[str] = []
    index = 0
    while index < len(replacement):
        char = replacement[index]
        index += 1
        if char == "\\" and index < len(replacement):
            out.append(replacement[index])
            index += 1
        elif char == "$" and replacement[index : index + 1] == "{":
            end = replacement.index("}", index)  # checked when the rule was parsed
            out.append(match.group(replacement[index + 1 : end]) or "")
            index = end + 1
        elif char == "$" and replacement[index : index + 1].isdigit():
            number, index = int(replacement[index]), index + 1
            while (
                index < len(replacement)
                and replacement[index].isdigit()
                and number * 10 + int(replacement[index]) <= groups
            ):
                number, index = number * 10 + int(replacement[index]), index + 1
            out.append((match.group(number) or "") if number <= groups else f"${number}")
        else:
            out.append(char)
    return "".join(out)


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if not self.pattern.fullmatch(dn):
            return None
        result = self.pattern.sub(lambda m: _java_replacement(self.replacement, m), dn)
        return (
            result.lower() if self.case == "L" else result.upper() if self.case == "U" else result
        )


def parse_rules(rules: str) -> list[_Rule]:
    """The rules of an ``ssl.principal.mapping.rules`` value (ValueError: "Invalid rule")."""
    parsed: list[_Rule] = []
    for split in _RULE_SPLITTER.finditer(rules.strip()):
        text = split.group(1)
        match = _RULE_PARSER.match(text)
        if match is None or match.end() != len(text):
            raise ValueError(f"ssl.principal.mapping.rules: invalid rule {text!r}")
        if match.group(1) is not None:
            parsed.append(_Rule(None))
        elif match.group(2) is not None:
            pattern, replacement = match.group(2), match.group(4)
            try:
                # Java spells a named group (?<name>...), Python (?P<name>...)
                compiled = re.compile(re.sub(r"(?<!\\)\(\?<(?![=!])", "(?P<", pattern))
            except re.error as error:
                raise ValueError(
                    f"ssl.principal.mapping.rules: bad pattern in {text!r}: {error}"
                ) from None
            names = re.findall(r"\$\{([^}]*)\}", replacement)
            if any(name not in compiled.groupindex for name in names) or re.search(
                r"\$\{(?![^}]*\})", replacement
            ):
                raise ValueError(f"ssl.principal.mapping.rules: bad group name in {text!r}")
            parsed.append(_Rule(compiled, replacement, match.group(6)))
    return parsed


class PrincipalMapper:
    """``ssl.principal.mapping.rules`` applied to client certificates."""

    def __init__(self, rules: str = DEFAULT_RULES) -> None:
        self.rules = parse_rules(rules)

    def name_of(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {dn!r}")

    def principal_of(self, peercert: Mapping[str, Any] | None) -> str:
        """``User:<mapped DN>``, or ``User:ANONYMOUS`` for a client without a certificate."""
        if not peercert or not peercert.get("subject"):
            return ANONYMOUS
        return user_principal(self.name_of(distinguished_name(peercert)))
