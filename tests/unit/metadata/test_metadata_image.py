"""The cluster image and deltas: replay semantics, snapshots (image -> records -> image),
structural sharing and local replica changes."""

from __future__ import annotations

import uuid

from hypothesis import given
from metadata_helpers import (
    TOPIC_IDS,
    assert_snapshot_round_trip,
    record_batches,
    replay_batches,
)

from kafka_protocol.metadata import (
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
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from metadata_log.delta import MetadataDelta, replay_records
from metadata_log.image import (
    ClusterImage,
    ConfigResource,
    PartitionImage,
    TopicPartition,
)
from metadata_log.records import MetadataRecord, decode_record, encode_record

A, B = TOPIC_IDS[0], TOPIC_IDS[1]


def partition(
    topic_id: uuid.UUID, pid: int, replicas: list[int], leader: int, epoch: int = 0
) -> PartitionRecord:
    return PartitionRecord(
        partition_id=pid,
        topic_id=topic_id,
        replicas=replicas,
        isr=list(replicas),
        leader=leader,
        leader_epoch=epoch,
        partition_epoch=epoch,
    )


def base_image() -> ClusterImage:
    return replay_records(
        ClusterImage.EMPTY,
        [
            TopicRecord(name="a", topic_id=A),
            partition(A, 0, [1, 2], 1),
            partition(A, 1, [2, 3], 2),
            TopicRecord(name="b", topic_id=B),
            partition(B, 0, [3], 3),
            ConfigRecord(resource_type=2, resource_name="a", name="retention.ms", value="10"),
            RegisterBrokerRecord(broker_id=1, broker_epoch=5, fenced=False),
        ],
    )


# --- properties -------------------------------------------------------------------------------


@given(record_batches)
def test_snapshot_round_trip_after_every_batch(batches: list[list[MetadataRecord]]) -> None:
    for image in replay_batches(ClusterImage.EMPTY, batches):
        assert_snapshot_round_trip(image)
        for record in image.to_records():
            assert decode_record(encode_record(record)) == record


@given(record_batches)
def test_one_delta_equals_one_delta_per_batch(batches: list[list[MetadataRecord]]) -> None:
    images = replay_batches(ClusterImage.EMPTY, batches)
    flat = [r for batch in batches for r in batch]
    assert replay_records(ClusterImage.EMPTY, flat) == (
        images[-1] if images else ClusterImage.EMPTY
    )


@given(record_batches)
def test_image_indexes_stay_consistent(batches: list[list[MetadataRecord]]) -> None:
    for image in replay_batches(ClusterImage.EMPTY, batches):
        assert len(image.topics.by_id) == len(image.topics.by_name)
        for name, topic in image.topics.by_name.items():
            assert topic.name == name and image.topics.by_id[topic.topic_id] is topic
        assert all(image.configs.values()), "empty config resources are dropped"


@given(record_batches, record_batches)
def test_local_changes_match_an_oracle(
    first: list[list[MetadataRecord]], second: list[list[MetadataRecord]]
) -> None:
    before = replay_records(ClusterImage.EMPTY, [r for batch in first for r in batch])
    delta = MetadataDelta(before).replay_all([r for batch in second for r in batch])
    after = delta.apply()
    deleted_ids = set() if delta.topics_delta is None else delta.topics_delta.deleted_topic_ids
    for broker in range(4):
        changes = delta.local_changes(broker)
        deleted, leaders, followers = set(), set(), set()
        for topic_id, topic in before.topics.by_id.items():
            for pid, p in topic.partitions.items():
                gone = (
                    topic_id in deleted_ids
                    or broker not in after.topics.by_id[topic_id].partitions[pid].replicas
                )
                if broker in p.replicas and gone:
                    deleted.add(TopicPartition(topic.name, pid))
        for topic_id, topic in after.topics.by_id.items():
            old = (
                {}
                if topic_id in deleted_ids or topic_id not in before.topics.by_id
                else before.topics.by_id[topic_id].partitions
            )
            for pid, p in topic.partitions.items():
                prev = old.get(pid)
                if broker in p.replicas and (
                    prev is None or prev.partition_epoch != p.partition_epoch
                ):
                    (leaders if p.leader == broker else followers).add(
                        TopicPartition(topic.name, pid)
                    )
        assert changes.deleted == deleted
        assert set(changes.leaders) == leaders
        assert set(changes.followers) == followers
        assert set(changes.elected_leaders) <= set(changes.leaders)


# --- partitions -------------------------------------------------------------------------------


def change(**fields: object) -> PartitionChangeRecord:
    return PartitionChangeRecord(partition_id=0, topic_id=A, **fields)  # type: ignore[arg-type]


def test_partition_change_encodings() -> None:
    image = base_image()
    p0 = image.topics.partition("a", 0)
    assert p0 == PartitionImage(
        replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=0, partition_epoch=0
    )

    unchanged = replay_records(image, [change()]).topics.partition("a", 0)
    assert unchanged == PartitionImage((1, 2), (1, 2), 1, leader_epoch=0, partition_epoch=1)

    shrunk = replay_records(image, [change(isr=[1])]).topics.partition("a", 0)
    assert (shrunk.isr, shrunk.leader, shrunk.leader_epoch, shrunk.partition_epoch) == (
        (1,),
        1,
        0,
        1,
    )

    no_leader = replay_records(image, [change(leader=-1)]).topics.partition("a", 0)
    assert (no_leader.leader, no_leader.leader_epoch, no_leader.isr) == (-1, 1, (1, 2))

    same_leader = replay_records(image, [change(leader=1)]).topics.partition("a", 0)
    assert (same_leader.leader, same_leader.leader_epoch) == (1, 1), (
        "setting the leader bumps the epoch"
    )

    moved = replay_records(
        image, [change(replicas=[2, 3], isr=[2], leader=2, leader_recovery_state=1)]
    )
    p = moved.topics.partition("a", 0)
    assert (p.replicas, p.isr, p.leader, p.leader_recovery_state) == ((2, 3), (2,), 2, 1)
    assert replay_records(moved, [change()]).topics.partition("a", 0).leader_recovery_state == 1

    elr = replay_records(image, [change(eligible_leader_replicas=[2], last_known_elr=[1])])
    assert (elr.topics.partition("a", 0).elr, elr.topics.partition("a", 0).last_known_elr) == (
        (2,),
        (1,),
    )


def test_records_that_do_not_fit_are_ignored() -> None:
    image = base_image()
    missing = uuid.UUID(int=99)
    delta = MetadataDelta(image).replay_all(
        [
            PartitionRecord(partition_id=0, topic_id=missing),
            PartitionChangeRecord(partition_id=7, topic_id=A, leader=2),
            RemoveTopicRecord(topic_id=missing),
            TopicRecord(name="a", topic_id=uuid.UUID(int=98)),  # name taken
            TopicRecord(name="z", topic_id=A),  # id taken
            FenceBrokerRecord(id=1, epoch=4),  # stale epoch
            UnfenceBrokerRecord(id=9, epoch=0),
            UnregisterBrokerRecord(broker_id=9),
            BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5, fenced=3),
        ]
    )
    assert delta.ignored_records == 9
    after = delta.apply()
    assert (after.topics, after.brokers) == (image.topics, image.brokers)
    assert after.offset == image.offset + 9


