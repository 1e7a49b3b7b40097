"""``ReplicaManager``'s periodic maintenance of its logs: retention, compaction, producer-id
expiration.

* ``apply_retention`` (Kafka's log-retention task, every ``log.retention.check.interval.ms``)
  flushes what ``flush.ms`` asks for and deletes the segments ``retention.ms``,
  ``retention.bytes`` and the log start offset allow; a partition whose log failed is skipped
  (its directory goes offline), the others go on.
* ``clean_logs`` is one pass of Kafka's log cleaner over the compacted partitions: plan on the
  event loop, build the new segments in a worker thread (it reads only inactive segments),
  swap them in on the loop (broker/log/log_compaction.py).  Never above the last stable
  offset: an open transaction's outcome is not known yet.  The pass under way is in
  ``_cleaning``, so that deleting the partition or losing its directory cancels it and the
  files go only once the thread has let go of them.
* ``expire_producers`` (``producer.id.expiration.ms``, KIP-854) forgets idle idempotent
  producers, never one with a transaction open.

A mixin of ``ReplicaManager`` (replica_manager.py): what it shares with the manager is the
``_Replicas`` protocol below, the methods' self type.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from broker.log.cleaner import LogCleaning
from broker.log.errors import LogError
from broker.partition import Partition

log = logging.getLogger("broker.replica_manager")


class _Replicas(Protocol):
    """The part of ``ReplicaManager`` its maintenance uses."""

    clock_ms: Callable[[], int]
    producer_id_expiration_ms: int
    partitions: dict[tuple[str, int], Partition]
    # a compaction pass under way: its plan and the thread building the new segments
    _cleaning: dict[Partition, tuple[LogCleaning, asyncio.Future[None]]]


class LogMaintenance:
    """``ReplicaManager``'s retention, compaction and producer expiration (a mixin)."""

    def expire_producers(self: _Replicas) -> None:
        """Kafka's producer-id expiration task: forget idle idempotent producers."""
        now = self.clock_ms()
        for part in self.partitions.values():
            if gone := part.producers.remove_expired(now, self.producer_id_expiration_ms):
                log.debug("expired producers partition=%s count=%d", part.name, gone)

    def apply_retention(self: _Replicas) -> None:
        now = self.clock_ms()
        for part in list(self.partitions.values()):
            if part.offline:
                continue
            try:
                part.log.flush_if_due(now)
                deleted = part.log.apply_retention(now)
            except LogError as exc:  # this partition is offline; the others go on
                log.error("retention failed partition=%s error=%s", part.name, exc)
                continue
            if deleted:
                log.info(
                    "retention partition=%s deleted_segments=%d log_start_offset=%d",
                    part.name,
                    len(deleted),
                    part.log_start_offset,
                )

    async def clean_logs(self: _Replicas) -> int:
        """One pass of Kafka's log cleaner over the compacted partitions: plan on the loop,
        build the new segments in a worker thread (it reads only inactive segments), swap them
        in on the loop.  Never above the high watermark.  Returns the partitions cleaned."""
        cleaned = 0
        for part in list(self.partitions.values()):
            if (
                part.offline
                or not part.config.compact
                or self.partitions.get((part.topic, part.index)) is not part
            ):
                continue
            try:
                # never above the LSO: an open transaction's outcome is not known yet
                cleaning = part.log.prepare_clean(self.clock_ms(), part.last_stable_offset)
            except LogError as exc:
                log.error("log cleaning failed partition=%s error=%s", part.name, exc)
                continue
            if cleaning is None:
                continue
            build = asyncio.ensure_future(asyncio.to_thread(cleaning.build))
            self._cleaning[part] = (cleaning, build)
            try:
                await asyncio.shield(build)
            except asyncio.CancelledError:
                cleaning.cancel()
                await build  # the thread ends before the log may close
                part.log.complete_clean(cleaning)  # discards the work
                raise
            finally:
                self._cleaning.pop(part, None)
            if self.partitions.get((part.topic, part.index)) is not part:
                continue  # deleted meanwhile (its files go once the build ended)
            try:
                result = part.log.complete_clean(cleaning)
            except LogError as exc:
                log.error("log cleaning failed partition=%s error=%s", part.name, exc)
                continue
            if result is not None:
                cleaned += 1
                log.info(
                    "cleaned partition=%s offsets=%d-%d bytes=%d->%d tombstones_removed=%d",
                    part.name,
                    result.first_offset,
                    result.end_offset,
                    result.bytes_before,
                    result.bytes_after,
                    result.tombstones_removed,
                )
        return cleaned
