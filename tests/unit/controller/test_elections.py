"""Leader elections: clean (ISR-only) elections, unclean elections and their config, ElectLeaders
(API 43) with Kafka's per-partition errors, and the preferred-leader rebalance. All pure: a
controller command on an image, its records replayed into the next image."""

from __future__ import annotations

import uuid

import pytest
from controller_helpers import (
    alter,
    apply,
    cluster,
    create,
    heartbeat,
    isr_change,
    make_controller,
    new_topic,
    part,
    registration,
    run,
)

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterConfigsRequest,
    ElectLeadersRequest,
    ElectLeadersResponse,
)
from kafka_protocol.metadata import ConfigRecord, PartitionChangeRecord
from kafka_protocol.types import BrokerId, TopicName
from kraft.controller import Controller, ControllerConfig
from kraft.controller.configuration import OpType
from kraft.controller.elections import (
    BrokerImbalance,
    leader_imbalance,
    rebalance_leaders,
    unclean_policy,
)
from kraft.controller.partitions import partition_change
from metadata_log.configs import BrokerConfigSources, effective_topic_value
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage, LeaderRecoveryState, PartitionImage, TopicPartition

E = ErrorCode
TOPIC, BROKER = 2, 4  # ConfigResource types
UNCLEAN = "unclean.leader.election.enable"
RECOVERING, RECOVERED = LeaderRecoveryState.RECOVERING, LeaderRecoveryState.RECOVERED
TOPIC_ID = uuid.UUID(int=77)


# --- helpers --------------------------------------------------------------------------------------


def with_topic(
    controller: Controller,
    image: ClusterImage,
    name: str,
    assignments: dict[int, list[int]],
    configs: dict[str, str | None] | None = None,
) -> ClusterImage:
    image, response = run(
        controller,
        image,
        "handle",
        create(new_topic(name, -1, -1, configs, assignments)),
    )
    assert response.topics[0].error_code == E.NONE, response
    return image


def fence(controller: Controller, image: ClusterImage, *brokers: int) -> ClusterImage:
    result = controller.handle_fence_brokers(brokers, image)
    assert result.response == sorted(brokers)
    return apply(image, result)


def unfence(controller: Controller, image: ClusterImage, broker: int) -> ClusterImage:
    image, response = run(controller, image, "handle_broker_heartbeat", heartbeat(image, broker))
    assert response.error_code == E.NONE and not response.is_fenced
    return image


def set_isr(
    controller: Controller, image: ClusterImage, isr: list[int], topic: str = "t", pid: int = 0
) -> ClusterImage:
    """The leader's AlterPartition (a follower caught up, or the leader recovered)."""
    request = isr_change(image, isr, topic, pid)
    image, response = run(controller, image, "handle_alter_partition", request)
    assert response.topics[0].partitions[0].error_code == E.NONE, response
    return image


def elect(election_type: int, partitions: dict[str, list[int]] | None) -> ElectLeadersRequest:
    return ElectLeadersRequest(
        election_type=election_type,
        topic_partitions=None
        if partitions is None
        else [
            ElectLeadersRequest.TopicPartitions(topic=TopicName(t), partitions=p)
            for t, p in partitions.items()
        ],
    )


def outcomes(response: ElectLeadersResponse) -> dict[tuple[str, int], ErrorCode]:
    return {
        (t.topic, r.partition_id): ErrorCode(r.error_code)
        for t in response.replica_election_results
        for r in t.partition_result
    }


@pytest.fixture
def controller() -> Controller:
    return make_controller()


@pytest.fixture
def image(controller: Controller) -> ClusterImage:
    """Brokers 1-3 unfenced, on racks a-c."""
    return cluster(controller, {1: "a", 2: "b", 3: "c"})


def preferred_not_leading(controller: Controller, image: ClusterImage) -> ClusterImage:
    """Topic t-0 on [1, 2, 3] led by 2 with 1 back in the ISR (1 was fenced and returned)."""
    image = with_topic(controller, image, "t", {0: [1, 2, 3]})
    image = unfence(controller, fence(controller, image, 1), 1)
    assert (part(image).leader, part(image).isr) == (2, (2, 3))
    return set_isr(controller, image, [2, 3, 1])


