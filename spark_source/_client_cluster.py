"""Where requests go: the blocking shell over the core's metadata cache and bootstrap lookup.

A :class:`Cluster` keeps one :class:`~spark_source._client_conn.BrokerConnection` per broker
address (opened on first use) and the core's
:class:`~kafka_protocol.client.metadata.MetadataCache`.  A partition's leader is looked up in the
cache, which is refreshed with Metadata (from any reachable broker: open connections first,
then the known brokers, then the bootstrap list) when the leader is not known or was
invalidated after NOT_LEADER_OR_FOLLOWER and its kind.  The client's operations
(:mod:`spark_source.client`, ``_client_fetch``, ``_client_groups``, the producer) all go
through it, and it imports none of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from kafka_protocol._codec import Response
from kafka_protocol.client.error_policy import TOPIC_GONE_ERRORS
from kafka_protocol.client.metadata import Address, MetadataCache
from kafka_protocol.messages import MetadataRequest, MetadataResponse
from kafka_protocol.types import TopicName
from spark_source._client_config import ClientConfig
from spark_source._client_conn import (
    MAX_IN_FLIGHT,
    Attempts,
    BrokerConnection,
    InFlight,
    RequestFor,
    Versions,
)
from spark_source._client_types import (
    ConnectionFailed,
    TopicNotFound,
    TopicPartition,
    raise_unless_retriable,
)

METADATA: Final = Versions(3, 1, 12)
AUTO_CREATE_FLAG: Final = 4  # Metadata v4 lets the client forbid topic auto-creation


class Cluster:
    """Connections to the brokers and the metadata cache (see the module docstring)."""

    def __init__(self, bootstrap: Sequence[Address], config: ClientConfig) -> None:
        self.bootstrap = list(bootstrap)
        self.config = config
        self.cache = MetadataCache()
        self._conns: dict[Address, BrokerConnection] = {}

    def connection(self, address: Address) -> BrokerConnection:
        conn = self._conns.get(address)
        if conn is None:
            conn = self._conns[address] = BrokerConnection(*address, self.config)
        return conn

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def candidates(self) -> list[Address]:
        """Open connections first, then the known brokers (shuffled), then the bootstrap list."""
        opened = [a for a, c in self._conns.items() if c.is_open]
        return self.cache.candidates(opened, self.bootstrap)

    # --- metadata -----------------------------------------------------------------------------

    def metadata(
        self, topics: list[str] | None, attempts: Attempts, *, auto_create: bool = False
    ) -> MetadataResponse:
        """Metadata of ``topics`` (None: every topic) from any reachable broker; the cache is
        updated with it."""
        wanted = (
            None
            if topics is None
            else [MetadataRequest.MetadataRequestTopic(name=TopicName(t)) for t in topics]
        )

        def request(version: int) -> MetadataRequest:
            if version < AUTO_CREATE_FLAG:  # v1-v3 always allow it
                return MetadataRequest(topics=wanted)
            return MetadataRequest(topics=wanted, allow_auto_topic_creation=auto_create)

        response = self.request_any(request, METADATA, attempts)
        assert isinstance(response, MetadataResponse)
        self.cache.update(response)
        return response

    def invalidate(self, tp: TopicPartition) -> None:
        """Forget ``tp``'s leader: the next request for it refreshes metadata first."""
        self.cache.invalidate(tp)

    def leader(self, tp: TopicPartition, attempts: Attempts) -> tuple[Address, int] | None:
        """(address, leader epoch) of ``tp``'s leader, refreshing metadata if it is not
        known; None (the reason noted in ``attempts``) while no leader is known.  Raises
        :class:`TopicNotFound` if the topic or partition does not exist."""
        if self.cache.needs_refresh(tp):
            response = self.metadata([tp.topic], attempts)
            error = self.cache.topic_error(response, tp.topic)
            if error in TOPIC_GONE_ERRORS:
                raise TopicNotFound(tp.topic)
            if tp not in self.cache.leaders:
                if tp.topic in self.cache.partition_counts:
                    raise TopicNotFound(tp.topic, tp.partition)
                raise_unless_retriable(error, "Metadata", tp)
                attempts.note(error)
                return None
        found = self.cache.leader(tp)
        if found is None:
            attempts.note(f"{tp} has no leader")
        return found

    def leaders_of(
        self, tps: Iterable[TopicPartition], attempts: Attempts
    ) -> dict[Address, dict[TopicPartition, int]]:
        """The partitions with a known leader, by leader address, with their leader epochs."""
        out: dict[Address, dict[TopicPartition, int]] = {}
        for tp in tps:
            found = self.leader(tp, attempts)
            if found is not None:
                out.setdefault(found[0], {})[tp] = found[1]
        return out

    # --- requests -----------------------------------------------------------------------------

    def request_any(self, request: RequestFor, versions: Versions, attempts: Attempts) -> Response:
        """``request`` to any reachable broker, trying each in turn, backing off between
        rounds until the deadline."""
        while True:
            for address in self.candidates():
                try:
                    return self.connection(address).request(
                        request, versions, attempts.request_deadline()
                    )
                except ConnectionFailed as exc:
                    attempts.note(exc)
            attempts.retry()

    def exchange(
        self,
        requests: Mapping[Address, Sequence[RequestFor]],
        versions: Versions,
        deadline: float,
    ) -> dict[Address, list[Response | ConnectionFailed]]:
        """Requests to several brokers, all sent (pipelined on each connection) before any
        answer is awaited; each answer, or the failure that lost it, in request order."""
        sent: dict[Address, list[InFlight | ConnectionFailed]] = {}
        for address, batch in requests.items():
            assert len(batch) <= MAX_IN_FLIGHT, len(batch)
            conn = self.connection(address)
            tickets: list[InFlight | ConnectionFailed] = []
            sent[address] = tickets
            for request in batch:
                try:
                    tickets.append(conn.submit(request, versions, deadline))
                except ConnectionFailed as exc:
                    tickets += [exc] * (len(batch) - len(tickets))
                    break
        out: dict[Address, list[Response | ConnectionFailed]] = {}
        for address, tickets in sent.items():
            conn = self.connection(address)
            answers: list[Response | ConnectionFailed] = []
            out[address] = answers
            for ticket in tickets:
                if isinstance(ticket, ConnectionFailed):
                    answers.append(ticket)
                    continue
                try:
                    answers.append(conn.receive(ticket, deadline))
                except ConnectionFailed as exc:
                    answers.append(exc)
        return out
