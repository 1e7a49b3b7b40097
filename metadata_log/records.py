"""Metadata-record framing, the record-type registry, and metadata batches.

A metadata record is framed as Kafka's ``MetadataRecordSerde`` frames it::

    frame_version  unsigned varint   always 1
    api_key        unsigned varint   the record type (TopicRecord = 2, PartitionRecord = 3, ...)
    version        unsigned varint   the record's schema version
    body           the record, encoded at that version (all metadata records are flexible)

One metadata batch is one ordinary RecordBatch v2 whose records have a null key and a framed
metadata record as their value; the batch's ``partition_leader_epoch`` carries the epoch of the
controller that wrote it, and its offsets are the dense metadata offsets.

We write each record type at one fixed version (:data:`RECORD_VERSIONS`, the highest version
whose fields we use) so that the bytes of our log do not change when the specs are regenerated.
We read every version the generated codecs know.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import ClassVar, Final, Protocol, Self

from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.metadata import (
    AbortTransactionRecord,
    AccessControlEntryRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    ZkMigrationStateRecord,
)
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch
from kafka_protocol.varint import encode_uvarint, read_uvarint
from metadata_log.exceptions import InvalidMetadataRecordError

FRAME_VERSION: Final = 1


class MetadataRecord(Protocol):
    """What every generated metadata record class offers (``kafka_protocol.metadata``)."""

    NAME: ClassVar[str]
    API_KEY: ClassVar[int | None]
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]

    def encode(self, version: int) -> bytes: ...

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, version: int) -> Self: ...


# The version we write, per record type. Bump a version here only together with the code that
# fills the new fields; older versions stay readable.
RECORD_VERSIONS: Final[Mapping[type[MetadataRecord], int]] = {
    RegisterBrokerRecord: 3,  # v1 in_controlled_shutdown, v3 log_dirs
    UnregisterBrokerRecord: 0,
    TopicRecord: 0,
    PartitionRecord: 2,  # v2 eligible_leader_replicas / last_known_elr (tagged)
    ConfigRecord: 0,
    PartitionChangeRecord: 2,  # v2 eligible_leader_replicas / last_known_elr (tagged)
    FenceBrokerRecord: 0,
    UnfenceBrokerRecord: 0,
    RemoveTopicRecord: 0,
    DelegationTokenRecord: 0,
    UserScramCredentialRecord: 0,
    FeatureLevelRecord: 0,
    ClientQuotaRecord: 0,
    ProducerIdsRecord: 0,
    BrokerRegistrationChangeRecord: 2,  # v1 in_controlled_shutdown, v2 log_dirs
    AccessControlEntryRecord: 0,
    RemoveAccessControlEntryRecord: 0,
    NoOpRecord: 0,
    ZkMigrationStateRecord: 0,
    RemoveUserScramCredentialRecord: 0,
    BeginTransactionRecord: 0,
    EndTransactionRecord: 0,
    AbortTransactionRecord: 0,
    RemoveDelegationTokenRecord: 0,
    RegisterControllerRecord: 0,
}


def _registry() -> dict[int, type[MetadataRecord]]:
    by_key: dict[int, type[MetadataRecord]] = {}
    for cls, version in RECORD_VERSIONS.items():
        assert cls.API_KEY is not None and cls.API_KEY not in by_key, cls.NAME
        assert cls.MIN_VERSION <= version <= cls.MAX_VERSION, cls.NAME
        by_key[cls.API_KEY] = cls
    return by_key


RECORD_TYPES: Final[Mapping[int, type[MetadataRecord]]] = _registry()
"""Record type (the spec's ``apiKey``) -> generated class."""


# --- framing ----------------------------------------------------------------------------------


def encode_record(record: MetadataRecord) -> bytes:
    """Frame ``record`` at the version :data:`RECORD_VERSIONS` fixes for its type."""
    version = RECORD_VERSIONS.get(type(record))
    assert version is not None, f"{type(record).__name__} is not a metadata record"
    assert record.API_KEY is not None
    return (
        encode_uvarint(FRAME_VERSION)
        + encode_uvarint(record.API_KEY)
        + encode_uvarint(version)
        + record.encode(version)
    )


def decode_record(data: bytes | bytearray | memoryview) -> MetadataRecord:
    """Read one framed record at any version we know; :class:`InvalidMetadataRecordError` else."""
    buf = memoryview(data)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    frame_version, pos = read_uvarint(
        buf, 0, InvalidMetadataRecordError, "metadata record frame version"
    )
    if frame_version != FRAME_VERSION:
        raise InvalidMetadataRecordError(f"unknown metadata frame version {frame_version}")
    api_key, pos = read_uvarint(buf, pos, InvalidMetadataRecordError, "metadata record type")
    version, pos = read_uvarint(buf, pos, InvalidMetadataRecordError, "metadata record version")
    cls = RECORD_TYPES.get(api_key)
    if cls is None:
        raise InvalidMetadataRecordError(f"unknown metadata record type {api_key}")
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        raise InvalidMetadataRecordError(
            f"{cls.NAME} v{version} is outside {cls.MIN_VERSION}-{cls.MAX_VERSION}"
        )
    try:
        return cls.decode(buf[pos:], version)
    # The codecs map truncation to ProtocolError; the rest are caught because bytes from disk or
    # from a peer must never escape as anything but InvalidMetadataRecordError.
    except (ProtocolError, ValueError, IndexError, OverflowError, struct.error) as exc:
        raise InvalidMetadataRecordError(f"{cls.NAME} v{version}: {exc}") from None


# --- batches ----------------------------------------------------------------------------------


def build_metadata_batch(
    records: Sequence[MetadataRecord], *, base_offset: int, epoch: int, timestamp_ms: int
) -> bytes:
    """One RecordBatch v2 holding ``records`` at offsets ``base_offset..``."""
    return build_batch(
        [SimpleRecord(value=encode_record(r)) for r in records],
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        now_ms=timestamp_ms,
    )


def read_metadata_batch(batch: RecordBatch) -> list[MetadataRecord]:
    """The records of one batch (a control batch has none we replay).

    Raises :class:`InvalidMetadataRecordError` for a record without a value or with bad framing;
    the caller validates the CRC first (``batch.validate()``).
    """
    if batch.is_control:
        return []
    try:
        raw = batch.records()
    except ProtocolError as exc:
        raise InvalidMetadataRecordError(f"batch at offset {batch.base_offset}: {exc}") from None
    out: list[MetadataRecord] = []
    for rec in raw:
        if rec.value is None:
            raise InvalidMetadataRecordError(f"metadata record at offset {rec.offset} has no value")
        out.append(decode_record(rec.value))
    return out