# --- clean elections: the ISR only ----------------------------------------------------------------


def test_a_leaving_leader_is_replaced_by_the_first_active_isr_member(
    controller: Controller, image: ClusterImage
) -> None:
    image = with_topic(controller, image, "t", {0: [1, 2, 3]})
    image = set_isr(controller, image, [1, 3])  # 2 fell behind
    image = fence(controller, image, 1)
    p = part(image)
    assert (p.leader, p.isr, p.leader_recovery_state) == (3, (3,), RECOVERED), "not 2"


def test_without_unclean_election_a_partition_waits_for_its_isr(
    controller: Controller, image: ClusterImage
) -> None:
    image = with_topic(controller, image, "t", {0: [1, 2]})
    image = fence(controller, image, 1)
    image = fence(controller, image, 2)
    assert (part(image).leader, part(image).isr) == (-1, (2,)), "the last ISR member stays"
    image = unfence(controller, image, 1)  # active, but not in the ISR: not elected
    assert (part(image).leader, part(image).isr) == (-1, (2,))
    image = unfence(controller, image, 2)
    assert (part(image).leader, part(image).isr, part(image).leader_recovery_state) == (
        2,
        (2,),
        RECOVERED,
    )


# --- unclean elections ----------------------------------------------------------------------------


def test_unclean_election_when_the_last_isr_member_leaves(
    controller: Controller, image: ClusterImage
) -> None:
    image = with_topic(controller, image, "t", {0: [1, 2, 3]}, {UNCLEAN: "true"})
    image = set_isr(controller, image, [1])  # 2 and 3 fell behind
    before = part(image)
    image = fence(controller, image, 1)
    p = part(image)
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)
    assert p.leader_epoch == before.leader_epoch + 1


def test_unclean_election_when_a_replica_comes_back(
    controller: Controller, image: ClusterImage
) -> None:
    image = with_topic(controller, image, "t", {0: [1, 2]}, {UNCLEAN: "true"})
    image = fence(controller, image, 1, 2)  # one command: nobody left to elect
    assert (part(image).leader, part(image).isr) == (-1, (2,))
    image = unfence(controller, image, 1)
    p = part(image)
    assert (p.leader, p.isr, p.leader_recovery_state) == (1, (1,), RECOVERING)
    # The leader recovers and reports it; the returning replica then joins the ISR as usual.
    image = unfence(controller, image, 2)
    assert part(image).leader == 1
    image = set_isr(controller, image, [1, 2])
    assert (part(image).isr, part(image).leader_recovery_state) == ((1, 2), RECOVERED)


def test_a_clean_leader_is_preferred_to_an_unclean_one() -> None:
    p = PartitionImage(replicas=(1, 2, 3), isr=(3,), leader=-1, leader_epoch=4, partition_epoch=9)
    record = partition_change(TOPIC_ID, 0, p, p.isr, lambda b: True, unclean=True)
    assert record is not None
    assert (record.leader, record.isr, record.leader_recovery_state) == (3, None, -1)
    record = partition_change(TOPIC_ID, 0, p, p.isr, lambda b: b != 3, unclean=True)
    assert record is not None
    assert (record.leader, record.isr, record.leader_recovery_state) == (1, [1], RECOVERING)
    assert partition_change(TOPIC_ID, 0, p, p.isr, lambda b: False, unclean=True) is None


def test_controlled_shutdown_and_reregistration_elect_uncleanly_too(
    controller: Controller, image: ClusterImage
) -> None:
    image = with_topic(controller, image, "t", {0: [1, 2]}, {UNCLEAN: "true"})
    image = set_isr(controller, image, [1])
    request = heartbeat(image, 1, want_shut_down=True)
    image, _ = run(controller, image, "handle_broker_heartbeat", request)
    assert image.brokers[1].in_controlled_shutdown
    assert (part(image).leader, part(image).isr, part(image).leader_recovery_state) == (
        2,
        (2,),
        RECOVERING,
    )
    image, response = run(controller, image, "handle_broker_heartbeat", heartbeat(image, 1))
    assert response.should_shut_down and image.brokers[1].fenced
    image, _ = run(controller, image, "handle_register_broker", registration(1, "a", 5))
    image = unfence(controller, image, 1)  # a leader exists: nothing to elect
    assert part(image).leader == 2
    image, _ = run(controller, image, "handle_register_broker", registration(2, "b", 99))
    assert (part(image).leader, part(image).isr, part(image).leader_recovery_state) == (
        1,
        (1,),
        RECOVERING,
    )


