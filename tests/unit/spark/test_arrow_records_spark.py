"""``to_arrow``'s batches as a real Spark reads them from a Python data source: PySpark's worker
compares the first batch's schema with the declared one (``Schema.equals``) and the JVM loads
the buffers, so a wrong type, nullability or layout fails here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_protocol.compression import Compression
from kafka_protocol.record_batch import ControlRecordType, SimpleRecord, build_batch, control_record
from spark_source._arrow_reference import reference_rows
from spark_source.arrow_records import to_arrow

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[3]
TOPIC, PARTITION = "events", 3
T0 = 1_700_000_000_000
COLUMNS = (
    "key binary, value binary, topic string, partition int, offset long,"
    " timestamp timestamp, timestampType int"
)
HEADERS = "headers array<struct<key: string, value: binary>>"


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with pytest.MonkeyPatch.context() as patch:
        # Spark's Python workers import spark_source and kafka_protocol from the checkout.
        path = os.environ.get("PYTHONPATH")
        patch.setenv("PYTHONPATH", f"{REPO}{os.pathsep}{path}" if path else str(REPO))
        session = (
            SparkSession.builder.master("local[2]")
            .appName("arrow-records-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            # Not UTC: the worker converts with UTC whatever the session's zone is.
            .config("spark.sql.session.timeZone", "America/New_York")
            .getOrCreate()
        )
        yield session
        session.stop()


def chunk() -> bytes:
    """Every codec, both timestamp types, null and empty keys and values, headers with null
    values, a control batch and a truncated batch at the end."""
    parts, offset = [], 100
    for i, codec in enumerate(Compression):
        recs = [
            SimpleRecord(
                value=None if j == 3 else bytes([j]) * (j * 37 % 300),
                key=None if j % 2 else b"" if j == 4 else b"key-%d" % j,
                headers=[("trace", b"t%d" % j), ("empty", None)] if j % 4 == 1 else (),
                timestamp=T0 + j,
            )
            for j in range(40)
        ]
        parts.append(
            build_batch(recs, base_offset=offset, compression=codec, log_append_time=i == 2)
        )
        offset += len(recs)
        if i == 1:
            marker = control_record(ControlRecordType.COMMIT, bytes(6))
            parts.append(build_batch([marker], base_offset=offset, control=True))
            offset += 1
    tail = build_batch([SimpleRecord(value=b"cut")], base_offset=offset)
    return b"".join(parts) + tail[:30]


def register(session: SparkSession, data: bytes, start: int, end: int, headers: bool) -> str:
    name = f"arrow_records_{'h' if headers else 'p'}_{start}_{end}"

    class Reader(DataSourceReader):  # type: ignore[misc]
        def read(self, partition: InputPartition) -> Iterator[Any]:
            yield from to_arrow(data, TOPIC, PARTITION, start, end, headers)

    class Source(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self) -> str:
            return f"{COLUMNS}, {HEADERS}" if headers else COLUMNS

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader()

    session.dataSource.register(Source)
    return name


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize(("start", "end"), [(0, 10**6), (117, 163)])
def test_spark_reads_the_batches(spark: SparkSession, headers: bool, start: int, end: int) -> None:
    data = chunk()
    name = register(spark, data, start, end, headers)
    columns = ["key", "value", "topic", "partition", "offset", "timestampType"]
    exprs = [*columns, "unix_micros(timestamp) AS timestamp"] + (["headers"] if headers else [])
    got = [
        row.asDict(recursive=True)
        for row in spark.read.format(name).load().selectExpr(*exprs).collect()
    ]
    for row in got:
        for column in ("key", "value"):
            row[column] = None if row[column] is None else bytes(row[column])
        if row.get("headers"):
            row["headers"] = [
                {"key": h["key"], "value": None if h["value"] is None else bytes(h["value"])}
                for h in row["headers"]
            ]
    want = reference_rows(data, TOPIC, PARTITION, start, end, headers)
    assert sorted(got, key=lambda r: r["offset"]) == want
    assert len(want) == (200 if end > 10**5 else 46)  # the control record is not a row
    assert any(r["timestampType"] == 1 for r in want) == (end > 10**5)
    assert any(r.get("headers") for r in want) == headers
