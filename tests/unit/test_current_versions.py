"""Kafka 4.x's versions (Fetch 4-17, ListOffsets 1-10, Metadata 0-13, ApiVersions) over a real
broker's handlers (memory storage), every request and response through
the codec at its version: topic ids from v13 (UNKNOWN_TOPIC_ID), the replica id in
``replica_state`` from v15, and KIP-392 follower fetching: v11+ consumers read a follower up to
its high watermark, older ones get NOT_LEADER_OR_FOLLOWER, and a leader with
``replica.selector.class`` sends a consumer of another rack to that rack's in-sync follower."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from broker.broker import Broker, BrokerConfig
from broker.dispatcher import RequestContext
from broker.replica_selector import RACK_AWARE_SELECTOR
from broker.security.session import Session
from broker.storage import MemoryStorage
from kafka_protocol.errors import ErrorCode
from kafka_protocol.framing import decode_request, decode_response, encode_request, encode_response
from kafka_protocol.messages import (
    ApiVersionsRequest,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
    RequestHeader,
)
from kafka_protocol.metadata import PartitionRecord, RegisterBrokerRecord, TopicRecord
from kafka_protocol.record_batch import (
    RecordBatch,
    SimpleRecord,
    build_batch,
    iter_batches,
    set_base_offset,
)
from kafka_protocol.types import BrokerId, TopicName
from metadata_log.delta import MetadataDelta
from metadata_log.image import ClusterImage
from metadata_log.records import MetadataRecord

ME = 2
RACKS = {1: "rack-b", 2: "rack-a", 3: "rack-c"}
LED = uuid.UUID(int=0xA)  # this broker leads "led" (replicas 2, 3, 1)
FOLLOWED = uuid.UUID(int=0xB)  # broker 1 leads "followed" (replicas 1, 2, 3)
RECORDS = 5


class _NoController:
    pass


def _broker(selector: str | None) -> Broker:
    config = BrokerConfig(
        ME, "127.0.0.1", 0, "127.0.0.1", 0, Path("/data"), rack=RACKS[ME], replica_selector=selector
    )
    broker = Broker(config, MemoryStorage(), _NoController(), ClusterImage.EMPTY, "c")  # type: ignore[arg-type]
    records: list[MetadataRecord] = [
        RegisterBrokerRecord(
            broker_id=BrokerId(b),
            rack=rack,
            fenced=False,
            broker_epoch=10 + b,
            end_points=[
                RegisterBrokerRecord.BrokerEndpoint(
                    name="PLAINTEXT", host=f"b{b}.example", port=9092, security_protocol=0
                )
            ],
        )
        for b, rack in RACKS.items()
    ]
    for name, topic_id, replicas in (("led", LED, [2, 3, 1]), ("followed", FOLLOWED, [1, 2, 3])):
        ids = [BrokerId(r) for r in replicas]
        records.append(TopicRecord(name=TopicName(name), topic_id=topic_id))
        records.append(
            PartitionRecord(
                partition_id=0,
                topic_id=topic_id,
                replicas=ids,
                isr=ids,
                leader=ids[0],
                leader_epoch=0,
                partition_epoch=0,
            )
        )
    delta = MetadataDelta(broker.image).replay_all(records)
    broker.on_metadata(delta, delta.apply())
    return broker


def _wire_request(req: FetchRequest, version: int) -> tuple[RequestContext, FetchRequest]:
    header = RequestHeader(request_api_key=1, request_api_version=version, correlation_id=1)
    frame = b"".join(bytes(c) for c in encode_request(header, req))[4:]
    header, decoded = decode_request(frame)
    assert isinstance(decoded, FetchRequest)
    return RequestContext(header, Session.internal(), 0.0, 0.0), decoded


def _wire_response(resp: Any, version: int) -> FetchResponse:
    frame = b"".join(bytes(c) for c in encode_response(version, 1, resp))[4:]
    decoded = decode_response(1, version, frame)[1]
    assert isinstance(decoded, FetchResponse)
    return decoded


def _request(
    version: int,
    topic: str,
    topic_id: uuid.UUID,
    offset: int = 0,
    *,
    replica_id: int = -1,
    rack: str = "",
    epoch: int = -1,
) -> FetchRequest:
    partition = FetchRequest.FetchPartition(
        partition=0, fetch_offset=offset, partition_max_bytes=1 << 20, current_leader_epoch=epoch
    )
    # the codec refuses a field its version does not carry: set only what the wire holds
    by_id = version >= 13
    req = FetchRequest(
        max_wait_ms=0,
        max_bytes=1 << 20,
        rack_id=rack if version >= 11 else "",
        topics=[
            FetchRequest.FetchTopic(
                topic=TopicName("" if by_id else topic),
                topic_id=topic_id if by_id else uuid.UUID(int=0),
                partitions=[partition],
            )
        ],
    )
    if version >= 15:
        req.replica_state = FetchRequest.ReplicaState(replica_id=BrokerId(replica_id))
    else:
        req.replica_id = BrokerId(replica_id)
    return req


def _fetch(
    broker: Broker,
    version: int,
    topic: str,
    topic_id: uuid.UUID,
    offset: int = 0,
    *,
    replica_id: int = -1,
    rack: str = "",
    epoch: int = -1,
) -> FetchResponse.PartitionData:
    req = _request(version, topic, topic_id, offset, replica_id=replica_id, rack=rack, epoch=epoch)
    ctx, decoded = _wire_request(req, version)
    resp = broker.dispatcher.handlers[1].handle(ctx, decoded)
    assert isinstance(resp, FetchResponse), "max_wait_ms=0 answers at once"
    answer = _wire_response(resp, version)
    (topic_answer,) = answer.responses
    if version >= 13:
        assert topic_answer.topic_id == topic_id
    else:
        assert topic_answer.topic == topic
    (data,) = topic_answer.partitions
    return data


def _batch() -> bytes:
    return build_batch([SimpleRecord(os.urandom(20)) for _ in range(RECORDS)])


def _count(records: object) -> int:
    if not records:
        return 0
    assert isinstance(records, bytes | memoryview)
    return sum(len(b.records()) for b in iter_batches(records))


def _with_data(selector: str | None = RACK_AWARE_SELECTOR) -> Broker:
    """``led`` holds RECORDS records that both followers have (high watermark RECORDS);
    ``followed`` holds 2 x RECORDS records replicated here, of which the leader said RECORDS
    are committed."""
    broker = _broker(selector)

    async def main() -> None:
        led = broker.replicas.get("led", 0)
        assert led is not None
        broker.replicas.append_nowait(led, RecordBatch(memoryview(_batch())))
        for _ in range(4):
            await asyncio.sleep(0)
        assert led.log_end_offset == RECORDS
        for follower in (3, 1):  # both followers fetch to the end (v15: id in replica_state)
            data = _fetch(broker, 15, "led", LED, RECORDS, replica_id=follower)
            assert data.error_code == ErrorCode.NONE
        assert led.high_watermark == RECORDS
        followed = broker.replicas.get("followed", 0)
        assert followed is not None and not followed.is_leader
        two = _batch() + bytearray(_patched_base(_batch(), RECORDS))
        broker.replicas.append_as_follower(followed, memoryview(bytes(two)), RECORDS)
        assert (followed.log_end_offset, followed.high_watermark) == (2 * RECORDS, RECORDS)

    asyncio.run(main())
    return broker


def _patched_base(batch: bytes, base_offset: int) -> bytes:
    out = bytearray(batch)
    set_base_offset(out, base_offset)
    return bytes(out)


@pytest.mark.parametrize("version", [12, 13, 16, 17])
def test_a_consumer_reads_the_leader_by_name_or_topic_id(version: int) -> None:
    broker = _with_data(selector=None)
    data = _fetch(broker, version, "led", LED)
    assert data.error_code == ErrorCode.NONE
    assert (data.high_watermark, data.preferred_read_replica) == (RECORDS, -1)
    assert _count(data.records) == RECORDS


@pytest.mark.parametrize("version", [13, 17])
def test_an_unknown_topic_id_is_answered_unknown_topic_id(version: int) -> None:
    broker = _with_data()
    stranger = uuid.UUID(int=0xDEAD)
    data = _fetch(broker, version, "", stranger)
    assert data.error_code == ErrorCode.UNKNOWN_TOPIC_ID
    assert data.high_watermark == -1 and not data.records


@pytest.mark.parametrize("version", [12, 15, 16, 17])
def test_from_v16_not_leader_names_the_leader_and_its_address(version: int) -> None:
    """KIP-951: a replica fetching "followed" from here (its leader is broker 1)."""
    broker = _with_data()
    ctx, req = _wire_request(_request(version, "followed", FOLLOWED, 0, replica_id=3), version)
    resp = broker.dispatcher.handlers[1].handle(ctx, req)
    answer = _wire_response(resp, version)
    (data,) = answer.responses[0].partitions
    assert data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    leader = (data.current_leader.leader_id, data.current_leader.leader_epoch)
    endpoints = [(e.node_id, e.host, e.port, e.rack) for e in answer.node_endpoints]
    if version >= 16:
        assert leader == (1, 0)
        assert endpoints == [(1, "b1.example", 9092, "rack-b")]
    else:
        assert leader == (-1, -1) and endpoints == []


@pytest.mark.parametrize("version", [12, 15, 17])
def test_a_follower_is_known_by_replica_id_or_from_v15_by_replica_state(version: int) -> None:
    """Past the high watermark only a follower reads (to the log end), and its fetch moves
    the high watermark: the replica id must be read from where the version carries it."""
    broker = _with_data()
    led = broker.replicas.get("led", 0)
    assert led is not None

    async def append_more() -> None:
        broker.replicas.append_nowait(led, RecordBatch(memoryview(_batch())))
        for _ in range(4):
            await asyncio.sleep(0)

    asyncio.run(append_more())
    assert (led.high_watermark, led.log_end_offset) == (RECORDS, 2 * RECORDS)
    consumer = _fetch(broker, version, "led", LED, RECORDS)
    assert consumer.error_code == ErrorCode.NONE and not consumer.records
    follower = _fetch(broker, version, "led", LED, RECORDS, replica_id=3)
    assert follower.error_code == ErrorCode.NONE and _count(follower.records) == RECORDS
    _fetch(broker, version, "led", LED, 2 * RECORDS, replica_id=3)
    _fetch(broker, version, "led", LED, 2 * RECORDS, replica_id=1)
    assert led.high_watermark == 2 * RECORDS


@pytest.mark.parametrize("version", [4, 10])
def test_before_v11_only_the_leader_serves_consumers(version: int) -> None:
    broker = _with_data()
    data = _fetch(broker, version, "followed", FOLLOWED)
    assert data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize("version", [11, 12, 17])
def test_a_follower_serves_v11_consumers_up_to_its_high_watermark(version: int) -> None:
    broker = _with_data()
    data = _fetch(broker, version, "followed", FOLLOWED, rack="rack-a")
    assert data.error_code == ErrorCode.NONE
    assert data.preferred_read_replica == -1, "only the leader redirects"
    assert data.high_watermark == RECORDS
    assert _count(data.records) == RECORDS, "nothing past the follower's high watermark"
    # between the high watermark and the log end: nothing yet, no error
    assert _fetch(broker, version, "followed", FOLLOWED, RECORDS).records in (b"", None)
    beyond = _fetch(broker, version, "followed", FOLLOWED, 2 * RECORDS + 1)
    assert beyond.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    # KIP-320 on the follower: its leader epoch is 0
    assert _fetch(broker, version, "followed", FOLLOWED, epoch=1).error_code == (
        ErrorCode.UNKNOWN_LEADER_EPOCH
    )
    counted = broker.metrics.consumer_fetch_counter("follower")._value.get()
    assert counted >= 2


@pytest.mark.parametrize(
    ("rack", "preferred"),
    [("rack-c", 3), ("rack-b", 1), ("rack-a", -1), ("", -1), ("rack-z", -1)],
)
def test_the_leader_sends_a_consumer_to_the_follower_of_its_rack(rack: str, preferred: int) -> None:
    broker = _with_data()
    data = _fetch(broker, 11, "led", LED, rack=rack)
    assert data.error_code == ErrorCode.NONE
    assert data.preferred_read_replica == preferred
    assert data.high_watermark == RECORDS
    if preferred >= 0:
        assert not data.records, "a redirected partition carries no records"
    else:
        assert _count(data.records) == RECORDS


def test_without_a_selector_the_leader_serves_every_rack() -> None:
    broker = _with_data(selector=None)
    data = _fetch(broker, 17, "led", LED, rack="rack-c")
    assert data.preferred_read_replica == -1 and _count(data.records) == RECORDS


def test_a_follower_behind_the_fetch_offset_or_out_of_the_isr_is_not_chosen() -> None:
    broker = _with_data()
    led = broker.replicas.get("led", 0)
    assert led is not None

    async def append_more() -> None:
        broker.replicas.append_nowait(led, RecordBatch(memoryview(_batch())))
        for _ in range(4):
            await asyncio.sleep(0)

    asyncio.run(append_more())
    # broker 1 (rack-b) catches up, broker 3 (rack-c) does not: at offset 2 x RECORDS only 1
    _fetch(broker, 17, "led", LED, 2 * RECORDS, replica_id=1)
    assert _fetch(broker, 11, "led", LED, 2 * RECORDS, rack="rack-c").preferred_read_replica == -1
    assert _fetch(broker, 11, "led", LED, RECORDS, rack="rack-c").preferred_read_replica == 3
    assert _fetch(broker, 11, "led", LED, 2 * RECORDS, rack="rack-b").preferred_read_replica == 1


# --- ListOffsets, Metadata, ApiVersions --------------------------------------------------------


def _ask(broker: Broker, api_key: int, req: Any, version: int) -> Any:
    """One request through the codec, the broker's handler and the codec again."""
    header = RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=1)
    frame = b"".join(bytes(c) for c in encode_request(header, req))[4:]
    header, decoded = decode_request(frame)
    ctx = RequestContext(header, Session.internal(), 0.0, 0.0)
    resp = broker.dispatcher.handlers[api_key].handle(ctx, decoded)
    out = b"".join(bytes(c) for c in encode_response(version, 1, resp))[4:]
    return decode_response(api_key, version, out)[1]


