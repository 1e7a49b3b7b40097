"""A synchronous, idempotent Kafka producer for the Spark sink.

Theory of operation
-------------------
:meth:`Producer.send` picks the partition (the given one; else murmur2 of the key, exactly as
Java's and librdkafka's ``murmur2_random`` default partitioners; else a *sticky* partition for
unkeyed records, chosen at random and kept until its batch is full, as Java does since
KIP-480) and appends the record to that partition's open batch.  A batch is closed when the
next record would take it past ``batch.size`` (estimated from the uncompressed record sizes)
and is then built: compressed, numbered with the partition's next sequence, stamped with the
producer id.  Closed batches wait in per-partition queues; once they add up to
:data:`MAX_IN_FLIGHT` requests' worth, :meth:`send` drains them, and :meth:`flush` closes every
batch and drains everything.

Draining is rounds of Produce requests (acks=all): per leader, up to :data:`MAX_IN_FLIGHT`
pipelined requests, the *k*-th holding the *k*-th queued batch of each of its partitions
(Produce v3+ takes one batch per partition), so a partition's batches reach its leader in
sequence order.  Per partition, batches succeed in order up to the first one that fails; it
and those after it are retried as they are (same bytes, same sequence numbers) after a backoff
and a metadata refresh, so a batch the broker had appended before the answer was lost is
deduplicated (DUPLICATE_SEQUENCE_NUMBER, or success with its first offset), also by a new
leader.  Retriable errors and lost connections are retried until ``delivery.timeout.ms``
passes without progress (:class:`OperationTimedOut` / :class:`ConnectionFailed`); anything
else (MESSAGE_TOO_LARGE, authorization, OUT_OF_ORDER_SEQUENCE_NUMBER, a fenced or unknown
producer id) raises :class:`ProduceError` at once.  A record too large for
``max.request.size`` is refused by :meth:`send` itself.  Topics are not created: an unknown
topic raises :class:`TopicNotFound`.

Honoured config keys (Kafka producer names, without Spark's ``kafka.`` prefix; others, such
as ``linger.ms`` or ``max.in.flight.requests.per.connection``, are ignored): ``acks`` (``all``
= ``-1``, the default, or ``1``; ``0`` is refused), ``enable.idempotence`` (true; needs
acks=all; unset with ``acks=1`` it turns off, as in Java), ``compression.type`` (none, gzip,
snappy, lz4, zstd), ``compression.gzip.level``, ``compression.lz4.level``,
``compression.zstd.level``, ``batch.size`` (16384), ``max.request.size`` (1048576),
``buffer.memory`` (33554432: buffered bytes that force a flush), ``delivery.timeout.ms``
(120000), and the client's ``request.timeout.ms`` (the Produce timeout) and retry backoffs.
The producer uses, and never closes, the :class:`KafkaClient` it is given.
"""

from __future__ import annotations

import collections
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from kafka_protocol._codec import Response
from kafka_protocol.clock import wall_ms
from kafka_protocol.compression import Compression
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka_protocol.partitioner import partition_for_key
from kafka_protocol.record_batch import (
    HEADER_BYTES,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    SimpleRecord,
    build_batch,
)
from kafka_protocol.types import TopicName, TransactionalId
from spark_source._client_config import bool_option, int_option
from spark_source._client_conn import MAX_IN_FLIGHT, Attempts, Versions
from spark_source._client_types import (
    BrokerError,
    ConfigError,
    ConnectionFailed,
    KafkaClientError,
    ProduceError,
    TopicNotFound,
    TopicPartition,
)
from spark_source.client import NO_CONFIG, Address, KafkaClient

__all__ = ["Producer", "ProducerConfig"]

log = logging.getLogger(__name__)

