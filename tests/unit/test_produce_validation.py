"""Produce validation from the batch header, and the one case that reads records: keys in a
compacted topic."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.handlers.produce import validate_batch
from broker.log.config import LogConfig
from broker.replica_manager import AppendOutcome, Partition, ReplicaManager
from broker.storage import MemoryStorage
from kafka_protocol.compression import Compression
from kafka_protocol.errors import ErrorCode
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch


def _partition(policy: tuple[str, ...]) -> Partition:
    rm = ReplicaManager(MemoryStorage(), Path("/d"), clock_ms=lambda: 0)
    config = LogConfig(cleanup_policy=policy)
    return rm.open_partition("t", 0, None, config, max_message_bytes=1 << 20)


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.ZSTD])
def test_a_compacted_topic_refuses_records_without_a_key(compression: Compression) -> None:
    compacted = _partition(("compact",))
    keyless = build_batch(
        [SimpleRecord(b"v", b"k"), SimpleRecord(b"v", None)], compression=compression
    )
    refused = validate_batch(compacted, memoryview(keyless))
    assert isinstance(refused, AppendOutcome) and refused.error is ErrorCode.INVALID_RECORD
    assert "key" in str(refused.message)
    keyed = build_batch([SimpleRecord(b"v", b"k")] * 2, compression=compression)
    assert isinstance(validate_batch(compacted, memoryview(keyed)), RecordBatch)
    deleted = _partition(("delete",))
    assert isinstance(validate_batch(deleted, memoryview(keyless)), RecordBatch)
