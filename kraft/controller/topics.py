"""CreateTopics, CreatePartitions and DeleteTopics (Kafka's ``ReplicationControlManager`` and the
request checks of ``ControllerApis``).

Every command reads the image and returns records plus a response with one result per topic;
nothing changes until the records are replayed. Errors are per topic, with Kafka's codes and
messages. A request may create several topics: each later topic sees the earlier ones of the
same request (names, topic ids, the partition budget), so one request never yields conflicting
records. With ``validate_only`` the response is computed the same way and no record is returned.
"""

from __future__ import annotations

import random
import re
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka_protocol.metadata import ConfigRecord, RemoveTopicRecord, TopicRecord
from kafka_protocol.types import TopicName
from kraft.controller.partitions import active_brokers, new_partition
from kraft.controller.placement import (
    InvalidReplicationFactorError,
    UsableBroker,
    place_replicas,
)
from kraft.controller.result import (
    ZERO_UUID,
    ControllerConfig,
    ControllerResult,
    CreateTopicPolicyRequest,
    random_topic_id,
)
from metadata_log.configs import BrokerConfigSources, effective_topic_config, validate_topic_configs
from metadata_log.image import ClusterImage, ConfigResourceType, PartitionImage, TopicImage
from metadata_log.records import MetadataRecord

LEGAL_TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME_LENGTH: Final = 249
CLUSTER_METADATA_TOPIC: Final = "__cluster_metadata"

CreatableTopic = CreateTopicsRequest.CreatableTopic
CreatableTopicResult = CreateTopicsResponse.CreatableTopicResult


class ApiError(NamedTuple):
    code: ErrorCode
    message: str | None = None


@dataclass(slots=True)
class TopicsContext:
    """What topic commands need besides the request and the image."""

    config: ControllerConfig
    rng: random.Random
    new_topic_id: Callable[[Callable[[uuid.UUID], bool]], uuid.UUID] | None = None

    def topic_id(self, taken: Callable[[uuid.UUID], bool]) -> uuid.UUID:
        if self.new_topic_id is not None:
            return self.new_topic_id(taken)
        return random_topic_id(self.rng, taken)


