"""ApiVersions 0-4 and InitProducerId 0-5.

ApiVersions advertises the dispatcher's table, nothing else (an unsupported ApiVersions
version is answered by the dispatcher as v0 with UNSUPPORTED_VERSION).

InitProducerId without a transactional id serves idempotent producers: a fresh producer id
from the blocks the controller allocates (a ProducerIdsRecord in the metadata log, so ids are
never reused after a restart), even when the request carries the producer's current id and
epoch (KIP-360's epoch bump is for transactional producers; the producer id and epoch must be both
set or both -1, else INVALID_REQUEST).  With a transactional id it is the
transaction coordinator's (:class:`TransactionCoordinator`): the timeout must be in
``(0, transaction.max.timeout.ms]`` (else INVALID_TRANSACTION_TIMEOUT), and PRODUCER_FENCED is
answered as INVALID_PRODUCER_EPOCH to versions before 4 (KIP-588), as Kafka's ``KafkaApis``
does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.controller_channel import ControllerRequestError
from broker.dispatcher import ApiHandler, RequestContext
from broker.transaction.coordinator import TransactionCoordinator
from broker.transaction.producer_ids import ProducerIdAllocator
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from kafka_protocol.types import ProducerId

log = logging.getLogger("broker.handlers")

PRODUCER_FENCED_VERSION = 4  # KIP-588: older versions get INVALID_PRODUCER_EPOCH


class ApiVersionsHandler:
    def __init__(self, api_versions: Callable[[], list[ApiVersionsResponse.ApiVersion]]) -> None:
        self.api_versions = api_versions  # the dispatcher's table, built after its handlers

    def spec(self) -> ApiHandler:
        return ApiHandler(18, 0, 4, self.handle, "ApiVersions")

    def handle(self, ctx: RequestContext, req: ApiVersionsRequest) -> ApiVersionsResponse:
        return ApiVersionsResponse(api_keys=self.api_versions())


class InitProducerIdHandler:
    def __init__(
        self, producer_ids: ProducerIdAllocator, transactions: TransactionCoordinator
    ) -> None:
        self.producer_ids = producer_ids
        self.transactions = transactions

    def spec(self) -> ApiHandler:
        return ApiHandler(22, 0, 5, self.handle, "InitProducerId")

    async def handle(
        self, ctx: RequestContext, req: InitProducerIdRequest
    ) -> InitProducerIdResponse:
        if (req.producer_id == -1) != (req.producer_epoch == -1):
            return InitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST)
        if req.transactional_id is not None:
            return await self._transactional(ctx, req, req.transactional_id)
        try:
            producer_id = await self.producer_ids.allocate()
        except ControllerRequestError as exc:
            # Kafka's answer while no producer id block is available (KIP-730): retriable.
            log.warning("no producer id block from the controller: %s", exc)
            return InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)

    async def _transactional(
        self, ctx: RequestContext, req: InitProducerIdRequest, transactional_id: str
    ) -> InitProducerIdResponse:
        if not transactional_id:
            return InitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST)
        max_timeout = self.transactions.config.max_timeout_ms
        if not 0 < req.transaction_timeout_ms <= max_timeout:
            return InitProducerIdResponse(error_code=ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        expected = (req.producer_id, req.producer_epoch) if req.producer_id != -1 else None
        result = await self.transactions.init_producer_id(
            transactional_id, req.transaction_timeout_ms, expected
        )
        error = result.error
        if error is ErrorCode.PRODUCER_FENCED and ctx.api_version < PRODUCER_FENCED_VERSION:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        if error is not ErrorCode.NONE:
            return InitProducerIdResponse(error_code=error)
        return InitProducerIdResponse(
            producer_id=ProducerId(result.producer_id), producer_epoch=result.producer_epoch
        )
