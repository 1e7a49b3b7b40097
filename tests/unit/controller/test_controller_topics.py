"""CreateTopics, CreatePartitions and DeleteTopics: records, responses and every error path."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest
from controller_helpers import (
    add_partitions,
    apply,
    cluster,
    create,
    heartbeat,
    make_controller,
    new_topic,
    run,
)

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import CreateTopicsResponse, DeleteTopicsRequest
from kafka_protocol.metadata import ConfigRecord, PartitionRecord, RemoveTopicRecord, TopicRecord
from kraft.controller import Controller, ControllerConfig, CreateTopicPolicyRequest
from kraft.controller.topics import validate_topic_name
from metadata_log.configs import ConfigSource
from metadata_log.image import ClusterImage

E = ErrorCode


@pytest.fixture
def controller() -> Controller:
    return make_controller(num_partitions=2, default_replication_factor=1)


@pytest.fixture
def three(controller: Controller) -> ClusterImage:
    return cluster(controller, {1: "r1", 2: "r2", 3: "r3"})


def results(response: CreateTopicsResponse) -> dict[str, tuple[int, str | None]]:
    return {t.name: (t.error_code, t.error_message) for t in response.topics}


# --- CreateTopics -----------------------------------------------------------------------------


def test_create_topic_records_and_response(controller: Controller, three: ClusterImage) -> None:
    result = controller.handle(create(new_topic("t", 3, 2, {"retention.ms": "1000"})), three)
    kinds = [type(r) for r in result.records]
    assert kinds == [TopicRecord, PartitionRecord, PartitionRecord, PartitionRecord, ConfigRecord]
    (topic,) = result.response.topics
    assert (
        topic.error_code,
        topic.error_message,
        topic.num_partitions,
        topic.replication_factor,
    ) == (0, None, 3, 2)
    assert topic.topic_id == result.records[0].topic_id != uuid.UUID(int=0)
    configs = {c.name: c for c in topic.configs or []}
    assert configs["retention.ms"].value == "1000"
    assert configs["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"].config_source == ConfigSource.DEFAULT_CONFIG
    image = apply(three, result)
    created = image.topics.by_name["t"]
    for p in created.partitions.values():
        assert len(p.replicas) == 2 and p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
    assert image.topic_configs("t") == {"retention.ms": "1000"}


def test_defaults_come_from_the_config(controller: Controller, three: ClusterImage) -> None:
    _, response = run(controller, three, "handle", create(new_topic("t", -1, -1)))
    (topic,) = response.topics
    assert (topic.error_code, topic.num_partitions, topic.replication_factor) == (0, 2, 1)


def test_response_encodes_at_every_version(controller: Controller, three: ClusterImage) -> None:
    response = controller.handle(create(new_topic("t"), new_topic("bad name")), three).response
    for version in range(CreateTopicsResponse.MIN_VERSION, CreateTopicsResponse.MAX_VERSION + 1):
        decoded = CreateTopicsResponse.decode(response.encode(version), version)
        assert [t.error_code for t in decoded.topics] == [0, E.INVALID_TOPIC_EXCEPTION]


def test_static_broker_config_shows_in_created_configs(three: ClusterImage) -> None:
    controller = make_controller(static_broker_config={"log.retention.hours": "1"})
    (topic,) = controller.handle(create(new_topic("t")), three).response.topics
    retention = next(c for c in topic.configs or [] if c.name == "retention.ms")
    assert (retention.value, retention.config_source) == (
        "3600000",
        ConfigSource.STATIC_BROKER_CONFIG,
    )


@pytest.mark.parametrize(
    ("topic", "code", "message"),
    [
        (
            new_topic("t", 0),
            E.INVALID_PARTITIONS,
            "Number of partitions was set to an invalid non-positive value.",
        ),
        (new_topic("t", -2), E.INVALID_PARTITIONS, "non-positive"),
        (
            new_topic("t", 1, 0),
            E.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0",
        ),
        (new_topic("t", 1, -3), E.INVALID_REPLICATION_FACTOR, "or -1 to use the default value."),
        (
            new_topic("t", 1, 4),
            E.INVALID_REPLICATION_FACTOR,
            "Unable to replicate the partition 4 time(s): The target replication factor of 4 "
            "cannot be reached because only 3 broker(s) are registered.",
        ),
        (new_topic(""), E.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty"),
        (new_topic("."), E.INVALID_TOPIC_EXCEPTION, 'Topic name cannot be "." or ".."'),
        (new_topic(".."), E.INVALID_TOPIC_EXCEPTION, 'cannot be "." or ".."'),
        (new_topic("x" * 250), E.INVALID_TOPIC_EXCEPTION, "can't be longer than 249 characters"),
        (
            new_topic("a/b"),
            E.INVALID_TOPIC_EXCEPTION,
            "contains a character other than ASCII alphanumerics",
        ),
        (new_topic("é"), E.INVALID_TOPIC_EXCEPTION, "contains a character other than"),
        (
            new_topic("__cluster_metadata"),
            E.INVALID_REQUEST,
            "Creation of internal topic __cluster_metadata is prohibited.",
        ),
        (
            new_topic("t", configs={"bogus": "1"}),
            E.INVALID_CONFIG,
            "Unknown topic config name: bogus",
        ),
        (
            new_topic("t", configs={"retention.ms": "soon"}),
            E.INVALID_CONFIG,
            "Invalid value soon for configuration retention.ms",
        ),
        (
            new_topic("t", configs={"a": None, "b": None}),
            E.INVALID_CONFIG,
            "Null value not supported for topic configs: a,b",
        ),
        (
            new_topic("t", configs={"min.compaction.lag.ms": "9", "max.compaction.lag.ms": "1"}),
            E.INVALID_CONFIG,
            "conflict topic config setting",
        ),
    ],
)
def test_create_topic_errors(
    controller: Controller, three: ClusterImage, topic: object, code: int, message: str
) -> None:
    result = controller.handle(create(topic), three)  # type: ignore[arg-type]
    (answer,) = result.response.topics
    assert answer.error_code == code and message in (answer.error_message or "")
    assert (answer.num_partitions, answer.replication_factor) == (-1, -1)
    assert result.records == []


def test_legal_names(controller: Controller) -> None:
    assert validate_topic_name("x" * 249) is None
    assert validate_topic_name("a.b_c-D9") is None


def test_already_exists_and_collisions(controller: Controller, three: ClusterImage) -> None:
    image, _ = run(controller, three, "handle", create(new_topic("a.b")))
    response = controller.handle(
        create(new_topic("a.b"), new_topic("a_b"), new_topic("x.y"), new_topic("x_y")), image
    ).response
    assert results(response) == {
        "a.b": (E.TOPIC_ALREADY_EXISTS, "Topic 'a.b' already exists."),
        "a_b": (E.INVALID_TOPIC_EXCEPTION, "Topic 'a_b' collides with existing topic: a.b"),
        "x.y": (E.NONE, None),
        "x_y": (E.INVALID_TOPIC_EXCEPTION, "Topic 'x_y' collides with existing topic: x.y"),
    }


def test_duplicate_names_in_one_request(controller: Controller, three: ClusterImage) -> None:
    result = controller.handle(create(new_topic("d"), new_topic("d"), new_topic("e")), three)
    assert results(result.response) == {
        "d": (E.INVALID_REQUEST, "Duplicate topic name."),
        "e": (0, None),
    }
    assert [r.name for r in result.records if isinstance(r, TopicRecord)] == ["e"]


def test_one_broker_cannot_host_three_replicas(controller: Controller) -> None:
    image = cluster(controller, {1: None})
    (topic,) = controller.handle(create(new_topic("t", 1, 3)), image).response.topics
    assert topic.error_code == E.INVALID_REPLICATION_FACTOR


def test_no_unfenced_broker(controller: Controller) -> None:
    image = cluster(controller, {1: None, 2: None}, unfence=False)
    (topic,) = controller.handle(create(new_topic("t")), image).response.topics
    assert (topic.error_code, topic.error_message) == (
        E.INVALID_REPLICATION_FACTOR,
        "Unable to replicate the partition 1 time(s): All brokers are currently fenced.",
    )
    (topic,) = controller.handle(create(new_topic("t")), ClusterImage.EMPTY).response.topics
    assert topic.error_code == E.INVALID_REPLICATION_FACTOR


def test_validate_only(controller: Controller, three: ClusterImage) -> None:
    result = controller.handle(create(new_topic("t", 2, 2), validate_only=True), three)
    assert result.records == []
    (topic,) = result.response.topics
    assert (topic.error_code, topic.num_partitions, topic.replication_factor) == (0, 2, 2)


def test_same_seed_same_records(three: ClusterImage) -> None:
    request = create(new_topic("t", 12, 2), new_topic("u", 5, 3))
    first = make_controller(seed=7).handle(request, three).records
    second = make_controller(seed=7).handle(request, three).records
    assert first == second
    assert first != make_controller(seed=8).handle(request, three).records


def test_partition_budget(three: ClusterImage) -> None:
    controller = make_controller(max_new_partitions_per_request=10)
    response = controller.handle(
        create(new_topic("a", 6), new_topic("b", 6), new_topic("c", 4)), three
    ).response
    codes = {t.name: t.error_code for t in response.topics}
    assert codes == {"a": 0, "b": E.INVALID_PARTITIONS, "c": 0}
    (huge,) = controller.handle(create(new_topic("h", 2**31 - 1)), three).response.topics
    assert huge.error_code == E.INVALID_PARTITIONS


def test_create_topic_policy(three: ClusterImage) -> None:
    seen: list[CreateTopicPolicyRequest] = []

    def policy(request: CreateTopicPolicyRequest) -> str | None:
        seen.append(request)
        return "too many" if (request.num_partitions or 0) > 2 else None

    controller = Controller(ControllerConfig(create_topic_policy=policy), rng=random.Random(0))
    response = controller.handle(
        create(new_topic("ok", 2), new_topic("no", 3, configs={"retention.ms": "1"})), three
    ).response
    assert results(response) == {"ok": (0, None), "no": (E.POLICY_VIOLATION, "too many")}
    assert seen[1].configs == {"retention.ms": "1"} and seen[1].replication_factor == 1


# --- manual assignments -----------------------------------------------------------------------


def test_manual_assignment(controller: Controller, three: ClusterImage) -> None:
    topic = new_topic("m", -1, -1, assignments={0: [3, 1], 1: [2, 3]})
    image, response = run(controller, three, "handle", create(topic))
    assert response.topics[0].error_code == 0
    partitions = image.topics.by_name["m"].partitions
    assert (partitions[0].replicas, partitions[0].leader, partitions[1].leader) == ((3, 1), 3, 2)


def test_manual_assignment_skips_fenced_brokers_in_the_isr(controller: Controller) -> None:
    image = cluster(controller, {1: None, 2: None})
    image = apply(image, controller.handle_fence_brokers([1], image))
    image, _ = run(
        controller,
        image,
        "handle",
        create(new_topic("m", -1, -1, assignments={0: [1, 2]})),
    )
    p = image.topics.by_name["m"].partitions[0]
    assert (p.replicas, p.isr, p.leader) == ((1, 2), (2,), 2)


@pytest.mark.parametrize(
    ("partitions", "rf", "assignments", "code", "message"),
    [
        (1, -1, {0: [1]}, E.INVALID_REQUEST, "but numPartitions was not set to -1."),
        (-1, 1, {0: [1]}, E.INVALID_REQUEST, "but replication factor was not set to -1."),
        (-1, -1, {0: []}, E.INVALID_REPLICA_ASSIGNMENT, "includes an empty replica list."),
        (
            -1,
            -1,
            {0: [9]},
            E.INVALID_REPLICA_ASSIGNMENT,
            "includes broker 9, but no such broker is registered.",
        ),
        (
            -1,
            -1,
            {0: [1, 1]},
            E.INVALID_REPLICA_ASSIGNMENT,
            "includes the broker 1 more than once.",
        ),
        (
            -1,
            -1,
            {0: [1], 1: [1, 2]},
            E.INVALID_REPLICA_ASSIGNMENT,
            "not consistent with previous partitions",
        ),
        (
            -1,
            -1,
            {1: [1]},
            E.INVALID_REPLICA_ASSIGNMENT,
            "partitions should be a consecutive 0-based integer sequence",
        ),
    ],
)
def test_manual_assignment_errors(
    controller: Controller,
    three: ClusterImage,
    partitions: int,
    rf: int,
    assignments: dict[int, list[int]],
    code: int,
    message: str,
) -> None:
    (topic,) = controller.handle(
        create(new_topic("m", partitions, rf, assignments=assignments)), three
    ).response.topics
    assert topic.error_code == code and message in (topic.error_message or "")


def test_manual_assignment_duplicate_partition(controller: Controller, three: ClusterImage) -> None:
    topic = new_topic("m", -1, -1, assignments={0: [1]})
    topic.assignments = topic.assignments * 2
    (answer,) = controller.handle(create(topic), three).response.topics
    assert (answer.error_code, answer.error_message) == (
        E.INVALID_REPLICA_ASSIGNMENT,
        "Found multiple manual partition assignments for partition 0",
    )


def test_manual_assignment_all_fenced(controller: Controller) -> None:
    image = cluster(controller, {1: None, 2: None})
    image = apply(image, controller.handle_fence_brokers([1], image))
    (answer,) = controller.handle(
        create(new_topic("m", -1, -1, assignments={0: [1]})), image
    ).response.topics
    assert (
        answer.error_code == E.INVALID_REPLICA_ASSIGNMENT
        and "are fenced or in controlled shutdown" in (answer.error_message or "")
    )


# --- placement --------------------------------------------------------------------------------


def test_rack_aware_striped_placement() -> None:
    controller = make_controller(seed=3)
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    image = cluster(controller, racks)
    image, _ = run(controller, image, "handle", create(new_topic("t", 60, 3)))
    partitions = image.topics.by_name["t"].partitions.values()
    for p in partitions:
        assert len({racks[b] for b in p.replicas}) == 3, "one replica per rack"
    leaders = Counter(p.leader for p in partitions)
    assert set(leaders) == set(racks) and max(leaders.values()) - min(leaders.values()) <= 2
    replicas = Counter(b for p in partitions for b in p.replicas)
    assert max(replicas.values()) - min(replicas.values()) <= 3


def test_fenced_brokers_only_as_followers() -> None:
    controller = make_controller(seed=1)
    image = cluster(controller, {1: None, 2: None, 3: None})
    image = apply(image, controller.handle_fence_brokers([2, 3], image))
    image, response = run(controller, image, "handle", create(new_topic("t", 10, 3)))
    assert response.topics[0].error_code == 0
    for p in image.topics.by_name["t"].partitions.values():
        assert p.replicas[0] == 1 == p.leader and p.isr == (1,)


def test_controlled_shutdown_brokers_are_not_used() -> None:
    controller = make_controller()
    image = cluster(controller, {1: None, 2: None})
    image = apply(image, controller.handle(create(new_topic("t", 1, 2)), image))
    leader = image.topics.by_name["t"].partitions[0].leader
    image, _ = run(
        controller, image, "handle_broker_heartbeat", heartbeat(image, leader, want_shut_down=True)
    )
    assert image.brokers[leader].in_controlled_shutdown
    (topic,) = controller.handle(create(new_topic("u", 1, 2)), image).response.topics
    assert topic.error_code == E.INVALID_REPLICATION_FACTOR


# --- CreatePartitions -------------------------------------------------------------------------


@pytest.fixture
def with_topic(controller: Controller, three: ClusterImage) -> ClusterImage:
    image, _ = run(controller, three, "handle", create(new_topic("t", 2, 2)))
    return image


def test_create_partitions(controller: Controller, with_topic: ClusterImage) -> None:
    image, response = run(controller, with_topic, "handle", add_partitions("t", 5))
    assert [(r.name, r.error_code, r.error_message) for r in response.results] == [("t", 0, None)]
    partitions = image.topics.by_name["t"].partitions
    assert sorted(partitions) == [0, 1, 2, 3, 4]
    assert all(len(p.replicas) == 2 for p in partitions.values())
    assert partitions[0] is with_topic.topics.by_name["t"].partitions[0]


def test_create_partitions_manual(controller: Controller, with_topic: ClusterImage) -> None:
    image, response = run(
        controller, with_topic, "handle", add_partitions("t", 4, [[3, 1], [1, 2]])
    )
    assert response.results[0].error_code == 0
    assert image.topics.by_name["t"].partitions[3].replicas == (1, 2)


@pytest.mark.parametrize(
    ("name", "count", "assignments", "code", "message"),
    [
        ("nope", 3, None, E.UNKNOWN_TOPIC_OR_PARTITION, "does not exist"),
        ("t", 2, None, E.INVALID_PARTITIONS, "Topic already has 2 partition(s)."),
        (
            "t",
            1,
            None,
            E.INVALID_PARTITIONS,
            "The topic t currently has 2 partition(s); 1 would not be an increase.",
        ),
        (
            "t",
            4,
            [[1, 2]],
            E.INVALID_REPLICA_ASSIGNMENT,
            "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
        ),
        (
            "t",
            3,
            [[1]],
            E.INVALID_REPLICA_ASSIGNMENT,
            "not consistent with previous partitions, which have 2 replica(s).",
        ),
        ("t", 3, [[1, 9]], E.INVALID_REPLICA_ASSIGNMENT, "includes broker 9"),
    ],
)
def test_create_partitions_errors(
    controller: Controller,
    with_topic: ClusterImage,
    name: str,
    count: int,
    assignments: list[list[int]] | None,
    code: int,
    message: str,
) -> None:
    result = controller.handle(add_partitions(name, count, assignments), with_topic)
    (answer,) = result.response.results
    assert answer.error_code == code and message in (answer.error_message or "")
    assert result.records == []


def test_create_partitions_duplicates_and_validate_only(
    controller: Controller, with_topic: ClusterImage
) -> None:
    request = add_partitions("t", 3)
    request.topics = request.topics * 2
    (answer,) = controller.handle(request, with_topic).response.results
    assert (answer.error_code, answer.error_message) == (E.INVALID_REQUEST, "Duplicate topic name.")
    request = add_partitions("t", 3)
    request.validate_only = True
    result = controller.handle(request, with_topic)
    assert result.records == [] and result.response.results[0].error_code == 0


def test_create_partitions_with_too_few_brokers(controller: Controller) -> None:
    image = cluster(controller, {1: None, 2: None})
    image = apply(image, controller.handle(create(new_topic("t", 1, 2)), image))
    image = apply(image, controller.handle_fence_brokers([1, 2], image))
    (answer,) = controller.handle(add_partitions("t", 2), image).response.results
    assert (answer.error_code, answer.error_message) == (
        E.INVALID_REPLICATION_FACTOR,
        "All brokers are currently fenced.",
    )


# --- DeleteTopics -----------------------------------------------------------------------------


def delete(
    *names: str, ids: tuple[uuid.UUID, ...] = (), both: tuple[tuple[str, uuid.UUID], ...] = ()
) -> DeleteTopicsRequest:
    state = DeleteTopicsRequest.DeleteTopicState
    topics = [state(name=n) for n in names] + [state(topic_id=i) for i in ids]
    topics += [state(name=n, topic_id=i) for n, i in both]
    return DeleteTopicsRequest(topics=topics)


def test_delete_by_name_and_by_id(controller: Controller, three: ClusterImage) -> None:
    image, _ = run(
        controller,
        three,
        "handle",
        create(new_topic("a"), new_topic("b"), new_topic("c")),
    )
    a, b = image.topics.by_name["a"].topic_id, image.topics.by_name["b"].topic_id
    result = controller.handle(delete("a", ids=(b,)), image)
    assert sorted((r.name, r.error_code) for r in result.response.responses) == [("a", 0), ("b", 0)]
    assert {r.topic_id for r in result.records if isinstance(r, RemoveTopicRecord)} == {a, b}
    after = apply(image, result)
    assert set(after.topics.by_name) == {"c"}
    legacy = controller.handle(DeleteTopicsRequest(topic_names=["c"]), after)
    assert apply(after, legacy).topics.by_name == {}


def test_delete_errors(controller: Controller, three: ClusterImage) -> None:
    image, _ = run(
        controller,
        three,
        "handle",
        create(new_topic("a"), new_topic("b"), new_topic("c")),
    )
    a, b = image.topics.by_name["a"].topic_id, image.topics.by_name["b"].topic_id
    unknown = uuid.UUID(int=12345)
    request = delete("nope", "c", "c", "b", ids=(unknown, b), both=(("a", a),))
    request.topics.append(DeleteTopicsRequest.DeleteTopicState())
    result = controller.handle(request, image)
    answers = {
        (r.name, r.topic_id): (r.error_code, r.error_message) for r in result.response.responses
    }
    zero = uuid.UUID(int=0)
    assert answers == {
        ("a", a): (E.INVALID_REQUEST, "You may not specify both topic name and topic id."),
        (None, zero): (E.INVALID_REQUEST, "Neither topic name nor id were specified."),
        ("c", zero): (E.INVALID_REQUEST, "Duplicate topic name."),
        (None, unknown): (E.UNKNOWN_TOPIC_ID, E.UNKNOWN_TOPIC_ID.message),
        ("nope", zero): (E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_OR_PARTITION.message),
        ("b", b): (
            E.INVALID_REQUEST,
            "The provided topic name maps to an ID that was already supplied.",
        ),
    }
    assert result.records == []


def test_delete_duplicate_ids(controller: Controller, with_topic: ClusterImage) -> None:
    t = with_topic.topics.by_name["t"].topic_id
    result = controller.handle(delete(ids=(t, t)), with_topic)
    assert [(r.name, r.error_code, r.error_message) for r in result.response.responses] == [
        (None, E.INVALID_REQUEST, "Duplicate topic id.")
    ]


def test_deletion_disabled(with_topic: ClusterImage) -> None:
    controller = make_controller(delete_topic_enable=False)
    result = controller.handle(delete("t"), with_topic)
    assert [r.error_code for r in result.response.responses] == [E.TOPIC_DELETION_DISABLED]
    assert result.records == []


def test_deleted_name_can_be_created_again(
    controller: Controller, with_topic: ClusterImage
) -> None:
    old = with_topic.topics.by_name["t"].topic_id
    image = apply(with_topic, controller.handle(delete("t"), with_topic))
    image, response = run(controller, image, "handle", create(new_topic("t")))
    assert response.topics[0].error_code == 0 and image.topics.by_name["t"].topic_id != old


def test_topic_ids_follow_kafkas_rules() -> None:
    import base64

    from kraft.controller.result import random_topic_id

    rng = random.Random(0)
    ids = [random_topic_id(rng, lambda _: False) for _ in range(2000)]
    assert all(i.version == 4 for i in ids)
    assert not any(base64.urlsafe_b64encode(i.bytes).startswith(b"-") for i in ids)
    taken = set(ids[:5])
    replay = random.Random(0)
    assert random_topic_id(replay, taken.__contains__) == ids[5]
