"""Local failures of the metadata log.

Outcomes of controller commands are Kafka error codes carried in responses, never exceptions.
Exceptions here are for bytes we cannot accept and for a disk we can no longer trust::

    MetadataLogError
    ├── InvalidMetadataRecordError   bytes that are not a framed metadata record we know
    ├── CorruptSnapshotError         a snapshot file that fails its checks (it is skipped)
    ├── OffsetOutOfRangeError        read below the log start offset (use the snapshot)
    └── MetadataLogFailedError       a write or fsync failed: the log refuses further appends

Replay never raises: a record that does not fit the image (a partition of an unknown topic, a
fence of a stale broker epoch) is ignored deterministically, the same way on every node.
"""

from __future__ import annotations


class MetadataLogError(Exception):
    """Base of every exception raised by ``metadata_log``."""


class InvalidMetadataRecordError(MetadataLogError):
    """Truncated or malformed framing, an unknown record type, or a version we cannot read."""


class CorruptSnapshotError(MetadataLogError):
    """A snapshot without its header or footer, with a bad CRC, or with undecodable records."""


class OffsetOutOfRangeError(MetadataLogError):
    """The requested offset is below the log start offset: the caller must load a snapshot."""

    def __init__(self, offset: int, log_start_offset: int) -> None:
        super().__init__(f"offset {offset} is below the log start offset {log_start_offset}")
        self.offset = offset
        self.log_start_offset = log_start_offset


class MetadataLogFailedError(MetadataLogError):
    """A write, truncate or fsync failed.

    After a failed fsync the page cache can no longer be trusted to match the disk, so the log
    fails stop (Kafka marks the metadata log directory offline and halts): reopen it to recover.
    """
