"""The KIP-848 group APIs check what Kafka checks: ConsumerGroupHeartbeat READ on the group,
ConsumerGroupDescribe DESCRIBE on each group (the others GROUP_AUTHORIZATION_FAILED, in the
asked order), with the authorized operations when asked."""

from __future__ import annotations

from api_gate import GROUP_DENIED, OK, Echo, G, Op, acl, run

from broker.security.authorization import AUTHORIZED_OPERATIONS_OMITTED, operations_bits
from kafka_protocol import messages as m


def test_consumer_group_heartbeat_needs_read_on_the_group() -> None:
    echo = Echo(68, lambda req: m.ConsumerGroupHeartbeatResponse(member_id="m", member_epoch=1))
    req = m.ConsumerGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=1)
    assert run(echo.spec(), req, [acl(G, "g", Op.DESCRIBE)], version=1).error_code == GROUP_DENIED
    assert run(echo.spec(), req, [acl(G, "g", Op.READ)], version=1).error_code == OK


def test_consumer_group_describe_needs_describe_on_each_group() -> None:
    R = m.ConsumerGroupDescribeResponse
    echo = Echo(
        69,
        lambda req: R(
            groups=[R.DescribedGroup(group_id=g, group_state="Stable") for g in req.group_ids]
        ),
    )
    acls = [acl(G, "g", Op.DESCRIBE), acl(G, "g", Op.READ)]
    req = m.ConsumerGroupDescribeRequest(group_ids=["h", "g"], include_authorized_operations=True)
    response = run(echo.spec(), req, acls, version=0)
    assert [(g.group_id, g.error_code) for g in response.groups] == [("h", GROUP_DENIED), ("g", OK)]
    assert response.groups[1].authorized_operations == operations_bits(
        frozenset({Op.DESCRIBE, Op.READ})
    )
    plain = m.ConsumerGroupDescribeRequest(group_ids=["g"])
    response = run(echo.spec(), plain, acls, version=0)
    assert response.groups[0].authorized_operations == AUTHORIZED_OPERATIONS_OMITTED
