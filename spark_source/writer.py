"""The sink: ``df.write.format("kraft")`` and ``df.writeStream.format("kraft")``.

Columns, as in Spark's Kafka sink: ``value`` (string or binary, required), ``key`` (string or
binary), ``topic`` (string; the ``topic`` option overrides it), ``partition`` (int; otherwise
Kafka's default partitioner: murmur2 of the key, so keys land where any Kafka producer would put
them), ``headers`` (array of struct<key: string, value: binary>), and ``timestamp`` (the record's
CreateTime; otherwise the time of the write).

Delivery is at least once: each task sends its rows with an idempotent producer (acks=all, so
a broker retry never duplicates), and a task Spark retries sends its rows again.  Kafka has no
way to take records back, so ``abort`` can only report what was written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
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

from spark_source.options import OptionError, WriteOptions
from spark_source.producer import Producer
from spark_source.reader import client_for

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("spark_source")

_TEXT_OR_BYTES = (StringType, BinaryType)


@dataclass
class Written(WriterCommitMessage):
    records: int


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
    count = 0
    try:
        for batch in batches:
            n = batch.num_rows
            values = _column(batch, "value")
            assert values is not None  # check_schema
            keys = _column(batch, "key") or [None] * n
            topics = [options.topic] * n if options.topic else _column(batch, "topic")
            assert topics is not None
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
        producer.flush()
    finally:
        producer.close()
    return count


class KraftWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return Written(send_rows(self.options, iterator))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = sum(m.records for m in messages if isinstance(m, Written))
        log.warning(
            "write aborted; %d records already written stay in Kafka (at-least-once sink)", sent
        )


class KraftStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return Written(send_rows(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent = sum(m.records for m in messages if isinstance(m, Written))
        log.warning(
            "batch %d aborted; %d records already written stay in Kafka (at-least-once sink)",
            batchId,
            sent,
        )


__all__ = ["KraftStreamWriter", "KraftWriter", "check_schema"]
