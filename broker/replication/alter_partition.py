"""Leaders' ISR proposals to the controller (Kafka's ``AlterPartitionManager``).

Theory of operation
-------------------
A leader proposes an ISR (a shrink after ``replica.lag.time.max.ms``, an expansion when a
follower caught up, or its own ISR unchanged to report an unclean leadership RECOVERED);
:class:`AlterPartitionSender` queues the proposal and sends every queued one in a single
AlterPartition v3 request (``new_isr_with_epochs``: each follower with the broker epoch it had
when it last fetched, KIP-903), one request in flight at a time, to the active controller.
Each partition's answer goes back to the replica manager: the committed ISR and epochs, or an
error (the proposal is dropped and the leader proposes again at its next check).  A request
that fails as a whole (no controller reachable, STALE_BROKER_EPOCH) answers every proposal in
it with that error.  The metadata log carries the same outcome to every broker anyway; this
answer only lets the leader act on it sooner.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.kafka_client import ControllerClient, KafkaClientError
from broker.replication.partition_state import PartitionState
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AlterPartitionRequest, AlterPartitionResponse
from kafka_protocol.types import BrokerId, TopicName
from metadata_log.image import LeaderRecoveryState

if TYPE_CHECKING:
    from broker.replica_manager import Partition, ReplicaManager

log = logging.getLogger("broker.alter_partition")
ALTER_PARTITION_VERSION = 3
REQUEST_TIMEOUT_S = 5.0


@dataclass(slots=True)
class _Proposal:
    part: Partition
    proposed: frozenset[int]
    data: AlterPartitionRequest.PartitionData


class AlterPartitionSender:
    def __init__(
        self,
        client: ControllerClient,
        replicas: ReplicaManager,
        broker_id: int,
        broker_epoch: Callable[[], int],
    ) -> None:
        self.client = client
        self.replicas = replicas
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self._queued: list[_Proposal] = []
        self._task: asyncio.Task[None] | None = None

    def __call__(self, part: Partition, role: PartitionState, proposed: frozenset[int]) -> None:
        """Queue a proposal (the replica manager's ``alter_partition`` hook)."""
        data = AlterPartitionRequest.PartitionData(
            partition_index=part.index,
            leader_epoch=role.leader_epoch,
            new_isr_with_epochs=[
                AlterPartitionRequest.BrokerState(broker_id=BrokerId(b), broker_epoch=e)
                for b, e in role.isr_with_broker_epochs(proposed)
            ],
            # Without transactions a leader has nothing to recover: always RECOVERED.
            leader_recovery_state=LeaderRecoveryState.RECOVERED,
            partition_epoch=role.partition_epoch,
        )
        self._queued.append(_Proposal(part, proposed, data))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._send_all())

    async def _send_all(self) -> None:
        while self._queued:
            batch, self._queued = self._queued, []
            try:
                results = await self._send(batch)
            except asyncio.CancelledError:
                raise
            except (KafkaClientError, OSError, TimeoutError) as exc:
                log.info("AlterPartition failed: %s", exc or "timeout")
                results = {id(p): ErrorCode.REQUEST_TIMED_OUT for p in batch}
            except Exception:
                log.exception("AlterPartition failed")
                results = {id(p): ErrorCode.UNKNOWN_SERVER_ERROR for p in batch}
            for p in batch:
                result = results.get(id(p), ErrorCode.UNKNOWN_SERVER_ERROR)
                self.replicas.on_alter_partition_result(p.part, p.proposed, result)

    async def _send(
        self, batch: list[_Proposal]
    ) -> dict[int, ErrorCode | tuple[tuple[int, ...], int, int]]:
        by_topic: dict[uuid.UUID, list[_Proposal]] = {}
        for p in batch:
            assert isinstance(p.part.topic_id, uuid.UUID), p.part.topic_id
            by_topic.setdefault(p.part.topic_id, []).append(p)
        request = AlterPartitionRequest(
            broker_id=BrokerId(self.broker_id),
            broker_epoch=self.broker_epoch(),
            topics=[
                AlterPartitionRequest.TopicData(
                    topic_name=TopicName(ps[0].part.topic),
                    topic_id=topic_id,
                    partitions=[p.data for p in ps],
                )
                for topic_id, ps in by_topic.items()
            ],
        )
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            response = await self.client.request(request, ALTER_PARTITION_VERSION)
        assert isinstance(response, AlterPartitionResponse)
        if response.error_code != ErrorCode.NONE:
            error = ErrorCode.from_code(response.error_code)
            log.info("AlterPartition refused: %s", error.name)
            return {id(p): error for p in batch}
        results: dict[int, ErrorCode | tuple[tuple[int, ...], int, int]] = {}
        for topic in response.topics:
            proposals = {p.part.index: p for p in by_topic.get(topic.topic_id, [])}
            for answer in topic.partitions:
                asked = proposals.get(answer.partition_index)
                if asked is None:
                    continue
                if answer.error_code != ErrorCode.NONE:
                    results[id(asked)] = ErrorCode.from_code(answer.error_code)
                else:
                    isr = tuple(int(b) for b in answer.isr)
                    results[id(asked)] = (isr, answer.leader_epoch, answer.partition_epoch)
        return results

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
