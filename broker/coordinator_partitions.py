"""The partitions of an internal topic that a coordinator leads: the machinery the group
coordinator (``__consumer_offsets``, broker/coordinator/runtime.py) and the transaction
coordinator (``__transaction_state``, broker/transaction/coordinator.py) share, as Kafka's
``CoordinatorRuntime`` and ``TransactionStateManager`` do the same things for their topics.

Theory of operation
-------------------
A key (a group id, a transactional id) lives in the partition ``partition_for(key, count)`` of
the topic, and its coordinator is that partition's leader.  A broker coordinates every
partition of the topic it leads: when it becomes leader of one (:meth:`on_partition_role`) it
makes a fresh per-partition state (``new_partition``) and *loads* it: reads the partition's log
from its start to the log end offset of that moment, a chunk at a time, handing each batch to
``replay_batch`` and yielding to the event loop between chunks.  Meanwhile requests for its
keys get COORDINATOR_LOAD_IN_PROGRESS, and requests for keys of partitions it does not lead
NOT_COORDINATOR (the client asks FindCoordinator again); COORDINATOR_NOT_AVAILABLE while the
topic does not exist.  A load that meets an unreadable log waits a second, clears the state
(``reset``) and starts again.  Losing the leadership (or a new leader epoch) drops the state at
once and cancels its tasks, the load among them (:meth:`on_partition_removed`).

Every change is appended with acks=all (:meth:`append_batch`); the caller applies it to its
state only once committed, so what the coordinator answers is what the replicated log holds,
and the next coordinator after a failover loads exactly that.  An append not committed within
the coordinator's timeout is REQUEST_TIMED_OUT; the errors of a failed append are mapped as
Kafka maps them (:data:`APPEND_ERRORS`), each coordinator adding its own.

The topic is created on first use (FindCoordinator: :meth:`coordinator_of`) through
broker/internal_topics.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Generic, Protocol, TypeVar

from broker.deferred import Deferred
from broker.internal_topics import InternalTopicCreation
from broker.log.errors import LogError
from broker.partition import AppendOutcome, Partition
from broker.producer_state import VerificationGuard
from broker.replica_manager import ReplicaManager
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.record_batch import RecordBatch, iter_batches
from metadata_log.image import ClusterImage

LOAD_CHUNK_BYTES = 1 << 20
LOAD_RETRY_S = 1.0  # the wait before loading again a partition whose log could not be read

# Kafka's mapping of a failed append to a coordinator topic (``appendTransactionToLog``,
# ``CoordinatorOperationExceptionHelper``); each coordinator adds its own to these
APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}


class LedPartition(Protocol):
    """What the shared machinery needs of a coordinator's per-partition state."""

    loaded: bool

    @property
    def part(self) -> Partition: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def tasks(self) -> set[asyncio.Task[None]]: ...  # its load and any other work on it


S = TypeVar("S", bound=LedPartition)


