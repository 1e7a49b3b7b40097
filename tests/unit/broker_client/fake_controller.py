"""A scripted controller listener for the broker-side client tests.

Real asyncio sockets on 127.0.0.1 and the project's codecs (``decode_request`` /
``encode_response``), so the client is tested against bytes, not mocks.  Each connection reads
requests as they come (so pipelined requests pile up) and answers them strictly in order.
Switches: ``active`` (False: NOT_CONTROLLER to admin and lifecycle requests), ``hold`` (api keys
never answered), ``fetch_error``, ``drop_connections()``, ``answer_after`` (read that many
requests before answering any), ``corrupt_fetches``, ``fetch_gate``, ``duplicate_registrations``,
``stale_heartbeats``, ``registration_error``, and ``api_versions_max`` (below 3: the KIP-511
fallback).  The metadata log is a list of RecordBatch v2 batches built with
``build_metadata_batch``; a snapshot, when set, is ``encode_snapshot`` bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from kafka_protocol._codec import FileRegion, Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.framing import api_classes, decode_request, encode_response
from kafka_protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    ApiVersionsResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    RequestHeader,
)
from kafka_protocol.metadata import ConfigRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord
from kafka_protocol.types import BrokerId, ProducerId, TopicName
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage
from metadata_log.records import MetadataRecord, build_metadata_batch
from metadata_log.snapshot import encode_snapshot

METADATA_TOPIC = TopicName("__cluster_metadata")
SERVED_APIS = (18, 1, 59, 62, 63, 19, 20, 37, 33, 44, 67)
ACTIVE_ONLY_APIS = frozenset({62, 63, 19, 20, 37, 33, 44, 67})


def closed_port() -> int:
    """A port nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Batch:
    base_offset: int
    last_offset: int
    data: bytes


