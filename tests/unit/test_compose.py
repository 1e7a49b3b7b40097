"""docker-compose.yml: a secured 3 controllers + 3 brokers from the repo's image, checked on the
file as ``docker-compose config`` normalizes it (anchors merged, variables interpolated; no
Docker engine needed) and, statically, against the configuration keys the nodes understand.
``tests/container/test_compose_cluster.py`` runs the file for real on a Docker engine.

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
INTERFACE = ROOT / "docs" / "INTERFACE.md"
PASSWORD = "test-quorum-secret-0123456789"
SECRETS = {
    "KRAFT_CONTROLLER_QUORUM_PASSWORD": PASSWORD,
    "KRAFT_ADMIN_PASSWORD": "test-admin-secret",
    "KRAFT_BROKER_PASSWORD": "test-broker-secret",
}
CONTROLLERS = {"controller-1": 1, "controller-2": 2, "controller-3": 3}
BROKERS = {"broker-1": 4, "broker-2": 5, "broker-3": 6}
# The Dockerfile's ENV describes one combined node: every node of the cluster overrides these.
COMBINED_NODE_DEFAULTS = (
    "KRAFT_NODE_ID",
    "KRAFT_PROCESS_ROLES",
    "KRAFT_LISTENERS",
    "KRAFT_ADVERTISED_LISTENERS",
    "KRAFT_ADMIN_LISTENER",
    "KRAFT_SECURITY_AUTOCONFIGURE",
)


def docker_compose(*args: str, without: str | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail(
            "docker-compose is not installed: `apt-get install docker-compose` (Debian's package;"
            " .ci/run installs it)"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KRAFT_", "COMPOSE_"))}
    env.update({k: v for k, v in SECRETS.items() if k != without})
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


def listeners_of(env: dict[str, str], key: str) -> dict[str, tuple[str, int]]:
    return {x.name: (x.host, x.port) for x in parse_listeners(env[key], key)}


# --- docker-compose config ----------------------------------------------------------------------


def test_six_nodes_with_unique_ids_and_roles(services: dict[str, Any]) -> None:
    with_ids = {
        n: env_of(s)["KRAFT_NODE_ID"] for n, s in services.items() if "KRAFT_NODE_ID" in env_of(s)
    }
    assert with_ids == {n: str(i) for n, i in {**CONTROLLERS, **BROKERS}.items()}
    assert set(services) == {*CONTROLLERS, *BROKERS, "certs"}  # + the one-shot CA
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
        if name in BROKERS:
            assert "entrypoint" not in service and "command" not in service  # `kraft server`
        if name in CONTROLLERS:  # SCRAM users first, then exactly `kraft server`
            script = service["entrypoint"][-1]
            assert script.startswith("kraft storage format") and script.endswith(
                "&& exec kraft server"
            )


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
        bound = listeners_of(env, "KRAFT_LISTENERS")
        advertised = listeners_of(env, "KRAFT_ADVERTISED_LISTENERS")
        assert bound == {"CONTROLLER": ("0.0.0.0", 9093)}
        assert advertised == {"CONTROLLER": (name, 9093)}
        controller_listeners.add(f"{name}:9093")
    for name in BROKERS:
        servers = env_of(services[name])["KRAFT_CONTROLLER_QUORUM_BOOTSTRAP_SERVERS"]
        assert set(servers.split(",")) == controller_listeners, name


def test_every_listener_is_sasl_ssl_with_scram(services: dict[str, Any]) -> None:
    for name, env in nodes(services):
        protocols = dict(
            item.split(":") for item in env["KRAFT_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
        )
        for listener in listeners_of(env, "KRAFT_LISTENERS"):
            assert protocols[listener] == "SASL_SSL", (name, listener)
        assert env["KRAFT_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512"
        assert env["KRAFT_SASL_MECHANISM_INTER_BROKER_PROTOCOL"] == "SCRAM-SHA-512"
        assert env["KRAFT_SASL_MECHANISM_CONTROLLER_PROTOCOL"] == "SCRAM-SHA-512"
        assert env["KRAFT_SSL_KEYSTORE_LOCATION"] == f"/etc/kraft/certs/{name}.pem"
        assert env["KRAFT_SSL_TRUSTSTORE_LOCATION"] == "/etc/kraft/certs/ca.pem"
        assert SECRETS["KRAFT_BROKER_PASSWORD"] in env["KRAFT_SASL_JAAS_CONFIG"]
        assert env["KRAFT_AUTHORIZER_CLASS_NAME"].endswith("StandardAuthorizer")
        assert env["KRAFT_ADMIN_LISTENER"] == "https://0.0.0.0:8080"
        assert env["KRAFT_SECURITY_AUTOCONFIGURE"] == "false"  # one CA, shared users


def test_the_certs_service_makes_a_certificate_per_node(services: dict[str, Any]) -> None:
    certs = services["certs"]
    made = certs["entrypoint"]
    assert made[:4] == ["kraft-entrypoint", "kraft", "certs", "create"]
    for name in (*CONTROLLERS, *BROKERS):
        assert any(arg.split("=")[0] == name for arg in made), name
    for name in (*CONTROLLERS, *BROKERS):  # host clients and the probes check 127.0.0.1
        (arg,) = [a for a in made if a.startswith(f"{name}=")]
        assert {"127.0.0.1", "localhost", name} <= set(arg.split("=")[1].split(","))
    for name, _ in nodes(services):
        assert services[name]["depends_on"].keys() >= ({"certs"} if name in CONTROLLERS else set())
        assert "certs:/etc/kraft/certs:ro" in services[name]["volumes"], name


def test_password_only_on_controllers_and_from_the_environment(services: dict[str, Any]) -> None:
    for name, env in nodes(services):
        if name in CONTROLLERS:
            assert env["KRAFT_CONTROLLER_QUORUM_PASSWORD"] == PASSWORD
        else:
            assert "KRAFT_CONTROLLER_QUORUM_PASSWORD" not in env


@pytest.mark.parametrize("secret", sorted(SECRETS))
def test_config_fails_without_each_secret(secret: str) -> None:
    result = docker_compose("config", without=secret)
    assert result.returncode != 0
    assert secret in result.stderr


def test_one_cluster_id(services: dict[str, Any]) -> None:
    ids = {env["KRAFT_CLUSTER_ID"] for _, env in nodes(services)}
    assert len(ids) == 1 and len(ids.pop()) == 22


def test_internal_and_external_listeners_each_broker_its_own_container(
    services: dict[str, Any],
) -> None:
    racks, host_ports = set(), []
    for name in BROKERS:
        service, env = services[name], env_of(services[name])
        assert "network_mode" not in service  # its own network namespace
        assert listeners_of(env, "KRAFT_LISTENERS") == {
            "INTERNAL": ("0.0.0.0", 19092),
            "EXTERNAL": ("0.0.0.0", 9092),
        }
        advertised = listeners_of(env, "KRAFT_ADVERTISED_LISTENERS")
        assert advertised["INTERNAL"] == (name, 19092)  # by service name inside the network
        host, port = advertised["EXTERNAL"]
        assert host == "127.0.0.1"
        published = [str(p).removesuffix("/tcp") for p in service["ports"]]
        assert f"127.0.0.1:{port}:9092" in published  # on the host's loopback only
        assert env["KRAFT_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"
        host_ports.append(port)
        racks.add(env["KRAFT_BROKER_RACK"])
    assert host_ports == [9092, 9093, 9094]
    assert racks == {"rack-1", "rack-2", "rack-3"}


def test_nothing_is_published_beyond_the_hosts_loopback(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for port in service.get("ports") or ():
            assert str(port).startswith("127.0.0.1:"), (name, port)


def test_ready_healthchecks_over_https(services: dict[str, Any]) -> None:
    """`kraft healthcheck --ready` reads the node's own admin listener (https) and truststore."""
    for name, env in nodes(services):
        assert services[name]["healthcheck"]["test"] == ["CMD", "kraft", "healthcheck", "--ready"]
        assert env["KRAFT_ADMIN_LISTENER"].startswith("https://"), name
        assert env["KRAFT_SSL_TRUSTSTORE_LOCATION"] == "/etc/kraft/certs/ca.pem", name


