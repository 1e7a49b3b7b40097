"""docker-compose.yml as written: the secured 3 controllers + 3 brokers, checked from the host.

Fresh secrets in the environment -> ``docker-compose up -d``; six healthy containers (their
``kraft healthcheck --ready``); the CA out of the ``certs`` volume; over the published EXTERNAL
listeners, SASL_SSL with SCRAM-SHA-512: kcat lists three brokers at 127.0.0.1, a wrong password
and a plaintext client are refused; the REST API answers 401 without credentials and 200 with
them; a topic of replication factor 3 takes 10,000 records with acks=all; the leader of its
partition 0 is killed, 1,000 more are written and all 11,000 read back; restarted, the broker
rejoins the ISR (replication runs over the INTERNAL SASL_SSL listener, registrations over the
controllers' SASL_SSL listener).  ``docker-compose down -v`` at the end.

The file publishes 127.0.0.1:9092-9094 and 8080-8082.  When one of them is taken on this host
the test runs a copy of the file with those host ports (published and advertised alike) moved
to free ones, and says so in a warning; nothing else in the copy differs.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from container.engine import (
    ROOT,
    docker,
    docker_env,
    free_ports,
    kcat,
    port_is_free,
    sasl_ssl,
    wait_for,
)

pytestmark = pytest.mark.container

PROJECT = "kraftctest"
CONTROLLERS = ("controller-1", "controller-2", "controller-3")
BROKERS = ("broker-1", "broker-2", "broker-3")
KAFKA_PORTS = (9092, 9093, 9094)  # broker-N's EXTERNAL listener on the host
ADMIN_PORTS = (8080, 8081, 8082)  # broker-N's REST API on the host
TOPIC = "compose-rf3"


@dataclass
class Cluster:
    files: list[Path]
    env: dict[str, str]
    kafka_ports: tuple[int, ...]
    admin_ports: tuple[int, ...]
    ca: Path
    password: str

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.kafka_ports)

    def compose(
        self, *args: str, timeout: float = 600, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        files = [a for f in self.files for a in ("-f", str(f))]
        cmd = ["docker-compose", "--project-directory", str(ROOT), "-p", PROJECT, *files, *args]
        done = subprocess.run(
            cmd, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(cmd[5:])} failed:\n{done.stderr[-3000:]}")
        return done

    def container(self, service: str) -> str:
        return self.compose("ps", "-q", service).stdout.strip()

    def health(self, service: str) -> str:
        fmt = "{{.State.Health.Status}}"
        return docker("inspect", "-f", fmt, self.container(service), check=False).stdout.strip()

    def kcat(self, *args: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
        return kcat(self.bootstrap, sasl_ssl(self.ca, password or self.password), *args)

    def client_config(self) -> dict[str, str | int | float | bool]:
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.ca),
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": self.password,
        }


def compose_files(tmp: Path) -> tuple[list[Path], tuple[int, ...], tuple[int, ...]]:
    """The file as written when its host ports are free, else a copy with them moved."""
    wanted = (*KAFKA_PORTS, *ADMIN_PORTS)
    taken = [p for p in wanted if not port_is_free(p)]
    if not taken:
        return [ROOT / "docker-compose.yml"], KAFKA_PORTS, ADMIN_PORTS
    moved = dict(zip(wanted, free_ports(len(wanted)), strict=True))
    warnings.warn(
        f"host ports {taken} are taken here: docker-compose.yml runs with its published and"
        f" advertised host ports moved {moved}",
        stacklevel=1,
    )
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name in BROKERS:
        service = doc["services"][name]
        service["ports"] = [
            re.sub(r"^127\.0\.0\.1:(\d+):", lambda m: f"127.0.0.1:{moved[int(m[1])]}:", p)
            for p in service["ports"]
        ]
        env = service["environment"]
        env["KRAFT_ADVERTISED_LISTENERS"] = re.sub(
            r"EXTERNAL://127\.0\.0\.1:(\d+)",
            lambda m: f"EXTERNAL://127.0.0.1:{moved[int(m[1])]}",
            env["KRAFT_ADVERTISED_LISTENERS"],
        )
    copy = tmp / "docker-compose.moved-ports.yml"
    copy.write_text(yaml.safe_dump(doc, sort_keys=False))
    return (
        [copy],
        tuple(moved[p] for p in KAFKA_PORTS),
        tuple(moved[p] for p in ADMIN_PORTS),
    )


@pytest.fixture(scope="module")
def cluster(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("compose")
    files, kafka_ports, admin_ports = compose_files(tmp)
    password = secrets.token_hex(16)
    env = {k: v for k, v in docker_env().items() if not k.startswith(("KRAFT_", "COMPOSE_"))}
    env.update(
        KRAFT_CONTROLLER_QUORUM_PASSWORD=secrets.token_hex(24),
        KRAFT_ADMIN_PASSWORD=password,
        KRAFT_BROKER_PASSWORD=secrets.token_hex(16),
    )
    cluster = Cluster(files, env, kafka_ports, admin_ports, tmp / "ca.pem", password)
    cluster.compose("down", "-v", "--remove-orphans", check=False)  # a run left behind
    try:
        cluster.compose("up", "-d", "--no-build")
        pem = cluster.compose(
            *("run", "--rm", "--no-deps", "--entrypoint", "cat", "certs"),
            "/etc/kraft/certs/ca.pem",
        ).stdout
        cluster.ca.write_text(pem)
        yield cluster
    finally:
        logs = cluster.compose("logs", "--no-color", "--tail", "40", check=False).stdout
        (tmp / "compose.log").write_text(logs)
        cluster.compose("down", "-v", "--remove-orphans", check=False)


@pytest.fixture(scope="module")
def healthy(cluster: Cluster) -> Cluster:
    services = (*CONTROLLERS, *BROKERS)
    try:
        wait_for(
            "6 healthy nodes",
            300,
            lambda: all(cluster.health(s) == "healthy" for s in services),
            every_s=2,
        )
    except AssertionError as exc:
        states = {s: cluster.health(s) for s in services}
        logs = cluster.compose("logs", "--no-color", "--tail", "15", check=False).stdout
        raise AssertionError(f"{exc}: {states}\n{logs[-4000:]}") from None
    return cluster


def rest_status(cluster: Cluster, path: str, password: str | None) -> int:
    request = urllib.request.Request(f"https://127.0.0.1:{cluster.admin_ports[0]}{path}")
    if password is not None:
        token = base64.b64encode(f"admin:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=str(cluster.ca))
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def partition_state(cluster: Cluster) -> tuple[int, list[int]]:
    """(leader, isr) of the topic's partition 0, from kcat -L -J."""
    meta = json.loads(cluster.kcat("-L", "-J", "-t", TOPIC).stdout)
    (topic,) = meta["topics"]
    part = next(p for p in topic["partitions"] if p["partition"] == 0)
    return int(part["leader"]), [int(r["id"]) for r in part["isrs"]]


