"""A one-broker Kafka stand-in with partition logs, group offsets and idempotent produce, for
the Spark client's unit tests: enough of Metadata, ListOffsets, Fetch, FindCoordinator,
OffsetCommit, OffsetFetch, InitProducerId and Produce to drive the client over a real socket,
with errors scripted per api (``script(api_key, *answers)``: each answer is an ErrorCode for
the next request's partitions, or a broker action such as CLOSE)."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from fake_kafka_broker import FakeBroker

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    FetchRequest,
    FetchResponse,
    FindCoordinatorResponse,
    InitProducerIdResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
)
from kafka_protocol.record_batch import RecordBatch, iter_batches, set_base_offset
from kafka_protocol.types import BrokerId, ProducerId, TopicName

NODE_ID = 1
PRODUCER_ID = 4242
Answer = Any  # a response body, or an action of FakeBroker (CLOSE, SILENT, Raw)


@dataclass
class PartitionLog:
    batches: list[bytes] = field(default_factory=list)
    log_start_offset: int = 0
    high_watermark: int | None = None  # None: the log end offset

    @property
    def log_end_offset(self) -> int:
        if not self.batches:
            return self.log_start_offset
        return RecordBatch(memoryview(self.batches[-1])).next_offset

    @property
    def visible_end(self) -> int:
        return self.log_end_offset if self.high_watermark is None else self.high_watermark

    def append(self, batch: bytes) -> int:
        base = self.log_end_offset
        data = bytearray(batch)
        set_base_offset(data, base)
        self.batches.append(bytes(data))
        return base


@dataclass
class FakeCluster:
    topics: dict[str, int]
    internal: tuple[str, ...] = ()
    leader_epoch: int = 7
    logs: dict[tuple[str, int], PartitionLog] = field(default_factory=dict)
    committed: dict[tuple[str, str, int], tuple[int, str]] = field(default_factory=dict)
    produced: list[tuple[str, int, bytes]] = field(default_factory=list)  # every batch received
    scripted: dict[int, collections.deque[Answer]] = field(default_factory=dict)
    broker: FakeBroker = field(init=False)

    def __post_init__(self) -> None:
        for topic, count in self.topics.items():
            for p in range(count):
                self.logs.setdefault((topic, p), PartitionLog())
        self.broker = FakeBroker(
            handlers={
                0: self._produce,
                1: self._fetch,
                2: self._list_offsets,
                3: self._metadata,
                8: self._offset_commit,
                9: self._offset_fetch,
                10: self._find_coordinator,
                22: lambda h, b: InitProducerIdResponse(producer_id=ProducerId(PRODUCER_ID)),
            }
        )

    def script(self, api_key: int, *answers: Answer) -> None:
        self.scripted.setdefault(api_key, collections.deque()).extend(answers)

    def log(self, topic: str, partition: int = 0) -> PartitionLog:
        return self.logs[(topic, partition)]

    def _take_script(self, api_key: int) -> tuple[Answer | None, ErrorCode | None]:
        """The next scripted answer of ``api_key``: (a broker action, or an error code)."""
        queue = self.scripted.get(api_key)
        answer = queue.popleft() if queue else None
        if isinstance(answer, ErrorCode):
            return None, answer
        return answer, None

    # --- handlers -------------------------------------------------------------------------------

    def _metadata(self, header: RequestHeader, req: MetadataRequest) -> MetadataResponse:
        host, port = self.broker.address
        names = list(self.topics) if req.topics is None else [t.name for t in req.topics]
        topics = []
        for name in names:
            assert name is not None
            if name not in self.topics:
                topics.append(
                    MetadataResponse.MetadataResponseTopic(
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=TopicName(name)
                    )
                )
                continue
            partitions = [
                MetadataResponse.MetadataResponsePartition(
                    partition_index=p,
                    leader_id=BrokerId(NODE_ID),
                    leader_epoch=self.leader_epoch,
                    replica_nodes=[BrokerId(NODE_ID)],
                    isr_nodes=[BrokerId(NODE_ID)],
                )
                for p in range(self.topics[name])
            ]
            topics.append(
                MetadataResponse.MetadataResponseTopic(
                    name=TopicName(name), is_internal=name in self.internal, partitions=partitions
                )
            )
        return MetadataResponse(
            brokers=[
                MetadataResponse.MetadataResponseBroker(
                    node_id=BrokerId(NODE_ID), host=host, port=port
                )
            ],
            controller_id=BrokerId(NODE_ID),
            topics=topics,
        )

    def _list_offsets(self, header: RequestHeader, req: ListOffsetsRequest) -> Answer:
        action, scripted = self._take_script(2)
        if action is not None:
            return action
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                log = self.log(t.name, p.partition_index)
                answer = ListOffsetsResponse.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index, old_style_offsets=[]
                )
                if scripted is not None:
                    answer.error_code = scripted
                elif p.timestamp == -2:
                    answer.offset = log.log_start_offset
                elif p.timestamp == -1:
                    answer.offset = log.visible_end
                else:
                    answer.offset = self._offset_for_time(log, p.timestamp)
                parts.append(answer)
            topics.append(
                ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=parts)
            )
        return ListOffsetsResponse(topics=topics)

    @staticmethod
    def _offset_for_time(log: PartitionLog, timestamp: int) -> int:
        for data in log.batches:
            for record in RecordBatch(memoryview(data)).records():
                if record.timestamp >= timestamp:
                    return record.offset
        return -1

    def _fetch(self, header: RequestHeader, req: FetchRequest) -> Answer:
        action, scripted = self._take_script(1)
        if action is not None:
            return action
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                log = self.log(t.topic, p.partition)
                data = FetchResponse.PartitionData(
                    partition_index=p.partition,
                    high_watermark=log.visible_end,
                    last_stable_offset=log.visible_end,
                    log_start_offset=log.log_start_offset,
                    aborted_transactions=[],
                )
                if scripted is not None:
                    data.error_code = scripted
                elif not log.log_start_offset <= p.fetch_offset <= log.log_end_offset:
                    data.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                else:
                    data.records = self._read(log, p.fetch_offset, p.partition_max_bytes)
                parts.append(data)
            topics.append(FetchResponse.FetchableTopicResponse(topic=t.topic, partitions=parts))
        return FetchResponse(responses=topics)

    @staticmethod
    def _read(log: PartitionLog, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding ``offset``, the first even above ``max_bytes``
        (KIP-74), up to the visible end."""
        out = bytearray()
        for data in log.batches:
            batch = RecordBatch(memoryview(data))
            if batch.last_offset < offset or batch.base_offset >= log.visible_end:
                continue
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return bytes(out)

    def _find_coordinator(self, header: RequestHeader, req: Any) -> Answer:
        error = self._take_script(10)[1] or ErrorCode.NONE
        host, port = self.broker.address
        if header.request_api_version >= 4:
            return FindCoordinatorResponse(
                coordinators=[
                    FindCoordinatorResponse.Coordinator(
                        key=req.coordinator_keys[0],
                        node_id=BrokerId(NODE_ID),
                        host=host,
                        port=port,
                        error_code=error,
                    )
                ]
            )
        return FindCoordinatorResponse(
            error_code=error, node_id=BrokerId(NODE_ID), host=host, port=port
        )

    def _offset_commit(self, header: RequestHeader, req: OffsetCommitRequest) -> Answer:
        error = self._take_script(8)[1] or ErrorCode.NONE
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                if error is ErrorCode.NONE:
                    key = (req.group_id, t.name, p.partition_index)
                    self.committed[key] = (p.committed_offset, p.committed_metadata or "")
                parts.append(
                    OffsetCommitResponse.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=error
                    )
                )
            topics.append(
                OffsetCommitResponse.OffsetCommitResponseTopic(name=t.name, partitions=parts)
            )
        return OffsetCommitResponse(topics=topics)

    def _offset_fetch(self, header: RequestHeader, req: OffsetFetchRequest) -> Answer:
        """v0-v7 name one group and its topics; v8 a list of groups (we answer the first)."""
        error = self._take_script(9)[1] or ErrorCode.NONE
        grouped = header.request_api_version >= 8
        group_id = req.groups[0].group_id if grouped else req.group_id
        asked = req.groups[0].topics if grouped else req.topics
        assert asked is not None
        R = OffsetFetchResponse
        topic_cls: Any
        part_cls: Any
        topic_cls, part_cls = (
            (R.OffsetFetchResponseTopics, R.OffsetFetchResponsePartitions)
            if grouped
            else (R.OffsetFetchResponseTopic, R.OffsetFetchResponsePartition)
        )
        topics: list[Any] = [
            topic_cls(
                name=t.name,
                partitions=[
                    part_cls(partition_index=p, **self._committed(group_id, t.name, p))
                    for p in t.partition_indexes
                ],
            )
            for t in asked
        ]
        if not grouped:
            return R(topics=topics, error_code=error)
        group = R.OffsetFetchResponseGroup(group_id=group_id, error_code=error, topics=topics)
        return R(groups=[group])

    def _committed(self, group: str, topic: str, partition: int) -> dict[str, Any]:
        offset, metadata = self.committed.get((group, topic, partition), (-1, ""))
        return {"committed_offset": offset, "metadata": metadata}

    def _produce(self, header: RequestHeader, req: ProduceRequest) -> Answer:
        action, scripted = self._take_script(0)
        topics = []
        for t in req.topic_data:
            parts = []
            for p in t.partition_data:
                assert isinstance(p.records, memoryview)
                data = bytes(p.records)
                self.produced.append((t.name, p.index, data))
                answer = ProduceResponse.PartitionProduceResponse(index=p.index)
                if scripted is not None:
                    answer.error_code = scripted
                else:
                    answer.base_offset = self._append_idempotent(t.name, p.index, data)
                parts.append(answer)
            topics.append(
                ProduceResponse.TopicProduceResponse(name=t.name, partition_responses=parts)
            )
        if action is not None:
            return action  # appended, but the answer is lost
        return ProduceResponse(responses=topics)

    def _append_idempotent(self, topic: str, partition: int, data: bytes) -> int:
        """Append, unless a batch with the same producer and sequence is already there."""
        log = self.log(topic, partition)
        (batch,) = iter_batches(data)
        for stored in log.batches:
            old = RecordBatch(memoryview(stored))
            same = (old.producer_id, old.base_sequence) == (batch.producer_id, batch.base_sequence)
            if same and batch.producer_id >= 0:
                return old.base_offset
        return log.append(data)
