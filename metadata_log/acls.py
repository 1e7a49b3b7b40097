"""Kafka's ACL vocabulary, as the wire and the metadata records number it.

An ACL (``AccessControlEntryRecord`` in the metadata log; CreateAcls/DescribeAcls/DeleteAcls on
the wire) allows or denies one *principal* (``User:alice``, or ``User:*``) from one *host* (an IP
address, or ``*``) one *operation* on the resources one *pattern* matches: a resource type and a
name, matched literally (the name ``*`` matches every resource of the type) or as a prefix.

The authorizer (:mod:`metadata_log.authorizer`) decides with the semantics of Kafka's
``StandardAuthorizer``; this module holds only the values both sides of the wire share.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Final, Protocol

CLUSTER_NAME: Final = "kafka-cluster"  # the one CLUSTER resource's name
WILDCARD: Final = "*"  # a literal resource name, principal or host matching every one


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: literal or prefixed
    MATCH = 2  # filters only: every ACL that would apply to the named resource
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ACL as the metadata image holds it (its record's id is the image's key)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType  # LITERAL or PREFIXED
    principal: str  # "User:alice" or "User:*"
    host: str  # an address or "*"
    operation: AclOperation
    permission: AclPermissionType  # ALLOW or DENY


@dataclass(frozen=True, slots=True)
class StoredAcl:
    id: uuid.UUID
    entry: AclEntry


class Authorizer(Protocol):
    """Decides whether a principal connecting from a host may perform an operation."""

    @property
    def enabled(self) -> bool:
        """False when ``authorizer.class.name`` is unset: everything is allowed and the ACL
        APIs answer SECURITY_DISABLED."""
        ...

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool: ...

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, resource_name: str
    ) -> frozenset[AclOperation]:
        """KIP-430: the operations of ``resource_type`` the principal may perform on the
        resource (for Metadata's, DescribeCluster's and DescribeGroups' bit fields)."""
        ...
