"""Which segments retention deletes: Kafka's three rules, as one pure function.

Segments are deleted from the front only, and never the active (last) one.  A segment goes if
it lies wholly below the log start offset (DeleteRecords), or if its largest timestamp is
older than ``retention.ms`` (``-1``: forever; a segment with no timestamp never expires), or
while the log without it would still hold at least ``retention.bytes`` (``-1``: no limit), so
the log keeps between ``retention.bytes`` and that plus one segment, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.log.config import LogConfig
from broker.log.segment import LogSegment
from kafka_protocol.record_batch import NO_TIMESTAMP


def segments_to_delete(
    segments: Sequence[LogSegment], config: LogConfig, log_start_offset: int, now_ms: int
) -> int:
    """How many segments, from the front, are due for deletion."""
    candidates = segments[:-1]
    count = 0
    while count < len(candidates) and segments[count + 1].base_offset <= log_start_offset:
        count += 1
    if config.retention_ms >= 0:
        while count < len(candidates):
            largest = candidates[count].largest_timestamp_ms
            if largest == NO_TIMESTAMP or now_ms - largest <= config.retention_ms:
                break
            count += 1
    if config.retention_bytes >= 0:
        excess = sum(s.size_bytes for s in segments[count:]) - config.retention_bytes
        while count < len(candidates) and excess >= candidates[count].size_bytes:
            excess -= candidates[count].size_bytes
            count += 1
    return count
