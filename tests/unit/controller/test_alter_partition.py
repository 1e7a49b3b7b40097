"""AlterPartition: a partition leader shrinks and expands its ISR through the controller."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from controller_helpers import apply, cluster, create, heartbeat, make_controller, new_topic, run

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import AlterPartitionRequest, AlterPartitionResponse
from kafka_protocol.metadata import PartitionChangeRecord, UnregisterBrokerRecord
from kafka_protocol.types import BrokerId, TopicName
from kraft.controller import Controller, ControllerResult
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage, LeaderRecoveryState, PartitionImage
from metadata_log.records import decode_record, encode_record

E = ErrorCode


@pytest.fixture
def controller() -> Controller:
    return make_controller()


@pytest.fixture
def image(controller: Controller) -> ClusterImage:
    """Brokers 1-3 unfenced; topic t with 2 partitions on all three, topic u with 1."""
    image = cluster(controller, {1: "a", 2: "b", 3: "c"})
    image, _ = run(controller, image, "handle", create(new_topic("t", 2, 3), new_topic("u")))
    return image


def part(image: ClusterImage, topic: str = "t", partition: int = 0) -> PartitionImage:
    p = image.topics.partition(topic, partition)
    assert p is not None
    return p


def partition_data(
    image: ClusterImage,
    topic: str,
    partition: int,
    isr: list[int],
    *,
    epochs: dict[int, int] | None = None,
    **fields: Any,
) -> AlterPartitionRequest.PartitionData:
    """The request the current leader would send; ``epochs``: as v3, with broker epochs."""
    current = part(image, topic, partition)
    fields.setdefault("leader_epoch", current.leader_epoch)
    fields.setdefault("partition_epoch", current.partition_epoch)
    if epochs is None:
        fields["new_isr"] = [BrokerId(b) for b in isr]
    else:
        fields["new_isr_with_epochs"] = [
            AlterPartitionRequest.BrokerState(broker_id=BrokerId(b), broker_epoch=epochs[b])
            for b in isr
        ]
    return AlterPartitionRequest.PartitionData(partition_index=partition, **fields)


def topic_data(
    image: ClusterImage,
    topic: str,
    *partitions: AlterPartitionRequest.PartitionData,
    by_name: bool = False,
) -> AlterPartitionRequest.TopicData:
    if by_name:  # v0-1
        return AlterPartitionRequest.TopicData(
            topic_name=TopicName(topic), partitions=list(partitions)
        )
    topic_id = image.topics.by_name[topic].topic_id
    return AlterPartitionRequest.TopicData(topic_id=topic_id, partitions=list(partitions))


def request(
    image: ClusterImage,
    broker_id: int,
    *topics: AlterPartitionRequest.TopicData,
    broker_epoch: int | None = None,
) -> AlterPartitionRequest:
    if broker_epoch is None:
        broker_epoch = image.brokers[broker_id].epoch
    return AlterPartitionRequest(
        broker_id=BrokerId(broker_id), broker_epoch=broker_epoch, topics=list(topics)
    )


def alter(
    controller: Controller,
    image: ClusterImage,
    isr: list[int],
    *,
    topic: str = "t",
    partition: int = 0,
    by_name: bool = False,
    broker_id: int | None = None,
    epochs: dict[int, int] | None = None,
    **fields: Any,
) -> tuple[ControllerResult[AlterPartitionResponse], AlterPartitionResponse.PartitionData]:
    """One partition's AlterPartition, from its leader unless ``broker_id`` says otherwise."""
    data = partition_data(image, topic, partition, isr, epochs=epochs, **fields)
    requester = part(image, topic, partition).leader if broker_id is None else broker_id
    result = controller.handle_alter_partition(
        request(image, requester, topic_data(image, topic, data, by_name=by_name)), image
    )
    (topic_result,) = result.response.topics
    (partition_result,) = topic_result.partitions
    assert partition_result.partition_index == partition
    return result, partition_result


def refused(
    controller: Controller, image: ClusterImage, isr: list[int], **kwargs: Any
) -> ErrorCode:
    result, answer = alter(controller, image, isr, **kwargs)
    assert result.records == []
    return ErrorCode(answer.error_code)


