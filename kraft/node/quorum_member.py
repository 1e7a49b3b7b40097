"""The two roles of a node in a multi-node cluster, as the node starts and stops them.

``QuorumMember`` (``process.roles`` has ``controller``): one Raft voter running the
controller state machine (:class:`QuorumController`) and the CONTROLLER listener that
brokers talk to (:class:`ControllerApis`).  The node's own admin requests (its REST API's
writes) go through :class:`QuorumForwarder`: run here when this controller is the active one,
else forwarded to the active one like a broker's, over the controller listeners named by
``controller.quorum.bootstrap.servers`` (Kafka 3.9's key, optional on a controller) or, without
that key, through a live broker.

``BrokerMember`` (``process.roles`` has ``broker``): a broker that follows the quorum. It
starts its Kafka listener, tails the committed metadata log (every change reaches the
broker as an image delta), registers, and heartbeats; it is ready once unfenced and caught
up. Admin requests it receives are forwarded to the active controller. On shutdown it asks
the controller to move its leaderships away first (controlled shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from broker.broker import Broker, BrokerConfig
from broker.controller_channel import Forwarder, forwarded_api
from broker.dispatcher import RequestDispatcher
from broker.handlers.acls import SecurityAdminHandlers
from broker.kafka_client import ControllerClient
from broker.lifecycle import BrokerLifecycle, BrokerLifecycleError
from broker.metadata_follower import MetadataFollower
from broker.metrics import BrokerMetrics
from broker.remote_controller import RemoteControllerChannel
from broker.replication.alter_partition import AlterPartitionSender
from broker.security.authorization import AuthorizerSettings, BrokerAuthorizer
from broker.security.client_security import ClientSecurity
from broker.server import KafkaListener
from broker.storage import FileStorage
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import DescribeQuorumRequest, DescribeQuorumResponse
from kafka_protocol.types import TopicName
from kraft.controller.result import ControllerConfig
from kraft.node.bootstrap_scram import with_bootstrap_records
from kraft.node.config import ConfigError, NodeConfig, listener_limits
from kraft.node.controller_apis import ControllerApis
from kraft.node.security_config import (
    check_quorum_password,
    controller_client,
    controller_listener,
    image_scram_lookup,
    inter_broker_client,
    security_of,
)
from kraft.quorum.quorum_controller import DEFAULT_SNAPSHOT_INTERVAL_BYTES, QuorumController
from kraft.quorum.raft import RaftSettings
from metadata_log.delta import MetadataDelta
from metadata_log.image import ClusterImage

__all__ = [
    "BrokerLifecycleError",
    "BrokerMember",
    "QuorumForwarder",
    "QuorumMember",
    "parse_voters",
]

log = logging.getLogger("kraft.node.run")

CONTROLLED_SHUTDOWN_TIMEOUT_S: Final = 10.0
STATUS_TIMEOUT_S: Final = 2.0
CONTROLLER_REQUEST_TIMEOUT_MS: Final = 1500  # then the next controller (see BrokerMember)
NO_ACTIVE_KNOWN: Final = (
    "this controller is not the active one and no broker is alive to forward through:"
    " set controller.quorum.bootstrap.servers on the controllers to reach the active one directly"
)
BROKER_ROUTE_TIMEOUT_MS: Final = 60_000
RAFT_SUBDIR: Final = "raft"


def parse_voters(value: str) -> dict[int, str]:
    """``controller.quorum.voters``: ``id@host:port,...`` -> {id: "host:port"}."""
    voters: dict[int, str] = {}
    for item in filter(None, (v.strip() for v in value.split(","))):
        node_id, at, address = item.partition("@")
        host, colon, port = address.rpartition(":")
        if not at or not colon or not host or not port.isdigit() or not node_id.isdigit():
            raise ConfigError(f"controller.quorum.voters: {item!r} is not id@host:port")
        if int(node_id) in voters:
            raise ConfigError(f"controller.quorum.voters: node {node_id} is listed twice")
        voters[int(node_id)] = address
    if not voters:
        raise ConfigError("controller.quorum.voters is empty")
    if len(voters) % 2 == 0:
        log.warning(
            "%d voters tolerate no more failures than %d: use an odd number",
            len(voters),
            len(voters) - 1,
        )
    return voters


def parse_bootstrap(value: str) -> list[tuple[str, int]]:
    out = []
    for item in filter(None, (v.strip() for v in value.split(","))):
        host, colon, port = item.rpartition(":")
        if not colon or not host or not port.isdigit():
            raise ConfigError(f"controller.quorum.bootstrap.servers: {item!r} is not host:port")
        out.append((host, int(port)))
    if not out:
        raise ConfigError("controller.quorum.bootstrap.servers is empty")
    return out


class QuorumForwarder:
    """The controller path of a controller node's own admin requests (its REST API's writes).

    The rule runs here when this controller is the active one.  Otherwise the request goes to
    the active one the way a broker's does: over the CONTROLLER listeners named by
    ``controller.quorum.bootstrap.servers`` when the node has that key (``remote``), else
    through a live broker of the image, which forwards it on as it forwards its own clients'
    requests (a controller knows its peers only by their Raft addresses).  The answers are a
    broker's: per-item errors, or every item failed with one error code."""

    def __init__(
        self,
        apis: ControllerApis,
        remote: Forwarder | None,
        image: Callable[[], ClusterImage] | None = None,
        client_id: str = "controller",
        listener: str = "PLAINTEXT",
        security: ClientSecurity | None = None,
    ) -> None:
        self.apis = apis
        self.remote = remote
        self.image = image
        self.client_id = client_id
        self.listener = listener  # the brokers' listener to forward through
        self.security = security  # and how to log in to it

    async def forward(self, request: Request, version: int) -> Response:
        response = await self.apis.run_forwarded(request)
        if response is not None:
            return response
        if self.remote is not None:
            return await self.remote.forward(request, version)
        return await self._through_a_broker(request, version)

    async def _through_a_broker(self, request: Request, version: int) -> Response:
        image = None if self.image is None else self.image()
        brokers = [] if image is None else live_broker_addresses(image, self.listener)
        if not brokers:
            failed: Response = forwarded_api(request).failed(
                request, ErrorCode.NOT_CONTROLLER, NO_ACTIVE_KNOWN
            )
            return failed
        # One attempt per broker may last the whole request: a broker waits out a controller
        # election itself, and a resent write would find its own effect (TOPIC_ALREADY_EXISTS).
        client = ControllerClient(
            brokers,
            client_id=self.client_id,
            request_timeout_ms=BROKER_ROUTE_TIMEOUT_MS,
            security=self.security,
        )
        try:
            return await RemoteControllerChannel(client, _NotABroker()).forward(request, version)
        finally:
            client.close()