PRODUCE: Final = Versions(0, 3, 9)  # v3: RecordBatch v2
INIT_PRODUCER_ID: Final = Versions(22, 0, 4)
ACKS_ALL: Final = -1
ACKS_LEADER: Final = 1
ANSWER_MARGIN_MS: Final = 1000  # past the Produce timeout, so that the broker times out first
RECORD_OVERHEAD_BYTES: Final = 21  # a record's length, attributes, deltas and size varints
_INT32_MAX: Final = 2**31 - 1
_SEQUENCE_MASK: Final = 0x7FFFFFFF  # sequences wrap at int32 max, as Kafka's do
# Answers that mean the batch is in the log: its first append's, or a retry of it.
_WRITTEN: Final = frozenset({ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER})


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """The producer keys honoured (see the module docstring)."""

    acks: int = ACKS_ALL
    idempotent: bool = True
    compression: Compression = Compression.NONE
    compression_level: int | None = None
    batch_size: int = 16_384
    max_request_size: int = 1_048_576
    buffer_memory: int = 33_554_432
    delivery_timeout_ms: int = 120_000

    @classmethod
    def from_mapping(cls, config: Mapping[str, str]) -> ProducerConfig:
        acks = _acks(config.get("acks", "all"))
        idempotent = bool_option(config, "enable.idempotence", acks == ACKS_ALL)
        if idempotent and acks != ACKS_ALL:
            raise ConfigError("enable.idempotence=true needs acks=all")
        try:
            compression = Compression.from_name(config.get("compression.type", "none").strip())
        except ValueError as exc:
            raise ConfigError(f"compression.type: {exc}") from None
        level = None
        if compression is not Compression.NONE and compression is not Compression.SNAPPY:
            key = f"compression.{compression.name.lower()}.level"
            if key in config:
                level = int_option(config, key, 0, -_INT32_MAX, _INT32_MAX)
        return cls(
            acks=acks,
            idempotent=idempotent,
            compression=compression,
            compression_level=level,
            batch_size=int_option(config, "batch.size", 16_384, 0, _INT32_MAX),
            max_request_size=int_option(config, "max.request.size", 1_048_576, 1, _INT32_MAX),
            buffer_memory=int_option(config, "buffer.memory", 33_554_432, 0, 2**63 - 1),
            delivery_timeout_ms=int_option(config, "delivery.timeout.ms", 120_000, 1, _INT32_MAX),
        )


def _acks(raw: str) -> int:
    text = str(raw).strip().lower()
    if text in ("all", "-1"):
        return ACKS_ALL
    if text == "1":
        return ACKS_LEADER
    raise ConfigError(f"acks={raw!r}: use all (-1) or 1 (acks=0 is not supported)")


