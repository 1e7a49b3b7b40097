"""``kraft dev --controllers M --brokers N``: the plan (node ids, ports, racks), the generated
property files, ``cluster.properties`` reuse, and the launcher's supervision of its children
(against stub child processes, not real nodes: the end-to-end test runs real ones)."""

from __future__ import annotations

import asyncio
import io
import stat
import string
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.cli.main import main
from kraft.node.config import ConfigError, load_config, parse_properties
from kraft.node.dev_cluster import Launcher, child_environment, cluster_ready_line
from kraft.node.dev_cluster_files import (
    ClusterIdentity,
    load_or_create_identity,
    new_cluster_id,
    node_properties,
    render_properties,
    write_node_configs,
)
from kraft.node.dev_cluster_plan import (
    ClusterPlan,
    NodeSpec,
    default_admin_port,
    describe_plan,
    pick_free_ports,
    plan_cluster,
)

IDENTITY = ClusterIdentity("MkU3OEVBNTcwNTJENDM2Qk", "s3cret", 3)


def fake_free_ports(start: int = 40000) -> tuple[list[int], Callable[[int], list[int]]]:
    asked: list[int] = []

    def free(count: int) -> list[int]:
        asked.append(count)
        return list(range(start, start + count))

    return asked, free


# --- the plan -----------------------------------------------------------------------------------


def test_default_three_plus_three_layout() -> None:
    plan = plan_cluster(3, 3, 9092, 8080)
    assert [(c.node_id, c.role, c.port, c.raft_port, c.admin_port) for c in plan.controllers] == [
        (1, "controller", 9192, 9292, 8180),
        (2, "controller", 9193, 9293, 8181),
        (3, "controller", 9194, 9294, 8182),
    ]
    assert [(b.node_id, b.role, b.port, b.admin_port, b.rack) for b in plan.brokers] == [
        (4, "broker", 9092, 8080, "rack-1"),
        (5, "broker", 9093, 8081, "rack-2"),
        (6, "broker", 9094, 8082, "rack-3"),
    ]
    assert plan.bootstrap == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    assert plan.quorum_voters == "1@127.0.0.1:9292,2@127.0.0.1:9293,3@127.0.0.1:9294"
    assert plan.quorum_bootstrap_servers == "127.0.0.1:9192,127.0.0.1:9193,127.0.0.1:9194"
    assert all(c.rack is None for c in plan.controllers)


def test_racks_round_robin_and_ids_after_the_controllers() -> None:
    plan = plan_cluster(5, 4, 9092, 8080)
    assert [c.node_id for c in plan.controllers] == [1, 2, 3, 4, 5]
    assert [b.node_id for b in plan.brokers] == [6, 7, 8, 9]
    assert [b.rack for b in plan.brokers] == ["rack-1", "rack-2", "rack-3", "rack-1"]


def test_one_controller_several_brokers() -> None:
    plan = plan_cluster(1, 2, 19092, 18080)
    assert plan.quorum_voters == "1@127.0.0.1:19292"
    assert [b.node_id for b in plan.brokers] == [2, 3]
    assert plan.bootstrap == "127.0.0.1:19092,127.0.0.1:19093"


def test_port_zero_picks_every_port_in_one_call() -> None:
    asked, free = fake_free_ports()
    plan = plan_cluster(3, 2, 0, 0, free)
    assert asked == [2 + 3 + 3 + (2 + 3)]  # kafka + controller + raft, then admin
    ports = [p for n in plan.nodes for p in (n.port, n.admin_port, n.raft_port) if p is not None]
    assert len(ports) == len(set(ports)) == 13 and 0 not in ports


def test_port_zero_with_a_fixed_admin_port() -> None:
    asked, free = fake_free_ports()
    plan = plan_cluster(3, 2, 0, 8080, free)
    assert asked == [8]
    assert [n.admin_port for n in plan.nodes] == [8180, 8181, 8182, 8080, 8081]


def test_default_admin_port_follows_the_single_node_rule() -> None:
    assert default_admin_port(9092, None) == 8080
    assert default_admin_port(0, None) == 0
    assert default_admin_port(500, None) == 0
    assert default_admin_port(9092, 7000) == 7000


