"""The controller channel of a broker in a multi-node cluster: requests go over the wire.

Each admin request a client sends to this broker is forwarded, as the same dataclass, to the
active controller through :class:`ControllerClient` (Kafka forwards them the same way, wrapped in
an Envelope).  It is sent at the client's version when the controller supports it (always, for a
controller of this project: both advertise Kafka's ranges), else at the highest version below it
that both support.  The generated dataclasses do not depend on the version, and a response
decoded at a version no higher than the client's holds only fields the client's version can
carry, so the controller's answer goes back to the client unchanged, encoded at the client's
version.  Never forwarding *above* the client's version is what makes this safe: a v6 DeleteTopics
result may name no topic, which v0-5 cannot say, and a v0-5 request's ``topic_names`` would be
dropped by the v6 encoder.

This adapter is the top of the call chain of a client request, so it owns the deadline: the
request's own ``timeout_ms`` when it carries a positive one (CreateTopics, DeleteTopics,
CreatePartitions, ElectLeaders), else ``unreachable_timeout_s``.  A controller failover shorter
than the client's timeout is waited out, as Kafka's forwarding does; when no controller answers
in time every item is answered REQUEST_TIMED_OUT, and a request the controller cannot take at
any version gets UNSUPPORTED_VERSION per item.
``allocate_producer_ids`` has no items: it raises :class:`ControllerRequestError` instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final, Protocol, TypeVar

from broker.controller_channel import (
    ControllerRequestError,
    alter_configs_failed,
    create_partitions_failed,
    create_topics_failed,
    delete_topics_failed,
    elect_leaders_failed,
    incremental_alter_configs_failed,
)
from broker.kafka_client import ControllerClient, NoUsableVersionError
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.exceptions import LocalProtocolError
from kafka_protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka_protocol.types import BrokerId

log = logging.getLogger(__name__)

CREATE_TOPICS_MAX_VERSION: Final = 7
DELETE_TOPICS_MAX_VERSION: Final = 6
CREATE_PARTITIONS_MAX_VERSION: Final = 3
ALTER_CONFIGS_MAX_VERSION: Final = 2
INCREMENTAL_ALTER_CONFIGS_MAX_VERSION: Final = 1
ELECT_LEADERS_VERSION: Final = 2
ALLOCATE_PRODUCER_IDS_VERSION: Final = 0
DEFAULT_UNREACHABLE_TIMEOUT_S: Final = 5.0

R = TypeVar("R", bound=Response)
Q = TypeVar("Q", bound=Request)


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

    async def create_topics(
        self, request: CreateTopicsRequest, version: int
    ) -> CreateTopicsResponse:
        cap = min(version, CREATE_TOPICS_MAX_VERSION)
        return await self._forward(request, cap, CreateTopicsResponse, create_topics_failed)

    async def delete_topics(
        self, request: DeleteTopicsRequest, version: int
    ) -> DeleteTopicsResponse:
        cap = min(version, DELETE_TOPICS_MAX_VERSION)
        return await self._forward(request, cap, DeleteTopicsResponse, delete_topics_failed)

    async def create_partitions(
        self, request: CreatePartitionsRequest, version: int
    ) -> CreatePartitionsResponse:
        cap = min(version, CREATE_PARTITIONS_MAX_VERSION)
        return await self._forward(request, cap, CreatePartitionsResponse, create_partitions_failed)

    async def alter_configs(
        self, request: AlterConfigsRequest, version: int
    ) -> AlterConfigsResponse:
        cap = min(version, ALTER_CONFIGS_MAX_VERSION)
        return await self._forward(request, cap, AlterConfigsResponse, alter_configs_failed)

    async def incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest, version: int
    ) -> IncrementalAlterConfigsResponse:
        cap = min(version, INCREMENTAL_ALTER_CONFIGS_MAX_VERSION)
        return await self._forward(
            request, cap, IncrementalAlterConfigsResponse, incremental_alter_configs_failed
        )

    async def elect_leaders(
        self, request: ElectLeadersRequest, version: int
    ) -> ElectLeadersResponse:
        """Forwarded at v2 whatever the client's version (the one exception to the rule above):
        a v0 request is a v1+ request of type PREFERRED (the field's default), and only v1+
        answers carry the top-level error code that says NOT_CONTROLLER when a request for
        every partition names none. The v2 answer holds nothing a v0 client cannot be sent
        except that top-level code, which its encoder leaves out."""
        return await self._forward(
            request, ELECT_LEADERS_VERSION, ElectLeadersResponse, elect_leaders_failed
        )

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

    def _timeout_s(self, request: Request) -> float:
        """How long ``request`` waits for a controller: its ``timeout_ms`` if positive (a
        client's 0 asks not to wait for the change to spread, not for no answer at all)."""
        timeout_ms = getattr(request, "timeout_ms", None)
        if isinstance(timeout_ms, int) and timeout_ms > 0:
            return timeout_ms / 1000
        return self.unreachable_timeout_s

    async def _forward(
        self,
        request: Q,
        max_version: int,
        response_type: type[R],
        failed: Callable[[Q, ErrorCode, str], R],
    ) -> R:
        """The active controller's answer, or every item failed with one error code."""
        timeout_s = self._timeout_s(request)
        try:
            async with asyncio.timeout(timeout_s):
                response = await self.client.request(request, max_version)
        except TimeoutError:
            log.warning("no controller answered %s within %g s", request.NAME, timeout_s)
            message = f"no controller answered within {timeout_s:g} s"
            return failed(request, ErrorCode.REQUEST_TIMED_OUT, message)
        except (NoUsableVersionError, LocalProtocolError) as exc:
            # LocalProtocolError: the request uses a field the controller's version lacks.
            return failed(request, ErrorCode.UNSUPPORTED_VERSION, str(exc))
        assert isinstance(response, response_type)
        return response