@dataclass
class FakeController:
    active: bool = True
    api_versions_max: int = 3
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    hold: set[int] = field(default_factory=set)
    answer_after: int = 0
    # metadata log
    batches: list[Batch] = field(default_factory=list)
    log_start_offset: int = 0
    committed_offset: int | None = None  # the high watermark; None: the log end offset
    snapshot: tuple[int, int, bytes] | None = None  # end offset, epoch, bytes
    snapshot_chunk_bytes: int = 200
    max_batches_per_fetch: int = 1
    corrupt_fetches: int = 0
    fetch_error: ErrorCode = ErrorCode.NONE  # e.g. NOT_LEADER_OR_FOLLOWER: fetch elsewhere
    fetch_gate: asyncio.Event | None = None
    # brokers
    unfence_offset: int = 0
    duplicate_registrations: int = 0
    stale_heartbeats: int = 0
    registration_error: ErrorCode = ErrorCode.NONE
    broker_epochs: dict[int, int] = field(default_factory=dict)
    # what was received
    received: list[tuple[RequestHeader, Request]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for key in SERVED_APIS:
            request_cls, _ = api_classes(key)
            self.ranges.setdefault(key, (request_cls.MIN_VERSION, request_cls.MAX_VERSION))
        self._next_epoch = 100
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        self._never = asyncio.Event()

    # --- life ---------------------------------------------------------------------------------

    async def start(self) -> FakeController:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None
        return "127.0.0.1", int(self._server.sockets[0].getsockname()[1])

    def drop_connections(self) -> None:
        for writer in list(self._writers):
            writer.close()

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        self.drop_connections()
        while self._handlers:  # including connections accepted while we were closing
            for task in self._handlers:
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    # --- metadata log -------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self.batches[-1].last_offset + 1 if self.batches else self.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset if self.committed_offset is None else self.committed_offset

    def append(self, records: Sequence[MetadataRecord], epoch: int = 1) -> int:
        """Append one batch; return its last offset."""
        base = self.log_end_offset
        data = build_metadata_batch(records, base_offset=base, epoch=epoch, timestamp_ms=0)
        self.batches.append(Batch(base, base + len(records) - 1, data))
        self._notify()
        return base + len(records) - 1

    def set_snapshot(self, records: Sequence[MetadataRecord], end_offset: int, epoch: int) -> None:
        """A snapshot of ``records`` replayed, covering offsets below ``end_offset``; the log
        starts there."""
        image = replay_records(
            ClusterImage.EMPTY, list(records), offset=end_offset - 1, epoch=epoch
        )
        self.snapshot = (end_offset, epoch, encode_snapshot(image, timestamp_ms=0))
        self.log_start_offset = end_offset

    def requests_of(self, api_key: int) -> list[tuple[RequestHeader, Request]]:
        return [(h, r) for h, r in self.received if h.request_api_key == api_key]

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # --- connections --------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Our own task, not the one asyncio's stream server runs us in: close() cancels it,
        # and the server's task would log the cancellation as an error.
        task = asyncio.create_task(self._connection(reader, writer))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        queue: asyncio.Queue[tuple[RequestHeader, Request] | None] = asyncio.Queue()
        reading = asyncio.create_task(self._read_requests(reader, queue))
        try:
            while (item := await queue.get()) is not None:
                version, response = await self._answer(*item)
                chunks = encode_response(version, item[0].correlation_id, response)
                writer.writelines(c for c in chunks if not isinstance(c, FileRegion))
                await writer.drain()
        except OSError:
            pass  # the client went away
        finally:
            reading.cancel()
            writer.close()
            self._writers.discard(writer)
            with contextlib.suppress(OSError):
                await writer.wait_closed()  # the socket is released before the loop ends

    async def _read_requests(
        self,
        reader: asyncio.StreamReader,
        queue: asyncio.Queue[tuple[RequestHeader, Request] | None],
    ) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                header, body = decode_request(await reader.readexactly(size))
                self.received.append((header, body))
                self._notify()
                queue.put_nowait((header, body))
        except (asyncio.IncompleteReadError, OSError):
            queue.put_nowait(None)

    async def _answer(self, header: RequestHeader, body: Request) -> tuple[int, Response]:
        key, version = header.request_api_key, header.request_api_version
        while len(self.received) < self.answer_after:
            await self._changed.wait()
        if key in self.hold:
            await self._never.wait()
        if key == 18:
            return self._api_versions(version)
        if key in ACTIVE_ONLY_APIS and not self.active:
            return version, _not_controller(body)
        if isinstance(body, FetchRequest):
            return version, await self._fetch(body)
        return version, self._handle(body)

    def _api_versions(self, version: int) -> tuple[int, Response]:
        keys = [
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(self.ranges.items())
        ]
        keys = [k for k in keys if k.api_key != 18]
        keys.append(ApiVersionsResponse.ApiVersion(api_key=18, max_version=self.api_versions_max))
        if version > self.api_versions_max:
            return 0, ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=keys)
        return version, ApiVersionsResponse(api_keys=keys)

    def _handle(self, body: Request) -> Response:
        match body:
            case BrokerRegistrationRequest():
                return self._register(body)
            case BrokerHeartbeatRequest():
                return self._heartbeat(body)
            case CreateTopicsRequest():
                return _created(body)
            case FetchSnapshotRequest():
                return self._fetch_snapshot(body)
            case AllocateProducerIdsRequest():
                if self.broker_epochs.get(body.broker_id) != body.broker_epoch:
                    return AllocateProducerIdsResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
                return AllocateProducerIdsResponse(
                    producer_id_start=ProducerId(1000), producer_id_len=1000
                )
        raise AssertionError(f"the fake does not serve {body.NAME}")

    # --- brokers ------------------------------------------------------------------------------

    def _register(self, body: BrokerRegistrationRequest) -> BrokerRegistrationResponse:
        if self.duplicate_registrations:
            self.duplicate_registrations -= 1
            return BrokerRegistrationResponse(error_code=ErrorCode.DUPLICATE_BROKER_REGISTRATION)
        if self.registration_error is not ErrorCode.NONE:
            return BrokerRegistrationResponse(error_code=self.registration_error)
        self._next_epoch += 1
        self.broker_epochs[body.broker_id] = self._next_epoch
        return BrokerRegistrationResponse(broker_epoch=self._next_epoch)

    def _heartbeat(self, body: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
        if self.stale_heartbeats:
            self.stale_heartbeats -= 1
            return BrokerHeartbeatResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        epoch = self.broker_epochs.get(body.broker_id)
        if epoch is None:
            return BrokerHeartbeatResponse(error_code=ErrorCode.BROKER_ID_NOT_REGISTERED)
        if epoch != body.broker_epoch:
            return BrokerHeartbeatResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        caught_up = body.current_metadata_offset >= self.unfence_offset
        return BrokerHeartbeatResponse(
            is_caught_up=caught_up, is_fenced=not caught_up, should_shut_down=body.want_shut_down
        )

    # --- fetch --------------------------------------------------------------------------------

    async def _fetch(self, body: FetchRequest) -> FetchResponse:
        if self.fetch_gate is not None:
            await self.fetch_gate.wait()
        wanted = body.topics[0].partitions[0]
        assert body.topics[0].topic == METADATA_TOPIC and wanted.partition == 0
        if self.fetch_error is not ErrorCode.NONE:
            return self._fetched(self.fetch_error, b"", FetchResponse.SnapshotId())
        if self.snapshot is not None and wanted.fetch_offset < self.log_start_offset:
            end_offset, epoch, _ = self.snapshot
            snapshot_id = FetchResponse.SnapshotId(end_offset=end_offset, epoch=epoch)
            return self._fetched(ErrorCode.OFFSET_OUT_OF_RANGE, b"", snapshot_id)
        records = self._committed_from(wanted.fetch_offset)
        if not records:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(body.max_wait_ms / 1000):
                    await self._changed.wait()
            records = self._committed_from(wanted.fetch_offset)
        if records and self.corrupt_fetches:
            self.corrupt_fetches -= 1
            records = records[:-1] + bytes([records[-1] ^ 0xFF])
        return self._fetched(ErrorCode.NONE, records, FetchResponse.SnapshotId())

    def _committed_from(self, offset: int) -> bytes:
        hw = self.high_watermark
        chosen = [b for b in self.batches if b.last_offset >= offset and b.last_offset < hw]
        return b"".join(b.data for b in chosen[: self.max_batches_per_fetch])

    def _fetched(
        self, error: ErrorCode, records: bytes, snapshot_id: FetchResponse.SnapshotId
    ) -> FetchResponse:
        partition = FetchResponse.PartitionData(
            partition_index=0,
            error_code=error,
            high_watermark=self.high_watermark,
            last_stable_offset=self.high_watermark,
            log_start_offset=self.log_start_offset,
            snapshot_id=snapshot_id,
            records=records,
        )
        topic = FetchResponse.FetchableTopicResponse(topic=METADATA_TOPIC, partitions=[partition])
        return FetchResponse(responses=[topic])

    def _fetch_snapshot(self, body: FetchSnapshotRequest) -> FetchSnapshotResponse:
        assert self.snapshot is not None
        end_offset, epoch, data = self.snapshot
        wanted = body.topics[0].partitions[0]
        assert (wanted.snapshot_id.end_offset, wanted.snapshot_id.epoch) == (end_offset, epoch)
        chunk = data[wanted.position : wanted.position + self.snapshot_chunk_bytes]
        part = FetchSnapshotResponse.PartitionSnapshot(
            index=0,
            snapshot_id=FetchSnapshotResponse.SnapshotId(end_offset=end_offset, epoch=epoch),
            size=len(data),
            position=wanted.position,
            unaligned_records=chunk,
        )
        topic = FetchSnapshotResponse.TopicSnapshot(name=METADATA_TOPIC, partitions=[part])
        return FetchSnapshotResponse(topics=[topic])


def _created(body: CreateTopicsRequest) -> CreateTopicsResponse:
    return CreateTopicsResponse(
        topics=[
            CreateTopicsResponse.CreatableTopicResult(
                name=t.name, topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, t.name), num_partitions=1
            )
            for t in body.topics
        ]
    )


