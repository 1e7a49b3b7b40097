"""Client quotas on a real cluster (1 controller, 3 brokers): AlterClientQuotas forwarded to the
controller, ClientQuotaRecord replayed into every broker's image, DescribeClientQuotas answered
by any broker, and the errors Kafka answers for bad input, with nothing changed.

Clients: none of confluent-kafka 2.16.1's ``AdminClient``, kafka-python 3.0.12's
``KafkaAdminClient`` or aiokafka 0.14's ``AIOKafkaAdminClient`` has a client-quota call, so
the requests go through kafka-python's own connection manager and its own protocol classes
(``kafka.protocol.admin.AlterClientQuotasRequest``): the client encodes and decodes every byte.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    DescribeClientQuotasRequest,
)

from integration.cluster_process import LocalCluster, ServerProcess, wait_for

pytestmark = pytest.mark.integration

INVALID_REQUEST = 42
Entity = tuple[tuple[str, str | None], ...]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = Path(tmp_path_factory.mktemp("quotas"))
    cluster = LocalCluster.create(root, 1, 3).start()
    try:
        yield cluster
    finally:
        cluster.kill_all()


def kp_admin(node: ServerProcess) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=node.address, request_timeout_ms=10000)


def send(admin: KafkaAdminClient, request: Any) -> Any:
    manager = admin._manager  # no public call for these APIs
    return manager.run(manager.send, request)


def alter(
    admin: KafkaAdminClient,
    changes: list[tuple[Entity, dict[str, float | None]]],
    validate_only: bool = False,
) -> dict[Entity, tuple[int, str | None]]:
    A = AlterClientQuotasRequest
    request = A(
        entries=[
            A.EntryData(
                entity=[A.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                ops=[
                    A.EntryData.OpData(key=k, value=v or 0.0, remove=v is None)
                    for k, v in ops.items()
                ],
            )
            for entity, ops in changes
        ],
        validate_only=validate_only,
    )
    response = send(admin, request)
    return {
        tuple((e.entity_type, e.entity_name) for e in x.entity): (x.error_code, x.error_message)
        for x in response.entries
    }


def describe(
    admin: KafkaAdminClient, components: list[tuple[str, int, str | None]], strict: bool = False
) -> tuple[int, dict[Entity, dict[str, float]]]:
    D = DescribeClientQuotasRequest
    response = send(
        admin,
        D(
            components=[
                D.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components
            ],
            strict=strict,
        ),
    )
    entries = {
        tuple(sorted((e.entity_type, e.entity_name) for e in x.entity)): {
            v.key: v.value for v in x.values
        }
        for x in response.entries or ()
    }
    return response.error_code, entries


EXACT, DEFAULT, ANY = 0, 1, 2
ALICE_APP: Entity = (("client-id", "app"), ("user", "alice"))
APP: Entity = (("client-id", "app"),)
DEFAULT_USER: Entity = (("user", None),)


def everything(admin: KafkaAdminClient) -> dict[Entity, dict[str, float]]:
    error, found = describe(admin, [])
    assert error == 0
    return found


def test_alter_then_describe_on_every_broker(cluster: LocalCluster) -> None:
    brokers = list(cluster.brokers.values())
    writer = kp_admin(brokers[0])
    assert alter(
        writer,
        [
            (ALICE_APP, {"producer_byte_rate": 1024.0, "request_percentage": 12.5}),
            (APP, {"consumer_byte_rate": 2048.0}),
            (DEFAULT_USER, {"producer_byte_rate": 4096.0}),
        ],
    ) == {ALICE_APP: (0, None), APP: (0, None), DEFAULT_USER: (0, None)}
    want = {
        ALICE_APP: {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
        APP: {"consumer_byte_rate": 2048.0},
        DEFAULT_USER: {"producer_byte_rate": 4096.0},
    }
    for broker in brokers:  # each broker answers from its own image
        reader = kp_admin(broker)
        wait_for("the quotas", lambda r=reader: everything(r) == want, 10, cluster)
        reader.close()
    reader = kp_admin(brokers[2])
    # match exact / default / any, strict or not
    assert describe(reader, [("client-id", EXACT, "app")])[1].keys() == {ALICE_APP, APP}
    assert describe(reader, [("client-id", EXACT, "app")], strict=True)[1].keys() == {APP}
    assert describe(reader, [("user", DEFAULT, None)])[1] == {DEFAULT_USER: want[DEFAULT_USER]}
    assert describe(reader, [("user", ANY, None)])[1].keys() == {ALICE_APP, DEFAULT_USER}
    assert describe(reader, [("user", ANY, None)], strict=True)[1].keys() == {DEFAULT_USER}
    assert describe(reader, [("user", EXACT, "bob")])[1] == {}
    # a removal and a change: only those keys move
    assert alter(writer, [(ALICE_APP, {"request_percentage": None, "producer_byte_rate": 512.0})])
    want[ALICE_APP] = {"producer_byte_rate": 512.0}
    wait_for("the change", lambda: everything(reader) == want, 10, cluster)
    # removing the last key removes the entity
    alter(
        writer, [(APP, {"consumer_byte_rate": None}), (DEFAULT_USER, {"producer_byte_rate": None})]
    )
    wait_for("the removal", lambda: everything(reader) == {ALICE_APP: want[ALICE_APP]}, 10, cluster)
    alter(writer, [(ALICE_APP, {"producer_byte_rate": None})])
    wait_for("nothing left", lambda: everything(reader) == {}, 10, cluster)
    writer.close()
    reader.close()


def test_bad_input_is_refused_with_nothing_changed(cluster: LocalCluster) -> None:
    admin = kp_admin(cluster.any_broker())
    good: Entity = (("client-id", "kept"),)
    assert alter(admin, [(good, {"producer_byte_rate": 100.0})]) == {good: (0, None)}
    wait_for(
        "the quota", lambda: everything(admin) == {good: {"producer_byte_rate": 100.0}}, 10, cluster
    )
    bad_key: Entity = (("client-id", "k"),)
    negative: Entity = (("user", "u"),)
    fractional: Entity = (("client-id", "f"),)
    unknown_type: Entity = (("group", "g"),)
    empty_name: Entity = (("user", ""),)
    ip_and_user: Entity = (("ip", "10.0.0.1"), ("user", "u2"))
    answers = alter(
        admin,
        [
            (good, {"producer_byte_rate": 1.0, "no_such_quota": 5.0}),  # one bad key: none set
            (bad_key, {"no_such_quota": 5.0}),
            (negative, {"consumer_byte_rate": -1.0}),
            (fractional, {"producer_byte_rate": 1.5}),
            (unknown_type, {"producer_byte_rate": 1.0}),
            (empty_name, {"producer_byte_rate": 1.0}),
            (ip_and_user, {"producer_byte_rate": 1.0}),
        ],
    )
    assert {e: code for e, (code, _) in answers.items()} == {
        e: INVALID_REQUEST
        for e in (good, bad_key, negative, fractional, unknown_type, empty_name, ip_and_user)
    }, answers
    assert "no_such_quota" in (answers[bad_key][1] or "")
    assert "greater than 0" in (answers[negative][1] or "")
    # validate_only: a valid change answered, not made
    assert alter(admin, [(good, {"producer_byte_rate": 7.0})], validate_only=True) == {
        good: (0, None)
    }
    # an ip quota is stored (connection_creation_rate), a bad ip refused
    ip: Entity = (("ip", "10.0.0.1"),)
    assert alter(admin, [(ip, {"connection_creation_rate": 10.0})]) == {ip: (0, None)}
    assert (
        alter(admin, [((("ip", "nope"),), {"connection_creation_rate": 1.0})])[(("ip", "nope"),)][0]
        == INVALID_REQUEST
    )
    want = {good: {"producer_byte_rate": 100.0}, ip: {"connection_creation_rate": 10.0}}
    wait_for("the ip quota", lambda: everything(admin) == want, 10, cluster)
    # bad filters
    assert describe(admin, [("user", EXACT, None)])[0] == INVALID_REQUEST
    assert describe(admin, [("user", ANY, None), ("user", DEFAULT, None)])[0] == INVALID_REQUEST
    assert describe(admin, [("ip", ANY, None), ("user", ANY, None)])[0] == INVALID_REQUEST
    assert describe(admin, [("user", 7, None)])[0] == INVALID_REQUEST
    alter(admin, [(good, {"producer_byte_rate": None}), (ip, {"connection_creation_rate": None})])
    wait_for("nothing left", lambda: everything(admin) == {}, 10, cluster)
    admin.close()
