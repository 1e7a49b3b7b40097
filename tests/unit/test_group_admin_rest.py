"""The consumer group routes of the REST admin API (kraft/rest/groups.py): the reset body, and
every route served by the real aiohttp application against fake brokers (test_group_admin.py),
with the answers checked against the API's own OpenAPI document."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import pytest
from aiohttp.test_utils import TestClient, TestServer
from integration.test_rest import ApiSchemas
from test_group_admin import FakeBrokers, FakeGroup, stable_group

from kafka_protocol.messages import OffsetCommitRequest
from kraft.groups import client as group_client
from kraft.groups.model import ToEarliest, ToLatest, ToOffset, ToOffsets, ToTimestamp
from kraft.node.config import load_config
from kraft.rest import build_app
from kraft.rest import groups as rest_groups
from kraft.rest.common import AdminNode, ApiError, Body
from kraft.rest.groups import parse_reset
from kraft.rest.openapi import openapi_document
from metadata_log.image import ClusterImage, TopicPartition

T = TypeVar("T")
TP = TopicPartition

# --- the reset body ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"topic": "t", "to": "earliest"}, (["t"], ToEarliest(), False)),
        ({"topics": ["a", "b"], "to": "latest", "execute": True}, (["a", "b"], ToLatest(), True)),
        (
            {"all_topics": True, "to": {"timestamp": 1700000000000}},
            (None, ToTimestamp(1700000000000), False),
        ),
        ({"all_topics": True, "to": {"offset": 0}}, (None, ToOffset(0), False)),
        (
            {"topic": "t", "to": {"offsets": {"0": 5, "2": 0}}},
            (["t"], ToOffsets({TP("t", 0): 5, TP("t", 2): 0}), False),
        ),
    ],
)
def test_reset_bodies(body: dict[str, Any], expected: tuple[Any, ...]) -> None:
    assert parse_reset(Body(body)) == expected


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"topic": "t"}, 'field "to" is required'),
        ({"topic": "t", "to": "start"}, "got 'start'"),
        ({"topic": "t", "to": 5}, "got a number"),
        ({"topic": "t", "to": {"offset": -1}}, "'to.offset' must be an integer >= 0"),
        ({"topic": "t", "to": {"offset": True}}, "'to.offset' must be an integer >= 0"),
        ({"topic": "t", "to": {"timestamp": "now"}}, "'to.timestamp' must be an integer >= 0"),
        ({"topic": "t", "to": {"offset": 1, "timestamp": 2}}, 'field "to" must be'),
        ({"topics": ["t"], "to": {"offsets": {"0": 1}}}, 'needs "topic"'),
        ({"topic": "t", "to": {"offsets": {}}}, "must be an object"),
        ({"topic": "t", "to": {"offsets": {"x": 1}}}, "'x' is not a partition number"),
        ({"topic": "t", "to": {"offsets": {"-1": 1}}}, "'-1' is not a partition number"),
        ({"to": "earliest"}, 'exactly one of "topic", "topics" or "all_topics"'),
        ({"topic": "t", "all_topics": True, "to": "earliest"}, "(got topic, all_topics)"),
        ({"all_topics": False, "to": "earliest"}, '"all_topics" must be true'),
        ({"topics": [], "to": "earliest"}, "non-empty array"),
        ({"topics": "t", "to": "earliest"}, "array of strings"),
        ({"topic": "", "to": "earliest"}, "must not be empty"),
        ({"topic": "t", "to": "earliest", "execute": "yes"}, "'execute' must be true or false"),
        ({"topic": "t", "to": "earliest", "dry_run": True}, "unknown field 'dry_run'"),
    ],
)
def test_bad_reset_bodies(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiError) as refused:
        parse_reset(Body(body))
    assert (refused.value.status, refused.value.error) == (400, "INVALID_REQUEST")
    assert message in refused.value.message


# --- the routes ----------------------------------------------------------------------------------


class FakeNode:
    """What the API needs of a node: here a controller (no broker), as the routes must work
    on any node."""

    def __init__(self, image: Callable[[], ClusterImage | None]) -> None:
        self._image = image
        self.broker = None
        self.ready = True
        self.cluster_id = "test"
        listeners = {"listeners": "PLAINTEXT://127.0.0.1:0"}  # the brokers' listener it reads
        base = {"node.id": "1", "process.roles": "broker,controller", **listeners}
        self.config = load_config(overrides=base, environ={})

    @property
    def image(self) -> ClusterImage | None:
        return self._image()


class Api:
    def __init__(self, client: TestClient[Any, Any]) -> None:
        self.client = client
        self.schemas = ApiSchemas(openapi_document("test"))

    async def call(
        self, method: str, path: str, template: str, body: Any = None
    ) -> tuple[int, Any]:
        response = await self.client.request(method, path, json=body)
        text = await response.text()
        data = json.loads(text) if text else None
        self._check(method, template, response.status, data)
        return response.status, data

    def _check(self, method: str, template: str, status: int, data: Any) -> None:
        validator = pytest.importorskip("openapi_schema_validator")
        schema = self.schemas.response_schema(method, template, status)
        if schema is None:
            assert data is None, (status, data)
            return
        validator.validate(data, schema, cls=validator.OAS30Validator)


def serve(
    brokers: FakeBrokers, scenario: Callable[[Api], Awaitable[T]], *, metadata: bool = True
) -> T:
    async def main() -> T:
        await brokers.start()
        node = FakeNode(brokers.image if metadata else lambda: None)
        app = build_app(cast(AdminNode, node))
        try:
            async with asyncio.timeout(20), TestClient(TestServer(app)) as client:
                return await scenario(Api(client))
        finally:
            await brokers.close()

    return asyncio.run(main())


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_client, "RETRY_INITIAL_S", 0.001)
    monkeypatch.setattr(group_client, "RETRY_MAX_S", 0.002)


def test_list_and_describe() -> None:
    brokers = FakeBrokers(
        groups={"g": stable_group(), "idle": FakeGroup(committed={TP("u", 0): 1})}
    )

    async def scenario(api: Api) -> None:
        status, listed = await api.call("GET", "/v1/groups", "/v1/groups")
        assert status == 200
        assert listed == [
            {
                "group_id": "g",
                "state": "Stable",
                "protocol_type": "consumer",
                "coordinator": 2,
                "group_type": "classic",
            },
            {
                "group_id": "idle",
                "state": "Empty",
                "protocol_type": "consumer",
                "coordinator": 2,
                "group_type": "classic",
            },
        ]
        status, group = await api.call("GET", "/v1/groups/g", "/v1/groups/{group}")
        assert status == 200
        assert (group["group_id"], group["state"], group["protocol"], group["lag"]) == (
            "g",
            "Stable",
            "range",
            5,
        )
        assert group["coordinator"]["id"] == 2
        assert group["members"][0] == {
            "member_id": "m-a",
            "group_instance_id": None,
            "client_id": "client-m-a",
            "host": "/10.0.0.9",
            "assignment": [{"topic": "t", "partitions": [0]}, {"topic": "u", "partitions": [0]}],
            "member_epoch": None,
            "target_assignment": None,
        }
        assert (group["group_type"], group["group_epoch"]) == ("classic", None)
        assert group["partitions"] == [
            {
                "topic": "t",
                "partition": 0,
                "committed": 15,
                "high_watermark": 20,
                "lag": 5,
                "member_id": "m-a",
            },
            {
                "topic": "t",
                "partition": 1,
                "committed": 8,
                "high_watermark": 8,
                "lag": 0,
                "member_id": "m-b",
            },
            {
                "topic": "u",
                "partition": 0,
                "committed": None,
                "high_watermark": 1,
                "lag": None,
                "member_id": "m-a",
            },
        ]
        status, missing = await api.call("GET", "/v1/groups/nobody", "/v1/groups/{group}")
        assert (status, missing["error"]) == (404, "GROUP_ID_NOT_FOUND")

    serve(brokers, scenario)


def test_delete() -> None:
    brokers = FakeBrokers(
        groups={"g": stable_group(), "idle": FakeGroup(committed={TP("u", 0): 1})}
    )

    async def scenario(api: Api) -> None:
        template = "/v1/groups/{group}"
        assert await api.call("DELETE", "/v1/groups/idle", template) == (204, None)
        status, body = await api.call("DELETE", "/v1/groups/idle", template)
        assert (status, body["error"]) == (404, "GROUP_ID_NOT_FOUND")
        status, body = await api.call("DELETE", "/v1/groups/g", template)
        assert (status, body["error"]) == (409, "NON_EMPTY_GROUP")
        assert "active members" in body["message"]

    serve(brokers, scenario)
    assert set(brokers.groups) == {"g"}


def test_reset_offsets() -> None:
    brokers = FakeBrokers(
        groups={"g": stable_group(), "idle": FakeGroup(committed={TP("t", 0): 15})}
    )
    template = "/v1/groups/{group}/offsets"

    async def scenario(api: Api) -> None:
        body: dict[str, Any] = {"topic": "t", "to": "earliest"}
        status, planned = await api.call("POST", "/v1/groups/idle/offsets", template, body)
        assert status == 200
        assert planned == {
            "group_id": "idle",
            "executed": False,
            "partitions": [
                {"topic": "t", "partition": 0, "previous_offset": 15, "new_offset": 3},
                {"topic": "t", "partition": 1, "previous_offset": None, "new_offset": 0},
            ],
        }
        assert brokers.sent(OffsetCommitRequest) == []
        body = {"all_topics": True, "to": {"offset": 10}, "execute": True}
        status, done = await api.call("POST", "/v1/groups/idle/offsets", template, body)
        assert (status, done["executed"], done["partitions"][0]["new_offset"]) == (200, True, 10)
        assert brokers.groups["idle"].committed == {TP("t", 0): 10}

        status, active = await api.call("POST", "/v1/groups/g/offsets", template, body)
        assert (status, active["error"]) == (409, "NON_EMPTY_GROUP")
        status, unknown = await api.call(
            "POST", "/v1/groups/idle/offsets", template, {"topic": "nope", "to": "latest"}
        )
        assert (status, unknown["error"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
        status, bad = await api.call("POST", "/v1/groups/idle/offsets", template, {"topic": "t"})
        assert (status, bad["error"]) == (400, "INVALID_REQUEST")

    serve(brokers, scenario)


def test_group_ids_are_path_segments_percent_encoded() -> None:
    brokers = FakeBrokers(groups={"a/b c": FakeGroup(committed={TP("t", 0): 15})})

    async def scenario(api: Api) -> None:
        status, group = await api.call("GET", "/v1/groups/a%2Fb%20c", "/v1/groups/{group}")
        assert (status, group["group_id"]) == (200, "a/b c")

    serve(brokers, scenario)


def test_a_node_without_metadata_is_not_ready() -> None:
    async def scenario(api: Api) -> None:
        status, body = await api.call("GET", "/v1/groups", "/v1/groups")
        assert (status, body["error"]) == (503, "NOT_READY")

    serve(FakeBrokers(), scenario, metadata=False)


def test_a_slow_cluster_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest_groups, "GROUP_CALL_TIMEOUT_S", 0.2)

    async def scenario(api: Api) -> None:
        status, body = await api.call("GET", "/v1/groups/g", "/v1/groups/{group}")
        assert (status, body["error"]) == (504, "REQUEST_TIMED_OUT")
        assert "describing 'g'" in body["message"]

    serve(FakeBrokers(silent={1, 2, 3}), scenario)
