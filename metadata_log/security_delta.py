"""Deltas of the security state: ACLs (Kafka's ``AclsDelta``) and SCRAM credentials (Kafka's
``ScramDelta``), replayed by :class:`metadata_log.delta.MetadataDelta` like every other part of
the image. Replay returns False for a record that does not fit (see ``metadata_log.delta``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from kafka_protocol.metadata import (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from metadata_log.acls import AclEntry
from metadata_log.image import acl_from_record, frozen_map, overlay
from metadata_log.scram import SCRAM_MECHANISM_NAMES, ScramCredential, ScramKey


class AclsDelta:
    """ACLs added (or replaced) and removed, by record id (Kafka's ``AclsDelta``)."""

    __slots__ = ("changes", "image")

    def __init__(self, image: Mapping[uuid.UUID, AclEntry]) -> None:
        self.image = image
        self.changes: dict[uuid.UUID, AclEntry | None] = {}

    def replay(self, record: AccessControlEntryRecord) -> bool:
        entry = acl_from_record(record)
        if entry is None:
            return False
        self.changes[record.id] = entry
        return True

    def replay_remove(self, record: RemoveAccessControlEntryRecord) -> bool:
        current = (
            self.changes[record.id] if record.id in self.changes else self.image.get(record.id)
        )
        if current is None:
            return False
        self.changes[record.id] = None
        return True

    def apply(self) -> Mapping[uuid.UUID, AclEntry]:
        return frozen_map(overlay(self.image, self.changes))


class ScramDelta:
    """SCRAM credentials set and removed, by (user, mechanism) (Kafka's ``ScramDelta``)."""

    __slots__ = ("changes", "image")

    def __init__(self, image: Mapping[ScramKey, ScramCredential]) -> None:
        self.image = image
        self.changes: dict[ScramKey, ScramCredential | None] = {}

    def replay(self, record: UserScramCredentialRecord) -> bool:
        mechanism = SCRAM_MECHANISM_NAMES.get(record.mechanism)
        if mechanism is None or not record.name or record.iterations <= 0:
            return False
        self.changes[record.name, mechanism] = ScramCredential(
            salt=bytes(record.salt),
            stored_key=bytes(record.stored_key),
            server_key=bytes(record.server_key),
            iterations=record.iterations,
        )
        return True

    def replay_remove(self, record: RemoveUserScramCredentialRecord) -> bool:
        mechanism = SCRAM_MECHANISM_NAMES.get(record.mechanism)
        key = (record.name, mechanism or "")
        current = self.changes[key] if key in self.changes else self.image.get(key)
        if mechanism is None or current is None:
            return False
        self.changes[key] = None
        return True

    def apply(self) -> Mapping[ScramKey, ScramCredential]:
        return frozen_map(overlay(self.image, self.changes))