@pytest.mark.parametrize(
    ("topic_value", "cluster_value", "static_value", "expected"),
    [
        (None, None, None, False),  # Kafka's default
        ("true", None, None, True),
        (None, "true", None, True),
        (None, None, "true", True),
        ("false", "true", "true", False),  # the topic's override wins
        (None, "false", "true", False),  # then the cluster-wide dynamic default
    ],
)
def test_the_effective_config_decides(
    topic_value: str | None,
    cluster_value: str | None,
    static_value: str | None,
    expected: bool,
) -> None:
    static = {} if static_value is None else {UNCLEAN: static_value}
    controller = make_controller(static_broker_config=static)
    image = cluster(controller, {1: None, 2: None})
    configs = {} if topic_value is None else {UNCLEAN: topic_value}
    image = with_topic(controller, image, "t", {0: [1, 2]}, configs)
    if cluster_value is not None:
        image, _ = run(
            controller,
            image,
            "handle",
            alter(BROKER, "", (UNCLEAN, OpType.SET, cluster_value)),
        )
    assert unclean_policy(image, static)("t") is expected
    image = set_isr(controller, image, [1])
    image = fence(controller, image, 1)
    assert part(image).leader == (2 if expected else -1)


def test_a_per_broker_value_is_that_brokers_own(
    controller: Controller, image: ClusterImage
) -> None:
    image = with_topic(controller, image, "t", {0: [1, 2]})
    image, _ = run(
        controller,
        image,
        "handle",
        alter(BROKER, "1", (UNCLEAN, OpType.SET, "true")),
    )
    image = fence(controller, image, 1, 2)
    assert (part(image).leader, part(image).isr) == (-1, (2,))
    image = unfence(controller, image, 1)
    assert part(image).leader == -1


def leaderless(controller: Controller, image: ClusterImage) -> ClusterImage:
    """t-0 on [1, 2] and u-0 on [2], both leaderless with broker 1 active (2 is fenced)."""
    image = with_topic(controller, image, "t", {0: [1, 2]})
    image = with_topic(controller, image, "u", {0: [2]})
    image = unfence(controller, fence(controller, image, 1), 1)  # 1 is out of t-0's ISR
    image = fence(controller, image, 2)
    assert (part(image).leader, part(image, "u").leader) == (-1, -1)
    return image


def test_turning_the_topic_config_on_elects_at_once(
    controller: Controller, image: ClusterImage
) -> None:
    image = leaderless(controller, image)
    request = alter(TOPIC, "t", (UNCLEAN, OpType.SET, "true"))
    result = controller.handle(request, image)
    assert result.response.responses[0].error_code == E.NONE
    assert [type(r) for r in result.records] == [ConfigRecord, PartitionChangeRecord]
    image = apply(image, result)
    assert (part(image).leader, part(image).isr, part(image).leader_recovery_state) == (
        1,
        (1,),
        RECOVERING,
    )
    assert part(image, "u").leader == -1, "no active replica"
    validate_only = alter(TOPIC, "t", (UNCLEAN, OpType.SET, "true"), validate_only=True)
    assert controller.handle(validate_only, image).records == []


def test_turning_the_cluster_default_on_elects_at_once(
    controller: Controller, image: ClusterImage
) -> None:
    image = leaderless(controller, image)
    result = controller.handle(alter(TOPIC, "t", ("retention.ms", OpType.SET, "5")), image)
    assert [type(r) for r in result.records] == [ConfigRecord], "other configs elect nobody"
    legacy = AlterConfigsRequest(
        resources=[
            AlterConfigsRequest.AlterConfigsResource(
                resource_type=BROKER,
                resource_name="",
                configs=[AlterConfigsRequest.AlterableConfig(name=UNCLEAN, value="true")],
            )
        ]
    )
    image, response = run(controller, image, "handle", legacy)
    assert response.responses[0].error_code == E.NONE
    assert part(image).leader == 1


