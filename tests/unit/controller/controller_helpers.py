"""Builders and invariant checks shared by the controller tests."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
)
from kafka_protocol.types import BrokerId
from kraft.controller import Controller, ControllerConfig, ControllerResult
from kraft.controller.elections import unclean_policy
from metadata_log.delta import replay_records
from metadata_log.image import ClusterImage, LeaderRecoveryState, PartitionImage, TopicPartition

R = TypeVar("R")


def make_controller(seed: int = 0, **config: Any) -> Controller:
    return Controller(ControllerConfig(**config), rng=random.Random(seed))


def apply(image: ClusterImage, result: ControllerResult[Any]) -> ClusterImage:
    """The image after the command's records (one batch)."""
    return replay_records(image, result.records) if result.records else image


def run(
    controller: Controller, image: ClusterImage, handler: str, request: Any
) -> tuple[ClusterImage, Any]:
    result = getattr(controller, handler)(request, image)
    return apply(image, result), result.response


def registration(
    broker_id: int, rack: str | None = None, incarnation: int | None = None
) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id,
        incarnation_id=uuid.UUID(int=incarnation if incarnation is not None else broker_id + 1000),
        listeners=[
            BrokerRegistrationRequest.Listener(name="PLAINTEXT", host=f"b{broker_id}", port=9092)
        ],
        rack=rack,
    )


def heartbeat(image: ClusterImage, broker_id: int, **fields: Any) -> BrokerHeartbeatRequest:
    fields.setdefault("current_metadata_offset", image.offset)
    return BrokerHeartbeatRequest(
        broker_id=broker_id, broker_epoch=image.brokers[broker_id].epoch, **fields
    )


def cluster(
    controller: Controller, racks: Mapping[int, str | None], *, unfence: bool = True
) -> ClusterImage:
    """A bootstrapped cluster with these brokers registered (and unfenced)."""
    image = apply(ClusterImage.EMPTY, controller.bootstrap(ClusterImage.EMPTY))
    for broker_id, rack in racks.items():
        image, response = run(
            controller, image, "handle_register_broker", registration(broker_id, rack)
        )
        assert response.error_code == 0
    if unfence:
        for broker_id in racks:
            image, response = run(
                controller, image, "handle_broker_heartbeat", heartbeat(image, broker_id)
            )
            assert response.error_code == 0 and not response.is_fenced
    return image


def new_topic(
    name: str,
    partitions: int = 1,
    rf: int = 1,
    configs: Mapping[str, str | None] | None = None,
    assignments: Mapping[int, list[int]] | None = None,
) -> CreateTopicsRequest.CreatableTopic:
    return CreateTopicsRequest.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=rf,
        configs=[
            CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
            for k, v in (configs or {}).items()
        ],
        assignments=[
            CreateTopicsRequest.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
            for i, b in (assignments or {}).items()
        ],
    )


def create(
    *topics: CreateTopicsRequest.CreatableTopic, validate_only: bool = False
) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=list(topics), validate_only=validate_only)


def add_partitions(
    name: str, count: int, assignments: list[list[int]] | None = None
) -> CreatePartitionsRequest:
    return CreatePartitionsRequest(
        topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(
                name=name,
                count=count,
                assignments=None
                if assignments is None
                else [
                    CreatePartitionsRequest.CreatePartitionsAssignment(broker_ids=b)
                    for b in assignments
                ],
            )
        ]
    )


def alter(
    resource_type: int, name: str, *ops: tuple[str, int, str | None], validate_only: bool = False
) -> IncrementalAlterConfigsRequest:
    return IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=name,
                configs=[
                    IncrementalAlterConfigsRequest.AlterableConfig(
                        name=k, config_operation=op, value=v
                    )
                    for k, op, v in ops
                ],
            )
        ],
        validate_only=validate_only,
    )


def part(image: ClusterImage, topic: str = "t", partition: int = 0) -> PartitionImage:
    p = image.topics.partition(topic, partition)
    assert p is not None
    return p


def isr_change(
    image: ClusterImage, isr: Sequence[int], topic: str = "t", pid: int = 0
) -> AlterPartitionRequest:
    """The partition leader's AlterPartition for ``isr``, at the partition's current epochs
    (a follower caught up or fell behind, or the leader recovered)."""
    p = part(image, topic, pid)
    return AlterPartitionRequest(
        broker_id=BrokerId(p.leader),
        broker_epoch=image.brokers[p.leader].epoch,
        topics=[
            AlterPartitionRequest.TopicData(
                topic_id=image.topics.by_name[topic].topic_id,
                partitions=[
                    AlterPartitionRequest.PartitionData(
                        partition_index=pid,
                        leader_epoch=p.leader_epoch,
                        partition_epoch=p.partition_epoch,
                        new_isr=[BrokerId(b) for b in isr],
                        leader_recovery_state=LeaderRecoveryState.RECOVERED,
                    )
                ],
            )
        ],
    )


def check_invariants(
    image: ClusterImage, epochs: dict[tuple[uuid.UUID, int], tuple[int, int]]
) -> None:
    """Partition invariants, and leader/partition epochs that never decrease (``epochs`` is
    updated in place across calls)."""
    assert len(image.topics.by_id) == len(image.topics.by_name)
    for name, topic in image.topics.by_name.items():
        assert image.topics.by_id[topic.topic_id] is topic and topic.name == name
        assert sorted(topic.partitions) == list(range(len(topic.partitions)))
        for pid, p in topic.partitions.items():
            assert p.replicas and len(set(p.replicas)) == len(p.replicas)
            assert p.isr and set(p.isr) <= set(p.replicas), (name, pid, p)
            assert p.leader == -1 or p.leader in p.isr, (name, pid, p)
            assert all(r in image.brokers for r in p.replicas)
            key = (topic.topic_id, pid)
            old = epochs.get(key, (-1, -1))
            assert p.leader_epoch >= old[0] and p.partition_epoch >= old[1]
            epochs[key] = (p.leader_epoch, p.partition_epoch)