def test_structural_sharing() -> None:
    image = base_image()
    after = replay_records(image, [change(isr=[1])])
    assert after.topics.by_name["b"] is image.topics.by_name["b"]
    assert after.topics.by_name["a"].partitions[1] is image.topics.by_name["a"].partitions[1]
    assert after.brokers is image.brokers and after.configs is image.configs
    assert replay_records(image, [NoOpRecord()]).topics is image.topics


# --- topics and configs -----------------------------------------------------------------------


def test_remove_topic_removes_its_configs_and_frees_its_name() -> None:
    image = base_image()
    new_id = uuid.UUID(int=77)
    after = replay_records(
        image,
        [
            RemoveTopicRecord(topic_id=A),
            TopicRecord(name="a", topic_id=new_id),
            partition(new_id, 0, [1], 1),
        ],
    )
    assert after.topics.by_name["a"].topic_id == new_id
    assert A not in after.topics.by_id
    assert after.topic_configs("a") == {}
    assert list(after.topics.by_name["a"].partitions) == [0]


def test_topic_created_and_removed_in_one_delta_leaves_nothing() -> None:
    image = base_image()
    new_id = uuid.UUID(int=55)
    after = replay_records(
        image, [TopicRecord(name="n", topic_id=new_id), RemoveTopicRecord(topic_id=new_id)]
    )
    assert after.topics == image.topics


def test_config_records() -> None:
    image = base_image()
    after = replay_records(
        image,
        [
            ConfigRecord(
                resource_type=2, resource_name="a", name="cleanup.policy", value="compact"
            ),
            ConfigRecord(resource_type=2, resource_name="a", name="retention.ms", value=None),
            ConfigRecord(resource_type=4, resource_name="", name="log.retention.ms", value="5"),
        ],
    )
    assert after.topic_configs("a") == {"cleanup.policy": "compact"}
    assert after.configs[ConfigResource(4, "")] == {"log.retention.ms": "5"}
    emptied = replay_records(
        after, [ConfigRecord(resource_type=2, resource_name="a", name="cleanup.policy", value=None)]
    )
    assert ConfigResource(2, "a") not in emptied.configs


