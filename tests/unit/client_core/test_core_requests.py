"""The consumer requests both shells build: grouped per topic, in partition order."""

from __future__ import annotations

from kafka_protocol.client.requests import (
    NO_EPOCH,
    fetch_request,
    list_offsets_answers,
    list_offsets_request,
    offset_commit_errors,
    offset_commit_request,
)
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ListOffsetsResponse, OffsetCommitResponse
from kafka_protocol.types import TopicPartition
from metadata_log.image import TopicPartition as ImageTopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_list_offsets_groups_partitions_per_topic_with_their_epochs() -> None:
    request = list_offsets_request({B0: -1, A1: -2, A0: 5}, {A0: 3})
    assert request.replica_id == -1 and request.isolation_level == 0
    shape = [
        (t.name, [(p.partition_index, p.timestamp, p.current_leader_epoch) for p in t.partitions])
        for t in request.topics
    ]
    assert shape == [("a", [(0, 5, 3), (1, -2, NO_EPOCH)]), ("b", [(0, -1, NO_EPOCH)])]


def test_the_image_s_partitions_are_accepted_too() -> None:
    request = offset_commit_request("g", {ImageTopicPartition("a", 1): 7}, generation_id=4)
    assert request.generation_id_or_member_epoch == 4
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in request.topics] == [
        ("a", [7])
    ]


def test_answers_are_read_per_partition() -> None:
    R = ListOffsetsResponse
    listed = R(
        topics=[
            R.ListOffsetsTopicResponse(
                name="a",
                partitions=[
                    R.ListOffsetsPartitionResponse(partition_index=0, offset=9),
                    R.ListOffsetsPartitionResponse(
                        partition_index=1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER
                    ),
                ],
            )
        ]
    )
    assert list_offsets_answers(listed) == {A0: 9, A1: ErrorCode.NOT_LEADER_OR_FOLLOWER}
    C = OffsetCommitResponse
    committed = C(
        topics=[
            C.OffsetCommitResponseTopic(
                name="b", partitions=[C.OffsetCommitResponsePartition(partition_index=0)]
            )
        ]
    )
    assert offset_commit_errors(committed) == {B0: ErrorCode.NONE}


def test_fetch_is_sessionless_and_read_uncommitted() -> None:
    request = fetch_request(
        {A1: (10, 2), A0: (3, NO_EPOCH)},
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        partition_max_bytes=1024,
    )
    assert (request.session_id, request.session_epoch, request.isolation_level) == (0, -1, 0)
    (topic,) = request.topics
    assert [(p.partition, p.fetch_offset, p.current_leader_epoch) for p in topic.partitions] == [
        (0, 3, NO_EPOCH),
        (1, 10, 2),
    ]
