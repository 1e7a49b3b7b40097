"""A real kraft cluster for a test: :func:`cluster` (a context manager) and :class:`KraftCluster`.

::

    with kraft.testing.cluster(brokers=3, partitions=3) as c:
        c.create_topic("orders", replication_factor=3)
        producer = confluent_kafka.Producer(c.client_config())

The nodes are the ``kraft server`` processes a user or a container runs, with their ports from
:mod:`kraft.testing.ports` (free for this process, kept across restarts) and their data in a
temporary directory removed at the end (or in ``data_dir``, left to its owner).  Closing stops
the brokers, then the controllers (SIGTERM, then SIGKILL after ``stop_grace_s``).
"""

from __future__ import annotations

import logging
import shutil
import signal
import ssl
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kraft.cli.admin_auth import AdminLogin
from kraft.node.dev_cluster_files import (
    NODE_CONFIG_FILE,
    load_or_create_identity,
    node_properties,
    render_properties,
    write_node_configs,
    write_private,
)
from kraft.node.dev_cluster_plan import HOST, ClusterPlan, NodeSpec, plan_cluster
from kraft.node.dev_secure import (
    ADMIN_USER,
    CLIENT_MECHANISM,
    SecureDev,
    prepare_secure_cluster,
    prepare_secure_dev,
)
from kraft.testing.nodes import ClusterStartError, NodeProcess, stop_nodes, wait_ready
from kraft.testing.ports import free_ports
from kraft.testing.rest import ClusterRest, Record, Value
from kraft.testing.spec import ClusterSpec

START_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
# Settings for quick tests (a spec's overrides win): a consumer group's first member is not
# held back 3 s for others to join, and a killed broker is fenced (its partitions get new
# leaders, it leaves their ISRs) 3 s after its last heartbeat instead of 9 s.
TEST_DEFAULTS = {
    "group.initial.rebalance.delay.ms": "0",
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
}

__all__ = ["ClusterStartError", "KraftCluster", "Record", "cluster"]


