"""docker-compose.yml: 3 controllers and 3 brokers from the repo's image, checked on the file
as ``docker-compose config`` normalizes it (anchors merged, variables interpolated; no Docker
engine needed) and, statically, against the configuration keys the nodes understand.

``docker-compose`` is Debian's ``docker-compose`` package, which ``.ci/run`` installs; without
it these tests fail rather than skip, so that a CI machine cannot pass them by accident."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # PyYAML, via openapi-spec-validator -> jsonschema-path (dev extra)

from kraft.node.config import env_overrides, parse_listeners
from metadata_log.configs import BROKER_CONFIGS

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
INTERFACE = ROOT.parent / "shared" / "INTERFACE.md"
PASSWORD = "test-quorum-secret"
CONTROLLERS = {"controller-1": 1, "controller-2": 2, "controller-3": 3}
BROKERS = {"broker-1": 4, "broker-2": 5, "broker-3": 6}
# The Dockerfile's ENV describes one combined node: every node of the cluster overrides these.
COMBINED_NODE_DEFAULTS = (
    "KRAFT_NODE_ID",
    "KRAFT_PROCESS_ROLES",
    "KRAFT_LISTENERS",
    "KRAFT_ADVERTISED_LISTENERS",
    "KRAFT_ADMIN_LISTENER",
)


def docker_compose(*args: str, password: str | None = PASSWORD) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail(
            "docker-compose is not installed: `apt-get install docker-compose` (Debian's package;"
            " .ci/run installs it)"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KRAFT_", "COMPOSE_"))}
    if password is not None:
        env["KRAFT_CONTROLLER_QUORUM_PASSWORD"] = password
    return subprocess.run(
        [exe, "--project-directory", str(ROOT), "-f", str(COMPOSE_FILE), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    result = docker_compose("config")
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    return dict(config["services"])


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    assert isinstance(env, dict)
    return {k: str(v) for k, v in env.items()}


def nodes(services: dict[str, Any]) -> Iterator[tuple[str, dict[str, str]]]:
    for name in (*CONTROLLERS, *BROKERS):
        yield name, env_of(services[name])


# --- docker-compose config ----------------------------------------------------------------------


def test_six_nodes_with_unique_ids_and_roles(services: dict[str, Any]) -> None:
    with_ids = {
        n: env_of(s)["KRAFT_NODE_ID"] for n, s in services.items() if "KRAFT_NODE_ID" in env_of(s)
    }
    assert with_ids == {n: str(i) for n, i in {**CONTROLLERS, **BROKERS}.items()}
    assert set(services) == {*CONTROLLERS, *BROKERS, "broker-net"}  # + the brokers' namespace
    for name, env in nodes(services):
        assert env["KRAFT_PROCESS_ROLES"] == ("controller" if name in CONTROLLERS else "broker")
        for key in COMBINED_NODE_DEFAULTS:
            assert key in env, f"{name} inherits the Dockerfile's combined-node {key}"


def test_one_image_from_the_repos_dockerfile(services: dict[str, Any]) -> None:
    images = {s["image"] for s in services.values()}
    assert len(images) == 1
    for name, service in services.items():
        assert Path(service["build"]["context"]) == ROOT, name
        assert service["build"].get("dockerfile", "Dockerfile") == "Dockerfile", name
        if name != "broker-net":
            assert "entrypoint" not in service and "command" not in service  # `kraft server`


def test_controller_voters_are_identical_and_name_every_controller(
    services: dict[str, Any],
) -> None:
    voters = {env_of(services[n])["KRAFT_CONTROLLER_QUORUM_VOTERS"] for n in CONTROLLERS}
    assert len(voters) == 1
    entries = [v.split("@") for v in voters.pop().split(",")]
    by_id = {int(node_id): address for node_id, address in entries}
    assert by_id == {i: f"{name}:19093" for name, i in CONTROLLERS.items()}


def test_brokers_bootstrap_from_every_controller_listener(services: dict[str, Any]) -> None:
    controller_listeners = set()
    for name in CONTROLLERS:
        env = env_of(services[name])
        (bound,) = parse_listeners(env["KRAFT_LISTENERS"], "listeners")
        (advertised,) = parse_listeners(env["KRAFT_ADVERTISED_LISTENERS"], "advertised")
        assert (bound.name, bound.host) == ("CONTROLLER", "0.0.0.0")
        assert (advertised.name, advertised.host, advertised.port) == (
            "CONTROLLER",
            name,
            bound.port,
        )
        controller_listeners.add(f"{advertised.host}:{advertised.port}")
    assert len(controller_listeners) == 3
    for name in BROKERS:
        servers = env_of(services[name])["KRAFT_CONTROLLER_QUORUM_BOOTSTRAP_SERVERS"]
        assert set(servers.split(",")) == controller_listeners, name


def test_password_only_on_controllers_and_from_the_environment(services: dict[str, Any]) -> None:
    for name, env in nodes(services):
        if name in CONTROLLERS:
            assert env["KRAFT_CONTROLLER_QUORUM_PASSWORD"] == PASSWORD
        else:
            assert "KRAFT_CONTROLLER_QUORUM_PASSWORD" not in env


def test_config_fails_without_a_password() -> None:
    result = docker_compose("config", password=None)
    assert result.returncode != 0
    assert "KRAFT_CONTROLLER_QUORUM_PASSWORD" in result.stderr


def test_one_cluster_id(services: dict[str, Any]) -> None:
    ids = {env["KRAFT_CLUSTER_ID"] for _, env in nodes(services)}
    assert len(ids) == 1 and len(ids.pop()) == 22


def test_brokers_are_reachable_from_the_host_and_from_each_other(services: dict[str, Any]) -> None:
    published = {(p.split(":")[0], p.split(":")[1]) for p in services["broker-net"]["ports"]}
    racks = set()
    for name in BROKERS:
        service, env = services[name], env_of(services[name])
        assert service["network_mode"] == "service:broker-net"  # one loopback for all brokers
        (bound,) = parse_listeners(env["KRAFT_LISTENERS"], "listeners")
        (advertised,) = parse_listeners(env["KRAFT_ADVERTISED_LISTENERS"], "advertised")
        assert (bound.name, bound.host) == ("PLAINTEXT", "0.0.0.0")
        assert (advertised.host, advertised.port) == ("127.0.0.1", bound.port)
        assert ("127.0.0.1", f"{bound.port}") in published
        racks.add(env["KRAFT_BROKER_RACK"])
    ports = [parse_listeners(env_of(services[n])["KRAFT_LISTENERS"], "l")[0].port for n in BROKERS]
    assert ports == [9092, 9093, 9094]
    assert racks == {"rack-1", "rack-2", "rack-3"}


def test_ready_healthchecks_on_each_nodes_own_admin_port(services: dict[str, Any]) -> None:
    admin_ports = []
    for name, env in nodes(services):
        port = env["KRAFT_ADMIN_LISTENER"].rsplit(":", 1)[1]
        test = " ".join(services[name]["healthcheck"]["test"])
        assert test.startswith("CMD ") and f"127.0.0.1:{port}/v1/ready" in test, name
        if name in BROKERS:  # they share one network namespace
            admin_ports.append(port)
    assert len(set(admin_ports)) == 3


def test_brokers_wait_for_healthy_controllers(services: dict[str, Any]) -> None:
    for name in BROKERS:
        depends = services[name]["depends_on"]
        for controller in CONTROLLERS:
            assert depends[controller]["condition"] == "service_healthy", name


def test_a_named_volume_per_node(services: dict[str, Any]) -> None:
    volumes = set()
    for name, _ in nodes(services):
        (mount,) = services[name]["volumes"]
        source, target = mount.split(":")[:2]
        assert target == "/var/lib/kraft" and not source.startswith(("/", ".")), name
        volumes.add(source)
    assert len(volumes) == 6


# --- static checks (no docker-compose) ----------------------------------------------------------


def known_keys() -> set[str]:
    """Keys a node understands: the broker config schema, the keys the kraft package reads
    from its NodeConfig, and INTERFACE.md's configuration table."""
    keys = set(BROKER_CONFIGS)
    read = re.compile(r'\.get(?:_int|_bool)?\(\s*"([a-z][a-z0-9]*(?:\.[a-z0-9]+)+)"')
    for path in (ROOT / "kraft").rglob("*.py"):
        keys |= set(read.findall(path.read_text()))
    if INTERFACE.exists():
        section = INTERFACE.read_text().split("## Configuration keys", 1)[-1].split("\n## ", 1)[0]
        for row in section.splitlines():
            if row.startswith("| `"):
                keys |= set(re.findall(r"`([a-z][a-z0-9.]*)`", row.split("|")[1]))
    return keys


def test_every_kraft_variable_is_a_known_key() -> None:
    names = set(re.findall(r"\bKRAFT_[A-Z0-9_]+", COMPOSE_FILE.read_text()))
    assert names
    unknown = {n for n in names if next(iter(env_overrides({n: ""}))) not in known_keys()}
    assert not unknown, f"not configuration keys: {sorted(unknown)}"


def test_the_password_is_not_in_the_file() -> None:
    values = re.findall(r"KRAFT_CONTROLLER_QUORUM_PASSWORD:\s*(\S+)", COMPOSE_FILE.read_text())
    assert values
    for value in values:
        assert value.startswith("${KRAFT_CONTROLLER_QUORUM_PASSWORD:?"), value


def test_the_file_parses_and_names_every_node() -> None:
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    assert {*CONTROLLERS, *BROKERS} <= set(raw["services"])
    assert set(raw["volumes"]) == {f"{name}-data" for name in (*CONTROLLERS, *BROKERS)}
