"""The topic routes of the REST admin API: list, describe, create and delete topics, alter their
configs and add partitions.

Each write is one controller RPC; the handler then waits (bounded) for this broker's image to
show the change, so that it can answer with the new state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import (
    CreatePartitionsRequest,
    DeleteTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka_protocol.types import TopicName
from kraft.rest.common import (
    DEFAULT_FROM_CONTROLLER,
    IMAGE_WAIT_S,
    ApiError,
    bad_request,
    broker_of,
    create_topic_at_controller,
    image_settles,
    json_object,
    kafka_error,
    node_of,
    only_result,
    topic_of,
)
from metadata_log.configs import effective_topic_config
from metadata_log.image import ClusterImage, ConfigResourceType, TopicImage

if TYPE_CHECKING:
    from broker.broker import Broker

# Controller API versions the REST writes use (the newest each handler serves); CreateTopics'
# is kraft.rest.common.CREATE_TOPICS_VERSION.
DELETE_TOPICS_VERSION: Final = 6
CREATE_PARTITIONS_VERSION: Final = 3
INCREMENTAL_ALTER_CONFIGS_VERSION: Final = 1
CONFIG_SET, CONFIG_DELETE = 0, 1  # IncrementalAlterConfigs operations


def topic_summary(topic: TopicImage) -> dict[str, Any]:
    first = topic.partitions.get(0)
    return {
        "name": topic.name,
        "topic_id": str(topic.topic_id),
        "partitions": len(topic.partitions),
        "replication_factor": len(first.replicas) if first else 0,
    }


def topic_json(broker: Broker, topic: TopicImage, *, all_configs: bool = False) -> dict[str, Any]:
    overrides = broker.image.topic_configs(topic.name)
    if all_configs:
        entries = effective_topic_config(overrides, broker.config.broker_defaults)
        configs = {k: e.value for k, e in entries.items()}
    else:
        configs = dict(sorted(overrides.items()))
    partitions = []
    for index in sorted(topic.partitions):
        p = topic.partitions[index]
        local = broker.replicas.get(topic.name, index)
        partitions.append(
            {
                "partition": index,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "log_start_offset": local.log_start_offset if local else None,
                "high_watermark": local.high_watermark if local else None,
                "log_end_offset": local.log_end_offset if local else None,
            }
        )
    return {**topic_summary(topic), "configs": configs, "partitions": partitions}


async def list_topics(request: web.Request) -> web.Response:
    """Served by controllers too: it needs only the image."""
    image = node_of(request).image
    if image is None:
        raise ApiError(503, "NOT_READY", "the node has no metadata yet")
    topics = image.topics.by_name
    return web.json_response([topic_summary(topics[name]) for name in sorted(topics)])


async def get_topic(request: web.Request) -> web.Response:
    broker = broker_of(request)
    topic = topic_of(broker, request.match_info["name"])
    all_configs = request.query.get("all_configs", "false").lower() in ("true", "1", "yes")
    return web.json_response(topic_json(broker, topic, all_configs=all_configs))


async def create_topic(request: web.Request) -> web.Response:
    broker = broker_of(request)
    body = (await json_object(request)).only(
        "name", "partitions", "replication_factor", "configs", "validate_only"
    )
    name = body.get_str("name")
    # -1: the controller's num.partitions / default.replication.factor (CreateTopics v4+)
    partitions = body.get_int("partitions", DEFAULT_FROM_CONTROLLER, minimum=1)
    rf = body.get_int("replication_factor", DEFAULT_FROM_CONTROLLER, minimum=1)
    configs = body.config_map("configs")
    validate_only = body.get_bool("validate_only", False)
    result = await create_topic_at_controller(broker, name, partitions, rf, configs, validate_only)
    if validate_only:
        summary = {
            "name": name,
            "partitions": result.num_partitions,
            "replication_factor": result.replication_factor,
            "validate_only": True,
        }
        return web.json_response(summary)
    if await image_settles(broker, lambda image: image.topics.get(name) is not None):
        return web.json_response(topic_json(broker, topic_of(broker, name)), status=201)
    summary = {
        "name": name,
        "topic_id": str(result.topic_id),
        "configs": configs,
        "partitions": [],
        "replication_factor": result.replication_factor,
    }
    return web.json_response(summary, status=201)


async def delete_topic(request: web.Request) -> web.Response:
    broker = broker_of(request)
    name = request.match_info["name"]
    topic = topic_of(broker, name)
    state = DeleteTopicsRequest.DeleteTopicState(name=TopicName(name))
    response = await broker.controller.delete_topics(
        DeleteTopicsRequest(topics=[state], timeout_ms=int(IMAGE_WAIT_S * 1000)),
        DELETE_TOPICS_VERSION,
    )
    result = only_result(response.responses, name)
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message)
    if await image_settles(broker, lambda image: image.topics.by_id.get(topic.topic_id) is None):
        return web.Response(status=204)
    return web.json_response({"name": name, "deleted": True}, status=202)


async def alter_topic_configs(request: web.Request) -> web.Response:
    broker = broker_of(request)
    name = request.match_info["name"]
    topic_of(broker, name)
    body = (await json_object(request)).only("set", "delete")
    to_set, to_delete = body.config_map("set"), body.str_list("delete")
    if not to_set and not to_delete:
        raise bad_request('give configs to change: {"set": {...}} and/or {"delete": [...]}')
    both = sorted(set(to_set) & set(to_delete))
    if both:
        raise bad_request(f"config {both[0]!r} is both set and deleted")
    ops = [_alterable(k, CONFIG_SET, v) for k, v in to_set.items()]
    ops += [_alterable(k, CONFIG_DELETE, None) for k in to_delete]
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=int(ConfigResourceType.TOPIC), resource_name=name, configs=ops
    )
    response = await broker.controller.incremental_alter_configs(
        IncrementalAlterConfigsRequest(resources=[resource]), INCREMENTAL_ALTER_CONFIGS_VERSION
    )
    result = only_result(response.responses, name)
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message)

    def applied(image: ClusterImage) -> bool:
        now = image.topic_configs(name)
        return all(now.get(k) == v for k, v in to_set.items()) and not set(to_delete) & set(now)

    await image_settles(broker, applied)
    return web.json_response(topic_json(broker, topic_of(broker, name)))


def _alterable(
    key: str, operation: int, value: str | None
) -> IncrementalAlterConfigsRequest.AlterableConfig:
    return IncrementalAlterConfigsRequest.AlterableConfig(
        name=key, config_operation=operation, value=value
    )


async def create_partitions(request: web.Request) -> web.Response:
    broker = broker_of(request)
    name = request.match_info["name"]
    topic_of(broker, name)
    count = (await json_object(request)).only("count").get_int("count", minimum=1)
    wanted = CreatePartitionsRequest.CreatePartitionsTopic(
        name=TopicName(name), count=count, assignments=None
    )
    response = await broker.controller.create_partitions(
        CreatePartitionsRequest(topics=[wanted], timeout_ms=int(IMAGE_WAIT_S * 1000)),
        CREATE_PARTITIONS_VERSION,
    )
    result = only_result(response.results, name)
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message)

    def grown(image: ClusterImage) -> bool:
        topic = image.topics.get(name)
        return topic is not None and len(topic.partitions) >= count

    await image_settles(broker, grown)
    return web.json_response(topic_json(broker, topic_of(broker, name)))
