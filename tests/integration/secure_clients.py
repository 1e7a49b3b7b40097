"""The four real clients, configured for one listener's security (security.protocol, SASL
mechanism and login, CA file): produce a few records, read them back, nothing else."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer

TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Login:
    """How a client reaches one listener."""

    address: str  # host:port
    protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None  # the truststore (SSL and SASL_SSL)
    cert_file: str | None = None  # a client certificate: its key and chain in one PEM file

    def librdkafka(self) -> dict[str, Any]:
        """confluent-kafka and kcat settings."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.address,
            "security.protocol": self.protocol,
        }
        if self.mechanism is not None:
            conf["sasl.mechanism"] = self.mechanism
            conf["sasl.username"] = self.username
            conf["sasl.password"] = self.password
        if self.ca_file is not None:
            conf["ssl.ca.location"] = self.ca_file
        if self.cert_file is not None:
            conf["ssl.certificate.location"] = self.cert_file
            conf["ssl.key.location"] = self.cert_file
        return conf

    def kafka_python(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap_servers": self.address,
            "security_protocol": self.protocol,
        }
        if self.mechanism is not None:
            conf["sasl_mechanism"] = self.mechanism
            conf["sasl_plain_username"] = self.username
            conf["sasl_plain_password"] = self.password
        if self.ca_file is not None:
            conf["ssl_cafile"] = self.ca_file
        if self.cert_file is not None:
            conf["ssl_certfile"] = conf["ssl_keyfile"] = self.cert_file
        return conf

    def aiokafka(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap_servers": self.address,
            "security_protocol": self.protocol,
        }
        if self.mechanism is not None:
            conf["sasl_mechanism"] = self.mechanism
            conf["sasl_plain_username"] = self.username
            conf["sasl_plain_password"] = self.password
        if self.ca_file is not None:
            context = ssl.create_default_context(cafile=self.ca_file)
            if self.cert_file is not None:
                context.load_cert_chain(self.cert_file)
            conf["ssl_context"] = context
        return conf


def roundtrip_confluent(login: Login, topic: str, values: list[bytes]) -> list[bytes]:
    producer = Producer({**login.librdkafka(), "message.timeout.ms": int(TIMEOUT_S * 1000)})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(TIMEOUT_S) == 0, "confluent-kafka: records left unsent"
    consumer = Consumer(
        {
            **login.librdkafka(),
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        for _ in range(int(TIMEOUT_S)):
            for message in consumer.consume(len(values), 1.0):
                assert message.error() is None, message.error()
                got.append(message.value())
            if len(got) >= len(values):
                break
        return got
    finally:
        consumer.close()


def roundtrip_kafka_python(login: Login, topic: str, values: list[bytes]) -> list[bytes]:
    producer = KafkaProducer(**login.kafka_python(), request_timeout_ms=10_000)
    for value in values:
        producer.send(topic, value).get(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        **login.kafka_python(),
        auto_offset_reset="earliest",
        consumer_timeout_ms=int(TIMEOUT_S * 1000),
        enable_auto_commit=False,
    )
    try:
        got: list[bytes] = []
        for message in consumer:
            got.append(message.value)
            if len(got) >= len(values):
                break
        return got
    finally:
        consumer.close()


def roundtrip_aiokafka(login: Login, topic: str, values: list[bytes]) -> list[bytes]:
    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**login.aiokafka())
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, **login.aiokafka(), auto_offset_reset="earliest", enable_auto_commit=False
        )
        await consumer.start()
        try:
            got: list[bytes] = []
            async with asyncio.timeout(TIMEOUT_S):
                async for message in consumer:
                    assert message.value is not None
                    got.append(message.value)
                    if len(got) >= len(values):
                        break
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


def kcat_args(login: Login) -> list[str]:
    exe = shutil.which("kcat") or shutil.which("kafkacat")
    assert exe is not None, "kcat is not installed (CI installs the Debian package)"
    conf = login.librdkafka()
    address = conf.pop("bootstrap.servers")
    if "sasl.mechanism" in conf:
        conf["sasl.mechanisms"] = conf.pop("sasl.mechanism")
    args = [exe, "-b", address]
    for key, value in conf.items():
        args += ["-X", f"{key}={value}"]
    return args


def roundtrip_kcat(login: Login, topic: str, values: list[bytes]) -> list[bytes]:
    base = kcat_args(login)
    text = "\n".join(v.decode() for v in values) + "\n"
    produced = subprocess.run(
        [*base, "-P", "-t", topic], input=text, capture_output=True, text=True, timeout=30
    )
    assert produced.returncode == 0, produced.stderr
    read = subprocess.run(
        [*base, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert read.returncode == 0, read.stderr
    return [line.encode() for line in read.stdout.splitlines()]


ROUNDTRIPS = {
    "confluent-kafka": roundtrip_confluent,
    "kafka-python": roundtrip_kafka_python,
    "aiokafka": roundtrip_aiokafka,
    "kcat": roundtrip_kcat,
}
