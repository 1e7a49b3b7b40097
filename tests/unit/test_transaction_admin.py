"""Transaction administration (kraft/transactions/): its pure decisions (model.py: which
producer an abort by start offset means, which open transactions hang, the requests and what
their answers mean) and its operations (admin.py) against fake brokers that speak the real
protocol over sockets on 127.0.0.1 (test_group_admin.FakeBrokers, taught the transaction APIs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_group_admin import FakeBrokers

from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.framing import decode_request, encode_request
from kafka_protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    FindCoordinatorRequest,
    ListTransactionsRequest,
    ListTransactionsResponse,
    RequestHeader,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka_protocol.types import ProducerId, TopicName, TransactionalId
from kraft.groups import client as group_client
from kraft.groups.client import GroupError, ImageView
from kraft.groups.model import Coordinator
from kraft.transactions.admin import NoOpenTransaction, TransactionAdmin
from kraft.transactions.model import (
    AbortSpec,
    OpenTransaction,
    PartitionError,
    ProducerState,
    TransactionDescription,
    abort_spec_at,
    description_from,
    hanging,
    list_transactions_request,
    marker_error,
    open_for_longer_than,
    partitions_to_search,
    producers_from,
    replicas_of,
    write_abort_marker_request,
)
from metadata_log.image import TopicPartition

T = TypeVar("T")
TP = TopicPartition
NOW = 1_700_000_000_000
MINUTE = 60_000


def producer(
    pid: int,
    start: int | None = None,
    *,
    epoch: int = 0,
    coordinator_epoch: int | None = None,
    last_timestamp: int = NOW - 30 * MINUTE,
) -> ProducerState:
    return ProducerState(pid, epoch, 4, last_timestamp, coordinator_epoch, start)


def wire_producer(s: ProducerState) -> DescribeProducersResponse.ProducerState:
    return DescribeProducersResponse.ProducerState(
        producer_id=ProducerId(s.producer_id),
        producer_epoch=s.producer_epoch,
        last_sequence=s.last_sequence,
        last_timestamp=s.last_timestamp,
        coordinator_epoch=-1 if s.coordinator_epoch is None else s.coordinator_epoch,
        current_txn_start_offset=-1
        if s.current_txn_start_offset is None
        else s.current_txn_start_offset,
    )


def roundtrip(request: Request, version: int) -> Any:
    assert request.API_KEY is not None
    header = RequestHeader(
        request_api_key=request.API_KEY, request_api_version=version, correlation_id=1
    )
    frame = b"".join(bytes(c) for c in encode_request(header, request))  # type: ignore[arg-type]
    return decode_request(frame[4:])[1]


# --- requests and answers ------------------------------------------------------------------------


def test_list_request_uses_v1_only_for_a_duration_filter() -> None:
    request, version = list_transactions_request(["Ongoing"], [7, 9])
    assert version == 0
    assert roundtrip(request, 0) == ListTransactionsRequest(
        state_filters=["Ongoing"], producer_id_filters=[ProducerId(7), ProducerId(9)]
    )
    request, version = list_transactions_request(duration_ms=60_000)
    assert version == 1 and roundtrip(request, 1).duration_filter == 60_000


def test_description_without_a_running_transaction_has_no_start_time() -> None:
    state = DescribeTransactionsResponse.TransactionState(
        transactional_id=TransactionalId("app"),
        transaction_state="Empty",
        transaction_timeout_ms=60_000,
        transaction_start_time_ms=-1,
        producer_id=ProducerId(5),
        producer_epoch=2,
        topics=[DescribeTransactionsResponse.TopicData(topic=TopicName("b"), partitions=[1, 0])],
    )
    described = description_from(state, Coordinator(2, "h", 1))
    assert described.start_time_ms is None
    assert described.partitions == (TP("b", 0), TP("b", 1))


def test_producers_answer_maps_missing_values_and_errors() -> None:
    response = DescribeProducersResponse(
        topics=[
            DescribeProducersResponse.TopicResponse(
                name=TopicName("t"),
                partitions=[
                    DescribeProducersResponse.PartitionResponse(
                        partition_index=0,
                        active_producers=[
                            wire_producer(producer(9, 40, coordinator_epoch=3)),
                            wire_producer(producer(2)),
                        ],
                    ),
                    DescribeProducersResponse.PartitionResponse(
                        partition_index=1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER
                    ),
                ],
            )
        ]
    )
    answers = producers_from(response, [TP("t", 0), TP("t", 1), TP("t", 2)])
    assert answers[TP("t", 0)] == [producer(2), producer(9, 40, coordinator_epoch=3)]
    assert answers[TP("t", 1)] == PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER, None)
    missing = answers[TP("t", 2)]
    assert isinstance(missing, PartitionError)
    assert missing.error == ErrorCode.UNKNOWN_SERVER_ERROR


def test_abort_marker_request_and_its_outcome() -> None:
    spec = AbortSpec(TP("t", 3), producer_id=11, producer_epoch=4, coordinator_epoch=2)
    sent = roundtrip(write_abort_marker_request(spec), 1)
    [marker] = sent.markers
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch) == (11, 4, 2)
    assert marker.transaction_result is False  # ABORT
    assert [(t.name, t.partition_indexes) for t in marker.topics] == [("t", [3])]
    R = WriteTxnMarkersResponse
    answer = R(
        markers=[
            R.WritableTxnMarkerResult(
                producer_id=ProducerId(11),
                topics=[
                    R.WritableTxnMarkerTopicResult(
                        name=TopicName("t"),
                        partitions=[
                            R.WritableTxnMarkerPartitionResult(
                                partition_index=3, error_code=ErrorCode.INVALID_PRODUCER_EPOCH
                            )
                        ],
                    )
                ],
            )
        ]
    )
    assert marker_error(answer, spec) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert marker_error(R(), spec) == ErrorCode.UNKNOWN_SERVER_ERROR


# --- abort by start offset -----------------------------------------------------------------------


def test_abort_by_start_offset_finds_the_producer_and_defaults_the_coordinator_epoch() -> None:
    producers = [producer(1, 10, coordinator_epoch=5, epoch=3), producer(2, 20), producer(3)]
    assert abort_spec_at(TP("t", 0), producers, 10) == AbortSpec(TP("t", 0), 1, 3, 5)
    # no marker yet: Kafka's tool uses coordinator epoch 0, at most any coordinator's
    assert abort_spec_at(TP("t", 0), producers, 20) == AbortSpec(TP("t", 0), 2, 0, 0)
    assert abort_spec_at(TP("t", 0), producers, 15) is None


@given(
    st.lists(st.one_of(st.none(), st.integers(0, 50)), max_size=8),
    st.integers(0, 50),
)
def test_an_abort_spec_exists_exactly_when_a_transaction_starts_there(
    starts: list[int | None], offset: int
) -> None:
    producers = [producer(i, start) for i, start in enumerate(starts)]
    spec = abort_spec_at(TP("t", 0), producers, offset)
    assert (spec is not None) == (offset in starts)
    if spec is not None:
        assert producers[spec.producer_id].current_txn_start_offset == offset


# --- hanging transactions ------------------------------------------------------------------------


def test_candidates_are_open_transactions_older_than_the_max_timeout() -> None:
    old, recent = NOW - 16 * MINUTE, NOW - 14 * MINUTE
    states = {
        TP("t", 0): [producer(1, 5, last_timestamp=old), producer(2, last_timestamp=old)],
        TP("t", 1): [producer(3, 7, last_timestamp=recent)],
    }
    found = open_for_longer_than(states, 15 * MINUTE, NOW)
    assert found == [OpenTransaction(TP("t", 0), producer(1, 5, last_timestamp=old))]
    assert len(open_for_longer_than(states, 10 * MINUTE, NOW)) == 2


def description(tid: str, *partitions: TopicPartition) -> TransactionDescription:
    return TransactionDescription(
        tid, "Ongoing", 1, 0, 60_000, NOW, tuple(partitions), Coordinator(1, "h", 1)
    )


def test_hanging_unless_the_coordinator_still_has_the_partition() -> None:
    unknown = OpenTransaction(TP("t", 0), producer(1, 5))
    not_found = OpenTransaction(TP("t", 0), producer(2, 6))
    elsewhere = OpenTransaction(TP("t", 1), producer(3, 7))
    pending = OpenTransaction(TP("t", 2), producer(3, 8))
    found = hanging(
        [unknown, not_found, elsewhere, pending],
        {2: "gone", 3: "live"},
        {"gone": None, "live": description("live", TP("t", 2))},
    )
    assert found == [unknown, not_found, elsewhere]


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.booleans()), max_size=10))
def test_a_transaction_its_coordinator_lists_with_the_partition_never_hangs(
    rows: list[tuple[int, int, bool]],
) -> None:
    candidates = [OpenTransaction(TP("t", p), producer(pid, 0)) for pid, p, _ in rows]
    listed = {pid: f"id-{pid}" for pid, _, known in rows if known}
    descriptions = {
        f"id-{pid}": description(f"id-{pid}", *(TP("t", p) for q, p, _ in rows if q == pid))
        for pid in listed
    }
    found = hanging(candidates, listed, descriptions)
    assert found == [c for c in candidates if c.producer.producer_id not in listed]


def test_search_scope_by_topic_partition_and_broker() -> None:
    image = replicas_of(FakeBrokers(ports={1: 1, 2: 2, 3: 3}).image())  # t-0: 1, t-1: 3, u-0: 2
    assert partitions_to_search(image, "t", None, None) == [TP("t", 0), TP("t", 1)]
    assert partitions_to_search(image, "t", 1, None) == [TP("t", 1)]
    assert partitions_to_search(image, None, None, 3) == [TP("t", 1)]
    assert partitions_to_search(image, "t", None, 2) == []
    assert partitions_to_search(image, None, None, 2, lambda name: name != "u") == []


# --- against fake brokers ------------------------------------------------------------------------

TXN_APIS = {27: (0, 1), 61: (0, 0), 65: (0, 0), 66: (0, 1)}


@dataclass
class FakeTxn:
    producer_id: int
    state: str = "Ongoing"
    partitions: list[TopicPartition] = field(default_factory=list)
    epoch: int = 0


@dataclass
class FakeTxnBrokers(FakeBrokers):
    """FakeBrokers plus the transaction APIs: broker ``coordinator`` coordinates every
    transactional id of ``transactions``; each partition's leader answers DescribeProducers
    from ``producers`` (others: NOT_LEADER_OR_FOLLOWER, unless in ``replicas_answer``) and
    applies an ABORT marker by closing the producer's open transaction."""

    transactions: dict[str, FakeTxn] = field(default_factory=dict)
    producers: dict[TopicPartition, list[ProducerState]] = field(default_factory=dict)
    replicas_answer: bool = False

    def _answer(self, broker_id: int, request: Request) -> Response:
        match request:
            case ApiVersionsRequest():
                response = super()._answer(broker_id, request)
                assert isinstance(response, ApiVersionsResponse)
                response.api_keys += [
                    ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                    for k, (lo, hi) in TXN_APIS.items()
                ]
                return response
            case ListTransactionsRequest():
                return self._list(broker_id, request)
            case DescribeTransactionsRequest():
                return self._describe_txn(broker_id, request)
            case DescribeProducersRequest():
                return self._describe_producers(broker_id, request)
            case WriteTxnMarkersRequest():
                return self._markers(broker_id, request)
        return super()._answer(broker_id, request)

    def _list(self, broker_id: int, request: ListTransactionsRequest) -> Response:
        error = self._error(request)
        listed = [
            ListTransactionsResponse.TransactionState(
                transactional_id=TransactionalId(tid),
                producer_id=ProducerId(t.producer_id),
                transaction_state=t.state,
            )
            for tid, t in self.transactions.items()
            if broker_id == self.coordinator
            and (not request.state_filters or t.state in request.state_filters)
            and (not request.producer_id_filters or t.producer_id in request.producer_id_filters)
        ]
        return ListTransactionsResponse(error_code=error, transaction_states=listed)

    def _describe_txn(self, broker_id: int, request: DescribeTransactionsRequest) -> Response:
        error = self._error(request)
        [tid] = request.transactional_ids
        fake = self.transactions.get(tid)
        if broker_id != self.coordinator:
            error = ErrorCode.NOT_COORDINATOR
        elif fake is None and not error:
            error = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        if error or fake is None:
            state = DescribeTransactionsResponse.TransactionState(
                error_code=error, transactional_id=tid
            )
        else:
            by_topic: dict[str, list[int]] = {}
            for tp in fake.partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            state = DescribeTransactionsResponse.TransactionState(
                transactional_id=tid,
                transaction_state=fake.state,
                transaction_timeout_ms=60_000,
                transaction_start_time_ms=NOW,
                producer_id=ProducerId(fake.producer_id),
                producer_epoch=fake.epoch,
                topics=[
                    DescribeTransactionsResponse.TopicData(topic=TopicName(t), partitions=ps)
                    for t, ps in by_topic.items()
                ],
            )
        return DescribeTransactionsResponse(transaction_states=[state])

    def _describe_producers(self, broker_id: int, request: DescribeProducersRequest) -> Response:
        error = self._error(request)
        R = DescribeProducersResponse
        topics = []
        for topic in request.topics:
            partitions = []
            for index in topic.partition_indexes:
                tp = TP(str(topic.name), index)
                code = error
                if tp not in self.leaders:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif self.leaders[tp] != broker_id and not self.replicas_answer:
                    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                states = [] if code else [wire_producer(s) for s in self.producers.get(tp, [])]
                partitions.append(
                    R.PartitionResponse(
                        partition_index=index, error_code=code, active_producers=states
                    )
                )
            topics.append(R.TopicResponse(name=topic.name, partitions=partitions))
        return R(topics=topics)

    def _markers(self, broker_id: int, request: WriteTxnMarkersRequest) -> Response:
        R = WriteTxnMarkersResponse
        results = []
        for marker in request.markers:
            topics = []
            for topic in marker.topics:
                partitions = []
                for index in topic.partition_indexes:
                    tp = TP(str(topic.name), index)
                    code = self._apply_abort(broker_id, tp, marker)
                    partitions.append(
                        R.WritableTxnMarkerPartitionResult(partition_index=index, error_code=code)
                    )
                topics.append(
                    R.WritableTxnMarkerTopicResult(name=topic.name, partitions=partitions)
                )
            results.append(R.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics))
        return R(markers=results)

    def _apply_abort(
        self, broker_id: int, tp: TopicPartition, marker: WriteTxnMarkersRequest.WritableTxnMarker
    ) -> ErrorCode:
        if self.leaders.get(tp) != broker_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert marker.transaction_result is False, "the admin only aborts"
        states = self.producers.get(tp, [])
        for i, s in enumerate(states):
            if s.producer_id == marker.producer_id:
                if s.producer_epoch > marker.producer_epoch:
                    return ErrorCode.INVALID_PRODUCER_EPOCH
                states[i] = ProducerState(
                    s.producer_id,
                    marker.producer_epoch,
                    s.last_sequence,
                    s.last_timestamp,
                    marker.coordinator_epoch,
                    None,
                )
        return ErrorCode.NONE


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_client, "RETRY_INITIAL_S", 0.001)
    monkeypatch.setattr(group_client, "RETRY_MAX_S", 0.002)
    monkeypatch.setattr("kraft.transactions.admin.RETRY_INITIAL_S", 0.001)
    monkeypatch.setattr("kraft.transactions.admin.RETRY_MAX_S", 0.002)


