"""The controller channel of a broker in a multi-node cluster: requests go over the wire.

Each admin request a client sends to this broker is forwarded, as the same dataclass, to the
active controller through :class:`ControllerClient` (Kafka forwards them the same way, wrapped in
an Envelope).  It is sent at the version its table entry says (``broker.controller_channel``: the
client's, capped at the newest the controller serves, or a pinned one) when the controller
supports it (always, for a controller of this project: both advertise Kafka's ranges), else at
the highest version below it that both support.  Never forwarding *above* the client's version is
what lets the controller's answer go back to the client unchanged: a v6 topic deletion's result
may name no topic, which v0-5 cannot say, and a v0-5 request's ``topic_names`` would be dropped
by the v6 encoder.

This adapter is the top of the call chain of a client request, so it owns the deadline: the
request's own ``timeout_ms`` when its entry has one and it is positive, else
``unreachable_timeout_s``.  A controller failover shorter than the client's timeout is waited
out, as Kafka's forwarding does; when no controller answers in time every item is answered
REQUEST_TIMED_OUT, and a request the controller cannot take at any version gets
UNSUPPORTED_VERSION per item.  ``allocate_producer_ids`` has no items: it raises
:class:`ControllerRequestError` instead.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final, Protocol, cast

from broker.controller_channel import ControllerRequestError, ForwardedApi, forwarded_api
from broker.kafka_client import ControllerClient, NoUsableVersionError
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import LocalProtocolError
from kafka_protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
)
from kafka_protocol.types import BrokerId

log = logging.getLogger(__name__)

ALLOCATE_PRODUCER_IDS_VERSION: Final = 0
DEFAULT_UNREACHABLE_TIMEOUT_S: Final = 5.0


__all__ = ["BrokerEpochSource", "ControllerRequestError", "RemoteControllerChannel"]


class BrokerEpochSource(Protocol):
    """Where the current broker epoch comes from (:class:`broker.lifecycle.BrokerLifecycle`)."""

    @property
    def broker_epoch(self) -> int: ...


class RemoteControllerChannel:
    """:class:`broker.controller_channel.ControllerChannel` over the controller listeners."""

    def __init__(
        self,
        client: ControllerClient,
        lifecycle: BrokerEpochSource,
        *,
        unreachable_timeout_s: float = DEFAULT_UNREACHABLE_TIMEOUT_S,
    ) -> None:
        self.client = client
        self.lifecycle = lifecycle
        self.unreachable_timeout_s = unreachable_timeout_s

    async def forward(self, request: Request, version: int) -> Response:
        """The active controller's answer, or every item failed with one error code."""
        api = forwarded_api(request)
        timeout_s = self._timeout_s(api, request)
        try:
            async with asyncio.timeout(timeout_s):
                response = await self.client.request(request, api.version_to_forward(version))
        except TimeoutError:
            log.warning("no controller answered %s within %g s", request.NAME, timeout_s)
            message = f"no controller answered within {timeout_s:g} s"
            timed_out: Response = api.failed(request, ErrorCode.REQUEST_TIMED_OUT, message)
            return timed_out
        except (NoUsableVersionError, LocalProtocolError) as exc:
            # LocalProtocolError: the request uses a field the controller's version lacks.
            unsupported: Response = api.failed(request, ErrorCode.UNSUPPORTED_VERSION, str(exc))
            return unsupported
        assert isinstance(response, api.response_type), response.NAME
        return cast(Response, response)

    async def describe_quorum(
        self, request: DescribeQuorumRequest, version: int
    ) -> DescribeQuorumResponse:
        """The client's DescribeQuorum, at its version (the controllers serve 0-2), answered by
        the active controller; REQUEST_TIMED_OUT when none answers in time."""
        try:
            async with asyncio.timeout(self.unreachable_timeout_s):
                response = await self.client.request(request, version)
        except TimeoutError:
            message = f"no controller answered within {self.unreachable_timeout_s:g} s"
            return DescribeQuorumResponse(
                error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=message, topics=[]
            )
        assert isinstance(response, DescribeQuorumResponse), response.NAME
        return response

    async def allocate_producer_ids(self, broker_id: int, count: int) -> tuple[int, int]:
        """A block of producer ids: (first id, count).  The controller chooses the block size
        (the request has no count field; Kafka's is 1000), so ``count`` is only a hint."""
        request = AllocateProducerIdsRequest(
            broker_id=BrokerId(broker_id), broker_epoch=self.lifecycle.broker_epoch
        )
        try:
            async with asyncio.timeout(self.unreachable_timeout_s):
                response = await self.client.request(request, ALLOCATE_PRODUCER_IDS_VERSION)
        except TimeoutError:
            raise ControllerRequestError(
                ErrorCode.REQUEST_TIMED_OUT, "no controller answered AllocateProducerIds"
            ) from None
        assert isinstance(response, AllocateProducerIdsResponse)
        if response.error_code != ErrorCode.NONE:
            raise ControllerRequestError(ErrorCode.from_code(response.error_code))
        return response.producer_id_start, response.producer_id_len

    def _timeout_s(self, api: ForwardedApi[Any, Any], request: Request) -> float:
        """How long ``request`` waits for a controller: its ``timeout_ms`` if positive (a
        client's 0 asks not to wait for the change to spread, not for no answer at all)."""
        timeout_ms = api.timeout_ms(request) if api.timeout_ms is not None else 0
        if timeout_ms > 0:
            return timeout_ms / 1000
        return self.unreachable_timeout_s
