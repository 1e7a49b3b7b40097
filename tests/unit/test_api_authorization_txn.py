"""The transaction APIs check what Kafka's KafkaApis checks (broker/security/txn_rules.py).

As in test_api_authorization.py: the real StandardAuthorizer over ACLs for ``User:alice``, and
handlers that answer every item they are given with NONE, so that both the refusals (their Kafka
error) and what reached the handler are visible.
"""

from __future__ import annotations

from typing import Any

from api_gate import (
    CLUSTER_DENIED,
    GROUP_DENIED,
    OK,
    TOPIC_DENIED,
    TXN_DENIED,
    C,
    Echo,
    G,
    Op,
    T,
    X,
    acl,
    run,
)

from kafka_protocol import messages as m
from kafka_protocol.errors import ErrorCode
from kafka_protocol.types import ProducerId

NOT_ATTEMPTED = ErrorCode.OPERATION_NOT_ATTEMPTED

# --- AddPartitionsToTxn ------------------------------------------------------------------------


def _add_partitions_echo() -> Echo:
    R = m.AddPartitionsToTxnResponse
    return Echo(
        24,
        lambda req: R(
            results_by_topic_v3_and_below=[
                R.AddPartitionsToTxnTopicResult(
                    name=t.name,
                    results_by_partition=[
                        R.AddPartitionsToTxnPartitionResult(partition_index=p) for p in t.partitions
                    ],
                )
                for t in req.v3_and_below_topics
            ]
        ),
    )


def _add_partitions(*topics: tuple[str, int], txn: str = "tx") -> m.AddPartitionsToTxnRequest:
    return m.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn,
        v3_and_below_producer_id=ProducerId(1),
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[
            m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=[p])
            for t, p in topics
        ],
    )


def _partition_errors(response: m.AddPartitionsToTxnResponse) -> dict[tuple[str, int], int]:
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def test_add_partitions_needs_write_on_the_transactional_id() -> None:
    echo = _add_partitions_echo()
    request = _add_partitions(("mine", 0), ("theirs", 0))
    response = run(echo.spec(), request, [acl(T, "*", Op.WRITE)], version=3)
    assert set(_partition_errors(response).values()) == {TXN_DENIED}
    assert echo.seen == []


def test_add_partitions_refused_topic_fails_the_whole_request() -> None:
    echo = _add_partitions_echo()
    acls = [acl(X, "tx", Op.WRITE), acl(T, "mine", Op.WRITE)]
    request = _add_partitions(("mine", 0), ("theirs", 0), ("mine", 7))
    response = run(echo.spec(), request, acls, version=3)
    assert _partition_errors(response) == {
        ("mine", 0): NOT_ATTEMPTED,
        ("theirs", 0): TOPIC_DENIED,
        ("mine", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert echo.seen == [], "nothing is added to the transaction"


def test_add_partitions_allowed_reaches_the_coordinator() -> None:
    echo = _add_partitions_echo()
    acls = [acl(X, "tx", Op.WRITE), acl(T, "mine", Op.WRITE)]
    response = run(echo.spec(), _add_partitions(("mine", 0)), acls, version=2)
    assert _partition_errors(response) == {("mine", 0): OK}
    assert len(echo.seen) == 1


def test_add_partitions_never_authorizes_internal_topics() -> None:
    echo = _add_partitions_echo()
    acls = [acl(X, "tx", Op.WRITE), acl(T, "*", Op.WRITE)]
    request = _add_partitions(("mine", 0), ("__consumer_offsets", 0))
    response = run(echo.spec(), request, acls, version=3)
    assert _partition_errors(response) == {
        ("mine", 0): NOT_ATTEMPTED,
        ("__consumer_offsets", 0): TOPIC_DENIED,
    }


def test_add_partitions_v4_is_for_brokers_with_cluster_action() -> None:
    R = m.AddPartitionsToTxnResponse
    echo = Echo(24, lambda req: R())
    batched = m.AddPartitionsToTxnRequest(
        transactions=[
            m.AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                transactional_id="tx",
                producer_id=ProducerId(1),
                producer_epoch=0,
                verify_only=True,
                topics=[m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="x")],
            )
        ]
    )
    # WRITE on the id and the topics is what a client has; v4 needs the broker's right
    acls = [acl(X, "tx", Op.WRITE), acl(T, "*", Op.WRITE)]
    response = run(echo.spec(), batched, acls, version=4)
    assert response.error_code == CLUSTER_DENIED and echo.seen == []
    response = run(echo.spec(), batched, [acl(C, "kafka-cluster", Op.CLUSTER_ACTION)], version=4)
    assert response.error_code == OK and len(echo.seen) == 1


