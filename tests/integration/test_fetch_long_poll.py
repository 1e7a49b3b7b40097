"""Long-poll Fetch: woken by an append, even one made in the same event-loop pass."""

from __future__ import annotations

import time

import pytest

from integration.node_process import NodeProcess
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    CreateTopicsRequest,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
)
from kafka_protocol.record_batch import SimpleRecord, build_batch, iter_batches
from kafka_protocol.types import TopicName

pytestmark = pytest.mark.integration

MAX_WAIT_MS = 3000


def fetch(topic: str, offset: int) -> FetchRequest:
    return FetchRequest(
        max_wait_ms=MAX_WAIT_MS,
        min_bytes=1,
        topics=[
            FetchRequest.FetchTopic(
                topic=TopicName(topic),
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )


def produce(topic: str, value: bytes) -> ProduceRequest:
    return ProduceRequest(
        acks=1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TopicName(topic),
                partition_data=[
                    ProduceRequest.PartitionProduceData(
                        index=0, records=build_batch([SimpleRecord(value)])
                    )
                ],
            )
        ],
    )


def records_of(response: FetchResponse) -> list[bytes | None]:
    data = response.responses[0].partitions[0].records
    return [r.value for b in iter_batches(bytes(data or b"")) for r in b.records()]


def test_append_in_the_same_pass_wakes_the_fetch(node: NodeProcess, topic_name: str) -> None:
    conn = RawConnection(node.bootstrap, timeout_s=10)
    topic = CreateTopicsRequest.CreatableTopic(
        name=TopicName(topic_name), num_partitions=1, replication_factor=1
    )
    created = conn.request(CreateTopicsRequest(topics=[topic], timeout_ms=5000), 7)
    assert created.topics[0].error_code == ErrorCode.NONE
    for i in range(3):
        # A produce, then a fetch at the log end, in one write: the fetch is parked in the
        # same loop pass that queued the append, before the append is written.
        frames = conn.frame(produce(topic_name, b"v%d" % i), 9, 200 + i) + conn.frame(
            fetch(topic_name, i), 12, 100 + i
        )
        started = time.monotonic()
        conn.send_raw(frames)
        assert conn.recv(0, 9)[0] == 200 + i
        correlation, response = conn.recv(1, 12)
        elapsed = time.monotonic() - started
        assert correlation == 100 + i
        assert records_of(response) == [b"v%d" % i]
        assert elapsed < MAX_WAIT_MS / 1000 / 2, f"fetch woke after {elapsed:.3f}s"
    conn.close()


def test_long_poll_times_out_empty(node: NodeProcess, topic_name: str) -> None:
    conn = RawConnection(node.bootstrap, timeout_s=10)
    topic = CreateTopicsRequest.CreatableTopic(
        name=TopicName(topic_name), num_partitions=1, replication_factor=1
    )
    conn.request(CreateTopicsRequest(topics=[topic], timeout_ms=5000), 7)
    request = fetch(topic_name, 0)
    request.max_wait_ms = 300
    started = time.monotonic()
    response = conn.request(request, 12)
    elapsed = time.monotonic() - started
    conn.close()
    assert records_of(response) == []
    assert 0.25 <= elapsed < 2.0, elapsed
