"""The ACL matrix's nodes, one per row (PLAINTEXT, SASL_PLAINTEXT), their topics and ACLs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    Producer,
)
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
)

from integration.acl.principals import (
    CLIENTS,
    CLOSED,
    OPEN,
    STANDARD_AUTHORIZER,
    Conn,
    acls_for,
    sasl_overrides,
    sasl_user,
    unique_name,
)
from integration.clients import (
    TIMEOUT_S,
    log_since,
    log_size,
)
from integration.node_process import NodeProcess


@pytest.fixture(scope="module", params=["PLAINTEXT", "SASL_PLAINTEXT"])
def sasl(request: pytest.FixtureRequest) -> bool:
    """The row of the matrix: PLAINTEXT or SASL_PLAINTEXT clients."""
    return request.param == "SASL_PLAINTEXT"  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def node(sasl: bool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """PLAINTEXT: every client is User:ANONYMOUS, and ``allow.everyone.if.no.acl.found`` lets
    it create the topics and the ACLs before any ACL exists.  SASL_PLAINTEXT: PLAIN users
    admin (a super user: creates the topics and ACLs), alice (the ACLs' principal) and bob
    (no ACL at all)."""
    overrides = (
        f"authorizer.class.name={STANDARD_AUTHORIZER}",
        "super.users=User:admin",
        f"allow.everyone.if.no.acl.found={'false' if sasl else 'true'}",
        "auto.create.topics.enable=false",
        *(sasl_overrides() if sasl else ()),
    )
    proc = NodeProcess(Path(tmp_path_factory.mktemp("acl")), overrides).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture(scope="module")
def c(node: NodeProcess, sasl: bool) -> Conn:
    """The principal the ACLs are about."""
    if sasl:
        return sasl_user(node, "alice")
    return Conn(node, "User:ANONYMOUS")


@pytest.fixture(scope="module")
def admin(node: NodeProcess, c: Conn, sasl: bool) -> Conn:
    return sasl_user(node, "admin") if sasl else c


@pytest.fixture(scope="module")
def topics(admin: Conn, c: Conn) -> dict[str, str]:
    """The topics every test uses, with a record each, then the ACLs for ``c``'s principal."""
    client = AdminClient(admin.conf())
    names = {"open": unique_name(OPEN, "data"), "closed": unique_name(CLOSED, "data")}
    for lib in CLIENTS:
        for prefix in (OPEN, CLOSED):
            for what in ("delete", "alter"):
                names[f"{prefix}{what}-{lib}"] = unique_name(prefix, f"{what}-{lib}")
    futures = client.create_topics(
        [NewTopic(n, 1, 1) for n in names.values()], operation_timeout=TIMEOUT_S
    )
    for f in futures.values():
        f.result(TIMEOUT_S)
    producer = Producer(admin.conf())
    for n in (names["open"], names["closed"]):
        producer.produce(n, b"first", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    for f in client.create_acls(acls_for(c.principal), request_timeout=TIMEOUT_S).values():
        f.result(TIMEOUT_S)
    return names


@pytest.fixture(autouse=True)
def show_node_log(node: NodeProcess) -> Iterator[None]:
    start = log_size(node)
    yield
    print(f"node stderr during this test:\n{log_since(node, start)}")
