"""The Kafka-protocol plumbing shared by the group admin (kraft/groups/admin.py), the CLI's
group member (kraft/groups/member.py) and the REST record routes (kraft/rest/records.py):
connections to the brokers, retries, coordinator discovery, the offset requests, and Fetch as a
consumer.

Theory of operation
-------------------
A :class:`GroupClient` keeps one :class:`~broker.kafka_client.KafkaConnection` per broker
address, opened on first use and kept until :meth:`GroupClient.close`.  Where the brokers are
comes from a :class:`BrokerView`: a node's metadata image (:class:`ImageView`, for the REST API)
or the CLI's Metadata answers (``kraft.cli.consume_group.MetadataView``).

A request that fails in a way a later attempt may cure (a connection lost, no answer within the
request timeout, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, any error the core's
:mod:`~kafka_protocol.client.error_policy` calls retriable) raises :class:`Retriable`;
:meth:`GroupClient.retrying` tries again with the core's backoff (50 ms doubling to 1 s),
at most :data:`MAX_ATTEMPTS` times; callers bound whole operations (``asyncio.timeout``).  A
request given up (cancelled, or timed out) closes its connection: an answer that comes later
would hold up every request behind it, and a parked JoinGroup may come minutes later.

Each group's coordinator (FindCoordinator to the live brokers in turn) is remembered until a
retriable failure on it: :meth:`GroupClient.on_coordinator` finds it again before each retry.

Local failures (remote outcomes end as Kafka error codes)::

    GroupError      an operation failed: a Kafka error code and a message (after the
    │               retries, for a retriable one)
    └── Retriable   a failure that another attempt (another broker, a new coordinator) may cure
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

from broker.kafka_client import Backoff, KafkaClientError, KafkaConnection, NoUsableVersionError
from broker.security.client_security import ClientSecurity
from kafka_protocol._codec import FileRegion, Request, Response
from kafka_protocol.client.cursor import records_from
from kafka_protocol.client.error_policy import is_retriable
from kafka_protocol.client.requests import (
    NO_EPOCH,
    fetch_request,
    list_offsets_answers,
    list_offsets_request,
    offset_commit_errors,
    offset_commit_request,
)
from kafka_protocol.errors import ErrorCode, KafkaError
from kafka_protocol.exceptions import CorruptRecordError, ProtocolError
from kafka_protocol.messages import (
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListOffsetsResponse,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka_protocol.record_batch import Record
from kafka_protocol.types import BrokerId, GroupId
from kraft.groups.model import Coordinator
from metadata_log.image import ClusterImage, TopicPartition

__all__ = [
    "MAX_ATTEMPTS",
    "Address",
    "BrokerView",
    "Fetched",
    "GroupClient",
    "GroupError",
    "ImageView",
    "Retriable",
    "check",
]

log = logging.getLogger(__name__)

CLIENT_ID: Final = "kraft-group-admin"
LISTENER: Final = "PLAINTEXT"
DEFAULT_REQUEST_TIMEOUT_S: Final = 5.0  # one round trip to one broker
MAX_ATTEMPTS: Final = 8  # per operation; about 3.5 s of backoff in all
MAX_KNOWN_COORDINATORS: Final = 10_000  # groups whose coordinator is remembered
LIST_OFFSETS_ATTEMPTS: Final = 3  # a partition without a leader should not stall a describe
RETRY_INITIAL_S, RETRY_MAX_S = 0.05, 1.0
# Highest versions asked for (the broker may support more; these have the single-group shapes).
FIND_COORDINATOR_MAX: Final = 3  # v4 batches keys
OFFSET_FETCH_MAX, OFFSET_FETCH_ALL_MIN = 7, 2  # v8 batches groups; v2 added topics=null (all)
OFFSET_COMMIT_MAX: Final = 8
LIST_OFFSETS_MAX, LIST_OFFSETS_MIN = 7, 1
FETCH_MAX, FETCH_MIN = 12, 4  # v13+ name topics by id; v4+ carry record batches v2
GROUP_KEY_TYPE: Final = 0
TRANSACTION_KEY_TYPE: Final = 1  # FindCoordinator of a transactional id
CONSUMER_REPLICA_ID: Final = BrokerId(-1)
NO_OFFSET: Final = -1  # OffsetFetch: no committed offset

T = TypeVar("T")
V = TypeVar("V")
R = TypeVar("R")
Address = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Fetched:
    """One partition of a Fetch answer: its records at or after the position asked, the
    position after them, and where its log starts and its high watermark stand."""

    records: list[Record]
    next_position: int
    high_watermark: int
    log_start_offset: int


class GroupError(KafkaError):
    """An operation failed with ``error`` (a Kafka error code) and ``message``."""

    @property
    def error(self) -> ErrorCode:
        return self.error_code


class Retriable(GroupError):
    """A failure that another attempt (another broker, a new coordinator) may cure."""


def check(code: int, what: str) -> None:
    """Raise for an error code: retriable ones (NOT_COORDINATOR, ...) as :class:`Retriable`."""
    if code == ErrorCode.NONE:
        return
    error = ErrorCode.from_code(code)
    cls = Retriable if is_retriable(error) else GroupError
    raise cls(error, f"{what}: {error.message}")


# --- where the brokers are --------------------------------------------------------------------


class BrokerView(Protocol):
    def live_brokers(self) -> list[tuple[int, Address]]:
        """Every reachable broker, by id; :class:`Retriable` if there is none."""
        ...

    def leader_of(self, tp: TopicPartition) -> Address | ErrorCode:
        """The address of the partition's leader, or why there is none."""
        ...