# --- AddOffsetsToTxn, EndTxn -------------------------------------------------------------------


def test_add_offsets_needs_write_on_the_id_then_read_on_the_group() -> None:
    echo = Echo(25, lambda req: m.AddOffsetsToTxnResponse())
    request = m.AddOffsetsToTxnRequest(
        transactional_id="tx", producer_id=ProducerId(1), producer_epoch=0, group_id="g"
    )
    assert run(echo.spec(), request, [acl(G, "g", Op.READ)]).error_code == TXN_DENIED
    assert run(echo.spec(), request, [acl(X, "tx", Op.WRITE)]).error_code == GROUP_DENIED
    assert echo.seen == []
    both = [acl(X, "tx", Op.WRITE), acl(G, "g", Op.READ)]
    assert run(echo.spec(), request, both).error_code == OK
    assert len(echo.seen) == 1


def test_end_txn_needs_write_on_the_id_and_describe_is_not_enough() -> None:
    echo = Echo(26, lambda req: m.EndTxnResponse())
    request = m.EndTxnRequest(
        transactional_id="tx", producer_id=ProducerId(1), producer_epoch=0, committed=True
    )
    assert run(echo.spec(), request, [acl(X, "tx", Op.DESCRIBE)]).error_code == TXN_DENIED
    assert run(echo.spec(), request, [acl(X, "tx", Op.WRITE)]).error_code == OK


# --- WriteTxnMarkers ---------------------------------------------------------------------------


def _markers() -> m.WriteTxnMarkersRequest:
    Q = m.WriteTxnMarkersRequest
    return Q(
        markers=[
            Q.WritableTxnMarker(
                producer_id=ProducerId(5),
                producer_epoch=1,
                transaction_result=True,
                topics=[Q.WritableTxnMarkerTopic(name="mine", partition_indexes=[0, 1])],
                coordinator_epoch=0,
            )
        ]
    )


def test_write_txn_markers_need_cluster_action_or_alter() -> None:
    echo = Echo(27, lambda req: m.WriteTxnMarkersResponse())
    response = run(echo.spec(), _markers(), [acl(T, "*", Op.ALL)], version=1)
    errors = [p.error_code for r in response.markers for t in r.topics for p in t.partitions]
    assert errors == [CLUSTER_DENIED, CLUSTER_DENIED] and echo.seen == []
    assert response.markers[0].producer_id == 5
    for op in (Op.CLUSTER_ACTION, Op.ALTER):
        run(echo.spec(), _markers(), [acl(C, "kafka-cluster", op)], version=1)
    assert len(echo.seen) == 2


# --- TxnOffsetCommit ---------------------------------------------------------------------------


def _txn_commit_echo() -> Echo:
    R = m.TxnOffsetCommitResponse
    return Echo(
        28,
        lambda req: R(
            topics=[
                R.TxnOffsetCommitResponseTopic(
                    name=t.name,
                    partitions=[
                        R.TxnOffsetCommitResponsePartition(partition_index=p.partition_index)
                        for p in t.partitions
                    ],
                )
                for t in req.topics
            ]
        ),
    )


def _txn_commit(*topics: str) -> m.TxnOffsetCommitRequest:
    Q = m.TxnOffsetCommitRequest
    return Q(
        transactional_id="tx",
        group_id="g",
        producer_id=ProducerId(1),
        producer_epoch=0,
        topics=[
            Q.TxnOffsetCommitRequestTopic(
                name=t, partitions=[Q.TxnOffsetCommitRequestPartition(partition_index=0)]
            )
            for t in topics
        ],
    )


def _commit_errors(response: Any) -> dict[str, int]:
    return {t.name: p.error_code for t in response.topics for p in t.partitions}


