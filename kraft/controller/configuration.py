"""IncrementalAlterConfigs and AlterConfigs on TOPIC, BROKER and GROUP resources (Kafka's
``ConfigurationControlManager``, ``ControllerConfigurationValidator`` and the request checks of
``ControllerApis``).

A resource's new config set is computed from the image, validated as a whole against the schema
(``metadata_log.configs``) and turned into ConfigRecords (a null value deletes a key). A resource
that appears twice in one request is rejected (INVALID_REQUEST "Duplicate resource."). Topic
resources must name an existing topic; broker resources are ``""`` (the cluster default) or a
broker id, and only dynamic broker configs may be set. Group resources name any group id but
``""`` (the group need not exist) and take the keys of ``metadata_log.group_configs``, validated
within this controller's ``group.consumer.min/max.*`` settings. Each resource succeeds or fails
alone.
"""

from __future__ import annotations

import enum
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka_protocol.metadata import ConfigRecord
from kraft.controller.result import ControllerConfig, ControllerResult
from kraft.controller.topics import ApiError, validate_topic_name
from metadata_log.configs import (
    config_default,
    is_list_config,
    validate_broker_config,
    validate_topic_configs,
)
from metadata_log.group_configs import validate_group_configs
from metadata_log.image import ClusterImage, ConfigResource, ConfigResourceType, overlay
from metadata_log.records import MetadataRecord

C = TypeVar("C")
C_co = TypeVar("C_co", covariant=True)
_Answer = TypeVar("_Answer", IncrementalAlterConfigsResponse, AlterConfigsResponse)


class OpType(enum.IntEnum):
    """IncrementalAlterConfigs ``config_operation`` (Kafka's ``AlterConfigOp.OpType``)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


_Changes = dict[str, str | None]  # key -> new value (None: delete)


def check_resource(resource: ConfigResource, image: ClusterImage) -> ApiError | None:
    """Whether the controller can alter the configs of ``resource`` at all."""
    if resource.resource_type not in ConfigResourceType._value2member_map_:
        message = f"Unknown resource type {resource.resource_type}."
        return ApiError(ErrorCode.UNSUPPORTED_VERSION, message)
    if resource.resource_type == ConfigResourceType.TOPIC:
        if validate_topic_name(resource.name) is not None:
            return ApiError(ErrorCode.INVALID_REQUEST, "Illegal topic name.")
        if resource.name not in image.topics.by_name:
            message = f"The topic '{resource.name}' does not exist."
            return ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message)
        return None
    if resource.resource_type == ConfigResourceType.BROKER:
        return _check_broker_name(resource.name)
    if resource.resource_type == ConfigResourceType.GROUP:
        if not resource.name:
            return ApiError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
        return None
    name = ConfigResourceType(resource.resource_type).name
    return ApiError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {name}.")


def _check_broker_name(name: str) -> ApiError | None:
    """``""`` is the cluster-wide default; anything else must be a broker id (an int32)."""
    if not name:
        return None
    if re.fullmatch(r"-[0-9]+", name):
        message = "Illegal negative broker ID in BROKER resource."
        return ApiError(ErrorCode.INVALID_REQUEST, message)
    if not re.fullmatch(r"[0-9]+", name) or int(name) > 2**31 - 1:
        message = "Illegal non-integral BROKER resource type name."
        return ApiError(ErrorCode.INVALID_REQUEST, message)
    return None


def _validate(
    resource: ConfigResource,
    current: Mapping[str, str],
    changes: _Changes,
    config: ControllerConfig,
) -> ApiError | None:
    new = overlay(current, changes)
    if resource.resource_type == ConfigResourceType.TOPIC:
        invalid = validate_topic_configs(new)
    elif resource.resource_type == ConfigResourceType.GROUP:
        invalid = validate_group_configs(new, config.static_broker_config)
    else:
        set_keys = (k for k, v in changes.items() if v is not None)
        invalid = next((e for k in set_keys if (e := validate_broker_config(k, new[k]))), None)
    if invalid is not None:
        return ApiError(ErrorCode.INVALID_CONFIG, invalid)
    if config.alter_config_policy is not None:
        violation = config.alter_config_policy(resource, new)
        if violation is not None:
            return ApiError(ErrorCode.POLICY_VIOLATION, violation)
    return None


def _records(
    resource: ConfigResource, current: Mapping[str, str], changes: _Changes
) -> list[MetadataRecord]:
    # Broker configs are written even when unchanged, as Kafka does, so that brokers re-apply them.
    always = resource.resource_type == ConfigResourceType.BROKER
    return [
        ConfigRecord(
            resource_type=resource.resource_type,
            resource_name=resource.name,
            name=key,
            value=value,
        )
        for key, value in changes.items()
        if always or current.get(key) != value
    ]


# --- both APIs: each resource succeeds or fails alone ----------------------------------------


class _AlterResource(Protocol[C_co]):
    """A resource of either config API's request, with its config items."""

    @property
    def resource_type(self) -> int: ...

    @property
    def resource_name(self) -> str: ...

    @property
    def configs(self) -> Sequence[C_co]: ...


class _AlterRequest(Protocol[C_co]):
    @property
    def resources(self) -> Sequence[_AlterResource[C_co]]: ...

    @property
    def validate_only(self) -> bool: ...


