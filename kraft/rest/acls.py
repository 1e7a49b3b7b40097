"""The ACL routes of the REST admin API: describe, create and delete ACLs.

An ACL is a JSON object with the fields of Kafka's ``AclBinding``: ``resource_type`` (TOPIC,
GROUP, CLUSTER, TRANSACTIONAL_ID, ...), ``resource_name``, ``pattern_type`` (LITERAL or
PREFIXED; default LITERAL), ``principal`` (``User:alice``), ``host`` (default ``*``),
``operation`` (READ, WRITE, ..., ALL) and ``permission_type`` (ALLOW or DENY; default ALLOW);
enum names in any case.

* ``GET /v1/acls`` lists the ACLs of the node's metadata image, filtered by any of those fields
  given as query parameters (exact matches; ``ANY`` or absent matches everything).
* ``POST /v1/acls`` ``{"acls": [ACL, ...]}`` (or one ACL object) forwards CreateAcls.
* ``DELETE /v1/acls`` with a filter (an object of the same fields, absent ones match anything;
  ``{"filters": [...]}`` for several) forwards DeleteAcls and answers the ACLs it removed.
"""

from __future__ import annotations

import enum
from typing import Any, Final, TypeVar

from aiohttp import web

from broker.controller_channel import newest_version
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
)
from kraft.rest.common import (
    ApiError,
    Body,
    bad_request,
    controller_of,
    image_of,
    image_settles,
    json_object,
    kafka_error,
    node_of,
)
from metadata_log.acls import (
    WILDCARD,
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from metadata_log.image import ClusterImage

E = TypeVar("E", bound=enum.IntEnum)

FIELDS: Final = (
    "resource_type",
    "resource_name",
    "pattern_type",
    "principal",
    "host",
    "operation",
    "permission_type",
)
MAX_ACLS_PER_REQUEST: Final = 1000
_NOT_CONCRETE: Final = ("UNKNOWN", "ANY", "MATCH")


def enum_value(kind: type[E], field: str, raw: object, *, filter_: bool = False) -> E:
    """``raw`` (a name in any case) as a member of ``kind``; ANY/MATCH only in filters."""
    if not isinstance(raw, str):
        raise bad_request(f"field {field!r} must be a string")
    try:
        value = kind[raw.strip().upper()]
    except KeyError:
        names = [m.name for m in kind if filter_ or m.name not in _NOT_CONCRETE]
        names = [n for n in names if n != "UNKNOWN"]
        raise bad_request(f"{field} {raw!r} is not one of {', '.join(names)}") from None
    if not filter_ and value.name in _NOT_CONCRETE:
        raise bad_request(f"{field} {value.name} is only for filters")
    return value


def acl_json(entry: AclEntry) -> dict[str, str]:
    return {
        "resource_type": entry.resource_type.name,
        "resource_name": entry.resource_name,
        "pattern_type": entry.pattern_type.name,
        "principal": entry.principal,
        "host": entry.host,
        "operation": entry.operation.name,
        "permission_type": entry.permission.name,
    }


def parse_acl(body: Body) -> AclEntry:
    body.only(*FIELDS)
    principal = body.get_str("principal")
    if ":" not in principal:
        raise bad_request(f"principal {principal!r} must be TYPE:NAME, e.g. User:alice")
    name = body.get_str("resource_name")
    if not name:
        raise bad_request("resource_name must not be empty")
    return AclEntry(
        resource_type=enum_value(ResourceType, "resource_type", body.data.get("resource_type")),
        resource_name=name,
        pattern_type=enum_value(
            PatternType, "pattern_type", body.data.get("pattern_type", "LITERAL")
        ),
        principal=principal,
        host=body.get_str("host", WILDCARD),
        operation=enum_value(AclOperation, "operation", body.data.get("operation")),
        permission=enum_value(
            AclPermissionType, "permission_type", body.data.get("permission_type", "ALLOW")
        ),
    )


class AclFilter:
    """An ``AclBindingFilter``: None fields match anything."""

    def __init__(self, values: dict[str, Any]) -> None:
        def member(kind: type[E], field: str, any_value: E) -> E:
            raw = values.get(field)
            return any_value if raw is None else enum_value(kind, field, raw, filter_=True)

        for field in ("resource_name", "principal", "host"):
            if values.get(field) is not None and not isinstance(values[field], str):
                raise bad_request(f"field {field!r} must be a string")
        self.resource_type = member(ResourceType, "resource_type", ResourceType.ANY)
        self.pattern_type = member(PatternType, "pattern_type", PatternType.ANY)
        self.operation = member(AclOperation, "operation", AclOperation.ANY)
        self.permission = member(AclPermissionType, "permission_type", AclPermissionType.ANY)
        self.resource_name: str | None = values.get("resource_name")
        self.principal: str | None = values.get("principal")
        self.host: str | None = values.get("host")

    def matches(self, entry: AclEntry) -> bool:
        return (
            self.resource_type in (ResourceType.ANY, entry.resource_type)
            and self.pattern_type in (PatternType.ANY, entry.pattern_type)
            and self.operation in (AclOperation.ANY, entry.operation)
            and self.permission in (AclPermissionType.ANY, entry.permission)
            and self.resource_name in (None, entry.resource_name)
            and self.principal in (None, entry.principal)
            and self.host in (None, entry.host)
        )

    def request_filter(self) -> DeleteAclsRequest.DeleteAclsFilter:
        return DeleteAclsRequest.DeleteAclsFilter(
            resource_type_filter=self.resource_type,
            resource_name_filter=self.resource_name,
            pattern_type_filter=self.pattern_type,
            principal_filter=self.principal,
            host_filter=self.host,
            operation=self.operation,
            permission_type=self.permission,
        )


def image_acls(image: ClusterImage) -> list[AclEntry]:
    entries: list[AclEntry] = list(image.acls.values())
    return sorted(entries, key=lambda e: tuple(acl_json(e).values()))


async def list_acls(request: web.Request) -> web.Response:
    unknown = sorted(set(request.query) - set(FIELDS))
    if unknown:
        raise bad_request(f"unknown query parameter {unknown[0]!r}; expected: {', '.join(FIELDS)}")
    acl_filter = AclFilter(dict(request.query))
    entries = [e for e in image_acls(image_of(node_of(request))) if acl_filter.matches(e)]
    return web.json_response([acl_json(e) for e in entries])


def _items(body: Body, key: str) -> list[Body]:
    items = body.only(key).objects(key) if key in body.data else [body]
    if not items:
        raise bad_request(f"{key!r} must not be empty")
    if len(items) > MAX_ACLS_PER_REQUEST:
        raise bad_request(f"at most {MAX_ACLS_PER_REQUEST} {key} per request")
    return items


async def create_acls(request: web.Request) -> web.Response:
    node = node_of(request)
    entries = [parse_acl(item) for item in _items(await json_object(request), "acls")]
    creations = [
        CreateAclsRequest.AclCreation(
            resource_type=e.resource_type,
            resource_name=e.resource_name,
            resource_pattern_type=e.pattern_type,
            principal=e.principal,
            host=e.host,
            operation=e.operation,
            permission_type=e.permission,
        )
        for e in entries
    ]
    forwarded = CreateAclsRequest(creations=creations)
    response = await controller_of(node).forward(forwarded, newest_version(forwarded))
    assert isinstance(response, CreateAclsResponse)
    for entry, result in zip(entries, response.results, strict=True):
        if result.error_code != ErrorCode.NONE:
            raise _acl_error(result.error_code, result.error_message, entry)
    await image_settles(node, lambda image: set(entries) <= set(image.acls.values()))
    return web.json_response({"acls": [acl_json(e) for e in entries]}, status=201)


def _acl_error(code: int, message: str | None, entry: AclEntry | None) -> ApiError:
    if code == ErrorCode.SECURITY_DISABLED:
        return ApiError(
            400,
            "SECURITY_DISABLED",
            "no authorizer is configured (authorizer.class.name): ACLs cannot be changed",
        )
    where = f" ({acl_json(entry)})" if entry is not None else ""
    return kafka_error(code, (message or ErrorCode.from_code(code).message) + where)


async def delete_acls(request: web.Request) -> web.Response:
    node = node_of(request)
    body = await json_object(request)
    filters = [AclFilter(item.only(*FIELDS).data) for item in _items(body, "filters")]
    forwarded = DeleteAclsRequest(filters=[f.request_filter() for f in filters])
    response = await controller_of(node).forward(forwarded, newest_version(forwarded))
    assert isinstance(response, DeleteAclsResponse)
    deleted = []
    for result in response.filter_results:
        if result.error_code != ErrorCode.NONE:
            raise _acl_error(result.error_code, result.error_message, None)
        for m in result.matching_acls:
            if m.error_code != ErrorCode.NONE:
                raise _acl_error(m.error_code, m.error_message, None)
            deleted.append(
                AclEntry(
                    ResourceType(m.resource_type),
                    m.resource_name,
                    PatternType(m.pattern_type),
                    m.principal,
                    m.host,
                    AclOperation(m.operation),
                    AclPermissionType(m.permission_type),
                )
            )
    await image_settles(node, lambda image: not set(deleted) & set(image.acls.values()))
    return web.json_response({"deleted": [acl_json(e) for e in deleted]})