@pytest.mark.parametrize(
    ("controllers", "brokers", "port", "admin", "needle"),
    [
        (2, 3, 9092, 8080, "--controllers 2"),
        (4, 3, 9092, 8080, "--controllers 4"),
        (3, 0, 9092, 8080, "--brokers 0"),
        (3, 101, 9092, 8080, "--brokers 101"),
        (3, 3, 65400, 8080, "past 65535"),
        (3, 3, 9092, 65500, "--admin-port 65500"),
        (3, 3, -1, 8080, "outside 0-65535"),
        (3, 3, 9092, 9192, "would serve two nodes"),
        (3, 3, 9092, 8992, "would serve two nodes"),
    ],
)
def test_bad_layouts_are_refused(
    controllers: int, brokers: int, port: int, admin: int, needle: str
) -> None:
    with pytest.raises(ConfigError, match=needle):
        plan_cluster(controllers, brokers, port, admin)


def test_free_ports_are_distinct() -> None:
    ports = pick_free_ports(8)
    assert len(set(ports)) == 8 and all(0 < p < 65536 for p in ports)


def test_describe_plan_names_every_node_and_port() -> None:
    text = "\n".join(describe_plan(plan_cluster(3, 1, 9092, 8080)))
    for needle in ("node-1 controller", "CONTROLLER 127.0.0.1:9192", "Raft 127.0.0.1:9292"):
        assert needle in text
    assert "node-4 broker  PLAINTEXT 127.0.0.1:9092  admin http://127.0.0.1:8080  rack-1" in text


# --- property files -----------------------------------------------------------------------------


def node_config(spec: NodeSpec, plan: ClusterPlan, tmp_path: Path, **overrides: str) -> Path:
    props = node_properties(spec, plan, IDENTITY, tmp_path, overrides)
    path = tmp_path / f"{spec.name}.properties"
    path.write_text(render_properties(props, "test"))
    return path


def test_controller_properties(tmp_path: Path) -> None:
    plan = plan_cluster(3, 3, 9092, 8080)
    cfg = load_config(node_config(plan.controllers[1], plan, tmp_path), environ={})
    assert cfg.node_id == 2 and cfg.process_roles == {"controller"}
    assert [str(x) for x in cfg.listeners] == ["CONTROLLER://127.0.0.1:9193"]
    assert cfg.admin_listener == ("127.0.0.1", 8181)
    assert cfg.get("controller.quorum.voters") == plan.quorum_voters
    assert cfg.get("controller.quorum.password") == "s3cret"
    assert cfg.get("cluster.id") == IDENTITY.cluster_id
    assert cfg.metadata_log_dir == tmp_path / "node-2" / "metadata"
    assert cfg.log_dirs == (tmp_path / "node-2" / "logs",)


def test_broker_properties(tmp_path: Path) -> None:
    plan = plan_cluster(3, 3, 9092, 8080)
    cfg = load_config(node_config(plan.brokers[2], plan, tmp_path), environ={})
    assert cfg.node_id == 6 and cfg.process_roles == {"broker"}
    assert [str(x) for x in cfg.listeners] == ["PLAINTEXT://127.0.0.1:9094"]
    assert cfg.get("controller.quorum.bootstrap.servers") == plan.quorum_bootstrap_servers
    assert cfg.get("broker.rack") == "rack-3"
    assert cfg.get("cluster.id") == IDENTITY.cluster_id
    assert cfg.get("controller.quorum.password") is None  # never given to brokers
    assert cfg.get("controller.quorum.voters") is None


def test_broker_tuning_keys_reach_the_broker(tmp_path: Path) -> None:
    from kraft.node.run import broker_config

    plan = plan_cluster(1, 1, 9092, 8080)
    path = node_config(plan.brokers[0], plan, tmp_path)
    overrides = {"producer.id.expiration.ms": "5000", "replica.lag.time.max.ms": "900"}
    bcfg = broker_config(load_config(path, overrides, environ={}))
    assert (bcfg.producer_id_expiration_ms, bcfg.replica_lag_time_max_ms) == (5000, 900)
    assert bcfg.producer_id_expiration_check_interval_ms == 600_000
    with pytest.raises(ConfigError, match=r"producer\.id\.expiration\.ms=0 must be at least 1"):
        broker_config(load_config(path, {"producer.id.expiration.ms": "0"}, environ={}))


def test_brokers_bootstrap_from_every_controllers_controller_listener() -> None:
    plan = plan_cluster(5, 2, 9092, 8080)
    listeners = {f"127.0.0.1:{c.port}" for c in plan.controllers}
    assert set(plan.quorum_bootstrap_servers.split(",")) == listeners
    voters = plan.quorum_voters.split(",")
    assert [v.split("@")[0] for v in voters] == ["1", "2", "3", "4", "5"]


