"""Random command sequences against the controller: invariants after every step.

After each command the records are framed and decoded, replayed into the image, and then:
leader in ISR, ISR non-empty and within the replicas, replicas distinct and registered; leader
and partition epochs never decrease; topic ids never reused; image -> snapshot records -> image
is the identity; every requested topic is answered once, and successes are visible in the image;
producer-id blocks never overlap.
A seeded controller replays the same commands into the same records.
"""

from __future__ import annotations

import uuid
from typing import Any

from controller_helpers import (
    alter,
    apply,
    check_invariants,
    make_controller,
    new_topic,
    registration,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AllocateProducerIdsRequest,
    BrokerHeartbeatRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)
from kafka_protocol.metadata import TopicRecord
from kraft.controller import Controller
from kraft.controller.configuration import OpType
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage
from metadata_log.records import MetadataRecord, decode_record, encode_record

NAMES = ["a", "b", "c.d", "c_d", "e", "", "bad name", "__cluster_metadata"]
BROKER_IDS = st.integers(0, 4)
names = st.sampled_from(NAMES[:5]) | st.sampled_from(NAMES)

registers = st.tuples(
    st.just("register"), BROKER_IDS, st.sampled_from([None, "r1", "r2"]), st.integers(0, 2)
)
lags = st.sampled_from([0, 0, 0, 1, 3])
heartbeats = st.tuples(st.just("heartbeat"), BROKER_IDS, st.booleans(), st.booleans(), lags)
fences = st.tuples(st.just("fence"), st.lists(BROKER_IDS, max_size=3))
configs = st.sampled_from(
    [{}, {}, {"retention.ms": "5"}, {"cleanup.policy": "compact"}, {"bogus": "1"}]
)
counts = st.sampled_from([-1, 1, 2, 3])
placed_topics = st.tuples(names, counts, st.sampled_from([-1, 1, 2]), configs, st.none())
manual_topics = st.tuples(
    names,
    st.just(-1),
    st.just(-1),
    configs,
    st.lists(st.lists(BROKER_IDS, max_size=3), min_size=1, max_size=3),
)
odd_topics = st.tuples(names, st.integers(-2, 4), st.integers(-2, 4), configs, st.none())
topics = st.one_of(placed_topics, placed_topics, placed_topics, manual_topics, odd_topics)
creates = st.tuples(
    st.just("create"),
    st.lists(topics, min_size=1, max_size=3),
    st.sampled_from([False, False, False, True]),
)
more_partitions = st.tuples(
    st.just("partitions"),
    names,
    st.integers(0, 6),
    st.one_of(st.none(), st.none(), st.lists(st.lists(BROKER_IDS, max_size=3), max_size=3)),
)
deletes = st.tuples(
    st.just("delete"), st.lists(names, max_size=2), st.lists(st.integers(0, 9), max_size=2)
)
alters = st.tuples(
    st.just("alter"),
    names,
    st.sampled_from(
        [
            ("cleanup.policy", OpType.APPEND, "compact"),
            ("cleanup.policy", OpType.SUBTRACT, "delete"),
            ("retention.ms", OpType.SET, "7"),
            ("retention.ms", OpType.DELETE, None),
            ("segment.bytes", OpType.SET, "12"),
        ]
    ),
)
allocations = st.tuples(st.just("allocate"), BROKER_IDS)
commands = st.lists(
    st.one_of(
        registers,
        heartbeats,
        heartbeats,
        fences,
        creates,
        creates,
        creates,
        more_partitions,
        deletes,
        alters,
        allocations,
    ),
    min_size=3,
    max_size=30,
)
# A few brokers registered and unfenced first, so that most scripts create topics.
starts = st.lists(
    st.tuples(BROKER_IDS, st.sampled_from([None, "r1", "r2"])), min_size=1, max_size=4
)


def startup(brokers: list[tuple[int, str | None]]) -> list[tuple[Any, ...]]:
    script: list[tuple[Any, ...]] = [("register", b, rack, 0) for b, rack in brokers]
    return script + [("heartbeat", b, False, False, 0) for b, _ in brokers]


