"""Partitions this broker hosts: appends (coalesced per loop iteration), reads, long-poll waits.

Theory of operation
-------------------
A :class:`Partition` wraps one :class:`PartitionLog`.  Produce handlers call
:meth:`Partition.append_nowait` with a validated batch: producer-state checks run at once,
offsets are assigned at once (``next_offset`` runs ahead of the log by what is pending), and
the batch joins the partition's pending list.  The first pending batch of a loop iteration
schedules one ``_flush_all`` with ``call_soon``; it writes every dirty partition's pending
batches with ONE ``PartitionLog.append`` (one ``writev``), resolves the produce futures,
advances the high watermark and wakes long-poll fetches.  So a partition sees one write per
loop iteration however many producers send to it.

On this single-replica broker the high watermark is the log end offset once written; the
replication issue replaces that rule with the minimum over the ISR.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from broker.deferred import Deferred
from broker.log.config import LogConfig
from broker.log.errors import LogError
from broker.log.log import AppendResult, PartitionLog
from broker.producer_state import BatchMetadata, ProducerStateManager
from broker.storage import Storage
from kafka_protocol.errors import ErrorCode
from kafka_protocol.record_batch import NO_PRODUCER_ID, RecordBatch, iter_batches

log = logging.getLogger("broker.replica_manager")
PARTITION_METADATA_FILE = "partition.metadata"


def _topic_id_text(topic_id: object) -> str:
    """Kafka prints topic ids as URL-safe base64 of the 16 bytes, without padding."""
    if isinstance(topic_id, uuid.UUID):
        return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    return str(topic_id)


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    error: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    message: str | None = None


@dataclass(slots=True)
class _Pending:
    batch: RecordBatch
    base_offset: int
    done: Deferred[AppendOutcome]


@dataclass(slots=True, eq=False)  # identity: partitions are keys of the dirty set
class Partition:
    topic: str
    index: int
    topic_id: object
    log: PartitionLog
    config: LogConfig
    max_message_bytes: int
    log_append_time: bool = False
    leader_epoch: int = 0
    min_insync_replicas: int = 1
    isr_size: int = 1
    high_watermark: int = 0
    producers: ProducerStateManager = field(default_factory=ProducerStateManager)
    pending: list[_Pending] = field(default_factory=list)
    next_offset: int = 0
    waiters: list[asyncio.Future[None]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def wake_waiters(self) -> None:
        waiters, self.waiters = self.waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)


class ReplicaManager:
    def __init__(
        self,
        storage: Storage,
        log_dir: Path,
        *,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.storage = storage
        self.log_dir = log_dir
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._dirty: dict[Partition, None] = {}
        self._flush_scheduled = False
        self.on_append: Callable[[Partition, int, int], None] | None = None  # metrics hook

    # --- lifecycle ----------------------------------------------------------------------------

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def open_partition(
        self,
        topic: str,
        index: int,
        topic_id: object,
        config: LogConfig,
        *,
        max_message_bytes: int,
        log_append_time: bool = False,
        leader_epoch: int = 0,
        min_insync_replicas: int = 1,
        isr_size: int = 1,
    ) -> Partition:
        existing = self.partitions.get((topic, index))
        if existing is not None:
            existing.config = config
            existing.max_message_bytes = max_message_bytes
            existing.log_append_time = log_append_time
            existing.leader_epoch = leader_epoch
            existing.min_insync_replicas = min_insync_replicas
            existing.isr_size = isr_size
            existing.log.update_config(config)
            return existing
        directory = str(self.log_dir / f"{topic}-{index}")
        self._claim_directory(directory, topic_id)
        plog = PartitionLog.open(self.storage, directory, config, self.clock_ms())
        part = Partition(
            topic,
            index,
            topic_id,
            plog,
            config,
            max_message_bytes,
            log_append_time,
            leader_epoch,
            min_insync_replicas,
            isr_size,
            high_watermark=plog.log_end_offset,
            next_offset=plog.log_end_offset,
        )
        self._rebuild_producer_state(part)
        self.partitions[(topic, index)] = part
        return part

    def _claim_directory(self, directory: str, topic_id: object) -> None:
        """Kafka's ``partition.metadata``: the directory belongs to one topic id.  Data left by
        a deleted topic of the same name (a crash between the delete record and the removal)
        must not be served as the new topic's: it is removed, and the removal logged."""
        expected = f"version: 0\ntopic_id: {_topic_id_text(topic_id)}\n".encode()
        path = f"{directory}/{PARTITION_METADATA_FILE}"
        if self.storage.exists(path):
            handle = self.storage.open(path)
            found = handle.read(0, handle.size())
            handle.close()
            if found == expected:
                return
            log.warning(
                "removing stale partition data dir=%s found=%r expected=%r",
                directory,
                found.decode(errors="replace"),
                expected.decode(),
            )
            for name in self.storage.listdir(directory):
                self.storage.remove(f"{directory}/{name}")
        self.storage.makedirs(directory)
        handle = self.storage.open(path)
        handle.truncate(0)
        handle.append([expected])
        handle.flush()
        handle.close()
        self.storage.sync_dir(directory)

    def _rebuild_producer_state(self, part: Partition) -> None:
        """Replay batch headers of the retained log (headers only, no records)."""
        offset = part.log_start_offset
        while offset < part.log_end_offset:
            chunk = part.log.read(offset, 1 << 20, min_one_batch=True)
            if chunk.size_bytes == 0:
                break
            data = part.log.read_bytes(chunk)
            for batch in iter_batches(data, allow_truncated_tail=True):
                if batch.producer_id != NO_PRODUCER_ID and batch.base_sequence >= 0:
                    part.producers.record(
                        batch.producer_id,
                        batch.producer_epoch,
                        BatchMetadata(
                            batch.base_sequence,
                            batch.last_sequence,
                            batch.base_offset,
                            batch.last_offset,
                            batch.max_timestamp,
                        ),
                    )
                offset = batch.next_offset

    def remove_partition(self, topic: str, index: int) -> None:
        part = self.partitions.pop((topic, index), None)
        if part is None:
            return
        self._dirty.pop(part, None)
        for p in part.pending:
            p.done.resolve(AppendOutcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        part.wake_waiters()
        part.log.delete()
        shutil.rmtree(self.log_dir / f"{topic}-{index}", ignore_errors=True)

    def close(self) -> None:
        """Write what is pending, then close every log (each close flushes); one partition's
        failure does not keep the others from closing cleanly."""
        self._flush_all()
        for part in self.partitions.values():
            part.wake_waiters()
            try:
                part.log.close()
            except LogError as exc:
                log.error("closing partition=%s failed: %s", part.name, exc)
        self.partitions.clear()

    # --- produce ------------------------------------------------------------------------------

    def append_nowait(
        self, part: Partition, batch: RecordBatch
    ) -> AppendOutcome | Deferred[AppendOutcome]:
        """Check one validated batch and queue it; the Deferred resolves once it is written
        (synchronously, inside the loop pass that writes it)."""
        pid = batch.producer_id
        if pid != NO_PRODUCER_ID and batch.base_sequence >= 0:
            check = part.producers.check(
                pid, batch.producer_epoch, batch.base_sequence, batch.last_sequence
            )
            if check.error is not ErrorCode.NONE:
                return AppendOutcome(check.error, message=check.message)
            if (dup := check.duplicate_of) is not None:
                if dup.first_offset >= part.log.log_end_offset:
                    # A retry of a batch still queued: answer with the original's outcome,
                    # never before the original is written.
                    for p in part.pending:
                        if p.base_offset == dup.first_offset:
                            return p.done
                return AppendOutcome(ErrorCode.NONE, dup.first_offset)
        base = part.next_offset
        part.next_offset = base + batch.last_offset_delta + 1
        if pid != NO_PRODUCER_ID and batch.base_sequence >= 0:
            meta = BatchMetadata(
                batch.base_sequence,
                batch.last_sequence,
                base,
                part.next_offset - 1,
                batch.max_timestamp,
            )
            part.producers.record(pid, batch.producer_epoch, meta)
        done: Deferred[AppendOutcome] = Deferred()
        part.pending.append(_Pending(batch, base, done))
        self._dirty[part] = None
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_all)
        return done

    def _flush_all(self) -> None:
        self._flush_scheduled = False
        dirty, self._dirty = self._dirty, {}
        for part in dirty:
            pending, part.pending = part.pending, []
            groups = _groups_up_to(pending, part.log.max_append_bytes)
            for i, group in enumerate(groups):
                try:
                    failed = self._write(part, group)
                except Exception:  # a bug; the other partitions' writes must still happen
                    log.exception("append failed partition=%s", part.name)
                    failed = AppendOutcome(ErrorCode.UNKNOWN_SERVER_ERROR)
                if failed is not None:  # offsets of the later groups are void too
                    self._fail(part, [p for g in groups[i:] for p in g], failed)
                    break

    def _fail(self, part: Partition, pending: list[_Pending], outcome: AppendOutcome) -> None:
        """Nothing of ``pending`` (or queued after it) is in the log: rewind and answer."""
        part.next_offset = part.log.log_end_offset
        part.producers.truncate_after(part.next_offset)
        for p in pending:
            p.done.resolve(outcome)

    def _write(self, part: Partition, pending: list[_Pending]) -> AppendOutcome | None:
        """One append; None once written and answered, else the failure to answer with."""
        now = self.clock_ms()
        try:
            result: AppendResult = part.log.append(
                [p.batch.buf for p in pending],
                leader_epoch=part.leader_epoch,
                now_ms=now,
                log_append_time=part.log_append_time,
            )
        except LogError as exc:
            log.error("append failed partition=%s error=%s", part.name, exc)
            return AppendOutcome(exc.error_code, message=str(exc))
        assert result.base_offset == pending[0].base_offset, "offsets assigned out of step"
        assert result.last_offset == pending[-1].base_offset + pending[-1].batch.last_offset_delta
        append_time = result.log_append_time_ms if part.log_append_time else -1
        part.high_watermark = part.log.log_end_offset
        for p in pending:
            p.done.resolve(AppendOutcome(ErrorCode.NONE, p.base_offset, append_time))
        assert part.high_watermark <= part.log.log_end_offset
        if self.on_append is not None:
            size = sum(p.batch.size_bytes for p in pending)
            count = sum(p.batch.last_offset_delta + 1 for p in pending)
            self.on_append(part, size, count)
        part.wake_waiters()
        return None

    # --- maintenance --------------------------------------------------------------------------

    def apply_retention(self) -> None:
        now = self.clock_ms()
        for part in list(self.partitions.values()):
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


def _groups_up_to(pending: list[_Pending], max_bytes: int) -> list[list[_Pending]]:
    """Consecutive runs of pending batches, each within one append's size limit (a segment)."""
    groups: list[list[_Pending]] = []
    size = max_bytes
    for p in pending:
        if size + p.batch.size_bytes > max_bytes and (not groups or groups[-1]):
            groups.append([])
            size = 0
        groups[-1].append(p)
        size += p.batch.size_bytes
    return groups