def _not_controller(body: Request) -> Response:
    if isinstance(body, CreateTopicsRequest):
        return CreateTopicsResponse(
            topics=[
                CreateTopicsResponse.CreatableTopicResult(
                    name=t.name, error_code=ErrorCode.NOT_CONTROLLER
                )
                for t in body.topics
            ]
        )
    _, response_cls = api_classes(body.API_KEY or 0)
    response = response_cls()
    response.error_code = ErrorCode.NOT_CONTROLLER  # type: ignore[attr-defined]
    return response


@contextlib.asynccontextmanager
async def running(*fakes: FakeController) -> AsyncIterator[None]:
    for fake in fakes:
        await fake.start()
    try:
        yield
    finally:
        for fake in fakes:
            await fake.close()


async def eventually(predicate: object, timeout_s: float = 2.0) -> None:
    """Wait until ``predicate()`` is true (polling every 5 ms)."""
    assert callable(predicate)
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.005)


# --- metadata records for the tests -----------------------------------------------------------


def topic_records(name: str, partitions: int = 1, leader: int = 1) -> list[MetadataRecord]:
    """A TopicRecord and its PartitionRecords, with a topic id derived from the name."""
    topic_id = uuid.uuid5(uuid.NAMESPACE_DNS, name)
    out: list[MetadataRecord] = [TopicRecord(name=TopicName(name), topic_id=topic_id)]
    out += [
        PartitionRecord(
            partition_id=p,
            topic_id=topic_id,
            replicas=[BrokerId(leader)],
            isr=[BrokerId(leader)],
            leader=BrokerId(leader),
        )
        for p in range(partitions)
    ]
    return out


def broker_record(broker_id: int, epoch: int) -> MetadataRecord:
    return RegisterBrokerRecord(
        broker_id=BrokerId(broker_id), incarnation_id=uuid.UUID(int=broker_id), broker_epoch=epoch
    )


def config_record(topic: str, key: str, value: str) -> MetadataRecord:
    return ConfigRecord(resource_type=2, resource_name=topic, name=key, value=value)
