"""The sink: ``df.write.format("kraft")`` and ``df.writeStream.format("kraft")``.

Columns, as in Spark's Kafka sink: ``value`` (string or binary, required), ``key`` (string or
binary), ``topic`` (string; the ``topic`` option overrides it), ``partition`` (int; otherwise
Kafka's default partitioner: murmur2 of the key, so keys land where any Kafka producer would put
them), ``headers`` (array of struct<key: string, value: binary>), and ``timestamp`` (the record's
CreateTime; otherwise the time of the write).

Delivery is at least once by default: each task sends its rows with an idempotent producer
(acks=all, so a broker retry never duplicates), and a task Spark retries sends its rows again.
Kafka has no way to take records back, so ``abort`` can only report what was written.

With ``kafka.transactional.id.prefix`` delivery is exactly once for deterministic input: each
task writes its rows in one transaction, fenced per Spark partition, with a marker that lets a
retried or replayed task see that its rows are already committed
(:mod:`spark_source.exactly_once` says how, and what it relies on).  The task commits its own
transaction at the end of ``write``, rather than leaving it open for the driver's
``commit(messages, batchId)`` to end: a transaction open across the whole micro-batch would
hold back every read_committed reader of the topic (the last stable offset) until the slowest
task and the driver finished, would need ``transaction.timeout.ms`` above the batch's
duration, and would lose a batch whose speculative or retried task fenced the attempt whose
commit message Spark kept.  Ending it in the task, a partition's rows appear when its task
ends; a micro-batch is not atomic across partitions (a reader may see some partitions' rows of
a batch before others', or before a failed batch is replayed), but no row appears twice.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from spark_source import client as kafka
from spark_source.exactly_once import (
    MARKER_PARTITION,
    TaskIdentity,
    already_written,
    marker_metadata,
    transactional_id,
)
from spark_source.options import OptionError, WriteOptions
from spark_source.producer import Producer
from spark_source.reader import client_for
from spark_source.transactional_producer import TransactionalProducer

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("spark_source")

_TEXT_OR_BYTES = (StringType, BinaryType)


@dataclass
class Written(WriterCommitMessage):
    records: int
    # exactly-once mode: the transactional id, and whether the rows were found committed
    transactional_id: str | None = None
    already_written: bool = False


# Spark's local properties of a micro-batch's tasks (MicroBatchExecution.BATCH_ID_KEY,
# StreamExecution.QUERY_ID_KEY); the query id is kept in the checkpoint.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def check_schema(schema: StructType, options: WriteOptions) -> None:
    """Refuse at definition time what every task would fail on."""
    types: dict[str, DataType] = {f.name.lower(): f.dataType for f in schema.fields}

    def expect(name: str, allowed: tuple[type[DataType], ...], what: str) -> None:
        if name in types and not isinstance(types[name], allowed):
            raise OptionError(f"column {name} must be {what}, not {types[name].simpleString()}")

    if "value" not in types:
        raise OptionError("the sink needs a value column (string or binary)")
    expect("value", _TEXT_OR_BYTES, "string or binary")
    expect("key", _TEXT_OR_BYTES, "string or binary")
    expect("topic", (StringType,), "string")
    expect("partition", (IntegerType,), "int")
    expect("timestamp", (TimestampType,), "timestamp")
    headers = types.get("headers")
    if headers is not None and not (
        isinstance(headers, ArrayType)
        and isinstance(headers.elementType, StructType)
        and [f.name for f in headers.elementType.fields] == ["key", "value"]
        and isinstance(headers.elementType.fields[0].dataType, StringType)
        and isinstance(headers.elementType.fields[1].dataType, _TEXT_OR_BYTES)
    ):
        raise OptionError("column headers must be array<struct<key: string, value: binary>>")
    if options.topic is None and "topic" not in types:
        raise OptionError("set the topic option or give the rows a topic column")


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    """A column as Python values, strings encoded to UTF-8 bytes, or None if absent."""
    import pyarrow as pa

    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_timestamp(column.type):  # epoch milliseconds, whatever the time zone
        per_ms = {"s": 0.001, "ms": 1, "us": 1000, "ns": 1_000_000}[column.type.unit]
        return [
            None if v is None else int(v // per_ms) for v in column.cast(pa.int64()).to_pylist()
        ]
    return column.to_pylist()  # type: ignore[no-any-return]


def _headers(value: list[dict[str, Any]] | None) -> list[tuple[str, bytes | None]]:
    if not value:
        return []
    return [
        (h["key"], h["value"].encode() if isinstance(h["value"], str) else h["value"])
        for h in value
    ]


def send_rows(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Send every row, then flush; returns how many were acknowledged."""
    client = client_for(options.bootstrap_servers, options.client_config)
    producer = Producer(client, options.client_config)
    try:
        count = send_batches(producer, options, batches)
        producer.flush()
    finally:
        producer.close()
    return count


