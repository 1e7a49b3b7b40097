"""Run docker-compose.yml for real and check the secured 3 + 3 cluster from the host.

    python scripts/compose_check.py [--keep] [--no-build]

Needs a Docker engine (``DOCKER_HOST``; on a registry-less machine start one, and the stand-in
base image, with ``CTR_STEPS="base build" CTR_KEEP_DOCKERD=1 ../shared/tools/container-check.sh
.``), ``docker-compose``, ``kcat`` and the ``confluent-kafka`` package, and the host ports the
file publishes (127.0.0.1:9092-9094, 8080-8082) free.

What it checks, printing one PASS/FAIL line each and a summary (exit status 1 on any FAIL):
fresh secrets in the environment -> ``docker-compose up -d``; six healthy containers (their
HTTPS readiness probes); the CA out of the ``certs`` volume; from the host over the published
EXTERNAL listeners, SASL_SSL with SCRAM-SHA-512: kcat -L lists three brokers at 127.0.0.1, a
wrong password and a plaintext client are refused; the REST API over HTTPS answers 401 without
credentials and 200 with them; a topic of replication factor 3 takes 10,000 records with
acks=all; the leader of its partition 0 is killed and 1,000 more are written and all 11,000 read
back; restarted, the broker rejoins the ISR (replication runs over the INTERNAL SASL_SSL
listener, the brokers' registrations over the controllers' SASL_SSL listener).  Everything is
removed at the end (``docker-compose down -v``) unless ``--keep``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "kraftsecure"
BOOTSTRAP = "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
ADMIN_URL = "https://127.0.0.1:8080"
SERVICES = ("controller-1", "controller-2", "controller-3", "broker-1", "broker-2", "broker-3")
TOPIC = "compose-check"
IMAGE = "kraft-platform:local"  # docker-compose.yml's image

results: list[tuple[bool, str]] = []


def report(ok: bool, what: str) -> bool:
    results.append((ok, what))
    print(f"{'PASS' if ok else 'FAIL'} {what}", flush=True)
    return ok


def wait_for(seconds: float, check: Callable[[], bool], every_s: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except Exception:
            pass
        time.sleep(every_s)
    return False


class Compose:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def run(self, *args: str, timeout: float = 600, check: bool = False) -> str:
        cmd = ["docker-compose", "-p", PROJECT, "-f", str(ROOT / "docker-compose.yml"), *args]
        done = subprocess.run(
            cmd, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        return done.stdout

    def container(self, service: str) -> str:
        return self.run("ps", "-q", service).strip()

    def health(self, service: str) -> str:
        cid = self.container(service)
        if not cid:
            return "absent"
        out = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Health.Status}}", cid],
            capture_output=True,
            text=True,
            check=False,
        )
        return out.stdout.strip()


def kcat(
    ca: Path, password: str, *args: str, protocol: str = "SASL_SSL"
) -> subprocess.CompletedProcess[str]:
    security = ["-X", f"security.protocol={protocol}"]
    if protocol == "SASL_SSL":
        security += [
            "-X", f"ssl.ca.location={ca}",
            "-X", "sasl.mechanisms=SCRAM-SHA-512",
            "-X", "sasl.username=admin",
            "-X", f"sasl.password={password}",
        ]  # fmt: skip
    return subprocess.run(
        ["kcat", "-b", BOOTSTRAP, *security, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def client_config(ca: Path, password: str) -> dict[str, str | int | float | bool]:
    return {
        "bootstrap.servers": BOOTSTRAP,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(ca),
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": password,
    }


def rest_status(ca: Path, path: str, user: str | None, password: str | None) -> int:
    request = urllib.request.Request(ADMIN_URL + path)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def partition_state(ca: Path, password: str) -> tuple[int, list[int]]:
    """(leader, isr) of the topic's partition 0, from kcat -L -J."""
    out = kcat(ca, password, "-L", "-J", "-t", TOPIC)
    meta = json.loads(out.stdout)
    (topic,) = meta["topics"]
    part = next(p for p in topic["partitions"] if p["partition"] == 0)
    return int(part["leader"]), [int(r["id"]) for r in part["isrs"]]


