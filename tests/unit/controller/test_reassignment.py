"""Partition reassignment (KIP-455) in the controller: the start, the catch-up through
AlterPartition, completion, leadership moving off removed replicas, cancel, and the errors; then
a seeded simulation of reassignments, ISR changes, cancels and broker fencing checked against the
invariants after every step."""

from __future__ import annotations

import random
from typing import Any

import pytest
from controller_helpers import (
    apply,
    check_invariants,
    cluster,
    create,
    heartbeat,
    isr_change,
    make_controller,
    new_topic,
    part,
    run,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
)
from kafka_protocol.types import BrokerId, TopicName
from kraft.controller import Controller
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage

E = ErrorCode
Reassignable = AlterPartitionReassignmentsRequest.ReassignableTopic
ReassignablePartition = AlterPartitionReassignmentsRequest.ReassignablePartition


@pytest.fixture
def controller() -> Controller:
    return make_controller()


@pytest.fixture
def image(controller: Controller) -> ClusterImage:
    """Brokers 1-5 unfenced; topic t: partition 0 on [1, 2, 3], partition 1 on [2, 3, 1]."""
    image = cluster(controller, {b: None for b in range(1, 6)})
    topic = new_topic("t", assignments={0: [1, 2, 3], 1: [2, 3, 1]})
    topic.num_partitions = topic.replication_factor = -1
    image, response = run(controller, image, "handle", create(topic))
    assert response.topics[0].error_code == 0
    return image


def reassign(
    *moves: tuple[str, int, list[int] | None], allow_rf_change: bool = True
) -> AlterPartitionReassignmentsRequest:
    topics: dict[str, list[ReassignablePartition]] = {}
    for topic, pid, replicas in moves:
        topics.setdefault(topic, []).append(
            ReassignablePartition(
                partition_index=pid,
                replicas=None if replicas is None else [BrokerId(b) for b in replicas],
            )
        )
    return AlterPartitionReassignmentsRequest(
        topics=[Reassignable(name=TopicName(t), partitions=ps) for t, ps in topics.items()],
        allow_replication_factor_change=allow_rf_change,
    )


def errors(response: AlterPartitionReassignmentsResponse) -> dict[tuple[str, int], str]:
    return {
        (t.name, p.partition_index): E.from_code(p.error_code).name
        for t in response.responses
        for p in t.partitions
    }


