"""The broker's copy of the metadata log: a KRaft observer tailing ``__cluster_metadata``.

Theory of operation
-------------------
The follower holds the current :class:`ClusterImage` and ``next_offset``, the offset of the next
metadata record to read (``image.offset + 1``).  ``run()`` long-polls the controllers with Fetch
v12 (``replica_id`` -1: an observer, not a voter; ``max_wait_ms`` 500) from ``next_offset``::

    Fetch response, partition 0 of __cluster_metadata
      records          RecordBatch v2 batches; base offsets are metadata offsets, dense
      high_watermark   the next offset to be committed
      snapshot_id      set when our offset is below the log start: load that snapshot instead

Every batch of a response is checked (CRC, framing, dense offsets) before any is replayed, so
a corrupt response changes nothing and the same offset is fetched again.  Batches that are not
wholly below the high watermark are left for a later fetch: only committed records reach the
image.  The records of one response are replayed into one :class:`MetadataDelta`, applied with
the offset and ``partition_leader_epoch`` of the last batch, and published once as
``on_update(delta, image)``.

When the controller answers with a ``snapshot_id`` (with OFFSET_OUT_OF_RANGE or no error) the
follower downloads it with FetchSnapshot v0, chunk by chunk until ``position`` reaches
``size``, rebuilds the image from :data:`ClusterImage.EMPTY`, publishes it, and continues at the
snapshot's ``end_offset``.

Failures are retried for ever with backoff.  Each fetch may take ``request_deadline_ms``, the
client's own retries (reconnecting, moving to another controller) included; after an unanswered
fetch or an error answer the follower asks the client to try another controller.  Unanswered
fetches, transport errors and error codes are logged at WARNING once per streak; corrupt data
(a bad CRC, a response that does not decode) at ERROR every time.  Only what retrying cannot
cure escapes ``run()`` (no common Fetch version, a bug), so the task's owner sees it.

``caught_up`` is true once a fetch has been answered and ``next_offset`` has reached the high
watermark.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from broker.failure_streak import FailureStreak
from broker.kafka_client import Backoff, ControllerClient
from kafka_protocol._codec import Buffer, Chunk, FileRegion, Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import CorruptRecordError, RemoteProtocolError
from kafka_protocol.messages import (
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)
from kafka_protocol.record_batch import RecordBatch, iter_batches
from kafka_protocol.types import BrokerId, TopicName
from metadata_log.delta import MetadataDelta
from metadata_log.exceptions import CorruptSnapshotError, InvalidMetadataRecordError
from metadata_log.image import ClusterImage
from metadata_log.records import MetadataRecord, read_metadata_batch
from metadata_log.snapshot import MAX_SNAPSHOT_BYTES, decode_snapshot

log = logging.getLogger(__name__)

METADATA_TOPIC: Final = TopicName("__cluster_metadata")
METADATA_PARTITION: Final = 0
FETCH_VERSION: Final = 12
FETCH_SNAPSHOT_VERSION: Final = 0
OBSERVER_REPLICA_ID: Final = BrokerId(-1)
FETCH_MAX_WAIT_MS: Final = 500
FETCH_MAX_BYTES: Final = 8 * 1024 * 1024
SNAPSHOT_CHUNK_MAX_BYTES: Final = 8 * 1024 * 1024
# A response holding only records above the high watermark is answered at once (min_bytes is
# met); wait a little before asking again rather than spinning.
UNCOMMITTED_RETRY_S: Final = 0.02
# How long one fetch (or snapshot chunk) may take, the client's retries included, before the
# failure is reported and the loop backs off: long enough for a long poll and a failover.
DEFAULT_REQUEST_DEADLINE_MS: Final = 5000

MetadataListener = Callable[[MetadataDelta, ClusterImage], None]
_Decoded = tuple[RecordBatch, list[MetadataRecord]]


class _FetchFailed(Exception):
    """A fetch answered with an error, or with something we cannot use now; retried."""


class MetadataFollower:
    """Tails the committed metadata log (see the module docstring)."""

    def __init__(
        self,
        client: ControllerClient,
        broker_id: int,
        on_update: MetadataListener,
        *,
        image: ClusterImage = ClusterImage.EMPTY,
        cluster_id: str | None = None,
        request_deadline_ms: int = DEFAULT_REQUEST_DEADLINE_MS,
    ) -> None:
        self.client = client
        self.request_deadline_s = request_deadline_ms / 1000
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self._on_update = on_update
        self._image = image
        self._high_watermark = -1
        self._answered = False
        self._changed = asyncio.Event()
        self._failures = FailureStreak(log)  # fetches in a row that failed

    @property
    def image(self) -> ClusterImage:
        return self._image

    @property
    def next_offset(self) -> int:
        return self._image.offset + 1

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def caught_up(self) -> bool:
        return self._answered and self.next_offset >= self._high_watermark

    async def wait_for_offset(self, offset: int) -> ClusterImage:
        """Wait until the image includes the record at ``offset``; return that image."""
        while self._image.offset < offset:
            await self._changed.wait()
        return self._image

    async def wait_caught_up(self) -> None:
        while not self.caught_up:
            await self._changed.wait()

    async def run(self) -> None:
        """Fetch until cancelled."""
        backoff = Backoff()
        while True:
            try:
                await self.poll()
            except OSError as exc:  # KafkaConnectionError: the client has moved on already
                self._failed(str(exc) or repr(exc))
            except _FetchFailed as exc:  # perhaps another controller can answer
                self.client.rotate(to_active=False, reason=str(exc))
                self._failed(str(exc))
            except (RemoteProtocolError, InvalidMetadataRecordError, CorruptSnapshotError) as exc:
                log.error(
                    "corrupt metadata from the controller at offset %d, fetching it again: %s",
                    self.next_offset,
                    exc,
                )
                self._failures.count += 1  # logged at ERROR above, every time
                self.client.rotate(to_active=False, reason="sent corrupt metadata")
            else:
                self._succeeded()
                backoff.reset()
                continue
            await backoff.sleep()

    async def poll(self) -> None:
        """One fetch and what it brings (records or a snapshot)."""
        response = await self._request(self._fetch_request(), FETCH_VERSION)
        assert isinstance(response, FetchResponse)
        partition = _metadata_partition(response)
        snapshot = partition.snapshot_id
        error = ErrorCode.from_code(partition.error_code)
        if snapshot.end_offset >= 0 and error in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
            await self._load_snapshot(snapshot.end_offset, snapshot.epoch)
            if partition.high_watermark >= 0:
                self._answered_with(partition.high_watermark)
            return
        if error is not ErrorCode.NONE:
            raise _FetchFailed(f"fetch from offset {self.next_offset} answered {error.name}")
        if partition.diverging_epoch.end_offset >= 0:
            diverging = partition.diverging_epoch
            raise _FetchFailed(
                f"controller says the log diverges at epoch {diverging.epoch} offset "
                f"{diverging.end_offset}, but we hold committed records only"
            )
        if self.next_offset < partition.log_start_offset:
            raise _FetchFailed(
                f"offset {self.next_offset} is below the log start offset "
                f"{partition.log_start_offset} and the controller named no snapshot"
            )
        records = _received_bytes(partition.records)
        applied = self._apply(records, partition.high_watermark)
        self._answered_with(partition.high_watermark)
        if not applied:
            await asyncio.sleep(UNCOMMITTED_RETRY_S)

    def _answered_with(self, high_watermark: int) -> None:
        self._high_watermark = high_watermark
        self._answered = True
        self._notify()

    async def _request(self, request: Request, max_version: int) -> Response:
        """Any controller's answer; the client retries failures until our deadline."""
        try:
            async with asyncio.timeout(self.request_deadline_s):
                return await self.client.request(request, max_version, to_active=False)
        except TimeoutError:
            raise _FetchFailed(
                f"no controller answered {request.NAME} within {self.request_deadline_s:g} s"
            ) from None

    # --- records ------------------------------------------------------------------------------

    def _fetch_request(self) -> FetchRequest:
        partition = FetchRequest.FetchPartition(
            partition=METADATA_PARTITION,
            fetch_offset=self.next_offset,
            last_fetched_epoch=self._image.epoch,
            partition_max_bytes=FETCH_MAX_BYTES,
        )
        return FetchRequest(
            cluster_id=self.cluster_id,
            replica_id=OBSERVER_REPLICA_ID,
            max_wait_ms=FETCH_MAX_WAIT_MS,
            min_bytes=1,
            max_bytes=FETCH_MAX_BYTES,
            topics=[FetchRequest.FetchTopic(topic=METADATA_TOPIC, partitions=[partition])],
        )

    def _apply(self, records: Buffer, high_watermark: int) -> bool:
        """Replay the committed batches of ``records``; False if records came but none were
        committed yet.  Raises (changing nothing) if any batch is corrupt."""
        decoded = self._committed_batches(records, high_watermark)
        if not decoded:
            return len(records) == 0
        delta = MetadataDelta(self._image)
        for _, batch_records in decoded:
            delta.replay_all(batch_records)
        last = decoded[-1][0]
        image = delta.apply(offset=last.last_offset, epoch=last.partition_leader_epoch)
        self._publish(delta, image)
        return True

    def _committed_batches(self, records: Buffer, high_watermark: int) -> list[_Decoded]:
        out: list[_Decoded] = []
        expected = self.next_offset
        for batch in iter_batches(records, allow_truncated_tail=True):
            if batch.last_offset < expected:
                continue  # wholly replayed already
            if batch.last_offset >= high_watermark:
                break  # not committed yet
            batch.validate()
            if batch.base_offset > expected:
                raise CorruptRecordError(
                    f"metadata batch at offset {batch.base_offset} leaves a gap after {expected}"
                )
            out.append((batch, _records_from(batch, expected)))
            expected = batch.next_offset
        return out

    # --- snapshots ----------------------------------------------------------------------------

    async def _load_snapshot(self, end_offset: int, epoch: int) -> None:
        if end_offset <= self.next_offset:
            raise _FetchFailed(
                f"snapshot ending at {end_offset} is not ahead of offset {self.next_offset}"
            )
        name = f"snapshot {end_offset}-{epoch}"
        records = decode_snapshot(await self._fetch_snapshot(end_offset, epoch), name)
        delta = MetadataDelta(ClusterImage.EMPTY).replay_all(records)
        image = delta.apply(offset=end_offset - 1, epoch=epoch)
        log.info("loaded metadata %s (%d records)", name, len(records))
        self._publish(delta, image)

    async def _fetch_snapshot(self, end_offset: int, epoch: int) -> bytes:
        data = bytearray()
        size: int | None = None
        while size is None or len(data) < size:
            part = await self._snapshot_chunk(end_offset, epoch, len(data))
            if size is None:
                size = part.size
                if not 0 <= size <= MAX_SNAPSHOT_BYTES:
                    raise _FetchFailed(f"snapshot of {size} bytes is beyond our limit")
            chunk = _received_bytes(part.unaligned_records)
            if part.size != size or part.position != len(data) or (not chunk and len(data) < size):
                raise _FetchFailed(
                    f"snapshot chunk at {part.position} of {part.size} bytes does not continue "
                    f"the {len(data)} of {size} bytes we have"
                )
            data += chunk
        if len(data) != size:
            raise _FetchFailed(f"snapshot has {len(data)} bytes, not the {size} announced")
        return bytes(data)

    async def _snapshot_chunk(
        self, end_offset: int, epoch: int, position: int
    ) -> FetchSnapshotResponse.PartitionSnapshot:
        wanted = FetchSnapshotRequest.SnapshotId(end_offset=end_offset, epoch=epoch)
        request = FetchSnapshotRequest(
            cluster_id=self.cluster_id,
            replica_id=OBSERVER_REPLICA_ID,
            max_bytes=SNAPSHOT_CHUNK_MAX_BYTES,
            topics=[
                FetchSnapshotRequest.TopicSnapshot(
                    name=METADATA_TOPIC,
                    partitions=[
                        FetchSnapshotRequest.PartitionSnapshot(
                            partition=METADATA_PARTITION,
                            current_leader_epoch=-1,
                            snapshot_id=wanted,
                            position=position,
                        )
                    ],
                )
            ],
        )
        response = await self._request(request, FETCH_SNAPSHOT_VERSION)
        assert isinstance(response, FetchSnapshotResponse)
        return _snapshot_partition(response, end_offset, epoch)

    # --- publishing and failures --------------------------------------------------------------

    def _publish(self, delta: MetadataDelta, image: ClusterImage) -> None:
        assert image.offset > self._image.offset, (image.offset, self._image.offset)
        self._image = image
        try:
            self._on_update(delta, image)
        except Exception:  # the image has moved on; a listener bug must not stop the log
            log.exception("metadata listener failed at offset %d", image.offset)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _failed(self, reason: str) -> None:
        self._failures.failed("metadata fetch failing, retrying: %s", reason)

    def _succeeded(self) -> None:
        self._failures.ended(
            "metadata fetch working again (offset %d, high watermark %d) after %d failures",
            self.next_offset,
            self._high_watermark,
        )