def check_cluster(compose: Compose, ca: Path, password: str) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    listing = kcat(ca, password, "-L")
    brokers = [line for line in listing.stdout.splitlines() if "at 127.0.0.1:" in line]
    report(
        len(brokers) == 3, f"kcat -L over SASL_SSL lists 3 brokers at 127.0.0.1 ({len(brokers)})"
    )
    wrong = kcat(ca, "not-the-password", "-L", "-m", "10")
    report(wrong.returncode != 0, "a wrong SCRAM password is refused")
    plain = kcat(ca, password, "-L", "-m", "10", protocol="PLAINTEXT")
    report(plain.returncode != 0, "a plaintext client is refused on the EXTERNAL listener")
    report(rest_status(ca, "/v1/cluster", None, None) == 401, "REST without credentials: 401")
    report(rest_status(ca, "/v1/cluster", "admin", password) == 200, "REST as admin: 200")
    report(rest_status(ca, "/v1/health", None, None) == 200, "REST /v1/health stays open")

    config = client_config(ca, password)
    admin = AdminClient(config)
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=3)])
    futures[TOPIC].result(timeout=60)
    producer = Producer({**config, "acks": "all", "linger.ms": 20})
    for i in range(10_000):
        producer.produce(TOPIC, value=f"m-{i}".encode())
        producer.poll(0)
    report(producer.flush(120) == 0, "10,000 records to an RF 3 topic with acks=all")

    leader, isr = partition_state(ca, password)
    report(len(isr) == 3, f"partition 0 has 3 in-sync replicas {isr}")
    victim = f"broker-{leader - 3}"
    subprocess.run(["docker", "kill", compose.container(victim)], capture_output=True, check=False)
    for i in range(10_000, 11_000):
        producer.produce(TOPIC, value=f"m-{i}".encode())
        producer.poll(0)
    report(producer.flush(180) == 0, f"1,000 more records after killing {victim} (leader of 0)")

    consumer = Consumer({**config, "group.id": "compose-check", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 180
    while len(seen) < 11_000 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        value = message.value() if message is not None and message.error() is None else None
        if value is not None:
            seen.add(value)
    consumer.close()
    report(len(seen) == 11_000, f"all 11,000 records read back ({len(seen)})")

    compose.run("start", victim, check=True)
    report(
        wait_for(180, lambda: leader in partition_state(ca, password)[1]),
        f"{victim} rejoins the ISR of partition 0 after a restart",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument("--no-build", action="store_true", help="use the existing image")
    args = parser.parse_args()
    for tool in ("docker", "docker-compose", "kcat"):
        if shutil.which(tool) is None:
            print(f"compose_check: {tool} is not installed", file=sys.stderr)
            return 2
    password = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KRAFT_")}
    env.update(
        KRAFT_CONTROLLER_QUORUM_PASSWORD=secrets.token_hex(24),
        KRAFT_ADMIN_PASSWORD=password,
        KRAFT_BROKER_PASSWORD=secrets.token_hex(16),
    )
    compose = Compose(env)
    compose.run("down", "-v", "--remove-orphans")
    started = time.monotonic()
    try:
        if not args.no_build:  # host network: pip in the build reaches the package index
            build = ["docker", "build", "--network", "host", "-t", IMAGE, str(ROOT)]
            subprocess.run(build, env=env, capture_output=True, timeout=1800, check=True)
        compose.run("up", "-d", "--no-build", timeout=1800, check=True)
        healthy = wait_for(300, lambda: all(compose.health(s) == "healthy" for s in SERVICES))
        states = {s: compose.health(s) for s in SERVICES}
        report(healthy, f"6 nodes healthy after {time.monotonic() - started:.0f} s {states}")
        with tempfile.TemporaryDirectory() as tmp:
            ca = Path(tmp) / "ca.pem"
            pem = compose.run(
                "run",
                "--rm",
                "--no-deps",
                "--entrypoint",
                "cat",
                "certs",
                "/etc/kraft/certs/ca.pem",
            )
            ca.write_text(pem)
            report("BEGIN CERTIFICATE" in pem, "the CA certificate from the certs volume")
            if healthy:
                check_cluster(compose, ca, password)
    except Exception as exc:
        report(False, f"stopped early: {exc!r}")
    finally:
        logs = compose.run("logs", "--no-color", "--tail", "30")
        (Path(tempfile.gettempdir()) / "compose-check.log").write_text(logs)
        if not args.keep:
            compose.run("down", "-v", "--remove-orphans")
    failed = [what for ok, what in results if not ok]
    print(f"compose_check: {len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