def test_txn_offset_commit_checks_id_then_group_then_each_topic() -> None:
    echo = _txn_commit_echo()
    request = _txn_commit("mine", "theirs")
    reads = [acl(G, "g", Op.READ), acl(T, "mine", Op.READ)]
    response = run(echo.spec(), request, reads, version=3)
    assert _commit_errors(response) == {"mine": TXN_DENIED, "theirs": TXN_DENIED}
    response = run(echo.spec(), request, [acl(X, "tx", Op.WRITE)], version=3)
    assert _commit_errors(response) == {"mine": GROUP_DENIED, "theirs": GROUP_DENIED}
    assert echo.seen == []
    response = run(echo.spec(), request, [*reads, acl(X, "tx", Op.WRITE)], version=3)
    assert _commit_errors(response) == {"mine": OK, "theirs": TOPIC_DENIED}
    assert [t.name for t in echo.seen[0].topics] == ["mine"]


def test_txn_offset_commit_needs_read_not_write_on_topics() -> None:
    echo = _txn_commit_echo()
    acls = [acl(X, "tx", Op.WRITE), acl(G, "g", Op.READ), acl(T, "mine", Op.WRITE)]
    response = run(echo.spec(), _txn_commit("mine"), acls, version=0)
    assert _commit_errors(response) == {"mine": TOPIC_DENIED}
    assert echo.seen == []


# --- DescribeTransactions, ListTransactions, DescribeProducers -------------------------------


def _described(req: m.DescribeTransactionsRequest) -> m.DescribeTransactionsResponse:
    R = m.DescribeTransactionsResponse
    return R(
        transaction_states=[
            R.TransactionState(
                transactional_id=t,
                transaction_state="Ongoing",
                producer_id=ProducerId(1),
                topics=[
                    R.TopicData(topic="mine", partitions=[0]),
                    R.TopicData(topic="theirs", partitions=[0]),
                ],
            )
            for t in req.transactional_ids
        ]
    )


def test_describe_transactions_refuses_ids_and_hides_topics() -> None:
    echo = Echo(65, _described)
    acls = [acl(X, "tx", Op.DESCRIBE), acl(T, "mine", Op.DESCRIBE)]
    request = m.DescribeTransactionsRequest(transactional_ids=["other", "tx"])
    response = run(echo.spec(), request, acls, version=0)
    states = {s.transactional_id: s for s in response.transaction_states}
    assert [s.transactional_id for s in response.transaction_states] == ["other", "tx"]
    assert states["other"].error_code == TXN_DENIED
    assert states["tx"].error_code == OK
    assert [t.topic for t in states["tx"].topics] == ["mine"]
    assert echo.seen[0].transactional_ids == ["tx"]


def test_list_transactions_lists_only_describable_ids() -> None:
    R = m.ListTransactionsResponse
    echo = Echo(
        66,
        lambda req: R(
            transaction_states=[
                R.TransactionState(
                    transactional_id=t, producer_id=ProducerId(1), transaction_state="Ongoing"
                )
                for t in ("tx", "other", "tx-2")
            ]
        ),
    )
    acls = [acl(X, "tx", Op.DESCRIBE), acl(X, "tx-2", Op.WRITE)]  # WRITE implies DESCRIBE
    response = run(echo.spec(), m.ListTransactionsRequest(), acls, version=1)
    assert [s.transactional_id for s in response.transaction_states] == ["tx", "tx-2"]


def test_describe_producers_needs_read_on_the_topic() -> None:
    R = m.DescribeProducersResponse
    echo = Echo(
        61,
        lambda req: R(
            topics=[
                R.TopicResponse(
                    name=t.name,
                    partitions=[
                        R.PartitionResponse(partition_index=p) for p in t.partition_indexes
                    ],
                )
                for t in req.topics
            ]
        ),
    )
    request = m.DescribeProducersRequest(
        topics=[
            m.DescribeProducersRequest.TopicRequest(name=n, partition_indexes=[0, 1])
            for n in ("theirs", "mine")
        ]
    )
    acls = [acl(T, "mine", Op.READ), acl(T, "theirs", Op.DESCRIBE)]
    response = run(echo.spec(), request, acls, version=0)
    assert [t.name for t in response.topics] == ["theirs", "mine"]
    assert [p.error_code for p in response.topics[0].partitions] == [TOPIC_DENIED] * 2
    assert [p.error_code for p in response.topics[1].partitions] == [OK] * 2
    assert [t.name for t in echo.seen[0].topics] == ["mine"]