def run(brokers: FakeTxnBrokers, call: Callable[[TransactionAdmin], Awaitable[T]]) -> T:
    async def scenario() -> T:
        await brokers.start()
        admin = TransactionAdmin(ImageView(brokers.image), request_timeout_s=2.0)
        try:
            async with asyncio.timeout(20):
                return await call(admin)
        finally:
            await admin.close()
            await brokers.close()

    return asyncio.run(scenario())


def fail(brokers: FakeTxnBrokers, call: Callable[[TransactionAdmin], Awaitable[Any]]) -> GroupError:
    async def failing(admin: TransactionAdmin) -> GroupError:
        with pytest.raises(GroupError) as raised:
            await call(admin)
        return raised.value

    return run(brokers, failing)


def two_transactions() -> dict[str, FakeTxn]:
    return {
        "app-1": FakeTxn(100, "Ongoing", [TP("t", 0)]),
        "app-2": FakeTxn(200, "CompleteCommit"),
    }


def test_list_asks_every_broker_with_the_filters() -> None:
    brokers = FakeTxnBrokers(transactions=two_transactions())
    listed = run(brokers, lambda a: a.list_transactions())
    assert [(t.transactional_id, t.producer_id, t.state, t.coordinator) for t in listed] == [
        ("app-1", 100, "Ongoing", 2),
        ("app-2", 200, "CompleteCommit", 2),
    ]
    assert sorted(b for b, r in brokers.received if isinstance(r, ListTransactionsRequest)) == [
        1,
        2,
        3,
    ]
    brokers = FakeTxnBrokers(transactions=two_transactions())
    listed = run(brokers, lambda a: a.list_transactions(["Ongoing"], [100, 300], 5000))
    assert [t.transactional_id for t in listed] == ["app-1"]
    sent = brokers.sent(ListTransactionsRequest)[0]
    assert (sent.state_filters, sent.producer_id_filters, sent.duration_filter) == (
        ["Ongoing"],
        [100, 300],
        5000,
    )