def test_overrides_go_to_every_node_and_win(tmp_path: Path) -> None:
    plan = plan_cluster(1, 2, 9092, 8080)
    for spec in plan.nodes:
        props = node_properties(spec, plan, IDENTITY, tmp_path, {"num.partitions": "3"})
        assert props["num.partitions"] == "3"
    props = node_properties(plan.brokers[0], plan, IDENTITY, tmp_path, {"broker.rack": "east"})
    assert props["broker.rack"] == "east"


PROPERTY_TEXT = st.text(
    alphabet=string.ascii_letters + string.digits + string.punctuation + " \t\n\r\f", max_size=30
).filter(lambda s: s == s.rstrip(" \t\n\r\f"))  # the parser trims trailing whitespace
PROPERTY_KEY = st.text(
    alphabet=string.ascii_letters + string.digits + string.punctuation + " ", min_size=1
)


@given(st.dictionaries(PROPERTY_KEY, PROPERTY_TEXT, max_size=5))
def test_rendered_properties_read_back_exactly(props: dict[str, str]) -> None:
    assert parse_properties(render_properties(props, "header")) == props


def test_windows_paths_and_odd_values_read_back() -> None:
    props = {"log.dirs": "C:\\kraft data\\logs", "x": " leading=space:#!", "y": "a\\"}
    assert parse_properties(render_properties(props, "h")) == props


def test_unwritable_line_breaks_are_refused() -> None:
    with pytest.raises(ConfigError, match="line-break"):
        render_properties({"k": "a\u2028b"}, "h")


def test_write_node_configs(tmp_path: Path) -> None:
    plan = plan_cluster(3, 2, 9092, 8080)
    paths = write_node_configs(plan, IDENTITY, tmp_path, {})
    assert sorted(paths) == [1, 2, 3, 4, 5]
    for node_id, path in paths.items():
        assert path == tmp_path / f"node-{node_id}" / "server.properties"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600  # controllers' hold the password
        assert load_config(path, environ={}).node_id == node_id
    moved = plan_cluster(3, 2, 19092, 18080)
    write_node_configs(moved, IDENTITY, tmp_path, {})  # rewritten on every start
    assert "PLAINTEXT://127.0.0.1:19092" in paths[4].read_text()


# --- cluster.properties -------------------------------------------------------------------------


def test_identity_is_created_once_and_reused(tmp_path: Path) -> None:
    first = load_or_create_identity(tmp_path, 3)
    path = tmp_path / "cluster.properties"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first.cluster_id) == 22 and len(first.quorum_password) >= 24
    assert load_or_create_identity(tmp_path, 3) == first
    other = tmp_path / "other"
    assert load_or_create_identity(other, 3).cluster_id != first.cluster_id


def test_identity_refuses_another_controller_count(tmp_path: Path) -> None:
    load_or_create_identity(tmp_path, 3)
    with pytest.raises(ConfigError, match="--controllers 3"):
        load_or_create_identity(tmp_path, 5)


def test_identity_refuses_a_damaged_file(tmp_path: Path) -> None:
    (tmp_path / "cluster.properties").write_text("cluster.id=abc\ncontrollers=3\n")
    with pytest.raises(ConfigError, match=r"lacks controller\.quorum\.password"):
        load_or_create_identity(tmp_path, 3)


