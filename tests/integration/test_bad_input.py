"""Hostile and broken clients: the broker answers with a Kafka error or closes that one
connection, keeps serving everyone else, and appends nothing of what it refused."""

from __future__ import annotations

import os
import random
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from crc32c import crc32c

from integration.node_process import NodeProcess
from integration.raw_client import RawConnection
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateTopicsRequest,
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
)
from kafka_protocol.record_batch import SimpleRecord, build_batch
from kafka_protocol.types import BrokerId, TopicName

pytestmark = pytest.mark.integration

MAX_FRAME = 1 << 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(
        Path(tmp_path_factory.mktemp("bad-input")),
        overrides=(f"socket.request.max.bytes={MAX_FRAME}",),
    ).start()
    yield proc
    assert proc.stop() == 0, proc.log_tail()


def create_topic(broker: NodeProcess, name: str, configs: dict[str, str] | None = None) -> None:
    conn = RawConnection(broker.bootstrap)
    topic = CreateTopicsRequest.CreatableTopic(
        name=TopicName(name),
        num_partitions=1,
        replication_factor=1,
        configs=[
            CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
            for k, v in (configs or {}).items()
        ],
    )
    response = conn.request(CreateTopicsRequest(topics=[topic], timeout_ms=5000), 7)
    conn.close()
    assert response.topics[0].error_code == ErrorCode.NONE, response


def high_watermark(broker: NodeProcess, topic: str) -> int:
    conn = RawConnection(broker.bootstrap)
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=TopicName(topic),
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)
                ],
            )
        ],
    )
    response = conn.request(request, 7)
    conn.close()
    return int(response.topics[0].partitions[0].offset)


def produce(topic: str, records: bytes, acks: int = -1) -> ProduceRequest:
    return ProduceRequest(
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TopicName(topic),
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)],
            )
        ],
    )


def produce_error(broker: NodeProcess, request: ProduceRequest, version: int = 9) -> int:
    conn = RawConnection(broker.bootstrap)
    response = conn.request(request, version)
    conn.close()
    return int(response.responses[0].partition_responses[0].error_code)


def assert_still_serving(broker: NodeProcess) -> None:
    conn = RawConnection(broker.bootstrap)
    response = conn.request(MetadataRequest(topics=None), 12)
    conn.close()
    assert response.brokers, "the broker stopped answering Metadata"
    assert broker.alive()


def assert_closed(conn: RawConnection) -> None:
    assert conn.is_closed_by_peer(), "the broker kept a connection that sent garbage"
    conn.close()


@pytest.mark.parametrize("seed", range(5))
def test_random_bytes_close_only_that_connection(broker: NodeProcess, seed: int) -> None:
    rng = random.Random(seed)
    bystander = RawConnection(broker.bootstrap)
    conn = RawConnection(broker.bootstrap)
    body = rng.randbytes(rng.randrange(8, 400))
    conn.send_raw(struct.pack(">i", len(body)) + body)
    assert_closed(conn)
    assert bystander.request(MetadataRequest(topics=None), 12).brokers
    bystander.close()
    assert_still_serving(broker)