def followers(image: ClusterImage, topic: str = "t", partition: int = 0) -> list[int]:
    p = part(image, topic, partition)
    return [b for b in p.replicas if b != p.leader]


# --- success ----------------------------------------------------------------------------------


def check_answer(answer: AlterPartitionResponse.PartitionData, p: PartitionImage) -> None:
    assert answer.error_code == E.NONE
    assert (answer.leader_id, answer.leader_epoch, tuple(answer.isr)) == (
        p.leader,
        p.leader_epoch,
        p.isr,
    )
    assert (answer.partition_epoch, answer.leader_recovery_state) == (
        p.partition_epoch,
        p.leader_recovery_state,
    )


@pytest.mark.parametrize("by_name", [False, True], ids=["v2-by-id", "v1-by-name"])
def test_shrink_then_expand(controller: Controller, image: ClusterImage, by_name: bool) -> None:
    before = part(image)
    leader, dropped = before.leader, followers(image)[0]
    shrunk = [b for b in before.isr if b != dropped]
    result, answer = alter(controller, image, shrunk, by_name=by_name)
    (record,) = result.records
    assert isinstance(record, PartitionChangeRecord)
    assert decode_record(encode_record(record)) == record
    image = apply(image, result)
    after = part(image)
    assert after.isr == tuple(shrunk) and after.leader == leader
    assert after.leader_epoch == before.leader_epoch
    assert after.partition_epoch == before.partition_epoch + 1
    check_answer(answer, after)
    (topic_result,) = result.response.topics
    if by_name:
        assert (topic_result.topic_name, topic_result.topic_id) == ("t", uuid.UUID(int=0))
    else:
        assert topic_result.topic_id == image.topics.by_name["t"].topic_id

    result, answer = alter(controller, image, [*shrunk, dropped], by_name=by_name)
    image = apply(image, result)
    assert set(part(image).isr) == set(before.isr)
    assert part(image).partition_epoch == before.partition_epoch + 2
    check_answer(answer, part(image))


def test_v3_with_broker_epochs(controller: Controller, image: ClusterImage) -> None:
    epochs = {b: image.brokers[b].epoch for b in image.brokers}
    shrunk = [part(image).leader]
    image = apply(image, alter(controller, image, shrunk, epochs=epochs)[0])
    assert part(image).isr == tuple(shrunk)
    unchecked = {b: -1 for b in image.brokers}
    result, answer = alter(controller, image, list(part(image).replicas), epochs=unchecked)
    image = apply(image, result)
    check_answer(answer, part(image))
    assert set(part(image).isr) == {1, 2, 3}


def test_unchanged_isr_writes_nothing(controller: Controller, image: ClusterImage) -> None:
    result, answer = alter(controller, image, list(part(image).isr))
    assert result.records == []
    check_answer(answer, part(image))


def test_many_partitions_in_one_result(controller: Controller, image: ClusterImage) -> None:
    manual = new_topic("m", -1, -1, assignments={0: [1, 2, 3], 1: [1, 3, 2], 2: [1, 2, 3]})
    image, _ = run(controller, image, "handle", create(manual))
    before = image.topics.by_name["m"].partitions
    shrink = [partition_data(image, "m", 0, [1, 3]), partition_data(image, "m", 1, [1])]
    unchanged = partition_data(image, "m", 2, [1, 2, 3])
    result = controller.handle_alter_partition(
        request(image, 1, topic_data(image, "m", *shrink), topic_data(image, "m", unchanged)),
        image,
    )
    assert len(result.records) == 2
    after = apply(image, result)
    answers = [a for t in result.response.topics for a in t.partitions]
    assert [a.partition_index for a in answers] == [0, 1, 2]
    for answer in answers:
        check_answer(answer, part(after, "m", answer.partition_index))
    assert [part(after, "m", i).isr for i in range(3)] == [(1, 3), (1,), (1, 2, 3)]
    assert part(after, "m", 2) is before[2]


def test_a_partition_named_twice_sees_the_first_change(
    controller: Controller, image: ClusterImage
) -> None:
    leader = part(image).leader
    first = partition_data(image, "t", 0, [leader])
    again = partition_data(image, "t", 0, [leader])
    result = controller.handle_alter_partition(
        request(image, leader, topic_data(image, "t", first, again)), image
    )
    answers = result.response.topics[0].partitions
    assert [a.error_code for a in answers] == [E.NONE, E.INVALID_UPDATE_VERSION]
    assert len(result.records) == 1