def test_features() -> None:
    image = replay_records(
        ClusterImage.EMPTY, [FeatureLevelRecord(name="metadata.version", feature_level=25)]
    )
    assert image.metadata_version == 25
    assert (
        replay_records(
            image, [FeatureLevelRecord(name="metadata.version", feature_level=0)]
        ).features
        == {}
    )
    snapshot = replay_records(
        image, [FeatureLevelRecord(name="a.feature", feature_level=1)]
    ).to_records()
    assert isinstance(snapshot[0], FeatureLevelRecord) and snapshot[0].name == "metadata.version"


# --- brokers ----------------------------------------------------------------------------------


def test_broker_lifecycle() -> None:
    image = replay_records(
        ClusterImage.EMPTY,
        [
            RegisterBrokerRecord(
                broker_id=1,
                broker_epoch=3,
                incarnation_id=uuid.UUID(int=1),
                end_points=[
                    RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="h", port=9092)
                ],
                rack="r1",
            )
        ],
    )
    broker = image.brokers[1]
    assert (broker.fenced, broker.epoch, broker.rack, broker.is_active) == (True, 3, "r1", False)
    assert broker.listener("PLAINTEXT") is not None and broker.listener("SSL") is None
    unfenced = replay_records(image, [UnfenceBrokerRecord(id=1, epoch=3)]).brokers[1]
    assert unfenced.is_active
    shutting = replay_records(
        image,
        [
            BrokerRegistrationChangeRecord(
                broker_id=1, broker_epoch=3, fenced=-1, in_controlled_shutdown=1
            )
        ],
    ).brokers[1]
    assert (shutting.fenced, shutting.in_controlled_shutdown) == (False, True)
    refenced = replay_records(
        image, [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=3, fenced=1)]
    )
    assert refenced.brokers[1].fenced
    assert (
        replay_records(image, [UnregisterBrokerRecord(broker_id=1, broker_epoch=3)]).brokers == {}
    )


def test_producer_ids_only_move_forward() -> None:
    image = replay_records(base_image(), [ProducerIdsRecord(broker_id=1, next_producer_id=2000)])
    assert image.next_producer_id == 2000
    delta = MetadataDelta(image).replay_all([ProducerIdsRecord(broker_id=1, next_producer_id=1000)])
    assert delta.ignored_records == 1 and delta.apply().next_producer_id == 2000
    assert_snapshot_round_trip(image)


def test_unmodelled_records_only_advance_the_offset() -> None:
    image = base_image()
    after = replay_records(image, [ClientQuotaRecord(key="producer_byte_rate", value=1.0)], epoch=4)
    assert (after.offset, after.epoch) == (image.offset + 1, 4)
    assert (after.topics, after.configs, after.brokers, after.features) == (
        image.topics,
        image.configs,
        image.brokers,
        image.features,
    )


# --- local changes ----------------------------------------------------------------------------


def test_local_changes() -> None:
    image = base_image()
    c_id = uuid.UUID(int=66)
    delta = MetadataDelta(image).replay_all(
        [
            change(leader=2, isr=[2]),  # a-0: broker 2 becomes leader, 1 follower
            PartitionChangeRecord(
                partition_id=1, topic_id=A, replicas=[3], isr=[3], leader=3
            ),  # 2 leaves a-1
            RemoveTopicRecord(topic_id=B),  # b-0 was on 3
            TopicRecord(name="c", topic_id=c_id),
            partition(c_id, 0, [1, 3], 1),
        ]
    )
    one, two, three = delta.local_changes(1), delta.local_changes(2), delta.local_changes(3)
    assert set(one.followers) == {TopicPartition("a", 0)}
    assert set(one.leaders) == set(one.elected_leaders) == {TopicPartition("c", 0)}
    assert one.deleted == frozenset()
    assert set(two.leaders) == set(two.elected_leaders) == {TopicPartition("a", 0)}
    assert two.deleted == {TopicPartition("a", 1)}
    assert two.leaders[TopicPartition("a", 0)].topic_id == A
    assert set(three.leaders) == {TopicPartition("a", 1)}
    assert set(three.followers) == {TopicPartition("c", 0)}
    assert three.deleted == {TopicPartition("b", 0)}
    assert MetadataDelta(image).local_changes(1).is_empty


def test_isr_change_is_a_leader_change_without_election() -> None:
    image = base_image()
    changes = MetadataDelta(image).replay_all([change(isr=[1])]).local_changes(1)
    assert set(changes.leaders) == {TopicPartition("a", 0)}
    assert changes.elected_leaders == {}