# How one API turns a resource's items into changes, given the resource's current configs.
_ChangesOf = Callable[[ConfigResource, Sequence[C], Mapping[str, str]], _Changes | ApiError]


def _alter_each(
    kind: type[_Answer],
    request: _AlterRequest[C],
    image: ClusterImage,
    config: ControllerConfig,
    changes_of: _ChangesOf[C],
) -> ControllerResult[_Answer]:
    """IncrementalAlterConfigs and AlterConfigs alike: each resource once, in request order; a
    resource named twice in one request is refused as a whole (Kafka's INVALID_REQUEST
    "Duplicate resource."); ``validate_only`` answers without records."""
    named = [
        (ConfigResource(r.resource_type, r.resource_name), r.configs) for r in request.resources
    ]
    counts = Counter(resource for resource, _ in named)
    answered: set[ConfigResource] = set()
    records: list[MetadataRecord] = []
    entries = []
    for resource, items in named:
        if resource in answered:
            continue
        answered.add(resource)
        if counts[resource] > 1:
            error = ApiError(ErrorCode.INVALID_REQUEST, "Duplicate resource.")
        else:
            error = _alter_one(resource, items, image, config, records, changes_of)
        entries.append(
            kind.AlterConfigsResourceResponse(
                error_code=error.code,
                error_message=error.message,
                resource_type=resource.resource_type,
                resource_name=resource.name,
            )
        )
    return ControllerResult([] if request.validate_only else records, kind(responses=entries))


def _alter_one(
    resource: ConfigResource,
    items: Sequence[C],
    image: ClusterImage,
    config: ControllerConfig,
    records: list[MetadataRecord],
    changes_of: _ChangesOf[C],
) -> ApiError:
    """One resource: checked, its changes computed, the new config set validated as a whole,
    then its ConfigRecords added to ``records``."""
    error = check_resource(resource, image)
    if error is not None:
        return error
    current = image.configs.get(resource, {})
    changes = changes_of(resource, items, current)
    if isinstance(changes, ApiError):
        return changes
    error = _validate(resource, current, changes, config)
    if error is not None:
        return error
    records.extend(_records(resource, current, changes))
    return ApiError(ErrorCode.NONE)


# --- IncrementalAlterConfigs ------------------------------------------------------------------


def _incremental(
    resource: ConfigResource,
    ops: Sequence[IncrementalAlterConfigsRequest.AlterableConfig],
    current: Mapping[str, str],
) -> _Changes | ApiError:
    """IncrementalAlterConfigs: each named key is set, deleted, appended to or subtracted from."""
    if len({op.name for op in ops}) != len(ops):
        return ApiError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    changes: _Changes = {}
    for op in ops:
        value = _apply_op(resource, op, current.get(op.name))
        if isinstance(value, ApiError):
            return value
        changes[op.name] = value
    return changes


def _apply_op(
    resource: ConfigResource,
    op: IncrementalAlterConfigsRequest.AlterableConfig,
    current: str | None,
) -> str | ApiError | None:
    if op.config_operation == OpType.SET:
        return op.value
    if op.config_operation == OpType.DELETE:
        return None
    if op.config_operation not in (OpType.APPEND, OpType.SUBTRACT):
        return ApiError(ErrorCode.INVALID_REQUEST, f"Unknown operation type {op.config_operation}.")
    kind = OpType(op.config_operation).name
    if not is_list_config(resource.resource_type, op.name):
        message = f"Can't {kind} to key {op.name} because its type is not LIST."
        return ApiError(ErrorCode.INVALID_CONFIG, message)
    if op.value is None:
        return ApiError(ErrorCode.INVALID_REQUEST, f"Null value not supported for {kind}.")
    base = current if current is not None else config_default(resource.resource_type, op.name)
    parts = [p for p in (base or "").split(",") if p]
    for item in op.value.split(","):
        if op.config_operation == OpType.APPEND and item not in parts:
            parts.append(item)
        elif op.config_operation == OpType.SUBTRACT and item in parts:
            parts.remove(item)
    return ",".join(parts)


# --- AlterConfigs (legacy: replaces the whole config set) -------------------------------------


def _replacement(
    resource: ConfigResource,
    configs: Sequence[AlterConfigsRequest.AlterableConfig],
    current: Mapping[str, str],
) -> _Changes | ApiError:
    """AlterConfigs: the given set replaces the whole; a key it does not name is deleted."""
    nulls = [c.name for c in configs if c.value is None]
    if nulls:
        return ApiError(
            ErrorCode.INVALID_REQUEST, f"Null value not supported for: {','.join(nulls)}"
        )
    changes: _Changes = {c.name: c.value for c in configs}
    for key in current:
        changes.setdefault(key, None)
    return changes


# --- the two APIs: their answer type and how their items become changes ----------------------


def _config_api(
    kind: type[_Answer], changes_of: _ChangesOf[C]
) -> Callable[[ControllerConfig, _AlterRequest[C], ClusterImage], ControllerResult[_Answer]]:
    def handle(
        config: ControllerConfig, request: _AlterRequest[C], image: ClusterImage
    ) -> ControllerResult[_Answer]:
        return _alter_each(kind, request, image, config, changes_of)

    return handle


incremental_alter_configs = _config_api(IncrementalAlterConfigsResponse, _incremental)
alter_configs = _config_api(AlterConfigsResponse, _replacement)
