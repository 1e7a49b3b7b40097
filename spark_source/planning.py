"""Micro-batch planning, pure: offsets as Spark stores them, rate limits, and the offset ranges
each Spark task reads.

Spark keeps a streaming source's offsets as JSON and decides "is there new data?" by comparing
the JSON texts, so :func:`encode_offsets` always writes the same text for the same offsets:
topics in name order, partitions in number order, partition numbers as strings
(``{"events": {"0": 42, "1": 17}}``).  An offset here is the next one to read; a range
``[start, end)`` holds committed records only, because ``end`` never passes a high watermark.

The rules follow Spark's Kafka connector (``KafkaMicroBatchStream.rateLimit``,
``KafkaOffsetRangeCalculator``), so a query moved from it plans the same batches.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TopicPartition = tuple[str, int]
Offsets = Mapping[TopicPartition, int]


class DataLossError(Exception):
    """Records the query should have read are gone (retention, a deleted topic, an unclean
    leader election); raised only when ``failOnDataLoss`` is true."""


def encode_offsets(offsets: Offsets) -> dict[str, dict[str, int]]:
    result: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        result.setdefault(topic, {})[str(partition)] = offsets[(topic, partition)]
    return result


def decode_offsets(data: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {(t, int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}


@dataclass(frozen=True, slots=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def rate_limit(start: Offsets, latest: Offsets, limit: int) -> dict[TopicPartition, int]:
    """End offsets admitting at most about ``limit`` records, shared among the partitions in
    proportion to their backlogs (Spark's proration: shares under one record round up, so no
    partition with a backlog starves).  Partitions missing from ``start`` begin at 0."""
    backlog = {tp: end - start.get(tp, 0) for tp, end in latest.items()}
    total = sum(size for size in backlog.values() if size > 0)
    if total < 1:
        return dict(latest)
    limited = {}
    for tp, end in latest.items():
        size = backlog[tp]
        if size <= 0:
            limited[tp] = end
            continue
        share = limit * (size / total)
        take = math.ceil(share) if share < 1 else math.floor(share)
        limited[tp] = min(end, start.get(tp, 0) + take)
    return limited


def backlog(start: Offsets, end: Offsets) -> int:
    return sum(max(0, e - start.get(tp, 0)) for tp, e in end.items())


def lost_partitions(start: Offsets, current: Iterable[TopicPartition]) -> list[str]:
    """Messages for partitions the query was reading that no longer exist."""
    now = set(current)
    return [
        f"{t}-{p} is gone (its topic was deleted); records from offset {start[(t, p)]} on"
        " were not read"
        for t, p in sorted(start)
        if (t, p) not in now
    ]


def plan_ranges(
    start: Offsets,
    end: Offsets,
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> tuple[list[OffsetRange], list[str]]:
    """The ranges of one batch, split for parallelism, and messages describing data loss
    (``end`` below ``start``: the partition's log went backwards, e.g. an unclean election).
    Partitions of ``end`` not in ``start`` are new; the caller puts their earliest offset in
    ``start`` before calling."""
    ranges: list[OffsetRange] = []
    losses: list[str] = []
    for (topic, partition), stop in sorted(end.items()):
        begin = start[(topic, partition)]
        if stop < begin:
            losses.append(
                f"{topic}-{partition}: the log now ends at {stop}, below offset {begin} the"
                " query already read to; records were lost (e.g. an unclean leader election)"
            )
        elif stop > begin:
            ranges.append(OffsetRange(topic, partition, begin, stop))
    if max_records_per_partition is not None:
        ranges = [piece for r in ranges for piece in _split_max(r, max_records_per_partition)]
    if min_partitions is not None and len(ranges) < min_partitions:
        ranges = _split_min(ranges, min_partitions)
    return ranges, losses


def _split_max(r: OffsetRange, most: int) -> list[OffsetRange]:
    parts = math.ceil(r.size / most)
    return _split(r, parts)


def _split_min(ranges: list[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    """Spark's KafkaOffsetRangeCalculator: each range gets parts in proportion to its size."""
    total = sum(r.size for r in ranges)
    if total == 0:
        return ranges
    ideal = total / min_partitions
    return [piece for r in ranges for piece in _split(r, max(round(r.size / ideal), 1))]


def _split(r: OffsetRange, parts: int) -> list[OffsetRange]:
    bounds = [r.start + (r.size * i) // parts for i in range(parts + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds) if b > a]
