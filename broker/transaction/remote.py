"""Requests from this broker's transaction coordinator to other brokers.

:class:`BrokerConnections` keeps one pipelined :class:`KafkaConnection` per broker on the
inter-broker listener, opened with the same ClientSecurity as the replica fetcher, and reopened
on the next request after a failure.  It carries the coordinator's markers
(:mod:`broker.transaction.markers`) and a partition leader's KIP-890 verification when another
broker coordinates the id (:func:`verify_remotely`: AddPartitionsToTxn v4+ with
``verify_only``, Kafka's ``AddPartitionsToTxnManager``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence

from broker.kafka_client import KafkaClientError, KafkaConnection
from broker.security.client_security import ClientSecurity
from broker.transaction.state import TopicPartition
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from kafka_protocol.types import ProducerId, TopicName, TransactionalId

log = logging.getLogger("broker.transaction")

VERIFY_MIN_VERSION = 4  # the first AddPartitionsToTxn with verify_only (KIP-890)
VERIFY_MAX_VERSION = 5


class BrokerConnections:
    """One connection per broker on the inter-broker listener."""

    def __init__(
        self,
        endpoint_of: Callable[[int], tuple[str, int] | None],
        security: ClientSecurity | None,
        client_id: str,
        request_timeout_ms: int = 30_000,
    ) -> None:
        self.endpoint_of = endpoint_of
        self.security = security
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        self._conns: dict[int, KafkaConnection] = {}
        self._locks: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def request(
        self, broker_id: int, request: Request, max_version: int, min_version: int = 0
    ) -> Response:
        """``request`` sent to ``broker_id`` at the highest common version; raises
        ``KafkaClientError``/``OSError``/``TimeoutError`` (the connection is dropped)."""
        conn: KafkaConnection | None = None
        try:
            async with asyncio.timeout(self.request_timeout_s):
                conn = await self._connection(broker_id)
                return await conn.request(request, max_version, min_version)
        except (KafkaClientError, OSError, TimeoutError):
            self._drop(broker_id, conn)
            raise

    async def _connection(self, broker_id: int) -> KafkaConnection:
        async with self._locks[broker_id]:
            conn = self._conns.get(broker_id)
            if conn is not None and not conn.closed:
                return conn
            address = self.endpoint_of(broker_id)
            if address is None:
                raise KafkaClientError(f"broker {broker_id} has no inter-broker endpoint")
            conn = await KafkaConnection.open(*address, self.client_id, self.security)
            self._conns[broker_id] = conn
            return conn

    def _drop(self, broker_id: int, conn: KafkaConnection | None) -> None:
        current = self._conns.get(broker_id)
        if current is not None and (conn is None or current is conn):
            current.close()
            del self._conns[broker_id]

    async def close(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()
            with contextlib.suppress(Exception):
                await conn.wait_closed()


async def verify_remotely(
    connections: BrokerConnections,
    coordinator: int,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Sequence[TopicPartition],
) -> dict[TopicPartition, ErrorCode]:
    """Ask broker ``coordinator`` whether ``partitions`` are in the transaction; a request
    that fails answers every partition COORDINATOR_NOT_AVAILABLE (retriable)."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, index in partitions:
        by_topic[topic].append(index)
    Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    request = AddPartitionsToTxnRequest(
        transactions=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                transactional_id=TransactionalId(transactional_id),
                producer_id=ProducerId(producer_id),
                producer_epoch=producer_epoch,
                verify_only=True,
                topics=[Topic(name=TopicName(t), partitions=ps) for t, ps in by_topic.items()],
            )
        ]
    )
    answers = dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    try:
        response = await connections.request(
            coordinator, request, VERIFY_MAX_VERSION, VERIFY_MIN_VERSION
        )
    except (KafkaClientError, OSError, TimeoutError) as exc:
        log.debug("verification with broker %d failed: %s", coordinator, exc or "timeout")
        return answers
    assert isinstance(response, AddPartitionsToTxnResponse)
    if response.error_code != ErrorCode.NONE:
        return dict.fromkeys(partitions, ErrorCode.from_code(response.error_code))
    for result in response.results_by_transaction:
        if result.transactional_id != transactional_id:
            continue
        for result_topic in result.topic_results:
            for p in result_topic.results_by_partition:
                key = (str(result_topic.name), p.partition_index)
                if key in answers:
                    error = ErrorCode.from_code(p.partition_error_code)
                    # v5's name for "not in the transaction" (the verifier's contract says
                    # INVALID_TXN_STATE, as v4 and a local verification answer it)
                    if error is ErrorCode.TRANSACTION_ABORTABLE:
                        error = ErrorCode.INVALID_TXN_STATE
                    answers[key] = error
    return answers
