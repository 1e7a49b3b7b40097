"""What a node asks of the active controller, and the table of the admin requests forwarded to it.

Kafka forwards a client's topic and config changes to the active controller (wrapped in an
Envelope); here the same request dataclass goes there through one generic call,
``forward(request, version) -> response``, the same way from every place a request starts:

* a broker's Kafka listener (``broker.handlers.admin``), over the wire
  (``broker.remote_controller.RemoteControllerChannel``);
* a combined node, in-process into its local controller (``kraft.node.local_channel``);
* the REST API of any node, and the node itself (topic auto-creation).

The controller listener serves every entry of :data:`FORWARDED` through one handler that runs the
request's rule (``kraft.controller.controller``'s table).  An entry says, for one API: the request
and response types, the versions served, how to answer "every item failed with one error" (no
controller answered, or this one is not the active one), where the deadline comes from, and
whether the request is forwarded at the client's version or always at the newest.  Adding a
forwarded API takes one entry here and its rule in the controller.

Every response carries per-item error codes; only transport failures raise.  The request builders
at the end are what the platform itself sends (auto-created topics, the REST API's writes), so
that no other module spells out a forwarded request.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Protocol, TypeVar

from broker.dispatcher import ApiHandler, RequestContext
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode, KafkaError
from kafka_protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)
from kafka_protocol.types import BrokerId, TopicName
from metadata_log.image import ConfigResourceType

Q = TypeVar("Q", bound=Request)
R = TypeVar("R", bound=Response)


class ControllerRequestError(KafkaError):
    """A controller call that has no per-item answer failed with ``error_code``
    (``allocate_producer_ids``: controller unreachable, stale broker epoch, ...)."""


class Forwarder(Protocol):
    async def forward(self, request: Request, version: int) -> Response:
        """The active controller's answer to ``request`` (the type of a :data:`FORWARDED`
        entry) from a client speaking ``version``: per-item errors, or every item failed with
        one error when no controller could answer."""
        ...


class ControllerChannel(Forwarder, Protocol):
    """What a broker asks of the active controller."""

    async def allocate_producer_ids(self, broker_id: int, count: int) -> tuple[int, int]:
        """A block of ``count`` producer ids never handed out before: (first id, count).
        Raises :class:`ControllerRequestError`."""
        ...

    async def describe_quorum(
        self, request: DescribeQuorumRequest, version: int
    ) -> DescribeQuorumResponse:
        """The metadata quorum as the active controller describes it (Kafka's brokers forward
        a client's DescribeQuorum); a top-level error when no controller answers."""
        ...


# --- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ForwardedApi(Generic[Q, R]):
    """One admin API that brokers forward to the active controller."""

    request_type: type[Q]
    response_type: type[R]
    min_version: int  # the versions brokers and controllers serve
    max_version: int
    failed: Callable[[Q, ErrorCode, str], R]  # every item answered one error
    timeout_ms: Callable[[Q], int] | None = None  # the request's own deadline, if it has one
    # Forwarded at ``max_version`` whatever the client's version (see the ElectLeaders entry).
    pinned: bool = False
    # Sent by brokers themselves: served on the controller listener only, never by a broker to
    # its clients (Kafka's ``ApiMessageType.ListenerType.CONTROLLER``-only APIs).
    internal: bool = False

    @property
    def api_key(self) -> int:
        assert self.request_type.API_KEY is not None
        return self.request_type.API_KEY

    @property
    def name(self) -> str:
        return self.request_type.NAME.removesuffix("Request")

    def version_to_forward(self, client_version: int) -> int:
        """Never above the client's version (unless pinned): the generated dataclasses do not
        depend on the version, and an answer decoded at a version no higher than the client's
        holds only fields the client's version can carry, so it goes back unchanged."""
        return self.max_version if self.pinned else min(client_version, self.max_version)


def _each_topic_failed(
    response_type: type[Any], results_field: str, result_type: type[Any]
) -> Callable[[Any, ErrorCode, str], Any]:
    """Every topic of a request answered ``error``, by name (topic creations and partition
    increases answer per topic in the same shape)."""

    def failed(request: Any, error: ErrorCode, message: str) -> Any:
        results = [
            result_type(name=t.name, error_code=error, error_message=message)
            for t in request.topics
        ]
        return response_type(**{results_field: results})

    return failed


_topics_failed: Final = _each_topic_failed(
    CreateTopicsResponse, "topics", CreateTopicsResponse.CreatableTopicResult
)
_partitions_failed: Final = _each_topic_failed(
    CreatePartitionsResponse, "results", CreatePartitionsResponse.CreatePartitionsTopicResult
)


def _deletions_failed(
    request: DeleteTopicsRequest, error: ErrorCode, message: str
) -> DeleteTopicsResponse:
    Result = DeleteTopicsResponse.DeletableTopicResult
    by_name = [Result(name=n, error_code=error, error_message=message) for n in request.topic_names]
    by_state = [
        Result(name=t.name, topic_id=t.topic_id, error_code=error, error_message=message)
        for t in request.topics
    ]
    return DeleteTopicsResponse(responses=by_name + by_state)


def _each_resource_failed(
    response_type: type[Any], result_type: type[Any]
) -> Callable[[Any, ErrorCode, str], Any]:
    """Every resource of a config change answered ``error`` (both config APIs answer per
    resource in the same shape)."""

    def failed(request: Any, error: ErrorCode, message: str) -> Any:
        return response_type(
            responses=[
                result_type(
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    error_code=error,
                    error_message=message,
                )
                for r in request.resources
            ]
        )

    return failed


_configs_failed: Final = _each_resource_failed(
    AlterConfigsResponse, AlterConfigsResponse.AlterConfigsResourceResponse
)
_config_changes_failed: Final = _each_resource_failed(
    IncrementalAlterConfigsResponse, IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
)


def _elections_failed(
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


def _creations_failed(
    request: CreateAclsRequest, error: ErrorCode, message: str
) -> CreateAclsResponse:
    Result = CreateAclsResponse.AclCreationResult
    return CreateAclsResponse(
        results=[Result(error_code=error, error_message=message) for _ in request.creations]
    )


def _acl_deletions_failed(
    request: DeleteAclsRequest, error: ErrorCode, message: str
) -> DeleteAclsResponse:
    Result = DeleteAclsResponse.DeleteAclsFilterResult
    return DeleteAclsResponse(
        filter_results=[Result(error_code=error, error_message=message) for _ in request.filters]
    )


def _scram_alterations_failed(
    request: AlterUserScramCredentialsRequest, error: ErrorCode, message: str
) -> AlterUserScramCredentialsResponse:
    """Every user the request names (once) answered ``error``."""
    Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    users = dict.fromkeys(
        [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    )
    return AlterUserScramCredentialsResponse(
        results=[Result(user=u, error_code=error, error_message=message) for u in users]
    )


def _quota_alterations_failed(
    request: AlterClientQuotasRequest, error: ErrorCode, message: str
) -> AlterClientQuotasResponse:
    """Every entity of the request answered ``error``."""
    Entity = AlterClientQuotasResponse.EntityData
    return AlterClientQuotasResponse(
        entries=[
            AlterClientQuotasResponse.EntryData(
                error_code=error,
                error_message=message,
                entity=[
                    Entity(entity_type=e.entity_type, entity_name=e.entity_name) for e in x.entity
                ],
            )
            for x in request.entries
        ]
    )


def _reassignments_failed(
    request: AlterPartitionReassignmentsRequest, error: ErrorCode, message: str
) -> AlterPartitionReassignmentsResponse:
    """The request and every named partition answered ``error``."""
    Topic = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
    Partition = AlterPartitionReassignmentsResponse.ReassignablePartitionResponse
    return AlterPartitionReassignmentsResponse(
        error_code=error,
        error_message=message,
        responses=[
            Topic(
                name=t.name,
                partitions=[
                    Partition(partition_index=p.partition_index, error_code=error)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


FORWARDED: Final[tuple[ForwardedApi[Any, Any], ...]] = (
    ForwardedApi(
        CreateTopicsRequest, CreateTopicsResponse, 2, 7, _topics_failed, lambda r: r.timeout_ms
    ),
    ForwardedApi(
        DeleteTopicsRequest, DeleteTopicsResponse, 1, 6, _deletions_failed, lambda r: r.timeout_ms
    ),
    ForwardedApi(
        CreatePartitionsRequest,
        CreatePartitionsResponse,
        0,
        3,
        _partitions_failed,
        lambda r: r.timeout_ms,
    ),
    ForwardedApi(AlterConfigsRequest, AlterConfigsResponse, 0, 2, _configs_failed),
    ForwardedApi(
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
        0,
        1,
        _config_changes_failed,
    ),
    # Pinned at v2: a v0 request is a v1+ request of type PREFERRED (the field's default), and
    # only v1+ answers carry the top-level error code that says NOT_CONTROLLER when a request
    # for every partition names none.  The v2 answer holds nothing a v0 client cannot be sent
    # except that top-level code, which its encoder leaves out.
    ForwardedApi(
        ElectLeadersRequest,
        ElectLeadersResponse,
        0,
        2,
        _elections_failed,
        lambda r: r.timeout_ms,
        pinned=True,
    ),
    ForwardedApi(
        UnregisterBrokerRequest,
        UnregisterBrokerResponse,
        0,
        0,
        lambda r, error, message: UnregisterBrokerResponse(error_code=error, error_message=message),
    ),
    ForwardedApi(CreateAclsRequest, CreateAclsResponse, 0, 3, _creations_failed),
    ForwardedApi(DeleteAclsRequest, DeleteAclsResponse, 0, 3, _acl_deletions_failed),
    ForwardedApi(
        AlterUserScramCredentialsRequest,
        AlterUserScramCredentialsResponse,
        0,
        0,
        _scram_alterations_failed,
    ),
    # A broker's own report of where its replicas live (KIP-858, broker/log_dir_assignments.py).
    ForwardedApi(
        AssignReplicasToDirsRequest,
        AssignReplicasToDirsResponse,
        0,
        0,
        lambda r, error, message: AssignReplicasToDirsResponse(error_code=error),
        internal=True,
    ),
    ForwardedApi(
        AlterClientQuotasRequest, AlterClientQuotasResponse, 0, 1, _quota_alterations_failed
    ),
    ForwardedApi(
        AlterPartitionReassignmentsRequest,
        AlterPartitionReassignmentsResponse,
        0,
        1,
        _reassignments_failed,
        lambda r: r.timeout_ms,
    ),
    ForwardedApi(
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse,
        0,
        0,
        lambda r, error, message: ListPartitionReassignmentsResponse(
            error_code=error, error_message=message
        ),
        lambda r: r.timeout_ms,
    ),
)
_BY_TYPE: Final[dict[type[Request], ForwardedApi[Any, Any]]] = {
    api.request_type: api for api in FORWARDED
}


def forwarded_api(request: Request) -> ForwardedApi[Any, Any]:
    """The table entry of ``request`` (a programmer error if it is not forwarded)."""
    api = _BY_TYPE.get(type(request))
    assert api is not None, f"{request.NAME} is not forwarded to the controller"
    return api


def forwarded_handlers(
    forward: Callable[[Request, int], Awaitable[Response]], *, internal: bool = True
) -> list[ApiHandler]:
    """One handler per table entry, each passing (request, client version) to ``forward``: the
    forwarding of a broker (``internal`` False: not the brokers' own APIs), or the controller
    listener's rule runner."""

    def handle(ctx: RequestContext, request: Request) -> Awaitable[Response]:
        return forward(request, ctx.api_version)

    return [
        ApiHandler(api.api_key, api.min_version, api.max_version, handle, api.name)
        for api in FORWARDED
        if internal or not api.internal
    ]


# --- what the platform itself sends ---------------------------------------------------------------

DEFAULT_FROM_CONTROLLER: Final = -1  # partitions / replication factor: the controller's default


def newest_version(request: Request) -> int:
    """The version a node's own request is sent at: the newest the controller serves."""
    return forwarded_api(request).max_version


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    partitions: int = DEFAULT_FROM_CONTROLLER  # num.partitions (v4+)
    replication_factor: int = DEFAULT_FROM_CONTROLLER  # default.replication.factor (v4+)
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    """One topic's answer to a creation (with ``validate_only``: what it would have been)."""

    name: str
    error_code: int
    error_message: str | None
    topic_id: uuid.UUID
    partitions: int
    replication_factor: int


def topic_creation(
    topics: Iterable[NewTopic], *, timeout_ms: int | None = None, validate_only: bool = False
) -> Request:
    """Create ``topics`` (Kafka's own default deadline unless ``timeout_ms``)."""
    request = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=TopicName(t.name),
                num_partitions=t.partitions,
                replication_factor=t.replication_factor,
                configs=[
                    CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                    for k, v in t.configs.items()
                ],
            )
            for t in topics
        ],
        validate_only=validate_only,
    )
    if timeout_ms is not None:
        request.timeout_ms = timeout_ms
    return request


def created_topics(response: Response) -> list[CreatedTopic]:
    """The per-topic answers to :func:`topic_creation`'s request."""
    assert isinstance(response, CreateTopicsResponse)
    return [
        CreatedTopic(
            t.name,
            t.error_code,
            t.error_message,
            t.topic_id,
            t.num_partitions,
            t.replication_factor,
        )
        for t in response.topics
    ]


def topic_deletion(name: str, timeout_ms: int) -> Request:
    return DeleteTopicsRequest(
        topics=[DeleteTopicsRequest.DeleteTopicState(name=TopicName(name))], timeout_ms=timeout_ms
    )


CONFIG_SET, CONFIG_DELETE = 0, 1  # the operations of an incremental config change


def topic_config_changes(name: str, to_set: Mapping[str, str], to_delete: Sequence[str]) -> Request:
    Op = IncrementalAlterConfigsRequest.AlterableConfig
    ops = [Op(name=k, config_operation=CONFIG_SET, value=v) for k, v in to_set.items()]
    ops += [Op(name=k, config_operation=CONFIG_DELETE, value=None) for k in to_delete]
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=int(ConfigResourceType.TOPIC), resource_name=name, configs=ops
    )
    return IncrementalAlterConfigsRequest(resources=[resource])


def partition_increase(name: str, count: int, timeout_ms: int) -> Request:
    wanted = CreatePartitionsRequest.CreatePartitionsTopic(
        name=TopicName(name), count=count, assignments=None
    )
    return CreatePartitionsRequest(topics=[wanted], timeout_ms=timeout_ms)


@dataclass(frozen=True, slots=True)
class ItemError:
    error_code: int
    error_message: str | None


def broker_unregistration(broker_id: int) -> Request:
    return UnregisterBrokerRequest(broker_id=BrokerId(broker_id))


def item_errors(response: Response) -> list[ItemError]:
    """The per-item outcome of a topic deletion, config change, partition increase or broker
    unregistration (one item)."""
    if isinstance(response, DeleteTopicsResponse | IncrementalAlterConfigsResponse):
        items: Sequence[Any] = response.responses
    elif isinstance(response, CreatePartitionsResponse):
        items = response.results
    elif isinstance(response, UnregisterBrokerResponse):
        items = [response]
    else:
        raise AssertionError(f"no per-item errors read from {response.NAME}")
    return [ItemError(i.error_code, i.error_message) for i in items]


def config_changes(
    resource_type: ConfigResourceType,
    changes: Mapping[str, Mapping[str, str | None]],
) -> Request:
    """Incremental changes of several resources of one type: a value sets, None deletes."""
    Op = IncrementalAlterConfigsRequest.AlterableConfig
    resources = [
        IncrementalAlterConfigsRequest.AlterConfigsResource(
            resource_type=int(resource_type),
            resource_name=name,
            configs=[
                Op(name=k, config_operation=CONFIG_DELETE if v is None else CONFIG_SET, value=v)
                for k, v in values.items()
            ],
        )
        for name, values in changes.items()
    ]
    return IncrementalAlterConfigsRequest(resources=resources)


def partition_reassignments(
    topic: str, targets: Mapping[int, Sequence[int] | None], timeout_ms: int
) -> AlterPartitionReassignmentsRequest:
    """Move partitions of ``topic`` to new replicas (None: cancel the move in progress)."""
    Partition = AlterPartitionReassignmentsRequest.ReassignablePartition
    return AlterPartitionReassignmentsRequest(
        timeout_ms=timeout_ms,
        topics=[
            AlterPartitionReassignmentsRequest.ReassignableTopic(
                name=TopicName(topic),
                partitions=[
                    Partition(
                        partition_index=p,
                        replicas=None if r is None else [BrokerId(b) for b in r],
                    )
                    for p, r in sorted(targets.items())
                ],
            )
        ],
    )


def reassignment_listing(
    topic: str, partitions: Sequence[int], timeout_ms: int
) -> ListPartitionReassignmentsRequest:
    """The moves in progress among ``partitions`` of ``topic``."""
    Topics = ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics
    return ListPartitionReassignmentsRequest(
        timeout_ms=timeout_ms,
        topics=[Topics(name=TopicName(topic), partition_indexes=list(partitions))],
    )