def record_size(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    """A record's encoded size, closely enough to fill batches (varints counted as 5)."""
    size = RECORD_OVERHEAD_BYTES + len(key or b"") + len(value or b"")
    for name, data in headers:
        size += 10 + len(name.encode()) + len(data or b"")
    return size


Header = tuple[str, bytes | None]


@dataclass(slots=True)
class _OpenBatch:
    records: list[SimpleRecord] = field(default_factory=list)
    size_bytes: int = HEADER_BYTES


@dataclass(slots=True)
class _Batch:
    """A built batch waiting for its acknowledgement."""

    data: bytes
    record_count: int


class Producer:
    """Buffers records per partition and writes them with acks=all, idempotently (see the
    module docstring)."""

    def __init__(self, client: KafkaClient, config: Mapping[str, str] = NO_CONFIG) -> None:
        self.client = client
        self.config = ProducerConfig.from_mapping(config)
        self._partition_counts: dict[str, int] = {}
        self._sticky: dict[str, int] = {}  # topic -> partition of its unkeyed records
        self._previous_sticky: dict[str, int] = {}
        self._open: dict[TopicPartition, _OpenBatch] = {}
        self._ready: dict[TopicPartition, collections.deque[_Batch]] = {}
        self._ready_bytes = 0
        self._open_bytes = 0
        self._sequences: dict[TopicPartition, int] = {}
        self._producer_id = NO_PRODUCER_ID
        self._producer_epoch = NO_PRODUCER_EPOCH
        # set by TransactionalProducer: batches say so, and Produce names the id (KIP-890)
        self._transactional = False
        self._transactional_id: TransactionalId | None = None
        self._closed = False
        self._failure: BrokerError | None = None

    @property
    def buffered_bytes(self) -> int:
        return self._ready_bytes + self._open_bytes

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Buffer one record (written by a later :meth:`flush`, or sooner once batches fill).
        ``timestamp_ms`` defaults to now (CreateTime)."""
        self._check_usable()
        size = record_size(key, value, headers)
        if size + HEADER_BYTES > self.config.max_request_size:
            raise ProduceError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"a record of about {size} bytes is larger than max.request.size"
                f" ({self.config.max_request_size})",
                TopicPartition(topic, -1 if partition is None else partition),
            )
        tp = TopicPartition(topic, self._partition(topic, key, partition))
        if timestamp_ms is None:
            timestamp_ms = wall_ms()
        record = SimpleRecord(value, key, tuple(headers), timestamp_ms)
        self._append(tp, record, size, sticky=key is None and partition is None)
        if self.buffered_bytes >= self.config.buffer_memory:
            self.flush()
        elif self._ready_bytes >= MAX_IN_FLIGHT * self.config.max_request_size:
            self._drain()

    def flush(self) -> None:
        """Write everything buffered; raise if any of it cannot be written.  After a
        :class:`ProduceError` the producer is unusable (its sequences have a gap)."""
        self._check_usable()
        for tp in list(self._open):
            self._close_batch(tp)
        self._drain()

    def close(self) -> None:
        """Drop what was not flushed (call :meth:`flush` first to write it)."""
        self._open.clear()
        self._ready.clear()
        self._ready_bytes = self._open_bytes = 0
        self._closed = True

    def _check_usable(self) -> None:
        if self._closed:
            raise KafkaClientError("the producer is closed")
        if self._failure is not None:
            raise KafkaClientError(f"the producer failed: {self._failure}") from self._failure

    # --- partitioning and batching --------------------------------------------------------------

    def _partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            count = self.client.partition_counts([topic]).get(topic)
            if count is None:
                raise TopicNotFound(topic)
            self._partition_counts[topic] = count
        if partition is not None:
            if not 0 <= partition < count:
                raise TopicNotFound(topic, partition)
            return partition
        if key is not None:
            return partition_for_key(key, count)
        sticky = self._sticky.get(topic)
        if sticky is None:
            previous = self._previous_sticky.get(topic)
            choices = [p for p in range(count) if p != previous] or [0]
            sticky = self._sticky[topic] = self._previous_sticky[topic] = random.choice(choices)
        return sticky

    def _append(self, tp: TopicPartition, record: SimpleRecord, size: int, sticky: bool) -> None:
        batch = self._open.get(tp)
        if batch is not None and batch.size_bytes + size > self.config.batch_size:
            self._close_batch(tp)
            if sticky:  # the partition changed with the full batch: the record moves with it
                tp = TopicPartition(tp.topic, self._partition(tp.topic, None, None))
            batch = self._open.get(tp)
            if batch is not None and batch.size_bytes + size > self.config.batch_size:
                self._close_batch(tp)
                batch = None
        if batch is None:
            batch = self._open[tp] = _OpenBatch()
            self._open_bytes += batch.size_bytes
        batch.records.append(record)
        batch.size_bytes += size
        self._open_bytes += size

    def _close_batch(self, tp: TopicPartition) -> None:
        if self.config.idempotent and self._producer_id == NO_PRODUCER_ID:
            self._init_producer_id()  # before the batch leaves _open: this may raise
        batch = self._open.pop(tp)
        self._open_bytes -= batch.size_bytes
        if self._sticky.get(tp.topic) == tp.partition:  # KIP-480: a full batch moves on
            del self._sticky[tp.topic]
        sequence = NO_SEQUENCE
        if self.config.idempotent:
            sequence = self._sequences.get(tp, 0)
            self._sequences[tp] = (sequence + len(batch.records)) & _SEQUENCE_MASK
        data = build_batch(
            batch.records,
            compression=self.config.compression,
            level=self.config.compression_level,
            producer_id=self._producer_id,
            producer_epoch=self._producer_epoch,
            base_sequence=sequence,
            transactional=self._transactional,
        )
        self._ready.setdefault(tp, collections.deque()).append(_Batch(data, len(batch.records)))
        self._ready_bytes += len(data)

    def _init_producer_id(self) -> None:
        attempts = Attempts(self.client.config, "InitProducerId")
        while True:
            response = self.client.cluster.request_any(
                InitProducerIdRequest(transactional_id=None), INIT_PRODUCER_ID, attempts
            )
            assert isinstance(response, InitProducerIdResponse)
            error = ErrorCode.from_code(response.error_code)
            if error is ErrorCode.NONE:
                self._producer_id = response.producer_id
                self._producer_epoch = response.producer_epoch
                return
            if not error.retriable:
                raise ProduceError(error, "InitProducerId")
            attempts.retry(error)

    # --- draining -------------------------------------------------------------------------------

    def _drain(self) -> None:
        """Produce rounds until no batch is queued (see the module docstring)."""
        attempts = Attempts(self.client.config, "Produce", self.config.delivery_timeout_ms)
        while self._ready:
            plan = self._plan(attempts)
            planned = {tp for rounds in plan.values() for batches in rounds for tp in batches}
            leaderless = set(self._ready) - planned
            answers = self.client.cluster.exchange(
                {a: [self._request(r) for r in rounds] for a, rounds in plan.items()},
                PRODUCE,
                attempts.request_deadline(ANSWER_MARGIN_MS),
            )
            written, failed = self._settle(plan, answers, attempts)
            if written:
                attempts.progressed()
            if failed or leaderless:
                attempts.retry()  # back off only when something went wrong

    def _plan(self, attempts: Attempts) -> dict[Address, list[dict[TopicPartition, _Batch]]]:
        """Per leader, up to MAX_IN_FLIGHT requests: the k-th queued batch of each partition
        in the k-th, within max.request.size (a partition stops at the first that does not
        fit, so its batches stay in order)."""
        plan: dict[Address, list[dict[TopicPartition, _Batch]]] = {}
        sizes: dict[tuple[Address, int], int] = {}
        for address, tps in self.client.cluster.leaders_of(self._ready, attempts).items():
            rounds = plan.setdefault(address, [])
            for tp in tps:
                for k, batch in enumerate(list(self._ready[tp])[:MAX_IN_FLIGHT]):
                    size = sizes.get((address, k), 0)
                    if size and size + len(batch.data) > self.config.max_request_size:
                        break
                    if k == len(rounds):
                        rounds.append({})
                    rounds[k][tp] = batch
                    sizes[address, k] = size + len(batch.data)
        return plan

    def _request(self, batches: Mapping[TopicPartition, _Batch]) -> ProduceRequest:
        by_topic: dict[str, list[ProduceRequest.PartitionProduceData]] = {}
        for tp, batch in batches.items():
            by_topic.setdefault(tp.topic, []).append(
                ProduceRequest.PartitionProduceData(index=tp.partition, records=batch.data)
            )
        return ProduceRequest(
            transactional_id=self._transactional_id,
            acks=self.config.acks,
            timeout_ms=self.client.config.request_timeout_ms,
            topic_data=[
                ProduceRequest.TopicProduceData(name=TopicName(t), partition_data=ps)
                for t, ps in by_topic.items()
            ],
        )

    def _settle(
        self,
        plan: Mapping[Address, list[dict[TopicPartition, _Batch]]],
        answers: Mapping[Address, list[Response | ConnectionFailed]],
        attempts: Attempts,
    ) -> tuple[bool, bool]:
        """Dequeue the batches written, in order per partition: (whether any was, whether
        any was not)."""
        outcomes: dict[TopicPartition, list[ErrorCode | ConnectionFailed]] = {}
        for address, rounds in plan.items():
            for batches, answer in zip(rounds, answers[address], strict=True):
                for tp in batches:
                    outcomes.setdefault(tp, []).append(_outcome(answer, tp))
        written = failed = False
        for tp, results in outcomes.items():
            for result in results:
                if result not in _WRITTEN:
                    self._failed(tp, result, attempts)
                    failed = True
                    break  # the batches after it are retried too, deduplicated if written
                self._dequeue(tp)
                written = True
        return written, failed

    def _dequeue(self, tp: TopicPartition) -> None:
        queue = self._ready[tp]
        self._ready_bytes -= len(queue.popleft().data)
        if not queue:
            del self._ready[tp]

    def _failed(
        self, tp: TopicPartition, result: ErrorCode | ConnectionFailed, attempts: Attempts
    ) -> None:
        """The first batch of ``tp`` not written this round: retry it, or raise.  (An
        OUT_OF_ORDER_SEQUENCE_NUMBER answer to a later batch in flight behind a failed one is
        never looked at: the first failure decides.)"""
        self.client.cluster.invalidate(tp)
        if isinstance(result, ConnectionFailed) or result.retriable:
            log.debug("retrying the batches of %s: %s", tp, result)
            attempts.note(result)
            return
        self._failure = ProduceError(result, "Produce", tp)
        raise self._failure


def _outcome(
    answer: Response | ConnectionFailed, tp: TopicPartition
) -> ErrorCode | ConnectionFailed:
    if isinstance(answer, ConnectionFailed):
        return answer
    assert isinstance(answer, ProduceResponse)
    for topic in answer.responses:
        if topic.name != tp.topic:
            continue
        for p in topic.partition_responses:
            if p.index == tp.partition:
                return ErrorCode.from_code(p.error_code)
    return ErrorCode.UNKNOWN_SERVER_ERROR
