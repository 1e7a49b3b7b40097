"""A read-process-write streaming query in its own process, for tests that kill it: reads a
topic read_committed with the kraft source in small micro-batches, turns each value into
``out:<topic>:<partition>:<offset>:<value>`` and writes it through the kraft sink's
exactly-once mode (one transaction per task, transactional ids ``<prefix>-<partition>``).

    python spark_eos_query_proc.py BOOTSTRAP IN_TOPIC OUT_TOPIC CHECKPOINT_DIR PREFIX
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as f

from spark_source import KraftSource


def main() -> None:
    bootstrap, source, sink, checkpoint, prefix = sys.argv[1:6]
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.dataSource.register(KraftSource)
    rows = (
        spark.readStream.format("kraft")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .option("maxOffsetsPerTrigger", "300")
        .load()
    )
    out = rows.select(
        f.col("key"),
        f.concat_ws(
            ":",
            f.lit("out"),
            f.col("topic"),
            f.col("partition").cast("string"),
            f.col("offset").cast("string"),
            f.col("value").cast("string"),
        ).alias("value"),
    )
    query = (
        out.writeStream.format("kraft")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("kafka.transactional.id.prefix", prefix)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main()