def live_broker_addresses(
    image: ClusterImage, listener: str = "PLAINTEXT"
) -> list[tuple[str, int]]:
    """The endpoints on ``listener`` of the image's unfenced brokers, by broker id."""
    out = []
    for broker_id in sorted(image.brokers):
        registration = image.brokers[broker_id]
        endpoint = None if registration.fenced else registration.listener(listener)
        if endpoint is not None:
            out.append((endpoint.host, endpoint.port))
    return out


def _broker_client_of_controller(cfg: NodeConfig) -> ClientSecurity | None:
    """How a controller logs in to the brokers' inter-broker listener to forward through
    them: with that listener's keys when it has them (a controller-only node usually does
    not: then PLAINTEXT, and forwarding through a broker works on a PLAINTEXT one only)."""
    try:
        return inter_broker_client(cfg)
    except ConfigError:
        return None


class _NotABroker:
    """The broker epoch of a node without a broker (only producer ids would need one)."""

    broker_epoch = -1


@dataclass
class QuorumMember:
    controller: QuorumController
    apis: ControllerApis
    listener: KafkaListener
    dispatcher: RequestDispatcher
    advertised: str
    forwarder: QuorumForwarder
    client: ControllerClient | None = None
    _task: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, cfg: NodeConfig, cluster_id: str) -> QuorumMember:
        voters = parse_voters(cfg.get("controller.quorum.voters") or "")
        if cfg.node_id not in voters:
            raise ConfigError(
                f"controller.quorum.voters does not list this controller (node.id={cfg.node_id})"
            )
        password = cfg.get("controller.quorum.password") or ""
        check_quorum_password(password, len(voters))
        image_of: list[Callable[[], ClusterImage]] = []  # the controller's, once it exists
        listener_cfg, listener_security = controller_listener(
            cfg, image_scram_lookup(lambda: image_of[0]() if image_of else None)
        )
        limits = listener_limits(cfg)
        me = voters[cfg.node_id]
        settings = RaftSettings(
            self_address=me,
            peer_addresses=tuple(a for i, a in sorted(voters.items()) if i != cfg.node_id),
            bind_address=cfg.get("controller.quorum.bind.address") or me,
            password=password,
            data_dir=cfg.metadata_log_dir / RAFT_SUBDIR,
            compaction_min_entries=cfg.get_bounded_int("controller.quorum.journal.max.entries"),
            compaction_max_bytes=cfg.get_bounded_int(
                "metadata.log.max.record.bytes.between.snapshots"
            ),
            compaction_interval_s=cfg.get_bounded_int("metadata.log.max.snapshot.interval.ms")
            / 1000,
        )
        try:
            config = ControllerConfig.from_properties(cfg.values, cluster_id=cluster_id)
            authorization = AuthorizerSettings.from_config(cfg.values)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        config = with_bootstrap_records(config, cfg.metadata_log_dir)
        controller = QuorumController(
            settings,
            config,
            heartbeat_interval_ms=cfg.get_int("broker.heartbeat.interval.ms", 2000),
            snapshot_interval_bytes=cfg.get_int(
                "metadata.log.max.record.bytes.between.snapshots", DEFAULT_SNAPSHOT_INTERVAL_BYTES
            ),
        )
        image_of.append(lambda: controller.image)
        authorizer = BrokerAuthorizer(authorization, lambda: controller.image)
        apis = ControllerApis(controller, cfg.node_id, voters, authorizer)
        # ACL and SCRAM changes sent to this listener are authorized here, with the sender's
        # principal (a forwarding broker's: make brokers super.users, as Kafka requires).
        security = SecurityAdminHandlers(authorizer, lambda: controller.image)
        dispatcher = RequestDispatcher(security.guard(apis.specs()), BrokerMetrics())
        apis.dispatcher = dispatcher
        try:
            listener = KafkaListener(
                dispatcher,
                listener_cfg.host,
                listener_cfg.port,
                limits,
                security=listener_security,
            )
        except OSError:
            controller.close()
            raise
        adv = cfg.advertised(listener_cfg.name) or listener_cfg
        advertised = f"{adv.host}:{adv.port or listener.port}"
        client, remote = None, None
        if cfg.get("controller.quorum.bootstrap.servers"):
            bootstrap = parse_bootstrap(cfg.get("controller.quorum.bootstrap.servers") or "")
            client = ControllerClient(
                bootstrap,
                client_id=f"controller-{cfg.node_id}",
                request_timeout_ms=CONTROLLER_REQUEST_TIMEOUT_MS,
                security=controller_client(cfg),
            )
            remote = RemoteControllerChannel(client, _NotABroker())
        forwarder = QuorumForwarder(
            apis,
            remote,
            lambda: controller.image,
            client_id=f"controller-{cfg.node_id}",
            listener=security_of(cfg).inter_broker_listener,
            security=_broker_client_of_controller(cfg),
        )
        member = cls(controller, apis, listener, dispatcher, advertised, forwarder, client)
        member._task = asyncio.create_task(controller.run(), name="controller")
        return member

    @property
    def ready(self) -> bool:
        """The quorum has a leader (INTERFACE.md's readiness of a controller)."""
        return self.controller.quorum.leader is not None

    def status(self) -> dict[str, Any]:
        leader = self.controller.quorum.leader
        leader_id = next((i for i, a in self.apis.voters.items() if a == leader), None)
        return {
            "leader_id": leader_id,
            "epoch": self.controller.quorum.epoch,
            "voters": self.apis.voter_status(),
        }

    async def stop(self) -> None:
        self.listener.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.dispatcher.close()
        if self.client is not None:
            self.client.close()
        await asyncio.to_thread(self.controller.close)


