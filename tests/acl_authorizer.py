"""A :class:`SessionAuthorizer` over given ACLs, for unit tests of the authorization gate.

STAND-IN until helper "authz"'s StandardAuthorizer lands: literal ACLs, DENY beats ALLOW, ALL,
the implied DESCRIBE / DESCRIBE_CONFIGS, super user ``User:admin``.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.security.session import Session
from metadata_log.acls import AclEntry, AclOperation, AclPermissionType, ResourceType
from metadata_log.image import ClusterImage

SUPER_USER = "User:admin"
_IMPLIES = {
    AclOperation.DESCRIBE: {
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    },
    AclOperation.DESCRIBE_CONFIGS: {AclOperation.ALTER_CONFIGS},
}
_OPERATIONS = {
    ResourceType.TOPIC: {3, 4, 5, 6, 7, 8, 10, 11},
    ResourceType.GROUP: {3, 6, 8},
    ResourceType.CLUSTER: {5, 7, 8, 9, 10, 11, 12},
    ResourceType.TRANSACTIONAL_ID: {4, 8},
}


class _Authorizer:
    enabled = True

    def __init__(self, acls: Iterable[AclEntry]) -> None:
        self.acls = list(acls)

    def _matching(self, session: Session, rtype: ResourceType, name: str) -> list[AclEntry]:
        return [
            a
            for a in self.acls
            if a.principal in (session.principal, "User:*")
            and a.resource_type == rtype
            and a.resource_name in (name, "*")
        ]

    def authorize(
        self, session: Session, operation: AclOperation, rtype: ResourceType, name: str
    ) -> bool:
        if session.principal == SUPER_USER:
            return True
        acls = self._matching(session, rtype, name)
        ops = {operation, AclOperation.ALL}
        if any(a.permission == AclPermissionType.DENY and a.operation in ops for a in acls):
            return False
        ops |= _IMPLIES.get(operation, set())
        return any(a.permission == AclPermissionType.ALLOW and a.operation in ops for a in acls)

    def authorized_operations(
        self, session: Session, rtype: ResourceType, name: str
    ) -> frozenset[AclOperation]:
        return frozenset(
            AclOperation(o)
            for o in _OPERATIONS[rtype]
            if self.authorize(session, AclOperation(o), rtype, name)
        )


def session_authorizer(acls: Iterable[AclEntry], image: ClusterImage) -> _Authorizer:
    return _Authorizer(acls)