@dataclass(frozen=True, slots=True)
class BrokerRoute:
    """Which listener of the brokers the node reaches them on, and how it logs in there
    (``inter.broker.listener.name`` and its login, :mod:`kraft.node.security_config`)."""

    listener: str = LISTENER
    security: ClientSecurity | None = None


PLAINTEXT_ROUTE: Final = BrokerRoute()


class ImageView:
    """The brokers of a node's metadata image (the REST API's view)."""

    def __init__(self, image: Callable[[], ClusterImage | None], listener: str = LISTENER) -> None:
        self._image = image
        self.listener = listener  # the brokers' listener to reach (inter.broker.listener.name)

    def current(self) -> ClusterImage:
        image = self._image()
        if image is None:
            raise Retriable(ErrorCode.BROKER_NOT_AVAILABLE, "this node has no metadata yet")
        return image

    def live_brokers(self) -> list[tuple[int, Address]]:
        image = self.current()
        live = []
        for broker_id in sorted(image.brokers):
            address = self._address_of(image, broker_id)
            if address is not None:
                live.append((broker_id, address))
        if not live:
            raise Retriable(ErrorCode.BROKER_NOT_AVAILABLE, "no broker is alive (unfenced)")
        return live

    def leader_of(self, tp: TopicPartition) -> Address | ErrorCode:
        image = self.current()
        state = image.topics.partition(tp.topic, tp.partition)
        if state is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        address = self._address_of(image, state.leader)
        return ErrorCode.LEADER_NOT_AVAILABLE if address is None else address

    def _address_of(self, image: ClusterImage, broker_id: int) -> Address | None:
        """An unfenced broker's address on the listener (None: unknown, fenced or no such
        listener)."""
        registration = image.brokers.get(broker_id)
        if registration is None or registration.fenced:
            return None
        endpoint = registration.listener(self.listener)
        return (endpoint.host, endpoint.port) if endpoint is not None else None


# --- the client -------------------------------------------------------------------------------


