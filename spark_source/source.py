"""``KraftSource``: the ``kraft`` data source for ``spark.readStream``, ``spark.read``,
``df.writeStream`` and ``df.write`` (PySpark's Python Data Source API, PySpark >= 4.2).

Options and columns are those of Spark's own Kafka connector; see :mod:`spark_source.options`
for the list and README.md for examples.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_source.options import parse_read_options, parse_write_options
from spark_source.reader import KraftBatchReader, KraftStreamReader
from spark_source.writer import KraftStreamWriter, KraftWriter, check_schema

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long,"
    " timestamp timestamp_ltz, timestampType int"
)
HEADERS = "headers array<struct<key: string, value: binary>>"


class KraftSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kraft"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return f"{SCHEMA}, {HEADERS}" if include else SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return KraftBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KraftStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = parse_write_options(self.options)
        check_schema(schema, options)
        return KraftWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_write_options(self.options)
        check_schema(schema, options)
        return KraftStreamWriter(options)
