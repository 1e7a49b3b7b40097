"""The REST admin API's authentication and access rules (kraft/rest/authentication.py,
kraft/rest/access.py), served by the real aiohttp application on a socket: 401 without or with
wrong credentials (delayed, without holding up other callers), PLAIN and SCRAM users, the
verification cache, 403 from the ACL rules, the filtered listing, and a fuzzed Authorization
header that never gives a 500 or access."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.security.session import Session
from kafka_protocol.sasl import scram_credential, verify_scram_password
from kraft.node.config import load_config
from kraft.rest import ROUTES, build_app
from kraft.rest.access import ACCESS
from kraft.rest.authentication import (
    MAX_AUTHORIZATION_BYTES,
    AdminSecurity,
    Unauthenticated,
    VerifiedCache,
    parse_basic,
)
from kraft.rest.common import AdminNode
from metadata_log.acls import AclOperation, ResourceType
from metadata_log.image import ClusterImage, PartitionImage, TopicImage, TopicsImage

T = TypeVar("T")
SCRAM_ALICE = scram_credential("SCRAM-SHA-256", "alice-secret", iterations=4096)
PLAIN = {"admin": "admin-secret", "bob": "bob-secret"}


def image_with_topics(*names: str) -> ClusterImage:
    topics = {
        name: TopicImage(
            name,
            uuid.uuid5(uuid.NAMESPACE_DNS, name),
            {
                0: PartitionImage(
                    replicas=(1,), isr=(1,), leader=1, leader_epoch=0, partition_epoch=0
                )
            },
        )
        for name in names
    }
    return ClusterImage(TopicsImage({t.topic_id: t for t in topics.values()}, topics), {}, {}, {})


class FakeNode:
    def __init__(self, image: ClusterImage) -> None:
        self.image = image
        self.broker = None
        self.controller = None
        self.metrics = None
        self.ready = True
        self.cluster_id = "test"
        self.config = load_config(
            overrides={
                "node.id": "1",
                "process.roles": "broker,controller",
                "listeners": "PLAINTEXT://127.0.0.1:0",
            },
            environ={},
        )


class Acls:
    """An authorizer allowing exactly the (principal, operation, type, name) given."""

    def __init__(self, *allowed: tuple[str, AclOperation, ResourceType, str]) -> None:
        self.allowed = set(allowed)
        self.asked: list[tuple[str, str, str]] = []

    def authorize(
        self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        assert session.listener == "ADMIN" and session.client_host == "127.0.0.1"
        self.asked.append((session.principal, operation.name, name))
        return (session.principal, operation, resource_type, name) in self.allowed


class CountingVerify:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, mechanism: str, credential: Any, password: str) -> bool:
        self.calls += 1
        return verify_scram_password(mechanism, credential, password)


def security(delay_ms: int = 0, verify: Any = verify_scram_password) -> AdminSecurity:
    scram = {("alice", "SCRAM-SHA-256"): SCRAM_ALICE}
    return AdminSecurity(
        required=True,
        plain_users=lambda: PLAIN,
        scram_lookup=lambda user, mechanism: scram.get((user, mechanism)),
        scram_verify=verify,
        failed_authentication_delay_ms=delay_ms,
    )


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def serve(
    scenario: Callable[[TestClient[Any, Any]], Awaitable[T]],
    sec: AdminSecurity,
    authorizer: Any = None,
    image: ClusterImage | None = None,
) -> T:
    async def main() -> T:
        node = FakeNode(image or image_with_topics("orders", "payments", "secret"))
        app = build_app(cast(AdminNode, node), sec, authorizer)
        async with asyncio.timeout(30), TestClient(TestServer(app)) as client:
            return await scenario(client)

    return asyncio.run(main())


# --- the rules table -----------------------------------------------------------------------------


def test_every_route_has_one_access_rule() -> None:
    assert {(method, path) for method, path, _ in ROUTES} == set(ACCESS)


# --- authentication ------------------------------------------------------------------------------


def test_probes_are_open_and_everything_else_needs_credentials() -> None:
    async def scenario(client: TestClient[Any, Any]) -> None:
        for path in ("/v1/health", "/v1/ready", "/v1/openapi.json"):
            assert (await client.get(path)).status == 200, path
        for method, path in (("GET", "/v1/topics"), ("GET", "/v1/cluster"), ("GET", "/metrics")):
            response = await client.request(method, path)
            assert response.status == 401, path
            assert response.headers["WWW-Authenticate"].startswith('Basic realm="kraft"')
            assert (await response.json())["error"] == "AUTHENTICATION_FAILED"
        # an unknown route is not a way to learn anything either
        assert (await client.get("/v1/nothing")).status == 401

    serve(scenario, security())


def test_plain_and_scram_users_log_in_and_wrong_passwords_do_not() -> None:
    async def scenario(client: TestClient[Any, Any]) -> None:
        for user, password in (("admin", "admin-secret"), ("alice", "alice-secret")):
            response = await client.get("/v1/topics", headers=basic(user, password))
            assert response.status == 200, user
            assert [t["name"] for t in await response.json()] == ["orders", "payments", "secret"]
        for user, password in (
            ("admin", "wrong"),
            ("alice", "admin-secret"),
            ("alice", "alice-secret "),
            ("nobody", "x"),
            ("admin", ""),
        ):
            response = await client.get("/v1/topics", headers=basic(user, password))
            assert response.status == 401, (user, password)
            body = await response.json()
            assert "invalid user name or password" in body["message"]

    serve(scenario, security())


def test_a_failed_login_is_delayed_without_holding_up_other_callers() -> None:
    async def scenario(client: TestClient[Any, Any]) -> tuple[float, float]:
        async def timed(headers: dict[str, str]) -> tuple[int, float]:
            start = time.monotonic()
            response = await client.get("/v1/topics", headers=headers)
            return response.status, time.monotonic() - start

        bad, good = await asyncio.gather(
            timed(basic("admin", "wrong")), timed(basic("admin", "admin-secret"))
        )
        assert bad[0] == 401 and good[0] == 200
        return bad[1], good[1]

    bad_s, good_s = serve(scenario, security(delay_ms=400))
    assert bad_s >= 0.4
    assert good_s < 0.3


def test_a_scram_verification_is_cached_only_when_it_succeeds_and_costs_the_same_for_all() -> None:
    verify = CountingVerify()

    async def scenario(client: TestClient[Any, Any]) -> None:
        for _ in range(5):
            assert (await client.get("/v1/topics", headers=basic("alice", "alice-secret"))).ok
        assert verify.calls == 1
        for _ in range(3):
            response = await client.get("/v1/topics", headers=basic("alice", "guess"))
            assert response.status == 401
        assert verify.calls == 4  # each failure paid PBKDF2 again
        # an unknown user costs the same PBKDF2 (timing does not tell who exists)
        assert (await client.get("/v1/topics", headers=basic("nobody", "guess"))).status == 401
        assert verify.calls == 5

    serve(scenario, security(verify=verify))


def test_the_cache_is_bounded_expires_and_misses_a_changed_credential() -> None:
    now = [0]
    cache = VerifiedCache(max_entries=2, ttl_ms=1000, clock=lambda: now[0])
    other = scram_credential("SCRAM-SHA-256", "alice-secret", iterations=4096)
    keys = [cache.key(u, "SCRAM-SHA-256", "pw", SCRAM_ALICE) for u in ("a", "b", "c")]
    for key in keys:
        cache.add(key)
    assert len(cache) == 2 and keys[0] not in cache and keys[2] in cache
    assert cache.key("c", "SCRAM-SHA-256", "pw", other) not in cache  # new salt: a miss
    assert cache.key("c", "SCRAM-SHA-256", "pw2", SCRAM_ALICE) not in cache
    now[0] = 1000
    assert keys[2] not in cache and len(cache) == 1


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ([], "exactly one"),
        (["Basic a", "Basic b"], "exactly one"),
        (["Bearer abc"], "Basic"),
        (["Basic !!!"], "base64"),
        (["Basic " + base64.b64encode(b"\xff\xfe:x").decode()], "base64 of UTF-8"),
        (["Basic " + base64.b64encode(b"nocolon").decode()], "user:password"),
        (["Basic " + base64.b64encode(b":pw").decode()], "user:password"),
        (["Basic " + "A" * (MAX_AUTHORIZATION_BYTES + 1)], "over"),
        (["Basic " + base64.b64encode(b"a\x00b:c").decode()], "invalid user"),
    ],
)
def test_malformed_headers_are_refused(values: list[str], reason: str) -> None:
    with pytest.raises(Unauthenticated, match=reason):
        parse_basic(values)


def test_a_password_may_hold_colons_and_any_printable_text() -> None:
    token = base64.b64encode("é:p:w d".encode()).decode()
    assert parse_basic([f"basic  {token}"]) == ("é", "p:w d")


def test_not_required_means_anonymous() -> None:
    acls = Acls(("User:ANONYMOUS", AclOperation.DESCRIBE, ResourceType.TOPIC, "orders"))

    async def scenario(client: TestClient[Any, Any]) -> None:
        response = await client.get("/v1/topics")
        assert [t["name"] for t in await response.json()] == ["orders"]

    serve(scenario, AdminSecurity(required=False), acls)


# --- authorization -------------------------------------------------------------------------------


def test_acls_decide_each_route() -> None:
    acls = Acls(
        ("User:bob", AclOperation.DESCRIBE, ResourceType.TOPIC, "orders"),
        ("User:bob", AclOperation.DESCRIBE, ResourceType.TOPIC, "payments"),
        ("User:bob", AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, "payments"),
        ("User:bob", AclOperation.READ, ResourceType.GROUP, "g"),
    )
    bob = basic("bob", "bob-secret")

    async def scenario(client: TestClient[Any, Any]) -> None:
        listed = await (await client.get("/v1/topics", headers=bob)).json()
        assert [t["name"] for t in listed] == ["orders", "payments"]
        for method, path, error in (
            ("DELETE", "/v1/topics/orders", "TOPIC_AUTHORIZATION_FAILED"),
            ("GET", "/v1/topics/secret", "TOPIC_AUTHORIZATION_FAILED"),
            ("GET", "/v1/topics/no-such-topic", "TOPIC_AUTHORIZATION_FAILED"),
            ("GET", "/v1/cluster", "CLUSTER_AUTHORIZATION_FAILED"),
            ("GET", "/metrics", "CLUSTER_AUTHORIZATION_FAILED"),
            ("GET", "/v1/acls", "CLUSTER_AUTHORIZATION_FAILED"),
            ("POST", "/v1/users", "CLUSTER_AUTHORIZATION_FAILED"),
            ("DELETE", "/v1/groups/g", "GROUP_AUTHORIZATION_FAILED"),
            ("POST", "/v1/topics/orders/records", "TOPIC_AUTHORIZATION_FAILED"),
            ("GET", "/v1/topics/orders/partitions/0/records", "TOPIC_AUTHORIZATION_FAILED"),
            ("PATCH", "/v1/topics/orders/configs", "TOPIC_AUTHORIZATION_FAILED"),
            ("POST", "/v1/topics/orders/partitions", "TOPIC_AUTHORIZATION_FAILED"),
        ):
            response = await client.request(method, path, headers=bob, json={})
            assert response.status == 403, (method, path)
            assert (await response.json())["error"] == error, (method, path)
        response = await client.post("/v1/topics", headers=bob, json={"name": "new"})
        assert response.status == 403
        # READ on the group is not enough to move its offsets of a topic without READ
        reset = {"topic": "orders", "to": "earliest"}
        response = await client.post("/v1/groups/g/offsets", headers=bob, json=reset)
        assert (await response.json())["error"] == "TOPIC_AUTHORIZATION_FAILED"
        # DESCRIBE without DESCRIBE_CONFIGS: the topic, not its configs
        orders = await (await client.get("/v1/topics/orders", headers=bob)).json()
        payments = await (await client.get("/v1/topics/payments", headers=bob)).json()
        assert orders["configs"] is None and payments["configs"] == {}

    serve(scenario, security(), acls)
    assert ("User:bob", "DELETE", "orders") in acls.asked


# --- fuzzing -------------------------------------------------------------------------------------

header_values = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=200).map(lambda b: "Basic " + base64.b64encode(b).decode()),
    st.text(max_size=100).map(lambda t: "Basic " + t),
    st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
    st.integers(1, 20_000).map(lambda n: "Basic " + "QUFB" * (n // 4)),
    st.sampled_from(sorted(PLAIN)).map(
        lambda u: "Basic " + base64.b64encode(f"{u}:".encode()).decode()
    ),
)


async def raw_status(port: int, headers: list[bytes]) -> int:
    """Send a GET with exactly these header lines; the status (0: the server closed)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        lines = [b"GET /v1/topics HTTP/1.1", b"Host: x", *headers, b"Connection: close"]
        writer.write(b"\r\n".join(lines) + b"\r\n\r\n")
        await writer.drain()
        status_line = await reader.readline()
        return int(status_line.split()[1]) if status_line else 0
    finally:
        writer.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(header_values, min_size=1, max_size=40))
def test_fuzzed_authorization_headers_never_crash_or_give_access(values: list[str]) -> None:
    async def scenario(client: TestClient[Any, Any]) -> None:
        port = client.server.port
        assert port is not None
        lines = [
            b"Authorization: "
            + v.encode("latin-1", "replace").replace(b"\r", b"").replace(b"\n", b"")
            for v in values
        ]
        status = await raw_status(port, lines)
        assert status in (0, 400, 401, 431), status

    serve(scenario, security())
