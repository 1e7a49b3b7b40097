"""ACL and SCRAM-credential admin APIs on a broker.

DescribeAcls (29) and DescribeUserScramCredentials (50) are served from the broker's image;
CreateAcls (30), DeleteAcls (31) and AlterUserScramCredentials (51) are forwarded to the active
controller (``broker.controller_channel.FORWARDED``) once :meth:`SecurityAdminHandlers.guard`
has checked them here, as Kafka's broker does before forwarding: ALTER on the cluster to
change, DESCRIBE on the cluster to describe (CLUSTER_AUTHORIZATION_FAILED otherwise), and the
ACL APIs answer SECURITY_DISABLED when ``authorizer.class.name`` is unset. A description never
holds a salt or a key: only each credential's mechanism and iteration count.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Final

from broker.controller_channel import forwarded_api
from broker.dispatcher import ApiHandler, HandlerResult, RequestContext
from broker.identity import ImageSource
from broker.security.authorization import BrokerAuthorizer
from kafka_protocol._codec import Response
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from metadata_log.acl_filter import AclFilter
from metadata_log.acls import AclEntry, AclOperation, ResourceType
from metadata_log.scram import SCRAM_MECHANISM_IDS

SECURITY_DISABLED_MESSAGE: Final = "No Authorizer is configured."
CLUSTER_DENIED_MESSAGE: Final = "Cluster authorization failed."
_ACL_CHANGES: Final = frozenset({CreateAclsRequest.API_KEY, DeleteAclsRequest.API_KEY})
_GUARDED: Final = _ACL_CHANGES | {AlterUserScramCredentialsRequest.API_KEY}
ScramResult = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult


class SecurityAdminHandlers:
    def __init__(self, authorizer: BrokerAuthorizer, image: ImageSource) -> None:
        self.authorizer = authorizer
        self.image = image

    def specs(self) -> list[ApiHandler]:
        return [
            ApiHandler(29, 0, 3, self.describe_acls, "DescribeAcls"),
            ApiHandler(
                50, 0, 0, self.describe_user_scram_credentials, "DescribeUserScramCredentials"
            ),
        ]

    def guard(self, handlers: list[ApiHandler]) -> list[ApiHandler]:
        """``handlers`` with the forwarded ACL and SCRAM changes checked before forwarding."""
        return [
            dataclasses.replace(h, handle=self._guarded(h)) if h.api_key in _GUARDED else h
            for h in handlers
        ]

    def _guarded(self, handler: ApiHandler) -> Any:
        def handle(ctx: RequestContext, request: Any) -> HandlerResult:
            error, message = self._change_refused(ctx, request)
            if error is None:
                return handler.handle(ctx, request)
            refused: Response = forwarded_api(request).failed(request, error, message)
            return refused

        return handle

    def _change_refused(self, ctx: RequestContext, request: Any) -> tuple[ErrorCode | None, str]:
        if request.API_KEY in _ACL_CHANGES and not self.authorizer.enabled:
            return ErrorCode.SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE
        if not self.authorizer.authorize(ctx.session, AclOperation.ALTER, ResourceType.CLUSTER):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED_MESSAGE
        return None, ""

    # --- ACLs -----------------------------------------------------------------------------------

    def describe_acls(self, ctx: RequestContext, req: DescribeAclsRequest) -> DescribeAclsResponse:
        if not self.authorizer.enabled:
            return DescribeAclsResponse(
                error_code=ErrorCode.SECURITY_DISABLED, error_message=SECURITY_DISABLED_MESSAGE
            )
        if not self.authorizer.authorize(ctx.session, AclOperation.DESCRIBE, ResourceType.CLUSTER):
            return DescribeAclsResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                error_message=CLUSTER_DENIED_MESSAGE,
            )
        acl_filter = AclFilter.of(
            req.resource_type_filter,
            req.resource_name_filter,
            req.pattern_type_filter,
            req.principal_filter,
            req.host_filter,
            req.operation,
            req.permission_type,
        )
        error = acl_filter.error()
        if error is not None:
            return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=error)
        found = [acl for acl in self.image().acls.values() if acl_filter.matches(acl)]
        return DescribeAclsResponse(error_message=None, resources=_by_resource(found))

    # --- SCRAM credentials ----------------------------------------------------------------------

    def describe_user_scram_credentials(
        self, ctx: RequestContext, req: DescribeUserScramCredentialsRequest
    ) -> DescribeUserScramCredentialsResponse:
        if not self.authorizer.authorize(ctx.session, AclOperation.DESCRIBE, ResourceType.CLUSTER):
            return DescribeUserScramCredentialsResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                error_message=CLUSTER_DENIED_MESSAGE,
            )
        scram = self.image().scram
        wanted = Counter(u.name for u in req.users or ())
        if not wanted:
            wanted = Counter(sorted({user for user, _ in scram}))
        results = []
        for user, count in wanted.items():
            if count > 1:
                message = (
                    "Cannot describe SCRAM credentials for the same user twice in a single"
                    f" request: {user}"
                )
                results.append(_scram_failed(user, ErrorCode.DUPLICATE_RESOURCE, message))
                continue
            infos = [
                DescribeUserScramCredentialsResponse.CredentialInfo(
                    mechanism=mechanism_id, iterations=scram[user, mechanism].iterations
                )
                for mechanism, mechanism_id in SCRAM_MECHANISM_IDS.items()
                if (user, mechanism) in scram
            ]
            if infos:
                results.append(ScramResult(user=user, error_message=None, credential_infos=infos))
            else:
                message = f"Attempt to describe a user credential that does not exist: {user}"
                results.append(_scram_failed(user, ErrorCode.RESOURCE_NOT_FOUND, message))
        return DescribeUserScramCredentialsResponse(error_message=None, results=results)


def _scram_failed(user: str, error: ErrorCode, message: str) -> ScramResult:
    return ScramResult(user=user, error_code=error, error_message=message)


def _by_resource(acls: list[AclEntry]) -> list[DescribeAclsResponse.DescribeAclsResource]:
    """ACLs grouped by resource pattern, in a stable order."""
    groups: dict[tuple[int, str, int], list[DescribeAclsResponse.AclDescription]] = {}
    for acl in sorted(acls, key=lambda a: (a.resource_type, a.resource_name, a.pattern_type)):
        key = (int(acl.resource_type), acl.resource_name, int(acl.pattern_type))
        groups.setdefault(key, []).append(
            DescribeAclsResponse.AclDescription(
                principal=acl.principal,
                host=acl.host,
                operation=acl.operation,
                permission_type=acl.permission,
            )
        )
    return [
        DescribeAclsResponse.DescribeAclsResource(
            resource_type=kind, resource_name=name, pattern_type=pattern, acls=descriptions
        )
        for (kind, name, pattern), descriptions in groups.items()
    ]
