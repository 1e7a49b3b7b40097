"""Partition logs: Kafka's on-disk layout (segments, sparse indexes, recovery, retention).

Modules, one noun each: ``log`` (``PartitionLog``), ``segment`` (``LogSegment``),
``file_records`` (``FileRecords``), ``index`` (``OffsetIndex``, ``TimeIndex``), ``loader``
(``LogLoader``), ``validator`` (offset assignment), ``checkpoint``, ``config`` (``LogConfig``),
``retention``, ``errors``.  All I/O goes through ``broker.storage``.
"""

from broker.log.config import LogConfig
from broker.log.errors import (
    KafkaStorageError,
    LogError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
)
from broker.log.loader import DroppedRange, RecoveryReport
from broker.log.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendResult,
    FetchSlice,
    PartitionLog,
)

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendResult",
    "DroppedRange",
    "FetchSlice",
    "KafkaStorageError",
    "LogConfig",
    "LogError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "RecordBatchTooLargeError",
    "RecoveryReport",
]
