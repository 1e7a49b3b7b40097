"""One path for admin requests forwarded to the controller (issue 15, item 1).

Adding a forwarded API takes one entry in ``broker.controller_channel.FORWARDED`` and its rule
in ``kraft.controller.controller.RULES``; no other layer spells the API out.  Measured as the
issue does: a file "names" an API when its text contains the CamelCase name (which also matches
``CreateTopicsRequest``) or the snake_case one (``create_topics``), docstrings included.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from broker.controller_channel import FORWARDED, Forwarder, forwarded_api, forwarded_handlers
from broker.dispatcher import RequestContext
from broker.identity import BrokerIdentity
from broker.security.session import Session
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    ElectLeadersRequest,
    RequestHeader,
)
from kafka_protocol.types import TopicName
from kraft.controller.controller import RULES
from kraft.node.quorum_member import QuorumForwarder
from metadata_log.image import ClusterImage

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "kraft")
FORWARDED_NAMES = (
    "CreateTopics",
    "DeleteTopics",
    "CreatePartitions",
    "IncrementalAlterConfigs",
    "ElectLeaders",
)
MAX_FILES_PER_API = 5


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower()


def files_naming(name: str) -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            text = path.read_text()
            if name in text or re.search(rf"\b{snake(name)}\b", text):
                found.append(str(path.relative_to(REPO)))
    return found


@pytest.mark.parametrize("name", FORWARDED_NAMES)
def test_each_forwarded_api_is_named_in_at_most_four_files(name: str) -> None:
    """The table module, the controller's rule table, the rule's module, its authorization rule
    (broker/security/admin_rules.py, checked before forwarding, as Kafka's KafkaApis does), and
    one more (the Kafka client's NOT_CONTROLLER check today; the CLI's elect-leaders command)."""
    found = files_naming(name)
    assert len(found) <= MAX_FILES_PER_API, f"{name} is named in {len(found)} files: {found}"


def test_every_forwarded_request_has_exactly_one_controller_rule() -> None:
    assert {api.request_type for api in FORWARDED} == set(RULES)


def test_the_controller_listener_and_the_broker_serve_every_client_entry_alike() -> None:
    from broker.handlers.admin import AdminHandlers
    from kraft.node.controller_apis import ControllerApis

    def served(specs: list[Any]) -> dict[int, tuple[int, int, str]]:
        return {s.api_key: (s.min_version, s.max_version, s.name) for s in specs}

    table = {api.api_key: (api.min_version, api.max_version, api.name) for api in FORWARDED}
    listener = served(ControllerApis(None, 1, {}).specs())  # type: ignore[arg-type]
    broker = served(
        AdminHandlers(
            StubRemote(),
            BrokerIdentity(1, "c", None, lambda: ("h", 1)),
            lambda: ClusterImage.EMPTY,
            {},
        ).specs()
    )
    internal = {api.api_key for api in FORWARDED if api.internal}
    assert {k: listener[k] for k in table} == table
    assert {k: broker[k] for k in table if k not in internal} == {
        k: v for k, v in table.items() if k not in internal
    }
    assert table[43] == (0, 2, "ElectLeaders") and table[19] == (2, 7, "CreateTopics")
    # the brokers' own AssignReplicasToDirs: the controller listener serves it, no broker does
    assert internal == {73} and 73 in listener and 73 not in broker


def create(*names: str) -> CreateTopicsRequest:
    return CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name=TopicName(n)) for n in names]
    )


def test_forwarded_handlers_pass_the_clients_version() -> None:
    seen: list[tuple[Request, int]] = []

    async def forward(request: Request, version: int) -> Response:
        seen.append((request, version))
        return CreateTopicsResponse()

    (spec,) = [h for h in forwarded_handlers(forward) if h.api_key == 19]
    header = RequestHeader(request_api_key=19, request_api_version=5, correlation_id=1)
    asyncio.run(spec.handle(RequestContext(header, Session.internal(), 0.0, 0.0), create("a")))  # type: ignore[arg-type]
    assert seen == [(create("a"), 5)]


def test_versions_to_forward() -> None:
    assert forwarded_api(create()).version_to_forward(5) == 5
    assert forwarded_api(create()).version_to_forward(9) == 7
    elect = forwarded_api(ElectLeadersRequest())
    assert [elect.version_to_forward(v) for v in (0, 1, 2)] == [2, 2, 2]


class StubApis:
    """What QuorumForwarder needs of ControllerApis: the rule's answer, None when standby."""

    def __init__(self, answer: Response | None) -> None:
        self.answer = answer

    async def run_forwarded(self, request: Request) -> Response | None:
        return self.answer


class StubRemote:
    def __init__(self) -> None:
        self.sent: list[tuple[Request, int]] = []

    async def forward(self, request: Request, version: int) -> Response:
        self.sent.append((request, version))
        return CreateTopicsResponse(
            topics=[CreateTopicsResponse.CreatableTopicResult(name=TopicName("remote"))]
        )


def test_a_controller_nodes_writes_run_here_when_active_else_at_the_active_one() -> None:
    local = CreateTopicsResponse()
    remote = StubRemote()
    as_forwarder: Forwarder = QuorumForwarder(StubApis(local), remote)  # type: ignore[arg-type]
    assert asyncio.run(as_forwarder.forward(create("a"), 7)) is local
    assert remote.sent == []

    standby = QuorumForwarder(StubApis(None), remote)  # type: ignore[arg-type]
    response = asyncio.run(standby.forward(create("a"), 7))
    assert isinstance(response, CreateTopicsResponse) and response.topics[0].name == "remote"
    assert remote.sent == [(create("a"), 7)]

    alone = QuorumForwarder(StubApis(None), None)  # type: ignore[arg-type]
    response = asyncio.run(alone.forward(create("a", "b"), 7))
    assert isinstance(response, CreateTopicsResponse)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("a", ErrorCode.NOT_CONTROLLER),
        ("b", ErrorCode.NOT_CONTROLLER),
    ]
