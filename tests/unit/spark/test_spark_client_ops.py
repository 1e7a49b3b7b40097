"""KafkaClient's operations against a scripted one-broker cluster on a real socket: metadata,
ListOffsets, reads (retries, data loss, pipelining), group offsets, pickling and fork."""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Iterator

import pytest
from fake_kafka_broker import CLOSE, running
from fake_kafka_cluster import FakeCluster

from kafka_protocol.compression import Compression
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import FetchRequest, ListOffsetsRequest
from kafka_protocol.record_batch import SimpleRecord, build_batch, iter_batches
from spark_source.client import (
    EARLIEST,
    LATEST,
    NO_OFFSET,
    BrokerError,
    DataLossError,
    KafkaClient,
    KafkaClientError,
    TopicNotFound,
    TopicPartition,
)

TP = TopicPartition("events", 0)
FAST = {"retry.backoff.ms": "5", "retry.backoff.max.ms": "20", "fetch.max.wait.ms": "10"}


def fill(cluster: FakeCluster, batches: int, per_batch: int, tp: TopicPartition = TP) -> None:
    """Batches of ``per_batch`` records, values ``v<offset>``, timestamps 1000 + offset."""
    log = cluster.log(*tp)
    for _ in range(batches):
        base = log.log_end_offset
        records = [
            SimpleRecord(f"v{base + i}".encode(), timestamp=1000 + base + i)
            for i in range(per_batch)
        ]
        log.append(build_batch(records, compression=Compression.LZ4))


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster(
        {"events": 2, "other": 1, "__consumer_offsets": 3}, internal=("__consumer_offsets",)
    )
    with running(fake.broker):
        yield fake


@pytest.fixture
def client(cluster: FakeCluster) -> Iterator[KafkaClient]:
    with KafkaClient(cluster.broker.bootstrap, FAST) as c:
        yield c


def values(chunks: Iterator[memoryview], start: int, end: int) -> list[bytes | None]:
    return [
        r.value
        for chunk in chunks
        for b in iter_batches(chunk)
        for r in b.records()
        if start <= r.offset < end
    ]


# --- metadata and offsets -------------------------------------------------------------------------


def test_topics_and_partition_counts(client: KafkaClient) -> None:
    assert client.topic_names() == ["events", "other"]  # not the internal one
    assert client.partition_counts(["events", "nope", "other", "events"]) == {
        "events": 2,
        "other": 1,
    }
    assert client.partition_counts([]) == {}