def test_list_fails_when_a_broker_cannot_answer() -> None:
    brokers = FakeTxnBrokers(
        errors={"ListTransactionsRequest": [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]}
    )
    assert (
        fail(brokers, lambda a: a.list_transactions()).error
        == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )


def test_describe_finds_the_transaction_coordinator_and_retries_a_moved_one() -> None:
    brokers = FakeTxnBrokers(
        transactions=two_transactions(),
        errors={"DescribeTransactionsRequest": [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]},
    )
    described = run(brokers, lambda a: a.describe_transaction("app-1"))
    assert (described.state, described.producer_id, described.partitions) == (
        "Ongoing",
        100,
        (TP("t", 0),),
    )
    assert described.coordinator.node_id == 2
    finds = brokers.sent(FindCoordinatorRequest)
    assert {(f.key, f.key_type) for f in finds} == {("app-1", 1)} and len(finds) == 2
    missing = fail(FakeTxnBrokers(), lambda a: a.describe_transaction("nobody"))
    assert missing.error == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


def test_producers_come_from_the_leader_or_the_replica_asked() -> None:
    states = {TP("t", 1): [producer(7, 12)]}
    brokers = FakeTxnBrokers(producers=states)
    assert run(brokers, lambda a: a.producers_of(TP("t", 1))) == [producer(7, 12)]
    assert [b for b, r in brokers.received if isinstance(r, DescribeProducersRequest)] == [3]
    brokers = FakeTxnBrokers(producers=states)
    refused = fail(brokers, lambda a: a.producers_of(TP("t", 1), broker_id=1))
    assert refused.error == ErrorCode.NOT_LEADER_OR_FOLLOWER  # after the retries
    brokers = FakeTxnBrokers(producers=states, replicas_answer=True)
    assert run(brokers, lambda a: a.producers_of(TP("t", 1), broker_id=1)) == [producer(7, 12)]
    gone = fail(FakeTxnBrokers(), lambda a: a.producers_of(TP("t", 9)))
    assert gone.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_abort_writes_the_marker_at_the_leader_and_reports_a_newer_epoch() -> None:
    brokers = FakeTxnBrokers(producers={TP("t", 1): [producer(7, 12, epoch=2)]})
    run(brokers, lambda a: a.abort(AbortSpec(TP("t", 1), 7, 2, 0)))
    assert [b for b, r in brokers.received if isinstance(r, WriteTxnMarkersRequest)] == [3]
    assert brokers.producers[TP("t", 1)] == [producer(7, None, epoch=2, coordinator_epoch=0)]
    brokers = FakeTxnBrokers(producers={TP("t", 1): [producer(7, 12, epoch=2)]})
    stale = fail(brokers, lambda a: a.abort(AbortSpec(TP("t", 1), 7, 1, 0)))
    assert stale.error == ErrorCode.INVALID_PRODUCER_EPOCH


