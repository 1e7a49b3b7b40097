"""Crash and corruption: acknowledged records survive kill -9 (flush-every-append), and a torn
or corrupted log tail is cut at start-up, with the partition and offsets named in the log."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from integration.node_process import NodeProcess

pytestmark = pytest.mark.integration


def read_all(bootstrap: str, topic: str, expect: int, timeout_s: float = 20.0) -> list[Message]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",  # assign() below: no group protocol is used
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF and len(out) >= expect:
                break
            continue
        out.append(msg)
    consumer.close()
    return out


def produce_n(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for v in values:
        producer.produce(topic, v, partition=0)
    assert producer.flush(15) == 0


def test_kill_9_loses_no_acknowledged_record(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "n", overrides=("log.flush.interval.messages=1",)).start()
    acked: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            with lock:
                acked.append((msg.offset(), msg.value()))

    producer = Producer(
        {
            "bootstrap.servers": node.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 1,
            "message.timeout.ms": 3000,
            "socket.timeout.ms": 1000,
            "reconnect.backoff.max.ms": 200,
        }
    )
    i = 0
    while True:
        producer.produce("crash", b"value-%06d" % i, partition=0, on_delivery=on_delivery)
        i += 1
        producer.poll(0)
        with lock:
            if len(acked) >= 2000:
                break
        if i % 200 == 0:
            producer.flush(0.05)
    node.kill()  # mid-production: records are in flight
    producer.flush(5)  # the rest fail: the broker is gone
    with lock:
        acknowledged = dict(acked)
    restarted = NodeProcess(node.data_dir).start()
    try:
        got = {
            m.offset(): m.value() for m in read_all(restarted.bootstrap, "crash", len(acknowledged))
        }
        missing = {o: v for o, v in acknowledged.items() if got.get(o) != v}
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
        assert sorted(got) == list(range(len(got))), "offsets are not dense"
    finally:
        assert restarted.stop() == 0


def _segment(data_dir: Path, topic: str) -> Path:
    (path,) = (data_dir / "logs" / f"{topic}-0").glob("*.log")
    return path


def _dropped_lines(node: NodeProcess, topic: str) -> list[str]:
    pattern = re.compile(rf"dropped data dir=\S*{re.escape(topic)}-0 .*offsets=(\d+)\.\.(\S+)")
    return [line for line in node.log_tail(400).splitlines() if pattern.search(line)]


@pytest.mark.parametrize("damage", ["torn", "flipped"])
def test_damaged_tail_is_cut_at_start(tmp_path: Path, damage: str) -> None:
    node = NodeProcess(tmp_path / "n").start()
    produce_n(node.bootstrap, "damaged", [b"first-%d" % i for i in range(10)])
    produce_n(node.bootstrap, "damaged", [b"last-batch"])
    time.sleep(0.2)
    node.kill()  # unclean: recovery must re-validate the tail
    segment = _segment(node.data_dir, "damaged")
    data = bytearray(segment.read_bytes())
    if damage == "torn":
        del data[-7:]
    else:
        data[-3] ^= 0x40
    segment.write_bytes(bytes(data))

    restarted = NodeProcess(node.data_dir).start()
    try:
        lines = _dropped_lines(restarted, "damaged")
        assert lines, f"recovery did not log what it dropped:\n{restarted.log_tail()}"
        assert "offsets=10.." in lines[0], lines[0]
        values = [m.value() for m in read_all(restarted.bootstrap, "damaged", 10)]
        assert values == [b"first-%d" % i for i in range(10)]
        produce_n(restarted.bootstrap, "damaged", [b"after-recovery"])
        after = read_all(restarted.bootstrap, "damaged", 11)
        assert [m.offset() for m in after] == list(range(11))
        assert after[-1].value() == b"after-recovery"
    finally:
        assert restarted.stop() == 0
