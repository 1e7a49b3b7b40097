"""What a broker asks of the active controller.

On a combined single node this is an in-process call into the local controller; once the
quorum lands, the same interface is served over the controller listener (Kafka forwards admin
requests to the active controller the same way).  Every method returns Kafka's response
dataclass with per-item error codes; transport failures raise.
"""

from __future__ import annotations

from typing import Protocol

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
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


class ControllerRequestError(Exception):
    """A controller call that has no per-item answer failed with ``error_code``
    (``allocate_producer_ids``: controller unreachable, stale broker epoch, ...)."""

    def __init__(self, error_code: ErrorCode, message: str | None = None) -> None:
        super().__init__(f"{error_code.name}: {message or error_code.message}")
        self.error_code = error_code


class ControllerChannel(Protocol):
    async def create_topics(
        self, request: CreateTopicsRequest, version: int
    ) -> CreateTopicsResponse: ...

    async def delete_topics(
        self, request: DeleteTopicsRequest, version: int
    ) -> DeleteTopicsResponse: ...

    async def create_partitions(
        self, request: CreatePartitionsRequest, version: int
    ) -> CreatePartitionsResponse: ...

    async def alter_configs(
        self, request: AlterConfigsRequest, version: int
    ) -> AlterConfigsResponse: ...

    async def incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest, version: int
    ) -> IncrementalAlterConfigsResponse: ...

    async def elect_leaders(
        self, request: ElectLeadersRequest, version: int
    ) -> ElectLeadersResponse: ...

    async def allocate_producer_ids(self, broker_id: int, count: int) -> tuple[int, int]:
        """A block of ``count`` producer ids never handed out before: (first id, count).
        Raises :class:`ControllerRequestError`."""
        ...


# --- every item failed with one error (no controller, or not the active one) ---------------------


def create_topics_failed(
    request: CreateTopicsRequest, error: ErrorCode, message: str
) -> CreateTopicsResponse:
    return CreateTopicsResponse(
        topics=[
            CreateTopicsResponse.CreatableTopicResult(
                name=t.name, error_code=error, error_message=message
            )
            for t in request.topics
        ]
    )


def delete_topics_failed(
    request: DeleteTopicsRequest, error: ErrorCode, message: str
) -> DeleteTopicsResponse:
    Result = DeleteTopicsResponse.DeletableTopicResult
    by_name = [Result(name=n, error_code=error, error_message=message) for n in request.topic_names]
    by_state = [
        Result(name=t.name, topic_id=t.topic_id, error_code=error, error_message=message)
        for t in request.topics
    ]
    return DeleteTopicsResponse(responses=by_name + by_state)


def create_partitions_failed(
    request: CreatePartitionsRequest, error: ErrorCode, message: str
) -> CreatePartitionsResponse:
    return CreatePartitionsResponse(
        results=[
            CreatePartitionsResponse.CreatePartitionsTopicResult(
                name=t.name, error_code=error, error_message=message
            )
            for t in request.topics
        ]
    )


def alter_configs_failed(
    request: AlterConfigsRequest, error: ErrorCode, message: str
) -> AlterConfigsResponse:
    return AlterConfigsResponse(
        responses=[
            AlterConfigsResponse.AlterConfigsResourceResponse(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                error_code=error,
                error_message=message,
            )
            for r in request.resources
        ]
    )


def incremental_alter_configs_failed(
    request: IncrementalAlterConfigsRequest, error: ErrorCode, message: str
) -> IncrementalAlterConfigsResponse:
    return IncrementalAlterConfigsResponse(
        responses=[
            IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                error_code=error,
                error_message=message,
            )
            for r in request.resources
        ]
    )


def elect_leaders_failed(
    request: ElectLeadersRequest, error: ErrorCode, message: str
) -> ElectLeadersResponse:
    """The request (v1+) and every named partition answered ``error`` (Kafka's
    ``ElectLeadersRequest.getErrorResponse``; a request for every partition names none)."""
    Result = ElectLeadersResponse.PartitionResult
    return ElectLeadersResponse(
        error_code=error,
        replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(
                topic=t.topic,
                partition_result=[
                    Result(partition_id=p, error_code=error, error_message=message)
                    for p in t.partitions
                ],
            )
            for t in request.topic_partitions or ()
        ],
    )
