"""Which ACLs a DescribeAcls or DeleteAcls filter selects, and what a new ACL must be.

Kafka's ``AclBindingFilter``: a pattern filter (resource type or ANY; pattern type LITERAL,
PREFIXED, ANY or MATCH; a name or null for any) and an entry filter (principal, host: a value or
null for any, compared exactly; operation, permission: a value or ANY). MATCH selects the ACLs
that would apply to the named resource: literal ones of that name or of ``*``, and prefixed ones
whose prefix starts the name. ANY with a name selects literal and prefixed ACLs of exactly that
name. A filter holding UNKNOWN (or a code Kafka does not define) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from metadata_log.acls import (
    CLUSTER_NAME,
    WILDCARD,
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

E = TypeVar("E", ResourceType, PatternType, AclOperation, AclPermissionType)


def _enum_or_unknown(kind: type[E], code: int) -> E:
    try:
        return kind(code)
    except ValueError:
        return kind(0)  # UNKNOWN


@dataclass(frozen=True, slots=True)
class AclFilter:
    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    @classmethod
    def of(
        cls,
        resource_type: int,
        resource_name: str | None,
        pattern_type: int,
        principal: str | None,
        host: str | None,
        operation: int,
        permission: int,
    ) -> AclFilter:
        """From wire codes (an unknown code becomes UNKNOWN, which :meth:`error` refuses)."""
        return cls(
            _enum_or_unknown(ResourceType, resource_type),
            resource_name,
            _enum_or_unknown(PatternType, pattern_type),
            principal,
            host,
            _enum_or_unknown(AclOperation, operation),
            _enum_or_unknown(AclPermissionType, permission),
        )

    def error(self) -> str | None:
        """Why Kafka refuses this filter (INVALID_REQUEST), or None."""
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            return "Unknown patternFilter."
        if self.operation == AclOperation.UNKNOWN or self.permission == AclPermissionType.UNKNOWN:
            return "Unknown entryFilter."
        return None

    def matches(self, acl: AclEntry) -> bool:
        return self._pattern_matches(acl) and self._entry_matches(acl)

    def _pattern_matches(self, acl: AclEntry) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, acl.pattern_type):
            return False
        name = self.resource_name
        if name is None:
            return True
        if self.pattern_type in (PatternType.ANY, acl.pattern_type):
            return name == acl.resource_name
        # MATCH: the ACLs that apply to the resource ``name``
        if acl.pattern_type == PatternType.LITERAL:
            return acl.resource_name in (name, WILDCARD)
        return name.startswith(acl.resource_name)

    def _entry_matches(self, acl: AclEntry) -> bool:
        return (
            self.principal in (None, acl.principal)
            and self.host in (None, acl.host)
            and self.operation in (AclOperation.ANY, acl.operation)
            and self.permission in (AclPermissionType.ANY, acl.permission)
        )


def new_acl(
    resource_type: int,
    resource_name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission: int,
) -> AclEntry | str:
    """The ACL a CreateAcls creation asks for, or why Kafka refuses it (INVALID_REQUEST)."""
    kind = _enum_or_unknown(ResourceType, resource_type)
    pattern = _enum_or_unknown(PatternType, pattern_type)
    op = _enum_or_unknown(AclOperation, operation)
    perm = _enum_or_unknown(AclPermissionType, permission)
    if kind in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {kind.name}"
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {pattern.name}"
    if op in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {op.name}"
    if perm not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {perm.name}"
    if not resource_name:
        return "Resource name should not be empty"
    if kind == ResourceType.CLUSTER and resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if ":" not in principal:  # Kafka's SecurityUtils.parseKafkaPrincipal
        return (
            "expected a string in format principalType:principalName but got"
            f" {principal or 'an empty string'}"
        )
    return AclEntry(kind, resource_name, pattern, principal, host, op, perm)
