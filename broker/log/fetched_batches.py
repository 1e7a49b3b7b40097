"""``check_fetched_batches``: the checks on batches a follower copies from its leader (Kafka's
``analyzeAndValidateRecords`` for ``appendAsFollower``), done before anything is written.

A Fetch response carries whole RecordBatch v2 batches exactly as the leader stores them,
offsets and partition leader epochs already assigned, and may end with a partial batch (the
leader cuts at ``max_bytes``, KIP-74), which is left for the next fetch::

    | batch | batch |   gap   | batch | partial... |
      base offsets strictly increasing, no overlap, the first at or above the log end offset
      (a gap is allowed: compaction removes batches); partition leader epochs never
      decreasing and none below the log's latest epoch; each batch passes
      ``RecordBatch.validate`` (magic, lengths, CRC32C) and the record walk
      (``records_problem``: every record well formed, decompressing if compressed)

Any failure refuses the whole run (a ``InvalidFollowerAppendError``).  Nothing is copied: the
result holds views of the caller's buffer, written to the segment as they are, and the header
fields the caller needs for idempotent-producer state, so that nobody parses a record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from broker.log.config import INT32_MAX
from broker.log.errors import AppendOffsetError, CorruptBatchError, LeaderEpochOrderError
from broker.log.file_records import BatchHeader
from broker.log.txn_index import read_marker
from broker.log.validator import records_problem
from broker.storage import Buffer
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.record_batch import (
    NO_PARTITION_LEADER_EPOCH,
    ControlRecordType,
    RecordBatch,
    iter_batches,
)


class AppendedBatch(NamedTuple):
    """The header fields of one appended batch that producer state needs."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    transactional: bool = False
    marker: tuple[ControlRecordType, int] | None = None  # a control batch's type and epoch
    control: bool = False


@dataclass(slots=True)
class FetchedBatches:
    """The complete batches of a fetched run, checked, in offset order."""

    views: list[memoryview]  # each batch: a slice of the caller's buffer
    headers: list[BatchHeader]  # for the segment and its indexes
    batches: list[AppendedBatch]  # for the caller
    size_bytes: int  # of the complete batches (a partial tail is not counted)


def check_fetched_batches(
    data: Buffer, *, log_end_offset: int, latest_epoch: int | None
) -> FetchedBatches:
    """Check every complete batch of ``data`` against the log it is to extend."""
    fetched = FetchedBatches([], [], [], 0)
    next_offset = log_end_offset
    min_epoch = NO_PARTITION_LEADER_EPOCH if latest_epoch is None else latest_epoch
    batches = iter_batches(data, allow_truncated_tail=True)
    while True:
        try:
            batch = next(batches, None)
            if batch is None:
                return fetched
            problem = records_problem(batch.validate())
            marker = read_marker(batch) if batch.is_control and problem is None else None
        except CorruptRecordError as error:
            raise CorruptBatchError(f"batch at byte {fetched.size_bytes}: {error}") from error
        if problem is not None:
            raise CorruptBatchError(f"batch at byte {fetched.size_bytes}: {problem}")
        _check_order(batch, next_offset, min_epoch, log_end_offset)
        next_offset = batch.next_offset
        min_epoch = batch.partition_leader_epoch
        _add(fetched, batch, marker)


def _check_order(batch: RecordBatch, next_offset: int, min_epoch: int, log_end_offset: int) -> None:
    base, epoch = batch.base_offset, batch.partition_leader_epoch
    if base < next_offset:
        where = (
            f"the log end offset {log_end_offset}"
            if next_offset == log_end_offset
            else f"the previous batch's last offset {next_offset - 1}"
        )
        raise AppendOffsetError(f"batch at offset {base} is not above {where}")
    if batch.last_offset - next_offset > INT32_MAX:
        # A segment starts where the previous one ends: such a gap overflows its relative offsets.
        raise AppendOffsetError(f"gap from offset {next_offset} to {base} is too large")
    if epoch < min_epoch:
        raise LeaderEpochOrderError(
            f"batch at offset {base} has leader epoch {epoch},"
            f" older than epoch {min_epoch} already in the log or earlier in the run"
        )


def _add(
    fetched: FetchedBatches, batch: RecordBatch, marker: tuple[ControlRecordType, int] | None
) -> None:
    size = batch.size_bytes
    last_offset = batch.last_offset
    fetched.views.append(batch.buf)
    fetched.headers.append(
        BatchHeader(
            batch.base_offset,
            size,
            batch.partition_leader_epoch,
            batch.magic,
            last_offset,
            batch.max_timestamp,
        )
    )
    fetched.batches.append(
        AppendedBatch(
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            batch.last_sequence,
            batch.base_offset,
            last_offset,
            batch.max_timestamp,
            batch.is_transactional,
            marker,
            batch.is_control,
        )
    )
    fetched.size_bytes += size
