"""The obvious, slow :func:`~spark_source.arrow_records.to_arrow`: kafka_protocol's record
iteration, one Python row per record.  The oracle of the tests and the benchmark's baseline;
not used when reading."""

from __future__ import annotations

from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from kafka_protocol._codec import Buffer
from kafka_protocol.record_batch import iter_batches
from spark_source.arrow_records import kafka_schema


def reference_rows(
    chunk: Buffer, topic: str, partition: int, start: int, end: int, include_headers: bool
) -> list[dict[str, Any]]:
    """Rows as dicts of Python values (timestamps in microseconds)."""
    rows = []
    for batch in iter_batches(chunk, allow_truncated_tail=True):
        batch.validate()
        if batch.is_control or batch.last_offset < start or batch.base_offset >= end:
            continue
        kind = 1 if batch.is_log_append_time else 0
        for record in batch.iter_records():
            if not start <= record.offset < end:
                continue
            row: dict[str, Any] = {
                "key": record.key,
                "value": record.value,
                "topic": topic,
                "partition": partition,
                "offset": record.offset,
                "timestamp": record.timestamp * 1000,
                "timestampType": kind,
            }
            if include_headers:
                row["headers"] = (
                    [{"key": k, "value": v} for k, v in record.headers] if record.headers else None
                )
            rows.append(row)
    return rows


def reference_batch(
    chunk: Buffer, topic: str, partition: int, start: int, end: int, include_headers: bool
) -> pa.RecordBatch:
    """:func:`reference_rows` as one Arrow batch of ``kafka_schema(include_headers)``."""
    schema = kafka_schema(include_headers)
    rows = reference_rows(chunk, topic, partition, start, end, include_headers)
    columns = [[row[name] for row in rows] for name in schema.names]
    arrays = [
        pa.array(column, type=f.type) if f.name != "timestamp" else _timestamps(column)
        for f, column in zip(schema, columns, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _timestamps(micros: list[int]) -> pa.Array:
    return pa.array(micros, type=pa.int64()).cast(kafka_schema(False).field("timestamp").type)