def _received_bytes(chunk: Chunk | None) -> Buffer:
    """A records field of a decoded response (a FileRegion only ever appears when sending)."""
    assert not isinstance(chunk, FileRegion)
    return b"" if chunk is None else chunk


def _records_from(batch: RecordBatch, offset: int) -> list[MetadataRecord]:
    """The metadata records of ``batch`` at ``offset`` and after (dense offsets)."""
    records = read_metadata_batch(batch)
    skip = offset - batch.base_offset
    if skip <= 0 or batch.is_control:
        return records
    if len(records) != batch.last_offset_delta + 1:
        raise CorruptRecordError(f"metadata batch at offset {batch.base_offset} is not dense")
    return records[skip:]


def _metadata_partition(response: FetchResponse) -> FetchResponse.PartitionData:
    if response.error_code != ErrorCode.NONE:
        name = ErrorCode.from_code(response.error_code).name
        raise _FetchFailed(f"fetch answered {name}")
    for topic in response.responses:
        if topic.topic == METADATA_TOPIC:
            for partition in topic.partitions:
                if partition.partition_index == METADATA_PARTITION:
                    return partition
    raise _FetchFailed(f"fetch response has no partition {METADATA_TOPIC}-{METADATA_PARTITION}")


def _snapshot_partition(
    response: FetchSnapshotResponse, end_offset: int, epoch: int
) -> FetchSnapshotResponse.PartitionSnapshot:
    if response.error_code != ErrorCode.NONE:
        name = ErrorCode.from_code(response.error_code).name
        raise _FetchFailed(f"snapshot fetch answered {name}")
    for topic in response.topics:
        if topic.name != METADATA_TOPIC:
            continue
        for part in topic.partitions:
            if part.index != METADATA_PARTITION:
                continue
            if part.error_code != ErrorCode.NONE:
                name = ErrorCode.from_code(part.error_code).name
                raise _FetchFailed(f"snapshot {end_offset}-{epoch} fetch answered {name}")
            if (part.snapshot_id.end_offset, part.snapshot_id.epoch) != (end_offset, epoch):
                raise _FetchFailed(f"asked for snapshot {end_offset}-{epoch}, got another")
            return part
    raise _FetchFailed("snapshot fetch response has no partition of the metadata topic")
