"""ACLs and SCRAM credentials in the metadata image: replay, removal and snapshots."""

from __future__ import annotations

import dataclasses
import uuid

from metadata_helpers import assert_snapshot_round_trip

from kafka_protocol.metadata import (
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from metadata_log.acls import AclEntry, AclOperation, AclPermissionType, PatternType, ResourceType
from metadata_log.delta import MetadataDelta, replay_records
from metadata_log.image import ClusterImage, acl_record
from metadata_log.scram import ScramCredential

A, B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)
READ_T = AclEntry(
    ResourceType.TOPIC,
    "t",
    PatternType.LITERAL,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)


def scram(name: str, mechanism: int, iterations: int = 4096) -> UserScramCredentialRecord:
    return UserScramCredentialRecord(
        name=name,
        mechanism=mechanism,
        salt=b"s",
        stored_key=b"k",
        server_key=b"v",
        iterations=iterations,
    )


def test_acls_are_added_replaced_and_removed_by_id() -> None:
    image = replay_records(ClusterImage.EMPTY, [acl_record(A, READ_T)])
    assert dict(image.acls) == {A: READ_T}
    deny = AclEntry(
        ResourceType.GROUP,
        "g",
        PatternType.PREFIXED,
        "User:*",
        "10.0.0.1",
        AclOperation.ALL,
        AclPermissionType.DENY,
    )
    image = replay_records(image, [acl_record(A, deny), acl_record(B, READ_T)])
    assert dict(image.acls) == {A: deny, B: READ_T}
    assert_snapshot_round_trip(image)
    image = replay_records(image, [RemoveAccessControlEntryRecord(id=A)])
    assert dict(image.acls) == {B: READ_T}
    assert not replay_records(image, [RemoveAccessControlEntryRecord(id=B)]).acls


def test_acl_records_that_do_not_fit_are_ignored() -> None:
    delta = MetadataDelta(ClusterImage.EMPTY)
    delta.replay(RemoveAccessControlEntryRecord(id=A))  # no such ACL
    record = acl_record(A, READ_T)
    for bad in [
        dataclasses.replace(record, resource_type=ResourceType.ANY),
        dataclasses.replace(record, pattern_type=PatternType.MATCH),
        dataclasses.replace(record, operation=AclOperation.ANY),
        dataclasses.replace(record, permission_type=9),
    ]:
        delta.replay(bad)
    assert delta.ignored_records == 5 and not delta.apply().acls


def test_acl_added_and_removed_in_one_delta_leaves_nothing() -> None:
    delta = MetadataDelta(ClusterImage.EMPTY)
    delta.replay_all([acl_record(A, READ_T), RemoveAccessControlEntryRecord(id=A)])
    assert delta.ignored_records == 0 and not delta.apply().acls


def test_scram_credentials_by_user_and_mechanism() -> None:
    image = replay_records(
        ClusterImage.EMPTY, [scram("alice", 1), scram("alice", 2, 8192), scram("bob", 1)]
    )
    assert image.scram["alice", "SCRAM-SHA-512"] == ScramCredential(b"s", b"k", b"v", 8192)
    assert set(image.scram) == {
        ("alice", "SCRAM-SHA-256"),
        ("alice", "SCRAM-SHA-512"),
        ("bob", "SCRAM-SHA-256"),
    }
    assert_snapshot_round_trip(image)
    delta = MetadataDelta(image)
    delta.replay_all(
        [
            RemoveUserScramCredentialRecord(name="alice", mechanism=1),
            RemoveUserScramCredentialRecord(name="carol", mechanism=1),  # ignored: none
            RemoveUserScramCredentialRecord(name="bob", mechanism=7),  # ignored: no mechanism
            scram("dave", 3),  # ignored: no mechanism
        ]
    )
    assert delta.ignored_records == 3
    assert set(delta.apply().scram) == {("alice", "SCRAM-SHA-512"), ("bob", "SCRAM-SHA-256")}
