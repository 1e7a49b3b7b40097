"""``kraft transactions --bootstrap-server``: the same actions as through the REST API, asked of
the brokers directly over Kafka, as ``kafka-transactions.sh --bootstrap-server`` does (the
login from ``--command-config``, :func:`kraft.cli.admin_auth.kafka_security`).  The brokers then
authorize the caller themselves.  Answers are the REST API's JSON
(:mod:`kraft.transactions.answers`), so the tables are printed the same way.

Where the brokers and partitions are comes from Metadata answers (the bootstrap brokers first):
all topics for find-hanging without ``--topic``, none (the brokers only) for list and describe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar

from broker.security.client_security import ClientSecurity
from kafka_protocol.clock import wall_ms
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import MetadataRequest, MetadataResponse
from kafka_protocol.types import TopicName
from kraft.cli.consume_group import METADATA_MAX, METADATA_MIN, MetadataView
from kraft.cli.rest_client import AdminError
from kraft.groups.client import Address, GroupClient, GroupError
from kraft.transactions.admin import NoOpenTransaction, TransactionAdmin
from kraft.transactions.answers import (
    abort_json,
    description_json,
    listing_json,
    producers_json,
    search_json,
)
from kraft.transactions.model import AbortSpec, partitions_to_search
from metadata_log.image import TopicPartition

T = TypeVar("T")

CLIENT_ID: Final = "kraft-transactions"
CALL_TIMEOUT_S: Final = 30.0  # one whole action


class KafkaTransactions:
    """The actions of ``kraft transactions`` on the brokers of ``bootstrap``."""

    def __init__(self, bootstrap: Sequence[Address], security: ClientSecurity | None) -> None:
        # ids unknown until the first Metadata answer: negative ones
        self.view = MetadataView([(-1 - i, a) for i, a in enumerate(bootstrap)])
        self.admin = TransactionAdmin(self.view, client_id=CLIENT_ID, security=security)
        self._metadata = GroupClient(self.view, client_id=CLIENT_ID, security=security)
        self.replicas: dict[TopicPartition, tuple[int, ...]] = {}

    async def close(self) -> None:
        await self.admin.close()
        await self._metadata.close()

    async def refresh(self, topics: Sequence[str] | None) -> None:
        """Metadata of ``topics`` (None: all; empty: the brokers only) into the view."""
        request = MetadataRequest(
            topics=None
            if topics is None
            else [MetadataRequest.MetadataRequestTopic(name=TopicName(t)) for t in topics],
            allow_auto_topic_creation=False,
        )

        async def attempt(n: int) -> MetadataResponse:
            brokers = self.view.live_brokers()
            response = await self._metadata.send(
                brokers[n % len(brokers)][1], request, METADATA_MAX, METADATA_MIN
            )
            assert isinstance(response, MetadataResponse)
            return response

        response = await self._metadata.retrying("Metadata", attempt)
        named = [str(t.name) for t in response.topics if t.name is not None]
        self.view.apply(response, topics if topics is not None else named)
        for topic in response.topics:
            if topic.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and topics:
                raise GroupError(
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"not authorized to describe {topic.name}"
                )
            if topic.error_code != ErrorCode.NONE or topic.name is None:
                continue
            for p in topic.partitions:
                tp = TopicPartition(str(topic.name), p.partition_index)
                self.replicas[tp] = tuple(int(b) for b in p.replica_nodes)

    def _known(self, tp: TopicPartition) -> None:
        if tp not in self.replicas:
            partitions = self.view.partitions.get(tp.topic)
            raise AdminError(
                "UNKNOWN_TOPIC_OR_PARTITION",
                f"topic {tp.topic!r} does not exist"
                if partitions is None
                else f"topic {tp.topic!r} has no partition {tp.partition}",
            )

    def _known_broker(self, broker_id: int | None) -> None:
        if broker_id is not None and broker_id not in dict(self.view.live_brokers()):
            raise AdminError("BROKER_NOT_AVAILABLE", f"broker {broker_id} is not alive")

    # --- the actions: the REST API's answers --------------------------------------------------

    async def list(self, states: list[str], producer_ids: list[int], duration_ms: int) -> Any:
        await self.refresh([])
        listed = await self.admin.list_transactions(states, producer_ids, duration_ms)
        return [listing_json(t) for t in listed]

    async def describe(self, transactional_id: str) -> Any:
        await self.refresh([])
        return description_json(await self.admin.describe_transaction(transactional_id), wall_ms())

    async def producers(self, tp: TopicPartition, broker_id: int | None) -> Any:
        await self.refresh([tp.topic])
        self._known(tp)
        self._known_broker(broker_id)
        found = await self.admin.producers_of(tp, broker_id)
        return producers_json(tp.topic, tp.partition, broker_id, found)

    async def abort(self, tp: TopicPartition, target: int | AbortSpec) -> Any:
        """Abort by start offset (an int) or as ``target`` says."""
        await self.refresh([tp.topic])
        self._known(tp)
        if isinstance(target, AbortSpec):
            await self.admin.abort(target)
            return abort_json(target)
        try:
            return abort_json(await self.admin.abort_at(tp, target))
        except NoOpenTransaction as exc:
            raise AdminError("NOT_FOUND", str(exc)) from None

    async def hanging(
        self, topic: str | None, partition: int | None, broker_id: int | None, max_timeout_ms: int
    ) -> Any:
        await self.refresh(None if topic is None else [topic])
        if topic is not None:
            self._known(TopicPartition(topic, partition or 0))
        self._known_broker(broker_id)
        partitions = partitions_to_search(self.replicas, topic, partition, broker_id)
        now_ms = wall_ms()
        found = await self.admin.find_hanging(
            partitions,
            broker_id=broker_id,
            max_transaction_timeout_ms=max_timeout_ms,
            now_ms=now_ms,
        )
        return search_json(max_timeout_ms, len(partitions), found, now_ms)


def run_on_brokers(
    bootstrap: Sequence[Address],
    security: ClientSecurity | None,
    action: Callable[[KafkaTransactions], Awaitable[T]],
) -> T:
    """``action`` on a fresh client, within :data:`CALL_TIMEOUT_S`; failures as AdminErrors."""

    async def main() -> T:
        cluster = KafkaTransactions(bootstrap, security)
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                return await action(cluster)
        finally:
            await cluster.close()

    try:
        return asyncio.run(main())
    except GroupError as exc:
        raise AdminError(exc.error.name, exc.message) from None
    except TimeoutError:
        raise AdminError("REQUEST_TIMED_OUT", f"no answer within {CALL_TIMEOUT_S:g} s") from None