def validate_topic_name(name: str) -> str | None:
    """Kafka's ``Topic.validate`` message, or None for a legal name."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} "
            f"characters, Topic name: {name}"
        )
    if not LEGAL_TOPIC_NAME.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


def _usable_brokers(image: ClusterImage) -> list[UsableBroker]:
    return [
        UsableBroker(b.id, b.rack, b.fenced)
        for b in image.brokers.values()
        if not b.in_controlled_shutdown
    ]


# --- CreateTopics -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Creation:
    """State shared by the topics of one CreateTopics request."""

    image: ClusterImage
    ctx: TopicsContext
    budget: int
    records: list[MetadataRecord] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # collision-normalized -> name
    ids: set[uuid.UUID] = field(default_factory=set)

    def id_taken(self, topic_id: uuid.UUID) -> bool:
        return topic_id in self.ids or topic_id in self.image.topics.by_id


def create_topics(
    ctx: TopicsContext, request: CreateTopicsRequest, image: ClusterImage
) -> ControllerResult[CreateTopicsResponse]:
    state = _Creation(image, ctx, ctx.config.max_new_partitions_per_request)
    for existing in image.topics.by_name:
        state.names.setdefault(_normalized(existing), existing)
    counts = Counter(t.name for t in request.topics)
    results: dict[str, CreatableTopicResult] = {}
    for topic in request.topics:
        if topic.name in results:
            continue
        error: ApiError | None = ApiError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
        if counts[topic.name] == 1:
            error = _check_new_name(topic.name, state)
        if error is None:
            outcome = _create_topic(topic, state)
            if isinstance(outcome, CreatableTopicResult):
                results[topic.name] = outcome
                continue
            error = outcome
        results[topic.name] = _failed_topic(topic.name, error)
    response = CreateTopicsResponse(topics=list(results.values()))
    return ControllerResult([] if request.validate_only else state.records, response)


def _normalized(name: str) -> str:
    return name.replace(".", "_")  # Kafka's Topic.unifyCollisionChars


def _check_new_name(name: str, state: _Creation) -> ApiError | None:
    if name == CLUSTER_METADATA_TOPIC:
        message = f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited."
        return ApiError(ErrorCode.INVALID_REQUEST, message)
    invalid = validate_topic_name(name)
    if invalid is not None:
        return ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, invalid)
    if name in state.image.topics.by_name:
        return ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    existing = state.names.get(_normalized(name))
    if existing is not None:
        message = f"Topic '{name}' collides with existing topic: {existing}"
        return ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, message)
    return None


def _failed_topic(name: str, error: ApiError) -> CreatableTopicResult:
    return CreatableTopicResult(
        name=TopicName(name), error_code=error.code, error_message=error.message
    )


def _create_topic(topic: CreatableTopic, state: _Creation) -> CreatableTopicResult | ApiError:
    nulls = [c.name for c in topic.configs if c.value is None]
    if nulls:
        message = f"Null value not supported for topic configs: {','.join(nulls)}"
        return ApiError(ErrorCode.INVALID_CONFIG, message)
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    partitions = _new_partitions(topic, state)
    if isinstance(partitions, ApiError):
        return partitions
    policy_error = _check_create_policy(topic, configs, partitions, state.ctx.config)
    if policy_error is not None:
        return policy_error
    invalid = validate_topic_configs(configs)
    if invalid is not None:
        return ApiError(ErrorCode.INVALID_CONFIG, invalid)
    topic_id = state.ctx.topic_id(state.id_taken)
    state.ids.add(topic_id)
    state.names[_normalized(topic.name)] = topic.name
    state.budget -= len(partitions)
    _append_topic_records(state.records, topic.name, topic_id, partitions, configs)
    return _created_topic(topic.name, topic_id, partitions, configs, state)


def _new_partitions(
    topic: CreatableTopic, state: _Creation
) -> dict[int, PartitionImage] | ApiError:
    if topic.assignments:
        if topic.replication_factor != -1:
            message = (
                "A manual partition assignment was specified, but replication factor was not "
                "set to -1."
            )
            return ApiError(ErrorCode.INVALID_REQUEST, message)
        if topic.num_partitions != -1:
            message = (
                "A manual partition assignment was specified, but numPartitions was not set to -1."
            )
            return ApiError(ErrorCode.INVALID_REQUEST, message)
        manual = {a.partition_index: [int(b) for b in a.broker_ids] for a in topic.assignments}
        if len(manual) != len(topic.assignments):
            index = Counter(a.partition_index for a in topic.assignments).most_common(1)[0][0]
            message = f"Found multiple manual partition assignments for partition {index}"
            return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)
        return _manual_partitions(manual, None, 0, state)
    return _placed_partitions(topic, state)


def _placed_partitions(
    topic: CreatableTopic, state: _Creation
) -> dict[int, PartitionImage] | ApiError:
    config = state.ctx.config
    if topic.replication_factor < -1 or topic.replication_factor == 0:
        message = "Replication factor must be larger than 0, or -1 to use the default value."
        return ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, message)
    if topic.num_partitions < -1 or topic.num_partitions == 0:
        message = "Number of partitions was set to an invalid non-positive value."
        return ApiError(ErrorCode.INVALID_PARTITIONS, message)
    count = config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    rf = (
        config.default_replication_factor
        if topic.replication_factor == -1
        else topic.replication_factor
    )
    over = _over_budget(count, state.budget)
    if over is not None:
        return over
    placed = _place(state.image, 0, count, rf, state.ctx.rng)
    if isinstance(placed, ApiError):
        return ApiError(
            placed.code, f"Unable to replicate the partition {rf} time(s): {placed.message}"
        )
    return placed


def _over_budget(count: int, budget: int) -> ApiError | None:
    if count <= budget:
        return None
    message = f"Creating {count} partition(s) would exceed the limit of new partitions per request."
    return ApiError(ErrorCode.INVALID_PARTITIONS, message)


def _place(
    image: ClusterImage, start: int, count: int, rf: int, rng: random.Random
) -> dict[int, PartitionImage] | ApiError:
    try:
        assignments = place_replicas(_usable_brokers(image), count, rf, rng)
    except InvalidReplicationFactorError as exc:
        return ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc))
    is_active = active_brokers(image)
    out: dict[int, PartitionImage] = {}
    for i, replicas in enumerate(assignments):
        partition = new_partition(replicas, is_active)
        if partition is None:
            message = "All brokers are currently fenced or in controlled shutdown."
            return ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, message)
        out[start + i] = partition
    return out


def _manual_partitions(
    manual: dict[int, list[int]], rf: int | None, start: int, state: _Creation
) -> dict[int, PartitionImage] | ApiError:
    over = _over_budget(len(manual), state.budget)
    if over is not None:
        return over
    is_active = active_brokers(state.image)
    out: dict[int, PartitionImage] = {}
    for index in sorted(manual):
        invalid = _check_assignment(manual[index], rf, state.image)
        if invalid is not None:
            return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, invalid)
        rf = len(manual[index])
        partition = new_partition(manual[index], is_active)
        if partition is None:
            message = (
                "All brokers specified in the manual partition assignment for partition "
                f"{index} are fenced or in controlled shutdown."
            )
            return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)
        out[index] = partition
    if sorted(out) != list(range(start, start + len(out))):
        message = "partitions should be a consecutive 0-based integer sequence"
        return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)
    return out


def _check_assignment(replicas: list[int], rf: int | None, image: ClusterImage) -> str | None:
    """Kafka's ``validateManualPartitionAssignment``."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for broker in sorted(replicas):
        if broker not in image.brokers:
            return (
                f"The manual partition assignment includes broker {broker}, but no such "
                "broker is registered."
            )
        if broker == previous:
            return f"The manual partition assignment includes the broker {broker} more than once."
        previous = broker
    if rf is not None and len(replicas) != rf:
        return (
            f"The manual partition assignment includes a partition with {len(replicas)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{rf} replica(s)."
        )
    return None


