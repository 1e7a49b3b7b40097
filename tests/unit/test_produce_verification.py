"""KIP-890 part 1 in the produce path: a transactional batch of a producer with no ongoing
transaction on the partition is appended only once the transaction coordinator says the
partition is in the transaction.

The coordinator is a fake implementing ``TransactionVerifier`` (an internal seam: no client
talks to it); the replica manager, its partitions and the handler are the real ones.  An
end-to-end test against a real node lives in tests/integration/test_produce_verification.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from broker.deferred import Deferred
from broker.dispatcher import RequestContext
from broker.handlers import produce
from broker.handlers.produce import ProduceHandler
from broker.log.config import LogConfig
from broker.metrics import BrokerMetrics
from broker.partition import AppendOutcome
from broker.replica_manager import ReplicaManager
from broker.security.session import Session
from broker.storage import MemoryStorage
from broker.transaction.interfaces import TopicPartition
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ProduceRequest, ProduceResponse, RequestHeader
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch
from kafka_protocol.types import TopicName, TransactionalId

PID, EPOCH = 4000, 3


class FakeVerifier:
    """Answers from ``answers`` (NONE for a partition not listed), after ``gate`` if set."""

    def __init__(self, answers: dict[TopicPartition, ErrorCode] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[tuple[str, int, int, list[TopicPartition]]] = []
        self.gate: asyncio.Event | None = None

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        self.calls.append((transactional_id, producer_id, producer_epoch, list(partitions)))
        if self.gate is not None:
            await self.gate.wait()
        return {tp: self.answers.get(tp, ErrorCode.NONE) for tp in partitions}


class Broker:
    """A replica manager leading ``t-0`` and ``t-1``, and the Produce handler on it."""

    def __init__(self, verifier: FakeVerifier | None) -> None:
        self.rm = ReplicaManager(MemoryStorage(), Path("/data"), clock_ms=lambda: 1_000)
        self.parts = [
            self.rm.open_partition("t", i, None, LogConfig(), max_message_bytes=1 << 20)
            for i in range(2)
        ]
        self.handler = ProduceHandler(self.rm, BrokerMetrics(), verifier)

    async def produce(
        self,
        batches: dict[int, bytes],
        transactional_id: str | None = "tx",
        acks: int = -1,
        timeout_ms: int = 5_000,
        version: int = 9,
    ) -> dict[int, ProduceResponse.PartitionProduceResponse]:
        req = ProduceRequest(
            transactional_id=None
            if transactional_id is None
            else TransactionalId(transactional_id),
            acks=acks,
            timeout_ms=timeout_ms,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=TopicName("t"),
                    partition_data=[
                        ProduceRequest.PartitionProduceData(index=i, records=memoryview(b))
                        for i, b in batches.items()
                    ],
                )
            ],
        )
        header = RequestHeader(request_api_key=0, request_api_version=version)
        ctx = RequestContext(header, Session.internal("User:test"), 0.0, 0.0)
        result = self.handler.handle(ctx, req)
        if asyncio.iscoroutine(result) or isinstance(result, Deferred):
            result = await result
        assert isinstance(result, ProduceResponse)
        return {p.index: p for t in result.responses for p in t.partition_responses}

    def end_offsets(self) -> list[int]:
        return [p.log_end_offset for p in self.parts]


def txn_batch(seq: int = 0, *, pid: int = PID, epoch: int = EPOCH, n: int = 2) -> bytes:
    return build_batch(
        [SimpleRecord(b"v%d" % i, b"k") for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


def plain_batch() -> bytes:
    return build_batch([SimpleRecord(b"v", b"k")])


def test_one_verification_per_request_for_every_partition_then_the_appends() -> None:
    async def main() -> None:
        verifier = FakeVerifier()
        broker = Broker(verifier)
        got = await broker.produce({0: txn_batch(), 1: txn_batch()})
        assert verifier.calls == [("tx", PID, EPOCH, [("t", 0), ("t", 1)])]
        assert [got[i].error_code for i in (0, 1)] == [ErrorCode.NONE] * 2
        assert [got[i].base_offset for i in (0, 1)] == [0, 0]
        assert broker.end_offsets() == [2, 2]
        # The transaction is now ongoing on both partitions: no more verification.
        got = await broker.produce({0: txn_batch(2), 1: txn_batch(2)})
        assert len(verifier.calls) == 1
        assert [got[i].base_offset for i in (0, 1)] == [2, 2]

    asyncio.run(main())


def test_a_partition_not_in_the_transaction_is_refused_and_nothing_appended() -> None:
    async def main() -> None:
        verifier = FakeVerifier({("t", 1): ErrorCode.INVALID_TXN_STATE})
        broker = Broker(verifier)
        got = await broker.produce({0: txn_batch(), 1: txn_batch()})
        assert got[0].error_code == ErrorCode.NONE
        assert got[1].error_code == ErrorCode.INVALID_TXN_STATE
        assert got[1].error_message == "the partition was not added to the transaction"
        assert broker.end_offsets() == [2, 0]

    asyncio.run(main())


@pytest.mark.parametrize(
    ("version", "expected"),
    [(10, ErrorCode.INVALID_TXN_STATE), (11, ErrorCode.TRANSACTION_ABORTABLE)],
)
def test_produce_v11_learns_that_a_partition_outside_the_transaction_is_abortable(
    version: int, expected: ErrorCode
) -> None:
    """KIP-890: Kafka's coordinator answers TRANSACTION_ABORTABLE; before Produce v11 the
    producer is told INVALID_TXN_STATE, which it knows."""

    async def main() -> None:
        broker = Broker(FakeVerifier({("t", 0): ErrorCode.INVALID_TXN_STATE}))
        got = (await broker.produce({0: txn_batch()}, version=version))[0]
        assert got.error_code == expected
        assert broker.end_offsets() == [0, 0]

    asyncio.run(main())


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_ENOUGH_REPLICAS),
        (ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_ENOUGH_REPLICAS),
        (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_ENOUGH_REPLICAS),
        (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NOT_ENOUGH_REPLICAS),
        (ErrorCode.NETWORK_EXCEPTION, ErrorCode.NOT_ENOUGH_REPLICAS),
        (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH),
        (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_PRODUCER_EPOCH),
        (ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        (
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ),
    ],
)
def test_coordinator_answers_map_to_what_producers_understand(
    answer: ErrorCode, expected: ErrorCode
) -> None:
    async def main() -> None:
        broker = Broker(FakeVerifier({("t", 0): answer}))
        got = (await broker.produce({0: txn_batch()}))[0]
        assert got.error_code == expected
        assert got.error_message
        assert broker.end_offsets() == [0, 0]

    asyncio.run(main())


def test_transactional_records_without_a_transactional_id_are_refused() -> None:
    async def main() -> None:
        verifier = FakeVerifier()
        broker = Broker(verifier)
        got = await broker.produce({0: txn_batch(), 1: plain_batch()}, transactional_id=None)
        assert got[0].error_code == ErrorCode.INVALID_TXN_STATE
        assert "transactional_id" in str(got[0].error_message)
        assert got[1].error_code == ErrorCode.NONE
        assert verifier.calls == [] and broker.end_offsets() == [0, 1]

    asyncio.run(main())


def test_two_producers_in_one_request_are_refused() -> None:
    async def main() -> None:
        verifier = FakeVerifier()
        broker = Broker(verifier)
        got = await broker.produce({0: txn_batch(), 1: txn_batch(pid=PID + 1)})
        assert {got[i].error_code for i in (0, 1)} == {ErrorCode.INVALID_PRODUCER_ID_MAPPING}
        assert verifier.calls == [] and broker.end_offsets() == [0, 0]

    asyncio.run(main())


def test_plain_batches_never_wait_for_the_coordinator() -> None:
    async def main() -> None:
        verifier = FakeVerifier()
        broker = Broker(verifier)
        got = await broker.produce({0: plain_batch(), 1: plain_batch()}, transactional_id=None)
        assert [got[i].error_code for i in (0, 1)] == [ErrorCode.NONE] * 2
        assert verifier.calls == []

    asyncio.run(main())


def test_without_a_verifier_transactional_batches_are_appended_unverified() -> None:
    async def main() -> None:
        broker = Broker(None)
        got = await broker.produce({0: txn_batch()})
        assert got[0].error_code == ErrorCode.NONE and broker.end_offsets() == [2, 0]

    asyncio.run(main())


def test_a_later_request_waits_for_the_verification_under_way() -> None:
    """Pipelined requests of one producer reach the partition in the order they came: the
    second does not overtake the first while the first is being verified."""

    async def main() -> None:
        verifier = FakeVerifier()
        verifier.gate = asyncio.Event()
        broker = Broker(verifier)
        first = asyncio.ensure_future(broker.produce({0: txn_batch(0)}))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(broker.produce({0: txn_batch(2)}))
        await asyncio.sleep(0.01)
        assert not first.done() and not second.done()
        assert broker.end_offsets() == [0, 0]
        verifier.gate.set()
        got1, got2 = await first, await second
        assert (got1[0].error_code, got2[0].error_code) == (ErrorCode.NONE, ErrorCode.NONE)
        assert (got1[0].base_offset, got2[0].base_offset) == (0, 2)
        assert len(verifier.calls) == 1, "the second found the transaction ongoing"

    asyncio.run(main())


def test_a_coordinator_that_does_not_answer_in_time_gets_a_retriable_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def main() -> None:
        monkeypatch.setattr(produce, "MIN_VERIFY_TIMEOUT_MS", 50)
        verifier = FakeVerifier()
        verifier.gate = asyncio.Event()  # never set
        broker = Broker(verifier)
        got = await broker.produce({0: txn_batch()}, timeout_ms=50)
        assert got[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert broker.end_offsets() == [0, 0]

    asyncio.run(main())


class MarkerWritingVerifier(FakeVerifier):
    """While "verifying", the transaction ends: the coordinator's marker for the producer is
    written on the partition before the answer (NONE, from before the end) comes back."""

    def __init__(self, broker_rm: ReplicaManager, commit: bool) -> None:
        super().__init__()
        self.rm = broker_rm
        self.commit = commit
        self.markers: list[AppendOutcome] = []

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        for topic, index in partitions:
            part = self.rm.get(topic, index)
            assert part is not None
            marker = self.rm.append_marker(part, producer_id, producer_epoch, 0, self.commit)
            self.markers.append(await marker if isinstance(marker, Deferred) else marker)
        return await super().verify(transactional_id, producer_id, producer_epoch, partitions)


@pytest.mark.parametrize("commit", [True, False])
def test_a_marker_written_during_the_verification_refuses_the_append(commit: bool) -> None:
    """Kafka's verification guard: the coordinator's NONE vouched for a transaction that
    ended (its marker landed) before the append; appending would open a new transaction that
    no coordinator knows of, so the batch is refused and nothing of it is written."""

    async def main() -> None:
        broker = Broker(None)
        verifier = MarkerWritingVerifier(broker.rm, commit)
        broker.handler.verifier = verifier
        got = await broker.produce({0: txn_batch(), 1: plain_batch()})
        assert [m.error for m in verifier.markers] == [ErrorCode.NONE]
        assert got[0].error_code == ErrorCode.INVALID_TXN_STATE
        assert "not part of an ongoing transaction" in str(got[0].error_message)
        assert got[1].error_code == ErrorCode.NONE
        assert broker.end_offsets() == [1, 1], "only the marker on t-0"
        part = broker.parts[0]
        assert part is not None
        assert broker.rm.has_ongoing_transaction(part, PID, EPOCH) is False
        assert part.producers.ongoing_transactions() == []
        # The producer's next verification (its retry, a new transaction) takes a new guard.
        broker.handler.verifier = FakeVerifier()
        got = await broker.produce({0: txn_batch()})
        assert got[0].error_code == ErrorCode.NONE and got[0].base_offset == 1
        assert broker.rm.has_ongoing_transaction(part, PID, EPOCH)

    asyncio.run(main())


def test_the_guard_is_kept_by_a_marker_of_another_producer() -> None:
    async def main() -> None:
        broker = Broker(None)
        verifier = FakeVerifier()
        verifier.gate = asyncio.Event()
        broker.handler.verifier = verifier
        pending = asyncio.ensure_future(broker.produce({0: txn_batch()}))
        await asyncio.sleep(0.01)
        part = broker.parts[0]
        assert part is not None
        other = broker.rm.append_marker(part, PID + 1, 0, 0, True)
        assert isinstance(other, Deferred)
        assert (await other).error == ErrorCode.NONE
        verifier.gate.set()
        got = await pending
        assert got[0].error_code == ErrorCode.NONE and got[0].base_offset == 1
        assert broker.end_offsets() == [3, 0]

    asyncio.run(main())


def test_replica_manager_guard_api() -> None:
    """The guard seen from the replica manager: one per producer while verifications are
    under way, cleared by the producer's transactional batch (its transaction opened) or by
    its marker; a stale guard refuses only when no transaction of the producer is open."""

    async def main() -> None:
        broker = Broker(None)
        rm, part = broker.rm, broker.parts[0]
        assert part is not None
        guard = rm.verification_guard(part, PID)
        assert rm.verification_guard(part, PID) is guard, "shared by concurrent verifications"
        first = rm.append_nowait(part, RecordBatch(memoryview(txn_batch(0))), 1, guard)
        assert isinstance(first, Deferred) and (await first).error == ErrorCode.NONE
        # Cleared by the append, but the transaction is open: a stale guard is fine.
        assert rm.verification_guard(part, PID) is not guard
        second = rm.append_nowait(part, RecordBatch(memoryview(txn_batch(2))), 1, guard)
        assert isinstance(second, Deferred) and (await second).error == ErrorCode.NONE
        guard = rm.verification_guard(part, PID)
        marker = rm.append_marker(part, PID, EPOCH, 0, False)
        assert isinstance(marker, Deferred) and (await marker).error == ErrorCode.NONE
        late = rm.append_nowait(part, RecordBatch(memoryview(txn_batch(4))), 1, guard)
        assert isinstance(late, AppendOutcome) and late.error == ErrorCode.INVALID_TXN_STATE
        # Without a guard (verification disabled, or the group coordinator's own batches)
        # the append is not checked.
        unguarded = rm.append_nowait(part, RecordBatch(memoryview(txn_batch(4))), 1)
        assert isinstance(unguarded, Deferred) and (await unguarded).error == ErrorCode.NONE
        assert broker.end_offsets() == [7, 0]

    asyncio.run(main())
