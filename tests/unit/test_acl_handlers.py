"""The broker's ACL and SCRAM handlers: cluster authorization before forwarding,
SECURITY_DISABLED, descriptions from the image (never a salt or a key)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from broker.controller_channel import forwarded_handlers
from broker.dispatcher import ApiHandler, RequestContext
from broker.handlers.acls import SecurityAdminHandlers
from broker.security.authorization import BrokerAuthorizer
from broker.security.session import Session
from kafka_protocol._codec import Request, Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
    RequestHeader,
)
from kafka_protocol.sasl import scram_credential
from metadata_log.acls import AclEntry, AclOperation, AclPermissionType, PatternType, ResourceType
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage, acl_record, scram_record

STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
ALICE_ALTERS_CLUSTER = AclEntry(
    ResourceType.CLUSTER,
    "kafka-cluster",
    PatternType.LITERAL,
    "User:alice",
    "*",
    AclOperation.ALTER,
    AclPermissionType.ALLOW,
)
PREFIXED_READ = AclEntry(
    ResourceType.TOPIC,
    "orders",
    PatternType.PREFIXED,
    "User:bob",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)


def image() -> ClusterImage:
    credential = scram_credential("SCRAM-SHA-256", "pw", iterations=8192)
    return replay_records(
        ClusterImage.EMPTY,
        [
            acl_record(uuid.UUID(int=1), ALICE_ALTERS_CLUSTER),
            acl_record(uuid.UUID(int=2), PREFIXED_READ),
            scram_record("alice", "SCRAM-SHA-256", credential),
        ],
    )


def handlers(config: dict[str, str]) -> SecurityAdminHandlers:
    current = image()
    authorizer = BrokerAuthorizer.from_config(config, lambda: current)
    return SecurityAdminHandlers(authorizer, lambda: current)


def call(spec: ApiHandler, principal: str, request: Any) -> Any:
    ctx = RequestContext(RequestHeader(), Session.internal(principal), 0.0, 0.0)
    result = spec.handle(ctx, request)
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


def by_name(specs: list[ApiHandler], name: str) -> ApiHandler:
    return next(s for s in specs if s.name == name)


def changes() -> list[Request]:
    return [
        CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(resource_name="t")]),
        DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter()]),
        AlterUserScramCredentialsRequest(
            deletions=[AlterUserScramCredentialsRequest.ScramCredentialDeletion(name="x")]
        ),
    ]


def test_changes_need_alter_on_the_cluster() -> None:
    security = handlers(STANDARD)
    seen: list[Request] = []

    async def forward(request: Request, version: int) -> Response:
        seen.append(request)
        return request  # type: ignore[return-value]  # stands for the controller's answer

    specs = security.guard(forwarded_handlers(forward))
    for request in changes():
        spec = next(s for s in specs if s.api_key == request.API_KEY)
        denied = call(spec, "User:bob", request)
        items = getattr(denied, "results", None) or denied.filter_results
        assert [i.error_code for i in items] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
        assert call(spec, "User:alice", request) is request  # forwarded
    assert len(seen) == 3


def test_acl_apis_are_disabled_without_an_authorizer() -> None:
    security = handlers({})
    seen: list[Request] = []

    async def forward(request: Request, version: int) -> Response:
        seen.append(request)
        return request  # type: ignore[return-value]

    specs = security.guard(forwarded_handlers(forward))
    create, delete, alter_scram = changes()
    for request in (create, delete):
        spec = next(s for s in specs if s.api_key == request.API_KEY)
        answer = call(spec, "User:bob", request)
        items = getattr(answer, "results", None) or answer.filter_results
        assert [i.error_code for i in items] == [ErrorCode.SECURITY_DISABLED]
    described = call(by_name(security.specs(), "DescribeAcls"), "User:bob", DescribeAclsRequest())
    assert described.error_code == ErrorCode.SECURITY_DISABLED
    spec = next(s for s in specs if s.api_key == alter_scram.API_KEY)
    assert call(spec, "User:bob", alter_scram) is alter_scram  # SCRAM needs no authorizer
    assert seen == [alter_scram]


def test_describe_acls_filters_the_image() -> None:
    security = handlers(STANDARD | {"super.users": "User:admin"})
    spec = by_name(security.specs(), "DescribeAcls")
    match = DescribeAclsRequest(
        resource_type_filter=ResourceType.TOPIC,
        resource_name_filter="orders.eu",
        pattern_type_filter=PatternType.MATCH,
        principal_filter=None,
        host_filter=None,
        operation=AclOperation.ANY,
        permission_type=AclPermissionType.ANY,
    )
    answer = call(spec, "User:admin", match)
    assert answer.error_code == 0
    assert [(r.resource_name, r.pattern_type) for r in answer.resources] == [
        ("orders", PatternType.PREFIXED)
    ]
    assert [a.principal for a in answer.resources[0].acls] == ["User:bob"]
    assert call(spec, "User:bob", match).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    unknown = DescribeAclsRequest(resource_type_filter=0)
    assert call(spec, "User:admin", unknown).error_code == ErrorCode.INVALID_REQUEST


def test_describe_scram_credentials() -> None:
    security = handlers(STANDARD | {"super.users": "User:admin"})
    spec = by_name(security.specs(), "DescribeUserScramCredentials")
    Name = DescribeUserScramCredentialsRequest.UserName
    everyone = call(spec, "User:admin", DescribeUserScramCredentialsRequest(users=None))
    assert [
        (r.user, [(i.mechanism, i.iterations) for i in r.credential_infos])
        for r in everyone.results
    ] == [("alice", [(1, 8192)])]
    some = call(
        spec,
        "User:admin",
        DescribeUserScramCredentialsRequest(
            users=[Name(name="alice"), Name(name="ghost"), Name(name="twice"), Name(name="twice")]
        ),
    )
    assert [(r.user, r.error_code) for r in some.results] == [
        ("alice", 0),
        ("ghost", ErrorCode.RESOURCE_NOT_FOUND),
        ("twice", ErrorCode.DUPLICATE_RESOURCE),
    ]
    denied = call(spec, "User:bob", DescribeUserScramCredentialsRequest(users=None))
    assert denied.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and denied.results == []
