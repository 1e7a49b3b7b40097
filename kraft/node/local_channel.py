"""The controller channel of a combined single node: in-process calls, local metadata log.

The broker half talks to the controller half through the same :class:`ControllerChannel` a
remote broker will use over the controller listener, so moving the log onto the Raft quorum
changes this module, not the broker.  The node registers its broker at start-up and then
unfences it with one heartbeat (it is trivially caught up: it reads the same log).  Later
heartbeats go only when its log directory fails (KIP-858: ``offline_log_dirs``), so that the
controller takes the partitions' leadership from it and Metadata, ``/v1/cluster`` and
``kraft cluster status`` show the offline directory.  A restart re-registers with a new
incarnation; in-process there is no other claimant to the id, so the previous session is not
waited out.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from pathlib import Path

from broker.controller_channel import ControllerRequestError
from broker.lifecycle import LogDirsView
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
)
from kafka_protocol.types import BrokerId, TopicName
from kraft.controller.cluster import METADATA_VERSION_4_0_IV3
from kraft.controller.result import ControllerApiError, ControllerConfig
from kraft.quorum.local_controller import LocalController
from metadata_log.image import METADATA_VERSION_FEATURE, ClusterImage
from metadata_log.log import LocalMetadataLog, MetadataListener

log = logging.getLogger(__name__)


class ControllerError(Exception):
    """The controller refused something the node needs to start (the message says why)."""


class LocalControllerChannel:
    def __init__(self, log: LocalMetadataLog, controller: LocalController, node_id: int) -> None:
        self.log = log
        self.controller = controller
        self.node_id = node_id
        self.cluster_id = controller.config.cluster_id
        self._broker_epoch = -1
        self._log_dirs: LogDirsView | None = None
        self._reports: set[asyncio.Task[None]] = set()

    @classmethod
    def open(
        cls, metadata_log_dir: Path, node_id: int, cluster_id: str, config: ControllerConfig
    ) -> LocalControllerChannel:
        log = LocalMetadataLog.open(metadata_log_dir)
        return cls(log, LocalController(log, config=config), node_id)

    @property
    def image(self) -> ClusterImage:
        return self.log.image

    def subscribe(self, listener: MetadataListener) -> None:
        self.log.subscribe(listener)

    def close(self) -> None:
        for task in self._reports:
            task.cancel()
        self.log.close()

    # --- the broker's requests ----------------------------------------------------------------

    async def forward(self, request: Request, version: int) -> Response:
        """In-process: the dataclasses do not depend on the version, and the broker encodes the
        answer at the client's."""
        return await self.controller.forward(request)

    async def describe_quorum(
        self, request: DescribeQuorumRequest, version: int
    ) -> DescribeQuorumResponse:
        """This node's controller is the whole quorum: the only voter and the leader (epoch 0:
        a local controller holds no elections), caught up to the log's end."""
        end = self.log.next_offset
        voter = DescribeQuorumResponse.ReplicaState(
            replica_id=BrokerId(self.node_id), log_end_offset=end
        )
        partition = DescribeQuorumResponse.PartitionData(
            partition_index=0,
            leader_id=BrokerId(self.node_id),
            leader_epoch=0,
            high_watermark=end,
            current_voters=[voter],
            observers=[],
        )
        topic = DescribeQuorumResponse.TopicData(
            topic_name=TopicName("__cluster_metadata"), partitions=[partition]
        )
        return DescribeQuorumResponse(topics=[topic])

    async def allocate_producer_ids(self, broker_id: int, count: int) -> tuple[int, int]:
        try:
            return await self.controller.allocate_producer_ids(broker_id, count)
        except ControllerApiError as exc:
            raise ControllerRequestError(exc.error_code, exc.message) from None

    # --- this node's broker -------------------------------------------------------------------

    async def register_broker(
        self,
        host: str,
        port: int,
        rack: str | None,
        log_dirs: LogDirsView | None = None,
        endpoints: Sequence[tuple[str, str, int, int]] = (),
    ) -> int:
        """Register and unfence this node's broker; returns its broker epoch.  ``endpoints``:
        (name, host, port, security protocol id) of every listener (default: one PLAINTEXT
        listener at host:port)."""
        self._log_dirs = log_dirs
        listeners = [
            BrokerRegistrationRequest.Listener(
                name=name, host=h, port=p, security_protocol=protocol
            )
            for name, h, p, protocol in endpoints or [("PLAINTEXT", host, port, 0)]
        ]
        request = BrokerRegistrationRequest(
            broker_id=BrokerId(self.node_id),
            cluster_id=self.cluster_id,
            incarnation_id=uuid.uuid4(),
            listeners=listeners,
            features=[
                BrokerRegistrationRequest.Feature(
                    name=METADATA_VERSION_FEATURE,
                    min_supported_version=1,
                    max_supported_version=METADATA_VERSION_4_0_IV3,
                )
            ],
            rack=rack,
            log_dirs=log_dirs.online_log_dirs() if log_dirs is not None else [],
        )
        registered = await self.controller.submit_async(
            lambda image: self.controller.controller.handle_register_broker(request, image)
        )
        if registered.error_code != ErrorCode.NONE:
            raise ControllerError(
                f"broker {self.node_id} registration refused: "
                f"{ErrorCode.from_code(registered.error_code).name}"
            )
        self._broker_epoch = registered.broker_epoch
        heartbeat = await self._heartbeat()
        if heartbeat.error_code != ErrorCode.NONE or heartbeat.is_fenced:
            raise ControllerError(f"broker {self.node_id} stayed fenced after its heartbeat")
        return registered.broker_epoch

    def log_dirs_changed(self) -> None:
        """The broker's log directory went offline (a ``Broker.log_dir_listeners`` callback,
        on the event loop): tell the controller at once, in a heartbeat."""
        task = asyncio.get_running_loop().create_task(self._report_log_dirs())
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    async def _report_log_dirs(self) -> None:
        response = await self._heartbeat()
        if response.error_code != ErrorCode.NONE:
            log.warning(
                "the controller refused the offline log directory report: %s",
                ErrorCode.from_code(response.error_code).name,
            )

    async def _heartbeat(self) -> BrokerHeartbeatResponse:
        offline = self._log_dirs.offline_log_dirs() if self._log_dirs is not None else []
        return await self.controller.broker_heartbeat(
            BrokerHeartbeatRequest(
                broker_id=BrokerId(self.node_id),
                broker_epoch=self._broker_epoch,
                current_metadata_offset=self.log.next_offset,
                want_fence=False,
                offline_log_dirs=offline,
            )
        )