def test_recovering_leader_recovers(controller: Controller, image: ClusterImage) -> None:
    p = part(image)
    topic_id = image.topics.by_name["t"].topic_id
    recovering = PartitionChangeRecord(
        partition_id=0,
        topic_id=topic_id,
        isr=[BrokerId(p.leader)],
        leader_recovery_state=LeaderRecoveryState.RECOVERING,
    )
    image = replay_records(image, [recovering])
    assert part(image).leader_recovery_state == LeaderRecoveryState.RECOVERING
    assert refused(controller, image, list(p.isr), leader_recovery_state=1) == E.INVALID_REQUEST
    same = alter(controller, image, [p.leader], leader_recovery_state=1)[0]
    assert same.records == []
    result, answer = alter(controller, image, list(p.isr), leader_recovery_state=0)
    image = apply(image, result)
    assert part(image).leader_recovery_state == LeaderRecoveryState.RECOVERED
    assert part(image).isr == p.isr
    check_answer(answer, part(image))


# --- errors -----------------------------------------------------------------------------------


def test_stale_broker_epoch(controller: Controller, image: ClusterImage) -> None:
    leader = part(image).leader
    data = topic_data(image, "t", partition_data(image, "t", 0, [leader]))
    for broker_id, epoch in ((leader, image.brokers[leader].epoch - 1), (9, 0)):
        result = controller.handle_alter_partition(
            request(image, broker_id, data, broker_epoch=epoch), image
        )
        assert result.records == []
        assert result.response.error_code == E.STALE_BROKER_EPOCH
        assert result.response.topics == []


def test_unknown_topic_and_partition(controller: Controller, image: ClusterImage) -> None:
    leader = part(image).leader
    data = partition_data(image, "t", 0, [leader])
    unknown_id = AlterPartitionRequest.TopicData(topic_id=uuid.UUID(int=42), partitions=[data])
    unknown_name = AlterPartitionRequest.TopicData(topic_name=TopicName("x"), partitions=[data])
    result = controller.handle_alter_partition(
        request(image, leader, unknown_id, unknown_name), image
    )
    assert result.records == []
    by_id, by_name = result.response.topics
    assert by_id.topic_id == uuid.UUID(int=42) and by_name.topic_name == "x"
    assert [p.error_code for p in by_id.partitions] == [E.UNKNOWN_TOPIC_ID]
    assert [p.error_code for p in by_name.partitions] == [E.UNKNOWN_TOPIC_OR_PARTITION]
    missing = partition_data(image, "t", 0, [leader])
    missing.partition_index = 7
    for by_name_ in (False, True):
        result = controller.handle_alter_partition(
            request(image, leader, topic_data(image, "t", missing, by_name=by_name_)), image
        )
        assert result.records == []
        assert result.response.topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION


def test_not_the_leader(controller: Controller, image: ClusterImage) -> None:
    follower = followers(image)[0]
    isr = list(part(image).isr)
    assert refused(controller, image, isr, broker_id=follower) == E.NOT_LEADER_OR_FOLLOWER


def test_fenced_leader_epoch(controller: Controller, image: ClusterImage) -> None:
    p = part(image)
    for epoch in (p.leader_epoch - 1, p.leader_epoch + 1):
        assert refused(controller, image, [p.leader], leader_epoch=epoch) == E.FENCED_LEADER_EPOCH
    # A stale leader epoch wins over "not the leader": the requester learns it is behind.
    follower = followers(image)[0]
    old = p.leader_epoch - 1
    assert (
        refused(controller, image, [follower], broker_id=follower, leader_epoch=old)
        == E.FENCED_LEADER_EPOCH
    )


def test_fenced_leader_epoch_after_an_election(controller: Controller, image: ClusterImage) -> None:
    old = part(image)
    stale = partition_data(image, "t", 0, [old.leader])
    image = apply(image, controller.handle_fence_brokers([old.leader], image))
    image = apply(image, controller.handle_broker_heartbeat(heartbeat(image, old.leader), image))
    assert part(image).leader != old.leader
    result = controller.handle_alter_partition(
        request(image, old.leader, topic_data(image, "t", stale)), image
    )
    assert result.response.topics[0].partitions[0].error_code == E.FENCED_LEADER_EPOCH