def test_find_hanging_end_to_end() -> None:
    old = NOW - 20 * MINUTE
    brokers = FakeTxnBrokers(
        transactions={
            "app-1": FakeTxn(100, "Ongoing", [TP("t", 0)]),
            "gone": FakeTxn(300, "Empty"),
        },
        producers={
            TP("t", 0): [
                producer(100, 3, last_timestamp=old),  # its coordinator has t-0: not hanging
                producer(200, 5, last_timestamp=old),  # no coordinator knows 200: hanging
                producer(300, 8, last_timestamp=old),  # its id has no transaction on t-0
                producer(400, 9, last_timestamp=NOW - MINUTE),  # open, but recent
            ],
            TP("t", 1): [producer(100, 1, last_timestamp=old)],  # not in app-1's partitions
        },
    )
    found = run(
        brokers,
        lambda a: a.find_hanging(
            [TP("t", 0), TP("t", 1)],
            broker_id=None,
            max_transaction_timeout_ms=15 * MINUTE,
            now_ms=NOW,
        ),
    )
    assert [(t.partition, t.producer.producer_id) for t in found] == [
        (TP("t", 0), 200),
        (TP("t", 0), 300),
        (TP("t", 1), 100),
    ]
    assert brokers.sent(ListTransactionsRequest)[0].producer_id_filters == [100, 200, 300]