@pytest.mark.parametrize(
    ("version", "timestamp", "expected"),
    [
        (7, -2, (0, -1, 0)),  # earliest
        (7, -1, (RECORDS, -1, 0)),  # latest: the high watermark
        (8, -4, (0, -1, 0)),  # earliest local: the whole log is local
        (10, -4, (0, -1, 0)),
        (9, -5, (-1, -1, -1)),  # latest tiered: no tiered storage
        (10, -5, (-1, -1, -1)),
        (10, -6, None),  # no such special timestamp
    ],
)
def test_list_offsets_special_timestamps(
    version: int, timestamp: int, expected: tuple[int, int, int] | None
) -> None:
    broker = _with_data()
    Topic, Partition = ListOffsetsRequest.ListOffsetsTopic, ListOffsetsRequest.ListOffsetsPartition
    req = ListOffsetsRequest(
        replica_id=BrokerId(-1),
        topics=[Topic(name=TopicName("led"), partitions=[Partition(timestamp=timestamp)])],
    )
    (topic,) = _ask(broker, 2, req, version).topics
    (p,) = topic.partitions
    if expected is None:
        assert p.error_code == ErrorCode.INVALID_REQUEST
    else:
        assert p.error_code == ErrorCode.NONE
        assert (p.offset, p.timestamp, p.leader_epoch) == expected


