"""Every group, admin and controller-listener API checks what Kafka checks (see
test_api_authorization.py for the harness's idea)."""

from __future__ import annotations

from typing import Any

import pytest
from api_gate import (
    CLUSTER_DENIED,
    GROUP_DENIED,
    IMAGE,
    OK,
    TOPIC_DENIED,
    C,
    Echo,
    G,
    Op,
    T,
    _errors,
    _NoController,
    acl,
    run,
)

from broker.handlers.admin import AdminHandlers
from broker.identity import BrokerIdentity
from broker.security.admin_rules import CONTROLLER_RULES
from broker.security.authorization import (
    operations_bits,
)
from kafka_protocol import messages as m
from metadata_log.acls import (
    CLUSTER_NAME,
    AclOperation,
)


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
