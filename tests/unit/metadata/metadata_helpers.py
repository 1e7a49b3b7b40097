"""Strategies for metadata-record sequences and checks shared by the metadata tests.

Records are drawn from small pools of topic ids, names, broker ids and epochs so that random
sequences interact: partitions of existing and missing topics, fences with right and stale
epochs, re-created names, configs of removed topics.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import strategies as st

from kafka_protocol.metadata import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from metadata_log.delta import MetadataDelta, replay_records
from metadata_log.image import ClusterImage
from metadata_log.records import MetadataRecord

TOPIC_IDS = [uuid.UUID(f"{i:08x}-0000-4000-8000-000000000000") for i in range(1, 6)]
TOPIC_NAMES = ["a", "b", "c", "a.b", "a_b"]
BROKERS = st.integers(0, 3)
EPOCHS = st.sampled_from([0, 1, 2, 7])
broker_lists = st.lists(BROKERS, max_size=4)
maybe_broker_lists = st.none() | broker_lists

topic_records = st.builds(
    TopicRecord, name=st.sampled_from(TOPIC_NAMES), topic_id=st.sampled_from(TOPIC_IDS)
)
partition_records = st.builds(
    PartitionRecord,
    partition_id=st.integers(0, 3),
    topic_id=st.sampled_from(TOPIC_IDS),
    replicas=broker_lists,
    isr=broker_lists,
    removing_replicas=broker_lists,
    adding_replicas=broker_lists,
    leader=st.integers(-1, 3),
    leader_recovery_state=st.integers(0, 1),
    leader_epoch=st.integers(0, 5),
    partition_epoch=st.integers(0, 5),
    eligible_leader_replicas=maybe_broker_lists,
    last_known_elr=maybe_broker_lists,
)
partition_change_records = st.builds(
    PartitionChangeRecord,
    partition_id=st.integers(0, 3),
    topic_id=st.sampled_from(TOPIC_IDS),
    isr=maybe_broker_lists,
    leader=st.integers(-2, 3),
    replicas=maybe_broker_lists,
    removing_replicas=maybe_broker_lists,
    adding_replicas=maybe_broker_lists,
    leader_recovery_state=st.integers(-1, 1),
    eligible_leader_replicas=maybe_broker_lists,
    last_known_elr=maybe_broker_lists,
)
config_records = st.builds(
    ConfigRecord,
    resource_type=st.sampled_from([2, 4, 16]),
    resource_name=st.sampled_from([*TOPIC_NAMES, "", "1"]),
    name=st.sampled_from(["retention.ms", "cleanup.policy", "segment.bytes"]),
    value=st.none() | st.sampled_from(["1", "compact", "x"]),
)
endpoints = st.lists(
    st.builds(
        RegisterBrokerRecord.BrokerEndpoint,
        name=st.sampled_from(["PLAINTEXT", "CONTROLLER"]),
        host=st.sampled_from(["h1", "h2"]),
        port=st.integers(0, 65535),
        security_protocol=st.integers(0, 3),
    ),
    max_size=2,
)
features = st.lists(
    st.builds(
        RegisterBrokerRecord.BrokerFeature,
        name=st.sampled_from(["metadata.version", "kraft.version"]),
        min_supported_version=st.integers(0, 3),
        max_supported_version=st.integers(0, 30),
    ),
    max_size=2,
)
register_records = st.builds(
    RegisterBrokerRecord,
    broker_id=BROKERS,
    incarnation_id=st.uuids(),
    broker_epoch=EPOCHS,
    end_points=endpoints,
    features=features,
    rack=st.none() | st.sampled_from(["", "r1", "r2"]),
    fenced=st.booleans(),
    in_controlled_shutdown=st.booleans(),
    log_dirs=st.lists(st.uuids(), max_size=2),
)
broker_records = st.one_of(
    register_records,
    st.builds(UnregisterBrokerRecord, broker_id=BROKERS, broker_epoch=EPOCHS),
    st.builds(FenceBrokerRecord, id=BROKERS, epoch=EPOCHS),
    st.builds(UnfenceBrokerRecord, id=BROKERS, epoch=EPOCHS),
    st.builds(
        BrokerRegistrationChangeRecord,
        broker_id=BROKERS,
        broker_epoch=EPOCHS,
        fenced=st.integers(-1, 2),
        in_controlled_shutdown=st.integers(0, 2),
        log_dirs=st.lists(st.uuids(), max_size=1),
    ),
)
other_records = st.one_of(
    st.builds(
        FeatureLevelRecord,
        name=st.sampled_from(["metadata.version", "kraft.version"]),
        feature_level=st.integers(0, 3),
    ),
    st.just(NoOpRecord()),
    st.builds(
        ProducerIdsRecord,
        broker_id=BROKERS,
        broker_epoch=EPOCHS,
        next_producer_id=st.integers(0, 9),
    ),
    st.builds(RemoveTopicRecord, topic_id=st.sampled_from(TOPIC_IDS)),
)
ACL_IDS = [uuid.UUID(f"{i:08x}-0000-4000-8000-0000000000ac") for i in range(1, 5)]
SCRAM_USERS = st.sampled_from(["admin", "alice", ""])
acl_records = st.builds(
    AccessControlEntryRecord,
    id=st.sampled_from(ACL_IDS),
    resource_type=st.integers(0, 8),  # 0, 1 (UNKNOWN, ANY) and 8 do not fit
    resource_name=st.sampled_from(["a", "a.", "*", "kafka-cluster"]),
    pattern_type=st.integers(2, 5),  # 2 (MATCH) and 5 do not fit
    principal=st.sampled_from(["User:alice", "User:*"]),
    host=st.sampled_from(["*", "127.0.0.1"]),
    operation=st.integers(1, 15),
    permission_type=st.integers(1, 4),
)
security_records = st.one_of(
    acl_records,
    st.builds(RemoveAccessControlEntryRecord, id=st.sampled_from(ACL_IDS)),
    st.builds(
        UserScramCredentialRecord,
        name=SCRAM_USERS,
        mechanism=st.integers(0, 3),
        salt=st.binary(max_size=4),
        stored_key=st.binary(max_size=4),
        server_key=st.binary(max_size=4),
        iterations=st.sampled_from([0, 4096, 8192]),
    ),
    st.builds(RemoveUserScramCredentialRecord, name=SCRAM_USERS, mechanism=st.integers(0, 3)),
)
# Client quotas: a few entities (some invalid: empty, unknown type, empty name) and keys.
QUOTA_ENTITIES = st.sampled_from(
    [
        [("user", "alice")],
        [("user", None)],
        [("client-id", "app"), ("user", "alice")],
        [("user", "alice"), ("client-id", "app")],  # the same entity in another order
        [("client-id", None)],
        [("ip", "10.0.0.1")],
        [],
        [("group", "g")],
        [("user", "")],
    ]
)
quota_records = st.builds(
    ClientQuotaRecord,
    entity=QUOTA_ENTITIES.map(
        lambda pairs: [ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in pairs]
    ),
    key=st.sampled_from(["producer_byte_rate", "request_percentage"]),
    value=st.sampled_from([1.0, 2.5, 1024.0]),
    remove=st.booleans(),
)
metadata_records: st.SearchStrategy[Any] = st.one_of(
    quota_records,
    security_records,
    topic_records,
    partition_records,
    partition_records,
    partition_change_records,
    partition_change_records,
    config_records,
    broker_records,
    other_records,
)
record_batches = st.lists(st.lists(metadata_records, min_size=1, max_size=8), max_size=12)


def assert_snapshot_round_trip(image: ClusterImage) -> None:
    """image -> to_records -> replay into the empty image gives the same image."""
    rebuilt = replay_records(
        ClusterImage.EMPTY, image.to_records(), offset=image.offset, epoch=image.epoch
    )
    assert rebuilt == image


def replay_batches(image: ClusterImage, batches: list[list[MetadataRecord]]) -> list[ClusterImage]:
    """The image after each batch, one delta per batch."""
    images = []
    for batch in batches:
        image = MetadataDelta(image).replay_all(batch).apply()
        images.append(image)
    return images