def test_cluster_ids_are_kafka_style() -> None:
    ids = {new_cluster_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(
        len(i) == 22 and set(i) <= set(string.ascii_letters + string.digits + "-_") for i in ids
    )


# --- environment and READY ----------------------------------------------------------------------


def test_children_ignore_kraft_settings_but_keep_the_log_level() -> None:
    env = child_environment(
        {"PATH": "/bin", "KRAFT_LISTENERS": "PLAINTEXT://:1", "KRAFT_LOG_LEVEL": "INFO"}
    )
    assert env["PATH"] == "/bin" and env["KRAFT_LOG_LEVEL"] == "INFO"
    assert "KRAFT_LISTENERS" not in env


def test_cluster_ready_line() -> None:
    plan = plan_cluster(3, 3, 9092, 8080)
    lines = [
        "READY bootstrap=127.0.0.1:9092 admin=http://127.0.0.1:8080",
        "READY bootstrap=127.0.0.1:9093 admin=http://127.0.0.1:8081",
        "READY",  # a broker that says less: the plan fills it in
    ]
    assert cluster_ready_line(plan, lines) == (
        "READY bootstrap=127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094 admin=http://127.0.0.1:8080"
    )


def test_cli_refuses_bad_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dev", "--data-dir", str(tmp_path), "--controllers", "3", "--brokers", "0"]) == 2
    assert "--brokers 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["dev", "--controllers", "2"])
    assert exc.value.code == 2
    assert not (tmp_path / "cluster.properties").exists()


# --- the launcher, with stub children -----------------------------------------------------------

STUB = textwrap.dedent(
    """
    import signal, sys, time
    text = open(sys.argv[1]).read().splitlines()
    props = dict(line.split("=", 1) for line in text if "=" in line and line[0] != "#")
    mode = sys.argv[2]
    print("booting", props["node.id"], file=sys.stderr, flush=True)
    if mode == "fail":
        print("cannot bind the port", file=sys.stderr, flush=True)
        sys.exit(3)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    address = props["listeners"].split("://")[1]
    word = "bootstrap" if props["process.roles"] == "broker" else "controller"
    if mode != "hang":
        print("a log line on stdout", flush=True)
        print(f"READY {word}={address} admin={props['admin.listener']}", flush=True)
    if mode == "crash":
        time.sleep(0.3)
        sys.exit(4)
    time.sleep(60)
    """
)


def run_launcher(
    tmp_path: Path,
    modes: dict[int, str],
    *,
    stop_when_ready: bool = True,
    **kwargs: float,
) -> tuple[int, list[str], str, Launcher]:
    plan = plan_cluster(3, 2, 0, 0)
    configs = write_node_configs(plan, IDENTITY, tmp_path, {})
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    announced: list[str] = []
    err = io.StringIO()

    def command(spec: NodeSpec, config: Path) -> Sequence[str]:
        return [sys.executable, str(stub), str(config), modes.get(spec.node_id, "ok")]

    def announce(line: str) -> None:
        announced.append(line)
        if stop_when_ready:
            launcher.stopping.set()  # as SIGTERM does

    launcher = Launcher(plan, configs, announce, err, command=command, **kwargs)
    status = asyncio.run(launcher.run())
    assert all(c.proc.returncode is not None for c in launcher.children)
    return status, announced, err.getvalue(), launcher


@pytest.mark.integration
def test_launcher_announces_one_ready_line_and_stops_on_signal(tmp_path: Path) -> None:
    status, announced, err, launcher = run_launcher(tmp_path, {})
    assert status == 0
    plan = launcher.plan
    assert announced == [f"READY bootstrap={plan.bootstrap} admin={plan.brokers[0].admin_url}"]
    assert "[node-1] booting 1" in err and "[node-5] a log line on stdout" in err
    assert "controllers ready" in err
    assert [c.spec.node_id for c in launcher.children] == [1, 2, 3, 4, 5]  # controllers first


@pytest.mark.integration
def test_launcher_reports_a_node_that_fails_to_start(tmp_path: Path) -> None:
    status, announced, err, launcher = run_launcher(tmp_path, {2: "fail"})
    assert status == 1 and announced == []
    assert "node-2 (controller) exited with code 3 before it was ready" in err
    assert "    cannot bind the port" in err
    assert all(c.spec.role == "controller" for c in launcher.children)  # brokers never started


@pytest.mark.integration
def test_launcher_reports_a_node_that_dies_while_running(tmp_path: Path) -> None:
    status, announced, err, _ = run_launcher(tmp_path, {5: "crash"}, stop_when_ready=False)
    assert status == 1 and len(announced) == 1
    assert "node-5 (broker) exited with code 4 while the cluster was running" in err
    assert "stopping the other nodes" in err


@pytest.mark.integration
def test_launcher_startup_deadline(tmp_path: Path) -> None:
    status, announced, err, _ = run_launcher(tmp_path, {4: "hang"}, startup_deadline_s=1.5)
    assert status == 1 and announced == []
    assert "not ready after 1.5 s; still waiting for node-4 (broker)" in err
    assert "kraft cluster status --admin" in err


@pytest.mark.integration
def test_launcher_kills_a_node_that_ignores_sigterm(tmp_path: Path) -> None:
    status, _, err, launcher = run_launcher(tmp_path, {4: "stubborn"}, stop_grace_s=0.5)
    assert status == 0
    assert "node-4 still runs 0.5 s after SIGTERM" in err
    (node_4,) = [c for c in launcher.children if c.spec.node_id == 4]
    assert node_4.proc.returncode == -9
