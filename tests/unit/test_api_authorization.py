"""Every API checks the operation Kafka checks (broker/security/api_authorization.py).

Each case runs a request through the gate with ACLs for ``User:alice`` and answers it with the
broker's real handler where it needs no partition log (Metadata, DescribeConfigs) and otherwise
with a handler that answers every item it is *given* with NONE, so that what was refused (its
Kafka error) and what reached the handler are both visible.
"""

from __future__ import annotations

import uuid

import pytest
from api_gate import (
    ALICE,
    CLUSTER_DENIED,
    GROUP_DENIED,
    IMAGE,
    OK,
    SUPER_USERS,
    TOPIC_DENIED,
    TXN_DENIED,
    C,
    Echo,
    G,
    Op,
    T,
    X,
    _ctx,
    _errors,
    _NoController,
    _produce,
    _produce_echo,
    _settle,
    acl,
    run,
)

from broker.dispatcher import ApiHandler
from broker.handlers.metadata import AutoCreate, MetadataHandler
from broker.identity import BrokerIdentity
from broker.security.admin_rules import BROKER_RULES
from broker.security.api_authorization import guard
from broker.security.authorization import (
    AUTHORIZED_OPERATIONS_OMITTED,
    AuthorizerSettings,
    BrokerAuthorizer,
    operations_bits,
)
from broker.server import CloseConnection
from kafka_protocol import messages as m
from kafka_protocol.types import BrokerId
from metadata_log.acls import (
    CLUSTER_NAME,
    AclEntry,
    AclPermissionType,
    PatternType,
)


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


def test_only_transactional_records_need_the_transactional_id() -> None:
    """Kafka checks the id only for a request with transactional records, and refuses those
    without an id."""
    acls = [acl(T, "mine", Op.WRITE)]
    plain = _produce("mine", txn="tx", transactional=False)
    response = run(_produce_echo().spec(), plain, acls)
    assert _errors(response, "responses", "partition_responses") == {"mine": OK}
    anonymous = _produce("mine", transactional=True)
    response = run(_produce_echo().spec(), anonymous, [*acls, acl(X, "*", Op.WRITE)])
    assert _errors(response, "responses", "partition_responses") == {"mine": TXN_DENIED}


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


def test_fetch_by_topic_id_is_checked_on_the_topics_name() -> None:
    """Fetch v13+ names topics by id: READ is checked on the name the image gives it; an
    unknown id passes to the handler (UNKNOWN_TOPIC_ID there); from v15 a follower's id is in
    replica_state (KIP-903)."""
    ids = {name: IMAGE.topics.by_name[name].topic_id for name in ("mine", "theirs")}
    unknown = uuid.uuid4()

    def by_id(*topic_ids: uuid.UUID, replica_id: int = -1) -> m.FetchRequest:
        req = _fetch(*("" for _ in topic_ids))
        for t, topic_id in zip(req.topics, topic_ids, strict=True):
            t.topic_id = topic_id
        req.replica_state = m.FetchRequest.ReplicaState(replica_id=BrokerId(replica_id))
        return req

    def errors(response: m.FetchResponse) -> dict[uuid.UUID, int]:
        return {t.topic_id: p.error_code for t in response.responses for p in t.partitions}

    echo_ids = Echo(
        1,
        lambda req: m.FetchResponse(
            responses=[
                m.FetchResponse.FetchableTopicResponse(
                    topic_id=t.topic_id,
                    partitions=[m.FetchResponse.PartitionData(partition_index=0)],
                )
                for t in req.topics
            ]
        ),
    )
    acls = [acl(T, "mine", Op.READ)]
    for version in (13, 17):
        response = run(
            echo_ids.spec(), by_id(ids["mine"], ids["theirs"], unknown), acls, version=version
        )
        assert errors(response) == {ids["mine"]: OK, ids["theirs"]: TOPIC_DENIED, unknown: OK}
    follower = by_id(ids["mine"], replica_id=2)
    response = run(echo_ids.spec(), follower, acls, version=15)
    assert errors(response) == {ids["mine"]: TOPIC_DENIED}
    response = run(echo_ids.spec(), follower, [acl(C, CLUSTER_NAME, Op.CLUSTER_ACTION)], version=15)
    assert errors(response) == {ids["mine"]: OK}


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
