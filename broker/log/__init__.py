"""Partition logs: Kafka's on-disk layout (segments, sparse indexes, recovery, retention).

Modules, one noun each: ``log`` (``PartitionLog``; its retention and truncation in
``log_truncation``, its compaction steps in ``log_compaction``, its aborted-transaction
queries in ``aborted_txns``), ``reader`` (its read path: ``FetchSlice``, lookups by
timestamp), ``epochs`` (the leader-epoch rules), ``segment`` (``LogSegment``),
``file_records`` (``FileRecords``), ``index`` (``OffsetIndex``, ``TimeIndex``), ``loader``
(``LogLoader``), ``validator`` (offset assignment), ``checkpoint``, ``config`` (``LogConfig``),
``retention``, ``cleaning_plan`` and ``cleaner`` (compaction: when, and the pass), ``errors``,
``leader_epoch_cache`` (``LeaderEpochCache``), ``fetched_batches`` (the checks on a follower's
append), ``txn_index`` (a segment's ``.txnindex``).  All I/O goes through ``broker.storage``.
"""

from broker.log.config import LogConfig
from broker.log.errors import (
    AppendOffsetError,
    CorruptBatchError,
    InvalidFollowerAppendError,
    KafkaStorageError,
    LeaderEpochOrderError,
    LogError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    StaleLeaderEpochError,
)
from broker.log.fetched_batches import AppendedBatch
from broker.log.loader import DroppedRange, RecoveryReport
from broker.log.log import AppendResult, FollowerAppend, PartitionLog
from broker.log.reader import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchSlice,
)

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendOffsetError",
    "AppendResult",
    "AppendedBatch",
    "CorruptBatchError",
    "DroppedRange",
    "FetchSlice",
    "FollowerAppend",
    "InvalidFollowerAppendError",
    "KafkaStorageError",
    "LeaderEpochOrderError",
    "LogConfig",
    "LogError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "RecordBatchTooLargeError",
    "RecoveryReport",
    "StaleLeaderEpochError",
]
