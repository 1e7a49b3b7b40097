"""Every API checks the operation Kafka checks (broker/security/api_authorization.py).

Each case runs a request through the gate with ACLs for ``User:alice`` and answers it with the
broker's real handler where it needs no partition log (Metadata, DescribeConfigs) and otherwise
with a handler that answers every item it is *given* with NONE, so that what was refused (its
Kafka error) and what reached the handler are both visible.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from broker.deferred import Deferred
from broker.dispatcher import ApiHandler, RequestContext
from broker.handlers.admin import AdminHandlers
from broker.handlers.metadata import AutoCreate, MetadataHandler
from broker.identity import BrokerIdentity
from broker.security.admin_rules import BROKER_RULES, CONTROLLER_RULES
from broker.security.api_authorization import guard
from broker.security.authorization import (
    AUTHORIZED_OPERATIONS_OMITTED,
    AuthorizerSettings,
    BrokerAuthorizer,
    operations_bits,
)
from broker.security.session import SecurityProtocol, Session, user_principal
from broker.server import CloseConnection
from kafka_protocol import messages as m
from kafka_protocol._codec import Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import RequestHeader
from kafka_protocol.metadata import PartitionRecord, TopicRecord
from kafka_protocol.types import BrokerId
from metadata_log.acls import (
    CLUSTER_NAME,
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


# --- Produce -------------------------------------------------------------------------------


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


def _produce(*topics: str, txn: str | None = None, acks: int = -1) -> m.ProduceRequest:
    return m.ProduceRequest(
        transactional_id=txn,
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            m.ProduceRequest.TopicProduceData(
                name=t, partition_data=[m.ProduceRequest.PartitionProduceData(index=0)]
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


def test_produce_needs_write_on_each_topic() -> None:
    echo = _produce_echo()
    response = run(echo.spec(), _produce("mine", "theirs"), [acl(T, "mine", Op.WRITE)])
    assert _errors(response, "responses", "partition_responses") == {
        "mine": OK,
        "theirs": TOPIC_DENIED,
    }
    assert [t.name for t in echo.seen[0].topic_data] == ["mine"]


def test_produce_refused_entirely_is_answered_without_the_handler() -> None:
    echo = _produce_echo()
    response = run(echo.spec(), _produce("theirs"), [acl(T, "mine", Op.WRITE)])
    assert _errors(response, "responses", "partition_responses") == {"theirs": TOPIC_DENIED}
    assert echo.seen == []


def test_deny_beats_allow_and_describe_is_not_write() -> None:
    acls = [
        acl(T, "mine", Op.WRITE),
        acl(T, "mine", Op.WRITE, deny=True),
        acl(T, "theirs", Op.DESCRIBE),
    ]
    response = run(_produce_echo().spec(), _produce("mine", "theirs"), acls)
    assert set(_errors(response, "responses", "partition_responses").values()) == {TOPIC_DENIED}


def test_transactional_produce_needs_write_on_the_transactional_id() -> None:
    acls = [acl(T, "mine", Op.WRITE)]
    response = run(_produce_echo().spec(), _produce("mine", txn="tx"), acls)
    assert _errors(response, "responses", "partition_responses") == {"mine": TXN_DENIED}
    response = run(
        _produce_echo().spec(), _produce("mine", txn="tx"), [*acls, acl(X, "tx", Op.WRITE)]
    )
    assert _errors(response, "responses", "partition_responses") == {"mine": OK}


def test_super_user_passes_everything() -> None:
    response = run(_produce_echo().spec(), _produce("mine", "theirs"), [], principal="User:admin")
    assert set(_errors(response, "responses", "partition_responses").values()) == {OK}


# --- Fetch, ListOffsets, OffsetForLeaderEpoch ------------------------------------------------


def _fetch_echo() -> Echo:
    R = m.FetchResponse
    return Echo(
        1,
        lambda req: R(
            responses=[
                R.FetchableTopicResponse(
                    topic=t.topic,
                    partitions=[R.PartitionData(partition_index=p.partition) for p in t.partitions],
                )
                for t in req.topics
            ]
        ),
    )


def _fetch(*topics: str, replica_id: int = -1) -> m.FetchRequest:
    return m.FetchRequest(
        replica_id=BrokerId(replica_id),
        max_wait_ms=500,
        min_bytes=1,
        topics=[
            m.FetchRequest.FetchTopic(
                topic=t, partitions=[m.FetchRequest.FetchPartition(partition=0)]
            )
            for t in topics
        ],
    )


def test_consumer_fetch_needs_read() -> None:
    acls = [acl(T, "mine", Op.READ), acl(T, "theirs", Op.WRITE)]
    response = run(_fetch_echo().spec(), _fetch("mine", "theirs"), acls, version=12)
    assert _errors(response, "responses", "partitions", "topic") == {
        "mine": OK,
        "theirs": TOPIC_DENIED,
    }


def test_follower_fetch_needs_cluster_action() -> None:
    acls = [acl(T, "mine", Op.READ)]
    response = run(_fetch_echo().spec(), _fetch("mine", replica_id=2), acls, version=12)
    assert _errors(response, "responses", "partitions", "topic") == {"mine": TOPIC_DENIED}
    acls = [acl(C, CLUSTER_NAME, Op.CLUSTER_ACTION)]
    response = run(_fetch_echo().spec(), _fetch("mine", replica_id=2), acls, version=12)
    assert _errors(response, "responses", "partitions", "topic") == {"mine": OK}


def test_list_offsets_needs_describe_which_read_implies() -> None:
    R = m.ListOffsetsResponse
    echo = Echo(
        2,
        lambda req: R(
            topics=[
                R.ListOffsetsTopicResponse(
                    name=t.name,
                    partitions=[
                        R.ListOffsetsPartitionResponse(partition_index=0) for _ in t.partitions
                    ],
                )
                for t in req.topics
            ]
        ),
    )
    req = m.ListOffsetsRequest(
        replica_id=BrokerId(-1),
        topics=[
            m.ListOffsetsRequest.ListOffsetsTopic(
                name=n, partitions=[m.ListOffsetsRequest.ListOffsetsPartition(partition_index=0)]
            )
            for n in ("mine", "theirs")
        ],
    )
    response = run(echo.spec(), req, [acl(T, "mine", Op.READ)])
    assert _errors(response, "topics", "partitions") == {"mine": OK, "theirs": TOPIC_DENIED}


def test_offset_for_leader_epoch_describe_or_cluster_action() -> None:
    R = m.OffsetForLeaderEpochResponse
    echo = Echo(
        23,
        lambda req: R(
            topics=[
                R.OffsetForLeaderTopicResult(
                    topic=t.topic, partitions=[R.EpochEndOffset(partition=0)]
                )
                for t in req.topics
            ]
        ),
    )
    req = m.OffsetForLeaderEpochRequest(
        replica_id=BrokerId(-1),
        topics=[
            m.OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
                topic=n,
                partitions=[m.OffsetForLeaderEpochRequest.OffsetForLeaderPartition(partition=0)],
            )
            for n in ("mine", "theirs")
        ],
    )
    response = run(echo.spec(), req, [acl(T, "mine", Op.DESCRIBE)], version=4)
    assert _errors(response, "topics", "partitions", "topic") == {
        "mine": OK,
        "theirs": TOPIC_DENIED,
    }
    response = run(echo.spec(), req, [acl(C, CLUSTER_NAME, Op.CLUSTER_ACTION)], version=4)
    assert _errors(response, "topics", "partitions", "topic") == {"mine": OK, "theirs": OK}


# --- Metadata (the broker's real handler) ------------------------------------------------------


class _NoController:
    async def forward(self, request: Any, version: int) -> Any:
        raise AssertionError("no topic may be auto-created here")


def _metadata_handler(auto_create: bool = False) -> ApiHandler:
    node = BrokerIdentity(1, "cluster", None, lambda: ("127.0.0.1", 9092))
    return MetadataHandler(
        node,
        lambda: IMAGE,
        _NoController(),
        AutoCreate(auto_create, 1, 1),  # type: ignore[arg-type]
    ).spec()


def _metadata(names: list[str] | None, **flags: bool) -> m.MetadataRequest:
    topics = (
        None if names is None else [m.MetadataRequest.MetadataRequestTopic(name=n) for n in names]
    )
    return m.MetadataRequest(topics=topics, **flags)


def test_metadata_listing_omits_topics_without_describe() -> None:
    response = run(_metadata_handler(), _metadata(None), [acl(T, "mine", Op.DESCRIBE)], version=12)
    assert [(t.name, t.error_code) for t in response.topics] == [("mine", OK)]
    assert all(
        t.topic_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED for t in response.topics
    )


def test_metadata_named_topic_without_describe_is_refused_without_revealing_it() -> None:
    acls = [acl(T, "mine", Op.DESCRIBE)]
    response = run(_metadata_handler(), _metadata(["mine", "theirs", "nosuch"]), acls, version=12)
    assert {t.name: t.error_code for t in response.topics} == {
        "mine": OK,
        "theirs": TOPIC_DENIED,
        "nosuch": TOPIC_DENIED,  # whether it exists is not told
    }
    refused = next(t for t in response.topics if t.name == "theirs")
    assert refused.partitions == [] and refused.topic_id == uuid.UUID(int=0)


def test_metadata_auto_creation_needs_create() -> None:
    acls = [acl(T, "new", Op.DESCRIBE)]
    response = run(
        _metadata_handler(auto_create=True),
        _metadata(["new"], allow_auto_topic_creation=True),
        acls,
        version=12,
        auto_create=True,
    )
    assert [(t.name, t.error_code) for t in response.topics] == [("new", TOPIC_DENIED)]


def test_metadata_reports_authorized_operations_when_asked() -> None:
    acls = [acl(T, "mine", Op.READ), acl(T, "mine", Op.WRITE), acl(C, CLUSTER_NAME, Op.DESCRIBE)]
    req = _metadata(
        ["mine"],
        include_topic_authorized_operations=True,
        include_cluster_authorized_operations=True,
    )
    response = run(_metadata_handler(), req, acls, version=10)
    [topic] = response.topics
    assert topic.topic_authorized_operations == operations_bits(
        frozenset({Op.READ, Op.WRITE, Op.DESCRIBE})
    )
    assert response.cluster_authorized_operations == operations_bits(frozenset({Op.DESCRIBE}))
    response = run(_metadata_handler(), req, [acl(T, "mine", Op.READ)], version=10)
    assert response.cluster_authorized_operations == 0  # asked, but no DESCRIBE on the cluster


# --- InitProducerId, FindCoordinator, groups --------------------------------------------------


def test_init_producer_id() -> None:
    echo = Echo(22, lambda req: m.InitProducerIdResponse(producer_id=7))
    idempotent = m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1)
    assert run(echo.spec(), idempotent, [acl(T, "mine", Op.READ)]).error_code == CLUSTER_DENIED
    assert run(echo.spec(), idempotent, [acl(T, "mine", Op.WRITE)]).error_code == OK
    # KIP-679: WRITE on some topic, even one that does not exist yet (a prefixed ACL)
    future = AclEntry(
        T, "later-", PatternType.PREFIXED, ALICE, "*", Op.WRITE, AclPermissionType.ALLOW
    )
    assert run(echo.spec(), idempotent, [future]).error_code == OK
    assert run(echo.spec(), idempotent, [], principal="User:admin").error_code == OK
    assert (
        run(echo.spec(), idempotent, [acl(C, CLUSTER_NAME, Op.IDEMPOTENT_WRITE)]).error_code == OK
    )
    txn = m.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=1)
    assert (
        run(echo.spec(), txn, [acl(C, CLUSTER_NAME, Op.IDEMPOTENT_WRITE)]).error_code == TXN_DENIED
    )
    assert run(echo.spec(), txn, [acl(X, "tx", Op.WRITE)]).error_code == OK


def test_find_coordinator_v3_and_v4() -> None:
    echo = Echo(
        10,
        lambda req: m.FindCoordinatorResponse(
            coordinators=[
                m.FindCoordinatorResponse.Coordinator(key=k) for k in req.coordinator_keys
            ]
        ),
    )
    acls = [acl(G, "g1", Op.READ)]
    v3 = run(echo.spec(), m.FindCoordinatorRequest(key="g2", key_type=0), acls, version=3)
    assert (v3.error_code, v3.error_message) == (GROUP_DENIED, "Group authorization failed.")
    v4 = run(
        echo.spec(),
        m.FindCoordinatorRequest(key_type=0, coordinator_keys=["g1", "g2"]),
        acls,
        version=4,
    )
    assert {c.key: c.error_code for c in v4.coordinators} == {"g1": OK, "g2": GROUP_DENIED}
    txn = run(echo.spec(), m.FindCoordinatorRequest(key="t", key_type=1), acls, version=3)
    assert txn.error_code == TXN_DENIED


@pytest.mark.parametrize(
    ("api_key", "request_type", "response_type"),
    [
        (11, m.JoinGroupRequest, m.JoinGroupResponse),
        (14, m.SyncGroupRequest, m.SyncGroupResponse),
        (12, m.HeartbeatRequest, m.HeartbeatResponse),
        (13, m.LeaveGroupRequest, m.LeaveGroupResponse),
    ],
)
def test_membership_needs_read_on_the_group(
    api_key: int, request_type: Any, response_type: Any
) -> None:
    echo = Echo(api_key, lambda req: response_type())
    assert run(echo.spec(), request_type(group_id="g"), [acl(G, "g", Op.READ)]).error_code == OK
    assert (
        run(echo.spec(), request_type(group_id="g"), [acl(G, "g", Op.DESCRIBE)]).error_code
        == GROUP_DENIED
    )
    assert len(echo.seen) == 1


def _commit_echo() -> Echo:
    R = m.OffsetCommitResponse
    return Echo(
        8,
        lambda req: R(
            topics=[
                R.OffsetCommitResponseTopic(
                    name=t.name, partitions=[R.OffsetCommitResponsePartition(partition_index=0)]
                )
                for t in req.topics
            ]
        ),
    )


def test_offset_commit_needs_read_on_group_and_topic() -> None:
    req = m.OffsetCommitRequest(
        group_id="g",
        topics=[
            m.OffsetCommitRequest.OffsetCommitRequestTopic(
                name=n,
                partitions=[m.OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0)],
            )
            for n in ("mine", "theirs")
        ],
    )
    response = run(_commit_echo().spec(), req, [acl(T, "mine", Op.READ)])
    assert set(_errors(response, "topics", "partitions").values()) == {GROUP_DENIED}
    response = run(_commit_echo().spec(), req, [acl(T, "mine", Op.READ), acl(G, "g", Op.READ)])
    assert _errors(response, "topics", "partitions") == {"mine": OK, "theirs": TOPIC_DENIED}


def test_offset_fetch_named_topics_refused_and_listing_filtered() -> None:
    R = m.OffsetFetchResponse
    committed = ("mine", "theirs")
    echo = Echo(
        9,
        lambda req: R(
            topics=[
                R.OffsetFetchResponseTopic(
                    name=n, partitions=[R.OffsetFetchResponsePartition(partition_index=0)]
                )
                for n in ([t.name for t in req.topics] if req.topics is not None else committed)
            ]
        ),
    )
    acls = [acl(G, "g", Op.DESCRIBE), acl(T, "mine", Op.DESCRIBE)]
    listing = run(echo.spec(), m.OffsetFetchRequest(group_id="g", topics=None), acls)
    assert [t.name for t in listing.topics] == ["mine"]
    named = run(
        echo.spec(),
        m.OffsetFetchRequest(
            group_id="g",
            topics=[
                m.OffsetFetchRequest.OffsetFetchRequestTopic(name=n, partition_indexes=[0])
                for n in committed
            ],
        ),
        acls,
    )
    assert _errors(named, "topics", "partitions") == {"mine": OK, "theirs": TOPIC_DENIED}
    denied = run(echo.spec(), m.OffsetFetchRequest(group_id="h", topics=None), acls)
    assert denied.error_code == GROUP_DENIED


def test_offset_fetch_v8_checks_each_group() -> None:
    R = m.OffsetFetchResponse
    echo = Echo(
        9,
        lambda req: R(groups=[R.OffsetFetchResponseGroup(group_id=g.group_id) for g in req.groups]),
    )
    req = m.OffsetFetchRequest(
        groups=[m.OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g) for g in ("g", "h")]
    )
    response = run(echo.spec(), req, [acl(G, "g", Op.DESCRIBE)], version=8)
    assert {g.group_id: g.error_code for g in response.groups} == {"g": OK, "h": GROUP_DENIED}


def test_list_groups_filters_without_cluster_describe() -> None:
    R = m.ListGroupsResponse
    echo = Echo(16, lambda req: R(groups=[R.ListedGroup(group_id=g) for g in ("g", "h")]))
    response = run(echo.spec(), m.ListGroupsRequest(), [acl(G, "g", Op.DESCRIBE)])
    assert [g.group_id for g in response.groups] == ["g"]
    response = run(echo.spec(), m.ListGroupsRequest(), [acl(C, CLUSTER_NAME, Op.DESCRIBE)])
    assert [g.group_id for g in response.groups] == ["g", "h"]


def test_describe_and_delete_groups() -> None:
    R = m.DescribeGroupsResponse
    echo = Echo(
        15,
        lambda req: R(
            groups=[R.DescribedGroup(group_id=g, group_state="Empty") for g in req.groups]
        ),
    )
    acls = [acl(G, "g", Op.DESCRIBE), acl(G, "g", Op.DELETE)]
    req = m.DescribeGroupsRequest(groups=["g", "h"], include_authorized_operations=True)
    response = run(echo.spec(), req, acls, version=5)
    assert [(g.group_id, g.error_code) for g in response.groups] == [("g", OK), ("h", GROUP_DENIED)]
    assert response.groups[0].authorized_operations == operations_bits(
        frozenset({Op.DESCRIBE, Op.DELETE})
    )
    D = m.DeleteGroupsResponse
    deleter = Echo(
        42, lambda req: D(results=[D.DeletableGroupResult(group_id=g) for g in req.groups_names])
    )
    response = run(
        deleter.spec(),
        m.DeleteGroupsRequest(groups_names=["g", "h"]),
        [acl(G, "g", Op.DESCRIBE), acl(G, "h", Op.DELETE)],
    )
    assert {r.group_id: r.error_code for r in response.results} == {"g": GROUP_DENIED, "h": OK}


# --- admin ----------------------------------------------------------------------------------


def test_create_topics_cluster_or_topic_create() -> None:
    R = m.CreateTopicsResponse
    echo = Echo(
        19,
        lambda req: R(
            topics=[
                R.CreatableTopicResult(name=t.name, configs=[R.CreatableTopicConfigs(name="x")])
                for t in req.topics
            ]
        ),
    )
    req = m.CreateTopicsRequest(
        topics=[m.CreateTopicsRequest.CreatableTopic(name=n) for n in ("a", "b")]
    )
    response = run(echo.spec(), req, [acl(T, "a", Op.CREATE)])
    by_name = {t.name: t for t in response.topics}
    assert (
        by_name["b"].error_code == TOPIC_DENIED
        and by_name["b"].error_message == "Authorization failed."
    )
    assert by_name["a"].error_code == OK and by_name["a"].topic_config_error_code == TOPIC_DENIED
    response = run(
        echo.spec(), req, [acl(C, CLUSTER_NAME, Op.CREATE), acl(T, "a", Op.DESCRIBE_CONFIGS)]
    )
    by_name = {t.name: t for t in response.topics}
    assert by_name["a"].topic_config_error_code == OK and by_name["a"].configs
    assert by_name["b"].error_code == OK


def test_delete_topics_by_name_and_by_id() -> None:
    R = m.DeleteTopicsResponse
    echo = Echo(
        20,
        lambda req: R(
            responses=[R.DeletableTopicResult(name=t.name, topic_id=t.topic_id) for t in req.topics]
        ),
    )
    mine_id = IMAGE.topics.get("mine").topic_id  # type: ignore[union-attr]
    theirs_id = IMAGE.topics.get("theirs").topic_id  # type: ignore[union-attr]
    req = m.DeleteTopicsRequest(
        topics=[
            m.DeleteTopicsRequest.DeleteTopicState(topic_id=mine_id),
            m.DeleteTopicsRequest.DeleteTopicState(topic_id=theirs_id),
        ]
    )
    response = run(
        echo.spec(), req, [acl(T, "mine", Op.DELETE), acl(T, "theirs", Op.DESCRIBE)], version=6
    )
    assert {r.topic_id: (r.name, r.error_code) for r in response.responses} == {
        mine_id: (None, OK),
        theirs_id: ("theirs", TOPIC_DENIED),
    }
    response = run(echo.spec(), req, [acl(T, "mine", Op.DELETE)], version=6)
    assert {r.topic_id: (r.name, r.error_code) for r in response.responses}[theirs_id] == (
        None,
        TOPIC_DENIED,
    )
    old = Echo(
        20, lambda req: R(responses=[R.DeletableTopicResult(name=n) for n in req.topic_names])
    )
    response = run(
        old.spec(),
        m.DeleteTopicsRequest(topic_names=["mine", "theirs"]),
        [acl(T, "mine", Op.DELETE)],
        version=5,
    )
    assert {r.name: r.error_code for r in response.responses} == {
        "mine": OK,
        "theirs": TOPIC_DENIED,
    }


def test_create_partitions_and_alter_configs() -> None:
    P = m.CreatePartitionsResponse
    echo = Echo(
        37, lambda req: P(results=[P.CreatePartitionsTopicResult(name=t.name) for t in req.topics])
    )
    req = m.CreatePartitionsRequest(
        topics=[
            m.CreatePartitionsRequest.CreatePartitionsTopic(name=n, count=2)
            for n in ("mine", "theirs")
        ]
    )
    response = run(echo.spec(), req, [acl(T, "mine", Op.ALTER)], version=3)
    assert {r.name: r.error_code for r in response.results} == {"mine": OK, "theirs": TOPIC_DENIED}
    A = m.IncrementalAlterConfigsResponse
    alter = Echo(
        44,
        lambda req: A(
            responses=[
                A.AlterConfigsResourceResponse(
                    resource_type=r.resource_type, resource_name=r.resource_name
                )
                for r in req.resources
            ]
        ),
    )
    resources = [
        m.IncrementalAlterConfigsRequest.AlterConfigsResource(
            resource_type=2, resource_name="mine"
        ),
        m.IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=4, resource_name="1"),
    ]
    response = run(
        alter.spec(),
        m.IncrementalAlterConfigsRequest(resources=resources),
        [acl(T, "mine", Op.ALTER_CONFIGS)],
        version=1,
    )
    assert {r.resource_name: r.error_code for r in response.responses} == {
        "mine": OK,
        "1": CLUSTER_DENIED,
    }


def test_describe_configs_with_the_real_handler() -> None:
    node = BrokerIdentity(1, "cluster", None, lambda: ("127.0.0.1", 9092))
    handlers = AdminHandlers(_NoController(), node, lambda: IMAGE, {}).specs()  # type: ignore[arg-type]
    [describe] = [h for h in handlers if h.api_key == 32]
    R = m.DescribeConfigsRequest.DescribeConfigsResource
    req = m.DescribeConfigsRequest(
        resources=[
            R(resource_type=2, resource_name="mine", configuration_keys=None),
            R(resource_type=2, resource_name="theirs", configuration_keys=None),
            R(resource_type=4, resource_name="1", configuration_keys=None),
        ]
    )
    response = run(describe, req, [acl(T, "mine", Op.ALTER_CONFIGS)], version=4)
    assert [(r.resource_name, r.error_code) for r in response.results] == [
        ("mine", OK),
        ("theirs", TOPIC_DENIED),
        ("1", CLUSTER_DENIED),
    ]
    assert response.results[0].configs and not response.results[1].configs
    assert response.results[1].error_message == "Topic authorization failed."


def test_elect_leaders_and_describe_cluster() -> None:
    echo = Echo(43, lambda req: m.ElectLeadersResponse())
    req = m.ElectLeadersRequest(
        topic_partitions=[m.ElectLeadersRequest.TopicPartitions(topic="mine", partitions=[0])]
    )
    response = run(echo.spec(), req, [acl(T, "mine", Op.ALTER)], version=2)
    assert response.error_code == CLUSTER_DENIED
    assert response.replica_election_results[0].partition_result[0].error_code == CLUSTER_DENIED
    assert run(echo.spec(), req, [acl(C, CLUSTER_NAME, Op.ALTER)], version=2).error_code == OK
    cluster = Echo(60, lambda req: m.DescribeClusterResponse())
    asked = m.DescribeClusterRequest(include_cluster_authorized_operations=True)
    assert run(cluster.spec(), asked, []).cluster_authorized_operations == 0
    described = run(
        cluster.spec(), asked, [acl(C, CLUSTER_NAME, Op.DESCRIBE), acl(C, CLUSTER_NAME, Op.ALTER)]
    )
    assert described.cluster_authorized_operations == operations_bits(
        frozenset({Op.DESCRIBE, Op.ALTER})
    )


# --- the controller listener ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "request_type", "response_type", "operation"),
    [
        (62, m.BrokerRegistrationRequest, m.BrokerRegistrationResponse, Op.CLUSTER_ACTION),
        (63, m.BrokerHeartbeatRequest, m.BrokerHeartbeatResponse, Op.CLUSTER_ACTION),
        (56, m.AlterPartitionRequest, m.AlterPartitionResponse, Op.CLUSTER_ACTION),
        (59, m.FetchSnapshotRequest, m.FetchSnapshotResponse, Op.CLUSTER_ACTION),
        (67, m.AllocateProducerIdsRequest, m.AllocateProducerIdsResponse, Op.CLUSTER_ACTION),
        (1, m.FetchRequest, m.FetchResponse, Op.CLUSTER_ACTION),
        (55, m.DescribeQuorumRequest, m.DescribeQuorumResponse, Op.DESCRIBE),
    ],
)
def test_controller_apis_need_a_cluster_operation(
    api_key: int, request_type: Any, response_type: Any, operation: AclOperation
) -> None:
    echo = Echo(api_key, lambda req: response_type())
    allowed = run(
        echo.spec(), request_type(), [acl(C, CLUSTER_NAME, operation)], rules=CONTROLLER_RULES
    )
    assert allowed.error_code == OK
    refused = run(
        echo.spec(), request_type(), [acl(C, CLUSTER_NAME, Op.CREATE)], rules=CONTROLLER_RULES
    )
    assert refused.error_code == CLUSTER_DENIED and len(echo.seen) == 1


def test_controller_trusts_forwarding_brokers_and_checks_anyone_else() -> None:
    R = m.DeleteTopicsResponse
    echo = Echo(
        20, lambda req: R(responses=[R.DeletableTopicResult(name=n) for n in req.topic_names])
    )
    req = m.DeleteTopicsRequest(topic_names=["mine"])
    broker = run(
        echo.spec(),
        req,
        [acl(C, CLUSTER_NAME, Op.CLUSTER_ACTION)],
        version=5,
        rules=CONTROLLER_RULES,
    )
    assert broker.responses[0].error_code == OK
    client = run(echo.spec(), req, [acl(T, "mine", Op.DESCRIBE)], version=5, rules=CONTROLLER_RULES)
    assert client.responses[0].error_code == TOPIC_DENIED


def test_without_an_authorizer_the_gate_does_nothing() -> None:
    echo = _produce_echo()
    disabled = BrokerAuthorizer(AuthorizerSettings(False, SUPER_USERS, False), lambda: IMAGE)
    [guarded] = guard([echo.spec()], BROKER_RULES, disabled, lambda: IMAGE)
    response = _settle(guarded.handle(_ctx(0, 7), _produce("mine", "theirs")))
    assert set(_errors(response, "responses", "partition_responses").values()) == {OK}
    assert len(echo.seen[0].topic_data) == 2


def test_prefixed_acls_and_the_wildcard_principal() -> None:
    prefixed = AclEntry(
        T, "mi", PatternType.PREFIXED, "User:*", "*", Op.WRITE, AclPermissionType.ALLOW
    )
    response = run(_produce_echo().spec(), _produce("mine", "theirs"), [prefixed])
    assert _errors(response, "responses", "partition_responses") == {
        "mine": OK,
        "theirs": TOPIC_DENIED,
    }


def test_metadata_by_topic_id_refused_with_its_id_and_no_name() -> None:
    theirs = IMAGE.topics.get("theirs")
    mine = IMAGE.topics.get("mine")
    assert theirs is not None and mine is not None
    req = m.MetadataRequest(
        topics=[
            m.MetadataRequest.MetadataRequestTopic(name=None, topic_id=mine.topic_id),
            m.MetadataRequest.MetadataRequestTopic(name=None, topic_id=theirs.topic_id),
        ]
    )
    response = run(_metadata_handler(), req, [acl(T, "mine", Op.DESCRIBE)], version=12)
    assert {(t.name, t.topic_id, t.error_code) for t in response.topics} == {
        ("mine", mine.topic_id, OK),
        (None, theirs.topic_id, TOPIC_DENIED),
    }


def test_acks_0_produce_with_refused_topics_closes_after_appending_the_rest() -> None:
    echo = _produce_echo()
    echo.answer = lambda req: None  # type: ignore[assignment,return-value]  # acks=0: no answer
    with pytest.raises(CloseConnection):
        run(echo.spec(), _produce("mine", "theirs", acks=0), [acl(T, "mine", Op.WRITE)])
    assert [t.name for t in echo.seen[0].topic_data] == ["mine"], "the allowed one appended"
    assert run(echo.spec(), _produce("mine", acks=0), [acl(T, "mine", Op.WRITE)]) is None