def _check_create_policy(
    topic: CreatableTopic,
    configs: dict[str, str],
    partitions: dict[int, PartitionImage],
    config: ControllerConfig,
) -> ApiError | None:
    if config.create_topic_policy is None:
        return None
    manual = bool(topic.assignments)
    request = CreateTopicPolicyRequest(
        topic=topic.name,
        num_partitions=None if manual else len(partitions),
        replication_factor=None if manual else len(partitions[0].replicas),
        assignments={i: list(p.replicas) for i, p in partitions.items()} if manual else None,
        configs=dict(configs),
    )
    violation = config.create_topic_policy(request)
    return None if violation is None else ApiError(ErrorCode.POLICY_VIOLATION, violation)


def _append_topic_records(
    records: list[MetadataRecord],
    name: str,
    topic_id: uuid.UUID,
    partitions: dict[int, PartitionImage],
    configs: dict[str, str],
) -> None:
    records.append(TopicRecord(name=TopicName(name), topic_id=topic_id))
    for index in sorted(partitions):
        records.append(partitions[index].to_record(topic_id, index))
    for key in sorted(configs):
        records.append(
            ConfigRecord(
                resource_type=ConfigResourceType.TOPIC,
                resource_name=name,
                name=key,
                value=configs[key],
            )
        )


