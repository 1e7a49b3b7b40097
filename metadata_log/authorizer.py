"""Kafka's ``StandardAuthorizer``: decide from the ACLs of the metadata image.

Theory of operation
-------------------
An ACL matches a request (principal, host, operation on one resource) when

* its pattern matches the resource: same resource type, and a LITERAL name equal to the
  resource's name or equal to ``*``, or a PREFIXED name the resource's name starts with;
* its principal is the request's or the wildcard of the principal's type (``User:*``);
* its host is the client's address or ``*``;
* its operation is the request's or ALL; an ALLOW of READ, WRITE, DELETE or ALTER also allows
  DESCRIBE, and an ALLOW of ALTER_CONFIGS also allows DESCRIBE_CONFIGS (KAFKA-4290; DENY
  implies nothing).

A principal in ``super.users`` is always allowed. Otherwise one matching DENY denies, else one
matching ALLOW allows. With no match, the request is allowed only when
``allow.everyone.if.no.acl.found`` is set *and* no ACL at all (of any principal, host, operation
or permission) has a pattern matching the resource: Kafka's ``StandardAuthorizerData`` sets
``hasResourceAcls`` for every ACL of a matching pattern, whoever it names.

Index: a broker authorizes every request, so the ACLs are bucketed by (resource type, pattern
type, name) and within a bucket by principal. A request looks up its literal name, the literal
``*`` and, for prefixes, only the prefix lengths that some PREFIXED ACL of the type has (a
sorted tuple), then in each bucket found only its principal and its type's wildcard: a handful
of dict lookups and the ACLs that name the principal, whatever the number of ACLs. An
authorizer is immutable; the broker builds a new one when the image's ACLs change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from metadata_log.acls import (
    WILDCARD,
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

_IMPLIES_DESCRIBE: Final = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE}
    | {AclOperation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS: Final = frozenset(
    {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
)

# Kafka's AclEntry.supportedOperations: what KIP-430's authorized operations range over.
SUPPORTED_OPERATIONS: Final[Mapping[ResourceType, frozenset[AclOperation]]] = {
    ResourceType.TOPIC: frozenset(
        {
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.CREATE,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset(
        {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}
        | {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}  # group configs (KIP-848)
    ),
    ResourceType.CLUSTER: frozenset(
        {
            AclOperation.CREATE,
            AclOperation.CLUSTER_ACTION,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.IDEMPOTENT_WRITE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}


def operation_matches(acl: AclEntry, operation: AclOperation) -> bool:
    """Whether ``acl``'s operation covers ``operation`` (Kafka's implied operations)."""
    if acl.operation == AclOperation.ALL or acl.operation == operation:
        return True
    if acl.permission != AclPermissionType.ALLOW:
        return False
    if operation == AclOperation.DESCRIBE:
        return acl.operation in _IMPLIES_DESCRIBE
    if operation == AclOperation.DESCRIBE_CONFIGS:
        return acl.operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


def wildcard_principal(principal: str) -> str:
    """``User:alice`` -> ``User:*``: the wildcard of the principal's type."""
    kind, _, _ = principal.partition(":")
    return f"{kind}:{WILDCARD}"


# The ACLs of one pattern (resource type, pattern type, name), by principal.
_Bucket = Mapping[str, tuple[AclEntry, ...]]


def _bucket(acls: list[AclEntry]) -> _Bucket:
    by_principal: dict[str, list[AclEntry]] = {}
    for acl in acls:
        by_principal.setdefault(acl.principal, []).append(acl)
    return {p: tuple(v) for p, v in by_principal.items()}


class _TypeIndex:
    """The ACLs of one resource type: literal ones by name, prefixed ones by prefix."""

    __slots__ = ("literal", "prefix_lengths", "prefixed")

    def __init__(self, acls: list[AclEntry]) -> None:
        literal: dict[str, list[AclEntry]] = {}
        prefixed: dict[str, list[AclEntry]] = {}
        for acl in acls:
            by_name = literal if acl.pattern_type == PatternType.LITERAL else prefixed
            by_name.setdefault(acl.resource_name, []).append(acl)
        self.literal: dict[str, _Bucket] = {k: _bucket(v) for k, v in literal.items()}
        self.prefixed: dict[str, _Bucket] = {k: _bucket(v) for k, v in prefixed.items()}
        self.prefix_lengths = tuple(sorted({len(p) for p in prefixed}))

    def buckets(self, name: str) -> list[_Bucket]:
        """Every bucket whose pattern matches the resource ``name``."""
        out = []
        exact = self.literal.get(name)
        if exact is not None:
            out.append(exact)
        if name != WILDCARD:
            wildcard = self.literal.get(WILDCARD)
            if wildcard is not None:
                out.append(wildcard)
        for length in self.prefix_lengths:
            if length > len(name):
                break
            bucket = self.prefixed.get(name[:length])
            if bucket is not None:
                out.append(bucket)
        return out


class StandardAuthorizer:
    """An immutable authorizer over one set of ACLs (see the module docstring)."""

    __slots__ = ("_allow_if_no_acl", "_by_type", "_super_users", "acl_count")

    def __init__(
        self,
        acls: Iterable[AclEntry],
        super_users: frozenset[str],
        allow_everyone_if_no_acl_found: bool,
    ) -> None:
        by_type: dict[ResourceType, list[AclEntry]] = {}
        count = 0
        for acl in acls:
            by_type.setdefault(acl.resource_type, []).append(acl)
            count += 1
        self._by_type = {t: _TypeIndex(v) for t, v in by_type.items()}
        self._super_users = super_users
        self._allow_if_no_acl = allow_everyone_if_no_acl_found
        self.acl_count = count

    @property
    def enabled(self) -> bool:
        return True

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        assert operation > AclOperation.ANY and resource_type > ResourceType.ANY
        if principal in self._super_users:
            return True
        index = self._by_type.get(resource_type)
        buckets = index.buckets(resource_name) if index is not None else []
        if not buckets:
            return self._allow_if_no_acl
        principals = (principal, wildcard_principal(principal))
        allowed = False
        for bucket in buckets:
            for who in principals:
                for acl in bucket.get(who, ()):
                    if (acl.host == WILDCARD or acl.host == host) and operation_matches(
                        acl, operation
                    ):
                        if acl.permission == AclPermissionType.DENY:
                            return False
                        allowed = True
        return allowed

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, resource_name: str
    ) -> frozenset[AclOperation]:
        supported = SUPPORTED_OPERATIONS.get(resource_type, frozenset())
        return frozenset(
            op
            for op in supported
            if self.authorize(principal, host, op, resource_type, resource_name)
        )


class _DisabledAuthorizer:
    """No ``authorizer.class.name``: everything is allowed; the ACL APIs are disabled."""

    __slots__ = ()

    @property
    def enabled(self) -> bool:
        return False

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        return True

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, resource_name: str
    ) -> frozenset[AclOperation]:
        return SUPPORTED_OPERATIONS.get(resource_type, frozenset())


DISABLED_AUTHORIZER: Final = _DisabledAuthorizer()