@pytest.mark.parametrize("version", [12, 13])
def test_metadata_by_topic_id_answers_unknown_ids_with_unknown_topic_id(version: int) -> None:
    broker = _with_data()
    stranger = uuid.UUID(int=0xDEAD)
    req = MetadataRequest(
        topics=[
            MetadataRequest.MetadataRequestTopic(name=None, topic_id=LED),
            MetadataRequest.MetadataRequestTopic(name=None, topic_id=stranger),
        ],
        allow_auto_topic_creation=False,
    )
    answer = _ask(broker, 3, req, version)
    by_id = {t.topic_id: t for t in answer.topics}
    assert by_id[LED].name == "led" and by_id[LED].error_code == ErrorCode.NONE
    assert by_id[stranger].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    assert by_id[stranger].name is None
    assert answer.error_code == ErrorCode.NONE


#: Kafka 4.0's ranges of the APIs this issue raised (kafka-python's table of Kafka 4.0 agrees).
KAFKA_4_0 = {0: 11, 1: 17, 2: 10, 3: 13, 8: 9, 9: 9, 10: 6}


def test_api_versions_advertises_kafka_4_versions_and_kafka_python_infers_4_0() -> None:
    from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

    broker = _broker(None)
    answer = _ask(broker, 18, ApiVersionsRequest(), 3)
    table = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    for key, newest in KAFKA_4_0.items():
        assert table[key][1] == newest, key
    # older versions stay: Produce 0 (librdkafka's compression check), Fetch 4, ListOffsets 1
    assert (table[0][0], table[1][0], table[2][0], table[3][0]) == (0, 4, 1, 0)
    assert infer_broker_version_from_api_versions(table) == (4, 0)


