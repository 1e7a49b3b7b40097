"""The structure check of a batch's records: decompress (if compressed), then one compiled
pass over every record (``_record_walk.c``, which says why it is C).

A producer's batch passes ``RecordBatch.validate`` on its header and CRC alone; a valid CRC
says nothing about the records, which the producer may have laid out wrongly.  Readers
(librdkafka, kafka-python, aiokafka, kcat) then loop or fail on them, so the broker walks
them before it appends (``broker/log/validator.py``), a follower before it copies them and
recovery before it trusts a segment's unflushed tail.

The walk refuses, each with the index of the first bad record: a length or varint out of
bounds, a record count not equal to the header's, offset deltas not rising within
``0..last_offset_delta`` (so exactly 0..n-1 in a producer's batch, whose count is
``last_offset_delta + 1``; with gaps where the log cleaner removed records), a bad
header count or header, a key or value past the end of its record, and bytes after the last
record.  It returns what the validator checks next: the smallest and largest timestamp delta
(and where), and the first record without a key.
"""

from __future__ import annotations

try:
    from kafka_protocol._record_walk import RecordWalk, walk_records
except ImportError as error:  # a source checkout that was never installed or built
    raise ImportError(
        "kafka_protocol._record_walk (the compiled record walk) is not built: run"
        " `pip install -e .` or `python setup.py build_ext --inplace` (needs gcc and the"
        " Python headers)"
    ) from error
from kafka_protocol.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, decompress_buffer
from kafka_protocol.record_batch import ATTR_COMPRESSION_MASK, HEADER_BYTES, RecordBatch

__all__ = ["RecordWalk", "walk_batch", "walk_records"]


def walk_batch(batch: RecordBatch, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> RecordWalk:
    """Walk ``batch``'s records; ``CompressionError`` if compressed records do not
    decompress (a codec flag on data of another codec, say) or exceed ``max_bytes``."""
    records = batch.buf[HEADER_BYTES:]
    codec = batch.attributes & ATTR_COMPRESSION_MASK
    count, last = batch.records_count, batch.last_offset_delta
    if codec:
        return walk_records(decompress_buffer(codec, records, max_bytes), count, last)
    return walk_records(records, count, last)