def _created_topic(
    name: str,
    topic_id: uuid.UUID,
    partitions: dict[int, PartitionImage],
    configs: dict[str, str],
    state: _Creation,
) -> CreatableTopicResult:
    sources = BrokerConfigSources.from_image(
        state.image, None, state.ctx.config.static_broker_config
    )
    entries = effective_topic_config(configs, sources)
    return CreatableTopicResult(
        name=TopicName(name),
        topic_id=topic_id,
        error_code=ErrorCode.NONE,
        error_message=None,
        num_partitions=len(partitions),
        replication_factor=len(partitions[min(partitions)].replicas),
        configs=[
            CreateTopicsResponse.CreatableTopicConfigs(
                name=e.name,
                value=None if e.sensitive else e.value,
                read_only=e.read_only,
                config_source=e.source,
                is_sensitive=e.sensitive,
            )
            for e in entries.values()
        ],
    )


# --- CreatePartitions -------------------------------------------------------------------------


def create_partitions(
    ctx: TopicsContext, request: CreatePartitionsRequest, image: ClusterImage
) -> ControllerResult[CreatePartitionsResponse]:
    state = _Creation(image, ctx, ctx.config.max_new_partitions_per_request)
    counts = Counter(t.name for t in request.topics)
    results: dict[str, CreatePartitionsResponse.CreatePartitionsTopicResult] = {}
    for topic in request.topics:
        if topic.name in results:
            continue
        if counts[topic.name] > 1:
            error = ApiError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
        else:
            error = _add_partitions(topic, state)
        results[topic.name] = CreatePartitionsResponse.CreatePartitionsTopicResult(
            name=topic.name, error_code=error.code, error_message=error.message
        )
    response = CreatePartitionsResponse(results=list(results.values()))
    return ControllerResult([] if request.validate_only else state.records, response)


def _add_partitions(
    topic: CreatePartitionsRequest.CreatePartitionsTopic, state: _Creation
) -> ApiError:
    existing = state.image.topics.get(topic.name)
    if existing is None:
        return ApiError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic.name}' does not exist."
        )
    current = len(existing.partitions)
    if topic.count == current:
        return ApiError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if topic.count < current:
        message = (
            f"The topic {topic.name} currently has {current} partition(s); {topic.count} would "
            "not be an increase."
        )
        return ApiError(ErrorCode.INVALID_PARTITIONS, message)
    partitions = _more_partitions(topic, existing, state)
    if isinstance(partitions, ApiError):
        return partitions
    state.budget -= len(partitions)
    for index in sorted(partitions):
        state.records.append(partitions[index].to_record(existing.topic_id, index))
    return ApiError(ErrorCode.NONE)


def _more_partitions(
    topic: CreatePartitionsRequest.CreatePartitionsTopic, existing: TopicImage, state: _Creation
) -> dict[int, PartitionImage] | ApiError:
    current = len(existing.partitions)
    additional = topic.count - current
    rf = len(existing.partitions[min(existing.partitions)].replicas)
    # The wire's "no assignment" is null; an empty list can never be valid here, so it is
    # read as null too (the generated dataclass defaults to an empty list).
    if topic.assignments:
        if len(topic.assignments) != additional:
            message = (
                f"Attempted to add {additional} additional partition(s), but only "
                f"{len(topic.assignments)} assignment(s) were specified."
            )
            return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)
        manual = {
            current + i: [int(b) for b in a.broker_ids] for i, a in enumerate(topic.assignments)
        }
        return _manual_partitions(manual, rf, current, state)
    over = _over_budget(additional, state.budget)
    if over is not None:
        return over
    return _place(state.image, current, additional, rf, state.ctx.rng)


# --- DeleteTopics -----------------------------------------------------------------------------

DeletableTopicResult = DeleteTopicsResponse.DeletableTopicResult


