"""IncrementalAlterConfigs and AlterConfigs on TOPIC and BROKER resources (Kafka's
``ConfigurationControlManager`` and the request checks of ``ControllerApis``).

A resource's new config set is computed from the image, validated as a whole against the schema
(``metadata_log.configs``) and turned into ConfigRecords (a null value deletes a key). A resource
that appears twice in one request is rejected (INVALID_REQUEST "Duplicate resource."). Topic
resources must name an existing topic; broker resources are ``""`` (the cluster default) or a
broker id, and only dynamic broker configs may be set. Each resource succeeds or fails alone.
"""

from __future__ import annotations

import enum
import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TypeVar

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
from metadata_log.image import ClusterImage, ConfigResource, ConfigResourceType
from metadata_log.records import MetadataRecord

C = TypeVar("C")


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


def _new_configs(current: Mapping[str, str], changes: _Changes) -> dict[str, str]:
    out = dict(current)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _validate(
    resource: ConfigResource,
    current: Mapping[str, str],
    changes: _Changes,
    config: ControllerConfig,
) -> ApiError | None:
    new = _new_configs(current, changes)
    if resource.resource_type == ConfigResourceType.TOPIC:
        invalid = validate_topic_configs(new)
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


# --- IncrementalAlterConfigs ------------------------------------------------------------------


def incremental_alter_configs(
    config: ControllerConfig, request: IncrementalAlterConfigsRequest, image: ClusterImage
) -> ControllerResult[IncrementalAlterConfigsResponse]:
    records: list[MetadataRecord] = []
    outcomes = _each_resource(
        [(ConfigResource(r.resource_type, r.resource_name), r.configs) for r in request.resources],
        lambda resource, ops: _alter_incrementally(resource, ops, image, config, records),
    )
    response = IncrementalAlterConfigsResponse(
        responses=[
            IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=error.code,
                error_message=error.message,
                resource_type=resource.resource_type,
                resource_name=resource.name,
            )
            for resource, error in outcomes
        ]
    )
    return ControllerResult([] if request.validate_only else records, response)


def _each_resource(
    resources: list[tuple[ConfigResource, C]],
    alter: Callable[[ConfigResource, C], ApiError],
) -> list[tuple[ConfigResource, ApiError]]:
    """Apply ``alter`` to each resource once, in request order; a resource named twice in one
    request is refused as a whole (Kafka's INVALID_REQUEST "Duplicate resource.")."""
    counts = Counter(resource for resource, _ in resources)
    answered: set[ConfigResource] = set()
    outcomes = []
    for resource, configs in resources:
        if resource in answered:
            continue
        answered.add(resource)
        if counts[resource] > 1:
            outcomes.append((resource, ApiError(ErrorCode.INVALID_REQUEST, "Duplicate resource.")))
        else:
            outcomes.append((resource, alter(resource, configs)))
    return outcomes


def _alter_incrementally(
    resource: ConfigResource,
    ops: list[IncrementalAlterConfigsRequest.AlterableConfig],
    image: ClusterImage,
    config: ControllerConfig,
    records: list[MetadataRecord],
) -> ApiError:
    error = check_resource(resource, image)
    if error is not None:
        return error
    if len({op.name for op in ops}) != len(ops):
        return ApiError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    current = image.configs.get(resource, {})
    changes: _Changes = {}
    for op in ops:
        value = _apply_op(resource, op, current.get(op.name))
        if isinstance(value, ApiError):
            return value
        changes[op.name] = value
    error = _validate(resource, current, changes, config)
    if error is not None:
        return error
    records.extend(_records(resource, current, changes))
    return ApiError(ErrorCode.NONE)


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


def alter_configs(
    config: ControllerConfig, request: AlterConfigsRequest, image: ClusterImage
) -> ControllerResult[AlterConfigsResponse]:
    records: list[MetadataRecord] = []
    outcomes = _each_resource(
        [(ConfigResource(r.resource_type, r.resource_name), r.configs) for r in request.resources],
        lambda resource, configs: _replace_configs(resource, configs, image, config, records),
    )
    response = AlterConfigsResponse(
        responses=[
            AlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=error.code,
                error_message=error.message,
                resource_type=resource.resource_type,
                resource_name=resource.name,
            )
            for resource, error in outcomes
        ]
    )
    return ControllerResult([] if request.validate_only else records, response)


def _replace_configs(
    resource: ConfigResource,
    configs: list[AlterConfigsRequest.AlterableConfig],
    image: ClusterImage,
    config: ControllerConfig,
    records: list[MetadataRecord],
) -> ApiError:
    error = check_resource(resource, image)
    if error is not None:
        return error
    nulls = [c.name for c in configs if c.value is None]
    if nulls:
        return ApiError(
            ErrorCode.INVALID_REQUEST, f"Null value not supported for: {','.join(nulls)}"
        )
    current = image.configs.get(resource, {})
    changes: _Changes = {c.name: c.value for c in configs}
    for key in current:
        changes.setdefault(key, None)
    error = _validate(resource, current, changes, config)
    if error is not None:
        return error
    records.extend(_records(resource, current, changes))
    return ApiError(ErrorCode.NONE)
