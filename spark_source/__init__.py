"""A PySpark data source for kraft brokers (any Kafka cluster speaking the same protocol):
structured-streaming and batch reads of committed records, and a sink.

    from spark_source import KraftSource
    spark.dataSource.register(KraftSource)
    df = spark.readStream.format("kraft").option("kafka.bootstrap.servers", "127.0.0.1:9092") ...

PySpark is imported only when the source is used, so the rest of the package (the client) works
without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_source.source import KraftSource

__all__ = ["KraftSource"]


def __getattr__(name: str) -> Any:
    if name == "KraftSource":
        from spark_source.source import KraftSource

        return KraftSource
    raise AttributeError(name)
