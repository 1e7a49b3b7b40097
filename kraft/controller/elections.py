"""Leader elections the controller runs on request or on its own: ElectLeaders, unclean
elections, and the automatic preferred-leader rebalance (Kafka's
``ReplicationControlManager.electLeaders`` / ``maybeElectUncleanLeaders`` and the ZooKeeper
controller's ``checkAndTriggerAutoLeaderRebalance``).

Theory of operation
-------------------
Every function here is pure: it reads the image and returns PartitionChangeRecords (and a
response); the caller appends them as one batch. Elections only ever change the leader, and
for an unclean election the ISR and the leader recovery state (``partitions``):

* **clean** (the rule everywhere): the new leader is an active member of the ISR;
* **preferred**: the preferred replica (the first of ``replicas``) leads, if it is active and
  in the ISR; the ISR does not change;
* **unclean**: no ISR member is active, so the first active replica leads alone
  (ISR = [leader], RECOVERING). Brokers joining or leaving, and a change of
  ``unclean.leader.election.enable``, run it for topics whose effective value is true; the
  periodic check (:func:`unclean_elections`) catches the rest (a static default changed with a
  controller restart). An ElectLeaders request of type UNCLEAN is the operator's consent and
  ignores the config, as in Kafka.

ElectLeaders (API 43) answers each partition with the first that applies, in Kafka's order:

1. the topic or partition does not exist: UNKNOWN_TOPIC_OR_PARTITION;
2. PREFERRED and the preferred replica leads, or UNCLEAN and there is a leader:
   ELECTION_NOT_NEEDED;
3. PREFERRED: the preferred replica is active and in the ISR -> it leads (NONE); failing that,
   a leaderless partition gets a clean leader if it can (NONE); else
   PREFERRED_LEADER_NOT_AVAILABLE;
4. UNCLEAN: a clean leader if an ISR member is active, else the first active replica (NONE);
   else ELIGIBLE_LEADERS_NOT_AVAILABLE.

``topic_partitions`` null means every partition; then ELECTION_NOT_NEEDED partitions are left
out of the answer (each topic is still listed, as Kafka does). A partition named twice sees
the first election, as if the requests came one after the other.

Leader balance: a broker's imbalance is the share of the partitions it is the preferred
replica of that another broker (or nobody) leads. Above ``leader.imbalance.per.broker.percentage``
those partitions get a preferred election where the preferred replica is active and in the ISR,
at most :data:`MAX_ELECTIONS_PER_IMBALANCE` per run (Kafka's KRaft bound; one batch stays small).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import ElectLeadersRequest, ElectLeadersResponse
from kafka_protocol.metadata import ConfigRecord, PartitionChangeRecord
from kafka_protocol.types import BrokerId, TopicName
from kraft.controller.partitions import (
    IsActive,
    PartitionChanges,
    UncleanPolicy,
    active_brokers,
    all_partitions,
    elect_leader,
    elect_unclean_leader,
    leaderless_elections,
    unclean_change,
)
from kraft.controller.result import ControllerResult
from metadata_log.configs import BrokerConfigSources, effective_topic_value
from metadata_log.delta import replay_records
from metadata_log.image import NO_LEADER, ClusterImage, PartitionImage, TopicPartition
from metadata_log.records import MetadataRecord

UNCLEAN_LEADER_ELECTION_ENABLE: Final = "unclean.leader.election.enable"
MAX_ELECTIONS_PER_IMBALANCE: Final = 1_000

PartitionResult = ElectLeadersResponse.PartitionResult
TopicResult = ElectLeadersResponse.ReplicaElectionResult


class ElectionType(enum.IntEnum):
    """ElectLeaders ``election_type`` (Kafka's ``ElectionType``; v0 is always PREFERRED)."""

    PREFERRED = 0
    UNCLEAN = 1


# --- the topic config ---------------------------------------------------------------------------


def unclean_policy(image: ClusterImage, static_broker_config: Mapping[str, str]) -> UncleanPolicy:
    """Whether a topic allows unclean election: its override, else the cluster-wide dynamic
    default (BROKER ""), else the static broker config, else false. Per-broker dynamic values
    (BROKER "<id>") are a broker's own and do not apply to the controller's decisions."""
    sources = BrokerConfigSources.from_image(image, None, static_broker_config)
    answers: dict[str, bool] = {}

    def enabled(topic: str) -> bool:
        answer = answers.get(topic)
        if answer is None:
            value = effective_topic_value(
                UNCLEAN_LEADER_ELECTION_ENABLE, image.topic_configs(topic), sources
            )
            answer = answers[topic] = value is True
        return answer

    return enabled


def unclean_elections(image: ClusterImage, unclean: UncleanPolicy) -> list[PartitionChangeRecord]:
    """A leader for every leaderless partition whose topic allows unclean election and has an
    active replica (the periodic check; also run after a config change)."""
    return leaderless_elections(image, active_brokers(image), unclean)


def elections_after_config_change(
    image: ClusterImage, records: list[MetadataRecord], static_broker_config: Mapping[str, str]
) -> list[PartitionChangeRecord]:
    """Unclean elections that ``records`` (a config change) make possible: turning
    ``unclean.leader.election.enable`` on elects leaders for leaderless partitions at once."""
    if not any(
        isinstance(r, ConfigRecord) and r.name == UNCLEAN_LEADER_ELECTION_ENABLE for r in records
    ):
        return []
    after = replay_records(image, records)
    return unclean_elections(after, unclean_policy(after, static_broker_config))


# --- ElectLeaders -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Election(PartitionChanges):
    """One ElectLeaders request: its election type, the live brokers, and its elections so far."""

    election_type: ElectionType
    is_active: IsActive


def elect_leaders(
    request: ElectLeadersRequest, image: ClusterImage
) -> ControllerResult[ElectLeadersResponse]:
    if request.election_type not in ElectionType._value2member_map_:
        message = f"Unknown election type {request.election_type}."
        return ControllerResult([], _refused(request, ErrorCode.INVALID_REQUEST, message))
    state = _Election(image, ElectionType(request.election_type), active_brokers(image))
    results: list[TopicResult] = []
    if request.topic_partitions is None:
        for name in sorted(image.topics.by_name):
            topic = image.topics.by_name[name]
            outcomes = [(p, _elect_one(state, name, p)) for p in sorted(topic.partitions)]
            partitions = [
                _result(p, error, message)
                for p, (error, message) in outcomes
                if error != ErrorCode.ELECTION_NOT_NEEDED
            ]
            results.append(TopicResult(topic=TopicName(name), partition_result=partitions))
    else:
        for wanted in request.topic_partitions:
            partitions = [
                _result(p, *_elect_one(state, wanted.topic, p)) for p in wanted.partitions
            ]
            results.append(TopicResult(topic=wanted.topic, partition_result=partitions))
    response = ElectLeadersResponse(error_code=ErrorCode.NONE, replica_election_results=results)
    return ControllerResult(state.records, response)


def _refused(request: ElectLeadersRequest, error: ErrorCode, message: str) -> ElectLeadersResponse:
    """The request and every named partition answered ``error`` (Kafka's
    ``ElectLeadersRequest.getErrorResponse``; ``broker.controller_channel``'s table entry
    builds the same for the transport's errors, a layer this package does not import)."""
    return ElectLeadersResponse(
        error_code=error,
        replica_election_results=[
            TopicResult(
                topic=t.topic, partition_result=[_result(p, error, message) for p in t.partitions]
            )
            for t in request.topic_partitions or ()
        ],
    )


def _result(partition_id: int, error: ErrorCode, message: str | None) -> PartitionResult:
    return PartitionResult(partition_id=partition_id, error_code=error, error_message=message)


def _elect_one(
    state: _Election, topic_name: str, partition_id: int
) -> tuple[ErrorCode, str | None]:
    """Kafka's ``ReplicationControlManager.electLeader``: the error and its message."""
    topic = state.image.topics.get(topic_name)
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic_name}"
    partition = state.partition(topic, partition_id)
    if partition is None:
        return (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"No such partition as {topic_name}-{partition_id}",
        )
    preferred = state.election_type == ElectionType.PREFERRED
    if (preferred and partition.leader == partition.replicas[0]) or (
        not preferred and partition.has_leader
    ):
        return ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.ELECTION_NOT_NEEDED.message
    if preferred:
        record = preferred_change(topic.topic_id, partition_id, partition, state.is_active)
    else:
        record = _unclean_or_clean(topic.topic_id, partition_id, partition, state.is_active)
    if record is None:
        return _not_available(topic_name, partition_id, partition, preferred)
    state.add(topic, partition_id, partition, record)
    return ErrorCode.NONE, None