def test_one_shot_commands_run_as_kraft_through_the_entrypoint(services: dict[str, Any]) -> None:
    """The image starts as root: a command given instead of its entrypoint must pass through
    kraft-entrypoint, or the files it writes (certificates, SCRAM users) are root's."""
    for name in ("certs", *CONTROLLERS):
        assert services[name]["entrypoint"][0] == "kraft-entrypoint", name


def test_brokers_wait_for_healthy_controllers(services: dict[str, Any]) -> None:
    for name in BROKERS:
        depends = services[name]["depends_on"]
        for controller in CONTROLLERS:
            assert depends[controller]["condition"] == "service_healthy", name
    for name in CONTROLLERS:
        assert services[name]["depends_on"]["certs"]["condition"] == (
            "service_completed_successfully"
        )


def test_a_named_volume_per_node(services: dict[str, Any]) -> None:
    volumes = set()
    for name, _ in nodes(services):
        data = [m for m in services[name]["volumes"] if m.split(":")[1] == "/var/lib/kraft"]
        (mount,) = data
        source = mount.split(":")[0]
        assert not source.startswith(("/", ".")), name
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


def test_every_kraft_variable_is_a_known_key(services: dict[str, Any]) -> None:
    names = {k for _, env in nodes(services) for k in env if k.startswith("KRAFT_")}
    assert names
    unknown = {n for n in names if next(iter(env_overrides({n: ""}))) not in known_keys()}
    assert not unknown, f"not configuration keys: {sorted(unknown)}"


def test_no_secret_is_in_the_file() -> None:
    text = COMPOSE_FILE.read_text()
    for secret in SECRETS:
        uses = re.findall(rf"\$\{{{secret}([^}}]*)\}}", text)
        assert uses, secret
        assert all(use.startswith(":?") for use in uses), (secret, uses)
    # every password= names a variable, never a value
    assert re.findall(r"password=\"?([^\"\s\]]*)", text)
    for value in re.findall(r"password=\"?([^\"\s\]]*)", text):
        assert value.startswith(("${KRAFT_", "$$SCRAM_", "$KRAFT_")), value


def test_the_file_parses_and_names_every_node() -> None:
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    assert {*CONTROLLERS, *BROKERS, "certs"} <= set(raw["services"])
    assert set(raw["volumes"]) == {"certs"} | {f"{name}-data" for name in (*CONTROLLERS, *BROKERS)}
