"""Group configs (KIP-848 GROUP resource) are authorized as Kafka 4 does: DESCRIBE_CONFIGS /
ALTER_CONFIGS on the group itself, GROUP_AUTHORIZATION_FAILED otherwise (the harness of
test_api_authorization.py: the real rules, the real describe handler)."""

from __future__ import annotations

from api_gate import GROUP_DENIED, IMAGE, OK, Echo, G, Op, _NoController, acl, run

from broker.handlers.admin import AdminHandlers
from broker.identity import BrokerIdentity
from kafka_protocol import messages as m
from metadata_log.acls import ResourceType
from metadata_log.authorizer import SUPPORTED_OPERATIONS

GROUP = 32


def test_describe_needs_describe_configs_on_the_group() -> None:
    node = BrokerIdentity(1, "cluster", None, lambda: ("127.0.0.1", 9092))
    handlers = AdminHandlers(_NoController(), node, lambda: IMAGE, {}).specs()  # type: ignore[arg-type]
    [describe] = [h for h in handlers if h.api_key == 32]
    R = m.DescribeConfigsRequest.DescribeConfigsResource
    req = m.DescribeConfigsRequest(
        resources=[
            R(resource_type=GROUP, resource_name=name, configuration_keys=None)
            for name in ("mine", "theirs")
        ]
    )
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS, as for topics
    response = run(describe, req, [acl(G, "mine", Op.ALTER_CONFIGS)], version=4)
    assert [(r.resource_name, r.error_code) for r in response.results] == [
        ("mine", OK),
        ("theirs", GROUP_DENIED),
    ]
    assert {c.name for c in response.results[0].configs} == {
        "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
    }
    assert not response.results[1].configs
    read_only = run(describe, req, [acl(G, "mine", Op.READ)], version=4)
    assert [r.error_code for r in read_only.results] == [GROUP_DENIED, GROUP_DENIED]


def test_alter_needs_alter_configs_on_the_group() -> None:
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
            resource_type=GROUP, resource_name=name
        )
        for name in ("mine", "theirs")
    ]
    response = run(
        alter.spec(),
        m.IncrementalAlterConfigsRequest(resources=resources),
        [acl(G, "mine", Op.ALTER_CONFIGS), acl(G, "theirs", Op.DESCRIBE_CONFIGS)],
        version=1,
    )
    assert {r.resource_name: r.error_code for r in response.responses} == {
        "mine": OK,
        "theirs": GROUP_DENIED,
    }
    assert [[r.resource_name for r in req.resources] for req in alter.seen] == [["mine"]]


def test_group_acls_may_grant_config_operations() -> None:
    assert {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS} <= SUPPORTED_OPERATIONS[ResourceType.GROUP]
