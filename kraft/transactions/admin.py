"""Transaction administration over the Kafka protocol: what Kafka's AdminClient does for
``kafka-transactions.sh`` (KIP-664), for the REST admin API of any node (a controller's too:
it reaches the brokers on their inter-broker listener, as the group admin does) and for
``kraft transactions --bootstrap-server``.

Theory of operation
-------------------
Every operation is a few requests on the brokers' own Kafka client
(:class:`~kraft.groups.client.GroupClient`: connections, retries, coordinator discovery)::

    list                ListTransactions to every live broker (each lists the transactional
                        ids it coordinates), filters passed through
    describe            FindCoordinator (key type 1) -> DescribeTransactions on the coordinator
    describe-producers  DescribeProducers to the partition's leader (or to a given replica)
    abort               WriteTxnMarkers (ABORT, one partition) to the partition's leader, with
                        the producer id and epoch and the coordinator epoch; by start offset:
                        DescribeProducers first, to find the producer whose transaction
                        started there
    find-hanging        DescribeProducers on the partitions searched -> ListTransactions of
                        the producer ids of old open transactions -> DescribeTransactions of
                        their transactional ids (:mod:`kraft.transactions.model` decides)

What the answers mean is computed by the plain functions of :mod:`kraft.transactions.model`.
Failures are :class:`~kraft.groups.client.GroupError`: a Kafka error code and a message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

from broker.kafka_client import Backoff
from broker.security.client_security import ClientSecurity
from kafka_protocol.client.error_policy import is_retriable
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsResponse,
    WriteTxnMarkersResponse,
)
from kafka_protocol.types import TransactionalId
from kraft.groups.client import (
    DEFAULT_REQUEST_TIMEOUT_S,
    PLAINTEXT_ROUTE,
    RETRY_INITIAL_S,
    RETRY_MAX_S,
    TRANSACTION_KEY_TYPE,
    Address,
    BrokerRoute,
    BrokerView,
    GroupClient,
    GroupError,
    ImageView,
    check,
)
from kraft.groups.model import Coordinator
from kraft.transactions.model import (
    MAX_PARTITIONS_PER_REQUEST,
    NO_DURATION_FILTER,
    AbortSpec,
    OpenTransaction,
    PartitionError,
    ProducerState,
    TransactionDescription,
    TransactionListing,
    abort_spec_at,
    batches,
    describe_producers_request,
    description_from,
    hanging,
    list_transactions_request,
    listings_from,
    marker_error,
    no_open_transaction,
    open_for_longer_than,
    producers_from,
    write_abort_marker_request,
)
from metadata_log.image import ClusterImage, TopicPartition

__all__ = ["NoOpenTransaction", "TransactionAdmin"]

CLIENT_ID: Final = "kraft-transaction-admin"
LIST_TRANSACTIONS_MAX: Final = 1  # v1 added the duration filter; v2's id pattern is not used
DESCRIBE_TRANSACTIONS_MAX: Final = 0
DESCRIBE_PRODUCERS_MAX: Final = 0
WRITE_TXN_MARKERS_MAX: Final = 1
PARTITION_ATTEMPTS: Final = 4  # a partition whose leader moves is asked again

ProducersByPartition = dict[TopicPartition, list[ProducerState] | PartitionError]


class NoOpenTransaction(Exception):
    """An abort by start offset found no transaction starting there."""


class TransactionAdmin:
    """Transaction operations against the brokers of ``view``: a node's metadata image (the
    REST API, :meth:`on_image`) or Metadata answers (``kraft transactions --bootstrap-server``).
    See the module docstring."""

    def __init__(
        self,
        view: BrokerView,
        *,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        client_id: str = CLIENT_ID,
        security: ClientSecurity | None = None,
    ) -> None:
        self._view = view
        self._client = GroupClient(
            view, request_timeout_s=request_timeout_s, client_id=client_id, security=security
        )

    @classmethod
    def on_image(
        cls, image: Callable[[], ClusterImage | None], route: BrokerRoute = PLAINTEXT_ROUTE
    ) -> TransactionAdmin:
        """On the brokers of a node's metadata image, at ``route``'s listener and login."""
        return cls(ImageView(image, route.listener), security=route.security)

    async def close(self) -> None:
        await self._client.close()

    # --- list ---------------------------------------------------------------------------------

    async def list_transactions(
        self,
        states: Sequence[str] = (),
        producer_ids: Sequence[int] = (),
        duration_ms: int = NO_DURATION_FILTER,
    ) -> list[TransactionListing]:
        """The transactional ids every live broker coordinates, matching the filters (Kafka's
        ListTransactions: ids in any of ``states``, of any of ``producer_ids``, and with a
        transaction running longer than ``duration_ms``); sorted by id.  A broker that cannot
        answer fails the whole list, since a partial one would silently miss transactions."""
        listed = await self._client.on_every_broker(
            "list transactions",
            lambda broker_id, address: self._list_at(
                broker_id, address, states, producer_ids, duration_ms
            ),
        )
        merged: dict[str, TransactionListing] = {}
        for listing in listed:  # during a coordinator move two brokers may list one id
            merged.setdefault(listing.transactional_id, listing)
        return [merged[t] for t in sorted(merged)]

    async def _list_at(
        self,
        broker_id: int,
        address: Address,
        states: Sequence[str],
        producer_ids: Sequence[int],
        duration_ms: int,
    ) -> list[TransactionListing]:
        request, min_version = list_transactions_request(states, producer_ids, duration_ms)
        response = await self._client.send(address, request, LIST_TRANSACTIONS_MAX, min_version)
        assert isinstance(response, ListTransactionsResponse)
        check(response.error_code, f"ListTransactions on broker {broker_id}")
        return listings_from(response, broker_id)

    # --- describe -----------------------------------------------------------------------------

    async def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """The coordinator's view of ``transactional_id``; TRANSACTIONAL_ID_NOT_FOUND if it has
        none."""
        return await self._client.on_coordinator(
            transactional_id,
            f"describe transactional id {transactional_id!r}",
            self._describe_at,
            key_type=TRANSACTION_KEY_TYPE,
        )

    async def _describe_at(
        self, coordinator: Coordinator, transactional_id: str
    ) -> TransactionDescription:
        request = DescribeTransactionsRequest(transactional_ids=[TransactionalId(transactional_id)])
        address = (coordinator.host, coordinator.port)
        response = await self._client.send(address, request, DESCRIBE_TRANSACTIONS_MAX)
        assert isinstance(response, DescribeTransactionsResponse)
        [state] = response.transaction_states
        if state.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
            raise GroupError(
                ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                f"transactional id {transactional_id!r} is not known to its coordinator"
                f" (broker {coordinator.node_id})",
            )
        what = f"DescribeTransactions of {transactional_id!r} on broker {coordinator.node_id}"
        check(state.error_code, what)
        return description_from(state, coordinator)

    # --- producers ----------------------------------------------------------------------------

    async def describe_producers(
        self, partitions: Iterable[TopicPartition], broker_id: int | None = None
    ) -> ProducersByPartition:
        """Each partition's active producers, from its leader (or from replica ``broker_id``),
        or its error; a partition whose leader moved or is unknown is asked again a few times
        (one replica is asked once: asking it again cures nothing)."""
        found: ProducersByPartition = {}
        pending = sorted(set(partitions))
        backoff = Backoff(RETRY_INITIAL_S, RETRY_MAX_S)
        attempts = PARTITION_ATTEMPTS if broker_id is None else 1
        for attempt in range(attempts):
            if attempt:
                await backoff.sleep()
            answers = await self._describe_producers_once(pending, broker_id)
            last = attempt == attempts - 1
            pending = []
            for tp, answer in answers.items():
                if isinstance(answer, PartitionError) and is_retriable(answer.error) and not last:
                    pending.append(tp)
                else:
                    found[tp] = answer
            if not pending:
                break
        return found

    async def producers_of(
        self, tp: TopicPartition, broker_id: int | None = None
    ) -> list[ProducerState]:
        """One partition's active producers; its error raised."""
        answer = (await self.describe_producers([tp], broker_id))[tp]
        if isinstance(answer, PartitionError):
            raise _partition_failure("DescribeProducers", tp, answer)
        return answer

    async def _describe_producers_once(
        self, partitions: Sequence[TopicPartition], broker_id: int | None
    ) -> ProducersByPartition:
        if broker_id is None:
            answers = await self._client.on_leaders(
                dict.fromkeys(partitions), lambda a, tps: self._describe_producers_at(a, list(tps))
            )
            return {
                tp: PartitionError(a, None) if isinstance(a, ErrorCode) else a
                for tp, a in answers.items()
            }
        address = dict(self._view.live_brokers()).get(broker_id)
        if address is None:
            error = PartitionError(
                ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not alive"
            )
            return dict.fromkeys(partitions, error)
        try:
            return await self._describe_producers_at(address, partitions)
        except GroupError as exc:
            return dict.fromkeys(partitions, PartitionError(exc.error, exc.message))

    async def _describe_producers_at(
        self, address: Address, partitions: Sequence[TopicPartition]
    ) -> ProducersByPartition:
        out: ProducersByPartition = {}
        for batch in batches(partitions, MAX_PARTITIONS_PER_REQUEST):
            request = describe_producers_request(batch)
            response = await self._client.send(address, request, DESCRIBE_PRODUCERS_MAX)
            assert isinstance(response, DescribeProducersResponse)
            out.update(producers_from(response, batch))
        return out

    # --- abort --------------------------------------------------------------------------------

    async def abort(self, spec: AbortSpec) -> None:
        """Write an ABORT marker for ``spec``'s producer on its partition, at the partition's
        leader (found again if it moved).  INVALID_PRODUCER_EPOCH: the producer has moved on
        to a newer epoch; TRANSACTION_COORDINATOR_FENCED: a newer coordinator has written a
        marker for it here."""
        tp = spec.partition

        async def attempt(_: int) -> None:
            leader = self._view.leader_of(tp)
            if isinstance(leader, ErrorCode):
                check(leader, f"the leader of {tp.topic}-{tp.partition}")
                return
            request = write_abort_marker_request(spec)
            response = await self._client.send(leader, request, WRITE_TXN_MARKERS_MAX)
            assert isinstance(response, WriteTxnMarkersResponse)
            check(
                marker_error(response, spec),
                f"WriteTxnMarkers (abort producer {spec.producer_id}) on {tp.topic}-{tp.partition}",
            )

        await self._client.retrying(f"abort on {tp.topic}-{tp.partition}", attempt)

    async def abort_at(self, tp: TopicPartition, start_offset: int) -> AbortSpec:
        """Abort the transaction open on ``tp`` since ``start_offset`` (KIP-664: the producer
        is found with DescribeProducers); :class:`NoOpenTransaction` if there is none."""
        producers = await self.producers_of(tp)
        spec = abort_spec_at(tp, producers, start_offset)
        if spec is None:
            raise NoOpenTransaction(no_open_transaction(tp, start_offset, producers))
        await self.abort(spec)
        return spec

    # --- hanging transactions -----------------------------------------------------------------

    async def find_hanging(
        self,
        partitions: Sequence[TopicPartition],
        *,
        broker_id: int | None,
        max_transaction_timeout_ms: int,
        now_ms: int,
        may_describe: Callable[[str], bool] = lambda _: True,
    ) -> list[OpenTransaction]:
        """The hanging transactions of ``partitions`` (:mod:`kraft.transactions.model`);
        ``may_describe`` says which transactional ids the caller may see (one it may not is
        treated as unknown, as Kafka's ListTransactions leaves it out).  A partition that
        cannot be described fails the whole search."""
        answers = await self.describe_producers(partitions, broker_id)
        if broker_id is not None:
            # Kafka's brokers answer DescribeProducers on every replica; one that answers only
            # where it leads sends us to the leader for the others (the same producer state).
            followed = [tp for tp, a in answers.items() if _not_leader(a)]
            if followed:
                answers.update(await self.describe_producers(followed))
        producers: dict[TopicPartition, list[ProducerState]] = {}
        for tp, answer in sorted(answers.items()):
            if isinstance(answer, PartitionError):
                raise _partition_failure("DescribeProducers", tp, answer)
            producers[tp] = answer
        candidates = open_for_longer_than(producers, max_transaction_timeout_ms, now_ms)
        if not candidates:
            return []
        producer_ids = sorted({c.producer.producer_id for c in candidates})
        listings = await self.list_transactions(producer_ids=producer_ids)
        ids = {
            listing.producer_id: listing.transactional_id
            for listing in listings
            if listing.producer_id in producer_ids and may_describe(listing.transactional_id)
        }
        descriptions: dict[str, TransactionDescription | None] = {}
        for transactional_id in sorted(set(ids.values())):
            try:
                descriptions[transactional_id] = await self.describe_transaction(transactional_id)
            except GroupError as exc:
                if exc.error != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                    raise
                descriptions[transactional_id] = None
        return hanging(candidates, ids, descriptions)


def _not_leader(answer: list[ProducerState] | PartitionError) -> bool:
    return isinstance(answer, PartitionError) and answer.error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def _partition_failure(api: str, tp: TopicPartition, failure: PartitionError) -> GroupError:
    detail = failure.message or failure.error.message
    return GroupError(failure.error, f"{api} of {tp.topic}-{tp.partition}: {detail}")