def _not_available(
    topic_name: str, partition_id: int, partition: PartitionImage, preferred: bool
) -> tuple[ErrorCode, str]:
    name = f"{topic_name}-{partition_id}"
    if preferred:
        replica = partition.replicas[0]
        why = "not in the ISR" if replica not in partition.isr else "fenced or shutting down"
        message = f"Preferred replica {replica} of {name} is {why}."
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, message
    message = f"No replica of {name} is active (replicas {list(partition.replicas)})."
    return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, message


def preferred_change(
    topic_id: uuid.UUID, partition_id: int, partition: PartitionImage, is_active: IsActive
) -> PartitionChangeRecord | None:
    """Kafka's ``electPreferredLeader``: the preferred replica if it is active and in the ISR,
    else the current leader if it may stay, else a clean leader; None when the leader would
    not change."""
    preferred = partition.replicas[0]
    if preferred in partition.isr and is_active(preferred):
        leader = preferred
    else:
        leader = elect_leader(partition, partition.isr, is_active)
    return _clean_change(topic_id, partition_id, partition, leader)


def _unclean_or_clean(
    topic_id: uuid.UUID, partition_id: int, partition: PartitionImage, is_active: IsActive
) -> PartitionChangeRecord | None:
    """Kafka's ``electAnyLeader`` with the UNCLEAN election: clean if possible."""
    leader = elect_leader(partition, partition.isr, is_active)
    if leader != NO_LEADER:
        return _clean_change(topic_id, partition_id, partition, leader)
    leader = elect_unclean_leader(partition, is_active)
    if leader == NO_LEADER:
        return None
    return unclean_change(topic_id, partition_id, partition, leader)