def to_request(command: tuple[Any, ...], image: ClusterImage) -> tuple[str, Any]:
    kind = command[0]
    if kind == "register":
        return "handle_register_broker", registration(
            command[1], command[2], incarnation=command[3]
        )
    if kind == "heartbeat":
        _, broker_id, want_fence, want_shut_down, lag = command
        epoch = image.brokers[broker_id].epoch if broker_id in image.brokers else 0
        return "handle_broker_heartbeat", BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=epoch,
            current_metadata_offset=image.offset - lag,
            want_fence=want_fence and lag == 0,
            want_shut_down=want_shut_down and lag == 1,
        )
    if kind == "fence":
        return "handle_fence_brokers", command[1]
    if kind == "create":
        requested = [
            new_topic(name, n, rf, configs, None if manual is None else dict(enumerate(manual)))
            for name, n, rf, configs, manual in command[1]
        ]
        return "handle_create_topics", CreateTopicsRequest(
            topics=requested, validate_only=command[2]
        )
    if kind == "partitions":
        assignments = None
        if command[3] is not None:
            assignments = [
                CreatePartitionsRequest.CreatePartitionsAssignment(broker_ids=b) for b in command[3]
            ]
        topic = CreatePartitionsRequest.CreatePartitionsTopic(
            name=command[1], count=command[2], assignments=assignments
        )
        return "handle_create_partitions", CreatePartitionsRequest(topics=[topic])
    if kind == "delete":
        ids = sorted(image.topics.by_id) or [uuid.UUID(int=5)]
        states = [DeleteTopicsRequest.DeleteTopicState(name=n) for n in command[1]]
        states += [
            DeleteTopicsRequest.DeleteTopicState(topic_id=ids[i % len(ids)]) for i in command[2]
        ]
        return "handle_delete_topics", DeleteTopicsRequest(topics=states)
    if kind == "allocate":
        epoch = image.brokers[command[1]].epoch if command[1] in image.brokers else 0
        request = AllocateProducerIdsRequest(broker_id=command[1], broker_epoch=epoch)
        return "handle_allocate_producer_ids", request
    return "handle_incremental_alter_configs", alter(2, command[1], command[2])


def check_response(handler: str, request: Any, response: Any, after: ClusterImage) -> None:
    if handler == "handle_create_topics":
        assert sorted(t.name for t in response.topics) == sorted({t.name for t in request.topics})
        for result in response.topics:
            if result.error_code == ErrorCode.NONE and not request.validate_only:
                topic = after.topics.by_name[result.name]
                assert (topic.topic_id, len(topic.partitions)) == (
                    result.topic_id,
                    result.num_partitions,
                )
            elif result.error_code != ErrorCode.NONE:
                assert (result.num_partitions, result.replication_factor) == (-1, -1)
    elif handler == "handle_allocate_producer_ids" and response.error_code == ErrorCode.NONE:
        assert after.next_producer_id == response.producer_id_start + response.producer_id_len
    elif handler == "handle_delete_topics":
        for result in response.responses:
            if result.error_code == ErrorCode.NONE:
                assert result.topic_id not in after.topics.by_id


def run_commands(controller: Controller, script: list[tuple[Any, ...]]) -> list[MetadataRecord]:
    image = apply(ClusterImage.EMPTY, controller.bootstrap(ClusterImage.EMPTY))
    epochs: dict[tuple[uuid.UUID, int], tuple[int, int]] = {}
    seen_ids: set[uuid.UUID] = set()
    next_producer_id = 0
    written: list[MetadataRecord] = []
    for command in script:
        handler, request = to_request(command, image)
        result = getattr(controller, handler)(request, image)
        records = [decode_record(encode_record(r)) for r in result.records]
        assert records == result.records
        for record in records:
            if isinstance(record, TopicRecord):
                assert record.topic_id not in seen_ids
                seen_ids.add(record.topic_id)
        after = replay_records(image, records)
        check_response(handler, request, result.response, after)
        if handler == "handle_allocate_producer_ids" and result.response.error_code == 0:
            assert result.response.producer_id_start >= next_producer_id
            next_producer_id = after.next_producer_id
        check_invariants(after, epochs)
        rebuilt = replay_records(
            ClusterImage.EMPTY, after.to_records(), offset=after.offset, epoch=after.epoch
        )
        assert rebuilt == after
        written.extend(records)
        image = after
    return written


@settings(max_examples=150)
@given(brokers=starts, script=commands, seed=st.integers(0, 3))
def test_random_commands_keep_the_invariants(
    brokers: list[tuple[int, str | None]], script: list[tuple[Any, ...]], seed: int
) -> None:
    script = startup(brokers) + script
    first = run_commands(make_controller(seed, num_partitions=2), script)
    second = run_commands(make_controller(seed, num_partitions=2), script)
    assert first == second, "a seeded controller is deterministic"
