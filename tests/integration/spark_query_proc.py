"""A streaming query in its own process, for tests that kill it: reads a topic with the kraft
source in small micro-batches and writes each batch to ``<out>/batch-<id>.json`` with an atomic
rename, so a batch Spark replays after a crash replaces its own file (an idempotent sink).

    python spark_query_proc.py BOOTSTRAP TOPIC OUT_DIR CHECKPOINT_DIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from spark_source import KraftSource


def main() -> None:
    bootstrap, topic, out, checkpoint = sys.argv[1:5]
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.dataSource.register(KraftSource)

    def write_batch(df: Any, batch_id: int) -> None:
        rows = [
            [r.partition, r.offset, bytes(r.value).decode()]
            for r in df.select("partition", "offset", "value").collect()
        ]
        tmp = out_dir / f".batch-{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, out_dir / f"batch-{batch_id}.json")

    query = (
        spark.readStream.format("kraft")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "400")
        .load()
        .writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main()