def test_every_node_is_healthy_and_the_ca_came_out(healthy: Cluster) -> None:
    assert "BEGIN CERTIFICATE" in healthy.ca.read_text()
    for service in (*CONTROLLERS, *BROKERS):
        inspect = json.loads(docker("inspect", healthy.container(service)).stdout)[0]
        assert inspect["Config"]["Healthcheck"]["Test"] == [
            "CMD",
            "kraft",
            "healthcheck",
            "--ready",
        ]


def test_only_authenticated_tls_clients_get_in(healthy: Cluster) -> None:
    listing = healthy.kcat("-L")
    assert listing.returncode == 0, listing.stderr
    brokers = re.findall(r"broker \d+ at 127\.0\.0\.1:(\d+)", listing.stdout)
    assert sorted(map(int, brokers)) == sorted(healthy.kafka_ports)
    assert healthy.kcat("-L", "-m", "10", password="not-the-password").returncode != 0
    plain = kcat(healthy.bootstrap, ["-X", "security.protocol=PLAINTEXT"], "-L", "-m", "10")
    assert plain.returncode != 0
    assert rest_status(healthy, "/v1/cluster", None) == 401
    assert rest_status(healthy, "/v1/cluster", healthy.password) == 200
    assert rest_status(healthy, "/v1/health", None) == 200


def test_an_rf3_topic_keeps_every_record_through_a_broker_kill_and_restart(
    healthy: Cluster,
) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    config = healthy.client_config()
    admin = AdminClient(config)  # kept: its futures need the handle alive
    created = admin.create_topics([NewTopic(TOPIC, 3, replication_factor=3)])
    created[TOPIC].result(timeout=60)
    wait_for("3 in-sync replicas", 60, lambda: len(partition_state(healthy)[1]) == 3)
    producer = Producer({**config, "acks": "all", "linger.ms": 20})
    for i in range(10_000):
        producer.produce(TOPIC, value=f"m-{i}".encode())
        producer.poll(0)
    assert producer.flush(120) == 0, "10,000 records with acks=all"

    leader, _ = partition_state(healthy)
    victim = BROKERS[leader - 4]  # node ids 4-6 are broker-1..3
    docker("kill", healthy.container(victim))
    for i in range(10_000, 11_000):
        producer.produce(TOPIC, value=f"m-{i}".encode())
        producer.poll(0)
    assert producer.flush(180) == 0, f"1,000 more records with {victim} (leader of 0) killed"

    consumer = Consumer({**config, "group.id": "compose-test", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 180
    while len(seen) < 11_000 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        value = message.value() if message is not None and message.error() is None else None
        if value is not None:
            seen.add(value)
    consumer.close()
    assert seen == {f"m-{i}".encode() for i in range(11_000)}

    healthy.compose("start", victim)
    wait_for(
        f"{victim} (node {leader}) back in the ISR of partition 0",
        180,
        lambda: leader in partition_state(healthy)[1],
        every_s=2,
    )
    wait_for(f"{victim} healthy again", 120, lambda: healthy.health(victim) == "healthy")
