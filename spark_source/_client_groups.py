"""Consumer group offsets for :class:`~spark_source.client.KafkaClient`: standalone commits
(generation -1, no member id) and OffsetFetch, at the group's coordinator.

The coordinator is found with FindCoordinator (v0-v3 name one key, v4 a list) at any broker
and cached per group (and per transactional id, key type 1, for the transactional producer:
:meth:`GroupOffsets.to_coordinator`); NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and
COORDINATOR_LOAD_IN_PROGRESS (the offsets partition moving or loading: the core's
``STALE_COORDINATOR_ERRORS``) forget it and retry, as does a lost connection, until
``default.api.timeout.ms``.  OffsetFetch v0-v7 names one group and its topics, v8 a list of
groups.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from kafka_protocol._codec import Response
from kafka_protocol.client.error_policy import STALE_COORDINATOR_ERRORS, TOPIC_GONE_ERRORS
from kafka_protocol.client.metadata import Address
from kafka_protocol.client.requests import offset_commit_errors, offset_commit_request
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka_protocol.types import GroupId, TopicName
from spark_source._client_cluster import Cluster
from spark_source._client_conn import Attempts, RequestFor, Versions
from spark_source._client_types import (
    ConnectionFailed,
    TopicPartition,
    raise_unless_retriable,
)

FIND_COORDINATOR: Final = Versions(10, 0, 4)
FIND_COORDINATOR_TYPED: Final = Versions(10, 1, 4)  # v1 added key_type
OFFSET_COMMIT: Final = Versions(8, 2, 8)
OFFSET_FETCH: Final = Versions(9, 1, 8)
OFFSET_FETCH_STABLE: Final = Versions(9, 7, 8)  # v7 added require_stable
FIND_COORDINATOR_BATCHED: Final = 4  # v4 asks for a list of keys
OFFSET_FETCH_GROUPS: Final = 8  # v8 asks for a list of groups
GROUP_KEY_TYPE: Final = 0
TRANSACTION_KEY_TYPE: Final = 1  # FindCoordinator v1+: a transactional id's coordinator


class GroupOffsets:
    """A client's offset commits and fetches, and its cache of group coordinators."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.coordinators: dict[tuple[int, str], Address] = {}  # (key type, key) -> address

    def commit(
        self, group_id: str, offsets: Mapping[TopicPartition, int], metadata: str = ""
    ) -> None:
        """Commit ``offsets`` (the next offset to read, per partition) for ``group_id`` as a
        standalone commit (generation -1, no member id: a group with active members refuses
        it with UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION, raised as :class:`BrokerError`)."""
        attempts = Attempts(self.cluster.config, f"OffsetCommit of group {group_id!r}")
        pending = {TopicPartition(*tp): offset for tp, offset in offsets.items()}
        while pending:
            request = offset_commit_request(group_id, pending, metadata=metadata)
            response = self._to_coordinator(group_id, request, OFFSET_COMMIT, attempts)
            if isinstance(response, OffsetCommitResponse):
                for tp, error in offset_commit_errors(response).items():
                    if error is ErrorCode.NONE:
                        pending.pop(tp, None)
                    else:
                        self._coordinator_error(group_id, error, "OffsetCommit", tp)
                        attempts.note(error)
            if pending:
                attempts.retry()

    def committed(
        self, group_id: str, tps: Iterable[TopicPartition], *, require_stable: bool = False
    ) -> dict[TopicPartition, tuple[int, str]]:
        """(offset, metadata) committed by ``group_id`` for each of ``tps`` that has one.
        ``require_stable`` (OffsetFetch v7+, KIP-447): while a transaction's offset commit
        for them is pending, the coordinator answers UNSTABLE_OFFSET_COMMIT, retried here
        until the transaction completes."""
        wanted = sorted({TopicPartition(*tp) for tp in tps})
        if not wanted:
            return {}
        attempts = Attempts(self.cluster.config, f"OffsetFetch of group {group_id!r}")
        versions = OFFSET_FETCH_STABLE if require_stable else OFFSET_FETCH
        request = _offset_fetch_request(group_id, wanted, require_stable)
        while True:
            response = self._to_coordinator(group_id, request, versions, attempts)
            if isinstance(response, OffsetFetchResponse):
                result = self._offset_fetch_answers(group_id, response, attempts)
                if result is not None:
                    return {tp: result[tp] for tp in wanted if tp in result}
            attempts.retry()

    def _offset_fetch_answers(
        self, group_id: str, response: OffsetFetchResponse, attempts: Attempts
    ) -> dict[TopicPartition, tuple[int, str]] | None:
        """The committed offsets, or None (reason noted) if the request must be retried."""
        parts: list[tuple[str, Any]]
        if response.groups:  # v8+
            group = response.groups[0]
            error = ErrorCode.from_code(group.error_code)
            parts = [(t.name, p) for t in group.topics for p in t.partitions]
        else:
            error = ErrorCode.from_code(response.error_code)
            parts = [(t.name, p) for t in response.topics for p in t.partitions]
        if error is not ErrorCode.NONE:
            self._coordinator_error(group_id, error, "OffsetFetch")
            attempts.note(error)
            return None
        out: dict[TopicPartition, tuple[int, str]] = {}
        for name, p in parts:
            tp = TopicPartition(name, p.partition_index)
            error = ErrorCode.from_code(p.error_code)
            if error in TOPIC_GONE_ERRORS:
                continue
            if error is not ErrorCode.NONE:
                self._coordinator_error(group_id, error, "OffsetFetch", tp)
                attempts.note(error)
                return None
            if p.committed_offset >= 0:
                out[tp] = (int(p.committed_offset), str(p.metadata or ""))
        return out

    def _coordinator_error(
        self,
        group_id: str,
        error: ErrorCode,
        what: str,
        tp: TopicPartition | None = None,
        key_type: int = GROUP_KEY_TYPE,
    ) -> None:
        """An error answer from the coordinator: forget it if it is no longer the group's
        (or the transactional id's); raise if retrying cannot help."""
        if error in STALE_COORDINATOR_ERRORS:
            self.coordinators.pop((key_type, group_id), None)
        raise_unless_retriable(error, what, tp)

    def forget_coordinator(self, key: str, key_type: int) -> None:
        self.coordinators.pop((key_type, key), None)

    def _to_coordinator(
        self, group_id: str, request: RequestFor, versions: Versions, attempts: Attempts
    ) -> Response | None:
        return self.to_coordinator(group_id, GROUP_KEY_TYPE, request, versions, attempts)

    def to_coordinator(
        self,
        key: str,
        key_type: int,
        request: RequestFor,
        versions: Versions,
        attempts: Attempts,
    ) -> Response | None:
        """``request`` to the coordinator of ``key`` (a group id, or a transactional id for
        key type 1); None (the reason noted) if it could not be found or reached."""
        address = self.coordinators.get((key_type, key)) or self._find_coordinator(
            key, key_type, attempts
        )
        if address is None:
            return None
        try:
            return self.cluster.connection(address).request(
                request, versions, attempts.request_deadline()
            )
        except ConnectionFailed as exc:
            self.coordinators.pop((key_type, key), None)
            attempts.note(exc)
            return None

    def _find_coordinator(self, key: str, key_type: int, attempts: Attempts) -> Address | None:
        def request(version: int) -> FindCoordinatorRequest:
            if version >= FIND_COORDINATOR_BATCHED:
                return FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
            if version == 0:  # v0 knows groups only
                return FindCoordinatorRequest(key=key)
            return FindCoordinatorRequest(key=key, key_type=key_type)

        versions = FIND_COORDINATOR if key_type == GROUP_KEY_TYPE else FIND_COORDINATOR_TYPED
        what = "group" if key_type == GROUP_KEY_TYPE else "transactional id"
        for address in self.cluster.candidates():
            try:
                response = self.cluster.connection(address).request(
                    request, versions, attempts.request_deadline()
                )
            except ConnectionFailed as exc:
                attempts.note(exc)
                continue
            assert isinstance(response, FindCoordinatorResponse)
            if response.coordinators:  # v4+
                c = response.coordinators[0]
                error, node = ErrorCode.from_code(c.error_code), (c.host, c.port)
            else:
                error = ErrorCode.from_code(response.error_code)
                node = (response.host, response.port)
            if error is ErrorCode.NONE:
                self.coordinators[key_type, key] = node
                return node
            raise_unless_retriable(error, f"FindCoordinator for {what} {key!r}")
            attempts.note(error)
            return None
        return None


def _offset_fetch_request(
    group_id: str, tps: list[TopicPartition], require_stable: bool = False
) -> Callable[[int], OffsetFetchRequest]:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)

    def request(version: int) -> OffsetFetchRequest:
        if version < OFFSET_FETCH_GROUPS:
            return OffsetFetchRequest(
                group_id=GroupId(group_id),
                topics=[
                    OffsetFetchRequest.OffsetFetchRequestTopic(
                        name=TopicName(t), partition_indexes=ps
                    )
                    for t, ps in by_topic.items()
                ],
                require_stable=require_stable,
            )
        return OffsetFetchRequest(
            require_stable=require_stable,
            groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=GroupId(group_id),
                    topics=[
                        OffsetFetchRequest.OffsetFetchRequestTopics(
                            name=TopicName(t), partition_indexes=ps
                        )
                        for t, ps in by_topic.items()
                    ],
                )
            ],
        )

    return request