def test_the_periodic_check(controller: Controller, image: ClusterImage) -> None:
    image = leaderless(controller, image)
    assert controller.handle_unclean_elections(image).records == []
    unclean = make_controller(static_broker_config={UNCLEAN: "true"})
    result = unclean.handle_unclean_elections(image)
    assert result.response == [TopicPartition("t", 0)]
    assert part(apply(image, result)).leader == 1


# --- ElectLeaders ---------------------------------------------------------------------------------


def test_preferred_election(controller: Controller, image: ClusterImage) -> None:
    image = preferred_not_leading(controller, image)
    before = part(image)
    result = controller.handle(elect(0, {"t": [0]}), image)
    assert outcomes(result.response) == {("t", 0): E.NONE}
    assert result.response.replica_election_results[0].partition_result[0].error_message is None
    image = apply(image, result)
    p = part(image)
    assert (p.leader, p.isr, p.leader_epoch) == (1, before.isr, before.leader_epoch + 1)
    again = controller.handle(elect(0, {"t": [0]}), image)
    assert outcomes(again.response) == {("t", 0): E.ELECTION_NOT_NEEDED} and not again.records


def test_preferred_replica_not_available(controller: Controller, image: ClusterImage) -> None:
    image = with_topic(controller, image, "t", {0: [1, 2, 3], 1: [1, 2, 3]})
    image = unfence(controller, fence(controller, image, 1), 1)  # 1 active, not in the ISR
    result = controller.handle(elect(0, {"t": [0]}), image)
    assert outcomes(result.response) == {("t", 0): E.PREFERRED_LEADER_NOT_AVAILABLE}
    (answer,) = result.response.replica_election_results[0].partition_result
    assert answer.error_message == "Preferred replica 1 of t-0 is not in the ISR."
    # In the ISR (its last member) but fenced.
    image = with_topic(controller, image, "u", {0: [3, 2]})
    image = set_isr(controller, image, [3], topic="u")
    image = fence(controller, image, 3)
    assert (part(image, "u").leader, part(image, "u").isr) == (-1, (3,))
    result = controller.handle(elect(0, {"u": [0]}), image)
    assert outcomes(result.response) == {("u", 0): E.PREFERRED_LEADER_NOT_AVAILABLE}
    (answer,) = result.response.replica_election_results[0].partition_result
    assert answer.error_message == "Preferred replica 3 of u-0 is fenced or shutting down."
    assert result.records == []


def test_leaderless_with_an_active_isr_member(controller: Controller, image: ClusterImage) -> None:
    """Not a state the controller leaves behind, but Kafka's rules cover it: both election
    types then elect a clean leader (PREFERRED: the preferred replica if it can, else another)."""
    image = with_topic(controller, image, "t", {0: [1, 2, 3], 1: [1, 2, 3]})
    topic_id = image.topics.by_name["t"].topic_id
    image = replay_records(
        image,
        [
            PartitionChangeRecord(topic_id=topic_id, partition_id=0, leader=BrokerId(-1)),
            PartitionChangeRecord(
                topic_id=topic_id,
                partition_id=1,
                leader=BrokerId(-1),
                isr=[BrokerId(2), BrokerId(3)],
            ),
        ],
    )
    for election_type, leaders in ((0, [1, 2]), (1, [1, 2])):
        result = controller.handle(elect(election_type, {"t": [0, 1]}), image)
        assert outcomes(result.response) == {("t", 0): E.NONE, ("t", 1): E.NONE}
        after = apply(image, result)
        assert [part(after, "t", i).leader for i in (0, 1)] == leaders
        assert {part(after, "t", i).leader_recovery_state for i in (0, 1)} == {RECOVERED}


