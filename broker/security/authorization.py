"""The broker's authorizer: Kafka's ``StandardAuthorizer`` over the current image's ACLs.

``authorizer.class.name`` switches it on (only Kafka's StandardAuthorizer class name, or empty
for none); ``super.users`` (``User:admin;User:broker``) are always allowed and
``allow.everyone.if.no.acl.found`` opens resources no ACL names. The ACLs come from the metadata
image; the :class:`~metadata_log.authorizer.StandardAuthorizer` over them is rebuilt only when
the image's ACL map changes (the image shares an unchanged map by reference, so an identity
check is enough) and is otherwise reused for every request.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from broker.security.session import Session
from metadata_log.acls import CLUSTER_NAME, AclEntry, AclOperation, Authorizer, ResourceType
from metadata_log.authorizer import DISABLED_AUTHORIZER, StandardAuthorizer
from metadata_log.configs import BROKER_CONFIGS, STANDARD_AUTHORIZER
from metadata_log.image import ClusterImage

AUTHORIZER_CLASS_KEY: Final = "authorizer.class.name"
SUPER_USERS_KEY: Final = "super.users"
ALLOW_IF_NO_ACL_KEY: Final = "allow.everyone.if.no.acl.found"
# KIP-430: a resource's authorized operations are not asked for (the field's default).
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)


@dataclass(frozen=True, slots=True)
class AuthorizerSettings:
    enabled: bool
    super_users: frozenset[str]
    allow_everyone_if_no_acl_found: bool

    @classmethod
    def from_config(cls, values: Mapping[str, str]) -> AuthorizerSettings:
        """From Kafka's keys; ValueError naming the key for a bad value."""
        for key in (AUTHORIZER_CLASS_KEY, ALLOW_IF_NO_ACL_KEY):
            if key in values:
                error = BROKER_CONFIGS[key].validate(values[key])
                if error is not None:
                    raise ValueError(error)
        class_name = values.get(AUTHORIZER_CLASS_KEY, "").strip()
        supers = values.get(SUPER_USERS_KEY, "")
        super_users = frozenset(u.strip() for u in supers.split(";") if u.strip())
        for user in super_users:
            if ":" not in user:
                raise ValueError(
                    f"Invalid value {supers} for configuration {SUPER_USERS_KEY}: "
                    f"{user!r} is not a principal (expected Type:name, e.g. User:admin)"
                )
        allow = values.get(ALLOW_IF_NO_ACL_KEY, "false").strip().lower() == "true"
        return cls(class_name == STANDARD_AUTHORIZER, super_users, allow)


def operations_bits(operations: frozenset[AclOperation]) -> int:
    """KIP-430's bit field: bit ``op`` set for each operation."""
    bits = 0
    for op in operations:
        bits |= 1 << op
    return bits


class BrokerAuthorizer:
    """Authorizes a connection's principal against the current image's ACLs."""

    def __init__(self, settings: AuthorizerSettings, image: Callable[[], ClusterImage]) -> None:
        self.settings = settings
        self._image = image
        self._acls: Mapping[uuid.UUID, AclEntry] | None = None
        self._current: Authorizer = DISABLED_AUTHORIZER

    @classmethod
    def from_config(
        cls, values: Mapping[str, str], image: Callable[[], ClusterImage]
    ) -> BrokerAuthorizer:
        return cls(AuthorizerSettings.from_config(values), image)

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def current(self) -> Authorizer:
        """The authorizer over the current image's ACLs (rebuilt only when they changed)."""
        if not self.settings.enabled:
            return DISABLED_AUTHORIZER
        acls = self._image().acls
        if acls is not self._acls:
            self._current = StandardAuthorizer(
                acls.values(),
                self.settings.super_users,
                self.settings.allow_everyone_if_no_acl_found,
            )
            self._acls = acls
        return self._current

    def authorize(
        self,
        session: Session,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str = CLUSTER_NAME,
    ) -> bool:
        return self.current().authorize(
            session.principal, session.client_host, operation, resource_type, name
        )

    def authorized_operations(
        self, session: Session, resource_type: ResourceType, name: str = CLUSTER_NAME
    ) -> frozenset[AclOperation]:
        return self.current().authorized_operations(
            session.principal, session.client_host, resource_type, name
        )

    def authorized_operations_bits(
        self, session: Session, resource_type: ResourceType, name: str = CLUSTER_NAME
    ) -> int:
        """KIP-430's ``*_authorized_operations`` field for the resource."""
        return operations_bits(self.authorized_operations(session, resource_type, name))
