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
from broker.replica_manager import ReplicaManager
from broker.security.session import Session
from broker.storage import MemoryStorage
from broker.transaction.interfaces import TopicPartition
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ProduceRequest, ProduceResponse, RequestHeader
from kafka_protocol.record_batch import SimpleRecord, build_batch
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
        header = RequestHeader(request_api_key=0, request_api_version=9)
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