class KraftCluster:
    """A running cluster: addresses, client settings, node control and REST helpers."""

    def __init__(
        self,
        spec: ClusterSpec,
        data_dir: Path,
        *,
        remove_data: bool,
        start_timeout_s: float = START_TIMEOUT_S,
        stop_grace_s: float = STOP_GRACE_S,
    ) -> None:
        self.spec = spec
        self.data_dir = data_dir
        self.start_timeout_s = start_timeout_s
        self.stop_grace_s = stop_grace_s
        self._remove_data = remove_data
        self._secure: SecureDev | None = None
        self.nodes: dict[int, NodeProcess] = {}
        self._closed = False
        self._plan_nodes()
        self.rest = ClusterRest(self._admin_urls, self._admin_login())

    @property
    def admin_url(self) -> str:
        """The first broker's REST admin API (https for a secure single node)."""
        return self.admin_url_of(self.brokers[0])

    def admin_url_of(self, node: NodeProcess) -> str:
        return node.spec.admin_url.replace(
            "http://", "https://" if self._admin_https else "http://"
        )

    def _admin_urls(self) -> list[str]:
        running = [b for b in self.brokers if b.serving()] or self.brokers
        return [self.admin_url_of(b) for b in running]

    # --- planning and files ---------------------------------------------------------------

    @property
    def _admin_https(self) -> bool:
        return self.spec.secure and self.spec.is_combined  # as `kraft dev --secure`

    def _plan_nodes(self) -> None:
        spec, data = self.spec, self.data_dir
        overrides = {**TEST_DEFAULTS, "num.partitions": str(spec.partitions), **spec.overrides}
        plan = plan_cluster(spec.controllers, spec.brokers, 0, 0, free_ports=free_ports)
        if spec.is_combined:
            self._plan_combined(plan, overrides)
            return
        identity = load_or_create_identity(data, spec.controllers)
        settings = None
        if spec.secure:
            metadata = [(s.node_id, s.role, data / s.name / "metadata") for s in plan.nodes]
            self._secure, settings = prepare_secure_cluster(data, metadata)
        configs = write_node_configs(plan, identity, data, overrides, settings)
        for s in plan.nodes:
            path = configs[s.node_id]
            self.nodes[s.node_id] = NodeProcess(s, s.role, path, path.parent)

    def _plan_combined(self, plan: ClusterPlan, overrides: Mapping[str, str]) -> None:
        """One node, controller and broker, as ``kraft dev`` runs it (no Raft port: a single
        voter), on the ports ``plan`` gives its broker."""
        data = self.data_dir
        node = NodeSpec(1, "broker", plan.brokers[0].port, plan.brokers[0].admin_port)
        identity = load_or_create_identity(data, 1)
        props = node_properties(node, plan, identity, data, {})
        props["process.roles"] = "broker,controller"
        for key in ("controller.quorum.bootstrap.servers", "broker.rack"):
            props.pop(key, None)
        if self.spec.secure:
            self._secure = prepare_secure_dev(data, data / node.name / "metadata")
            props.update(self._secure.overrides(node.port))
            props["admin.listener"] = node.admin_url.replace("http://", "https://")
        props.update(overrides)
        config = data / node.name / NODE_CONFIG_FILE
        write_private(config, render_properties(props, "generated by kraft.testing"))
        self.nodes[1] = NodeProcess(node, "broker,controller", config, config.parent)

    def _admin_login(self) -> AdminLogin:
        if self._secure is None:
            return AdminLogin()
        context = ssl.create_default_context(cafile=str(self._secure.ca_file))
        return AdminLogin(ADMIN_USER, self._secure.password, context)

    # --- the nodes ------------------------------------------------------------------------

    @property
    def brokers(self) -> list[NodeProcess]:
        return [n for n in self.nodes.values() if n.is_broker]

    @property
    def controllers(self) -> list[NodeProcess]:
        return [n for n in self.nodes.values() if "controller" in n.role]

    @property
    def broker_ids(self) -> list[int]:
        return [n.node_id for n in self.brokers]

    @property
    def pids(self) -> dict[int, int]:
        """The running nodes' process ids, by node id."""
        return {i: n.pid for i, n in self.nodes.items() if n.alive() and n.pid is not None}

    @property
    def ports(self) -> list[int]:
        """Every port the nodes bind (Kafka, CONTROLLER, Raft and REST)."""
        out = []
        for n in self.nodes.values():
            out += [n.spec.port, n.spec.admin_port]
            if n.spec.raft_port is not None and not self.spec.is_combined:
                out.append(n.spec.raft_port)
        return out

    def start(self) -> KraftCluster:
        """Start every node together (brokers wait for the controllers themselves) and wait
        for their READY lines; on failure stop them all and raise :class:`ClusterStartError`."""
        try:
            for node in self.nodes.values():
                node.launch()
            wait_ready(list(self.nodes.values()), self.start_timeout_s)
        except BaseException:  # a failure, or Ctrl-C while starting: leave nothing behind
            self.close()
            raise
        return self

    @property
    def bootstrap_servers(self) -> str:
        """The brokers' ``host:port`` list, every broker (running or not)."""
        return ",".join(f"{HOST}:{b.spec.port}" for b in self.brokers)

    def broker(self, node_id: int) -> NodeProcess:
        node = self.nodes.get(node_id)
        if node is None or not node.is_broker:
            raise KeyError(f"no broker {node_id}: the brokers are {self.broker_ids}")
        return node

    def kill_broker(self, node_id: int) -> None:
        """SIGKILL broker ``node_id``: no clean shutdown (as a crash or ``kill -9``)."""
        node = self.broker(node_id)
        node.signal(signal.SIGKILL)
        if node.proc is not None:
            node.proc.wait()

    def stop_broker(self, node_id: int) -> None:
        """SIGTERM broker ``node_id`` and wait (its controlled shutdown); SIGKILL after the
        grace period."""
        stop_nodes([self.broker(node_id)], self.stop_grace_s)

    def pause_broker(self, node_id: int) -> None:
        """SIGSTOP broker ``node_id``: a hung process (its sockets stay open, nothing answers;
        the controller fences it after ``broker.session.timeout.ms``)."""
        self.broker(node_id).signal(signal.SIGSTOP)

    def resume_broker(self, node_id: int) -> None:
        """SIGCONT a paused broker."""
        self.broker(node_id).signal(signal.SIGCONT)

    def restart_broker(self, node_id: int) -> None:
        """Start broker ``node_id`` again (stopped or killed; a running one is stopped first)
        on the same ports and data, and wait for its READY line."""
        node = self.broker(node_id)
        if node.alive():
            stop_nodes([node], self.stop_grace_s)
        node.launch()
        try:
            wait_ready([node], self.start_timeout_s)
        except ClusterStartError:
            stop_nodes([node], self.stop_grace_s)
            raise

    # --- clients --------------------------------------------------------------------------

    @property
    def ca_file(self) -> Path | None:
        return self._secure.ca_file if self._secure is not None else None

    @property
    def admin_user(self) -> tuple[str, str] | None:
        """The super user's name and password of a secure cluster."""
        return (ADMIN_USER, self._secure.password) if self._secure is not None else None

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka (confluent-kafka) settings for this cluster, with ``extra`` on top
        (write ``group_id="g"`` as ``**{"group.id": "g"}``)."""
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        if self._secure is not None:
            config.update(
                {
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanisms": CLIENT_MECHANISM,
                    "sasl.username": ADMIN_USER,
                    "sasl.password": self._secure.password,
                    "ssl.ca.location": str(self._secure.ca_file),
                }
            )
        return {**config, **extra}

    def kafka_python_config(self) -> dict[str, Any]:
        """kafka-python / aiokafka keyword arguments for this cluster."""
        config: dict[str, Any] = {"bootstrap_servers": self.bootstrap_servers.split(",")}
        if self._secure is not None:
            config.update(
                security_protocol="SASL_SSL",
                sasl_mechanism=CLIENT_MECHANISM,
                sasl_plain_username=ADMIN_USER,
                sasl_plain_password=self._secure.password,
                ssl_cafile=str(self._secure.ca_file),
            )
        return config

    # --- REST helpers ---------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        configs: Mapping[str, str] | None = None,
        *,
        timeout_s: float = 30.0,
    ) -> dict[str, Any]:
        """Create topic ``name`` (``partitions`` default: the cluster's ``partitions``;
        ``replication_factor``: the brokers', 1 by default) and wait until every partition
        has a leader; returns its description (``GET /v1/topics/{name}``)."""
        return self.rest.create_topic(name, partitions, replication_factor, configs, timeout_s)

    def describe_topic(self, name: str) -> dict[str, Any]:
        return self.rest.describe_topic(name)

    def produce(
        self,
        topic: str,
        values: Iterable[Value | Record],
        *,
        key: Value = None,
        partition: int | None = None,
    ) -> list[tuple[int, int]]:
        """Produce ``values`` (bytes, str, None or :class:`Record`) to ``topic``; returns each
        record's (partition, offset)."""
        return self.rest.produce(topic, values, key, partition)

    def consume(
        self,
        topic: str,
        *,
        count: int | None = None,
        partitions: Iterable[int] | None = None,
        timeout_s: float = 10.0,
    ) -> list[Record]:
        """The committed records of ``topic`` from the start (every partition, or
        ``partitions``), ordered by partition then offset.  ``count``: wait until there are at
        least that many (:class:`TimeoutError` after ``timeout_s``); else what is there now."""
        return self.rest.consume(topic, count, partitions, timeout_s)

    def wait_for_isr(
        self,
        topic: str,
        partition: int = 0,
        *,
        size: int | None = None,
        replicas: Iterable[int] | None = None,
        timeout_s: float = 30.0,
    ) -> list[int]:
        """Until the ISR of ``topic``-``partition`` has ``size`` members, or exactly the
        ``replicas`` given, or (neither given) all of its replicas; returns the ISR."""
        return self.rest.wait_for_isr(topic, partition, size, replicas, timeout_s)

    # --- closing --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the brokers, then the controllers; remove a temporary data directory."""
        if self._closed:
            return
        self._closed = True
        killed = stop_nodes(self.brokers, self.stop_grace_s)
        killed += stop_nodes([n for n in self.controllers if not n.is_broker], self.stop_grace_s)
        if self._remove_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        if killed:
            logging.getLogger(__name__).warning("kraft.testing: %s", "; ".join(killed))

    def logs(self, lines: int = 30) -> str:
        """Every node's last stderr lines (for a failure message)."""
        return "\n".join(f"--- {n.describe()}: {n.log_tail(lines)}" for n in self.nodes.values())

    def __enter__(self) -> KraftCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KraftCluster({self.spec.id}, bootstrap={self.bootstrap_servers})"


@contextmanager
def cluster(
    brokers: int = 1,
    controllers: int = 1,
    partitions: int = 1,
    *,
    secure: bool = False,
    combined: bool | None = None,
    overrides: Mapping[str, str] | None = None,
    data_dir: str | Path | None = None,
    spec: ClusterSpec | None = None,
    start_timeout_s: float = START_TIMEOUT_S,
    stop_grace_s: float = STOP_GRACE_S,
) -> Iterator[KraftCluster]:
    """A started cluster for the ``with`` block, closed at its end whatever happens."""
    with start_cluster(
        spec
        or ClusterSpec(brokers, controllers, partitions, secure, combined, dict(overrides or {})),
        data_dir,
        start_timeout_s=start_timeout_s,
        stop_grace_s=stop_grace_s,
    ) as running:
        yield running


def start_cluster(
    spec: ClusterSpec,
    data_dir: str | Path | None = None,
    *,
    start_timeout_s: float = START_TIMEOUT_S,
    stop_grace_s: float = STOP_GRACE_S,
) -> KraftCluster:
    """Start a cluster of ``spec``; the caller closes it (``close()`` or ``with``)."""
    if data_dir is None:
        directory, remove = Path(tempfile.mkdtemp(prefix=f"kraft-{spec.id}-")), True
    else:
        directory, remove = Path(data_dir).expanduser().resolve(), False
        directory.mkdir(parents=True, exist_ok=True)
    try:
        running = KraftCluster(
            spec,
            directory,
            remove_data=remove,
            start_timeout_s=start_timeout_s,
            stop_grace_s=stop_grace_s,
        )
    except BaseException:
        if remove:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    return running.start()
