"""The small blocking Kafka client the Spark source and sink use on the driver and executors.

It depends on ``kafka_protocol`` only, so an executor needs nothing but this package and a
route to the brokers.  One :class:`KafkaClient` serves one Spark task (no thread safety); it
keeps one connection per broker, opened on first use, so a client can be pickled to an
executor or inherited across ``fork`` (connections are dropped and reopened there).

Theory of operation
-------------------
Metadata (brokers, partition leaders and leader epochs) is cached and refreshed when a
partition's leader is unknown or a broker says it is not the leader (NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH, ...).  Requests carry the cached leader epoch (KIP-320), so a stale
leader cannot answer.  Every operation retries what a later try may cure (a lost connection,
a retriable Kafka error, a leader being elected) with backoff, each request bounded by
``request.timeout.ms`` and the whole operation by ``default.api.timeout.ms``
(:class:`~spark_source._client_conn.Attempts`); per-partition outcomes are Kafka error codes
(:class:`ErrorCode`) until one is final.

:meth:`KafkaClient.read` fetches one partition (Fetch v4-v12, sessionless, records up to the
high watermark; with ``isolation.level=read_committed`` up to the last stable offset) and
yields what the broker sent, complete RecordBatch v2 batches only, never decoding a record;
:meth:`KafkaClient.read_chunks` also yields the aborted transactions each answer names.  It
pipelines: the next fetch is sent before a chunk is yielded, so the broker reads the log while
the caller decodes.

This is the blocking shell over the sans-I/O client core, :mod:`kafka_protocol.client`
(correlation ids and response matching, version negotiation, backoff, the error table, the
metadata cache, the fetch cursor).  The pieces: ``_client_conn`` (one socket and the retry
clock), ``_client_cluster`` (connections per broker, metadata and leader lookup),
``_client_fetch`` (reading a partition), ``_client_groups`` (offset commits and fetches at the
group coordinator), ``_client_config`` (the keys below), ``_client_types`` (the names shared
with :mod:`spark_source.producer`, the exceptions among them).  None of them imports this
module, nor each other in a cycle.

Honoured config keys (Kafka's names, without Spark's ``kafka.`` prefix; others are ignored):
``client.id``, ``request.timeout.ms`` (30000), ``default.api.timeout.ms`` (60000: an
operation's deadline, and how long :meth:`~KafkaClient.read` waits without progress),
``socket.connection.setup.timeout.ms`` (10000), ``retry.backoff.ms`` (100),
``retry.backoff.max.ms`` (1000), ``fetch.max.bytes`` (50 MiB), ``max.partition.fetch.bytes``
(1 MiB), ``fetch.max.wait.ms`` (500), ``fetch.min.bytes`` (1), ``receive.buffer.bytes`` and
``send.buffer.bytes`` (-1: the OS default, unlike Java's 64/128 KiB), ``check.crcs`` (true:
the reader checks every fetched batch's CRC; the client itself never decodes records),
``isolation.level`` (read_uncommitted, or read_committed: fetches stop at the last stable
offset and name the aborted transactions, ListOffsets ``LATEST`` answers the last stable
offset).

Local failures (remote outcomes are Kafka error codes until they are final)::

    KafkaClientError
    ├── ConfigError          a malformed config value or bootstrap list (also a ValueError)
    ├── ConnectionFailed     no broker reachable / connections failing until the deadline
    │                        (also a ConnectionError)
    ├── UnsupportedBroker    a broker supports no version of an api this client needs
    ├── InvalidResponse      a frame above the size limit, or bytes that do not decode
    ├── TopicNotFound        the topic or partition does not exist
    ├── OperationTimedOut    a retriable Kafka error persisted until the deadline (``.error``;
    │                        also a TimeoutError)
    ├── BrokerError          a Kafka error retrying cannot cure (``.error``, ``.tp``)
    │   ├── ProduceError     a batch or record the producer cannot write
    │   └── TransactionError a transactional step failed (fenced, timed out, bad state)
    └── DataLossError        offsets asked for are gone: retention, truncation, topic deleted
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType, TracebackType
from typing import Any, Final, Self

from kafka_protocol.client.error_policy import TOPIC_GONE_ERRORS
from kafka_protocol.client.metadata import Address, parse_address
from kafka_protocol.client.requests import list_offsets_answers, list_offsets_request
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ListOffsetsRequest, ListOffsetsResponse
from spark_source._client_cluster import Cluster
from spark_source._client_config import ClientConfig
from spark_source._client_conn import Attempts, InvalidResponse, Versions
from spark_source._client_fetch import Chunk, FetchCursor
from spark_source._client_groups import GroupOffsets
from spark_source._client_types import (
    EARLIEST,
    LATEST,
    BrokerError,
    ConfigError,
    ConnectionFailed,
    DataLossError,
    KafkaClientError,
    OperationTimedOut,
    ProduceError,
    TopicNotFound,
    TopicPartition,
    TransactionError,
    UnsupportedBroker,
    raise_unless_retriable,
)
from spark_source.read_committed import READ_COMMITTED

__all__ = [
    "EARLIEST",
    "LATEST",
    "NO_OFFSET",
    "Address",
    "BrokerError",
    "Chunk",
    "ConfigError",
    "ConnectionFailed",
    "DataLossError",
    "InvalidResponse",
    "KafkaClient",
    "KafkaClientError",
    "OperationTimedOut",
    "ProduceError",
    "TopicNotFound",
    "TopicPartition",
    "TransactionError",
    "UnsupportedBroker",
]

NO_OFFSET: Final = -1  # ListOffsets by timestamp: no record at or after it
NO_CONFIG: Final[Mapping[str, str]] = MappingProxyType({})
# The versions this client sends (the broker's range decides within these).
LIST_OFFSETS: Final = Versions(2, 1, 7)
LIST_OFFSETS_READ_COMMITTED: Final = Versions(2, 2, 7)  # v2 added isolation_level


def _list_offsets_request(
    specs: Mapping[TopicPartition, int], epochs: Mapping[TopicPartition, int], level: int
) -> ListOffsetsRequest:
    request = list_offsets_request(specs, epochs)
    request.isolation_level = level
    return request


def parse_bootstrap(text: str) -> list[Address]:
    try:
        addresses = [parse_address(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise ConfigError(f"bootstrap.servers: {exc}") from None
    if not addresses:
        raise ConfigError("bootstrap.servers is empty")
    return addresses


class KafkaClient:
    """Metadata, offsets, fetches and offset commits (see the module docstring)."""

    def __init__(self, bootstrap_servers: str, config: Mapping[str, str] = NO_CONFIG) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._config_items = dict(config)
        self.config = ClientConfig.from_mapping(config)
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self._init_state()

    def _init_state(self) -> None:
        self._pid = os.getpid()
        self._closed = False
        self.cluster = Cluster(self._bootstrap, self.config)
        self._groups = GroupOffsets(self.cluster)

    # --- pickling, fork, lifetime -------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap_servers, "config": self._config_items}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["bootstrap_servers"], state["config"])  # type: ignore[misc]

    def close(self) -> None:
        """Close every connection; the client cannot be used afterwards."""
        if self._pid == os.getpid():
            self.cluster.close()
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _check_usable(self) -> None:
        if self._closed:
            raise KafkaClientError("the client is closed")
        if self._pid != os.getpid():  # forked: the sockets belong to the parent
            self.cluster.close()  # closes this process's descriptors only; no FIN is sent
            self._init_state()

    # --- metadata -------------------------------------------------------------------------------

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """Partition counts of those of ``topics`` that exist."""
        self._check_usable()
        names = sorted(set(topics))
        if not names:
            return {}
        attempts = Attempts(self.config, "Metadata")
        while True:
            response = self.cluster.metadata(names, attempts)
            waiting = [
                t
                for t in response.topics
                if t.error_code != ErrorCode.NONE and t.error_code not in TOPIC_GONE_ERRORS
            ]
            if not waiting:
                counts = self.cluster.cache.partition_counts
                return {n: counts[n] for n in names if n in counts}
            raise_unless_retriable(ErrorCode.from_code(waiting[0].error_code), "Metadata")
            attempts.retry(ErrorCode.from_code(waiting[0].error_code))

    def topic_names(self) -> list[str]:
        """Every topic that is not internal (``__consumer_offsets``), sorted."""
        self._check_usable()
        response = self.cluster.metadata(None, Attempts(self.config, "Metadata"))
        return sorted(
            t.name
            for t in response.topics
            if t.name is not None and not t.is_internal and t.error_code == ErrorCode.NONE
        )

    # --- offsets --------------------------------------------------------------------------------

    def list_offsets(
        self, specs: Mapping[TopicPartition, int], *, isolation_level: int | None = None
    ) -> dict[TopicPartition, int]:
        """Offsets by ListOffsets, per partition: :data:`EARLIEST` gives the log start
        offset, :data:`LATEST` the high watermark (the end of the committed records; under
        read_committed, the last stable offset), and a timestamp (ms) the first offset whose
        record timestamp is at or after it, or :data:`NO_OFFSET` (-1) if there is none.
        ``isolation_level`` overrides the config's ``isolation.level`` (0 read_uncommitted,
        1 read_committed).  Raises :class:`TopicNotFound` for a partition that does not
        exist."""
        self._check_usable()
        level = self.config.isolation_level if isolation_level is None else isolation_level
        attempts = Attempts(self.config, "ListOffsets")
        pending = {TopicPartition(*tp): spec for tp, spec in specs.items()}
        found: dict[TopicPartition, int] = {}
        while pending:
            by_leader = self.cluster.leaders_of(pending, attempts)
            requests = {
                a: [_list_offsets_request({tp: pending[tp] for tp in epochs}, epochs, level)]
                for a, epochs in by_leader.items()
            }
            versions = LIST_OFFSETS_READ_COMMITTED if level == READ_COMMITTED else LIST_OFFSETS
            answers = self.cluster.exchange(requests, versions, attempts.request_deadline())
            for address, (answer,) in answers.items():
                if isinstance(answer, ConnectionFailed):
                    attempts.note(answer)
                    for tp in by_leader[address]:
                        self.cluster.invalidate(tp)
                    continue
                assert isinstance(answer, ListOffsetsResponse)
                for tp, offset in self._list_offsets_answers(answer, attempts).items():
                    found[tp] = offset
                    pending.pop(tp, None)
            if pending:
                attempts.retry()
        return found

    def _list_offsets_answers(
        self, response: ListOffsetsResponse, attempts: Attempts
    ) -> dict[TopicPartition, int]:
        out = {}
        for tp, answer in list_offsets_answers(response).items():
            if not isinstance(answer, ErrorCode):
                out[tp] = answer
                continue
            raise_unless_retriable(answer, "ListOffsets", tp)
            attempts.note(answer)
            self.cluster.invalidate(tp)
        return out

    # --- reading --------------------------------------------------------------------------------

    def read(self, tp: TopicPartition, start: int, end: int) -> Iterator[memoryview]:
        """Raw record sets covering offsets ``start`` to ``end - 1`` of ``tp``.

        Each chunk is RecordBatch v2 bytes exactly as fetched from the partition's leader:
        whole batches only (the truncated tail batch a fetch may end with is dropped and
        fetched again), each overlapping ``[start, end)``; the first may begin below
        ``start`` and the last end past ``end - 1`` (a fetch from inside a batch gets the
        whole batch), so the caller skips records outside the range, and the records of
        control batches (transaction markers).  Chunks are views into the fetch response:
        hold them as long as needed, they are never reused.

        Leader changes, NOT_LEADER_OR_FOLLOWER, fenced epochs and lost connections are
        retried with backoff and a metadata refresh; the read fails only when it has made no
        progress for ``default.api.timeout.ms``.  Raises :class:`DataLossError` if ``start``
        (or any later position) is below the log start offset (retention), if the topic was
        deleted, or if the log ends before ``end``: either the leader's log end is below the
        position (OFFSET_OUT_OF_RANGE from the current leader twice), or the high watermark
        stays below ``end`` without progress for ``default.api.timeout.ms`` (records lost in
        an unclean leader election; ``available_until`` is the high watermark).
        """
        return (chunk.records for chunk in self.read_chunks(tp, start, end))

    def read_chunks(self, tp: TopicPartition, start: int, end: int) -> Iterator[Chunk]:
        """:meth:`read`, each chunk with the aborted transactions its Fetch answer names
        (read_committed; none under read_uncommitted): the records of those transactions
        are in the chunk, for the caller to skip
        (:class:`~spark_source.read_committed.AbortedBatchFilter`)."""
        assert start >= 0, start
        self._check_usable()
        if start >= end:
            return iter(())
        cursor = FetchCursor(self.cluster, self.list_offsets, TopicPartition(*tp), start, end)
        return cursor.chunks()

    # --- consumer group offsets -----------------------------------------------------------------

    def commit_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int], metadata: str = ""
    ) -> None:
        """Commit ``offsets`` (the next offset to read, per partition) for ``group_id`` as a
        standalone commit (generation -1, no member id: a group with active members refuses
        it with UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION, raised as :class:`BrokerError`).
        ``metadata`` is stored with each offset."""
        self._check_usable()
        self._groups.commit(group_id, offsets, metadata)

    def committed_offsets(
        self, group_id: str, tps: Iterable[TopicPartition], *, require_stable: bool = False
    ) -> dict[TopicPartition, tuple[int, str]]:
        """(offset, metadata) committed by ``group_id`` for each of ``tps`` that has one.
        ``require_stable``: wait for a transaction with a pending offset commit for them to
        complete (OffsetFetch v7+, KIP-447), rather than answer what was committed before."""
        self._check_usable()
        return self._groups.committed(group_id, tps, require_stable=require_stable)

    @property
    def coordinators(self) -> GroupOffsets:
        """The coordinators of groups and transactional ids (FindCoordinator, cached), for
        the transactional producer."""
        self._check_usable()
        return self._groups

    # --- internals ------------------------------------------------------------------------------
