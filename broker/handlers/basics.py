"""ApiVersions 0-4 and InitProducerId 0-4.

ApiVersions advertises the dispatcher's table, nothing else (an unsupported ApiVersions
version is answered by the dispatcher as v0 with UNSUPPORTED_VERSION).

InitProducerId serves idempotent producers: producer ids come in blocks allocated by the
controller (a ProducerIdsRecord in the metadata log, so ids are never reused after a restart).
Without a transactional id Kafka always hands out a fresh id, even when the request carries the
producer's current id and epoch (KIP-360's epoch bump is for transactional producers).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.controller_channel import ControllerChannel, ControllerRequestError
from broker.dispatcher import ApiHandler, RequestContext
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from kafka_protocol.types import ProducerId

log = logging.getLogger("broker.handlers")

PRODUCER_ID_BLOCK = 1000


class ApiVersionsHandler:
    def __init__(self, api_versions: Callable[[], list[ApiVersionsResponse.ApiVersion]]) -> None:
        self.api_versions = api_versions  # the dispatcher's table, built after its handlers

    def spec(self) -> ApiHandler:
        return ApiHandler(18, 0, 4, self.handle, "ApiVersions")

    def handle(self, ctx: RequestContext, req: ApiVersionsRequest) -> ApiVersionsResponse:
        return ApiVersionsResponse(api_keys=self.api_versions())


class InitProducerIdHandler:
    def __init__(self, controller: ControllerChannel, node_id: int) -> None:
        self.controller = controller
        self.node_id = node_id
        self._next = 0
        self._end = 0

    def spec(self) -> ApiHandler:
        return ApiHandler(22, 0, 4, self.handle, "InitProducerId")

    async def handle(
        self, ctx: RequestContext, req: InitProducerIdRequest
    ) -> InitProducerIdResponse:
        if req.transactional_id:
            return InitProducerIdResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
            )
        try:
            producer_id = await self._allocate()
        except ControllerRequestError as exc:
            # Kafka's answer while no producer id block is available (KIP-730): retriable.
            log.warning("no producer id block from the controller: %s", exc)
            return InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)

    async def _allocate(self) -> ProducerId:
        if self._next >= self._end:
            first, count = await self.controller.allocate_producer_ids(
                self.node_id, PRODUCER_ID_BLOCK
            )
            self._next, self._end = first, first + count
        pid = self._next
        self._next += 1
        return ProducerId(pid)