class GroupClient:
    """Requests to the brokers of ``view`` (see the module docstring)."""

    def __init__(
        self,
        view: BrokerView,
        *,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        client_id: str = CLIENT_ID,
        security: ClientSecurity | None = None,
    ) -> None:
        self.view = view
        self.request_timeout_s = request_timeout_s
        self.client_id = client_id
        self.security = security  # how to log in to the brokers' listener (None: PLAINTEXT)
        self._connections: dict[Address, KafkaConnection] = {}
        self._connecting: dict[Address, asyncio.Lock] = {}
        self._coordinators: dict[tuple[int, str], Coordinator] = {}

    async def close(self) -> None:
        """Close every connection (requests in flight fail)."""
        connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close()
        for conn in connections:
            await conn.wait_closed()

    async def send(
        self,
        address: Address,
        request: Request,
        max_version: int,
        min_version: int = 0,
        *,
        timeout_s: float | None = None,
    ) -> Response:
        """One round trip at the highest common version in [min_version, max_version];
        ``timeout_s`` (default: the request timeout) is this request's own deadline, longer
        for one the broker may hold (a JoinGroup waits for the rebalance).  A lost connection
        or no answer in time is :class:`Retriable`."""
        peer = f"{address[0]}:{address[1]}"
        limit_s = self.request_timeout_s if timeout_s is None else timeout_s
        conn = None
        try:
            async with asyncio.timeout(limit_s):
                conn = await self._connection(address)
                return await conn.request(request, max_version, min_version)
        except NoUsableVersionError:
            raise GroupError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"{peer} supports no version {min_version}-{max_version} of {request.NAME}",
            ) from None
        except TimeoutError:
            self._drop(address, conn)
            raise Retriable(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{peer} did not answer {request.NAME} within {limit_s:g} s",
            ) from None
        except asyncio.CancelledError:
            self._drop(address, conn)
            raise
        except (OSError, KafkaClientError) as exc:  # connection refused, reset, closed
            self._drop(address, conn)
            raise Retriable(
                ErrorCode.NETWORK_EXCEPTION, f"{request.NAME} to {peer}: {exc}"
            ) from None
        except ProtocolError as exc:
            raise GroupError(
                ErrorCode.UNKNOWN_SERVER_ERROR, f"{peer} answered {request.NAME} badly: {exc}"
            ) from None

    async def retrying(
        self, what: str, attempt: Callable[[int], Awaitable[T]], attempts: int = MAX_ATTEMPTS
    ) -> T:
        """``attempt(n)`` until it does not raise :class:`Retriable`, with backoff, at most
        ``attempts`` times; then the last failure, as a :class:`GroupError`."""
        backoff = Backoff(RETRY_INITIAL_S, RETRY_MAX_S)
        for n in range(attempts):
            if n:
                await backoff.sleep()
            try:
                return await attempt(n)
            except Retriable as exc:
                last = exc
                log.debug("%s: attempt %d failed: %s", what, n + 1, exc)
        raise GroupError(last.error, f"{what}: {last.message} (gave up after {attempts} attempts)")

    async def on_every_broker(
        self, what: str, ask: Callable[[int, Address], Awaitable[list[T]]]
    ) -> list[T]:
        """``ask(broker_id, address)`` of every live broker at once (each retried), the answers
        joined in broker order.  A broker that cannot answer fails the whole: a partial answer
        would silently miss what that broker holds."""
        brokers = self.view.live_brokers()
        answered: dict[int, list[T] | GroupError] = {}

        async def one(broker_id: int, address: Address) -> None:
            try:
                answered[broker_id] = await self.retrying(
                    f"{what} on broker {broker_id}", lambda _: ask(broker_id, address)
                )
            except GroupError as exc:
                answered[broker_id] = exc

        async with asyncio.TaskGroup() as tasks:
            for broker_id, address in brokers:
                tasks.create_task(one(broker_id, address))
        joined: list[T] = []
        for broker_id, _ in brokers:
            result = answered[broker_id]
            if isinstance(result, GroupError):
                raise GroupError(result.error, result.message)
            joined += result
        return joined

    # --- the coordinator ----------------------------------------------------------------------

    async def on_coordinator(
        self,
        group_id: str,
        what: str,
        call: Callable[[Coordinator, str], Awaitable[T]],
        attempts: int = MAX_ATTEMPTS,
        *,
        key_type: int = GROUP_KEY_TYPE,
    ) -> T:
        """``call(coordinator, group_id)``, finding the coordinator again after a retriable
        failure (it may have moved, or be loading its partition); ``key_type``
        :data:`TRANSACTION_KEY_TYPE` for a transactional id's."""

        async def attempt(n: int) -> T:
            if n:
                self.forget_coordinator(group_id, key_type=key_type)
            return await call(await self.coordinator(group_id, n, key_type=key_type), group_id)

        return await self.retrying(what, attempt, attempts)

    async def coordinator(
        self, key: str, attempt: int = 0, *, key_type: int = GROUP_KEY_TYPE
    ) -> Coordinator:
        """The coordinator of a group (or of a transactional id, by ``key_type``): the one
        found last, or FindCoordinator (one try, to the ``attempt``-th live broker, so that
        retries go round the brokers)."""
        known = self._coordinators.get((key_type, key))
        if known is not None:
            return known
        brokers = self.view.live_brokers()
        broker_id, address = brokers[attempt % len(brokers)]
        request = FindCoordinatorRequest(key=key, key_type=key_type)
        response = await self.send(address, request, FIND_COORDINATOR_MAX)
        assert isinstance(response, FindCoordinatorResponse)
        check(response.error_code, f"FindCoordinator for {key!r} on broker {broker_id}")
        found = Coordinator(int(response.node_id), response.host, response.port)
        if len(self._coordinators) >= MAX_KNOWN_COORDINATORS:
            self._coordinators.clear()  # a node's REST API may be asked about any number
        self._coordinators[(key_type, key)] = found
        return found

    def forget_coordinator(self, key: str, *, key_type: int = GROUP_KEY_TYPE) -> None:
        """The coordinator failed us: find it again next time."""
        self._coordinators.pop((key_type, key), None)

    # --- committed offsets --------------------------------------------------------------------

    async def committed(self, coordinator: Coordinator, group_id: str) -> dict[TopicPartition, int]:
        """Every offset the group has committed (OffsetFetch of all partitions)."""
        request = OffsetFetchRequest(group_id=GroupId(group_id), topics=None)
        address = (coordinator.host, coordinator.port)
        response = await self.send(address, request, OFFSET_FETCH_MAX, OFFSET_FETCH_ALL_MIN)
        assert isinstance(response, OffsetFetchResponse)
        what = f"OffsetFetch of {group_id!r} on broker {coordinator.node_id}"
        check(response.error_code, what)
        committed = {}
        for topic in response.topics:
            for p in topic.partitions:
                check(p.error_code, f"{what} ({topic.name}-{p.partition_index})")
                if p.committed_offset != NO_OFFSET:
                    tp = TopicPartition(str(topic.name), p.partition_index)
                    committed[tp] = p.committed_offset
        return committed

    async def commit(
        self,
        coordinator: Coordinator,
        group_id: str,
        offsets: Mapping[TopicPartition, int],
        *,
        generation_id: int = -1,
        member_id: str = "",
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit (generation -1 and no member id: an admin's or a simple consumer's):
        the partitions that failed, with their (not retriable) errors; :class:`Retriable` if
        any failed retriably (the coordinator moved), so that the whole commit is retried."""
        assert all(offset >= 0 for offset in offsets.values()), offsets
        request = offset_commit_request(
            group_id, offsets, generation_id=generation_id, member_id=member_id
        )
        address = (coordinator.host, coordinator.port)
        response = await self.send(address, request, OFFSET_COMMIT_MAX)
        assert isinstance(response, OffsetCommitResponse)
        failed: dict[TopicPartition, ErrorCode] = {
            TopicPartition(*tp): error
            for tp, error in offset_commit_errors(response).items()
            if error is not ErrorCode.NONE
        }
        for tp, error in sorted(failed.items()):
            if is_retriable(error):
                what = f"OffsetCommit of {tp.topic}-{tp.partition} on broker {coordinator.node_id}"
                raise Retriable(error, f"{what}: {error.message}")
        return failed

    # --- offsets by time ----------------------------------------------------------------------

    async def list_offsets(
        self, partitions: Iterable[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int | ErrorCode]:
        """ListOffsets at ``timestamp`` to each partition's leader (per the view); a partition
        whose leader is unknown or moved is asked again, a few times, then left as its error."""
        found: dict[TopicPartition, int | ErrorCode] = {}
        pending = sorted(set(partitions))
        backoff = Backoff(RETRY_INITIAL_S, RETRY_MAX_S)
        for attempt in range(LIST_OFFSETS_ATTEMPTS):
            if attempt:
                await backoff.sleep()
            answers = await self._list_offsets_once(pending, timestamp)
            pending = []
            for tp, answer in answers.items():
                last = attempt == LIST_OFFSETS_ATTEMPTS - 1
                if isinstance(answer, ErrorCode) and is_retriable(answer) and not last:
                    pending.append(tp)
                else:
                    found[tp] = answer
            if not pending:
                break
        return found

    async def _list_offsets_once(
        self, partitions: Sequence[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int | ErrorCode]:
        return await self.on_leaders(dict.fromkeys(partitions, timestamp), self._list_offsets_at)

    async def _list_offsets_at(
        self, address: Address, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | ErrorCode]:
        request = list_offsets_request(timestamps)
        response = await self.send(address, request, LIST_OFFSETS_MAX, LIST_OFFSETS_MIN)
        assert isinstance(response, ListOffsetsResponse)
        out = {TopicPartition(*tp): answer for tp, answer in list_offsets_answers(response).items()}
        for tp in timestamps:  # a partition left out of the answer
            out.setdefault(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
        return out

    async def on_leaders(
        self,
        partitions: Mapping[TopicPartition, V],
        ask: Callable[[Address, dict[TopicPartition, V]], Awaitable[Mapping[TopicPartition, R]]],
    ) -> dict[TopicPartition, R | ErrorCode]:
        """``ask(leader, {partition: value})`` of every leader of ``partitions`` (per the
        view), all at once; a partition whose leader is not known, or failed, gets the error."""
        answers: dict[TopicPartition, R | ErrorCode] = {}
        by_leader: dict[Address, dict[TopicPartition, V]] = {}
        for tp, value in partitions.items():
            leader = self.view.leader_of(tp)
            if isinstance(leader, ErrorCode):
                answers[tp] = leader
            else:
                by_leader.setdefault(leader, {})[tp] = value

        async def one(address: Address, theirs: dict[TopicPartition, V]) -> None:
            try:
                answers.update(await ask(address, theirs))
            except GroupError as exc:
                answers.update(dict.fromkeys(theirs, exc.error))

        async with asyncio.TaskGroup() as tasks:
            for address, theirs in by_leader.items():
                tasks.create_task(one(address, theirs))
        return answers

    # --- records ------------------------------------------------------------------------------

    async def fetch_at(
        self,
        address: Address,
        topic: str,
        positions: Mapping[int, int],
        *,
        wait_ms: int,
        max_bytes: int,
        partition_max_bytes: int,
    ) -> dict[TopicPartition, Fetched | ErrorCode]:
        """One Fetch of ``topic``'s partitions (index: position) from ``address``, as a
        consumer (read_uncommitted: up to the high watermark), held by the broker up to
        ``wait_ms`` for records; a partition left out of the answer gets nothing."""
        request = fetch_request(
            {
                TopicPartition(topic, index): (offset, NO_EPOCH)
                for index, offset in positions.items()
            },
            max_wait_ms=wait_ms,
            min_bytes=1,
            max_bytes=max_bytes,
            partition_max_bytes=partition_max_bytes,
        )
        timeout_s = self.request_timeout_s + wait_ms / 1000
        response = await self.send(address, request, FETCH_MAX, FETCH_MIN, timeout_s=timeout_s)
        assert isinstance(response, FetchResponse)
        check(response.error_code, f"Fetch from {address[0]}:{address[1]}")
        out: dict[TopicPartition, Fetched | ErrorCode] = {}
        for answered in response.responses:
            if answered.topic != topic:
                continue
            for p in answered.partitions:
                if p.partition_index not in positions:
                    continue
                tp = TopicPartition(topic, p.partition_index)
                if p.error_code != ErrorCode.NONE:
                    out[tp] = ErrorCode.from_code(p.error_code)
                    continue
                assert not isinstance(p.records, FileRegion), "a decoded response"
                try:
                    records, position = records_from(p.records, positions[p.partition_index])
                except CorruptRecordError as exc:
                    raise GroupError(
                        ErrorCode.CORRUPT_MESSAGE, f"{topic}-{p.partition_index}: {exc}"
                    ) from None
                out[tp] = Fetched(records, position, p.high_watermark, p.log_start_offset)
        for index, position in positions.items():  # left out of the answer: ask again
            out.setdefault(TopicPartition(topic, index), Fetched([], position, -1, -1))
        return out

    # --- connections --------------------------------------------------------------------------

    async def _connection(self, address: Address) -> KafkaConnection:
        lock = self._connecting.setdefault(address, asyncio.Lock())
        async with lock:  # one connection attempt per address at a time
            conn = self._connections.get(address)
            if conn is None or conn.closed:
                conn = await KafkaConnection.open(
                    address[0], address[1], self.client_id, self.security
                )
                self._connections[address] = conn
            return conn

    def _drop(self, address: Address, conn: KafkaConnection | None) -> None:
        if conn is not None and self._connections.get(address) is conn:
            del self._connections[address]
            conn.close()
