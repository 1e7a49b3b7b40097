"""The image as a user runs it: one combined node with the image's defaults (SASL_SSL on 9092,
HTTPS REST on 8080, security generated on the first start), published on other host ports
with the one variable that says so, ``KRAFT_ADVERTISED_ADDRESS``.  From the host: the baked
HEALTHCHECK, /v1/health and /v1/ready, kcat with the printed admin password and the CA copied
out, ``docker stop``; then a new container on the same named volume, with the REST API moved
to another port (the HEALTHCHECK follows it); then a root-owned bind mount, and ``--user``.

One node per phase, shared by the tests of that phase (module-scoped fixtures)."""

from __future__ import annotations

import base64
import json
import re
import ssl
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from container.engine import (
    docker,
    free_ports,
    kcat,
    sasl_ssl,
    wait_healthy,
)

pytestmark = pytest.mark.container

TOPIC = "container-single"
RECORDS = [f"record-{i}" for i in range(1000)]
PASSWORD_LINE = re.compile(r"generated the user 'admin' .*: (\S+)$", re.MULTILINE)
CA_IN_VOLUME = "/var/lib/kraft/metadata/secure/ca/ca.pem"


@dataclass(frozen=True)
class Node:
    container: str
    kafka_port: int  # on the host's 127.0.0.1
    admin_port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def admin_url(self) -> str:
        return f"https://127.0.0.1:{self.admin_port}"


@dataclass(frozen=True)
class Secured:
    node: Node
    password: str
    ca: Path


@dataclass(frozen=True)
class Stopped:
    seconds: float
    exit_code: int
    logs: str


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def run_node(
    image: str,
    network: str,
    volume: str,
    kafka_port: int,
    admin_port: int,
    *env: str,
    container_admin_port: int = 8080,
    command: tuple[str, ...] = (),
) -> Node:
    """``docker run`` the image's default node, Kafka published on ``kafka_port`` and told
    to clients with KRAFT_ADVERTISED_ADDRESS; REST published on ``admin_port``."""
    name = unique("kraft-ctest")
    docker(
        "run", "-d", "--name", name, "--network", network,
        "-p", f"127.0.0.1:{kafka_port}:9092",
        "-p", f"127.0.0.1:{admin_port}:{container_admin_port}",
        "-e", f"KRAFT_ADVERTISED_ADDRESS=127.0.0.1:{kafka_port}",
        *(arg for item in env for arg in ("-e", item)),
        "-v", f"{volume}:/var/lib/kraft",
        image, *command,
    )  # fmt: skip
    return Node(name, kafka_port, admin_port)


