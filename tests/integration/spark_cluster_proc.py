"""Reads a topic on a Spark cluster rather than in local mode: ``local-cluster[2,1,1024]``
starts a standalone master and two workers, each executor a JVM of its own with its own Python
workers, which need only the installed package and a route to the brokers.  Prints one JSON
line: the batch read's rows and the streaming query's rows and executors.

    python spark_cluster_proc.py BOOTSTRAP TOPIC OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession

from spark_source import KraftSource


def main() -> None:
    bootstrap, topic, out = sys.argv[1:4]
    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .config("spark.ui.enabled", "false")
        .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        .getOrCreate()
    )
    spark.dataSource.register(KraftSource)
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
    batch = spark.read.format("kraft").options(**options).load()
    rows = [(r.partition, r.offset) for r in batch.select("partition", "offset").collect()]
    query = (
        spark.readStream.format("kraft")
        .options(**options, startingOffsets="earliest")
        .load()
        .writeStream.format("parquet")
        .option("path", f"{out}/data")
        .option("checkpointLocation", f"{out}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    streamed = spark.read.parquet(f"{out}/data").select("partition", "offset").collect()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # - driver
    print(
        json.dumps({"batch": rows, "stream": [list(r) for r in streamed], "executors": executors})
    )
    spark.stop()


if __name__ == "__main__":
    main()
