"""Local failures of the partition log.

Each carries the Kafka error code a broker answers with for that partition::

    LogError
    ├── OffsetOutOfRangeError      fetch/list below the log start or above the log end
    ├── RecordBatchTooLargeError   one append larger than a whole segment
    ├── KafkaStorageError          an I/O error; the log is offline until reopened
    ├── StaleLeaderEpochError      a leader append stamped with an epoch older than the log's
    └── InvalidFollowerAppendError a run of the leader's batches refused whole (nothing written)
        ├── CorruptBatchError          a batch fails its checks (magic, length, CRC32C)
        ├── AppendOffsetError          offsets below the log end, overlapping or out of order
        └── LeaderEpochOrderError      partition leader epochs going backwards

``CorruptIndexError`` never leaves the package: an index that fails its checks is rebuilt from
the log.  Misuse by the caller (an empty append, a high watermark above the log end) is an
assertion, not an exception.
"""

from __future__ import annotations

from kafka_protocol.errors import ErrorCode


class LogError(Exception):
    error_code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(LogError):
    error_code = ErrorCode.OFFSET_OUT_OF_RANGE

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the log [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class RecordBatchTooLargeError(LogError):
    error_code = ErrorCode.RECORD_LIST_TOO_LARGE

    def __init__(self, size_bytes: int, segment_bytes: int) -> None:
        super().__init__(
            f"append of {size_bytes} bytes exceeds the segment size of {segment_bytes} bytes"
        )
        self.size_bytes = size_bytes
        self.segment_bytes = segment_bytes


class KafkaStorageError(LogError):
    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class StaleLeaderEpochError(LogError):
    """A leader append older than the newest epoch in the log: this replica is not the leader
    any more (clients refresh their metadata and retry elsewhere)."""

    error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER

    def __init__(self, leader_epoch: int, latest_epoch: int) -> None:
        super().__init__(
            f"append with leader epoch {leader_epoch} to a log at leader epoch {latest_epoch}"
        )
        self.leader_epoch = leader_epoch
        self.latest_epoch = latest_epoch


class InvalidFollowerAppendError(LogError):
    """The leader's batches, as fetched, cannot extend this log; nothing was written."""

    error_code = ErrorCode.CORRUPT_MESSAGE


class CorruptBatchError(InvalidFollowerAppendError):
    """A complete batch that fails its checks (magic, lengths, CRC32C, record count)."""


class AppendOffsetError(InvalidFollowerAppendError):
    """Base offsets below the log end offset, overlapping, or not increasing (Kafka's
    ``UnexpectedAppendOffsetException`` and ``OffsetsOutOfOrderException``)."""


class LeaderEpochOrderError(InvalidFollowerAppendError):
    """A batch's partition leader epoch below an earlier batch's or the log's latest epoch."""


class CorruptIndexError(LogError):
    """An index file that fails its checks (internal: the segment rebuilds it)."""
