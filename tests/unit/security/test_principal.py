"""Distinguished names as Java prints them, and Kafka's ssl.principal.mapping.rules."""

from __future__ import annotations

from typing import Any

import pytest

from broker.security.principal import (
    NoMatchingRule,
    PrincipalMapper,
    distinguished_name,
    parse_rules,
)


def peercert(*rdns: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """getpeercert()'s shape: the subject's RDNs least specific first, as in the certificate."""
    return {"subject": rdns}


ALICE = peercert(
    (("countryName", "US"),),
    (("organizationName", "acme"),),
    (("organizationalUnitName", "eng"),),
    (("commonName", "alice"),),
)


def test_most_specific_rdn_first() -> None:
    assert distinguished_name(ALICE) == "CN=alice,OU=eng,O=acme,C=US"


def test_rfc2253_escaping_as_java_does_it() -> None:
    cert = peercert(
        (("organizationName", 'a,b+c"d\\e<f>g;h=i#j'),),
        (("commonName", " lead and trail  "),),
    )
    assert distinguished_name(cert) == (
        'CN=\\ lead and trail\\ \\ ,O=a\\,b\\+c\\"d\\\\e\\<f\\>g\\;h\\=i\\#j'
    )


def test_other_attributes_multi_valued_rdns_and_unicode() -> None:
    cert = peercert(
        (("domainComponent", "com"),),
        (("domainComponent", "example"),),
        (("commonName", "bob"), ("userId", "b42")),
        (("emailAddress", "bob@example.com"),),
        (("localityName", "Zürich"), ("stateOrProvinceName", "ZH")),
    )
    email = "#160f" + b"bob@example.com".hex()
    assert distinguished_name(cert) == (
        f"L=Zürich+ST=ZH,1.2.840.113549.1.9.1={email},CN=bob+UID=b42,DC=example,DC=com"
    )


def test_no_certificate_is_anonymous() -> None:
    mapper = PrincipalMapper()
    assert mapper.principal_of(None) == "User:ANONYMOUS"
    assert mapper.principal_of({}) == "User:ANONYMOUS"
    assert mapper.principal_of(ALICE) == "User:CN=alice,OU=eng,O=acme,C=US"


# Kafka's SslPrincipalMapperTest cases, and the example of its security documentation
KAFKA_RULES = """RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,
    RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,
    RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U,
    RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,
    DEFAULT"""


@pytest.mark.parametrize(
    ("dn", "name"),
    [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
        ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_kafka_rules_first_match_wins(dn: str, name: str) -> None:
    assert PrincipalMapper(KAFKA_RULES).name_of(dn) == name


def test_no_matching_rule_refuses_the_client() -> None:
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/")
    assert mapper.name_of("CN=Duke,OU=ServiceUsers,O=Org") == "Duke"
    with pytest.raises(NoMatchingRule, match="CN=Duke,OU=JavaSoft"):
        mapper.name_of("CN=Duke,OU=JavaSoft,O=Sun")
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("").name_of("CN=x")  # no rules at all: nothing applies


def test_escaped_comma_in_a_name_and_a_rule() -> None:
    mapper = PrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name_of(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


def test_rules_with_commas_and_letters_of_default_inside() -> None:
    for rules in (
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/, DEFAULT",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ):
        assert PrincipalMapper(rules).name_of("CN=bob,OU=x") == "bob"


def test_back_references_beyond_the_groups_are_literal() -> None:
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=(.*?)$/$1@$2 $3 $12 $0/")
    assert mapper.name_of("CN=a,OU=b") == "a@b $3 a2 CN=a,OU=b"  # $12: group 1, then "2"
    mapper = PrincipalMapper(r"RULE:^CN=(?<user>[^,]*),.*$/${user}\$1/")
    assert mapper.name_of("CN=carol,O=x") == "carol$1"


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULTS",
        "RULE:/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        "RULE:^CN=(.*?$/$1/",  # not a regular expression
        "RULE:^CN=(.*)$/${nope}/",  # no such group
    ],
)
def test_invalid_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError, match=r"ssl.principal.mapping.rules"):
        parse_rules(rules)


def test_valid_rules_parse() -> None:
    for rules in (
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    ):
        assert parse_rules(rules)