def listed(controller: Controller, image: ClusterImage, topics: Any = None) -> dict[Any, Any]:
    request = ListPartitionReassignmentsRequest(topics=topics)
    response = controller.handle(request, image).response
    return {
        (t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
        for t in response.topics
        for p in t.partitions
    }


def step(controller: Controller, image: ClusterImage, handler: str, request: Any) -> Any:
    return run(controller, image, handler, request)


def test_move_to_new_brokers_adds_catches_up_then_completes(
    controller: Controller, image: ClusterImage
) -> None:
    before = part(image)
    image, response = step(controller, image, "handle", reassign(("t", 0, [4, 5, 1])))
    assert errors(response) == {("t", 0): "NONE"}
    p = part(image)
    # Started: the target, then the replicas being removed; leader and ISR unchanged.
    assert p.replicas == (4, 5, 1, 2, 3)
    assert p.adding_replicas == (4, 5) and p.removing_replicas == (2, 3)
    assert p.isr == before.isr and p.leader == 1 and p.leader_epoch == before.leader_epoch
    assert listed(controller, image) == {("t", 0): ([4, 5, 1, 2, 3], [4, 5], [2, 3])}

    # Broker 4 catches up: in the ISR, not complete yet.
    image, response = step(
        controller, image, "handle_alter_partition", isr_change(image, [1, 2, 3, 4])
    )
    assert response.topics[0].partitions[0].error_code == 0
    assert part(image).adding_replicas == (4, 5)

    # Broker 5 catches up: complete; removed replicas leave the ISR, the leader stays (in target).
    image, response = step(
        controller, image, "handle_alter_partition", isr_change(image, [1, 2, 3, 4, 5])
    )
    answer = response.topics[0].partitions[0]
    assert answer.error_code == 0
    p = part(image)
    assert p.replicas == (4, 5, 1) and p.isr == (1, 4, 5)
    assert p.adding_replicas == () and p.removing_replicas == ()
    assert p.leader == 1 and p.leader_epoch > before.leader_epoch  # fenced the removed ones
    assert answer.leader_epoch == p.leader_epoch
    assert listed(controller, image) == {}


def test_leader_moves_off_a_removed_replica(controller: Controller, image: ClusterImage) -> None:
    image, _ = step(controller, image, "handle", reassign(("t", 0, [4, 5])))
    image, response = step(
        controller, image, "handle_alter_partition", isr_change(image, [1, 2, 3, 4, 5])
    )
    # The requester (1) was removed: the first target replica leads; it is told to refresh.
    assert response.topics[0].partitions[0].error_code == E.NEW_LEADER_ELECTED
    p = part(image)
    assert p.replicas == (4, 5) and p.isr == (4, 5) and p.leader == 4


def test_reorder_and_shrink_complete_at_once(controller: Controller, image: ClusterImage) -> None:
    image, response = step(
        controller, image, "handle", reassign(("t", 0, [3, 2, 1]), ("t", 1, [3]))
    )
    assert errors(response) == {("t", 0): "NONE", ("t", 1): "NONE"}
    assert part(image, "t", 0).replicas == (3, 2, 1) and part(image, "t", 0).leader == 1
    p1 = part(image, "t", 1)
    assert p1.replicas == (3,) and p1.isr == (3,) and p1.leader == 3
    assert listed(controller, image) == {}


def test_same_target_writes_nothing(controller: Controller, image: ClusterImage) -> None:
    result = controller.handle(reassign(("t", 0, [1, 2, 3])), image)
    assert result.records == [] and errors(result.response) == {("t", 0): "NONE"}


def test_cancel_reverts_to_the_original_replicas(
    controller: Controller, image: ClusterImage
) -> None:
    original = part(image)
    image, _ = step(controller, image, "handle", reassign(("t", 0, [4, 5, 1])))
    image, _ = step(controller, image, "handle_alter_partition", isr_change(image, [1, 2, 3, 4]))
    image, response = step(controller, image, "handle", reassign(("t", 0, None)))
    assert errors(response) == {("t", 0): "NONE"}
    p = part(image)
    assert p.replicas == original.replicas and p.isr == original.isr and p.leader == 1
    assert p.adding_replicas == () and p.removing_replicas == ()
    # Nothing left to cancel.
    result = controller.handle(reassign(("t", 0, None)), image)
    assert errors(result.response) == {("t", 0): "NO_REASSIGNMENT_IN_PROGRESS"}
    assert result.records == []


def test_a_new_target_replaces_the_one_in_progress(
    controller: Controller, image: ClusterImage
) -> None:
    image, _ = step(controller, image, "handle", reassign(("t", 0, [4, 5, 1])))
    image, _ = step(controller, image, "handle", reassign(("t", 0, [1, 2, 4])))
    p = part(image)
    # Started from the current replicas [4, 5, 1, 2, 3]: 5 and 3 go, nothing is added.
    assert p.replicas == (1, 2, 4, 3, 5)
    assert p.adding_replicas == () and p.removing_replicas == (3, 5)
    image, _ = step(controller, image, "handle_alter_partition", isr_change(image, [1, 2, 3, 4]))
    assert part(image).replicas == (1, 2, 4) and part(image).isr == (1, 2, 4)


def test_bad_targets_change_nothing(controller: Controller, image: ClusterImage) -> None:
    request = reassign(
        ("t", 0, [1, 2, 9]),  # broker 9 is not registered
        ("t", 1, [1, 1, 2]),
        ("t", 7, [1, 2, 3]),
        ("nope", 0, [1]),
        ("t", 0, []),
    )
    result = controller.handle(request, image)
    assert result.records == []
    assert errors(result.response) == {
        ("t", 0): "INVALID_REPLICA_ASSIGNMENT",
        ("t", 1): "INVALID_REPLICA_ASSIGNMENT",
        ("t", 7): "UNKNOWN_TOPIC_OR_PARTITION",
        ("nope", 0): "UNKNOWN_TOPIC_OR_PARTITION",
    }
    messages = [p.error_message for t in result.response.responses for p in t.partitions]
    assert all(messages)
    assert "broker 9" in str(messages)


def test_replication_factor_change_refused_when_not_allowed(
    controller: Controller, image: ClusterImage
) -> None:
    result = controller.handle(reassign(("t", 0, [1, 2]), allow_rf_change=False), image)
    assert errors(result.response) == {("t", 0): "INVALID_REPLICATION_FACTOR"}
    assert result.records == []
    result = controller.handle(reassign(("t", 0, [1, 2, 4]), allow_rf_change=False), image)
    assert errors(result.response) == {("t", 0): "NONE"} and result.records


def test_one_bad_partition_does_not_stop_the_others(
    controller: Controller, image: ClusterImage
) -> None:
    image, response = step(
        controller, image, "handle", reassign(("t", 0, [1, 2, 9]), ("t", 1, [2, 3, 4]))
    )
    assert errors(response) == {("t", 0): "INVALID_REPLICA_ASSIGNMENT", ("t", 1): "NONE"}
    assert part(image, "t", 0).adding_replicas == ()
    assert part(image, "t", 1).adding_replicas == (4,)


def test_list_named_topics_skips_unknown(controller: Controller, image: ClusterImage) -> None:
    image, _ = step(controller, image, "handle", reassign(("t", 0, [4, 2, 3])))
    T = ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics
    wanted = [T(name=TopicName("t"), partition_indexes=[0, 1, 5]), T(name=TopicName("x"))]
    assert listed(controller, image, wanted) == {("t", 0): ([4, 2, 3, 1], [4], [1])}


def test_cancel_needing_an_unclean_election_is_refused(
    controller: Controller, image: ClusterImage
) -> None:
    """Only an added replica is left in the ISR: reverting would need an unclean election."""
    image, _ = step(controller, image, "handle", reassign(("t", 0, [4, 5])))
    image, _ = step(controller, image, "handle_alter_partition", isr_change(image, [1, 4]))
    image = apply(image, controller.handle_fence_brokers([1], image))
    p = part(image)
    assert p.isr == (4,) and p.leader == 4 and p.adding_replicas == (4, 5)
    result = controller.handle(reassign(("t", 0, None)), image)
    assert errors(result.response) == {("t", 0): "INVALID_REPLICA_ASSIGNMENT"}
    assert result.records == []


# --- simulation -------------------------------------------------------------------------------


def _simulate(seed: int, steps: int = 60) -> None:
    """Random reassignments, catch-ups, cancels, fencing and returns of brokers; invariants after
    every step, and every reassignment ends once its replicas are all in the ISR."""
    rng = random.Random(seed)
    controller = make_controller(seed)
    image = cluster(controller, {b: None for b in range(1, 6)})
    topic = new_topic("t", partitions=3, rf=3)
    image, _ = run(controller, image, "handle", create(topic))
    epochs: dict[Any, tuple[int, int]] = {}
    for _ in range(steps):
        pid = rng.randrange(3)
        action = rng.choice(["reassign", "reassign", "catch_up", "catch_up", "cancel", "fence"])
        p = part(image, "t", pid)
        if action == "reassign":
            target = rng.sample(range(1, 6), rng.randint(1, 4))
            before = image
            image, response = run(controller, image, "handle", reassign(("t", pid, target)))
            assert errors(response) == {("t", pid): "NONE"}
            p = part(image, "t", pid)
            done = not p.adding_replicas and not p.removing_replicas
            assert (list(p.replicas) == target) == done or not done
            if done:
                assert list(p.replicas) == target
            else:
                assert list(p.replicas[: len(target)]) == target
                assert set(p.adding_replicas) == set(target) - set(part(before, "t", pid).replicas)
        elif action == "catch_up" and p.has_leader:
            active = [b for b in p.replicas if image.brokers[b].is_active]
            joining = [b for b in active if b not in p.isr]
            if joining:
                isr = [*p.isr, rng.choice(joining)]
                isr = [b for b in isr if image.brokers[b].is_active]
                if p.leader in isr:
                    image, _ = run(
                        controller,
                        image,
                        "handle_alter_partition",
                        isr_change(image, isr, "t", pid),
                    )
        elif action == "cancel":
            result = controller.handle(reassign(("t", pid, None)), image)
            code = errors(result.response)[("t", pid)]
            in_progress = bool(p.adding_replicas or p.removing_replicas)
            assert code == ("NONE" if in_progress else "NO_REASSIGNMENT_IN_PROGRESS") or (
                code == "INVALID_REPLICA_ASSIGNMENT"
            )
            image = apply(image, result)
            if code == "NONE":
                p = part(image, "t", pid)
                assert not p.adding_replicas and not p.removing_replicas
        elif action == "fence":
            broker = rng.randrange(1, 6)
            if image.brokers[broker].is_active:
                image = apply(image, controller.handle_fence_brokers([broker], image))
            else:
                image, _ = run(
                    controller, image, "handle_broker_heartbeat", heartbeat(image, broker)
                )
        check_invariants(image, epochs)
        for q in image.topics.by_name["t"].partitions.values():
            assert set(q.adding_replicas) <= set(q.replicas)
            assert set(q.removing_replicas) <= set(q.replicas)
            assert not set(q.adding_replicas) & set(q.removing_replicas)
            if q.adding_replicas or q.removing_replicas:
                target = [b for b in q.replicas if b not in q.removing_replicas]
                assert not set(target) <= set(q.isr) or not target, ("should be complete", q)


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_simulated_reassignments_keep_invariants(seed: int) -> None:
    _simulate(seed)


def test_a_move_in_progress_survives_a_snapshot(
    controller: Controller, image: ClusterImage
) -> None:
    """A new active controller loading a snapshot carries on with the move (the reassignment
    state is in the partition registration, nowhere else)."""
    image, _ = step(controller, image, "handle", reassign(("t", 0, [4, 5, 1])))
    reloaded = replay_records(ClusterImage.EMPTY, image.to_records())
    assert part(reloaded) == part(image)
    assert listed(controller, reloaded) == listed(controller, image)
    reloaded, _ = step(
        controller, reloaded, "handle_alter_partition", isr_change(reloaded, [1, 2, 3, 4, 5])
    )
    assert part(reloaded).replicas == (4, 5, 1) and not part(reloaded).adding_replicas
