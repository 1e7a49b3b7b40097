"""Each replica's log directory (KIP-858) in ``PartitionImage``: replica changes keep every
remaining replica's directory and give new ones none, an assignment sets them all, and a
snapshot keeps them (a state machine against a dict model); a replica is offline where its
own directory is."""

from __future__ import annotations

import uuid
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from broker.handlers.metadata import partition_error
from kafka_protocol.errors import ErrorCode
from kafka_protocol.metadata import PartitionChangeRecord
from kafka_protocol.types import BrokerId
from metadata_log.image import (
    DIRECTORY_LOST,
    DIRECTORY_UNASSIGNED,
    BrokerRegistration,
    ClusterImage,
    Endpoint,
    PartitionImage,
)

BROKERS = st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True)
DIRS = [uuid.UUID(int=100 + i) for i in range(4)]

change = st.one_of(
    st.tuples(st.just("replicas"), BROKERS),
    st.tuples(st.just("assign"), st.lists(st.sampled_from(DIRS), min_size=1, max_size=4)),
    st.tuples(st.just("isr"), st.just([])),
)


@given(first=BROKERS, changes=st.lists(change, max_size=12))
def test_directories_follow_their_replicas(
    first: list[int],
    changes: list[tuple[str, list]],  # type: ignore[type-arg]
) -> None:
    image = PartitionImage(tuple(first), tuple(first), first[0], 0, 0)
    model: dict[int, uuid.UUID] = {}
    for kind, value in changes:
        record = PartitionChangeRecord(partition_id=0, topic_id=uuid.UUID(int=1))
        if kind == "replicas":
            record.replicas = [BrokerId(b) for b in value]
            record.isr = [BrokerId(b) for b in value]
            model = {b: d for b, d in model.items() if b in value}
        elif kind == "assign":
            dirs = [value[i % len(value)] for i in range(len(image.replicas))]
            record.directories = dirs
            model = dict(zip(image.replicas, dirs, strict=True))
        else:
            record.isr = [BrokerId(image.replicas[0])]
        image = image.merge(record)
        assert len(image.directories) in (0, len(image.replicas))
        for b in image.replicas:
            assert image.directory_of(b) == model.get(b, DIRECTORY_UNASSIGNED)
        assert image.directory_of(99) == DIRECTORY_UNASSIGNED
        assert PartitionImage.from_record(image.to_record(uuid.UUID(int=1), 0)) == image


def test_a_replica_is_offline_where_its_own_directory_is() -> None:
    """JBOD: a broker with one of its two directories offline still serves the replicas in the
    other; Metadata's offline_replicas and storage errors follow each replica's directory."""
    online, failed = DIRS[0], DIRS[1]
    broker = BrokerRegistration(
        1,
        1,
        uuid.UUID(int=7),
        (Endpoint("PLAINTEXT", "h", 1, 0),),
        {},
        None,
        False,
        False,
        directories=(online,),
        offline_directories=(failed,),
    )
    image = replace(ClusterImage.EMPTY, brokers={1: broker})
    on_online = PartitionImage((1,), (1,), 1, 0, 0, directories=(online,))
    on_failed = replace(on_online, directories=(failed,))
    unassigned = replace(on_online, directories=())
    assert not image.is_replica_offline(1, "PLAINTEXT", on_online.directory_of(1))
    assert image.is_replica_offline(1, "PLAINTEXT", on_failed.directory_of(1))
    assert not image.is_replica_offline(1, "PLAINTEXT", unassigned.directory_of(1))
    assert image.is_replica_offline(1, "PLAINTEXT", DIRECTORY_LOST)
    assert partition_error(image, on_online) is ErrorCode.NONE
    assert partition_error(image, on_failed) is ErrorCode.KAFKA_STORAGE_ERROR
    every_dir_gone = replace(broker, directories=(), offline_directories=(online, failed))
    gone = replace(image, brokers={1: every_dir_gone})
    assert gone.is_replica_offline(1, "PLAINTEXT", unassigned.directory_of(1))
