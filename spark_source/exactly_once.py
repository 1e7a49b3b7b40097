"""The sink's exactly-once mode, the pure part: which transactional id and marker a Spark task
uses, and whether the rows it is asked to write are already in Kafka.

Theory of operation
-------------------
With ``kafka.transactional.id.prefix=P`` each Spark task writes all its rows in one Kafka
transaction of the transactional id ``P-<partition id>``: stable for a given Spark partition
of the query, across task retries, micro-batches and restarts.  In the same transaction it
commits a *marker*, an offset commit in the group ``P-<partition id>`` for partition 0 of the
sink's topic (the ``topic`` option, else the first row's topic): offset = the micro-batch id,
metadata = ``{"query": <Spark's query id>, "batch": <id>}``.  Records and marker become
visible together or not at all.  A task::

    1. InitProducerId(P-<partition>)   fences every earlier attempt of this partition (a
                                       zombie can no longer write or commit) and aborts the
                                       transaction it left open
    2. OffsetFetch(require_stable)     reads the marker, waiting for any transaction that is
                                       still completing
    3. marker >= this batch, same      the batch's rows for this partition are already
       query                           committed: write nothing
    4. otherwise                       begin, send every row, commit the marker, EndTxn(commit)

Spark's query id is kept in the checkpoint, so a restarted query replays its last batch under
the same query id and batch id, and step 3 recognises what an earlier run committed; a new
checkpoint (a new query id) never skips.  For ``df.write`` (no micro-batches) the query id is
an id drawn once per write on the driver and the batch id is 0: a retried task does not write
twice, and every new write writes.

What it relies on: a replayed task of partition *p* of batch *b* receives the same rows as
the first attempt.  That holds when the rows reaching the sink are a deterministic function of
the batch's input, partitioned deterministically (the kraft source replays the same offset
ranges; hash shuffles are deterministic; ``repartition(n)`` without columns, ``rand()``,
``current_timestamp()`` or an input that changes between attempts are not).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

MARKER_PARTITION: Final = 0
NO_MARKER: Final = None


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """Who is writing: the Spark partition, which attempt of it, and what rows (the query and
    its micro-batch)."""

    partition_id: int
    attempt: int
    query_id: str
    batch_id: int


def transactional_id(prefix: str, partition_id: int) -> str:
    """The transactional id of a Spark partition's writes (also its marker's group id)."""
    return f"{prefix}-{partition_id}"


def marker_metadata(task: TaskIdentity) -> str:
    return json.dumps({"query": task.query_id, "batch": task.batch_id}, separators=(",", ":"))


def already_written(marker: tuple[int, str] | None, task: TaskIdentity) -> bool:
    """Whether the committed marker (offset, metadata) says this task's rows are in Kafka:
    the same query committed this micro-batch or a later one."""
    if marker is None:
        return False
    offset, metadata = marker
    try:
        written = json.loads(metadata)
    except ValueError:
        return False
    if not isinstance(written, dict) or written.get("query") != task.query_id:
        return False
    return offset >= task.batch_id


__all__ = ["TaskIdentity", "already_written", "marker_metadata", "transactional_id"]