def rest(node: Node, path: str, ca: Path, password: str | None = None) -> tuple[int, object]:
    request = urllib.request.Request(node.admin_url + path)
    if password is not None:
        token = base64.b64encode(f"admin:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


def consumed(secured: Secured) -> list[str]:
    done = kcat(
        secured.node.bootstrap,
        sasl_ssl(secured.ca, secured.password),
        *("-C", "-t", TOPIC, "-o", "beginning", "-e", "-q", "-f", "%s\n"),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def container_uid(container: str) -> str:
    status = docker("exec", container, "cat", "/proc/1/status").stdout
    (uids,) = [line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")]
    return uids[0]


@pytest.fixture(scope="module")
def network(image: str) -> Iterator[str]:
    """A user-defined network: the engine CI starts has no default bridge."""
    name = unique("kraft-ctest-net")
    docker("network", "create", name)
    yield name
    docker("network", "rm", name, check=False)


@pytest.fixture(scope="module")
def volume(image: str) -> Iterator[str]:
    name = unique("kraft-ctest-data")
    docker("volume", "create", name)
    yield name
    docker("volume", "rm", "-f", name, check=False)


@pytest.fixture(scope="module")
def first(
    image: str, network: str, volume: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    """The first start of the default node on a fresh volume: healthy, password and CA out."""
    kafka_port, admin_port = free_ports(2)
    node = run_node(image, network, volume, kafka_port, admin_port)
    try:
        wait_healthy(node.container)
        logs = docker("logs", node.container)
        found = PASSWORD_LINE.search(logs.stdout + logs.stderr)
        assert found, f"no generated admin password in docker logs:\n{logs.stderr[-2000:]}"
        ca = tmp_path_factory.mktemp("ca") / "ca.pem"
        docker("cp", f"{node.container}:{CA_IN_VOLUME}", str(ca))
        yield Secured(node, found.group(1), ca)
    finally:
        docker("rm", "-f", node.container, check=False)


@pytest.fixture(scope="module")
def produced(first: Secured) -> list[str]:
    """The records kcat wrote from the host to the first node (acks=all, auto-created topic)."""
    done = kcat(
        first.node.bootstrap,
        sasl_ssl(first.ca, first.password),
        *("-P", "-t", TOPIC, "-X", "acks=all"),
        stdin="\n".join(RECORDS) + "\n",
    )
    assert done.returncode == 0, done.stderr
    return RECORDS


@pytest.fixture(scope="module")
def stopped(first: Secured, produced: list[str]) -> Stopped:
    """``docker stop`` of the first node (SIGTERM, 20 s grace before SIGKILL)."""
    started = time.monotonic()
    docker("stop", "-t", "20", first.node.container, timeout=60)
    seconds = time.monotonic() - started
    code = docker("inspect", "-f", "{{.State.ExitCode}}", first.node.container).stdout
    logs = docker("logs", "--tail", "10", first.node.container)
    docker("rm", first.node.container)
    return Stopped(seconds, int(code), logs.stdout + logs.stderr)


@pytest.fixture(scope="module")
def restarted(
    image: str, network: str, volume: str, first: Secured, stopped: Stopped
) -> Iterator[Secured]:
    """A new container on the same volume, its REST API moved to 8443 inside by an option of
    `kraft server` (the image's command line), which the HEALTHCHECK has to find there."""
    (admin_port,) = free_ports(1)
    node = run_node(
        image,
        network,
        volume,
        first.node.kafka_port,
        admin_port,
        container_admin_port=8443,
        command=("--override", "admin.listener=https://0.0.0.0:8443"),
    )
    try:
        yield Secured(node, first.password, first.ca)
    finally:
        docker("rm", "-f", node.container, check=False)


def test_the_default_node_turns_healthy_by_the_baked_healthcheck(first: Secured) -> None:
    inspect = json.loads(docker("inspect", first.node.container).stdout)[0]
    assert inspect["Config"]["Healthcheck"]["Test"] == ["CMD", "kraft", "healthcheck"]
    assert inspect["State"]["Health"]["Status"] == "healthy"
    assert set(inspect["Config"]["ExposedPorts"]) == {"9092/tcp", "8080/tcp"}
    assert container_uid(first.node.container) == "10001"  # dropped from root by the entrypoint


def test_rest_health_and_ready_over_https_with_the_generated_ca(first: Secured) -> None:
    assert rest(first.node, "/v1/health", first.ca) == (200, {"status": "ok", "node_id": 1})
    assert rest(first.node, "/v1/ready", first.ca)[0] == 200
    assert rest(first.node, "/v1/cluster", first.ca)[0] == 401  # the rest needs a user
    status, cluster = rest(first.node, "/v1/cluster", first.ca, first.password)
    assert status == 200 and isinstance(cluster, dict)
    # what clients are told: the host port it is published on, not the container's 9092
    (broker,) = cluster["brokers"]
    assert (broker["host"], broker["port"]) == ("127.0.0.1", first.node.kafka_port)


def test_kcat_produces_and_consumes_from_the_host(first: Secured, produced: list[str]) -> None:
    assert consumed(first) == produced
    refused = kcat(first.node.bootstrap, sasl_ssl(first.ca, "not-the-password"), "-L", "-m", "10")
    assert refused.returncode != 0


def test_docker_stop_is_clean_and_quick(stopped: Stopped) -> None:
    assert stopped.exit_code == 0, f"exit code {stopped.exit_code}:\n{stopped.logs}"
    assert stopped.seconds < 10, f"docker stop took {stopped.seconds:.1f} s (SIGKILL at 20)"


def test_a_new_container_on_the_same_volume_keeps_the_data(restarted: Secured) -> None:
    wait_healthy(restarted.node.container)
    logs = docker("logs", restarted.node.container)
    assert not PASSWORD_LINE.search(logs.stdout + logs.stderr), "kept, not generated again"
    assert consumed(restarted) == RECORDS


def test_the_healthcheck_follows_a_moved_admin_port(restarted: Secured) -> None:
    wait_healthy(restarted.node.container)
    assert rest(restarted.node, "/v1/ready", restarted.ca)[0] == 200  # 8443 in the container
    probe = docker("exec", restarted.node.container, "kraft", "healthcheck", check=False)
    assert probe.returncode == 0, probe.stderr
    # the old port answers nothing: a probe of the image's 8080 would call this node unhealthy
    old = docker(
        "exec", restarted.node.container, "kraft", "healthcheck", "--pid", "0", check=False
    )  # fmt: skip
    assert old.returncode == 1 and "127.0.0.1:8080" in old.stderr


@pytest.fixture
def root_owned_dir(image: str, tmp_path: Path) -> Iterator[Path]:
    """A fresh host directory as `mkdir` leaves it (owned by whoever runs the tests, root in
    CI), not by the image's uid 10001; emptied through a container afterwards (the node's
    files are 10001's)."""
    path = tmp_path / "bind"
    path.mkdir(mode=0o755)
    yield path
    docker(
        "run", "--rm", "--network", "none", "--entrypoint", "sh", "-v", f"{path}:/mnt",
        image, "-c", "rm -rf /mnt/* /mnt/.[!.]*",
    )  # fmt: skip


def test_a_root_owned_bind_mount_is_handed_to_the_kraft_user(
    image: str, root_owned_dir: Path
) -> None:
    name = unique("kraft-ctest-bind")
    docker(
        "run", "-d", "--name", name, "--network", "none",
        "-v", f"{root_owned_dir}:/var/lib/kraft", image,
    )  # fmt: skip
    try:
        wait_healthy(name)
        assert container_uid(name) == "10001"
        assert root_owned_dir.stat().st_uid == 10001
        assert (root_owned_dir / "metadata").stat().st_uid == 10001
    finally:
        docker("rm", "-f", name, check=False)


def test_with_user_and_no_write_access_the_container_says_what_to_do(
    image: str, root_owned_dir: Path
) -> None:
    if root_owned_dir.stat().st_uid == 4242:
        pytest.skip("the tests run as uid 4242, the uid this test runs the container as")
    done = docker(
        "run", "--rm", "--network", "none", "--user", "4242",
        "-v", f"{root_owned_dir}:/var/lib/kraft", image,
        check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert "/var/lib/kraft is owned by" in done.stderr and "not writable by uid 4242" in done.stderr
    assert "without --user" in done.stderr and "chown -R 4242" in done.stderr
    assert not any(root_owned_dir.iterdir()), "stopped before the node wrote anything"


def test_the_image_holds_only_what_runs(image: str) -> None:
    """No compiler, no source tree, build directory, egg-info, wheel or C source of ours."""
    script = (
        "command -v gcc cc;"
        " ls -d /src /wheels /tmp/wheels /tmp/lock /opt/kraft;"
        " find / -xdev -path '*kafka_protocol*.c';"
        " find / -xdev -name 'kraft_platform*.egg-info';"
        " pip list | grep -i '^kraft-platform '"
    )
    done = docker(
        "run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c", script, check=False
    )
    assert done.stdout.split() == ["kraft-platform", "0.1.0"], done.stdout
