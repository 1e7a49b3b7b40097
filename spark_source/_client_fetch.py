"""Reading one partition's offset range with Fetch: the blocking shell behind
``KafkaClient.read`` over the core's :class:`~kafka_protocol.client.cursor.FetchCursor`.

Theory of operation
-------------------
The core's cursor holds the position (the next offset wanted) and decides what each answer
does to it; this shell keeps at most one fetch in flight, sent to the partition's leader at
the leader epoch the metadata cache knows.  An answer with records is cut to the whole batches
that overlap ``[position, end)`` (batch headers only, never a record), the position moves past
the last of them, the next fetch is sent, and only then is the chunk handed to the caller: the
broker works on the next answer while the caller decodes this one.  The cursor's deadline
(``default.api.timeout.ms``) restarts whenever it makes progress, and while the caller holds a
chunk.

Everything else is a failure to retry or a final outcome::

    answer                                   what the cursor does
    records, whole batches in range          yield them, advance
    records, only a truncated batch          fetch again with a larger partition limit
    no records, position >= high watermark   fetch again (the broker long-polls); past the
                                             deadline: DataLossError (available_until = HW)
    OFFSET_OUT_OF_RANGE, below log start     DataLossError (available_from = log start)
    OFFSET_OUT_OF_RANGE, above the log end   refresh metadata and retry once, then DataLossError
    leader errors, retriable errors, a lost  forget the leader, back off, refresh, retry
    connection
    topic or partition gone                  DataLossError
    any other Kafka error                    BrokerError
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Final, NamedTuple

from kafka_protocol.client import cursor as core
from kafka_protocol.client.error_policy import Action, action_for
from kafka_protocol.client.requests import fetch_request
from kafka_protocol.clock import monotonic_s
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import CorruptRecordError
from kafka_protocol.messages import FetchRequest, FetchResponse
from spark_source._client_cluster import Cluster
from spark_source._client_config import FRAME_OVERHEAD_BYTES
from spark_source._client_conn import (
    Attempts,
    BrokerConnection,
    InFlight,
    InvalidResponse,
    Versions,
)
from spark_source._client_types import (
    EARLIEST,
    LATEST,
    BrokerError,
    ConnectionFailed,
    DataLossError,
    TopicNotFound,
    TopicPartition,
)
from spark_source.read_committed import READ_COMMITTED, AbortedTransaction

log = logging.getLogger(__name__)

FETCH: Final = Versions(1, 4, 12)  # v4: RecordBatch v2; v12: the last that names topics
MIN_LONG_POLL_MS: Final = 100  # below this wait the cursor backs off between empty fetches

ListOffsets = Callable[[Mapping[TopicPartition, int]], dict[TopicPartition, int]]


class Chunk(NamedTuple):
    """Whole batches of one Fetch answer, and (read_committed) the transactions it names as
    aborted: what :class:`~spark_source.read_committed.AbortedBatchFilter` needs to skip
    their batches.  Empty under read_uncommitted."""

    records: memoryview
    aborted_transactions: tuple[AbortedTransaction, ...] = ()


def cover(records: memoryview, position: int, end: int) -> core.Cover:
    """The core's :func:`~kafka_protocol.client.cursor.cover`, a bad batch header raised as
    this client's :class:`InvalidResponse`."""
    try:
        return core.cover(records, position, end)
    except CorruptRecordError as exc:
        raise InvalidResponse(str(exc)) from exc


