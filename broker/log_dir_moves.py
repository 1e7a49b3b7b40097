"""Moving a replica to another of this broker's log directories while it serves
(AlterReplicaLogDirs; Kafka's future replica and ``ReplicaAlterLogDirsThread``).

Theory of operation
-------------------
* **Start.**  ``move_replica`` creates the *future log* ``<topic>-<partition>.<uuid>-future``
  in the destination directory, empty, starting at the replica's log start offset, and
  starts one task that copies into it.  The replica goes on serving from its current log.
* **Copy.**  The task reads whole batches from the current log at the future log's end and
  appends them verbatim (offsets and leader epochs kept; the aborted-transaction index is
  rebuilt from the copied batches, as a follower's is).  The future log follows the current
  one's log start (retention, DeleteRecords) and its truncations (a follower cutting a
  divergent tail: ``truncate_future``).  Between chunks the task yields to the event loop;
  once caught up it waits for the next append.
* **Swap.**  When the future log has everything the current one has and no append is queued,
  both are closed and, in one step of the event loop (no append can come between), the future
  directory is renamed to ``<topic>-<partition>`` in the destination, the current one to
  ``<topic>-<partition>.<uuid>-delete`` in the source, then deleted; the partition reopens
  its log from the destination (a clean reopen: no recovery).  Both renames stay within one
  directory, so directories on different file systems work.  A crash between the renames
  leaves two complete, identical copies: the first listed directory's is opened.
* **Not hosted yet.**  A partition this broker does not host (yet) answers
  REPLICA_NOT_AVAILABLE, and the directory is remembered for when it comes (a reassignment
  adding this broker), as Kafka's ``maybeUpdatePreferredLogDir``; at most
  ``MAX_PREFERRED_DIRS`` are remembered, the oldest forgotten first.
* **Ends.**  Deleting the partition, or a failure of either directory, abandons the move and
  its future log; a failure of the destination leaves the replica where it was.  A move to
  the directory the replica is in cancels a move under way.

A mixin of ``ReplicaManager`` (replica_manager.py): what it shares with the manager is the
``_Replicas`` protocol below, the methods' self type.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from broker.log.config import LogConfig
from broker.log.errors import KafkaStorageError, LogError
from broker.log.fetched_batches import AppendedBatch
from broker.log.log import PartitionLog
from broker.log.txn_index import AbortedTxn
from broker.log_dir import LogDirectories, LogDirectory
from broker.partition import Partition, aborted_entry, learn_producer
from broker.producer_state import ProducerStateManager
from broker.storage import Storage, join
from kafka_protocol.errors import ErrorCode

log = logging.getLogger("broker.log_dir_moves")

FUTURE_SUFFIX = "-future"
DELETE_SUFFIX = "-delete"
COPY_CHUNK_BYTES = 1 << 20  # per step of the copy, between yields to the event loop
MAX_PREFERRED_DIRS = 10_000  # directories asked for partitions not hosted yet
CAUGHT_UP_RECHECK_S = 0.1  # a caught-up copy looks again this often (or at the next append)


@dataclass(slots=True)
class FutureReplica:
    """A replica's copy under way in another directory."""

    dest: LogDirectory
    log: PartitionLog
    producers: ProducerStateManager  # for the aborted-transaction index of what is copied
    task: asyncio.Task[None] | None = None


class _Replicas(Protocol):
    storage: Storage
    log_dirs: LogDirectories
    partitions: dict[tuple[str, int], Partition]
    moving: dict[Partition, FutureReplica]
    preferred_dirs: dict[tuple[str, int], LogDirectory]
    _dirty: dict[Partition, None]
    _cleaning: dict[Partition, Any]  # a compaction pass reading the current log
    clock_ms: Callable[[], int]
    on_log_dir_moved: Callable[[Partition], None] | None

    def _log_failed(self, log_dir: LogDirectory, reason: str) -> None: ...
    def _copy_step(self, part: Partition, future: FutureReplica) -> bool: ...
    def _swap(self, part: Partition, future: FutureReplica) -> None: ...
    def abandon_move(self, part: Partition, reason: str) -> None: ...
    async def _copy(self, part: Partition, future: FutureReplica) -> None: ...
    def _reopen_or_fail(
        self, part: Partition, directory: str, log_dir: LogDirectory, why: str
    ) -> None: ...


