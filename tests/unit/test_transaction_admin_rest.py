"""The transaction routes of the REST admin API (kraft/rest/transactions.py): the abort body
and the query parameters (400 with the reason), every route served by the real aiohttp
application against fake brokers (test_transaction_admin.FakeTxnBrokers), the ACL each needs,
and the answers checked against the API's own OpenAPI document."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import pytest
from aiohttp.test_utils import TestClient, TestServer
from test_group_admin_rest import Api, FakeNode
from test_transaction_admin import (
    MINUTE,
    FakeTxn,
    FakeTxnBrokers,
    producer,
    quick_retries,  # noqa: F401  (an autouse fixture)
)

from broker.security.session import Session
from kafka_protocol.clock import wall_ms
from kafka_protocol.messages import WriteTxnMarkersRequest
from kraft.rest import build_app
from kraft.rest.common import AdminNode, ApiError, Body
from kraft.rest.transactions import AbortByOffset, parse_abort
from kraft.transactions.model import AbortSpec
from metadata_log.acls import AclOperation, ResourceType
from metadata_log.image import TopicPartition

T = TypeVar("T")
TP = TopicPartition
ABORT = "/v1/transactions/abort"
HANGING = "/v1/transactions/hanging"
PRODUCERS = "/v1/topics/{name}/partitions/{partition}/producers"

# --- the abort body ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"topic": "t", "partition": 0, "start_offset": 42}, AbortByOffset(TP("t", 0), 42)),
        (
            {
                "topic": "t",
                "partition": 2,
                "producer_id": 7,
                "producer_epoch": 1,
                "coordinator_epoch": 3,
            },
            AbortSpec(TP("t", 2), 7, 1, 3),
        ),
        (  # -1 (no marker yet, as DescribeProducers shows it) is sent as 0, as Kafka's tool
            {
                "topic": "t",
                "partition": 2,
                "producer_id": 7,
                "producer_epoch": 1,
                "coordinator_epoch": -1,
            },
            AbortSpec(TP("t", 2), 7, 1, 0),
        ),
    ],
)
def test_abort_bodies(body: dict[str, Any], expected: object) -> None:
    assert parse_abort(Body(body)) == expected


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"partition": 0, "start_offset": 1}, "'topic' is required"),
        ({"topic": "", "partition": 0, "start_offset": 1}, "must not be empty"),
        ({"topic": "t", "start_offset": 1}, "'partition' is required"),
        ({"topic": "t", "partition": -1, "start_offset": 1}, "'partition' must be an integer >= 0"),
        ({"topic": "t", "partition": 2**31, "start_offset": 1}, "at most 2147483647"),
        ({"topic": "t", "partition": 0}, 'name the transaction with "start_offset"'),
        ({"topic": "t", "partition": 0, "start_offset": -5}, "'start_offset' must be an integer"),
        ({"topic": "t", "partition": 0, "start_offset": "7"}, "'start_offset' must be an integer"),
        ({"topic": "t", "partition": 0, "start_offset": 1, "producer_id": 3}, "not both"),
        ({"topic": "t", "partition": 0, "producer_id": 3}, "'producer_epoch' is required"),
        (
            {"topic": "t", "partition": 0, "producer_id": 3, "producer_epoch": 0},
            "'coordinator_epoch' is required",
        ),
        (
            {
                "topic": "t",
                "partition": 0,
                "producer_id": 3,
                "producer_epoch": 40000,
                "coordinator_epoch": 0,
            },
            "'producer_epoch' must be at most 32767",
        ),
        (
            {
                "topic": "t",
                "partition": 0,
                "producer_id": 3,
                "producer_epoch": 0,
                "coordinator_epoch": -2,
            },
            "'coordinator_epoch' must be an integer >= -1",
        ),
        ({"topic": "t", "partition": 0, "start_offset": 1, "force": True}, "unknown field 'force'"),
    ],
)
def test_bad_abort_bodies(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiError) as refused:
        parse_abort(Body(body))
    assert (refused.value.status, refused.value.error) == (400, "INVALID_REQUEST")
    assert message in refused.value.message


# --- the routes ----------------------------------------------------------------------------------


class Authorizer:
    """Allows everything but ``denied``: (operation, resource type, name) triples."""

    def __init__(self, *denied: tuple[AclOperation, ResourceType, str]) -> None:
        self.denied = set(denied)

    def authorize(
        self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        return (operation, resource_type, name) not in self.denied


def serve(
    brokers: FakeTxnBrokers,
    scenario: Callable[[Api], Awaitable[T]],
    authorizer: Authorizer | None = None,
) -> T:
    async def main() -> T:
        await brokers.start()
        app = build_app(cast(AdminNode, FakeNode(brokers.image)), authorizer=authorizer)
        try:
            async with asyncio.timeout(20), TestClient(TestServer(app)) as client:
                return await scenario(Api(client))
        finally:
            await brokers.close()

    return asyncio.run(main())


def open_transactions() -> FakeTxnBrokers:
    old = wall_ms() - 20 * MINUTE
    return FakeTxnBrokers(
        transactions={
            "app-1": FakeTxn(100, "Ongoing", [TP("t", 0)]),
            "secret": FakeTxn(300, "Ongoing", [TP("u", 0)]),
        },
        producers={
            TP("t", 0): [
                producer(100, 3, last_timestamp=old),
                producer(200, 5, last_timestamp=old, coordinator_epoch=None),
            ],
            TP("u", 0): [producer(300, 1, last_timestamp=old)],
        },
    )


def test_list_describe_and_producers() -> None:
    async def scenario(api: Api) -> None:
        status, listed = await api.call("GET", "/v1/transactions", "/v1/transactions")
        assert status == 200
        assert [t["transactional_id"] for t in listed] == ["app-1", "secret"]
        assert listed[0] == {
            "transactional_id": "app-1",
            "producer_id": 100,
            "state": "Ongoing",
            "coordinator": 2,
        }
        path = "/v1/transactions?state=Ongoing,Empty&producer_id=300&duration_ms=10"
        status, listed = await api.call("GET", path, "/v1/transactions")
        assert [t["transactional_id"] for t in listed] == ["secret"]
        status, t = await api.call(
            "GET", "/v1/transactions/app-1", "/v1/transactions/{transactional_id}"
        )
        assert status == 200
        assert (t["state"], t["producer_id"], t["partitions"]) == (
            "Ongoing",
            100,
            [{"topic": "t", "partition": 0}],
        )
        assert t["coordinator"]["id"] == 2 and t["transaction_duration_ms"] >= 0
        status, missing = await api.call(
            "GET", "/v1/transactions/nobody", "/v1/transactions/{transactional_id}"
        )
        assert (status, missing["error"]) == (404, "TRANSACTIONAL_ID_NOT_FOUND")
        status, answer = await api.call("GET", "/v1/topics/t/partitions/0/producers", PRODUCERS)
        assert status == 200
        assert [
            (p["producer_id"], p["current_transaction_start_offset"], p["coordinator_epoch"])
            for p in answer["producers"]
        ] == [(100, 3, None), (200, 5, None)]

    serve(open_transactions(), scenario)


@pytest.mark.parametrize(
    ("path", "template", "status", "message"),
    [
        ("/v1/transactions?state=Running", "/v1/transactions", 400, "unknown transaction state"),
        ("/v1/transactions?producer_id=-1", "/v1/transactions", 400, "must be a producer id"),
        ("/v1/transactions?duration_ms=x", "/v1/transactions", 400, "must be an integer"),
        ("/v1/topics/t/partitions/x/producers", PRODUCERS, 400, "partition number"),
        ("/v1/topics/t/partitions/9/producers", PRODUCERS, 404, "has no partition 9"),
        ("/v1/topics/nope/partitions/0/producers", PRODUCERS, 404, "does not exist"),
        ("/v1/topics/t/partitions/0/producers?broker_id=9", PRODUCERS, 404, "not registered"),
        (HANGING, HANGING, 400, "give 'topic' or 'broker_id'"),
        (HANGING + "?broker_id=1&partition=0", HANGING, 400, "'partition' needs 'topic'"),
        (HANGING + "?topic=t&max_transaction_timeout_ms=-1", HANGING, 400, "between 0"),
        (HANGING + "?topic=nope", HANGING, 404, "does not exist"),
        (HANGING + "?topic=t&partition=5", HANGING, 404, "has no partition 5"),
    ],
)
def test_bad_parameters(path: str, template: str, status: int, message: str) -> None:
    async def scenario(api: Api) -> None:
        got, body = await api.call("GET", path, template)
        assert got == status, body
        assert message in body["message"]

    serve(open_transactions(), scenario)


def test_find_hanging_then_abort_by_start_offset() -> None:
    brokers = open_transactions()

    async def scenario(api: Api) -> None:
        status, found = await api.call("GET", HANGING + "?topic=t", HANGING)
        assert status == 200 and found["partitions_searched"] == 2
        assert [
            (h["partition"], h["producer_id"], h["start_offset"]) for h in found["hanging"]
        ] == [(0, 200, 5)]
        assert found["hanging"][0]["duration_ms"] >= 20 * MINUTE
        status, by_broker = await api.call("GET", HANGING + "?broker_id=2", HANGING)
        assert (status, by_broker["partitions_searched"], by_broker["hanging"]) == (200, 1, [])
        status, missing = await api.call(
            "POST", ABORT, ABORT, {"topic": "t", "partition": 0, "start_offset": 4}
        )
        assert (status, missing["error"]) == (404, "NOT_FOUND")
        assert "open transactions start at: 3, 5" in missing["message"]
        status, done = await api.call(
            "POST", ABORT, ABORT, {"topic": "t", "partition": 0, "start_offset": 5}
        )
        assert status == 200
        assert done == {
            "topic": "t",
            "partition": 0,
            "producer_id": 200,
            "producer_epoch": 0,
            "coordinator_epoch": 0,
            "aborted": True,
        }
        status, found = await api.call("GET", HANGING + "?topic=t&partition=0", HANGING)
        assert found["hanging"] == []
        body = {
            "topic": "t",
            "partition": 0,
            "producer_id": 100,
            "producer_epoch": 0,
            "coordinator_epoch": 0,
        }
        assert (await api.call("POST", ABORT, ABORT, body))[0] == 200

    serve(brokers, scenario)
    assert [(m.markers[0].producer_id) for m in brokers.sent(WriteTxnMarkersRequest)] == [200, 100]


def test_an_abort_with_an_old_epoch_is_a_conflict_and_nothing_changes() -> None:
    brokers = FakeTxnBrokers(producers={TP("t", 1): [producer(7, 12, epoch=3)]})

    async def scenario(api: Api) -> None:
        body = {
            "topic": "t",
            "partition": 1,
            "producer_id": 7,
            "producer_epoch": 2,
            "coordinator_epoch": 0,
        }
        status, refused = await api.call("POST", ABORT, ABORT, body)
        assert (status, refused["error"]) == (409, "INVALID_PRODUCER_EPOCH")

    serve(brokers, scenario)
    assert brokers.producers[TP("t", 1)] == [producer(7, 12, epoch=3)]


_O, _R = AclOperation, ResourceType


def test_each_route_needs_what_kafka_checks() -> None:
    authorizer = Authorizer(
        (_O.DESCRIBE, _R.TRANSACTIONAL_ID, "secret"),
        (_O.READ, _R.TOPIC, "u"),
        (_O.CLUSTER_ACTION, _R.CLUSTER, "kafka-cluster"),
        (_O.ALTER, _R.CLUSTER, "kafka-cluster"),
        (_O.DESCRIBE, _R.TOPIC, "t"),
    )

    async def scenario(api: Api) -> None:
        _, listed = await api.call("GET", "/v1/transactions", "/v1/transactions")
        assert [t["transactional_id"] for t in listed] == ["app-1"]  # filtered, as Kafka's
        _, described = await api.call(
            "GET", "/v1/transactions/app-1", "/v1/transactions/{transactional_id}"
        )
        assert described["partitions"] == []  # t-0 left out: no DESCRIBE on topic t
        status, denied = await api.call(
            "GET", "/v1/transactions/secret", "/v1/transactions/{transactional_id}"
        )
        assert (status, denied["error"]) == (403, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
        status, denied = await api.call("GET", "/v1/topics/u/partitions/0/producers", PRODUCERS)
        assert (status, denied["error"]) == (403, "TOPIC_AUTHORIZATION_FAILED")
        status, denied = await api.call("GET", HANGING + "?topic=u", HANGING)
        assert (status, denied["error"]) == (403, "TOPIC_AUTHORIZATION_FAILED")
        status, searched = await api.call("GET", HANGING + "?broker_id=2", HANGING)
        assert (status, searched["partitions_searched"]) == (200, 0)  # u-0 skipped: no READ
        status, denied = await api.call(
            "POST", ABORT, ABORT, {"topic": "t", "partition": 0, "start_offset": 5}
        )
        assert (status, denied["error"]) == (403, "CLUSTER_AUTHORIZATION_FAILED")

    brokers = open_transactions()
    serve(brokers, scenario, authorizer)
    assert brokers.sent(WriteTxnMarkersRequest) == []


def test_a_transactional_id_the_caller_may_not_describe_looks_unknown_to_find_hanging() -> None:
    authorizer = Authorizer((_O.DESCRIBE, _R.TRANSACTIONAL_ID, "secret"))

    async def scenario(api: Api) -> None:
        _, found = await api.call("GET", HANGING + "?topic=u", HANGING)
        assert [h["producer_id"] for h in found["hanging"]] == [300]

    serve(open_transactions(), scenario, authorizer)


@pytest.mark.parametrize(
    ("denied", "status"),
    [
        ((), 200),
        (((_O.ALTER, _R.CLUSTER, "kafka-cluster"),), 200),  # CLUSTER_ACTION is enough
        (((_O.CLUSTER_ACTION, _R.CLUSTER, "kafka-cluster"),), 200),  # so is ALTER (KIP-664)
    ],
)
def test_abort_needs_alter_or_cluster_action_on_the_cluster(
    denied: tuple[tuple[AclOperation, ResourceType, str], ...], status: int
) -> None:
    async def scenario(api: Api) -> None:
        body = {"topic": "t", "partition": 0, "start_offset": 5}
        assert (await api.call("POST", ABORT, ABORT, body))[0] == status

    serve(open_transactions(), scenario, Authorizer(*denied))
