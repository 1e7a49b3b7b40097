"""Produce 0-11: validate each partition's batch (header, CRC, its records), append, answer.

Magic, size, CRC32C, record count and producer fields come from the 61-byte header; then the
records are walked in one compiled pass (``broker/log/validator.py``: structure, timestamps,
keys in compacted topics), never by a Python loop per record.  A refusal carries the first
bad record in ``record_errors`` and says why in ``error_message`` (v8+, KIP-467).  Nothing of
a rejected batch is appended, and one partition's error does not affect the others.

acks=0 appends and answers nothing; a partition refused at once (one this broker does not
lead, say) closes the connection instead, as Kafka does, so that the producer refreshes its
metadata.  acks=1 answers once the leader wrote the batch; acks=all once every in-sync
replica has it (the high watermark passed it), or REQUEST_TIMED_OUT after the request's
``timeout_ms`` (the batch stays written and may still commit: the producer's retry is
deduplicated by its sequence).  ``min.insync.replicas`` refuses acks=all with
NOT_ENOUGH_REPLICAS before the append, and answers NOT_ENOUGH_REPLICAS_AFTER_APPEND when the
ISR shrank below it while waiting.

Transactions (KIP-890 part 1).  A transactional batch of a producer with no transaction open on
the partition is held until the transaction coordinator (``TransactionVerifier``) says the
partition is in the producer's transaction; one question per request covers all its held
partitions, and a later request of the same producer for the same partition waits for it, so
that the producer's batches still arrive in order.  Only the partitions answered NONE are
appended; the others are refused with the coordinator's answer as Kafka maps it
(``_verification_refusal``: a partition not in the transaction is TRANSACTION_ABORTABLE from
v11, KIP-890, and INVALID_TXN_STATE before).  The plain path pays one attribute test per batch.
Before the question, each held batch takes its producer's verification guard on the partition
(``ReplicaManager.verification_guard``, Kafka's VerificationGuard) and the append passes it
back: a marker of that producer written in between (its transaction ended while the coordinator
was being asked) clears the guard, and the batch is refused INVALID_TXN_STATE instead of opening
a transaction nobody would end.

From v10 NOT_LEADER_OR_FOLLOWER carries the partition's current leader and its address
(KIP-951, :mod:`broker.handlers.leader_hints`).

Versions 0-2 (message format v0/v1) are advertised because librdkafka enables compression
only when Produce v0 is inside the range (as Kafka 4 does, KAFKA-18659), and refused per
partition with a clear message.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import NamedTuple

from broker.deferred import Deferred
from broker.dispatcher import ApiHandler, RequestContext
from broker.handlers.leader_hints import LeaderHints
from broker.log.validator import validate_records
from broker.metrics import BrokerMetrics
from broker.partition import AppendOutcome, Partition
from broker.producer_state import VerificationGuard
from broker.replica_manager import ReplicaManager
from broker.server import CloseConnection
from broker.transaction.interfaces import TransactionVerifier
from kafka_protocol.clock import wall_ms
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.messages import ProduceRequest, ProduceResponse
from kafka_protocol.record_batch import ATTR_TRANSACTIONAL, HEADER_BYTES, MAGIC, RecordBatch
from kafka_protocol.types import BrokerId, TopicName

log = logging.getLogger("broker.produce")

MIN_RECORD_BATCH_VERSION = 3
TRANSACTION_ABORTABLE_VERSION = 11  # KIP-890: clients that know TRANSACTION_ABORTABLE
NODE_ENDPOINTS_VERSION = 10  # where the leader is, with NOT_LEADER_OR_FOLLOWER (KIP-951)
ACKS_ALL = -1
VALID_ACKS = (-1, 0, 1)
Outcome = AppendOutcome | Deferred[AppendOutcome]
# A verification's bound when the request's own timeout_ms is smaller (acks=0 may send 0).
MIN_VERIFY_TIMEOUT_MS = 1_000
# What the coordinator answers while it cannot decide yet: the producer should retry.
RETRIABLE_VERIFICATION_ERRORS = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)


def _refuse(error: ErrorCode, message: str) -> AppendOutcome:
    return AppendOutcome(error, message=message)


def validate_batch(
    part: Partition, records: object, now_ms: int | None = None
) -> RecordBatch | AppendOutcome:
    """The one batch of a partition's records, or why it is refused (``now_ms``: the clock
    the timestamps are checked against; the wall clock by default)."""
    if not isinstance(records, memoryview) or len(records) == 0:
        return _refuse(ErrorCode.INVALID_RECORD, "the partition's records are empty")
    if len(records) > part.max_message_bytes:
        return _refuse(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"batch of {len(records)} bytes exceeds max.message.bytes={part.max_message_bytes}",
        )
    if len(records) > 16 and records[16] != MAGIC:
        return _refuse(
            ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
            f"record batch magic {records[16]} is not supported; use magic 2 (Kafka >= 0.11)",
        )
    try:
        batch = RecordBatch(records).validate()
    except CorruptRecordError as exc:
        return _refuse(ErrorCode.CORRUPT_MESSAGE, str(exc))
    if batch.size_bytes != len(records):
        return _refuse(ErrorCode.INVALID_RECORD, "produce requests carry exactly one batch")
    if batch.size_bytes < HEADER_BYTES or batch.records_count != batch.last_offset_delta + 1:
        return _refuse(ErrorCode.INVALID_RECORD, "record count disagrees with the offset delta")
    if batch.is_control:
        return _refuse(ErrorCode.INVALID_RECORD, "clients may not write control batches")
    refusal = validate_records(
        batch,
        part.config,
        log_append_time=part.log_append_time,
        now_ms=wall_ms() if now_ms is None else now_ms,
    )
    if refusal is not None:
        errors = tuple((i, refusal.message) for i in refusal.bad_records)
        return AppendOutcome(refusal.error, message=refusal.message, record_errors=errors)
    return batch


class _Verification(NamedTuple):
    """A transactional batch held back until the coordinator says its partition is in the
    producer's transaction; ``outcome`` resolves with the append's outcome or the refusal."""

    part: Partition
    batch: RecordBatch
    acks: int
    outcome: Deferred[AppendOutcome]
    guard: VerificationGuard


def _verification_refusal(error: ErrorCode, abortable: bool = False) -> AppendOutcome:
    """The coordinator's answer for a partition, as the produce response gives it (Kafka's
    ``ReplicaManager``: retriable coordinator errors become NOT_ENOUGH_REPLICAS, which every
    producer retries without a metadata refresh; PRODUCER_FENCED, unknown to older Produce
    versions, becomes INVALID_PRODUCER_EPOCH)."""
    if error in RETRIABLE_VERIFICATION_ERRORS:
        return _refuse(
            ErrorCode.NOT_ENOUGH_REPLICAS,
            "unable to verify the partition has been added to the transaction:"
            f" the coordinator answered {error.name}",
        )
    if error is ErrorCode.PRODUCER_FENCED:
        return _refuse(
            ErrorCode.INVALID_PRODUCER_EPOCH, "the producer was fenced by a newer producer epoch"
        )
    if error is ErrorCode.INVALID_TXN_STATE:
        # Produce v11+ clients know the abortable error Kafka's coordinator answers here
        error = ErrorCode.TRANSACTION_ABORTABLE if abortable else error
        return _refuse(error, "the partition was not added to the transaction")
    return _refuse(error, f"the transaction coordinator refused the partition: {error.name}")


class ProduceHandler:
    """``verifier``: the transaction coordinator's KIP-890 check, None when
    ``transaction.partition.verification.enable=false`` (transactional batches are then
    appended unverified, as Kafka does)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        metrics: BrokerMetrics,
        verifier: TransactionVerifier | None,
        hints: LeaderHints | None = None,
    ) -> None:
        self.replicas = replicas
        self.hints = hints  # KIP-951 (None: no hints)
        self.metrics = metrics
        self.verifier = verifier
        # (topic, partition, producer id) -> the verification under way for it: a later one
        # waits, so that batches of one producer reach a partition in the order they came.
        self._verifying: dict[tuple[str, int, int], asyncio.Future[None]] = {}

    def spec(self) -> ApiHandler:
        return ApiHandler(0, 0, 11, self.handle, "Produce")

    def handle(
        self, ctx: RequestContext, req: ProduceRequest
    ) -> (
        ProduceResponse
        | Deferred[ProduceResponse | None]
        | Coroutine[None, None, ProduceResponse | None]
        | None
    ):
        slots: list[tuple[str, int, Outcome]] = []
        held: list[_Verification] = []
        for topic in req.topic_data:
            for pd in topic.partition_data:
                if req.acks not in VALID_ACKS:
                    outcome: Outcome = _refuse(
                        ErrorCode.INVALID_REQUIRED_ACKS, f"acks={req.acks}: use -1, 0 or 1"
                    )
                else:
                    outcome = self._append(ctx, topic.name, pd, req.acks, held)
                slots.append((topic.name, pd.index, outcome))
        if held:
            return self._verify_then_answer(ctx, req, slots, held)
        return self._answer(ctx, req, slots)

    def _answer(
        self, ctx: RequestContext, req: ProduceRequest, slots: list[tuple[str, int, Outcome]]
    ) -> ProduceResponse | Deferred[ProduceResponse | None] | None:
        if req.acks not in VALID_ACKS:
            return self._respond(ctx, slots)
        if req.acks == 0:
            refused = [
                (t, i, o.error) for t, i, o in slots if isinstance(o, AppendOutcome) and o.error
            ]
            if refused:
                # No answer can carry the error: close, so the producer refreshes its metadata
                # (Kafka's handleProduceRequest does the same).  A batch refused after its
                # verification is not among these (a transactional producer uses acks=all).
                log.info("closing an acks=0 connection peer=%s refused=%s", ctx.peer, refused[:3])
                raise CloseConnection
            return None
        waiting = [o for _, _, o in slots if isinstance(o, Deferred) and not o.done]
        if not waiting:
            return self._respond(ctx, slots)
        reply: Deferred[ProduceResponse | None] = Deferred()
        remaining = len(waiting)
        timer: asyncio.TimerHandle | None = None

        def one_done(_: AppendOutcome) -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0:
                if timer is not None:
                    timer.cancel()
                reply.resolve(self._respond(ctx, slots))

        def expire() -> None:
            timed_out = AppendOutcome(
                ErrorCode.REQUEST_TIMED_OUT,
                message=f"not replicated to every in-sync replica within {req.timeout_ms} ms",
            )
            for d in waiting:
                if not d.done:
                    d.resolve(timed_out)

        for d in waiting:
            d.then(one_done)
        if remaining and req.acks == ACKS_ALL:
            timer = asyncio.get_running_loop().call_later(max(0, req.timeout_ms) / 1000, expire)
        return reply

    def _append(
        self,
        ctx: RequestContext,
        topic: str,
        pd: ProduceRequest.PartitionProduceData,
        acks: int,
        held: list[_Verification],
    ) -> Outcome:
        if ctx.api_version < MIN_RECORD_BATCH_VERSION:
            return _refuse(
                ErrorCode.UNSUPPORTED_VERSION,
                "Produce v0-2 (message format v0/v1) is not supported; use Produce v3 or later",
            )
        part = self.replicas.get(topic, pd.index)
        if part is None:
            error = self.replicas.missing_error(topic, pd.index)
            if error is ErrorCode.KAFKA_STORAGE_ERROR:
                return _refuse(error, f"{topic}-{pd.index}: its log directory is offline")
            return _refuse(error, f"{topic}-{pd.index} is unknown")
        batch = validate_batch(part, pd.records, self.replicas.clock_ms())
        if isinstance(batch, AppendOutcome):
            return batch
        if (
            batch.attributes & ATTR_TRANSACTIONAL
            and self.verifier is not None
            and not self.replicas.has_ongoing_transaction(
                part, batch.producer_id, batch.producer_epoch
            )
        ):
            outcome: Deferred[AppendOutcome] = Deferred()
            guard = self.replicas.verification_guard(part, batch.producer_id)
            held.append(_Verification(part, batch, acks, outcome, guard))
            return outcome
        return self.replicas.append_nowait(part, batch, acks)

    # --- KIP-890 part 1 -----------------------------------------------------------------------

    async def _verify_then_answer(
        self,
        ctx: RequestContext,
        req: ProduceRequest,
        slots: list[tuple[str, int, Outcome]],
        held: list[_Verification],
    ) -> ProduceResponse | None:
        """Ask the coordinator once for every held partition, append those in the transaction,
        refuse the others, then answer as ``handle`` does."""
        # Cancelled (shutdown): nothing is appended, the connection closes unanswered.
        await self._verify_and_append(req, held, ctx.api_version >= TRANSACTION_ABORTABLE_VERSION)
        reply = self._answer(ctx, req, slots)
        return await reply if isinstance(reply, Deferred) else reply

    async def _verify_and_append(
        self, req: ProduceRequest, held: list[_Verification], abortable: bool
    ) -> None:
        producers = {(h.batch.producer_id, h.batch.producer_epoch) for h in held}
        if req.transactional_id is None:
            refusal = _refuse(
                ErrorCode.INVALID_TXN_STATE,
                "transactional records without the Produce request's transactional_id",
            )
            for h in held:
                h.outcome.resolve(refusal)
            return
        if len(producers) > 1:
            refusal = _refuse(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                "transactional records of more than one producer id or epoch in one request",
            )
            for h in held:
                h.outcome.resolve(refusal)
            return
        ((producer_id, producer_epoch),) = producers
        keys = [(h.part.topic, h.part.index, producer_id) for h in held]
        earlier = {f for k in keys if (f := self._verifying.get(k)) is not None}
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._verifying[key] = mine
        verdicts: list[AppendOutcome | None] = [None] * len(held)  # None: append it
        try:
            async with asyncio.timeout(max(req.timeout_ms, MIN_VERIFY_TIMEOUT_MS) / 1000):
                if earlier:
                    await asyncio.wait(earlier)
                await self._verify(
                    req.transactional_id, producer_id, producer_epoch, held, verdicts, abortable
                )
        except TimeoutError:
            log.info(
                "transaction verification timed out transactional_id=%s producer_id=%d",
                req.transactional_id,
                producer_id,
            )
            verdicts = [_verification_refusal(ErrorCode.REQUEST_TIMED_OUT)] * len(held)
        finally:
            mine.set_result(None)
            for key in keys:
                if self._verifying.get(key) is mine:
                    del self._verifying[key]
        # Synchronously, in the order the batches came: no other request of the producer
        # slips in between.
        for h, verdict in zip(held, verdicts, strict=True):
            if verdict is not None:
                h.outcome.resolve(verdict)
                continue
            appended = self.replicas.append_nowait(h.part, h.batch, h.acks, h.guard)
            if isinstance(appended, Deferred):
                appended.then(h.outcome.resolve)
            else:
                h.outcome.resolve(appended)

    async def _verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        held: list[_Verification],
        verdicts: list[AppendOutcome | None],
        abortable: bool,
    ) -> None:
        """Fills ``verdicts`` with the refusals of the coordinator's answer."""
        assert self.verifier is not None
        # An earlier request of this producer may have opened the transaction meanwhile.
        ask = [
            i
            for i, h in enumerate(held)
            if not self.replicas.has_ongoing_transaction(h.part, producer_id, producer_epoch)
        ]
        if not ask:
            return
        partitions = [(held[i].part.topic, held[i].part.index) for i in ask]
        answers = await self.verifier.verify(
            transactional_id, producer_id, producer_epoch, partitions
        )
        for i, tp in zip(ask, partitions, strict=True):
            error = answers.get(tp)
            if error is None:
                verdicts[i] = _refuse(
                    ErrorCode.UNKNOWN_SERVER_ERROR, "the coordinator did not answer for it"
                )
            elif error is not ErrorCode.NONE:
                verdicts[i] = _verification_refusal(error, abortable)

    def _respond(
        self, ctx: RequestContext, slots: list[tuple[str, int, Outcome]]
    ) -> ProduceResponse:
        by_topic: dict[str, list[ProduceResponse.PartitionProduceResponse]] = {}
        metrics = self.metrics
        hints = self.hints if ctx.api_version >= NODE_ENDPOINTS_VERSION else None
        leaders: set[int] = set()
        for topic, index, o in slots:
            out = o.result() if isinstance(o, Deferred) else o
            if out.error is not ErrorCode.NONE:
                metrics.partition_error_counter("Produce", out.error).inc()
            part = self.replicas.get(topic, index)
            by_topic.setdefault(topic, []).append(
                ProduceResponse.PartitionProduceResponse(
                    index=index,
                    error_code=out.error,
                    base_offset=out.base_offset,
                    log_append_time_ms=out.log_append_time_ms,
                    log_start_offset=part.log_start_offset if part is not None else -1,
                    error_message=out.message,
                    record_errors=[
                        ProduceResponse.BatchIndexAndErrorMessage(
                            batch_index=i, batch_index_error_message=m
                        )
                        for i, m in out.record_errors
                    ],
                )
            )
            if hints and (leader := hints.current_leader(out.error, topic, index)):
                by_topic[topic][-1].current_leader = ProduceResponse.LeaderIdAndEpoch(
                    leader_id=BrokerId(leader[0]), leader_epoch=leader[1]
                )
                leaders.add(leader[0])
        metrics.produce_latency.observe(time.perf_counter() - ctx.received_s)
        return ProduceResponse(
            responses=[
                ProduceResponse.TopicProduceResponse(name=TopicName(t), partition_responses=p)
                for t, p in by_topic.items()
            ],
            node_endpoints=[
                ProduceResponse.NodeEndpoint(
                    node_id=BrokerId(e.node_id), host=e.host, port=e.port, rack=e.rack
                )
                for e in (hints.endpoints(leaders, ctx.session.listener) if hints else ())
            ],
        )
