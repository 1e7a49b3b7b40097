"""Testing an application against a real kraft cluster: `pip install kraft-platform
confluent-kafka`, then `pytest` (add `-n 4` with pytest-xdist).  The fixture `kraft_cluster`
comes with the package; nothing else is needed (no Docker, no JVM).

The README's "Testing your application with kraft.testing" shows this file, and the project's
own tests run it under `pytest -n 4` (tests/integration/test_kraft_testing_plugin.py)."""

import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def produce(config, topic, values):
    producer = Producer(config)
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(10) == 0


def consume(config, topic, count):
    consumer = Consumer(
        {**config, "group.id": f"g-{uuid.uuid4()}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    values = []
    try:
        for _ in range(100):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
            if len(values) == count:
                break
    finally:
        consumer.close()
    return values


def test_round_trip(kraft_cluster):
    config = kraft_cluster.client_config()
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(10)

    produce(config, topic, [b"order-1", b"order-2"])

    assert consume(config, topic, 2) == [b"order-1", b"order-2"]


def test_helpers_without_a_client(kraft_cluster):
    topic = f"events-{uuid.uuid4().hex[:8]}"
    kraft_cluster.create_topic(topic, partitions=1)
    kraft_cluster.produce(topic, ["a", "b", "c"])
    assert [r.value for r in kraft_cluster.consume(topic, count=3)] == [b"a", b"b", b"c"]


@pytest.mark.parametrize("kraft_cluster", [{"brokers": 3}], indirect=True)  # 1 controller
def test_survives_a_broker_crash(kraft_cluster):
    topic = f"payments-{uuid.uuid4().hex[:8]}"
    kraft_cluster.create_topic(topic, partitions=1, replication_factor=3)
    config = kraft_cluster.client_config()
    produce({**config, "acks": "all"}, topic, [b"before"])

    leader = kraft_cluster.describe_topic(topic)["partitions"][0]["leader"]
    kraft_cluster.kill_broker(leader)
    kraft_cluster.wait_for_isr(topic, 0, size=2)
    produce({**config, "acks": "all"}, topic, [b"after"])
    kraft_cluster.restart_broker(leader)
    kraft_cluster.wait_for_isr(topic, 0, size=3)

    assert consume(config, topic, 2) == [b"before", b"after"]
