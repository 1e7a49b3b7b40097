"""The REST admin API of a secured ``kraft dev`` node: https with a generated CA, the
StandardAuthorizer on, PLAIN users from a JAAS config and SCRAM users made over REST.

Checked over real sockets with the standard library's HTTP client and the ``kraft`` CLI as a
user runs it: the probes stay open; no or wrong credentials are a 401; a user the ACLs do not
allow gets a 403 and is allowed once ``kraft acls create`` grants it; users and ACLs round
trip; the CLI logs in with --user/--password, the environment or --command-config; a client
certificate is a login when the listener asks for one.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from integration.node_process import NodeProcess
from kraft.node.certificates import make_ca, make_certificate

pytestmark = pytest.mark.integration

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    ' username="admin" password="admin-secret"'
    ' user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)


@dataclass
class Secured:
    node: NodeProcess
    ca: Path
    client_cert: Path
    context: ssl.SSLContext


@dataclass
class Reply:
    status: int
    json: Any
    headers: dict[str, str]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    tmp = tmp_path_factory.mktemp("secured")
    ca = make_ca(tmp / "ca")
    server = make_certificate(ca, tmp / "certs", "node", ["127.0.0.1", "localhost"])
    client = make_certificate(ca, tmp / "certs", "carol", client=True)
    node = NodeProcess(
        tmp / "data",
        overrides=(
            "admin.listener=https://127.0.0.1:0",
            f"admin.ssl.keystore.location={server}",
            f"admin.ssl.truststore.location={ca.certificate_path}",
            "admin.ssl.client.auth=requested",
            f"authorizer.class.name={STANDARD_AUTHORIZER}",
            "super.users=User:admin",
            f"sasl.jaas.config={JAAS}",
            "connection.failed.authentication.delay.ms=50",
        ),
    ).start()
    context = ssl.create_default_context(cafile=str(ca.certificate_path))
    try:
        assert node.admin.startswith("https://127.0.0.1:"), node.admin
        yield Secured(node, ca.certificate_path, client, context)
    finally:
        node.stop()


def call(
    s: Secured,
    method: str,
    path: str,
    body: Any = None,
    user: tuple[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> Reply:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(s.node.admin + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if user is not None:
        token = base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30, context=context or s.context) as r:
            raw = r.read()
            return Reply(r.status, json.loads(raw) if raw else None, dict(r.headers))
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return Reply(exc.code, json.loads(raw) if raw else None, dict(exc.headers))


ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")


def kraft(
    s: Secured, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "kraft.cli", *argv, "--admin", s.node.admin]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KRAFT_ADMIN")}
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, check=False, env={**environ, **(env or {})}
    )


def test_probes_are_open_and_the_rest_needs_credentials(secured: Secured) -> None:
    assert call(secured, "GET", "/v1/health").status == 200
    assert call(secured, "GET", "/v1/ready").status == 200
    for user in (None, ("admin", "wrong"), ("nobody", "admin-secret")):
        reply = call(secured, "GET", "/v1/topics", user=user)
        assert reply.status == 401, user
        assert reply.headers["WWW-Authenticate"].startswith('Basic realm="kraft"')
    assert call(secured, "GET", "/v1/topics", user=ADMIN).status == 200


def test_plain_http_and_an_untrusted_ca_get_nothing(secured: Secured) -> None:
    plain = secured.node.admin.replace("https://", "http://")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(plain + "/v1/health", timeout=10).read()
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(
            secured.node.admin + "/v1/health", timeout=10, context=ssl.create_default_context()
        )


def test_acls_decide_and_kraft_acls_grants(secured: Secured) -> None:
    created = call(secured, "POST", "/v1/topics", {"name": "ledger"}, user=ADMIN)
    assert created.status == 201, created.json
    # alice: no ACL yet: sees no topic, may not delete it
    assert call(secured, "GET", "/v1/topics", user=ALICE).json == []
    denied = call(secured, "DELETE", "/v1/topics/ledger", user=ALICE)
    assert (denied.status, denied.json["error"]) == (403, "TOPIC_AUTHORIZATION_FAILED")
    result = kraft(
        secured,
        "acls",
        "create",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Delete",
        "--operation",
        "Describe",
        "--topic",
        "ledger",
        "--user",
        "admin",
        "--password",
        "admin-secret",
        "--ca-file",
        str(secured.ca),
    )
    assert result.returncode == 0, result.stderr
    listed = call(secured, "GET", "/v1/acls?principal=User:alice", user=ADMIN).json
    assert {(a["operation"], a["resource_name"]) for a in listed} == {
        ("DELETE", "ledger"),
        ("DESCRIBE", "ledger"),
    }
    assert [t["name"] for t in call(secured, "GET", "/v1/topics", user=ALICE).json] == ["ledger"]
    assert call(secured, "DELETE", "/v1/topics/ledger", user=ALICE).status in (202, 204)
    # and the ACLs go again
    removed = call(secured, "DELETE", "/v1/acls", {"principal": "User:alice"}, user=ADMIN)
    assert removed.status == 200 and len(removed.json["deleted"]) == 2
    assert call(secured, "GET", "/v1/acls?principal=User:alice", user=ADMIN).json == []


def test_scram_users_round_trip(secured: Secured) -> None:
    body = {"name": "dave", "password": "dave-secret", "mechanism": "SCRAM-SHA-512"}
    made = call(secured, "POST", "/v1/users", {**body, "iterations": 8192}, user=ADMIN)
    assert made.status == 200, made.json
    users = call(secured, "GET", "/v1/users", user=ADMIN).json
    assert {
        "name": "dave",
        "credentials": [{"mechanism": "SCRAM-SHA-512", "iterations": 8192}],
    } in users
    assert "salt" not in json.dumps(users) and "key" not in json.dumps(users)
    assert call(secured, "GET", "/v1/topics", user=("dave", "dave-secret")).status == 200
    assert call(secured, "GET", "/v1/topics", user=("dave", "wrong")).status == 401
    # alice may not manage users
    denied = call(secured, "POST", "/v1/users", body, user=ALICE)
    assert (denied.status, denied.json["error"]) == (403, "CLUSTER_AUTHORIZATION_FAILED")
    assert call(secured, "DELETE", "/v1/users/dave", user=ADMIN).status == 204
    assert call(secured, "GET", "/v1/topics", user=("dave", "dave-secret")).status == 401
    assert call(secured, "DELETE", "/v1/users/dave", user=ADMIN).status == 404


def test_the_cli_logs_in_every_way(secured: Secured, tmp_path: Path) -> None:
    ca = ["--ca-file", str(secured.ca)]
    made = kraft(
        secured,
        "users",
        "create",
        "erin",
        "--user-password",
        "erin-secret",
        "--user",
        "admin",
        "--password",
        "admin-secret",
        *ca,
    )
    assert made.returncode == 0, made.stderr
    env = {"KRAFT_ADMIN_USER": "admin", "KRAFT_ADMIN_PASSWORD": "admin-secret"}
    listed = kraft(secured, "users", "list", "--json", *ca, env=env)
    assert listed.returncode == 0, listed.stderr
    assert "erin" in [u["name"] for u in json.loads(listed.stdout)]
    config = tmp_path / "admin.properties"
    config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required"
        ' username="admin" password="admin-secret";\n'
        f"ssl.truststore.location={secured.ca}\n"
    )
    status = kraft(secured, "cluster", "status", "--command-config", str(config))
    assert status.returncode == 0, status.stderr
    wrong = kraft(secured, "topics", "list", "--user", "admin", "--password", "nope", *ca)
    assert wrong.returncode == 1
    assert "authentication failed: check --user/--password" in wrong.stderr
    denied = kraft(
        secured, "users", "delete", "erin", "--user", "alice", "--password", "alice-secret", *ca
    )
    assert denied.returncode == 1 and "not authorized" in denied.stderr, denied.stderr
    untrusted = kraft(secured, "topics", "list", "--user", "admin", "--password", "admin-secret")
    assert untrusted.returncode == 1 and "--ca-file" in untrusted.stderr, untrusted.stderr
    assert kraft(secured, "users", "delete", "erin", *ca, env=env).returncode == 0


def test_a_client_certificate_is_a_login(secured: Secured) -> None:
    context = ssl.create_default_context(cafile=str(secured.ca))
    context.load_cert_chain(str(secured.client_cert))
    # User:CN=carol (the DEFAULT mapping rule): authenticated, and the ACLs judge it
    reply = call(secured, "GET", "/v1/topics", context=context)
    assert reply.status == 200 and reply.json == []
    denied = call(secured, "GET", "/v1/cluster", context=context)
    assert denied.status == 403


def test_required_client_certificates(tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    server = make_certificate(ca, tmp_path / "certs", "node", ["127.0.0.1"])
    client = make_certificate(ca, tmp_path / "certs", "frank", client=True)
    node = NodeProcess(
        tmp_path / "data",
        overrides=(
            "admin.listener=https://127.0.0.1:0",
            f"ssl.keystore.location={server}",  # the node's own ssl.* keys serve the API too
            f"ssl.truststore.location={ca.certificate_path}",
            "admin.ssl.client.auth=required",
        ),
    ).start()
    try:
        anonymous = ssl.create_default_context(cafile=str(ca.certificate_path))
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            urllib.request.urlopen(node.admin + "/v1/health", timeout=10, context=anonymous)
        with_cert = ssl.create_default_context(cafile=str(ca.certificate_path))
        with_cert.load_cert_chain(str(client))
        secured = Secured(node, ca.certificate_path, client, with_cert)
        assert call(secured, "GET", "/v1/topics").status == 200
    finally:
        node.stop()


def test_kraft_dev_secure_serves_the_api_over_https_for_its_admin(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "dev", dev_flags=("--secure",)).start()
    try:
        assert node.admin.startswith("https://127.0.0.1:"), node.admin
        ca = node.data_dir / "secure" / "ca" / "ca.pem"
        password = (node.data_dir / "secure" / "admin.password").read_text().strip()
        secured = Secured(node, ca, ca, ssl.create_default_context(cafile=str(ca)))
        assert call(secured, "GET", "/v1/topics").status == 401
        assert call(secured, "GET", "/v1/topics", user=("admin", password)).status == 200
        assert f"KRAFT_ADMIN={node.admin}" in node.log_path.read_text()  # printed for the CLI
        env = {"KRAFT_ADMIN_USER": "admin", "KRAFT_ADMIN_PASSWORD": password}
        made = kraft(secured, "topics", "create", "from-cli", "--ca-file", str(ca), env=env)
        assert made.returncode == 0, made.stderr
    finally:
        node.stop()
