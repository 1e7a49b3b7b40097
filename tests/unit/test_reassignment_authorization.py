"""AlterPartitionReassignments needs ALTER on the cluster and ListPartitionReassignments
DESCRIBE on the cluster (Kafka's ``authorizeClusterOperation``), on brokers and on the
controller listener alike."""

from __future__ import annotations

from typing import Any

import pytest
from api_gate import CLUSTER_DENIED, OK, C, Echo, Op, T, acl, run

from broker.security.admin_rules import BROKER_RULES, CONTROLLER_RULES
from broker.security.api_authorization import Rule
from kafka_protocol import messages as m
from metadata_log.acls import CLUSTER_NAME

Alter = m.AlterPartitionReassignmentsRequest


def _alter() -> Alter:
    return Alter(
        topics=[
            Alter.ReassignableTopic(
                name="mine", partitions=[Alter.ReassignablePartition(partition_index=0)]
            )
        ]
    )


@pytest.mark.parametrize("rules", [BROKER_RULES, CONTROLLER_RULES])
@pytest.mark.parametrize(
    ("api_key", "request_factory", "response_type", "operation"),
    [
        (45, _alter, m.AlterPartitionReassignmentsResponse, Op.ALTER),
        (
            46,
            m.ListPartitionReassignmentsRequest,
            m.ListPartitionReassignmentsResponse,
            Op.DESCRIBE,
        ),
    ],
)
def test_reassignments_need_a_cluster_operation(
    rules: dict[int, Rule],
    api_key: int,
    request_factory: Any,
    response_type: Any,
    operation: Op,
) -> None:
    echo = Echo(api_key, lambda req: response_type())
    allowed = run(echo.spec(), request_factory(), [acl(C, CLUSTER_NAME, operation)], rules=rules)
    assert allowed.error_code == OK
    # ALTER on the topic itself is not enough, nor is the other cluster operation.
    other = Op.DESCRIBE if operation == Op.ALTER else Op.CREATE  # ALTER implies DESCRIBE
    refused = run(
        echo.spec(),
        request_factory(),
        [acl(T, "mine", Op.ALTER), acl(C, CLUSTER_NAME, other)],
        rules=rules,
    )
    assert refused.error_code == CLUSTER_DENIED and refused.error_message
    assert len(echo.seen) == 1
