"""The authorization gate's test harness: ACLs for ``User:alice`` on a two-topic image, the
real StandardAuthorizer over them, and handlers that answer each item they are given with NONE
(:mod:`broker.security.api_authorization`'s unit tests)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from broker.deferred import Deferred
from broker.dispatcher import ApiHandler, RequestContext
from broker.security.admin_rules import BROKER_RULES
from broker.security.api_authorization import guard
from broker.security.authorization import (
    AuthorizerSettings,
    BrokerAuthorizer,
)
from broker.security.session import SecurityProtocol, Session, user_principal
from kafka_protocol import messages as m
from kafka_protocol._codec import Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import RequestHeader
from kafka_protocol.metadata import PartitionRecord, TopicRecord
from kafka_protocol.record_batch import SimpleRecord, build_batch
from kafka_protocol.types import BrokerId
from metadata_log.acls import (
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from metadata_log.delta import MetadataDelta, replay_records
from metadata_log.image import ClusterImage, acl_record

ALICE = user_principal("alice")
SUPER_USERS = frozenset({"User:admin"})
OK = ErrorCode.NONE
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
T, G, C, X = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
Op = AclOperation


def acl(rtype: ResourceType, name: str, op: AclOperation, *, deny: bool = False) -> AclEntry:
    return AclEntry(
        rtype,
        name,
        PatternType.LITERAL,
        ALICE,
        "*",
        op,
        AclPermissionType.DENY if deny else AclPermissionType.ALLOW,
    )


def _image(*topics: str) -> ClusterImage:
    records: list[Any] = []
    for name in topics:
        tid = uuid.uuid5(uuid.NAMESPACE_DNS, name)
        records.append(TopicRecord(name=name, topic_id=tid))
        records.append(
            PartitionRecord(
                partition_id=0,
                topic_id=tid,
                replicas=[BrokerId(1)],
                isr=[BrokerId(1)],
                leader=BrokerId(1),
                leader_epoch=0,
                partition_epoch=0,
            )
        )
    return MetadataDelta(ClusterImage.EMPTY).replay_all(records).apply()


IMAGE = _image("mine", "theirs")


def _ctx(api_key: int, version: int, principal: str = ALICE) -> RequestContext:
    session = Session(
        "SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, "127.0.0.1", "p", principal
    )
    header = RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=1)
    return RequestContext(header, session, 0.0, 0.0)


def _settle(result: Any) -> Any:
    if isinstance(result, Deferred):
        return result.result()
    if result is None or isinstance(result, Response):
        return result
    return asyncio.run(_await(result))


async def _await(awaitable: Any) -> Any:
    return await awaitable


class Echo:
    """A handler answering each item it is given with NONE; remembers what it was given."""

    def __init__(self, api_key: int, answer: Callable[[Any], Response]) -> None:
        self.api_key = api_key
        self.answer = answer
        self.seen: list[Any] = []

    def spec(self) -> ApiHandler:
        def handle(ctx: RequestContext, req: Any) -> Response:
            self.seen.append(req)
            return self.answer(req)

        return ApiHandler(self.api_key, 0, 20, handle, f"api{self.api_key}")


def run(
    handler: ApiHandler,
    req: Any,
    acls: Iterable[AclEntry],
    *,
    version: int = 7,
    rules: dict[int, Any] = BROKER_RULES,
    image: ClusterImage = IMAGE,
    auto_create: bool = False,
    principal: str = ALICE,
) -> Any:
    # the real StandardAuthorizer, over an image holding the ACLs as metadata records
    with_acls = replay_records(image, [acl_record(uuid.uuid4(), a) for a in acls])
    authorizer = BrokerAuthorizer(AuthorizerSettings(True, SUPER_USERS, False), lambda: with_acls)
    [guarded] = guard([handler], rules, authorizer, lambda: with_acls, auto_create)
    return _settle(guarded.handle(_ctx(handler.api_key, version, principal), req))


def _produce_echo() -> Echo:
    R = m.ProduceResponse
    return Echo(
        0,
        lambda req: R(
            responses=[
                R.TopicProduceResponse(
                    name=t.name,
                    partition_responses=[
                        R.PartitionProduceResponse(index=p.index) for p in t.partition_data
                    ],
                )
                for t in req.topic_data
            ]
        ),
    )


def _produce(
    *topics: str, txn: str | None = None, acks: int = -1, transactional: bool | None = None
) -> m.ProduceRequest:
    """A Produce of one partition per topic; its records a transactional batch when
    ``transactional`` (by default: when there is a transactional id), else none."""
    records = None
    if transactional if transactional is not None else txn is not None:
        batch = build_batch(
            [SimpleRecord(b"v")],
            producer_id=1,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        )
        records = memoryview(batch)
    return m.ProduceRequest(
        transactional_id=txn,
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            m.ProduceRequest.TopicProduceData(
                name=t,
                partition_data=[m.ProduceRequest.PartitionProduceData(index=0, records=records)],
            )
            for t in topics
        ],
    )


def _errors(response: Any, topics_attr: str, parts_attr: str, name: str = "name") -> dict[str, int]:
    return {
        getattr(t, name): p.error_code
        for t in getattr(response, topics_attr)
        for p in getattr(t, parts_attr)
    }


class _NoController:
    async def forward(self, request: Any, version: int) -> Any:
        raise AssertionError("no topic may be auto-created here")
