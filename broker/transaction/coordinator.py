"""The transaction coordinator (Kafka's ``TransactionCoordinator`` and
``TransactionStateManager``): which ``__transaction_state`` partitions this broker coordinates,
loading them, persisting every state change, and completing decided transactions.

Theory of operation
-------------------
A broker coordinates the transactional ids of every ``__transaction_state`` partition it leads;
the partition's leader epoch is its *coordinator epoch*, carried by every marker so that a
partition leader refuses the markers of a stale coordinator.  Which partitions it leads, their
loads and their acks=all appends are the machinery it shares with the group coordinator
(broker/coordinator_partitions.py, which says how they work): here a load replays every record
into a dict of :class:`TxnMetadata` (the last record of an id wins; a tombstone removes it).
Once loaded, every transaction found in PrepareCommit or PrepareAbort is completed: its markers
are sent again and Complete* written, so what a failed coordinator decided is carried out by
the next one.

Decisions are the pure functions of :mod:`broker.transaction.state`.  Each change is one record
appended with acks=all and applied only once committed (``_persist``); while it is in flight
the id is *busy* and other requests for it get CONCURRENT_TRANSACTIONS (Kafka's pending state).
After PrepareCommit/PrepareAbort is committed, EndTxn is answered and the markers go out
(:mod:`broker.transaction.markers`), retried until every partition has its marker; then
CompleteCommit/CompleteAbort is written.

A producer begins its next transaction right after EndTxn is answered, so its
AddPartitionsToTxn nearly always arrives while the markers of the last one are still in
flight.  Kafka answers CONCURRENT_TRANSACTIONS at once and the client retries after a backoff
(librdkafka and the Java client: 20 ms), which then costs more than the transaction itself.
Here a request that finds its id busy or completing is held until that change is done, for at
most :data:`CONCURRENT_HOLD_MS`, and decided then; CONCURRENT_TRANSACTIONS is answered only if
the change is still under way.  The answer is the one Kafka would give on the client's retry,
only sooner.

Every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` ongoing transactions past
their timeout are aborted with the epoch bumped (fencing their producer); every
``transaction.remove.expired.transaction.cleanup.interval.ms`` ids idle for
``transactional.id.expiration.ms`` are tombstoned.  The topic is created on first use
(broker/internal_topics.py; also when any request for an id finds none) with
``transaction.state.log.num.partitions`` partitions, replication factor
``min(transaction.state.log.replication.factor, live brokers)``, ``min.insync.replicas`` capped
at it, and ``cleanup.policy=compact``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import Metric

from broker.controller_channel import (
    ControllerChannel,
    ControllerRequestError,
)
from broker.coordinator_partitions import APPEND_ERRORS, CoordinatorPartitions
from broker.fatal import fatal
from broker.internal_topics import InternalTopicCreation
from broker.metrics import gauge
from broker.partition import Partition
from broker.replica_manager import ReplicaManager
from broker.transaction import state as txn
from broker.transaction.markers import MarkerChannel
from broker.transaction.partitions import TransactionConfig, TxnPartition, define_topic
from broker.transaction.records import (
    TRANSACTION_STATE_TOPIC,
    decode,
    encode,
    partition_for,
)
from broker.transaction.remote import BrokerConnections, verify_remotely
from broker.transaction.state import TopicPartition, TxnMetadata, TxnState
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import ProtocolError
from kafka_protocol.record_batch import RecordBatch, SimpleRecord, build_batch
from metadata_log.image import ClusterImage

CONCURRENT_HOLD_MS = 100  # see the theory of operation: then CONCURRENT_TRANSACTIONS

log = logging.getLogger("broker.transaction")


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionCoordinator(CoordinatorPartitions[TxnPartition]):
    """See the module docstring.  ``allocate_producer_id`` is the broker's producer id
    allocator (shared with idempotent producers); ``offsets_partition_of`` names a group's
    ``__consumer_offsets`` partition (AddOffsetsToTxn)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        controller: ControllerChannel,
        image: Callable[[], ClusterImage],
        config: TransactionConfig,
        clock_ms: Callable[[], int],
        allocate_producer_id: Callable[[], Awaitable[int]],
        connections: BrokerConnections,
        node_id: int,
    ) -> None:
        creation = InternalTopicCreation(
            controller, image, config.replication_factor, functools.partial(define_topic, config)
        )
        super().__init__(
            replicas,
            image,
            clock_ms,
            TRANSACTION_STATE_TOPIC,
            partition_for,
            creation,
            config.append_timeout_ms,
            log,
        )
        self.node_id = node_id
        self.controller = controller
        self.config = config
        self._allocate = allocate_producer_id
        self.connections = connections
        self.markers = MarkerChannel(connections, image, node_id)
        self._loops: list[asyncio.Task[None]] = []

    # --- the shared machinery's hooks (broker/coordinator_partitions.py) ---------------------

    def on_missing_topic(self) -> None:
        self.create_topic_soon()  # not only on FindCoordinator: any request for an id

    def new_partition(self, part: Partition) -> TxnPartition:
        return TxnPartition(part, part.leader_epoch)

    def replay_batch(self, owned: TxnPartition, batch: RecordBatch) -> int:
        if batch.is_control:
            return 0  # markers are for the partitions of transactions, not for this topic
        records = 0
        for record in batch.iter_records():
            self._replay(owned, record.key, record.value)
            records += 1
        return records

    def reset(self, owned: TxnPartition) -> None:
        owned.txns = {}

    def on_loaded(self, owned: TxnPartition, records: int, elapsed_ms: int) -> None:
        prepared = [m for m in owned.txns.values() if m.state in txn.PREPARED]
        log.log(
            logging.INFO if owned.txns else logging.DEBUG,
            "loaded %s transactional ids=%d completing=%d in %d ms",
            owned.part.name,
            len(owned.txns),
            len(prepared),
            elapsed_ms,
        )
        for metadata in prepared:
            self._complete_later(owned, metadata)

    def on_unloaded(self, owned: TxnPartition) -> None:
        level = logging.INFO if owned.txns else logging.DEBUG
        log.log(level, "unloaded %s transactional ids=%d", owned.part.name, len(owned.txns))

    def _replay(self, owned: TxnPartition, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        try:
            transactional_id, metadata = decode(key, value)
        except (ValueError, ProtocolError) as exc:
            log.warning("skipping an undecodable record of %s: %s", owned.part.name, exc)
            return
        if metadata is None or metadata.state is TxnState.DEAD:
            owned.txns.pop(transactional_id, None)
        else:
            owned.txns[transactional_id] = metadata

    # --- persisting ---------------------------------------------------------------------------

    async def _persist(
        self, owned: TxnPartition, old: TxnMetadata | None, new: TxnMetadata
    ) -> ErrorCode:
        """Append ``new`` with acks=all; once committed, it becomes the id's state (and the
        markers of a Prepare* state go out)."""
        try:
            txn.check_transition(old, new)
        except AssertionError as exc:
            fatal("txn-transition", "invalid transaction state transition", error=str(exc))
        tid = new.transactional_id
        assert tid not in owned.busy, tid
        done = owned.busy[tid] = asyncio.get_running_loop().create_future()
        try:
            error = await self._append(owned, [encode(new, tombstone=new.state is TxnState.DEAD)])
        finally:
            del owned.busy[tid]
            done.set_result(None)
        if error is not ErrorCode.NONE:
            return error
        if not self._current(owned):
            return ErrorCode.NOT_COORDINATOR
        if new.state is TxnState.DEAD:
            owned.txns.pop(tid, None)
        else:
            owned.txns[tid] = new
        if new.state in txn.PREPARED:
            self._complete_later(owned, new)
        return ErrorCode.NONE

    async def _append(
        self, owned: TxnPartition, records: Sequence[tuple[bytes, bytes | None]]
    ) -> ErrorCode:
        if not self._current(owned):
            return ErrorCode.NOT_COORDINATOR
        batch = build_batch(
            [SimpleRecord(value, key) for key, value in records], now_ms=self.clock_ms()
        )
        outcome = await self.append_batch(owned, RecordBatch(memoryview(batch)))
        if outcome.error is not ErrorCode.NONE:
            return APPEND_ERRORS.get(outcome.error, ErrorCode.UNKNOWN_SERVER_ERROR)
        if owned.part.leader_epoch != owned.coordinator_epoch:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    # --- completing decided transactions ------------------------------------------------------

    def _complete_later(self, owned: TxnPartition, prepared: TxnMetadata) -> None:
        tid = prepared.transactional_id
        done = owned.completing[tid] = asyncio.get_running_loop().create_future()

        async def complete() -> None:
            try:
                await self._complete(owned, prepared)
            finally:
                if owned.completing.get(tid) is done:
                    del owned.completing[tid]
                done.set_result(None)

        self._spawn(owned, complete(), f"markers {tid}")

    async def _settled(self, transactional_id: str) -> TxnPartition | ErrorCode:
        """The id's partition once no change of the id is under way (or after
        :data:`CONCURRENT_HOLD_MS`: the caller then answers CONCURRENT_TRANSACTIONS)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONCURRENT_HOLD_MS / 1000
        while True:
            owned = self.owned_for(transactional_id)
            if isinstance(owned, ErrorCode):
                return owned
            change = owned.busy.get(transactional_id) or owned.completing.get(transactional_id)
            left = deadline - loop.time()
            if change is None or left <= 0:
                return owned
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await asyncio.shield(change)

    async def _complete(self, owned: TxnPartition, prepared: TxnMetadata) -> None:
        """Markers to every partition of a PrepareCommit/PrepareAbort transaction, then
        CompleteCommit/CompleteAbort (retried while this broker stays the coordinator)."""
        tid = prepared.transactional_id
        written = await self.markers.write(
            prepared.producer_id,
            prepared.producer_epoch,
            prepared.state is TxnState.PREPARE_COMMIT,
            owned.coordinator_epoch,
            prepared.partitions,
            lambda: self._current(owned) and owned.txns.get(tid) is prepared,
        )
        while written and self._current(owned) and owned.txns.get(tid) is prepared:
            while (change := owned.busy.get(tid)) is not None:
                await asyncio.shield(change)
            if owned.txns.get(tid) is not prepared:
                return
            error = await self._persist(owned, prepared, txn.complete(prepared, self.clock_ms()))
            if error is ErrorCode.NONE:
                return
            if error is ErrorCode.NOT_COORDINATOR:
                return  # the next coordinator completes it
            await asyncio.sleep(0.1)

    # --- the requests -------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> InitResult:
        """InitProducerId with a transactional id (the handler validated the timeout)."""
        owned = await self._settled(transactional_id)
        if isinstance(owned, ErrorCode):
            return InitResult(owned)
        fresh: int | None = None
        if txn.needs_new_producer_id(owned.txns.get(transactional_id)):
            try:
                fresh = int(await self._allocate())
            except ControllerRequestError as exc:  # retriable for the client
                log.warning("no producer id block from the controller: %s", exc)
                return InitResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            owned = self.owned_for(transactional_id)  # the await may have moved things
            if isinstance(owned, ErrorCode):
                return InitResult(owned)
        if transactional_id in owned.busy:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        now = self.clock_ms()
        old = owned.txns.get(transactional_id)
        current = old
        if current is None:
            if fresh is None:
                return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)  # removed meanwhile
            current = txn.new_transactional_id(transactional_id, fresh, timeout_ms, now)
        elif fresh is None and txn.needs_new_producer_id(current):
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)  # changed meanwhile: retry
        decision = txn.init_producer_id(current, timeout_ms, expected, fresh, now)
        if isinstance(decision, ErrorCode):
            return InitResult(decision)
        error = await self._persist(owned, old, decision.new)
        if error is not ErrorCode.NONE:
            return InitResult(error)
        if decision.answer is not ErrorCode.NONE:
            return InitResult(decision.answer)
        return InitResult(ErrorCode.NONE, decision.new.producer_id, decision.new.producer_epoch)

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> ErrorCode:
        """AddPartitionsToTxn (the handler answered unknown partitions already)."""
        owned = await self._settled(transactional_id)
        if isinstance(owned, ErrorCode):
            return owned
        current = owned.txns.get(transactional_id)
        if transactional_id in owned.busy:  # Kafka checks the producer first
            refused = txn.check_producer(current, producer_id, producer_epoch)
            return refused or ErrorCode.CONCURRENT_TRANSACTIONS
        decision = txn.add_partitions(
            current, producer_id, producer_epoch, partitions, self.clock_ms()
        )
        if decision is None:
            return ErrorCode.NONE
        if isinstance(decision, ErrorCode):
            return decision
        return await self._persist(owned, current, decision.new)

    def verify_local(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn verify_only, answered by this broker as the coordinator."""
        owned = self.owned_for(transactional_id)
        if isinstance(owned, ErrorCode):
            return dict.fromkeys(partitions, owned)
        current = owned.txns.get(transactional_id)
        return txn.verify_partitions(current, producer_id, producer_epoch, partitions)

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """:class:`~broker.transaction.interfaces.TransactionVerifier`: answered here when this
        broker coordinates the id, else by its coordinator (AddPartitionsToTxn verify_only).
        With ``transaction.partition.verification.enable=false`` every partition is NONE: the
        leader appends unverified, as Kafka's does then."""
        if not self.config.verification_enabled:
            return dict.fromkeys(partitions, ErrorCode.NONE)
        coordinator = self.coordinator_of(transactional_id)
        if isinstance(coordinator, ErrorCode):
            return dict.fromkeys(partitions, coordinator)
        if coordinator == self.node_id:
            return self.verify_local(transactional_id, producer_id, producer_epoch, partitions)
        return await verify_remotely(
            self.connections,
            coordinator,
            transactional_id,
            producer_id,
            producer_epoch,
            partitions,
        )

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        owned = await self._settled(transactional_id)
        if isinstance(owned, ErrorCode):
            return owned
        current = owned.txns.get(transactional_id)
        if transactional_id in owned.busy:
            refused = txn.check_producer(current, producer_id, producer_epoch)
            return refused or ErrorCode.CONCURRENT_TRANSACTIONS
        decision = txn.end_transaction(
            current, producer_id, producer_epoch, commit, self.clock_ms()
        )
        if isinstance(decision, ErrorCode):
            return decision
        return await self._persist(owned, current, decision.new)

    def describe(self, transactional_id: str) -> TxnMetadata | ErrorCode:
        owned = self.owned_for(transactional_id)
        if isinstance(owned, ErrorCode):
            return owned
        found = owned.txns.get(transactional_id)
        return found if found is not None else ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    def list_transactions(self) -> list[TxnMetadata] | ErrorCode:
        """Every id of the loaded partitions; COORDINATOR_LOAD_IN_PROGRESS while any loads."""
        if any(not owned.loaded for owned in self.owned.values()):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return [m for owned in self.owned.values() for m in owned.txns.values()]

    def state_metrics(self) -> list[Metric]:
        """Gauges when scraped: the transactional ids of the loaded partitions by state, and
        the ``__transaction_state`` partitions this broker coordinates."""
        ids = gauge(
            "kafka_transaction_coordinator_ids",
            "Transactional ids this broker coordinates, by transaction state",
            ["state"],
        )
        counts = Counter(m.state for o in self.owned.values() for m in o.txns.values())
        for state in TxnState:
            if state not in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
                ids.add_metric([state.kafka_name], counts[state])
        partitions = gauge(
            "kafka_transaction_coordinator_partitions",
            "__transaction_state partitions this broker coordinates (loaded)",
        )
        partitions.add_metric([], sum(1 for o in self.owned.values() if o.loaded))
        return [ids, partitions]

    # --- housekeeping -------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loops = [
            loop.create_task(
                self._every(self.config.abort_timed_out_interval_ms, self.abort_timed_out),
                name="txn-timeouts",
            ),
            loop.create_task(
                self._every(self.config.remove_expired_interval_ms, self.remove_expired),
                name="txn-id-expiry",
            ),
        ]

    async def stop(self) -> None:
        await self.stop_partitions(*self._loops)
        await self.markers.close()
        await self.connections.close()

    async def _every(self, interval_ms: int, action: Callable[[], Awaitable[int]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await action()
            except Exception:
                log.exception("transaction housekeeping failed")

    def _idle_ids(self) -> Iterator[tuple[TxnPartition, TxnMetadata]]:
        """The state of every id of the loaded partitions with no change of it under way, each
        checked as it is reached (the caller persists a change between two of them)."""
        for owned in list(self.owned.values()):
            if not owned.loaded:
                continue
            for current in list(owned.txns.values()):
                tid = current.transactional_id
                if tid in owned.busy or not self._current(owned):
                    continue
                if owned.txns.get(tid) is current:
                    yield owned, current

    async def abort_timed_out(self) -> int:
        """Abort (with the epoch bumped) every ongoing transaction past its timeout."""
        aborted = 0
        now = self.clock_ms()
        for owned, current in self._idle_ids():
            if not txn.timed_out(current, now):
                continue
            fenced = txn.fence_and_abort(current, now)
            if await self._persist(owned, current, fenced) is ErrorCode.NONE:
                aborted += 1
                log.info(
                    "aborting timed out transactional_id=%s producer_id=%d epoch=%d",
                    current.transactional_id,
                    fenced.producer_id,
                    fenced.producer_epoch,
                )
        return aborted

    async def remove_expired(self) -> int:
        """Tombstone ids idle for ``transactional.id.expiration.ms``."""
        removed = 0
        now = self.clock_ms()
        for owned, current in self._idle_ids():
            if not txn.expired(current, now, self.config.id_expiration_ms):
                continue
            if await self._persist(owned, current, txn.dead(current, now)) is ErrorCode.NONE:
                removed += 1
        if removed:
            log.info("removed expired transactional ids count=%d", removed)
        return removed
