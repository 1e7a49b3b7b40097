"""Which ACL each route of the REST admin API needs: one table, the same operations Kafka's
APIs check for the same action, decided by the node's authorizer.

:data:`ACCESS` maps every route (method, path) to an :class:`Access`: an operation on a resource
whose name is a path parameter (``{name}``, ``{group}``), the cluster, or ``None`` for routes
that decide in their handler (listing topics shows only those the principal may DESCRIBE;
creating a topic needs CREATE on the cluster or on the topic named in the body) or need nothing
(the open probes).  :func:`access_middleware` answers 403 before the handler runs, so a denied
caller learns nothing, not even whether the topic exists (Kafka answers
TOPIC_AUTHORIZATION_FAILED for unknown topics too).

The authorizer sees an HTTP caller as a session on the listener ``ADMIN`` from the client's
address, with the principal :mod:`kraft.rest.authentication` established.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from aiohttp import web
from aiohttp.typedefs import Handler

from broker.security.session import SecurityProtocol, Session
from kraft.rest.authentication import OPEN_PATHS, principal_of
from kraft.rest.common import ApiError
from metadata_log.acls import CLUSTER_NAME, AclOperation, ResourceType

ADMIN_LISTENER: Final = "ADMIN"

_O, _R = AclOperation, ResourceType
CLUSTER: Final = ""  # the resource name marker: the one cluster resource


@dataclass(frozen=True, slots=True)
class Access:
    operation: AclOperation
    resource_type: ResourceType
    name_from: str | None  # a path parameter, CLUSTER, or None: the handler decides


IN_HANDLER: Final = None
# Kafka's checks for the same actions on its own APIs (broker/security/*_rules.py): describing
# the cluster, creating, deleting and altering topics and their configs, producing, fetching,
# groups and their offsets, unregistering brokers, SCRAM users and ACLs.  /metrics: DESCRIBE on
# the cluster (request rates, names of topics).
ACCESS: Final[dict[tuple[str, str], Access | None]] = {
    ("GET", "/v1/health"): None,
    ("GET", "/v1/ready"): None,
    ("GET", "/v1/openapi.json"): None,
    ("GET", "/v1/cluster"): Access(_O.DESCRIBE, _R.CLUSTER, CLUSTER),
    ("DELETE", "/v1/cluster/brokers/{id}"): Access(_O.ALTER, _R.CLUSTER, CLUSTER),
    ("GET", "/metrics"): Access(_O.DESCRIBE, _R.CLUSTER, CLUSTER),
    # DescribeLogDirs needs DESCRIBE on the cluster
    ("GET", "/v1/brokers/{id}/log-dirs"): Access(_O.DESCRIBE, _R.CLUSTER, CLUSTER),
    ("GET", "/v1/topics"): Access(_O.DESCRIBE, _R.TOPIC, IN_HANDLER),  # filtered
    ("POST", "/v1/topics"): Access(_O.CREATE, _R.TOPIC, IN_HANDLER),  # cluster or topic
    ("GET", "/v1/topics/{name}"): Access(_O.DESCRIBE, _R.TOPIC, "name"),
    ("DELETE", "/v1/topics/{name}"): Access(_O.DELETE, _R.TOPIC, "name"),
    ("PATCH", "/v1/topics/{name}/configs"): Access(_O.ALTER_CONFIGS, _R.TOPIC, "name"),
    ("POST", "/v1/topics/{name}/partitions"): Access(_O.ALTER, _R.TOPIC, "name"),
    ("POST", "/v1/topics/{name}/records"): Access(_O.WRITE, _R.TOPIC, "name"),
    ("GET", "/v1/topics/{name}/partitions/{partition}/records"): Access(_O.READ, _R.TOPIC, "name"),
    ("GET", "/v1/groups"): Access(_O.DESCRIBE, _R.GROUP, IN_HANDLER),  # filtered
    ("GET", "/v1/groups/{group}"): Access(_O.DESCRIBE, _R.GROUP, "group"),
    ("DELETE", "/v1/groups/{group}"): Access(_O.DELETE, _R.GROUP, "group"),
    ("POST", "/v1/groups/{group}/offsets"): Access(_O.READ, _R.GROUP, "group"),
    # Transactions as Kafka's APIs: ListTransactions shows the ids the caller may DESCRIBE,
    # DescribeTransactions (and FindCoordinator) DESCRIBE on the id (its partitions: of the
    # topics it may DESCRIBE), DescribeProducers READ on the topic, WriteTxnMarkers ALTER on
    # the cluster, else CLUSTER_ACTION (KIP-664) (find-hanging: READ per topic).
    ("GET", "/v1/transactions"): Access(_O.DESCRIBE, _R.TRANSACTIONAL_ID, IN_HANDLER),
    ("GET", "/v1/transactions/hanging"): Access(_O.READ, _R.TOPIC, IN_HANDLER),
    ("POST", "/v1/transactions/abort"): Access(_O.ALTER, _R.CLUSTER, IN_HANDLER),
    ("GET", "/v1/transactions/{transactional_id}"): Access(
        _O.DESCRIBE, _R.TRANSACTIONAL_ID, "transactional_id"
    ),
    ("GET", "/v1/topics/{name}/partitions/{partition}/producers"): Access(
        _O.READ, _R.TOPIC, "name"
    ),
    ("GET", "/v1/users"): Access(_O.DESCRIBE, _R.CLUSTER, CLUSTER),
    ("POST", "/v1/users"): Access(_O.ALTER, _R.CLUSTER, CLUSTER),
    ("DELETE", "/v1/users/{name}"): Access(_O.ALTER, _R.CLUSTER, CLUSTER),
    # Partition reassignment: Kafka's AlterPartitionReassignments needs ALTER on the cluster,
    # ListPartitionReassignments DESCRIBE.
    ("POST", "/v1/topics/{name}/reassignments"): Access(_O.ALTER, _R.CLUSTER, CLUSTER),
    ("GET", "/v1/topics/{name}/reassignments"): Access(_O.DESCRIBE, _R.CLUSTER, CLUSTER),
    ("DELETE", "/v1/topics/{name}/reassignments"): Access(_O.ALTER, _R.CLUSTER, CLUSTER),
    ("GET", "/v1/acls"): Access(_O.DESCRIBE, _R.CLUSTER, CLUSTER),
    ("POST", "/v1/acls"): Access(_O.ALTER, _R.CLUSTER, CLUSTER),
    ("DELETE", "/v1/acls"): Access(_O.ALTER, _R.CLUSTER, CLUSTER),
}

_ERROR_OF: Final = {
    _R.TOPIC: "TOPIC_AUTHORIZATION_FAILED",
    _R.GROUP: "GROUP_AUTHORIZATION_FAILED",
    _R.CLUSTER: "CLUSTER_AUTHORIZATION_FAILED",
    _R.TRANSACTIONAL_ID: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
}


class RestAuthorizer(Protocol):
    """What the API asks of the node's authorizer (``broker.security.authorization``)."""

    def authorize(
        self,
        session: Session,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool: ...


class AllowAll:
    """No authorizer configured: every authenticated (or anonymous) caller may do anything."""

    def authorize(
        self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        return True


AUTHORIZER: Final = web.AppKey("authorizer", RestAuthorizer)


def session_of(request: web.Request) -> Session:
    host = request.remote or "unknown"
    protocol = SecurityProtocol.SSL if request.secure else SecurityProtocol.PLAINTEXT
    return Session(ADMIN_LISTENER, protocol, host, host, principal_of(request))


def allowed(request: web.Request, operation: AclOperation, rtype: ResourceType, name: str) -> bool:
    authorizer = request.app.get(AUTHORIZER)
    if authorizer is None:
        return True
    return authorizer.authorize(session_of(request), operation, rtype, name)


def denied(operation: AclOperation, resource_type: ResourceType, name: str) -> ApiError:
    what = "the cluster" if resource_type == _R.CLUSTER else f"{resource_type.name} {name!r}"
    return ApiError(
        403,
        _ERROR_OF.get(resource_type, "AUTHORIZATION_FAILED"),
        f"not authorized to {operation.name} {what}",
    )


def require(request: web.Request, operation: AclOperation, rtype: ResourceType, name: str) -> None:
    """403 unless the caller may perform ``operation`` on the resource."""
    if not allowed(request, operation, rtype, name):
        raise denied(operation, rtype, name)


def visible(
    request: web.Request, operation: AclOperation, rtype: ResourceType
) -> Callable[[str], bool]:
    """A filter of resource names: those the caller may ``operation``."""
    return lambda name: allowed(request, operation, rtype, name)


def access_of(request: web.Request) -> Access | None:
    resource = request.match_info.route.resource
    path = resource.canonical if resource is not None else request.path
    method = "GET" if request.method == "HEAD" else request.method
    key = (method, path)
    assert key in ACCESS or request.match_info.http_exception is not None, (
        f"route {method} {path} has no access rule in kraft.rest.access.ACCESS"
    )
    return ACCESS.get(key)


@web.middleware
async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in OPEN_PATHS or request.match_info.http_exception is not None:
        return await handler(request)
    access = access_of(request)
    if access is not None and access.name_from is not IN_HANDLER:
        name = CLUSTER_NAME if access.name_from == CLUSTER else request.match_info[access.name_from]
        require(request, access.operation, access.resource_type, name)
    return await handler(request)


def describe_configs_allowed(request: web.Request, topic: str) -> bool:
    return allowed(request, _O.DESCRIBE_CONFIGS, _R.TOPIC, topic)


def abort_transaction_allowed(request: web.Request) -> None:
    """As Kafka's WriteTxnMarkers (KIP-664): ALTER on the cluster, else CLUSTER_ACTION."""
    if not allowed(request, _O.ALTER, _R.CLUSTER, CLUSTER_NAME):
        require(request, _O.CLUSTER_ACTION, _R.CLUSTER, CLUSTER_NAME)


def create_topic_allowed(request: web.Request, topic: str) -> None:
    """As Kafka's topic creation: CREATE on the cluster, or on the topic."""
    if not allowed(request, _O.CREATE, _R.CLUSTER, CLUSTER_NAME):
        require(request, _O.CREATE, _R.TOPIC, topic)