class CoordinatorPartitions(Generic[S]):
    """The partitions of ``topic`` this broker leads (``owned``, by index), their loads and
    appends.  A coordinator subclasses it and gives: ``new_partition``, ``replay_batch``,
    ``reset``, ``on_loaded`` and ``on_unloaded``."""

    def __init__(
        self,
        replicas: ReplicaManager,
        image: Callable[[], ClusterImage],
        clock_ms: Callable[[], int],
        topic: str,
        partition_for: Callable[[str, int], int],
        creation: InternalTopicCreation,
        append_timeout_ms: int,
        log: logging.Logger,
    ) -> None:
        self.replicas = replicas
        self.image = image
        self.clock_ms = clock_ms
        self.owned: dict[int, S] = {}
        self._topic = topic
        self._partition_for = partition_for
        self._creation = creation
        self._append_timeout_ms = append_timeout_ms
        self._log = log

    # --- what a coordinator gives -------------------------------------------------------------

    def new_partition(self, part: Partition) -> S:
        raise NotImplementedError

    def replay_batch(self, owned: S, batch: RecordBatch) -> int:
        """Apply one batch read from the log; the count of records applied."""
        raise NotImplementedError

    def reset(self, owned: S) -> None:
        """Forget what a failed load replayed (it is loaded again)."""
        raise NotImplementedError

    def on_loaded(self, owned: S, records: int, elapsed_ms: int) -> None:
        """The partition is loaded (``owned.loaded`` is set)."""

    def on_unloaded(self, owned: S) -> None:
        """The partition's state was dropped (its tasks cancelled)."""

    # --- where keys live ----------------------------------------------------------------------

    def partition_of(self, key: str) -> int | None:
        topic = self.image().topics.get(self._topic)
        if topic is None or not topic.partitions:
            return None
        return self._partition_for(key, len(topic.partitions))

    def coordinator_of(self, key: str) -> int | ErrorCode:
        """The broker id coordinating ``key`` (FindCoordinator), creating the topic on first
        use."""
        topic = self.image().topics.get(self._topic)
        if topic is None or not topic.partitions:
            self._creation.create_soon()
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        leader = topic.partitions[self._partition_for(key, len(topic.partitions))].leader
        return leader if leader >= 0 else ErrorCode.COORDINATOR_NOT_AVAILABLE

    def owned_for(self, key: str) -> S | ErrorCode:
        """The loaded partition of a key this broker coordinates, or why not."""
        index = self.partition_of(key)
        if index is None:
            self.on_missing_topic()
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        owned = self.owned.get(index)
        if owned is None:
            return ErrorCode.NOT_COORDINATOR
        if not owned.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return owned

    def on_missing_topic(self) -> None:
        """A request (not FindCoordinator) found no topic."""

    def create_topic_soon(self) -> None:
        self._creation.create_soon()

    def _current(self, owned: S) -> bool:
        """Whether ``owned`` is still this broker's state of its partition."""
        return self.owned.get(owned.part.index) is owned

    # --- partition ownership ------------------------------------------------------------------

    def on_partition_role(self, part: Partition) -> None:
        """The replica manager changed (or confirmed) a partition's role."""
        owned = self.owned.get(part.index)
        if part.is_leader:
            if owned is not None and owned.part is part and owned.leader_epoch == part.leader_epoch:
                return
            self.on_partition_removed(part.index)
            owned = self.owned[part.index] = self.new_partition(part)
            self._spawn(owned, self._load(owned), f"load {part.name}")
        elif owned is not None:
            self.on_partition_removed(part.index)

    def on_partition_removed(self, index: int) -> None:
        owned = self.owned.pop(index, None)
        if owned is None:
            return
        for task in owned.tasks:
            task.cancel()
        self.on_unloaded(owned)

    def _spawn(self, owned: S, work: Coroutine[object, object, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(work, name=name)
        owned.tasks.add(task)
        task.add_done_callback(owned.tasks.discard)

    async def _load(self, owned: S) -> None:
        """Replay the partition, a chunk per loop pass."""
        part = owned.part
        started = self.clock_ms()
        offset, end, records = part.log_start_offset, part.log_end_offset, 0
        try:
            while offset < end:
                chunk = part.log.read(offset, LOAD_CHUNK_BYTES, max_offset=end)
                if chunk.size_bytes == 0:
                    break
                for batch in iter_batches(part.log.read_bytes(chunk), allow_truncated_tail=True):
                    records += self.replay_batch(owned, batch)
                    offset = batch.next_offset
                await asyncio.sleep(0)
                if not self._current(owned):
                    return  # unloaded meanwhile
        except (LogError, ProtocolError) as exc:
            self._log.error("cannot load %s: %s; retrying", part.name, exc)
            await asyncio.sleep(LOAD_RETRY_S)
            if self._current(owned):
                self.reset(owned)
                self._spawn(owned, self._load(owned), f"load {part.name}")
            return
        owned.loaded = True
        self.on_loaded(owned, records, self.clock_ms() - started)

    # --- appends ------------------------------------------------------------------------------

    def write(
        self,
        owned: S,
        batch: RecordBatch,
        verification_guard: VerificationGuard | None = None,
    ) -> AppendOutcome | Deferred[AppendOutcome]:
        """The batch appended with acks=all: resolves once committed (with its base offset),
        or with why not (INVALID_TXN_STATE when ``verification_guard`` was cleared)."""
        return self.replicas.append_nowait(owned.part, batch, -1, verification_guard)

    async def append_batch(
        self,
        owned: S,
        batch: RecordBatch,
        verification_guard: VerificationGuard | None = None,
        on_committed: Callable[[AppendOutcome], None] | None = None,
    ) -> AppendOutcome:
        """:meth:`write`, awaited for at most the append timeout (then REQUEST_TIMED_OUT).
        ``on_committed`` sees the outcome as soon as it is known, even after the wait timed
        out, before any later append (a marker) is answered: the state follows the log."""
        outcome = self.write(owned, batch, verification_guard)
        if isinstance(outcome, Deferred):
            if on_committed is not None:
                outcome.then(on_committed)
            outcome = await self._within_timeout(outcome)
        elif on_committed is not None:
            on_committed(outcome)
        if outcome.error is not ErrorCode.NONE:
            self._log.info("append to %s failed error=%s", owned.part.name, outcome.error.name)
        return outcome

    async def _within_timeout(self, pending: Deferred[AppendOutcome]) -> AppendOutcome:
        try:
            async with asyncio.timeout(self._append_timeout_ms / 1000):
                return await pending
        except TimeoutError:
            return AppendOutcome(ErrorCode.REQUEST_TIMED_OUT)

    # --- stopping -----------------------------------------------------------------------------

    async def stop_partitions(self, *tasks: asyncio.Task[None] | None) -> None:
        """Drop every partition's state, then cancel and await ``tasks`` and the topic's
        creation."""
        for index in list(self.owned):
            self.on_partition_removed(index)
        for task in (*tasks, self._creation.task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
