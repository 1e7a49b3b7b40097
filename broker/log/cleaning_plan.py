"""When a compacted log is due for cleaning, and over which segments (the planning half of
Kafka's ``LogCleanerManager``); the pass itself is cleaner.py's ``LogCleaning``.

Ranges, at the start of a pass (all offsets, ``E`` at a segment boundary)::

    first segment           first dirty offset        E = end of the last cleanable segment
    |-------- clean ---------|-------- dirty ---------|------ not touched -------->
    rewritten ....................................... |   above: the segment holding the first
                                                          uncleanable offset, and later ones

* first uncleanable offset = min(active segment's base, the last stable offset the caller
  passes, the base of the first dirty segment whose largest timestamp is newer than now -
  ``min.compaction.lag.ms``).  Only whole inactive segments below it are cleaned, so nothing
  a follower or consumer may not have is touched, nothing an append touches, and no
  transaction still open (Kafka: the first unstable offset): every transaction with data in
  the range has its marker, and an aborted one its index entry (cleaned_transactions.py).
* first dirty offset: the ``cleaner-offset-checkpoint`` (the end of the last pass's offset
  map), at least the log start offset.  Invariant: below it, the log holds at most one record
  per (non-null) key, the latest of its key as of the pass that kept it.
* due when dirty bytes / (clean + dirty bytes) >= ``min.cleanable.dirty.ratio`` (by whole
  segments), or the first dirty segment's first batch is older than ``max.compaction.lag.ms``,
  or the earliest delete horizon of a tombstone the last pass kept has passed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from broker.log.config import LogConfig
from broker.log.segment import LogSegment
from kafka_protocol.record_batch import NO_TIMESTAMP


@dataclass(frozen=True, slots=True)
class CleaningPlan:
    """What a pass will clean, and why it is due."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    end_offset: int  # E: the end of the last segment cleaned
    segments: int  # cleaned, from the first
    clean_bytes: int
    dirty_bytes: int
    reason: str

    @property
    def dirty_ratio(self) -> float:
        return self.dirty_bytes / max(self.clean_bytes + self.dirty_bytes, 1)


def plan_cleaning(
    segments: Sequence[LogSegment],
    config: LogConfig,
    *,
    log_start_offset: int,
    first_dirty_offset: int,
    last_stable_offset: int,
    now_ms: int,
    delete_horizon_ms: int | None = None,
    force: bool = False,
) -> CleaningPlan | None:
    """The pass due on a compacted log now, if any.  ``last_stable_offset``: the partition's
    (at most its high watermark).  ``delete_horizon_ms``: the earliest delete horizon of a
    tombstone or marker the last pass kept (its passing makes a pass due, dirty or not);
    ``force``: a pass over whatever is cleanable, due or not.  Reads one batch header at most
    (for ``max.compaction.lag.ms``)."""
    if not config.compact or len(segments) < 2:
        return None
    ends = [s.base_offset for s in segments[1:]]
    first_dirty = max(first_dirty_offset, log_start_offset)
    uncleanable = min(segments[-1].base_offset, last_stable_offset)
    if config.min_compaction_lag_ms > 0:
        newest_allowed = now_ms - config.min_compaction_lag_ms
        for segment, end in zip(segments, ends, strict=False):
            if end > first_dirty and segment.largest_timestamp_ms > newest_allowed:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    count = 0
    while count < len(ends) and ends[count] <= uncleanable:
        count += 1
    if count == 0:
        return None
    dirty = [i for i in range(count) if ends[i] > first_dirty]
    dirty_bytes = sum(segments[i].size_bytes for i in dirty)
    clean_bytes = sum(segments[i].size_bytes for i in range(dirty[0] if dirty else count))
    plan = CleaningPlan(
        first_dirty, uncleanable, ends[count - 1], count, clean_bytes, dirty_bytes, "forced"
    )
    if force:
        return plan
    if delete_horizon_ms is not None and delete_horizon_ms <= now_ms:
        return dataclasses.replace(plan, reason=f"a delete horizon passed at {delete_horizon_ms}")
    if not dirty:
        return None
    if plan.dirty_ratio >= config.min_cleanable_dirty_ratio:
        reason = f"dirty ratio {plan.dirty_ratio:.3f} >= {config.min_cleanable_dirty_ratio}"
        return dataclasses.replace(plan, reason=reason)
    if config.max_compaction_lag_ms < now_ms:
        first = segments[dirty[0]].records.header_at(0).max_timestamp
        if first != NO_TIMESTAMP and now_ms - first > config.max_compaction_lag_ms:
            reason = f"max.compaction.lag.ms {config.max_compaction_lag_ms}"
            return dataclasses.replace(plan, reason=reason)
    return None