class LogDirMoves:
    """``ReplicaManager``'s moves of replicas between log directories (a mixin)."""

    def remove_leftovers(self: _Replicas) -> None:
        """At start: delete the future logs of moves a crash interrupted (not resumed: the
        replica is whole where it was) and old logs a swap had not deleted yet."""
        for log_dir in self.log_dirs:
            try:
                names = self.storage.listdir(log_dir.path)
            except OSError:
                continue  # a broken directory: found offline when a partition opens there
            for name in names:
                if not name.endswith((FUTURE_SUFFIX, DELETE_SUFFIX)):
                    continue
                doomed = join(log_dir.path, name)
                try:
                    for file in self.storage.listdir(doomed):
                        self.storage.remove(join(doomed, file))
                    self.storage.rmdir(doomed)
                except OSError as exc:
                    log.warning("cannot delete leftover dir=%s error=%s", doomed, exc)
                    continue
                log.info("deleted a leftover of a replica move dir=%s", doomed)

    def move_replica(self: _Replicas, topic: str, index: int, path: str) -> ErrorCode:
        """AlterReplicaLogDirs for one partition (see the module docstring)."""
        dest = self.log_dirs.by_path(path)
        if dest is None:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if not dest.online:
            return ErrorCode.KAFKA_STORAGE_ERROR
        part = self.partitions.get((topic, index))
        if part is None:  # Kafka remembers where it goes when it comes (a reassignment's)
            if len(self.preferred_dirs) >= MAX_PREFERRED_DIRS:
                del self.preferred_dirs[next(iter(self.preferred_dirs))]  # the oldest
            self.preferred_dirs[(topic, index)] = dest
            return ErrorCode.REPLICA_NOT_AVAILABLE
        if part.offline:
            return ErrorCode.KAFKA_STORAGE_ERROR
        under_way = self.moving.get(part)
        if under_way is not None:
            if under_way.dest is dest:
                return ErrorCode.NONE
            self.abandon_move(part, f"moving to {dest.path} instead")
        if part.log_dir is dest:
            return ErrorCode.NONE
        name = f"{part.name}.{uuid.uuid4().hex}{FUTURE_SUFFIX}"
        directory = join(dest.path, name)
        try:
            self.storage.makedirs(directory)
            future_log = PartitionLog.open(self.storage, directory, part.config, self.clock_ms())
            future_log.truncate_fully_and_start_at(part.log_start_offset)
        except (OSError, KafkaStorageError) as exc:
            self._log_failed(dest, f"creating the future log of {part.name} failed: {exc}")
            return ErrorCode.KAFKA_STORAGE_ERROR
        future_log.on_offline = lambda reason: self._log_failed(dest, reason)
        future = FutureReplica(dest, future_log, ProducerStateManager())
        self.moving[part] = future
        future.task = asyncio.get_running_loop().create_task(self._copy(part, future))
        log.info("moving replica partition=%s from=%s to=%s", part.name, part.log_dir.path, path)
        return ErrorCode.NONE

    async def _copy(self: _Replicas, part: Partition, future: FutureReplica) -> None:
        loop = asyncio.get_running_loop()
        while self.moving.get(part) is future:
            try:
                caught_up = self._copy_step(part, future)
            except LogError as exc:
                self.abandon_move(part, f"copy failed: {exc}")
                return
            if not caught_up:
                await asyncio.sleep(0)
                continue
            if not part.pending and part not in self._dirty and part not in self._cleaning:
                self._swap(part, future)
                return
            waiter = loop.create_future()
            part.waiters.append(waiter)
            try:
                async with asyncio.timeout(CAUGHT_UP_RECHECK_S):
                    await waiter
            except TimeoutError:
                pass

    def _copy_step(self: _Replicas, part: Partition, future: FutureReplica) -> bool:
        """Copy one chunk; True when the future log has everything the current one has."""
        current, copy = part.log, future.log
        if current.log_start_offset > copy.log_end_offset:  # retention passed the copy
            copy.truncate_fully_and_start_at(current.log_start_offset)
            future.producers.clear()
        elif current.log_start_offset > copy.log_start_offset:
            copy.delete_records_before(current.log_start_offset)
        end = current.log_end_offset
        if copy.log_end_offset >= end:
            return True
        chunk = current.read(copy.log_end_offset, COPY_CHUNK_BYTES, min_one_batch=True)
        if chunk.size_bytes == 0:  # the rest is in the next segment
            return False
        now = self.clock_ms()
        producers = future.producers

        def learn(batches: list[AppendedBatch]) -> list[AbortedTxn]:
            aborted = []
            for b in batches:
                done = learn_producer(producers, b, seen_ms=now)
                if done is not None and (entry := aborted_entry(producers, done)):
                    aborted.append(entry)
            return aborted

        copy.append_as_follower(memoryview(current.read_bytes(chunk)), now_ms=now, on_batches=learn)
        return copy.log_end_offset >= end

    def truncate_future(self: _Replicas, part: Partition, offset: int) -> None:
        """The current log was cut at ``offset`` (a follower's divergent tail): so is the
        copy, which must never hold what the current log no longer has."""
        future = self.moving.get(part)
        if future is None:
            return
        try:
            if offset < future.log.log_start_offset:
                future.log.truncate_fully_and_start_at(offset)
            else:
                future.log.truncate_to(offset)
            future.producers.truncate_after(future.log.log_end_offset)
        except LogError as exc:
            self.abandon_move(part, f"truncating the future log failed: {exc}")

    def _swap(self: _Replicas, part: Partition, future: FutureReplica) -> None:
        """Make the caught-up future log the replica's log (no await in here)."""
        source, dest = part.log_dir, future.dest
        current = part.log
        final = join(dest.path, part.name)
        doomed = join(source.path, f"{part.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        config: LogConfig = part.config
        try:
            future.log.close()
            current.close()
            self.storage.rename(future.log.directory, final)
            self.storage.sync_dir(dest.path)
        except (OSError, LogError) as exc:
            del self.moving[part]
            self._reopen_or_fail(part, current.directory, source, f"swap failed: {exc}")
            return
        del self.moving[part]
        try:
            self.storage.rename(current.directory, doomed)
            self.storage.sync_dir(source.path)
            gone = PartitionLog.open(self.storage, doomed, config, self.clock_ms())
            gone.delete()
        except (OSError, LogError) as exc:  # the copy is whole: the replica moves regardless
            log.warning("old log of a moved replica left behind dir=%s error=%s", doomed, exc)
        self._reopen_or_fail(part, final, dest, "")
        log.info("moved replica partition=%s to=%s", part.name, dest.path)
        if self.on_log_dir_moved is not None and part.log_dir is dest:
            self.on_log_dir_moved(part)

    def _reopen_or_fail(
        self: _Replicas, part: Partition, directory: str, log_dir: LogDirectory, why: str
    ) -> None:
        if why:
            log.error("moving replica partition=%s failed: %s", part.name, why)
        try:
            reopened = PartitionLog.open(self.storage, directory, part.config, self.clock_ms())
        except (OSError, KafkaStorageError) as exc:
            self._log_failed(log_dir, f"reopening {part.name} failed: {exc}")
            return
        reopened.on_offline = lambda reason: self._log_failed(log_dir, reason)
        part.log = reopened
        part.log_dir = log_dir

    def abandon_move(self: _Replicas, part: Partition, reason: str) -> None:
        """Stop a move under way and delete its future log (the replica stays where it is)."""
        future = self.moving.pop(part, None)
        if future is None:
            return
        log.warning(
            "replica move abandoned partition=%s to=%s: %s", part.name, future.dest.path, reason
        )
        if future.task is not None:
            future.task.cancel()
        try:
            future.log.delete()
        except KafkaStorageError as exc:
            log.warning("cannot delete future log partition=%s error=%s", part.name, exc)