class FetchCursor:
    """Fetches ``[start, end)`` of one partition (see the module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        list_offsets: ListOffsets,
        tp: TopicPartition,
        start: int,
        end: int,
    ) -> None:
        self.cluster = cluster
        self.config = cluster.config
        self.list_offsets = list_offsets
        self.tp = tp
        self.cursor = core.FetchCursor(
            start,
            end,
            self.config.max_partition_fetch_bytes,
            self.config.max_frame_bytes - FRAME_OVERHEAD_BYTES,
        )
        self.attempts = Attempts(self.config, f"reading {tp} from offset {start}")
        self._in_flight: tuple[BrokerConnection, InFlight] | None = None
        self._conn: BrokerConnection | None = None  # the leader last fetched from
        self._epoch = -1  # and its leader epoch

    @property
    def position(self) -> int:
        return self.cursor.position

    def chunks(self) -> Iterator[Chunk]:
        try:
            while not self.cursor.done:
                chunk = self._next_chunk()
                if chunk is not None:
                    yield chunk
                    self.attempts.progressed()  # the caller's time is not ours
        finally:
            self._abandon()

    def _abandon(self) -> None:
        """The caller stopped (or the cursor failed) with a fetch in flight."""
        if self._in_flight is not None:
            conn, ticket = self._in_flight
            conn.abandon(ticket)
            self._in_flight = None

    def _next_chunk(self) -> Chunk | None:
        if self._in_flight is None and not self._send():
            return None
        assert self._in_flight is not None
        conn, ticket = self._in_flight
        self._in_flight = None
        try:
            response = conn.receive(ticket, self._request_deadline())
        except ConnectionFailed as exc:
            log.debug("%s: retrying the fetch from %d after %s", self.tp, self.position, exc)
            self.cluster.invalidate(self.tp)
            self.attempts.retry(exc)
            return None
        assert isinstance(response, FetchResponse)
        data = self._partition_data(response)
        error = ErrorCode.from_code(response.error_code or data.error_code)
        if error is not ErrorCode.NONE:
            self._failed(error, data)
            return None
        return self._advance(data)

    def _request_deadline(self) -> float:
        """Not capped by the cursor's deadline: a fetch that long-polls at the end of it
        must still bring back the high watermark that decides what went wrong."""
        wait_ms = self.config.request_timeout_ms + self.config.fetch_max_wait_ms
        return monotonic_s() + wait_ms / 1000

    def _send(self) -> bool:
        """Send a fetch from the position; False (after backing off) if it could not be."""
        try:
            found = self.cluster.leader(self.tp, self.attempts)
        except TopicNotFound as exc:
            raise DataLossError(self.tp, requested=self.position, reason=str(exc)) from exc
        if found is None:
            self.attempts.retry()
            return False
        address, self._epoch = found
        self._conn = self.cluster.connection(address)
        if self._submit():
            return True
        self.attempts.retry()
        return False

    def _submit(self) -> bool:
        """Send a fetch from the position to the leader last used (no waiting, no metadata
        refresh: what :meth:`_send` does again if this fails)."""
        assert self._conn is not None
        try:
            ticket = self._conn.submit(self._request(self._epoch), FETCH, self._request_deadline())
        except ConnectionFailed as exc:
            self.cluster.invalidate(self.tp)
            self.attempts.note(exc)
            return False
        self._in_flight = self._conn, ticket
        return True

    def _request(self, epoch: int) -> FetchRequest:
        request = fetch_request(
            {self.tp: (self.position, epoch)},
            max_wait_ms=self.config.fetch_max_wait_ms,
            min_bytes=self.config.fetch_min_bytes,
            max_bytes=max(self.config.fetch_max_bytes, self.cursor.partition_max_bytes),
            partition_max_bytes=self.cursor.partition_max_bytes,
        )
        request.isolation_level = self.config.isolation_level
        return request

    def _partition_data(self, response: FetchResponse) -> FetchResponse.PartitionData:
        for topic in response.responses:
            if topic.topic != self.tp.topic:
                continue
            for data in topic.partitions:
                if data.partition_index == self.tp.partition:
                    return data
        if response.error_code != ErrorCode.NONE:  # a request-level error names no partition
            return FetchResponse.PartitionData(partition_index=self.tp.partition)
        raise InvalidResponse(f"the Fetch answer does not mention {self.tp}")

    def _advance(self, data: FetchResponse.PartitionData) -> Chunk | None:
        records = data.records
        view = memoryview(records) if isinstance(records, bytes | bytearray | memoryview) else None
        try:
            step, chunk = self.cursor.on_records(view)
        except CorruptRecordError as exc:
            raise InvalidResponse(str(exc)) from exc
        except core.BatchTooLarge as exc:
            raise InvalidResponse(f"{self.tp}: {exc}") from exc
        if step is core.Step.NO_RECORDS:
            self._no_records(data)
        if step is not core.Step.RECORDS:
            return None
        self.attempts.progressed()
        if not self.cursor.done:
            self._submit()  # the next fetch runs while the caller reads this one
        assert chunk is not None
        if self.config.isolation_level != READ_COMMITTED:
            return Chunk(chunk)
        aborted = tuple(
            AbortedTransaction(t.producer_id, t.first_offset)
            for t in data.aborted_transactions or ()
        )
        return Chunk(chunk, aborted)

    def _no_records(self, data: FetchResponse.PartitionData) -> None:
        """No records at the position: wait for the high watermark (read_committed: the last
        stable offset) to pass it."""
        high_watermark = data.high_watermark
        if self.config.isolation_level == READ_COMMITTED and data.last_stable_offset >= 0:
            high_watermark = data.last_stable_offset
        if self.attempts.expired():
            raise DataLossError(
                self.tp,
                requested=self.position,
                available_from=data.log_start_offset if data.log_start_offset >= 0 else None,
                available_until=high_watermark,
                reason=(
                    f"the high watermark stayed below the end of the range ({self.cursor.end})"
                    f" for {self.attempts.timeout_ms} ms: records were lost (an unclean leader"
                    " election?) or are not committed"
                ),
            )
        self.attempts.note(f"the high watermark {high_watermark} is below {self.cursor.end}")
        if self.position < high_watermark or self.config.fetch_max_wait_ms < MIN_LONG_POLL_MS:
            self.attempts.pause()  # no long poll paces the next fetch

    def _failed(self, error: ErrorCode, data: FetchResponse.PartitionData) -> None:
        if error is ErrorCode.OFFSET_OUT_OF_RANGE:
            self._out_of_log(data)
        elif action_for(error) is not Action.FAIL:
            log.debug("%s: retrying the fetch from %d after %s", self.tp, self.position, error.name)
            self.cluster.invalidate(self.tp)
            self.attempts.retry(error)
        else:
            raise BrokerError(error, "Fetch", self.tp)

    def _out_of_log(self, data: FetchResponse.PartitionData) -> None:
        log_start = data.log_start_offset
        if log_start < 0:
            log_start = self._offset(EARLIEST)
        outcome = self.cursor.on_out_of_range(log_start)
        if outcome is core.OutOfRange.BELOW_LOG_START:
            raise DataLossError(
                self.tp, requested=self.position, available_from=log_start, reason=outcome.value
            )
        if outcome is core.OutOfRange.LOG_ENDS_BEFORE:
            raise DataLossError(
                self.tp,
                requested=self.position,
                available_from=log_start,
                available_until=self._offset(LATEST),
                reason=outcome.value,
            )
        self.cluster.invalidate(self.tp)
        self.attempts.retry(ErrorCode.OFFSET_OUT_OF_RANGE)

    def _offset(self, spec: int) -> int:
        return self.list_offsets({self.tp: spec})[self.tp]