@dataclass(slots=True)
class _Deletion:
    responses: list[DeletableTopicResult] = field(default_factory=list)
    names: dict[str, None] = field(default_factory=dict)  # ordered sets
    duplicate_names: dict[str, None] = field(default_factory=dict)
    ids: dict[uuid.UUID, None] = field(default_factory=dict)
    duplicate_ids: dict[uuid.UUID, None] = field(default_factory=dict)

    def respond(self, name: str | None, topic_id: uuid.UUID, error: ApiError) -> None:
        self.responses.append(
            DeletableTopicResult(
                name=None if name is None else TopicName(name),
                topic_id=topic_id,
                error_code=error.code,
                error_message=error.message,
            )
        )

    def add_name(self, name: str) -> None:
        if name in self.names or name in self.duplicate_names:
            self.names.pop(name, None)
            self.duplicate_names[name] = None
        else:
            self.names[name] = None

    def add_id(self, topic_id: uuid.UUID) -> None:
        if topic_id in self.ids or topic_id in self.duplicate_ids:
            self.ids.pop(topic_id, None)
            self.duplicate_ids[topic_id] = None
        else:
            self.ids[topic_id] = None


def delete_topics(
    ctx: TopicsContext, request: DeleteTopicsRequest, image: ClusterImage
) -> ControllerResult[DeleteTopicsResponse]:
    state = _collect_deletions(request)
    if not ctx.config.delete_topic_enable:
        for name in state.names:
            state.respond(name, ZERO_UUID, ApiError(ErrorCode.TOPIC_DELETION_DISABLED))
        for topic_id in state.ids:
            state.respond(None, topic_id, ApiError(ErrorCode.TOPIC_DELETION_DISABLED))
        return ControllerResult([], DeleteTopicsResponse(responses=state.responses))
    to_delete = _resolve_deletions(state, image)
    records: list[MetadataRecord] = []
    for topic_id, name in to_delete.items():
        records.append(RemoveTopicRecord(topic_id=topic_id))
        state.respond(name, topic_id, ApiError(ErrorCode.NONE))
    return ControllerResult(records, DeleteTopicsResponse(responses=state.responses))


def _collect_deletions(request: DeleteTopicsRequest) -> _Deletion:
    """Sort the request into names and ids, answering malformed entries (``ControllerApis``)."""
    state = _Deletion()
    for name in request.topic_names:
        state.add_name(name)
    for topic in request.topics:
        if topic.name is None and topic.topic_id == ZERO_UUID:
            message = "Neither topic name nor id were specified."
            state.respond(None, ZERO_UUID, ApiError(ErrorCode.INVALID_REQUEST, message))
        elif topic.name is None:
            state.add_id(topic.topic_id)
        elif topic.topic_id == ZERO_UUID:
            state.add_name(topic.name)
        else:
            message = "You may not specify both topic name and topic id."
            state.respond(topic.name, topic.topic_id, ApiError(ErrorCode.INVALID_REQUEST, message))
    for duplicate in state.duplicate_names:
        error = ApiError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
        state.respond(duplicate, ZERO_UUID, error)
    for topic_id in state.duplicate_ids:
        state.respond(None, topic_id, ApiError(ErrorCode.INVALID_REQUEST, "Duplicate topic id."))
    return state


def _resolve_deletions(state: _Deletion, image: ClusterImage) -> dict[uuid.UUID, str]:
    to_delete: dict[uuid.UUID, str] = {}
    for topic_id in state.ids:
        topic = image.topics.by_id.get(topic_id)
        if topic is None:
            state.respond(
                None,
                topic_id,
                ApiError(ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_ID.message),
            )
        else:
            to_delete[topic_id] = topic.name
    for name in state.names:
        named = image.topics.get(name)
        if named is None:
            error = ApiError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.message
            )
            state.respond(name, ZERO_UUID, error)
        elif named.topic_id in to_delete or named.topic_id in state.duplicate_ids:
            to_delete.pop(named.topic_id, None)
            message = "The provided topic name maps to an ID that was already supplied."
            state.respond(name, named.topic_id, ApiError(ErrorCode.INVALID_REQUEST, message))
        else:
            to_delete[named.topic_id] = name
    return to_delete