def _clean_change(
    topic_id: uuid.UUID, partition_id: int, partition: PartitionImage, leader: int
) -> PartitionChangeRecord | None:
    """``leader`` (from the ISR, or NO_LEADER) takes over; None when the leader would not
    change."""
    if leader == partition.leader:
        return None
    return PartitionChangeRecord(
        partition_id=partition_id, topic_id=topic_id, leader=BrokerId(leader)
    )


# --- leader balance -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerImbalance:
    """The partitions whose preferred replica is one broker: how many, and how many of them
    another broker (or nobody) leads."""

    preferred: int
    not_led: int

    @property
    def ratio(self) -> float:
        return self.not_led / self.preferred if self.preferred else 0.0


def leader_imbalance(image: ClusterImage) -> dict[int, BrokerImbalance]:
    """Per preferred replica (broker id), its imbalance."""
    counts: dict[int, list[int]] = {}
    for _, _, partition in all_partitions(image):
        preferred = partition.replicas[0]
        count = counts.setdefault(preferred, [0, 0])
        count[0] += 1
        count[1] += partition.leader != preferred
    return {b: BrokerImbalance(total, not_led) for b, (total, not_led) in sorted(counts.items())}


def rebalance_leaders(
    image: ClusterImage,
    percentage: int,
    limit: int = MAX_ELECTIONS_PER_IMBALANCE,
) -> ControllerResult[list[TopicPartition]]:
    """Preferred elections for the brokers whose imbalance is above ``percentage`` per cent;
    the response lists the partitions moved (``limit`` at most)."""
    assert limit > 0
    over = {
        b for b, imbalance in leader_imbalance(image).items() if imbalance.ratio * 100 > percentage
    }
    if not over:
        return ControllerResult([], [])
    is_active = active_brokers(image)
    records: list[MetadataRecord] = []
    moved: list[TopicPartition] = []
    for topic, partition_id, partition in all_partitions(image):
        preferred = partition.replicas[0]
        if (
            preferred not in over
            or partition.leader == preferred
            or preferred not in partition.isr
            or not is_active(preferred)
        ):
            continue
        records.append(
            PartitionChangeRecord(
                partition_id=partition_id, topic_id=topic.topic_id, leader=BrokerId(preferred)
            )
        )
        moved.append(TopicPartition(topic.name, partition_id))
        if len(moved) == limit:
            break
    return ControllerResult(records, moved)