@pytest.mark.parametrize("version", [9, 10, 11])
def test_from_produce_v10_not_leader_names_the_leader_and_its_address(version: int) -> None:
    broker = _with_data()
    req = ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TopicName("followed"),
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=memoryview(_batch()))
                ],
            )
        ],
    )

    async def main() -> Any:
        return _ask(broker, 0, req, version)

    answer = asyncio.run(main())
    (p,) = answer.responses[0].partition_responses
    assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    leader = (p.current_leader.leader_id, p.current_leader.leader_epoch)
    endpoints = [(e.node_id, e.host, e.port, e.rack) for e in answer.node_endpoints]
    if version >= 10:
        assert leader == (1, 0) and endpoints == [(1, "b1.example", 9092, "rack-b")]
    else:
        assert leader == (-1, -1) and endpoints == []


@pytest.mark.parametrize("version", [4, 5, 6])
def test_find_coordinator_refuses_share_group_keys(version: int) -> None:
    """v6 adds share-group keys (KIP-932); without a share coordinator Kafka answers
    INVALID_REQUEST for them, as for any key type before v6."""
    broker = _broker(None)
    req = FindCoordinatorRequest(key_type=2, coordinator_keys=["g:topic:0", "h:topic:1"])
    answer = _ask(broker, 10, req, version)
    assert [(c.key, c.error_code) for c in answer.coordinators] == [
        ("g:topic:0", ErrorCode.INVALID_REQUEST),
        ("h:topic:1", ErrorCode.INVALID_REQUEST),
    ]


def test_replica_selector_class_is_checked_at_startup(tmp_path: Path) -> None:
    """The one selector there is is accepted; anything else stops the broker from starting."""
    from kraft.node.config import ConfigError, load_config
    from kraft.node.dev_cluster_files import ClusterIdentity, node_properties, render_properties
    from kraft.node.dev_cluster_plan import plan_cluster
    from kraft.node.run import broker_config

    plan = plan_cluster(1, 1, 9092, 8080)
    identity = ClusterIdentity("MkU3OEVBNTcwNTJENDM2Qk", "s3cret", 3)
    path = tmp_path / "broker.properties"
    props = node_properties(plan.brokers[0], plan, identity, tmp_path, {})
    path.write_text(render_properties(props, "test"))
    chosen = broker_config(load_config(path, {"replica.selector.class": RACK_AWARE_SELECTOR}, {}))
    assert (chosen.replica_selector, chosen.rack) == (RACK_AWARE_SELECTOR, "rack-1")
    assert broker_config(load_config(path, {}, {})).replica_selector is None
    bad = {"replica.selector.class": "com.example.MySelector"}
    with pytest.raises(ConfigError, match=r"replica\.selector\.class"):
        broker_config(load_config(path, bad, {}))
