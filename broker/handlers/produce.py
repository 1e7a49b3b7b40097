"""Produce 0-9: validate each partition's batch (header, CRC, its records), append, answer.

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

Versions 0-2 (message format v0/v1) are advertised because librdkafka enables compression
only when Produce v0 is inside the range (as Kafka 4 does, KAFKA-18659), and refused per
partition with a clear message.
"""

from __future__ import annotations

import asyncio
import logging
import time

from broker.deferred import Deferred
from broker.dispatcher import ApiHandler, RequestContext
from broker.log.validator import validate_records
from broker.metrics import BrokerMetrics
from broker.partition import AppendOutcome, Partition
from broker.replica_manager import ReplicaManager
from broker.server import CloseConnection
from kafka_protocol.clock import wall_ms
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.messages import ProduceRequest, ProduceResponse
from kafka_protocol.record_batch import HEADER_BYTES, MAGIC, RecordBatch
from kafka_protocol.types import TopicName

log = logging.getLogger("broker.produce")

MIN_RECORD_BATCH_VERSION = 3
ACKS_ALL = -1
VALID_ACKS = (-1, 0, 1)
Outcome = AppendOutcome | Deferred[AppendOutcome]


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
        errors = () if refusal.record_index < 0 else ((refusal.record_index, refusal.message),)
        return AppendOutcome(refusal.error, message=refusal.message, record_errors=errors)
    return batch


class ProduceHandler:
    def __init__(self, replicas: ReplicaManager, metrics: BrokerMetrics) -> None:
        self.replicas = replicas
        self.metrics = metrics

    def spec(self) -> ApiHandler:
        return ApiHandler(0, 0, 9, self.handle, "Produce")

    def handle(
        self, ctx: RequestContext, req: ProduceRequest
    ) -> ProduceResponse | Deferred[ProduceResponse | None] | None:
        slots: list[tuple[str, int, Outcome]] = []
        for topic in req.topic_data:
            for pd in topic.partition_data:
                if req.acks not in VALID_ACKS:
                    outcome: Outcome = _refuse(
                        ErrorCode.INVALID_REQUIRED_ACKS, f"acks={req.acks}: use -1, 0 or 1"
                    )
                else:
                    outcome = self._append(ctx, topic.name, pd, req.acks)
                slots.append((topic.name, pd.index, outcome))
        if req.acks not in VALID_ACKS:
            return self._respond(ctx, slots)
        if req.acks == 0:
            refused = [
                (t, i, o.error) for t, i, o in slots if isinstance(o, AppendOutcome) and o.error
            ]
            if refused:
                # No answer can carry the error: close, so the producer refreshes its metadata
                # (Kafka's handleProduceRequest does the same).
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
        self, ctx: RequestContext, topic: str, pd: ProduceRequest.PartitionProduceData, acks: int
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
        return self.replicas.append_nowait(part, batch, acks)

    def _respond(
        self, ctx: RequestContext, slots: list[tuple[str, int, Outcome]]
    ) -> ProduceResponse:
        by_topic: dict[str, list[ProduceResponse.PartitionProduceResponse]] = {}
        metrics = self.metrics
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
        metrics.produce_latency.observe(time.perf_counter() - ctx.received_s)
        return ProduceResponse(
            responses=[
                ProduceResponse.TopicProduceResponse(name=TopicName(t), partition_responses=p)
                for t, p in by_topic.items()
            ]
        )
