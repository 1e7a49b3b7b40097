"""Real clients produce to and consume from a real single-node broker (``kraft dev``).

Every record read back must equal what was sent, with every client: values, keys (null and
empty included), headers (repeated and null values included), timestamps, dense offsets from 0
and per-partition order.  Producers: confluent-kafka (acks 0/1/all, idempotence, every codec),
kafka-python (its defaults: idempotent), aiokafka (every codec) and ``kcat -P``; readers:
confluent-kafka (assign with an offset), kafka-python and aiokafka without a group, and
``kcat -C -e``.  No reader uses a consumer group.  Also: max.message.bytes, min.insync.replicas
and LogAppendTime topics, fetches from inside a batch and with tiny fetch limits, ListOffsets
by timestamp, Metadata auto-creation, ``kcat -L``, and a restart on the same data directory.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import kafka.errors
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from integration.clients import (
    BASE_TS_MS,
    CODECS,
    LOG_APPEND_TIME,
    TIMEOUT_S,
    Msg,
    Rec,
    assert_delivered,
    assert_same_records,
    confluent_conf,
    confluent_consumer,
    create_topic,
    ends_of,
    expected,
    kcat,
    log_since,
    log_size,
    make_msgs,
    produce_aiokafka,
    produce_confluent,
    produce_kafka_python,
    read_aiokafka,
    read_confluent,
    read_kafka_python,
    read_kcat,
    request_count,
    wait_for_high_watermarks,
    watermarks,
    without_timestamps,
)
from integration.node_process import NodeProcess

pytestmark = pytest.mark.integration

NUM_PARTITIONS = 3  # the node's num.partitions: auto-created topics get this many


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(
        Path(tmp_path_factory.mktemp("node")), overrides=(f"num.partitions={NUM_PARTITIONS}",)
    ).start()
    yield proc
    if proc.alive():
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture(autouse=True)
def show_node_log(node: NodeProcess) -> Iterator[None]:
    """Print what the node logged during the test: pytest shows it when the test fails."""
    start = log_size(node)
    yield
    print(f"node stderr during this test:\n{log_since(node, start)}")


READERS = {
    "confluent-kafka": read_confluent,
    "kafka-python": read_kafka_python,
    "aiokafka": read_aiokafka,
}


def read_back_everywhere(node: NodeProcess, topic: str, want: list[Rec]) -> None:
    """The log holds exactly ``want``: watermarks, then every client reads it all back."""
    ends = ends_of(want)
    assert watermarks(node, topic, ends) == {p: (0, end) for p, end in ends.items()}
    for name, read in READERS.items():
        assert_same_records(want, read(node, topic, ends), name)
    assert_same_records(want, read_kcat(node, topic), "kcat -C -e")


# --- confluent-kafka producer -------------------------------------------------------------------


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_producer_every_codec(node: NodeProcess, topic_name: str, acks: str) -> None:
    """acks 0/1/all, one producer per codec, keys, headers (null values too), explicit
    timestamps, three partitions; read back by every client."""
    create_topic(node, topic_name, 3)
    want: list[Rec] = []
    for codec in CODECS:
        msgs = make_msgs(f"{acks}-{codec}", 40, 3)
        batch = expected(msgs, ends_of(want))
        reports = produce_confluent(
            node, topic_name, msgs, acks=acks, compression_type=codec, linger_ms=20
        )
        if acks == "0":
            # No response at all: librdkafka reports success without offsets; the records
            # must land all the same.
            assert all(r.error is None for r in reports), [r.error for r in reports][:3]
            want += batch
            wait_for_high_watermarks(node, topic_name, ends_of(want))
        else:
            assert_delivered(reports, batch, node)
            want += batch
    read_back_everywhere(node, topic_name, want)


def test_confluent_idempotent_producer(node: NodeProcess, topic_name: str) -> None:
    """enable.idempotence: InitProducerId, sequence numbers; two producer sessions append."""
    create_topic(node, topic_name, 3)
    before = request_count(node, "InitProducerId")
    want: list[Rec] = []
    for session, codec in enumerate(["zstd", "none"]):
        msgs = make_msgs(f"idem{session}", 150, 3)
        batch = expected(msgs, ends_of(want))
        reports = produce_confluent(
            node,
            topic_name,
            msgs,
            enable_idempotence=True,
            compression_type=codec,
            linger_ms=5,
            batch_num_messages=20,
        )
        assert_delivered(reports, batch, node)
        want += batch
    assert request_count(node, "InitProducerId") >= before + 2
    read_back_everywhere(node, topic_name, want)


def test_record_near_max_message_bytes(node: NodeProcess, topic_name: str) -> None:
    """max.message.bytes=200000: a ~190 KB record is accepted; a larger one is refused with
    MESSAGE_TOO_LARGE by every producer and nothing of it is appended."""
    create_topic(node, topic_name, 1, {"max.message.bytes": "200000"})
    big = Msg(0, b"big", b"x" * 190_000 + b"end", (("h", b"v"),), BASE_TS_MS)
    assert_delivered(produce_confluent(node, topic_name, [big]), expected([big]), node)

    too_big = Msg(0, b"too-big", b"y" * 210_000, (), BASE_TS_MS + 1)
    [report] = produce_confluent(node, topic_name, [too_big])
    assert report.error is not None and report.error.code() == KafkaError.MSG_SIZE_TOO_LARGE, (
        f"confluent: expected MSG_SIZE_TOO_LARGE, got {report.error}"
    )
    with pytest.raises(kafka.errors.MessageSizeTooLargeError):
        produce_kafka_python(node, topic_name, [too_big], retries=0)
    assert watermarks(node, topic_name, [0]) == {0: (0, 1)}, "the refused batch was appended"

    # Nothing after the refusals is lost or shifted either.
    after = Msg(0, b"after", b"small", (), BASE_TS_MS + 2)
    assert_delivered(produce_confluent(node, topic_name, [after]), expected([after], {0: 1}), node)
    want = expected([big, after])
    assert_same_records(want, read_confluent(node, topic_name, {0: 2}), "confluent-kafka")
    assert_same_records(want, read_kcat(node, topic_name), "kcat -C -e")


def test_fetch_from_inside_a_compressed_batch(node: NodeProcess, topic_name: str) -> None:
    """A fetch from an offset inside a batch returns the whole batch; the clients drop the
    records before their offset (a broker returning nothing there loses data)."""
    create_topic(node, topic_name, 1)
    msgs = make_msgs("mid", 30, 1)
    reports = produce_confluent(node, topic_name, msgs, compression_type="lz4", linger_ms=200)
    want = expected(msgs)
    assert_delivered(reports, want, node)
    tail = want[17:]
    start = {0: 17}
    for name, read in READERS.items():
        assert_same_records(tail, read(node, topic_name, {0: 30}, start), f"{name} from 17")
    out = kcat(node, "-C", "-t", topic_name, "-p", "0", "-o", "17", "-e", "-q", "-f", "%o\\n")
    assert out.stdout.split() == [str(o) for o in range(17, 30)]


def test_metadata_auto_creates_topic_on_produce(node: NodeProcess, topic_name: str) -> None:
    """Producing to an unknown topic creates it (Metadata auto-creation) with num.partitions."""
    producer = Producer(confluent_conf(node, message_timeout_ms=10_000))
    reports: list[tuple[KafkaError | None, int, int]] = []
    for i in range(30):
        producer.produce(
            topic_name,
            key=f"key-{i}".encode(),
            value=f"value-{i}".encode(),
            timestamp=BASE_TS_MS + i,
            on_delivery=lambda e, m: reports.append((e, m.partition(), m.offset())),
        )
    assert producer.flush(TIMEOUT_S) == 0
    assert [e for e, _, _ in reports if e is not None] == []
    md = producer.list_topics(topic_name, timeout=TIMEOUT_S).topics[topic_name]
    assert md.error is None, md.error
    assert sorted(md.partitions) == list(range(NUM_PARTITIONS))
    assert {p.leader for p in md.partitions.values()} == {1}

    # The default partitioner hashes keys; whatever it chose, offsets are dense per partition.
    per_partition: dict[int, list[int]] = {}
    for _, p, o in reports:
        per_partition.setdefault(p, []).append(o)
    for p, offsets in per_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), f"partition {p}: {offsets}"
    got = read_confluent(node, topic_name, {p: len(o) for p, o in per_partition.items()})
    assert sorted((r.key, r.value) for r in got) == sorted(
        (f"key-{i}".encode(), f"value-{i}".encode()) for i in range(30)
    )


def test_acks_all_refused_below_min_insync_replicas(node: NodeProcess, topic_name: str) -> None:
    """min.insync.replicas=2 on a one-replica topic: acks=all is refused with
    NOT_ENOUGH_REPLICAS and nothing is appended; acks=1 is accepted (Kafka's rule)."""
    create_topic(node, topic_name, 1, {"min.insync.replicas": "2"})
    msg = Msg(0, b"k", b"needs two replicas", (), BASE_TS_MS)
    [report] = produce_confluent(node, topic_name, [msg], acks="all", retries=0)
    assert report.error is not None and report.error.code() == KafkaError.NOT_ENOUGH_REPLICAS, (
        f"confluent acks=all with ISR 1 < min.insync.replicas 2: {report.error or 'success'}"
    )
    with pytest.raises(kafka.errors.NotEnoughReplicasError):
        produce_kafka_python(
            node, topic_name, [msg], acks="all", enable_idempotence=False, retries=0
        )
    assert watermarks(node, topic_name, [0]) == {0: (0, 0)}, "a refused record was appended"
    assert_delivered(produce_confluent(node, topic_name, [msg], acks="1"), expected([msg]), node)


def test_log_append_time_topic(node: NodeProcess, topic_name: str) -> None:
    """message.timestamp.type=LogAppendTime: the broker stamps each batch, the produce answer
    carries that time, and every reader sees it as a LogAppendTime timestamp."""
    create_topic(node, topic_name, 2, {"message.timestamp.type": "LogAppendTime"})
    started_ms = int(time.time() * 1000)
    want: list[Rec] = []
    for codec in ["none", "zstd"]:
        msgs = make_msgs(f"lat-{codec}", 20, 2)  # CreateTime stamps, which the broker replaces
        batch = expected(msgs, ends_of(want))
        reports = produce_confluent(node, topic_name, msgs, compression_type=codec, linger_ms=20)
        assert_delivered(reports, batch, node)
        now_ms = int(time.time() * 1000)
        stamps = [r.timestamp for r in reports]
        assert all(
            t == TIMESTAMP_LOG_APPEND_TIME and started_ms <= ms <= now_ms for t, ms in stamps
        ), f"delivery report timestamps {stamps[:3]}, expected LogAppendTime in the last seconds"
        want += [dataclasses.replace(r, timestamp=None, ts_type=LOG_APPEND_TIME) for r in batch]
    finished_ms = int(time.time() * 1000)
    ends = ends_of(want)
    for name, read in [*READERS.items(), ("kcat -C -e", lambda n, t, e: read_kcat(n, t))]:
        got = read(node, topic_name, ends)
        stamps = [r.timestamp for r in got]
        assert all(started_ms <= (ts or 0) <= finished_ms for ts in stamps), (
            f"{name}: timestamps {stamps[:3]}... not the append time "
            f"(between {started_ms} and {finished_ms})"
        )
        assert_same_records(want, got, name)


def test_offsets_for_times_and_watermarks(node: NodeProcess, topic_name: str) -> None:
    """ListOffsets by timestamp: the first offset whose timestamp is at or after the target
    (timestamps here are not monotonic, and batches are compressed), or none; and the
    earliest and latest offsets."""
    create_topic(node, topic_name, 2)
    msgs = make_msgs("times", 60, 2)
    want = expected(msgs)
    reports = produce_confluent(node, topic_name, msgs, compression_type="gzip", linger_ms=20)
    assert_delivered(reports, want, node)
    stamps = sorted({r.timestamp or 0 for r in want})
    targets = [0, stamps[0], stamps[0] + 1, stamps[len(stamps) // 2], stamps[-1], stamps[-1] + 1]

    def first_at_or_after(p: int, target: int) -> tuple[int, int] | None:
        found = [(r.offset, r.timestamp or 0) for r in want if r.partition == p]
        return next(((o, ts) for o, ts in found if ts >= target), None)

    wanted = {(p, t): first_at_or_after(p, t) for p in (0, 1) for t in targets}
    ends = ends_of(want)

    consumer = confluent_consumer(node)
    try:
        got: dict[tuple[int, int], tuple[int, int] | None] = {}
        for (p, t), w in wanted.items():
            [tp] = consumer.offsets_for_times([TopicPartition(topic_name, p, t)], TIMEOUT_S)
            got[(p, t)] = None if tp.offset < 0 else (tp.offset, w[1] if w else -1)
        assert got == wanted, "confluent-kafka offsets_for_times"
    finally:
        consumer.close()

    kp = KafkaConsumer(bootstrap_servers=node.bootstrap, group_id=None)
    try:
        tps = [KpTopicPartition(topic_name, p) for p in (0, 1)]
        assert kp.beginning_offsets(tps) == dict.fromkeys(tps, 0)
        assert kp.end_offsets(tps) == {tp: ends[tp.partition] for tp in tps}
        for t in targets:
            answer = kp.offsets_for_times(dict.fromkeys(tps, t))
            got_kp = {tp.partition: a and (a.offset, a.timestamp) for tp, a in answer.items()}
            assert got_kp == {p: wanted[(p, t)] for p in (0, 1)}, f"kafka-python, target {t}"
    finally:
        kp.close()

    async def aiokafka_answers() -> dict[tuple[int, int], tuple[int, int] | None]:
        consumer = AIOKafkaConsumer(bootstrap_servers=node.bootstrap, group_id=None)
        await consumer.start()
        try:
            out = {}
            tps = [AioTopicPartition(topic_name, p) for p in (0, 1)]
            assert await consumer.end_offsets(tps) == {tp: ends[tp.partition] for tp in tps}
            for t in targets:
                for tp, a in (await consumer.offsets_for_times(dict.fromkeys(tps, t))).items():
                    out[(tp.partition, t)] = a and (a.offset, a.timestamp)
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(aiokafka_answers()) == wanted, "aiokafka offsets_for_times"

    # kcat -Q keeps one query per partition, so one call per target.
    for t in targets:
        query = kcat(node, "-Q", "-t", f"{topic_name}:0:{t}").stdout
        found = wanted[(0, t)]
        assert f"[0] offset {found[0] if found else -1}\n" in query, f"kcat -Q {t}: {query}"


def test_small_fetch_sizes_still_return_whole_records(node: NodeProcess, topic_name: str) -> None:
    """Records far larger than the consumers' fetch limits: the first batch is returned whole
    (KIP-74), so every client makes progress and reads everything."""
    create_topic(node, topic_name, 2)
    msgs = [
        Msg(i % 2, f"k{i}".encode(), (f"{i}-" * 40_000)[:150_000].encode(), (), BASE_TS_MS + i)
        for i in range(8)
    ]
    want = expected(msgs)
    assert_delivered(produce_confluent(node, topic_name, msgs, linger_ms=20), want, node)
    ends = ends_of(want)
    small = {
        "confluent-kafka": {
            "max_partition_fetch_bytes": 1024,
            "fetch_max_bytes": 2048,
            "message_max_bytes": 1000,
        },
        "kafka-python": {"max_partition_fetch_bytes": 1024, "fetch_max_bytes": 2048},
        "aiokafka": {"max_partition_fetch_bytes": 1024, "fetch_max_bytes": 2048},
    }
    for name, read in READERS.items():
        assert_same_records(want, read(node, topic_name, ends, **small[name]), name)


# --- kafka-python and aiokafka producers --------------------------------------------------------


def test_kafka_python_producer_defaults(node: NodeProcess, topic_name: str) -> None:
    """KafkaProducer with its defaults (kafka-python 3: idempotent, acks=all, InitProducerId),
    then one producer per codec; read back by every client."""
    assert KafkaProducer.DEFAULT_CONFIG["enable_idempotence"] is True, "kafka-python's default"
    create_topic(node, topic_name, 3)
    before = request_count(node, "InitProducerId")
    # kafka-python's producer refuses null header values, so none are sent here.
    msgs = make_msgs("kp", 60, 3, null_headers=False)
    want = expected(msgs)
    assert produce_kafka_python(node, topic_name, msgs) == [(r.partition, r.offset) for r in want]
    assert request_count(node, "InitProducerId") > before, "kafka-python did not InitProducerId"
    for codec in CODECS[1:]:
        msgs = make_msgs(f"kp-{codec}", 20, 3, null_headers=False)
        batch = expected(msgs, ends_of(want))
        offsets = produce_kafka_python(node, topic_name, msgs, compression_type=codec)
        assert offsets == [(r.partition, r.offset) for r in batch], codec
        want += batch
    read_back_everywhere(node, topic_name, want)


def test_aiokafka_producer_every_codec(node: NodeProcess, topic_name: str) -> None:
    """AIOKafkaProducer with each codec it supports (and none); read back by every client."""
    create_topic(node, topic_name, 3)
    want: list[Rec] = []
    for codec in [None, "gzip", "snappy", "lz4", "zstd"]:
        msgs = make_msgs(f"aio-{codec}", 30, 3)
        batch = expected(msgs, ends_of(want))
        offsets = produce_aiokafka(node, topic_name, msgs, compression_type=codec)
        assert offsets == [(r.partition, r.offset) for r in batch], codec
        want += batch
    read_back_everywhere(node, topic_name, want)


def test_aiokafka_idempotent_producer(node: NodeProcess, topic_name: str) -> None:
    create_topic(node, topic_name, 2)
    msgs = make_msgs("aio-idem", 40, 2)
    want = expected(msgs)
    offsets = produce_aiokafka(node, topic_name, msgs, enable_idempotence=True)
    assert offsets == [(r.partition, r.offset) for r in want]
    assert_same_records(want, read_aiokafka(node, topic_name, ends_of(want)), "aiokafka")


# --- kcat ---------------------------------------------------------------------------------------


def test_kcat_produce_every_codec(node: NodeProcess, topic_name: str) -> None:
    """``kcat -P -K: -H k=v -z CODEC``; read back by kcat and every client.  kcat stamps
    records itself (CreateTime now), so timestamps are checked against the clock."""
    create_topic(node, topic_name, 3)
    want: list[Rec] = []
    started_ms = int(time.time() * 1000)
    for i, codec in enumerate(CODECS):
        partition = i % 3
        lines = [f"key-{codec}-{j}:value-{codec}-{j}-" + "z" * j for j in range(15)]
        kcat(
            node,
            "-P",
            "-t",
            topic_name,
            "-p",
            str(partition),
            "-K:",
            "-H",
            f"codec={codec}",
            "-H",
            "two=2",
            "-z",
            codec,
            "-X",
            "message.timeout.ms=10000",
            stdin="\n".join(lines) + "\n",
        )
        first = ends_of(want).get(partition, 0)
        for j, line in enumerate(lines):
            key, value = line.split(":", 1)
            headers = (("codec", codec.encode()), ("two", b"2"))
            want.append(
                Rec(partition, first + j, key.encode(), value.encode(), headers, timestamp=None)
            )
    finished_ms = int(time.time() * 1000)
    got = read_kcat(node, topic_name)
    outside = [r for r in got if not started_ms - 5 <= (r.timestamp or 0) <= finished_ms + 5]
    assert not outside, f"timestamps outside [{started_ms}, {finished_ms}]: {outside[:3]}"
    assert_same_records(want, got, "kcat -C -e")
    ends = ends_of(want)
    for name, read in READERS.items():
        assert_same_records(want, without_timestamps(read(node, topic_name, ends)), name)


def test_kcat_metadata_lists_topic(node: NodeProcess, topic_name: str) -> None:
    """``kcat -L``: the broker (as controller), the topic, its partitions and their leader."""
    create_topic(node, topic_name, 4)
    out = kcat(node, "-L", "-t", topic_name).stdout
    assert f"broker 1 at {node.bootstrap} (controller)" in out, out
    assert f'topic "{topic_name}" with 4 partitions:' in out, out
    found = re.findall(r"partition (\d+), leader (-?\d+), replicas: (\S+), isrs: (\S+)", out)
    assert found == [(str(p), "1", "1", "1") for p in range(4)], out
    # Every topic, as librdkafka 2.0 asks for them (Metadata v4, null topics).
    assert f'topic "{topic_name}" with 4 partitions:' in kcat(node, "-L").stdout


# --- restart ------------------------------------------------------------------------------------


def test_restart_keeps_topics_and_records(tmp_path: Path) -> None:
    """SIGTERM, then a new process on the same data directory: topics (explicit and
    auto-created), partitions and every record survive, and appends continue at the end."""
    node = NodeProcess(tmp_path / "restart").start()
    try:
        topic, auto_topic = "restart-explicit", "restart-auto"
        create_topic(node, topic, 2, {"retention.ms": "86400000"})
        want: list[Rec] = []
        for codec in CODECS:
            msgs = make_msgs(f"r-{codec}", 20, 2)
            batch = expected(msgs, ends_of(want))
            reports = produce_confluent(node, topic, msgs, compression_type=codec, linger_ms=5)
            assert_delivered(reports, batch, node)
            want += batch
        auto = [Msg(0, b"k", b"auto", (), BASE_TS_MS)]
        assert_delivered(produce_confluent(node, auto_topic, auto), expected(auto), node)
        assert node.stop() == 0, node.log_tail()

        node.start()
        for name, t, count in [("explicit", topic, 2), ("auto-created", auto_topic, 1)]:
            out = kcat(node, "-L", "-t", t).stdout
            assert f'topic "{t}" with {count} partitions:' in out, f"{name} topic after restart"
        # The topic's config override survives too (read through the REST API here, so that
        # this test does not depend on DescribeConfigs, which test_clients_admin.py covers).
        with urllib.request.urlopen(f"{node.admin}/v1/topics/{topic}", timeout=TIMEOUT_S) as r:
            assert json.load(r)["configs"] == {"retention.ms": "86400000"}
        read_back_everywhere(node, topic, want)
        assert_same_records(expected(auto), read_kcat(node, auto_topic), "auto-created topic")

        more = make_msgs("after-restart", 10, 2)
        batch = expected(more, ends_of(want))
        assert_delivered(produce_confluent(node, topic, more), batch, node)
        assert_same_records(want + batch, read_confluent(node, topic, ends_of(batch)), "after")
    finally:
        if node.alive():
            node.stop()