def test_list_offsets_earliest_latest_and_by_timestamp(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    fill(cluster, 3, 4)
    cluster.log("events", 0).log_start_offset = 0
    tp1 = TopicPartition("events", 1)
    got = client.list_offsets({TP: EARLIEST, tp1: LATEST})
    assert got == {TP: 0, tp1: 0}
    assert client.list_offsets({TP: LATEST}) == {TP: 12}
    assert client.list_offsets({TP: 1005}) == {TP: 5}
    assert client.list_offsets({TP: 99_999}) == {TP: NO_OFFSET}
    request = cluster.broker.requests_of(2)[-1]
    assert isinstance(request, ListOffsetsRequest)
    assert request.topics[0].partitions[0].current_leader_epoch == cluster.leader_epoch


def test_list_offsets_retries_a_stale_leader_after_refreshing_metadata(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    client.topic_names()
    cluster.script(2, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, CLOSE)
    before = len(cluster.broker.requests_of(3))
    assert client.list_offsets({TP: LATEST}) == {TP: 0}
    assert len(cluster.broker.requests_of(2)) == 4
    assert len(cluster.broker.requests_of(3)) - before == 3  # a refresh after each failure


def test_final_errors_and_unknown_topics_raise(cluster: FakeCluster, client: KafkaClient) -> None:
    cluster.script(2, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(
        BrokerError, match="ListOffsets for events-0: TOPIC_AUTHORIZATION_FAILED"
    ) as e:
        client.list_offsets({TP: LATEST})
    assert e.value.error is ErrorCode.TOPIC_AUTHORIZATION_FAILED and e.value.tp == TP
    with pytest.raises(TopicNotFound, match="'nope' does not exist"):
        client.list_offsets({TopicPartition("nope", 0): LATEST})
    with pytest.raises(TopicNotFound, match="partition 5 of topic 'events'"):
        client.list_offsets({TopicPartition("events", 5): LATEST})


# --- reading --------------------------------------------------------------------------------------


def test_read_returns_the_batches_covering_the_range(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    fill(cluster, 10, 10)
    chunks = list(client.read(TP, 15, 42))
    bases = [b.base_offset for c in chunks for b in iter_batches(c)]
    assert bases == [10, 20, 30, 40]  # whole batches, the first and last only partly wanted
    assert values(iter(chunks), 15, 42) == [f"v{i}".encode() for i in range(15, 42)]
    fetches = [r for r in cluster.broker.requests_of(1) if isinstance(r, FetchRequest)]
    assert fetches[0].topics[0].partitions[0].fetch_offset == 15
    assert all(
        f.topics[0].partitions[0].current_leader_epoch == cluster.leader_epoch for f in fetches
    )
    assert all((f.session_id, f.session_epoch, f.replica_id) == (0, -1, -1) for f in fetches)
    assert list(client.read(TP, 5, 5)) == []


def test_read_pipelines_small_fetches(cluster: FakeCluster) -> None:
    fill(cluster, 20, 5)
    batch_bytes = len(cluster.log("events").batches[0])
    config = {**FAST, "max.partition.fetch.bytes": str(batch_bytes)}  # one batch a fetch
    with KafkaClient(cluster.broker.bootstrap, config) as client:
        reader = client.read(TP, 0, 100)
        first = next(reader)
        assert [b.base_offset for b in iter_batches(first)] == [0]
        deadline = time.monotonic() + 5  # the next fetch went out before the chunk came back
        while len(cluster.broker.requests_of(1)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(cluster.broker.requests_of(1)) == 2
        assert values(reader, 0, 100) == [f"v{i}".encode() for i in range(5, 100)]


def test_read_retries_leader_errors_and_lost_connections(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    fill(cluster, 4, 5)
    cluster.script(1, ErrorCode.FENCED_LEADER_EPOCH, CLOSE, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert values(client.read(TP, 0, 20), 0, 20) == [f"v{i}".encode() for i in range(20)]


def test_read_below_the_log_start_is_data_loss(cluster: FakeCluster, client: KafkaClient) -> None:
    fill(cluster, 4, 5)
    log = cluster.log("events")
    log.batches = log.batches[2:]
    log.log_start_offset = 10
    with pytest.raises(DataLossError, match=r"offset 3 is no longer available.*retention") as e:
        list(client.read(TP, 3, 20))
    assert (e.value.tp, e.value.requested, e.value.available_from) == (TP, 3, 10)
    assert e.value.available_until is None


def test_a_log_that_ends_before_the_range_is_data_loss(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    fill(cluster, 2, 5)
    with pytest.raises(DataLossError, match="log ends before") as e:
        list(client.read(TP, 15, 20))  # the leader's log ends at 10
    assert (e.value.requested, e.value.available_from, e.value.available_until) == (15, 0, 10)
    assert len(cluster.broker.requests_of(1)) == 2, "retried once after a metadata refresh"


def test_a_high_watermark_below_the_end_waits_then_is_data_loss(cluster: FakeCluster) -> None:
    fill(cluster, 2, 5)
    config = {**FAST, "default.api.timeout.ms": "300"}
    with KafkaClient(cluster.broker.bootstrap, config) as client:
        reader = client.read(TP, 0, 12)
        started = time.monotonic()
        with pytest.raises(DataLossError, match="stayed below the end of the range") as e:
            assert values(reader, 0, 12) == []  # never reached
        assert time.monotonic() - started >= 0.25
        assert (e.value.requested, e.value.available_until) == (10, 10)


def test_records_that_arrive_while_waiting_complete_the_read(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    fill(cluster, 2, 5)
    reader = client.read(TP, 0, 12)
    assert values(iter([next(reader)]), 0, 12) == [f"v{i}".encode() for i in range(10)]
    fill(cluster, 1, 5)  # the high watermark passes the end while the cursor polls
    assert values(reader, 0, 12) == [b"v10", b"v11"]


def test_a_first_batch_larger_than_the_fetch_size_is_fetched_whole(cluster: FakeCluster) -> None:
    fill(cluster, 1, 50)
    log = cluster.log("events")
    whole = log.batches[0]
    original = FakeCluster._read

    def truncating(log_: object, offset: int, max_bytes: int) -> bytes:  # an old broker's way
        return original(log_, offset, max_bytes)[:max_bytes]  # type: ignore[arg-type]

    cluster.__dict__["_read"] = truncating  # instance attribute shadows the staticmethod
    cluster.broker.handlers[1] = cluster._fetch
    with KafkaClient(cluster.broker.bootstrap, {**FAST, "max.partition.fetch.bytes": "100"}) as c:
        (chunk,) = list(c.read(TP, 0, 50))
    assert bytes(chunk) == whole
    sizes = [r.topics[0].partitions[0].partition_max_bytes for r in cluster.broker.requests_of(1)]
    assert sizes[0] == 100 and sizes[-1] >= len(whole)


def test_a_deleted_topic_is_data_loss(cluster: FakeCluster, client: KafkaClient) -> None:
    fill(cluster, 1, 5)
    del cluster.topics["events"]
    with pytest.raises(DataLossError, match="'events' does not exist"):
        list(client.read(TP, 0, 5))


def test_a_read_abandoned_midway_leaves_the_client_usable(cluster: FakeCluster) -> None:
    fill(cluster, 10, 5)
    batch_bytes = len(cluster.log("events").batches[0])
    config = {**FAST, "max.partition.fetch.bytes": str(batch_bytes)}
    with KafkaClient(cluster.broker.bootstrap, config) as c:
        reader = c.read(TP, 0, 50)
        next(reader)
        reader.close()  # a fetch was in flight: the connection is closed, not read from
        assert c.list_offsets({TP: LATEST}) == {TP: 50}
        assert cluster.broker.connections == 2
        assert values(c.read(TP, 45, 50), 45, 50) == [f"v{i}".encode() for i in range(45, 50)]


def test_a_read_abandoned_behind_another_leaves_the_connection_open(cluster: FakeCluster) -> None:
    """Spark may drop a reader unfinished and collect it during the next task's read."""
    fill(cluster, 10, 5)
    batch_bytes = len(cluster.log("events").batches[0])
    config = {**FAST, "max.partition.fetch.bytes": str(batch_bytes)}
    with KafkaClient(cluster.broker.bootstrap, config) as c:
        first, second = c.read(TP, 0, 50), c.read(TP, 0, 50)
        next(first)
        assert values(iter([next(second)]), 0, 5) == [f"v{i}".encode() for i in range(5)]
        first.close()  # its fetch is in flight ahead of the second's next one
        assert values(second, 5, 50) == [f"v{i}".encode() for i in range(5, 50)]
        assert cluster.broker.connections == 1


def test_final_fetch_errors_raise(cluster: FakeCluster, client: KafkaClient) -> None:
    fill(cluster, 1, 5)
    cluster.script(1, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(BrokerError, match="Fetch for events-0: TOPIC_AUTHORIZATION_FAILED"):
        list(client.read(TP, 0, 5))


# --- group offsets --------------------------------------------------------------------------------


@pytest.mark.parametrize("offset_fetch_max", [7, 8])
def test_commit_and_fetch_offsets_retry_a_moving_coordinator(
    cluster: FakeCluster, client: KafkaClient, offset_fetch_max: int
) -> None:
    cluster.broker.api_versions[9] = (1, offset_fetch_max)
    cluster.broker.api_versions[10] = (0, 3 if offset_fetch_max == 7 else 4)
    cluster.script(10, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    cluster.script(8, ErrorCode.NOT_COORDINATOR)
    tp1 = TopicPartition("events", 1)
    client.commit_offsets("g", {TP: 42, tp1: 7}, "meta-data")
    assert cluster.committed == {
        ("g", "events", 0): (42, "meta-data"),
        ("g", "events", 1): (7, "meta-data"),
    }
    assert len(cluster.broker.requests_of(10)) == 3  # unavailable, then again after NOT_COORDINATOR
    cluster.script(9, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    got = client.committed_offsets("g", [TP, tp1, TopicPartition("other", 0)])
    assert got == {TP: (42, "meta-data"), tp1: (7, "meta-data")}
    assert client.committed_offsets("nobody", [TP]) == {}


def test_commit_refused_for_good_raises(cluster: FakeCluster, client: KafkaClient) -> None:
    cluster.script(8, ErrorCode.UNKNOWN_MEMBER_ID)
    with pytest.raises(BrokerError, match="OffsetCommit for events-0: UNKNOWN_MEMBER_ID"):
        client.commit_offsets("busy", {TP: 1})


# --- lifetime -------------------------------------------------------------------------------------


def test_a_pickled_client_reconnects_lazily(cluster: FakeCluster, client: KafkaClient) -> None:
    fill(cluster, 1, 5)
    client.topic_names()
    copy = pickle.loads(pickle.dumps(client))
    assert copy.config == client.config and copy is not client
    connections = cluster.broker.connections
    assert copy.list_offsets({TP: LATEST}) == {TP: 5}
    assert cluster.broker.connections == connections + 1
    copy.close()


def test_a_forked_child_opens_its_own_connections(
    cluster: FakeCluster, client: KafkaClient
) -> None:
    fill(cluster, 1, 5)
    assert client.list_offsets({TP: LATEST}) == {TP: 5}
    connections = cluster.broker.connections
    pid = os.fork()
    if pid == 0:  # the child: its inherited socket must not be used, nor shut down
        code = 0
        try:
            assert client.list_offsets({TP: EARLIEST}) == {TP: 0}
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert cluster.broker.connections == connections + 1
    assert client.list_offsets({TP: LATEST}) == {TP: 5}  # the parent's socket still works
    assert cluster.broker.connections == connections + 1


def test_a_closed_client_refuses_work(cluster: FakeCluster) -> None:
    client = KafkaClient(cluster.broker.bootstrap)
    client.close()
    with pytest.raises(KafkaClientError, match="closed"):
        client.topic_names()