def test_invalid_update_version(controller: Controller, image: ClusterImage) -> None:
    p = part(image)
    shrunk = [p.leader]
    image = apply(image, alter(controller, image, shrunk)[0])
    for epoch in (p.partition_epoch, part(image).partition_epoch + 1):
        code = refused(controller, image, list(p.isr), partition_epoch=epoch)
        assert code == E.INVALID_UPDATE_VERSION


@pytest.mark.parametrize("by_name", [False, True])
def test_invalid_isr(controller: Controller, image: ClusterImage, by_name: bool) -> None:
    p = part(image)
    follower = followers(image)[0]
    for isr in ([p.leader, 9], [p.leader, p.leader], [follower], [], [p.leader, -1]):
        assert refused(controller, image, isr, by_name=by_name) == E.INVALID_REQUEST, isr


def test_recovery_state_never_goes_back(controller: Controller, image: ClusterImage) -> None:
    leader = part(image).leader
    for state in (1, 5, -1):
        code = refused(controller, image, [leader], leader_recovery_state=state)
        assert code == E.INVALID_REQUEST


def _shrunk_to_leader(controller: Controller, image: ClusterImage) -> tuple[ClusterImage, int]:
    """Partition t-0 with the leader alone in the ISR; returns (image, a follower)."""
    image = apply(image, alter(controller, image, [part(image).leader])[0])
    return image, followers(image)[0]


@pytest.mark.parametrize(
    ("by_name", "error"),
    [(False, E.INELIGIBLE_REPLICA), (True, E.OPERATION_NOT_ATTEMPTED)],
    ids=["v2", "v1"],
)
def test_ineligible_replicas(
    controller: Controller, image: ClusterImage, by_name: bool, error: ErrorCode
) -> None:
    image, follower = _shrunk_to_leader(controller, image)
    leader = part(image).leader
    expand = [leader, follower]

    fenced = apply(image, controller.handle_fence_brokers([follower], image))
    assert refused(controller, fenced, expand, by_name=by_name) == error

    shutting_down = apply(
        image,
        controller.handle_broker_heartbeat(heartbeat(image, follower, want_shut_down=True), image),
    )
    assert shutting_down.brokers[follower].in_controlled_shutdown
    assert refused(controller, shutting_down, expand, by_name=by_name) == error

    gone = replay_records(
        image,
        [
            UnregisterBrokerRecord(
                broker_id=BrokerId(follower), broker_epoch=image.brokers[follower].epoch
            )
        ],
    )
    assert follower not in gone.brokers
    assert refused(controller, gone, expand, by_name=by_name) == error


def test_broker_epoch_mismatch_is_ineligible(controller: Controller, image: ClusterImage) -> None:
    image, follower = _shrunk_to_leader(controller, image)
    leader = part(image).leader
    epochs = {b: image.brokers[b].epoch for b in image.brokers}
    epochs[follower] -= 1  # the leader saw the follower's previous incarnation
    code = refused(controller, image, [leader, follower], epochs=epochs)
    assert code == E.INELIGIBLE_REPLICA
    epochs[follower] = -1
    result, answer = alter(controller, image, [leader, follower], epochs=epochs)
    assert answer.error_code == E.NONE and len(result.records) == 1


def test_errors_do_not_stop_other_partitions(controller: Controller, image: ClusterImage) -> None:
    t0 = part(image, "t", 0)
    ok = partition_data(image, "t", 0, [t0.leader])
    bad = partition_data(image, "t", 0, [t0.leader], partition_epoch=t0.partition_epoch + 5)
    unknown = AlterPartitionRequest.TopicData(topic_id=uuid.UUID(int=42), partitions=[ok])
    result = controller.handle_alter_partition(
        request(image, t0.leader, unknown, topic_data(image, "t", bad, ok)), image
    )
    codes = [[p.error_code for p in t.partitions] for t in result.response.topics]
    assert codes == [[E.UNKNOWN_TOPIC_ID], [E.INVALID_UPDATE_VERSION, E.NONE]]
    assert part(apply(image, result)).isr == (t0.leader,)
