"""``LocalController``: the controller of a single-node quorum, on a :class:`LocalMetadataLog`.

Theory of operation
-------------------
Each command runs as: handle (pure, on the current image) -> append the records as one batch
(fsync) -> replay them into the next image and notify the log's listeners -> return the
response. Commands are serialized: a command sees every earlier command's records.

Two ways in, not to be mixed on one instance:

* ``submit(command)``: synchronous, for tests, tools and startup; blocks for the fsync.
* ``await submit_async(command)`` and the ``async`` methods (``forward`` for admin requests,
  ...): for an asyncio server. Handling, replay and the listeners run on the event loop; only
  the write and fsync run in a worker thread. A caller cancelled during the fsync still gets
  its append completed and published before ``CancelledError`` propagates (a durable batch must
  never be left unpublished), so the log and the image never disagree.

Broker sessions (Kafka's ``BrokerHeartbeatManager``) are soft state here: the time of each
broker's last registration or heartbeat, from the injected clock. Every broker registered when
the controller starts gets a fresh session. The owner calls ``fence_expired_brokers()`` about
every ``broker.heartbeat.interval.ms``.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from typing import TypeVar

from kafka_protocol._codec import Request, Response
from kafka_protocol.clock import monotonic_ms
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AllocateProducerIdsRequest,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from kafka_protocol.types import BrokerId
from kraft.controller.controller import Controller
from kraft.controller.producer_ids import PRODUCER_ID_BLOCK_SIZE
from kraft.controller.result import ControllerApiError, ControllerConfig, ControllerResult
from metadata_log.image import ClusterImage
from metadata_log.log import LocalMetadataLog, PendingAppend

R = TypeVar("R")
Command = Callable[[ClusterImage], ControllerResult[R]]


class LocalController:
    """Runs :class:`Controller` commands against a local, durable metadata log."""

    def __init__(
        self,
        log: LocalMetadataLog,
        *,
        config: ControllerConfig | None = None,
        clock: Callable[[], int] = monotonic_ms,
        rng: random.Random | None = None,
    ) -> None:
        """Bootstraps a new cluster (writes ``metadata.version``) synchronously if needed."""
        self.log = log
        self.controller = Controller(config, rng=rng)
        self._clock = clock
        self._lock = threading.Lock()
        self._async_lock = asyncio.Lock()
        now = clock()
        self._last_contact_ms: dict[int, int] = {broker: now for broker in log.image.brokers}
        self.submit(self.controller.bootstrap)

    @property
    def image(self) -> ClusterImage:
        return self.log.image

    @property
    def config(self) -> ControllerConfig:
        return self.controller.config

    # --- running commands ---------------------------------------------------------------------

    def submit(self, command: Command[R]) -> R:
        """Run ``command`` on the current image, append its records durably, publish them."""
        with self._lock:
            result = command(self.log.image)
            if result.records:
                self.log.append(result.records)
            return result.response

    async def submit_async(self, command: Command[R]) -> R:
        """As :meth:`submit`, with the fsync off the event loop."""
        async with self._async_lock:
            result = command(self.log.image)
            if result.records:
                await self._append(self.log.prepare_append(result.records))
            return result.response

    async def _append(self, pending: PendingAppend) -> None:
        write = asyncio.ensure_future(asyncio.to_thread(self.log.write, pending))
        cancelled = False
        while not write.done():
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                cancelled = True  # the write cannot be stopped: finish the append first
        write.result()  # a failed write raises here and nothing is published
        self.log.publish(pending)
        if cancelled:
            raise asyncio.CancelledError

    # --- admin requests -----------------------------------------------------------------------

    async def forward(self, request: Request) -> Response:
        """A forwarded admin request, run by its controller rule."""
        return await self.submit_async(lambda image: self.controller.handle(request, image))

    # --- brokers ------------------------------------------------------------------------------

    def has_valid_session(self, broker_id: int) -> bool:
        last = self._last_contact_ms.get(broker_id)
        return last is not None and self._clock() - last < self.config.broker_session_timeout_ms

    async def register_broker(
        self, request: BrokerRegistrationRequest
    ) -> BrokerRegistrationResponse:
        response = await self.submit_async(
            lambda image: self.controller.handle_register_broker(
                request, image, self.has_valid_session
            )
        )
        if response.error_code == ErrorCode.NONE:
            self._last_contact_ms[request.broker_id] = self._clock()
        return response

    async def broker_heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
        response = await self.submit_async(
            lambda image: self.controller.handle_broker_heartbeat(request, image)
        )
        if response.error_code == ErrorCode.NONE:
            self._last_contact_ms[request.broker_id] = self._clock()
        return response

    async def allocate_producer_ids(
        self, broker_id: int, count: int = PRODUCER_ID_BLOCK_SIZE
    ) -> tuple[int, int]:
        """A block of ``count`` producer ids never handed out before: (first id, count).

        For the broker of this node: its current broker epoch is taken from the image. Raises
        :class:`ControllerApiError` (STALE_BROKER_EPOCH) if the broker is not registered."""
        broker = self.image.brokers.get(broker_id)
        request = AllocateProducerIdsRequest(
            broker_id=BrokerId(broker_id), broker_epoch=-1 if broker is None else broker.epoch
        )
        response = await self.submit_async(
            lambda image: self.controller.handle_allocate_producer_ids(request, image, count)
        )
        if response.error_code != ErrorCode.NONE:
            raise ControllerApiError(ErrorCode.from_code(response.error_code))
        return response.producer_id_start, response.producer_id_len

    async def fence_expired_brokers(self) -> list[int]:
        """Fence unfenced brokers whose session ran out; returns the ids fenced."""
        expired = [
            broker_id
            for broker_id, broker in self.image.brokers.items()
            if not broker.fenced and not self.has_valid_session(broker_id)
        ]
        if not expired:
            return []
        return await self.submit_async(
            lambda image: self.controller.handle_fence_brokers(expired, image)
        )