def test_unclean_election_request(controller: Controller, image: ClusterImage) -> None:
    image = leaderless(controller, image)  # unclean.leader.election.enable is false
    result = controller.handle(elect(1, {"t": [0], "u": [0]}), image)
    assert outcomes(result.response) == {
        ("t", 0): E.NONE,
        ("u", 0): E.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    }
    image = apply(image, result)
    assert (part(image).leader, part(image).isr, part(image).leader_recovery_state) == (
        1,
        (1,),
        RECOVERING,
    )
    again = controller.handle(elect(1, {"t": [0]}), image)
    assert outcomes(again.response) == {("t", 0): E.ELECTION_NOT_NEEDED}


def test_unknown_topics_and_partitions(controller: Controller, image: ClusterImage) -> None:
    image = with_topic(controller, image, "t", {0: [1]})
    for election_type in (0, 1):
        result = controller.handle(elect(election_type, {"t": [0, 5, -1], "nope": [0]}), image)
        assert outcomes(result.response) == {
            ("t", 0): E.ELECTION_NOT_NEEDED,
            ("t", 5): E.UNKNOWN_TOPIC_OR_PARTITION,
            ("t", -1): E.UNKNOWN_TOPIC_OR_PARTITION,
            ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert result.records == []


def test_every_partition(controller: Controller, image: ClusterImage) -> None:
    image = preferred_not_leading(controller, image)  # t-0 needs an election
    image = with_topic(controller, image, "fine", {0: [2], 1: [3]})
    image = with_topic(controller, image, "stuck", {0: [3, 1]})
    image = fence(controller, image, 3)
    image = unfence(controller, image, 3)  # stuck-0: 3 is preferred but out of the ISR
    result = controller.handle(elect(0, None), image)
    # As Kafka: every topic listed, ELECTION_NOT_NEEDED partitions left out.
    assert [t.topic for t in result.response.replica_election_results] == ["fine", "stuck", "t"]
    assert outcomes(result.response) == {
        ("stuck", 0): E.PREFERRED_LEADER_NOT_AVAILABLE,
        ("t", 0): E.NONE,
    }
    image = apply(image, result)
    assert part(image).leader == 1
    unclean = controller.handle(elect(1, None), image)
    assert outcomes(unclean.response) == {} and unclean.records == []


def test_a_partition_named_twice_sees_the_first_election(
    controller: Controller, image: ClusterImage
) -> None:
    image = preferred_not_leading(controller, image)
    result = controller.handle(elect(0, {"t": [0, 0]}), image)
    assert [r.error_code for r in result.response.replica_election_results[0].partition_result] == [
        E.NONE,
        E.ELECTION_NOT_NEEDED,
    ]
    assert len(result.records) == 1


def test_an_unknown_election_type_is_an_invalid_request(
    controller: Controller, image: ClusterImage
) -> None:
    image = with_topic(controller, image, "t", {0: [1]})
    result = controller.handle(elect(2, {"t": [0]}), image)
    assert result.records == [] and result.response.error_code == E.INVALID_REQUEST
    assert outcomes(result.response) == {("t", 0): E.INVALID_REQUEST}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_the_response_encodes_at_every_version(
    controller: Controller, image: ClusterImage, version: int
) -> None:
    image = preferred_not_leading(controller, image)
    request = ElectLeadersRequest.decode(elect(0, {"t": [0, 9]}).encode(version), version)
    response = controller.handle(request, image).response
    decoded = ElectLeadersResponse.decode(response.encode(version), version)
    assert outcomes(decoded) == {("t", 0): E.NONE, ("t", 9): E.UNKNOWN_TOPIC_OR_PARTITION}


# --- leader balance -------------------------------------------------------------------------------


def imbalanced(controller: Controller, image: ClusterImage) -> ClusterImage:
    """Broker 1 is the preferred replica of t-0..t-3 and leads none: it was fenced, came back and
    rejoined the ISR of t-0..t-2 (t-3: not yet). Broker 2 prefers u-0, and leads it."""
    assignments = {i: [1, 2, 3] for i in range(4)}
    image = with_topic(controller, image, "t", assignments)
    image = with_topic(controller, image, "u", {0: [2, 1]})
    image = unfence(controller, fence(controller, image, 1), 1)
    for pid in range(3):
        image = set_isr(controller, image, [2, 3, 1], pid=pid)
    return image


def test_leader_imbalance(controller: Controller, image: ClusterImage) -> None:
    image = imbalanced(controller, image)
    assert leader_imbalance(image) == {1: BrokerImbalance(4, 4), 2: BrokerImbalance(1, 0)}
    assert leader_imbalance(image)[1].ratio == 1.0


def test_rebalance_elects_the_preferred_replicas_that_can_lead(
    controller: Controller, image: ClusterImage
) -> None:
    image = imbalanced(controller, image)
    result = controller.handle_rebalance_leaders(image)
    assert result.response == [TopicPartition("t", i) for i in range(3)]
    image = apply(image, result)
    assert [part(image, "t", i).leader for i in range(4)] == [1, 1, 1, 2]
    assert part(image, "u").leader == 2
    # 1 of 4 is 25%: above the default 10%, but t-3's preferred replica is not in the ISR.
    assert controller.handle_rebalance_leaders(image).records == []


@pytest.mark.parametrize(("percentage", "moved"), [(0, 1), (24, 1), (25, 0), (100, 0)])
def test_rebalance_only_above_the_percentage(
    controller: Controller, image: ClusterImage, percentage: int, moved: int
) -> None:
    image = imbalanced(controller, image)
    image = apply(image, controller.handle_rebalance_leaders(image))
    image = set_isr(controller, image, [2, 3, 1], pid=3)  # 1 of 4 (25%) still imbalanced
    result = rebalance_leaders(image, percentage)
    assert len(result.records) == moved


def test_rebalance_is_bounded_per_run(controller: Controller, image: ClusterImage) -> None:
    image = imbalanced(controller, image)
    result = controller.handle_rebalance_leaders(image, limit=2)
    assert result.response == [TopicPartition("t", 0), TopicPartition("t", 1)]
    rest = controller.handle_rebalance_leaders(apply(image, result), limit=2)
    assert rest.response == [TopicPartition("t", 2)]


def test_rebalance_skips_inactive_preferred_replicas(
    controller: Controller, image: ClusterImage
) -> None:
    image = imbalanced(controller, image)
    image, _ = run(
        controller, image, "handle_broker_heartbeat", heartbeat(image, 1, want_shut_down=True)
    )
    assert controller.handle_rebalance_leaders(image).records == []


# --- configuration --------------------------------------------------------------------------------


def test_controller_config_from_properties() -> None:
    config = ControllerConfig.from_properties({})
    assert (
        config.auto_leader_rebalance_enable,
        config.leader_imbalance_check_interval_ms,
        config.leader_imbalance_per_broker_percentage,
    ) == (True, 300_000, 10)
    config = ControllerConfig.from_properties(
        {
            "auto.leader.rebalance.enable": "false",
            "leader.imbalance.check.interval.seconds": "2",
            "leader.imbalance.per.broker.percentage": "0",
        }
    )
    assert (
        config.auto_leader_rebalance_enable,
        config.leader_imbalance_check_interval_ms,
        config.leader_imbalance_per_broker_percentage,
    ) == (False, 2000, 0)


@pytest.mark.parametrize(
    "props",
    [
        {"leader.imbalance.check.interval.seconds": "0"},
        {"leader.imbalance.per.broker.percentage": "-1"},
        {"auto.leader.rebalance.enable": "maybe"},
        {UNCLEAN: "sometimes"},
    ],
)
def test_invalid_election_configs_are_refused(props: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="Invalid value"):
        ControllerConfig.from_properties(props)


def test_effective_topic_value() -> None:
    sources = BrokerConfigSources(dynamic_default={UNCLEAN: "TRUE"}, static={UNCLEAN: "false"})
    assert effective_topic_value(UNCLEAN, {}, sources) is True
    assert effective_topic_value(UNCLEAN, {UNCLEAN: "false"}, sources) is False
    assert effective_topic_value(UNCLEAN, {UNCLEAN: "bogus"}, BrokerConfigSources()) is False
    assert effective_topic_value("retention.ms", {}, BrokerConfigSources()) == 604800000
