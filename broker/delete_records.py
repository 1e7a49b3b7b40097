"""DeleteRecords' rules, sans-IO: which offset a request asks for, a partition's low
watermark, and the answers waiting for it (Kafka's ``Partition.deleteRecordsOnLeader``,
``lowWatermarkIfLeader`` and ``DelayedDeleteRecords``).

Theory of operation
-------------------
* **The request.**  A client names, per partition, the offset before which records go
  (``-1``: the high watermark).  The leader moves its log start offset up to it; an offset
  below zero or above the high watermark answers OFFSET_OUT_OF_RANGE and changes nothing.  An
  offset at or below the log start changes nothing either and succeeds.
* **Followers.**  Each follower's Fetch response carries the leader's ``log_start_offset``; a
  follower moves its own start up to it (once its high watermark reached it), and its next
  Fetch request tells the leader its log start offset (``follower_log_starts``).
* **The low watermark** is the least log start offset among the leader and its in-sync
  followers (a follower not heard from since: unknown, -1).  Kafka takes every replica on a
  live broker; the ISR is used here, so that a lagging follower (which follows the start
  when it catches up, or restarts its log above it) does not hold the answer until it times
  out.  The answer to a DeleteRecords waits until the low watermark reaches the requested
  offset (then it carries the low watermark), or the request's ``timeout_ms`` passes
  (REQUEST_TIMED_OUT), or the partition stops being led here (NOT_LEADER_OR_FOLLOWER).
* Segments wholly below the new log start are deleted at once (the log's retention pass for
  this one partition), not at the next ``log.retention.check.interval.ms``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from broker.deferred import Deferred
from kafka_protocol.errors import ErrorCode

HIGH_WATERMARK = -1  # DeleteRecordsRequest.HIGH_WATERMARK: delete up to the high watermark
INVALID_LOW_WATERMARK = -1  # DeleteRecordsResponse.INVALID_LOW_WATERMARK
UNKNOWN_LOG_START = -1  # a follower not heard from since this broker became leader

_tiebreak = itertools.count()


def requested_offset(offset: int, high_watermark: int) -> int | ErrorCode:
    """The log start offset a DeleteRecords asks for, or OFFSET_OUT_OF_RANGE."""
    wanted = high_watermark if offset == HIGH_WATERMARK else offset
    if not 0 <= wanted <= high_watermark:
        return ErrorCode.OFFSET_OUT_OF_RANGE
    return wanted


def low_watermark(
    leader_id: int,
    leader_log_start: int,
    isr: Iterable[int],
    follower_log_starts: Mapping[int, int],
) -> int:
    """The least log start offset among the leader and its in-sync followers."""
    lowest = leader_log_start
    for replica in isr:
        if replica != leader_id:
            lowest = min(lowest, follower_log_starts.get(replica, UNKNOWN_LOG_START))
    return lowest


@dataclass(frozen=True, slots=True)
class LowWatermarkAnswer:
    error: ErrorCode
    low_watermark: int


def answered(error: ErrorCode) -> Deferred[LowWatermarkAnswer]:
    """An answer given at once, with ``error`` (nothing changed)."""
    answer: Deferred[LowWatermarkAnswer] = Deferred()
    answer.resolve(LowWatermarkAnswer(error, INVALID_LOW_WATERMARK))
    return answer


@dataclass(slots=True)
class LowWatermarkWaiters:
    """DeleteRecords answers waiting for a partition's low watermark (a heap by offset)."""

    _heap: list[tuple[int, int, Deferred[LowWatermarkAnswer]]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self._heap)

    def wait(self, required: int, current: int) -> Deferred[LowWatermarkAnswer]:
        """An answer once the low watermark reaches ``required`` (at once if ``current``
        does)."""
        answer: Deferred[LowWatermarkAnswer] = Deferred()
        if current >= required:
            answer.resolve(LowWatermarkAnswer(ErrorCode.NONE, current))
        else:
            heapq.heappush(self._heap, (required, next(_tiebreak), answer))
        return answer

    def moved(self, current: int) -> None:
        """The low watermark is now ``current``: answer those it reached."""
        heap = self._heap
        while heap and heap[0][0] <= current:
            _, _, answer = heapq.heappop(heap)
            if not answer.done:
                answer.resolve(LowWatermarkAnswer(ErrorCode.NONE, current))

    def fail(self, error: ErrorCode) -> None:
        """Answer every waiter with ``error`` (leadership lost, directory offline)."""
        heap, self._heap = self._heap, []
        for _, _, answer in heap:
            if not answer.done:
                answer.resolve(LowWatermarkAnswer(error, INVALID_LOW_WATERMARK))

    def compact(self) -> None:
        """Drop the answers already given (timed out by their request)."""
        self._heap = [e for e in self._heap if not e[2].done]
        heapq.heapify(self._heap)