def send_batches(
    producer: Producer, options: WriteOptions, batches: Iterable[pa.RecordBatch]
) -> int:
    """Hand every row to ``producer`` (not flushed); returns how many."""
    count = 0
    for batch in batches:
        n = batch.num_rows
        values = _column(batch, "value")
        assert values is not None  # check_schema
        keys = _column(batch, "key") or [None] * n
        topics = [options.topic] * n if options.topic else _topics(batch)
        parts = _column(batch, "partition") or [None] * n
        stamps = _column(batch, "timestamp") or [None] * n
        headers = _column(batch, "headers") or [None] * n
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise ValueError("a row has a null topic and no topic option is set")
            producer.send(
                topic,
                values[i],
                key=keys[i],
                headers=_headers(headers[i]),
                partition=parts[i],
                timestamp_ms=stamps[i],
            )
        count += n
    return count


def _topics(batch: pa.RecordBatch) -> list[str | None]:
    """The ``topic`` column (check_schema: present when the topic option is not)."""
    column = batch.column(batch.schema.get_field_index("topic"))
    return column.to_pylist()  # type: ignore[no-any-return]


def _first_topic(options: WriteOptions, batch: pa.RecordBatch) -> str:
    topic = options.topic or _topics(batch.slice(0, 1))[0]
    if topic is None:
        raise ValueError("a row has a null topic and no topic option is set")
    return topic


def write_once(
    options: WriteOptions, task: TaskIdentity, batches: Iterator[pa.RecordBatch]
) -> Written:
    """Exactly-once mode: this task's rows in one transaction, unless its marker says they
    are already committed (see :mod:`spark_source.exactly_once`).  A task without rows
    writes nothing (its replay has none either)."""
    assert options.transactional_id_prefix is not None
    first = next((b for b in batches if b.num_rows), None)
    if first is None:
        return Written(0)
    txn_id = transactional_id(options.transactional_id_prefix, task.partition_id)
    marker = kafka.TopicPartition(_first_topic(options, first), MARKER_PARTITION)
    client = client_for(options.bootstrap_servers, options.client_config)
    producer = TransactionalProducer(client, txn_id, options.client_config)
    try:
        producer.init_transactions()  # fences earlier attempts, aborts what they left open
        committed = client.committed_offsets(txn_id, [marker], require_stable=True)
        if already_written(committed.get(marker), task):
            log.info(
                "%s: batch %d of query %s is already committed; not writing it again",
                txn_id,
                task.batch_id,
                task.query_id,
            )
            return Written(0, txn_id, already_written=True)
        producer.begin_transaction()
        count = send_batches(producer, options, itertools.chain([first], batches))
        producer.send_offsets_to_transaction(
            {marker: (task.batch_id, marker_metadata(task))}, txn_id
        )
        producer.commit_transaction()
        return Written(count, txn_id)
    except BaseException:
        _abort_quietly(producer)
        raise
    finally:
        producer.close()


def _abort_quietly(producer: TransactionalProducer) -> None:
    """End a failed task's transaction now, so read_committed readers need not wait for its
    timeout; a fenced producer cannot (the fencing one already aborted it)."""
    try:
        producer.abort_transaction()
    except kafka.KafkaClientError as exc:
        log.debug("%s: not aborted here (%s)", producer.transactional_id, exc)


def task_identity(write_id: str | None) -> TaskIdentity:
    """This task's identity from Spark's TaskContext: a micro-batch's query and batch ids
    (local properties Spark sets on each batch's jobs), or for a batch write ``write_id``."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the exactly-once sink must run in a Spark task")
    if write_id is not None:
        return TaskIdentity(context.partitionId(), context.attemptNumber(), write_id, 0)
    batch = context.getLocalProperty(BATCH_ID_PROPERTY)
    query = context.getLocalProperty(QUERY_ID_PROPERTY)
    if batch is None or query is None:
        raise RuntimeError(
            f"Spark set no {BATCH_ID_PROPERTY} / {QUERY_ID_PROPERTY} for this streaming task"
        )
    return TaskIdentity(context.partitionId(), context.attemptNumber(), query, int(batch))


def write_task(
    options: WriteOptions, batches: Iterator[pa.RecordBatch], write_id: str | None = None
) -> Written:
    if options.transactional_id_prefix is None:
        return Written(send_rows(options, batches))
    return write_once(options, task_identity(write_id), batches)


def _aborted(options: WriteOptions, what: str, messages: list[WriterCommitMessage | None]) -> None:
    sent = sum(m.records for m in messages if isinstance(m, Written))
    if options.transactional_id_prefix is None:
        log.warning(
            "%s aborted; %d records already written stay in Kafka (at-least-once sink)", what, sent
        )
    else:
        log.warning(
            "%s aborted; %d records of the tasks that committed stay in Kafka, and a replay"
            " does not write them again (exactly-once sink)",
            what,
            sent,
        )


class KraftWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        # One id per write, drawn on the driver and pickled into every task: a retried task
        # of this write finds its marker, a later write does not.
        self.write_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return write_task(self.options, iterator, self.write_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _aborted(self.options, "write", messages)


class KraftStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return write_task(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: each task committed its own transaction (see the module
        docstring)."""
        skipped = [
            m.transactional_id for m in messages if isinstance(m, Written) and m.already_written
        ]
        if skipped:
            log.info("batch %d: already committed by an earlier run for %s", batchId, skipped)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _aborted(self.options, f"batch {batchId}", messages)


__all__ = ["KraftStreamWriter", "KraftWriter", "check_schema"]