def check_elections(
    before: ClusterImage,
    after: ClusterImage,
    *,
    unclean_asked: bool = False,
    static_broker_config: Mapping[str, str] | None = None,
) -> list[TopicPartition]:
    """Leadership invariants of one command, ``before`` -> ``after``; returns the partitions
    elected uncleanly.

    Every leader is active (unfenced, not shutting down). A new leader has a higher leader epoch
    and comes from the previous ISR, unless the election was unclean: then it was allowed (the
    topic's effective ``unclean.leader.election.enable``, or ``unclean_asked``: an ElectLeaders
    of type UNCLEAN), no member of the previous ISR is active, the leader leads alone and is
    RECOVERING. No partition of a topic that allows unclean election is left leaderless while
    one of its replicas is active."""
    allows = unclean_policy(after, static_broker_config or {})
    uncleanly: list[TopicPartition] = []
    for topic in after.topics.by_id.values():
        old_topic = before.topics.by_id.get(topic.topic_id)
        for pid, p in topic.partitions.items():
            if p.has_leader:
                assert after.brokers[p.leader].is_active, ("fenced or shutting down", p)
            elif allows(topic.name):
                assert not any(after.brokers[b].is_active for b in p.replicas), ("waits", p)
            old = None if old_topic is None else old_topic.partitions.get(pid)
            if old is None or p.leader == old.leader:
                continue
            assert p.leader_epoch > old.leader_epoch, (old, p)
            if p.has_leader and p.leader not in old.isr:
                _check_unclean(old, p, after, unclean_asked or allows(topic.name))
                uncleanly.append(TopicPartition(topic.name, pid))
    return uncleanly


def _check_unclean(
    old: PartitionImage, p: PartitionImage, after: ClusterImage, allowed: bool
) -> None:
    assert allowed, ("unclean election not allowed", old, p)
    assert not any(after.brokers[b].is_active for b in old.isr), ("a clean leader existed", p)
    assert p.isr == (p.leader,), ("an unclean leader leads alone", p)
    assert p.leader_recovery_state == LeaderRecoveryState.RECOVERING, p


def check_elect_leaders(
    request: ElectLeadersRequest,
    response: ElectLeadersResponse,
    before: ClusterImage,
    after: ClusterImage,
) -> list[ErrorCode]:
    """The answer to ElectLeaders against a model of Kafka's rules; returns the errors seen.

    Named partitions are answered in request order (a partition named again is judged on the
    registration after the first election); a request for every partition lists every topic
    and leaves out ELECTION_NOT_NEEDED partitions."""
    results = response.replica_election_results
    assert response.error_code == ErrorCode.NONE
    seen: list[ErrorCode] = []
    if request.topic_partitions is None:
        assert [t.topic for t in results] == sorted(before.topics.by_name)
        for answer in results:
            topic = before.topics.by_name[answer.topic]
            reported = {r.partition_id: ErrorCode(r.error_code) for r in answer.partition_result}
            for pid, old in sorted(topic.partitions.items()):
                new = after.topics.by_name[answer.topic].partitions[pid]
                expected = _expected_election(request.election_type, old, new, before)
                if expected == ErrorCode.ELECTION_NOT_NEEDED:
                    assert pid not in reported, (answer.topic, pid)
                else:
                    assert reported.pop(pid) == expected, (answer.topic, pid, old)
                    seen.append(expected)
            assert not reported, "only existing partitions"
        return seen
    assert [t.topic for t in results] == [t.topic for t in request.topic_partitions]
    judged: set[tuple[str, int]] = set()
    for wanted, answer in zip(request.topic_partitions, results, strict=True):
        assert [r.partition_id for r in answer.partition_result] == wanted.partitions
        for result in answer.partition_result:
            key = (wanted.topic, result.partition_id)
            old, new = before.topics.partition(*key), after.topics.partition(*key)
            if old is None or new is None:
                expected = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                current = new if key in judged else old
                expected = _expected_election(request.election_type, current, new, before)
            assert result.error_code == expected, (key, old, new)
            assert (result.error_message is None) == (expected == ErrorCode.NONE)
            judged.add(key)
            seen.append(expected)
    return seen


def _expected_election(
    election_type: int, old: PartitionImage, new: PartitionImage, image: ClusterImage
) -> ErrorCode:
    """Kafka's answer for one partition registered as ``old``; ``new`` is checked to be the
    registration that answer implies."""

    def active(b: int) -> bool:
        return image.brokers[b].is_active

    preferred = old.replicas[0]
    if election_type == 0:
        if old.leader == preferred:
            return ErrorCode.ELECTION_NOT_NEEDED
        if preferred in old.isr and active(preferred):
            assert (new.leader, new.isr) == (preferred, old.isr), (old, new)
            return ErrorCode.NONE
        assert new == old, (old, new)
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    if old.has_leader:
        return ErrorCode.ELECTION_NOT_NEEDED
    if any(active(b) for b in old.replicas):
        assert new.has_leader, (old, new)
        return ErrorCode.NONE
    assert new == old, (old, new)
    return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