def test_find_hanging_with_nothing_old_asks_no_coordinator() -> None:
    brokers = FakeTxnBrokers(producers={TP("t", 0): [producer(1, 0, last_timestamp=NOW)]})
    found = run(
        brokers,
        lambda a: a.find_hanging(
            [TP("t", 0)], broker_id=None, max_transaction_timeout_ms=0, now_ms=NOW
        ),
    )
    assert found == [] and brokers.sent(ListTransactionsRequest) == []


def test_find_hanging_by_broker_asks_the_leader_where_the_replica_does_not_answer() -> None:
    old = NOW - 20 * MINUTE
    brokers = FakeTxnBrokers(producers={TP("t", 1): [producer(500, 2, last_timestamp=old)]})
    found = run(
        brokers,
        lambda a: a.find_hanging(
            [TP("t", 1)], broker_id=1, max_transaction_timeout_ms=15 * MINUTE, now_ms=NOW
        ),
    )
    assert [(t.partition, t.producer.producer_id) for t in found] == [(TP("t", 1), 500)]
    asked = [b for b, r in brokers.received if isinstance(r, DescribeProducersRequest)]
    assert asked == [1, 3]  # the replica named, once; then t-1's leader


def test_abort_at_a_start_offset_finds_the_producer_or_says_what_is_open() -> None:
    brokers = FakeTxnBrokers(producers={TP("t", 0): [producer(7, 12, epoch=2), producer(8, 30)]})
    spec = run(brokers, lambda a: a.abort_at(TP("t", 0), 30))
    assert spec == AbortSpec(TP("t", 0), 8, 0, 0)
    assert [r.markers[0].producer_id for r in brokers.sent(WriteTxnMarkersRequest)] == [8]

    async def nothing_at_13(admin: TransactionAdmin) -> str:
        with pytest.raises(NoOpenTransaction) as raised:
            await admin.abort_at(TP("t", 0), 13)
        return str(raised.value)

    brokers = FakeTxnBrokers(producers={TP("t", 0): [producer(7, 12), producer(8, 30)]})
    assert run(brokers, nothing_at_13).endswith("(open transactions start at: 12, 30)")
    assert brokers.sent(WriteTxnMarkersRequest) == []