@dataclass
class BrokerMember:
    broker: Broker
    client: ControllerClient
    follower: MetadataFollower
    lifecycle: BrokerLifecycle
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @classmethod
    async def start(cls, cfg: NodeConfig, cluster_id: str, bcfg: BrokerConfig) -> BrokerMember:
        bootstrap = parse_bootstrap(cfg.get("controller.quorum.bootstrap.servers") or "")
        # A controller that stops answering (SIGSTOP, a partition) keeps its TCP connection:
        # give up on it after 1.5 s and try the next one (a long-poll fetch waits 0.5 s).
        client = ControllerClient(
            bootstrap,
            client_id=f"broker-{cfg.node_id}",
            request_timeout_ms=CONTROLLER_REQUEST_TIMEOUT_MS,
            security=controller_client(cfg),
        )
        holder: list[Broker] = []

        def on_update(delta: MetadataDelta, image: ClusterImage) -> None:
            if holder:
                holder[0].on_metadata(delta, image)

        follower = MetadataFollower(client, cfg.node_id, on_update, cluster_id=cluster_id)
        epoch = _EpochHolder()
        channel = RemoteControllerChannel(client, epoch)
        broker = Broker(bcfg, FileStorage(), channel, ClusterImage.EMPTY, cluster_id)
        broker.incarnation_id = uuid.uuid4()
        broker.replicas.alter_partition = AlterPartitionSender(
            client, broker.replicas, cfg.node_id, lambda: epoch.broker_epoch
        )
        holder.append(broker)
        await broker.start()
        lifecycle = BrokerLifecycle(
            client,
            follower,
            cfg.node_id,
            cluster_id,
            broker.incarnation_id,
            broker.registered_endpoints(),
            bcfg.rack,
            cfg.get_int("broker.heartbeat.interval.ms", 2000),
            log_dirs=broker.replicas.log_dirs,
            session_timeout_ms=cfg.get_bounded_int("broker.session.timeout.ms"),
        )
        broker.replicas.session_lapsed = lifecycle.session_lapsed
        epoch.lifecycle = lifecycle
        broker.log_dir_listeners.append(lifecycle.heartbeat_now)
        member = cls(broker, client, follower, lifecycle)
        member._tasks.append(asyncio.create_task(follower.run(), name="metadata-follower"))
        await lifecycle.register()
        member._tasks.append(asyncio.create_task(lifecycle.run(), name="broker-heartbeats"))
        return member

    @property
    def ready(self) -> bool:
        return bool(self.lifecycle.ready) and self.broker.listener is not None

    async def controller_status(self) -> dict[str, Any]:
        """DescribeQuorum, asked of the active controller."""
        topic = DescribeQuorumRequest.TopicData(
            topic_name=TopicName("__cluster_metadata"),
            partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)],
        )
        try:
            async with asyncio.timeout(STATUS_TIMEOUT_S):
                response = await self.client.request(DescribeQuorumRequest(topics=[topic]), 2)
        except (TimeoutError, OSError) as exc:
            return {"leader_id": None, "epoch": -1, "voters": [], "error": str(exc) or "timeout"}
        assert isinstance(response, DescribeQuorumResponse)
        part = response.topics[0].partitions[0]
        addresses = {
            n.node_id: f"{n.listeners[0].host}:{n.listeners[0].port}"
            for n in response.nodes
            if n.listeners
        }
        voters = [
            {
                "id": v.replica_id,
                "address": addresses.get(v.replica_id),
                "lag": None if v.log_end_offset < 0 else part.high_watermark - v.log_end_offset,
            }
            for v in part.current_voters
        ]
        return {"leader_id": part.leader_id, "epoch": part.leader_epoch, "voters": voters}

    async def stop(self) -> None:
        if self.lifecycle.broker_epoch >= 0:
            try:
                async with asyncio.timeout(CONTROLLED_SHUTDOWN_TIMEOUT_S):
                    await self.lifecycle.controlled_shutdown()
            except TimeoutError:
                log.warning("controlled shutdown timed out; stopping anyway")
            except Exception:
                log.warning("controlled shutdown failed; stopping anyway", exc_info=True)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        try:
            await self.broker.stop()
        finally:
            sender = self.broker.replicas.alter_partition
            if isinstance(sender, AlterPartitionSender):
                sender.close()
            self.client.close()


class _EpochHolder:
    """The broker epoch for the controller channel, known once the lifecycle exists."""

    lifecycle: BrokerLifecycle | None = None

    @property
    def broker_epoch(self) -> int:
        return -1 if self.lifecycle is None else self.lifecycle.broker_epoch