def test_truncated_frame_then_hang_up(broker: NodeProcess) -> None:
    conn = RawConnection(broker.bootstrap)
    frame = conn.frame(MetadataRequest(topics=None), 12)
    conn.send_raw(frame[: len(frame) // 2])
    conn.close()
    assert_still_serving(broker)


def test_frame_over_the_limit_is_refused_unread(broker: NodeProcess) -> None:
    conn = RawConnection(broker.bootstrap)
    conn.send_raw(struct.pack(">i", MAX_FRAME + 1) + b"\x00" * 64)
    assert_closed(conn)
    assert_still_serving(broker)


def test_negative_frame_size(broker: NodeProcess) -> None:
    conn = RawConnection(broker.bootstrap)
    conn.send_raw(struct.pack(">i", -5))
    assert_closed(conn)


def test_unknown_api_key_and_version_close_the_connection(broker: NodeProcess) -> None:
    conn = RawConnection(broker.bootstrap)
    frame = bytearray(conn.frame(MetadataRequest(topics=None), 12))
    frame[4:6] = struct.pack(">h", 999)  # api key
    conn.send_raw(bytes(frame))
    assert_closed(conn)
    conn = RawConnection(broker.bootstrap)
    frame = bytearray(conn.frame(ListOffsetsRequest(replica_id=BrokerId(-1)), 10))
    frame[6:8] = struct.pack(">h", 11)  # ListOffsets v11 (Kafka 4.2): decodable, not advertised
    conn.send_raw(bytes(frame))
    assert_closed(conn)
    assert_still_serving(broker)


def test_api_versions_fallback(broker: NodeProcess) -> None:
    conn = RawConnection(broker.bootstrap)
    frame = bytearray(conn.frame(ApiVersionsRequest(), 3, correlation_id=41))
    frame[6:8] = struct.pack(">h", 77)
    conn.send_raw(bytes(frame))
    correlation, response = conn.recv(18, 0)
    conn.close()
    assert correlation == 41
    assert isinstance(response, ApiVersionsResponse)
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[18] == (0, 4) and ranges[0][0] == 0


def test_corrupt_crc_is_refused_and_not_appended(broker: NodeProcess) -> None:
    create_topic(broker, "crc")
    batch = bytearray(build_batch([SimpleRecord(b"payload")]))
    batch[-1] ^= 0xFF
    assert produce_error(broker, produce("crc", bytes(batch))) == ErrorCode.CORRUPT_MESSAGE
    assert high_watermark(broker, "crc") == 0


def test_oversized_batch_is_refused_and_not_appended(broker: NodeProcess) -> None:
    create_topic(broker, "big", {"max.message.bytes": "10000"})
    batch = build_batch([SimpleRecord(os.urandom(20_000))])
    assert produce_error(broker, produce("big", batch)) == ErrorCode.MESSAGE_TOO_LARGE
    ok = build_batch([SimpleRecord(os.urandom(9_000))])
    assert produce_error(broker, produce("big", ok)) == ErrorCode.NONE
    assert high_watermark(broker, "big") == 1


def test_old_message_formats_and_produce_versions_are_refused(broker: NodeProcess) -> None:
    create_topic(broker, "old")
    batch = bytearray(build_batch([SimpleRecord(b"v")]))
    batch[16] = 1  # magic 1
    error = produce_error(broker, produce("old", bytes(batch)))
    assert error == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    modern = build_batch([SimpleRecord(b"v")])
    assert produce_error(broker, produce("old", modern), version=2) == ErrorCode.UNSUPPORTED_VERSION
    assert high_watermark(broker, "old") == 0


def test_unknown_topic_and_partition(broker: NodeProcess) -> None:
    batch = build_batch([SimpleRecord(b"v")])
    error = produce_error(broker, produce("no-such-topic", batch))
    assert error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_pipelined_requests_are_answered_in_order(broker: NodeProcess) -> None:
    create_topic(broker, "pipe")
    conn = RawConnection(broker.bootstrap)
    frames = b""
    for i in range(20):
        request = produce("pipe", build_batch([SimpleRecord(b"%d" % i)])) if i % 2 else None
        body = request if request is not None else MetadataRequest(topics=None)
        frames += conn.frame(body, 9 if i % 2 else 12, correlation_id=1000 + i)
    conn.send_raw(frames)
    for i in range(20):
        correlation, _ = conn.recv(0 if i % 2 else 3, 9 if i % 2 else 12)
        assert correlation == 1000 + i
    conn.close()
    assert high_watermark(broker, "pipe") == 10


def test_acks_zero_gets_no_response_but_is_appended(broker: NodeProcess) -> None:
    create_topic(broker, "acks0")
    conn = RawConnection(broker.bootstrap)
    conn.send_raw(conn.frame(produce("acks0", build_batch([SimpleRecord(b"x")]), acks=0), 9, 500))
    conn.send_raw(conn.frame(MetadataRequest(topics=None), 12, 501))
    correlation, _ = conn.recv(3, 12)
    conn.close()
    assert correlation == 501, "acks=0 must not be answered"
    assert high_watermark(broker, "acks0") == 1


def _open_fds(broker: NodeProcess) -> int:
    assert broker.proc is not None
    return len(os.listdir(f"/proc/{broker.proc.pid}/fd"))


def _fetch_frame(conn: RawConnection, topic: str, max_bytes: int = 1 << 20) -> bytes:
    request = FetchRequest(
        max_wait_ms=0,
        max_bytes=max_bytes,
        topics=[
            FetchRequest.FetchTopic(
                topic=TopicName(topic),
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )
    return conn.frame(request, 12)


def test_clients_that_vanish_mid_fetch_leak_no_file_descriptors(broker: NodeProcess) -> None:
    create_topic(broker, "fds")
    assert produce_error(broker, produce("fds", build_batch([SimpleRecord(b"x" * 100)]))) == 0
    before = _open_fds(broker)
    for _ in range(10):
        conn = RawConnection(broker.bootstrap)
        conn.send_raw(b"".join(_fetch_frame(conn, "fds") for _ in range(20)))
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # reset, with 20 sendfile responses owed
    time.sleep(0.5)
    assert_still_serving(broker)
    assert _open_fds(broker) <= before + 2, "segment file descriptors leaked"


def test_a_request_the_log_cannot_answer_does_not_jam_the_connection(
    broker: NodeProcess,
) -> None:
    """A batch with a valid CRC but records that do not parse is refused (the record walk:
    tests/integration/test_record_validation.py has every kind), so nothing is there for
    ListOffsets(max timestamp) to trip over: it answers, and so does the next pipelined
    request."""
    create_topic(broker, "garbage")
    batch = bytearray(build_batch([SimpleRecord(b"v" * 50)]))
    batch[61:] = b"\xff" * (len(batch) - 61)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    assert produce_error(broker, produce("garbage", bytes(batch))) == ErrorCode.INVALID_RECORD
    assert high_watermark(broker, "garbage") == 0
    conn = RawConnection(broker.bootstrap)
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=TopicName("garbage"),
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-3)
                ],
            )
        ],
    )
    conn.send_raw(conn.frame(request, 7, 1) + conn.frame(ApiVersionsRequest(), 3, 2))
    correlation, answer = conn.recv(2, 7)
    assert correlation == 1 and answer.topics[0].partitions[0].error_code == ErrorCode.NONE
    assert conn.recv(18, 3)[0] == 2
    # A negative fetch budget is clamped, not an assertion failure.
    conn.send_raw(
        _fetch_frame(conn, "garbage", max_bytes=-1) + conn.frame(ApiVersionsRequest(), 3, 9)
    )
    conn.recv(1, 12)
    assert conn.recv(18, 3)[0] == 9
    conn.close()


def test_invalid_acks_are_refused(broker: NodeProcess) -> None:
    create_topic(broker, "acks2")
    error = produce_error(broker, produce("acks2", build_batch([SimpleRecord(b"v")]), acks=2))
    assert error == ErrorCode.INVALID_REQUIRED_ACKS
    assert high_watermark(broker, "acks2") == 0
